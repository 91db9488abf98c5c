//! The blocking twins of [`crate::MultiLock`] and [`crate::RedLock`]: the async algorithm run
//! on the calling thread, which is the owner of every part.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{AsyncGuard, Held, Inner, Lock};
use crate::error::Result;
use crate::kit::Attempt;

impl AsyncGuard for crate::MultiGuard {
    fn release(self) -> impl Future<Output = Result<()>> {
        self.unlock()
    }
    fn detach(self) {
        // A composite guard has no detached form: release its parts as a drop would.
        drop(self);
    }
    fn is_lost(&self) -> bool {
        crate::MultiGuard::is_lost(self)
    }
}

/// The parts of a blocking composite lock: the blocking locks, whose clients' runtimes serve
/// them.
#[derive(Clone, Debug)]
struct Parts {
    locks: Vec<Lock>,
}

impl Parts {
    /// The locks, checked as the async composite `build` checks them.
    fn new<A>(
        locks: impl IntoIterator<Item = Lock>,
        build: impl FnOnce(Vec<crate::Lock>) -> Result<A>,
    ) -> Result<Parts> {
        let locks: Vec<Lock> = locks.into_iter().collect();
        build(locks.iter().map(|lock| lock.lock.clone()).collect())?;
        Ok(Parts { locks })
    }

    /// Runs `acquire` on the async composite bound to the calling thread (or each part's bound
    /// owner), on the first part's runtime: every client's connections and background work run
    /// on their own runtimes, so one thread can wait on all of them.
    fn acquire<A, F: Future<Output = Result<T>>, T>(
        &self,
        bind: impl FnOnce(Vec<crate::Lock>) -> Result<A>,
        acquire: impl FnOnce(A) -> F,
    ) -> Result<T> {
        // Never empty: `bind` (as `new`'s `build` did) refuses an empty list.
        let composite = bind(self.locks.iter().map(Lock::bound).collect())?;
        self.locks[0].client.block_on(acquire(composite))?
    }

    fn guard(&self, guard: crate::MultiGuard) -> MultiGuard {
        let clients = self.locks.iter().map(|lock| Arc::clone(&lock.client));
        MultiGuard {
            held: Held::new(guard, &self.locks[0].client),
            clients: clients.collect(),
        }
    }
}

/// The methods the blocking MultiLock and RedLock share; `$async` is the async type.
macro_rules! blocking_composite {
    ($ty:ident, $async:ident) => {
        impl $ty {
            #[doc = concat!("A blocking [`crate::", stringify!($async), "`] over `locks` (see [`crate::", stringify!($async), "::new`] for what it refuses). Sends nothing.")]
            ///
            /// ```no_run
            /// # fn demo(a: ferrisson::blocking::Client, b: ferrisson::blocking::Client, c: ferrisson::blocking::Client) -> ferrisson::Result<()> {
            #[doc = concat!("let lock = ferrisson::blocking::", stringify!($ty), "::new([a.lock(\"job\"), b.lock(\"job\"), c.lock(\"job\")])?;")]
            /// # Ok(()) }
            /// ```
            pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<$ty> {
                Ok($ty {
                    parts: Parts::new(locks, crate::$async::new)?,
                })
            }

            /// The locks, in the order they are taken.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($ty), ") {")]
            /// println!("{} locks", lock.locks().len());
            /// # }
            /// ```
            pub fn locks(&self) -> &[Lock] {
                &self.parts.locks
            }

            /// Blocks until acquired; watchdog lease (see
            #[doc = concat!("[`crate::", stringify!($async), "::lock`]).")]
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// lock.lock()?.unlock()?;
            /// # Ok(()) }
            /// ```
            pub fn lock(&self) -> Result<MultiGuard> {
                let guard = self.parts.acquire(crate::$async::new, |lock| async move {
                    lock.lock().await
                })?;
                Ok(self.parts.guard(guard))
            }

            /// Blocks until acquired; fixed `lease`, no watchdog (see
            #[doc = concat!("[`crate::", stringify!($async), "::lock_with_lease`]).")]
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10))?;
            /// # Ok(()) }
            /// ```
            pub fn lock_with_lease(&self, lease: Duration) -> Result<MultiGuard> {
                let guard = self.parts.acquire(crate::$async::new, |lock| async move {
                    lock.lock_with_lease(lease).await
                })?;
                Ok(self.parts.guard(guard))
            }

            /// One attempt per lock without waiting; watchdog lease.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// if let Some(guard) = lock.try_lock()?.acquired() { guard.unlock()?; }
            /// # Ok(()) }
            /// ```
            pub fn try_lock(&self) -> Result<Attempt<MultiGuard>> {
                self.try_lock_bounded(Duration::ZERO, None)
            }

            /// Waits at most `wait`; watchdog lease (see
            #[doc = concat!("[`crate::", stringify!($async), "::try_lock_within`]).")]
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// let attempt = lock.try_lock_within(std::time::Duration::from_secs(1))?;
            /// # Ok(()) }
            /// ```
            pub fn try_lock_within(&self, wait: Duration) -> Result<Attempt<MultiGuard>> {
                self.try_lock_bounded(wait, None)
            }

            /// Waits at most `wait`; fixed `lease`, no watchdog (see
            #[doc = concat!("[`crate::", stringify!($async), "::try_lock_within_with_lease`]).")]
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// use std::time::Duration;
            /// let attempt = lock.try_lock_within_with_lease(Duration::from_secs(1), Duration::from_secs(10))?;
            /// # Ok(()) }
            /// ```
            pub fn try_lock_within_with_lease(
                &self,
                wait: Duration,
                lease: Duration,
            ) -> Result<Attempt<MultiGuard>> {
                self.try_lock_bounded(wait, Some(lease))
            }


            fn try_lock_bounded(
                &self,
                wait: Duration,
                lease: Option<Duration>,
            ) -> Result<Attempt<MultiGuard>> {
                let attempt = self.parts.acquire(crate::$async::new, |lock| async move {
                    match lease {
                        Some(lease) => lock.try_lock_within_with_lease(wait, lease).await,
                        None => lock.try_lock_within(wait).await,
                    }
                })?;
                Ok(attempt.map(|guard| self.parts.guard(guard)))
            }
        }
    };
}

/// A blocking [`crate::MultiLock`]: held when every lock is. The owner of every part is the
/// calling thread (or each blocking [`Lock`]'s bound owner).
///
/// ```no_run
/// # fn demo(a: ferrisson::blocking::Client, b: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let both = ferrisson::blocking::MultiLock::new([a.lock("x"), b.lock("y")])?;
/// let guard = both.lock()?;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    parts: Parts,
}

blocking_composite!(MultiLock, MultiLock);

/// A blocking [`crate::RedLock`]: held when a majority of the locks is. The owner of every part
/// is the calling thread (or each blocking [`Lock`]'s bound owner).
///
/// ```no_run
/// # fn demo(a: ferrisson::blocking::Client, b: ferrisson::blocking::Client, c: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let red = ferrisson::blocking::RedLock::new([a.lock("job"), b.lock("job"), c.lock("job")])?;
/// if let Some(guard) = red.try_lock_within(std::time::Duration::from_secs(1))?.acquired() {
///     guard.unlock()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedLock {
    parts: Parts,
}

blocking_composite!(RedLock, RedLock);

/// A held blocking MultiLock or RedLock; released when dropped (in the background, without
/// blocking). See [`crate::MultiGuard`].
///
/// ```no_run
/// # fn demo(red: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
/// let guard = red.lock()?;
/// println!("{} parts, valid for {:?}", guard.parts(), guard.validity());
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[derive(Debug)]
pub struct MultiGuard {
    held: Held<crate::MultiGuard>,
    /// Keeps every part's client (and runtime) alive while the guard exists, so that a drop's
    /// releases are delivered.
    #[allow(dead_code)]
    clients: Vec<Arc<Inner>>,
}

impl MultiGuard {
    /// Releases every part now (see [`crate::MultiGuard::unlock`]).
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// multi.lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> Result<()> {
        self.held.unlock()
    }

    /// Whether the lock can no longer be counted on (see [`crate::MultiGuard::is_lost`]).
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// let guard = multi.lock()?;
    /// if guard.is_lost() { eprintln!("stop: a part is gone"); }
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Redlock's validity (see [`crate::MultiGuard::validity`]); `None` with the watchdog.
    ///
    /// ```no_run
    /// # fn demo(red: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
    /// let guard = red.lock_with_lease(std::time::Duration::from_secs(10))?;
    /// println!("{:?}", guard.validity());
    /// # Ok(()) }
    /// ```
    pub fn validity(&self) -> Option<Duration> {
        self.held.get().and_then(crate::MultiGuard::validity)
    }

    /// How many parts the guard holds.
    ///
    /// ```no_run
    /// # fn demo(red: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
    /// let guard = red.lock()?;
    /// assert!(guard.parts() >= 2);
    /// # Ok(()) }
    /// ```
    pub fn parts(&self) -> usize {
        self.held.get().map_or(0, |guard| guard.parts().len())
    }
}
