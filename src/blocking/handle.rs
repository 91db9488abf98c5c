//! The blocking twin of every lock primitive at once: [`Handle`] and [`Guard`] run the async
//! [`crate::Handle`]'s and [`crate::Guard`]'s operations on the client's runtime, with the
//! calling thread as owner. A primitive's own methods (a fenced lock's `token`) are at the end.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{twins, wrap_in_held, Client, Held, Inner};
use crate::error::Result;
use crate::kit::{Acquisition, Attempt, BackOff, Protocol, RemainingTtl};
use crate::lock::{Fair, Fenced, NonReentrant, NonReentrantFair, Queued, Reentrant, Spin, Token};
use crate::Owner;

/// A blocking handle to one lock of the primitive `P`; see [`crate::Handle`] for the semantics of
/// each method. The owner is the calling **thread**, or the explicit owner bound with
/// [`with_owner`](Handle::with_owner). Users meet it by its primitives' names:
/// [`blocking::Lock`](Lock) is `Handle<Reentrant>`, and so on.
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let lock = client.lock("orders:42");
/// let guard = lock.lock()?;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Handle<P: Protocol> {
    pub(super) client: Arc<Inner>,
    pub(super) lock: crate::Handle<P>,
    pub(super) owner: Option<Owner>,
}

/// Names each primitive's blocking handle and guard, and gives [`Client`] the method that makes
/// the handle (the async client's method of the same name, run for the calling thread).
macro_rules! primitives {
    ($($make:ident: $lock:ident, $guard:ident = $p:ident, $java:literal;)*) => {$(
        #[doc = concat!("A blocking [`crate::", stringify!($lock), "`].\n\n```no_run\n",
            "# fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {\n",
            "let lock: ferrisson::blocking::", stringify!($lock), " = client.", stringify!($make),
            "(\"orders:42\");\nlock.lock()?.unlock()?;\n# Ok(()) }\n```")]
        pub type $lock = Handle<$p>;

        #[doc = concat!("A hold of a blocking [`crate::", stringify!($lock), "`] (see [`crate::",
            stringify!($guard), "`]).\n\n```no_run\n",
            "# fn demo(lock: ferrisson::blocking::", stringify!($lock), ") -> ferrisson::Result<()> {\n",
            "let guard: ferrisson::blocking::", stringify!($guard), " = lock.lock()?;\n# Ok(()) }\n```")]
        pub type $guard = Guard<$p>;

        impl Client {
            #[doc = concat!("A handle to the lock `name` (Redisson's `", $java,
                "`), as [`crate::Client::", stringify!($make), "`]. Sends nothing.\n\n```no_run\n",
                "# fn demo(client: ferrisson::blocking::Client) {\nlet lock = client.",
                stringify!($make), "(\"orders:42\");\n# }\n```")]
            pub fn $make(&self, name: impl Into<String>) -> $lock {
                self.handle(self.inner.client.$make(name))
            }
        }
    )*};
}

primitives! {
    lock: Lock, LockGuard = Reentrant, "getLock";
    fenced_lock: FencedLock, FencedGuard = Fenced, "getFencedLock";
    fair_lock: FairLock, FairGuard = Fair, "getFairLock";
    spin_lock: SpinLock, SpinGuard = Spin, "getSpinLock";
    non_reentrant_lock: NonReentrantLock, NonReentrantGuard = NonReentrant, "getNonReentrantLock";
    non_reentrant_fair_lock: NonReentrantFairLock, NonReentrantFairGuard = NonReentrantFair,
        "getNonReentrantFairLock";
    token_lock: TokenLock, TokenGuard = Token, "the peers' `SET NX PX` lock";
}

impl Client {
    /// The blocking twin of an async handle of this client, acting for the calling thread: how
    /// to reach any primitive from here.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let lock = client.handle(client.as_async().fair_lock("orders:42"));
    /// lock.lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn handle<P: Protocol>(&self, lock: crate::Handle<P>) -> Handle<P> {
        Handle::new(&self.inner, lock, None)
    }

    /// The async client this blocking client runs on (for [`Client::handle`]).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.as_async().id(), client.id());
    /// # }
    /// ```
    pub fn as_async(&self) -> &crate::Client {
        &self.inner.client
    }
}

impl<P: Protocol> Handle<P> {
    /// `lock` run on `client`'s runtime for `owner` (`None`: the calling thread).
    pub(super) fn new(client: &Arc<Inner>, lock: crate::Handle<P>, owner: Option<Owner>) -> Self {
        Handle {
            client: Arc::clone(client),
            lock,
            owner,
        }
    }

    /// The async lock acting for this handle's owner.
    pub(super) fn bound(&self) -> crate::Handle<P> {
        self.lock.with_owner(self.owner())
    }

    /// The same lock as another primitive's handle, owner kept.
    fn with_lock<Q: Protocol>(&self, lock: crate::Handle<Q>) -> Handle<Q> {
        Handle::new(&self.client, lock, self.owner)
    }

    /// The lock's name (its Redis key).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The same lock acting for `owner` instead of the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) {
    /// let owner = ferrisson::Owner::new();
    /// assert_eq!(lock.with_owner(owner).owner(), owner);
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> Handle<P> {
        Handle {
            owner: Some(owner),
            ..self.clone()
        }
    }

    /// The owner this handle acts for: the bound owner, or the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) {
    /// let me = lock.owner();
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.owner.unwrap_or_else(Owner::current_thread)
    }

    /// The blocking reentrant lock on the same hash and owner (see [`crate::Handle::as_lock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// let _guard = lock.lock()?;
    /// assert!(lock.as_lock().is_locked()?);
    /// # Ok(()) }
    /// ```
    pub fn as_lock(&self) -> Lock {
        self.with_lock(self.lock.as_lock())
    }

    twins! { lock: "Lock", "crate::Handle", on bound;
        /// Blocks until the lock is acquired; watchdog lease.
        fn lock() -> Guard<P> => wrap, "let guard = lock.lock()?;";
        /// Blocks until the lock is acquired; fixed `lease`, no watchdog.
        fn lock_with_lease(lease: Duration) -> Guard<P> => wrap,
            "let guard = lock.lock_with_lease(std::time::Duration::from_secs(10))?;";
        /// One attempt without waiting; watchdog lease.
        fn try_lock() -> Attempt<Guard<P>> => wrap,
            "if let Some(guard) = lock.try_lock()?.acquired() {\n    guard.unlock()?;\n}";
        /// Waits at most `wait`; watchdog lease.
        fn try_lock_within(wait: Duration) -> Attempt<Guard<P>> => wrap,
            "let attempt = lock.try_lock_within(std::time::Duration::from_secs(1))?;";
        /// Waits at most `wait`; fixed `lease`, no watchdog.
        fn try_lock_within_with_lease(wait: Duration, lease: Duration) -> Attempt<Guard<P>> => wrap,
            "let attempt = lock.try_lock_within_with_lease(\n    std::time::Duration::from_secs(1),\n    std::time::Duration::from_secs(10),\n)?;";
        /// Releases one hold of this handle's owner without a guard.
        fn unlock() -> (), "lock.lock()?.detach();\nlock.unlock()?;";
        /// Deletes the lock whoever holds it.
        fn force_unlock() -> bool, "let existed = lock.force_unlock()?;";
        /// Whether anyone holds the lock.
        fn is_locked() -> bool, "let locked = lock.is_locked()?;";
        /// Whether this handle's owner holds the lock.
        fn is_held_by_current_owner() -> bool,
            "let _guard = lock.lock()?;\nassert!(lock.is_held_by_current_owner()?);";
        /// Whether `owner` holds the lock.
        fn is_held_by(owner: Owner) -> bool, "assert!(!lock.is_held_by(ferrisson::Owner::new())?);";
        /// How many holds this handle's owner has.
        fn hold_count() -> u64, "assert_eq!(lock.hold_count()?, 0);";
        /// The lock's remaining time to live.
        fn remaining_ttl() -> RemainingTtl, "println!(\"{:?}\", lock.remaining_ttl()?);";
    }
}

/// One hold taken through the blocking API, released when dropped (in the background, without
/// blocking); see [`crate::Guard`]. The guard remembers its owner, so it may be released on
/// another thread.
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
/// let guard = lock.lock()?;
/// std::thread::spawn(move || guard.unlock()).join().expect("thread")?; // the guard keeps its owner
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[derive(Debug)]
pub struct Guard<P: Protocol> {
    held: Held<crate::Guard<P>>,
}

impl<P: Protocol> Guard<P> {
    /// Releases now: [`crate::Error::LeaseLost`] if the hold had been lost (see
    /// [`crate::Guard::unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// lock.lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> Result<()> {
        self.held.unlock()
    }

    /// Releases now, and settles a release of unknown outcome before answering (see
    /// [`crate::Guard::unlock_settled`]): `Ok` only when the hold is shown to have lasted
    /// until it was released.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// lock.lock()?.unlock_settled()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock_settled(self) -> Result<()> {
        self.held.finish(crate::Guard::unlock_settled)
    }

    /// Keeps the hold without a guard; release it later with the lock's `unlock` on the same
    /// thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// lock.lock()?.detach();
    /// lock.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn detach(self) {
        self.held.detach();
    }

    /// Whether the lease is known to be lost (see [`crate::Guard::lost`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// if guard.is_lost() { eprintln!("stop: the lock is gone"); }
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// How the acquisition went (wait time, attempts, what ended the wait); `None` once
    /// released.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// println!("{:?}", lock.lock()?.acquisition());
    /// # Ok(()) }
    /// ```
    pub fn acquisition(&self) -> Option<&Acquisition> {
        self.held.get().map(crate::Guard::acquisition)
    }

    /// The owner of this hold.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// assert_eq!(guard.owner(), lock.owner());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> Owner {
        self.held
            .get()
            .map_or_else(Owner::current_thread, crate::Guard::owner)
    }
}

impl FencedLock {
    twins! { lock: "FencedLock", "crate::FencedLock", on bound;
        /// The last token handed out.
        fn token() -> Option<u64>, "let guard = lock.lock()?;\nassert_eq!(lock.token()?, Some(guard.token()));";
        /// Deletes the lock and its token key.
        fn delete() -> bool, "lock.delete()?;";
    }
}

wrap_in_held!(crate::Guard<P> => Guard<P: Protocol>);

impl FencedGuard {
    /// The fencing token this acquisition took (see [`crate::FencedGuard::token`]); 0 once
    /// released.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// println!("token {}", lock.lock()?.token());
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> u64 {
        self.held.get().map_or(0, crate::FencedGuard::token)
    }
}

/// The fair lock's own methods, for every lock on its queue.
impl<Q: Queued + Protocol> Handle<Q> {
    /// The same lock with another wait time for unbounded acquires (see
    /// [`crate::FairLock::with_wait_timeout`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// let lock = lock.with_wait_timeout(std::time::Duration::from_secs(60))?;
    /// assert_eq!(lock.wait_timeout(), std::time::Duration::from_secs(60));
    /// # Ok(()) }
    /// ```
    pub fn with_wait_timeout(&self, timeout: Duration) -> Result<Handle<Q>> {
        Ok(self.with_lock(self.lock.with_wait_timeout(timeout)?))
    }

    /// The wait time of unbounded acquires (see [`crate::FairLock::wait_timeout`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) {
    /// println!("{:?}", lock.wait_timeout());
    /// # }
    /// ```
    pub fn wait_timeout(&self) -> Duration {
        self.lock.wait_timeout()
    }

    twins! { lock: "FairLock", "crate::FairLock", on bound;
        /// Deletes the lock, its queue and its timeout set.
        fn delete() -> bool, "lock.delete()?;";
    }
}

impl SpinLock {
    /// The same lock, waiting with `backoff` between attempts (see
    /// [`crate::SpinLock::with_backoff`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// let steady = lock.with_backoff(ferrisson::BackOff::constant(std::time::Duration::from_millis(64))?);
    /// # Ok(()) }
    /// ```
    pub fn with_backoff(&self, backoff: BackOff) -> SpinLock {
        self.with_lock(self.lock.with_backoff(backoff))
    }

    /// The back-off this handle waits with.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) {
    /// assert_eq!(lock.backoff(), ferrisson::BackOff::default());
    /// # }
    /// ```
    pub fn backoff(&self) -> BackOff {
        self.lock.backoff()
    }
}

impl TokenLock {
    /// The same lock, polling with `backoff` where the server sends no keyspace events (see
    /// [`crate::TokenLock::with_backoff`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::TokenLock) -> ferrisson::Result<()> {
    /// let steady = lock.with_backoff(ferrisson::BackOff::constant(std::time::Duration::from_millis(100))?);
    /// # Ok(()) }
    /// ```
    pub fn with_backoff(&self, backoff: BackOff) -> TokenLock {
        self.with_lock(self.lock.with_backoff(backoff))
    }

    /// The value this handle's owner writes under the key while it holds the lock (see
    /// [`crate::TokenLock::token`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::TokenLock) {
    /// println!("{}", lock.token());
    /// # }
    /// ```
    pub fn token(&self) -> String {
        self.bound().token()
    }
}

impl<P: Protocol> super::AsyncGuard for crate::Guard<P> {
    fn release(self) -> impl Future<Output = Result<()>> {
        self.unlock()
    }
    fn detach(self) {
        crate::Guard::detach(self);
    }
    fn is_lost(&self) -> bool {
        crate::Guard::is_lost(self)
    }
}
