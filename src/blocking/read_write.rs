//! The blocking twin of the read-write lock ([`crate::ReadWriteLock`]): the owner is the calling
//! thread, or an explicit owner.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{AsyncGuard, Client, Held, Inner, SettledGuard};
use crate::error::Result;
use crate::kit::{Acquisition, Attempt};
use crate::Owner;

impl Client {
    /// A handle to the read-write lock `name` (Redisson's `getReadWriteLock`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let rw = client.read_write_lock("catalog");
    /// let guard = rw.read_lock().lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock {
            client: Arc::clone(&self.inner),
            rw: self.inner.client.read_write_lock(name),
            owner: None,
        }
    }
}

/// A blocking handle to a read-write lock; see [`crate::ReadWriteLock`] for the semantics. The
/// owner is the calling thread, or the explicit owner bound with
/// [`with_owner`](ReadWriteLock::with_owner).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let rw = client.read_write_lock("catalog");
/// let writing = rw.write_lock().lock()?;
/// let reading = rw.read_lock().lock()?; // the writer may read (downgrade)
/// writing.unlock()?;
/// reading.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    client: Arc<Inner>,
    rw: crate::ReadWriteLock,
    owner: Option<Owner>,
}

impl ReadWriteLock {
    /// The lock's name (the Redis key of its hash).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.read_write_lock("catalog").name(), "catalog");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.rw.name()
    }

    /// The same lock acting for `owner` instead of the calling thread.
    ///
    /// ```no_run
    /// # fn demo(rw: ferrisson::blocking::ReadWriteLock) {
    /// let owner = ferrisson::Owner::new();
    /// assert_eq!(rw.with_owner(owner).owner(), owner);
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> ReadWriteLock {
        ReadWriteLock {
            owner: Some(owner),
            ..self.clone()
        }
    }

    /// The owner this handle acts for: the bound owner, or the calling thread.
    ///
    /// ```no_run
    /// # fn demo(rw: ferrisson::blocking::ReadWriteLock) {
    /// let me = rw.owner();
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.owner.unwrap_or_else(Owner::current_thread)
    }

    /// The read side.
    ///
    /// ```no_run
    /// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
    /// rw.read_lock().lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn read_lock(&self) -> ReadLock {
        ReadLock {
            client: Arc::clone(&self.client),
            lock: self.rw.read_lock(),
            owner: self.owner,
        }
    }

    /// The write side.
    ///
    /// ```no_run
    /// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
    /// rw.write_lock().lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn write_lock(&self) -> WriteLock {
        WriteLock {
            client: Arc::clone(&self.client),
            lock: self.rw.write_lock(),
            owner: self.owner,
        }
    }
}

impl std::fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::ReadWriteLock")
            .field("name", &self.name())
            .field("owner", &self.owner)
            .finish()
    }
}

/// The blocking read side of a read-write lock; see [`crate::ReadLock`].
///
/// ```no_run
/// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
/// let read = rw.read_lock();
/// let guard = read.lock()?;
/// assert!(read.is_locked()?);
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadLock {
    client: Arc<Inner>,
    lock: crate::ReadLock,
    owner: Option<Owner>,
}

/// The blocking write side of a read-write lock; see [`crate::WriteLock`]. A thread that holds
/// only read holds gets [`Error::UpgradeRefused`](crate::Error::UpgradeRefused) from
/// [`lock`](WriteLock::lock) instead of waiting for itself.
///
/// ```no_run
/// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
/// let write = rw.write_lock();
/// let guard = write.lock()?;
/// assert!(write.is_locked()?);
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WriteLock {
    client: Arc<Inner>,
    lock: crate::WriteLock,
    owner: Option<Owner>,
}

/// One read hold taken through the blocking API; released when dropped (in the background).
///
/// ```no_run
/// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
/// let guard = rw.read_lock().lock()?;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct ReadGuard {
    held: Held<crate::ReadGuard>,
}

/// One write hold taken through the blocking API; released when dropped (in the background).
///
/// ```no_run
/// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
/// let guard = rw.write_lock().lock()?;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct WriteGuard {
    held: Held<crate::WriteGuard>,
}

/// What both blocking sides and guards share (`$getter`: `read_lock` or `write_lock`).
macro_rules! blocking_side {
    ($Lock:ident, $Guard:ident, $getter:literal) => {
        impl $Lock {
            /// The async side acting for this handle's owner.
            fn bound(&self) -> crate::$Lock {
                self.lock.with_owner(self.owner())
            }

            /// Runs `call` on the async side bound to this handle's owner.
            fn run<F: Future>(&self, call: impl FnOnce(crate::$Lock) -> F) -> Result<F::Output> {
                self.client.block_on(call(self.bound()))
            }

            fn guard(&self, guard: crate::$Guard) -> $Guard {
                $Guard {
                    held: Held::new(guard, &self.client),
                }
            }

            /// The lock's name (the Redis key of its hash).
            ///
            #[doc = concat!("```no_run\n# fn demo(client: ferrisson::blocking::Client) {\nassert_eq!(client.read_write_lock(\"a\").", $getter, "().name(), \"a\");\n# }\n```")]
            pub fn name(&self) -> &str {
                self.lock.name()
            }

            /// The same side acting for `owner` instead of the calling thread.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) {\nlet owner = ferrisson::Owner::new();\nassert_eq!(rw.", $getter, "().with_owner(owner).owner(), owner);\n# }\n```")]
            pub fn with_owner(&self, owner: Owner) -> $Lock {
                $Lock {
                    owner: Some(owner),
                    ..self.clone()
                }
            }

            /// The owner this handle acts for: the bound owner, or the calling thread.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) {\nlet me = rw.", $getter, "().owner();\n# }\n```")]
            pub fn owner(&self) -> Owner {
                self.owner.unwrap_or_else(Owner::current_thread)
            }

            #[doc = concat!("Blocks until acquired; watchdog lease (see [`crate::", stringify!($Lock), "::lock`]).")]
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nlet guard = rw.", $getter, "().lock()?;\n# Ok(()) }\n```")]
            pub fn lock(&self) -> Result<$Guard> {
                self.run(|lock| async move { lock.lock().await })?
                    .map(|guard| self.guard(guard))
            }

            /// Blocks until acquired; fixed `lease`, no watchdog.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nlet guard = rw.", $getter, "().lock_with_lease(std::time::Duration::from_secs(10))?;\n# Ok(()) }\n```")]
            pub fn lock_with_lease(&self, lease: Duration) -> Result<$Guard> {
                self.run(|lock| async move { lock.lock_with_lease(lease).await })?
                    .map(|guard| self.guard(guard))
            }

            /// One attempt without waiting; watchdog lease.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nif let Some(guard) = rw.", $getter, "().try_lock()?.acquired() { guard.unlock()?; }\n# Ok(()) }\n```")]
            pub fn try_lock(&self) -> Result<Attempt<$Guard>> {
                let attempt = self.run(|lock| async move { lock.try_lock().await })??;
                Ok(attempt.map(|guard| self.guard(guard)))
            }

            /// Waits at most `wait`; `lease` or the watchdog when `None`.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nlet attempt = rw.", $getter, "().try_lock_for(std::time::Duration::from_secs(1), None)?;\n# Ok(()) }\n```")]
            pub fn try_lock_for(
                &self,
                wait: Duration,
                lease: Option<Duration>,
            ) -> Result<Attempt<$Guard>> {
                let attempt =
                    self.run(|lock| async move { lock.try_lock_for(wait, lease).await })??;
                Ok(attempt.map(|guard| self.guard(guard)))
            }

            /// Releases one hold of this handle's owner on this side without a guard;
            /// [`Error::NotHeld`](crate::Error::NotHeld) when it holds none.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nrw.", $getter, "().lock()?.detach();\nrw.", $getter, "().unlock()?;\n# Ok(()) }\n```")]
            pub fn unlock(&self) -> Result<()> {
                self.run(|lock| async move { lock.unlock().await })?
            }

            /// Deletes the lock whoever holds it while it is in this side's mode; whether it did.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nrw.", $getter, "().force_unlock()?;\n# Ok(()) }\n```")]
            pub fn force_unlock(&self) -> Result<bool> {
                self.run(|lock| async move { lock.force_unlock().await })?
            }

            #[doc = concat!("Whether this side is held (see [`crate::", stringify!($Lock), "::is_locked`]).")]
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nlet locked = rw.", $getter, "().is_locked()?;\n# Ok(()) }\n```")]
            pub fn is_locked(&self) -> Result<bool> {
                self.run(|lock| async move { lock.is_locked().await })?
            }

            /// Whether this handle's owner (by default the calling thread) holds this side.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nlet mine = rw.", $getter, "().is_held_by_current_owner()?;\n# Ok(()) }\n```")]
            pub fn is_held_by_current_owner(&self) -> Result<bool> {
                self.run(|lock| async move { lock.is_held_by_current_owner().await })?
            }

            /// How many holds of this side this handle's owner has.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nassert_eq!(rw.", $getter, "().hold_count()?, 0);\n# Ok(()) }\n```")]
            pub fn hold_count(&self) -> Result<u64> {
                self.run(|lock| async move { lock.hold_count().await })?
            }
        }

        impl std::fmt::Debug for $Lock {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(concat!("blocking::", stringify!($Lock)))
                    .field("name", &self.name())
                    .field("owner", &self.owner)
                    .finish()
            }
        }

        impl $Guard {
            /// Releases now: [`Error::LeaseLost`](crate::Error::LeaseLost) if the hold had been
            /// lost.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nrw.", $getter, "().lock()?.unlock()?;\n# Ok(()) }\n```")]
            pub fn unlock(self) -> Result<()> {
                self.held.unlock()
            }

            /// Releases now, and settles a release of unknown outcome before answering (see
            /// the async guard's `unlock_settled`).
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nrw.", $getter, "().lock()?.unlock_settled()?;\n# Ok(()) }\n```")]
            pub fn unlock_settled(self) -> Result<()> {
                self.held.unlock_settled()
            }

            /// Keeps the hold without a guard; release it later with the side's `unlock` on
            /// the same thread.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nrw.", $getter, "().lock()?.detach();\nrw.", $getter, "().unlock()?;\n# Ok(()) }\n```")]
            pub fn detach(self) {
                self.held.detach();
            }

            /// Whether the lease is known to be lost.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nlet guard = rw.", $getter, "().lock()?;\nif guard.is_lost() { eprintln!(\"stop\"); }\n# Ok(()) }\n```")]
            pub fn is_lost(&self) -> bool {
                self.held.is_lost()
            }

            /// How the acquisition went (wait time, what woke it); `None` once released.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {\nprintln!(\"{:?}\", rw.", $getter, "().lock()?.acquisition());\n# Ok(()) }\n```")]
            pub fn acquisition(&self) -> Option<&Acquisition> {
                self.held.guard.as_ref().map(|guard| guard.acquisition())
            }
        }

        impl std::fmt::Debug for $Guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(concat!("blocking::", stringify!($Guard)))
                    .field("guard", &self.held.guard)
                    .finish()
            }
        }

        impl SettledGuard for crate::$Guard {
            fn release_settled(self) -> impl Future<Output = Result<()>> {
                self.unlock_settled()
            }
        }

        impl AsyncGuard for crate::$Guard {
            fn release(self) -> impl Future<Output = Result<()>> {
                self.unlock()
            }
            fn detach(self) {
                crate::$Guard::detach(self);
            }
            fn is_lost(&self) -> bool {
                crate::$Guard::is_lost(self)
            }
        }
    };
}

blocking_side!(ReadLock, ReadGuard, "read_lock");
blocking_side!(WriteLock, WriteGuard, "write_lock");
