//! The blocking twin of every lock primitive at once: [`Handle`] and [`Guard`] run the async
//! [`crate::Handle`]'s and [`crate::Guard`]'s operations on the client's runtime, with the
//! calling thread as owner. A primitive's own methods (a fenced lock's `token`) are at the end.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{Client, Held, Inner};
use crate::error::Result;
use crate::kit::{Acquisition, Attempt, BackOff, Protocol, RemainingTtl};
use crate::lock::{Fair, Fenced, NonReentrant, NonReentrantFair, Queued, Reentrant, Spin};
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
#[derive(Clone)]
pub struct Handle<P: Protocol> {
    pub(super) client: Arc<Inner>,
    pub(super) lock: crate::Handle<P>,
    pub(super) owner: Option<Owner>,
}

/// A blocking reentrant lock (see [`crate::Lock`]).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let lock: ferrisson::blocking::Lock = client.lock("orders:42");
/// let guard = lock.lock()?;
/// let again = lock.lock()?; // same thread: re-enters
/// assert_eq!(lock.hold_count()?, 2);
/// # Ok(()) }
/// ```
pub type Lock = Handle<Reentrant>;
/// A hold of a blocking reentrant lock (see [`crate::LockGuard`]).
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::LockGuard = lock.lock()?;
/// # Ok(()) }
/// ```
pub type LockGuard = Guard<Reentrant>;
/// A blocking fenced lock (see [`crate::FencedLock`]).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let guard = client.fenced_lock("orders:42").lock()?;
/// println!("token {}", guard.token());
/// # Ok(()) }
/// ```
pub type FencedLock = Handle<Fenced>;
/// A hold of a blocking fenced lock and its token (see [`crate::FencedGuard`]).
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::FencedGuard = lock.lock()?;
/// # Ok(()) }
/// ```
pub type FencedGuard = Guard<Fenced>;
/// A blocking fair lock (see [`crate::FairLock`]).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// client.fair_lock("orders:42").lock()?.unlock()?;
/// # Ok(()) }
/// ```
pub type FairLock = Handle<Fair>;
/// A hold of a blocking fair lock (see [`crate::FairGuard`]).
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::FairGuard = lock.lock()?;
/// # Ok(()) }
/// ```
pub type FairGuard = Guard<Fair>;
/// A blocking spin lock (see [`crate::SpinLock`]).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// client.spin_lock("jobs:7").lock()?.unlock()?;
/// # Ok(()) }
/// ```
pub type SpinLock = Handle<Spin>;
/// A hold of a blocking spin lock (see [`crate::SpinGuard`]).
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::SpinGuard = lock.lock()?;
/// # Ok(()) }
/// ```
pub type SpinGuard = Guard<Spin>;
/// A blocking non-reentrant lock (see [`crate::NonReentrantLock`]).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// client.non_reentrant_lock("orders:42").lock()?.unlock()?;
/// # Ok(()) }
/// ```
pub type NonReentrantLock = Handle<NonReentrant>;
/// A hold of a blocking non-reentrant lock (see [`crate::NonReentrantGuard`]).
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::NonReentrantLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::NonReentrantGuard = lock.lock()?;
/// # Ok(()) }
/// ```
pub type NonReentrantGuard = Guard<NonReentrant>;
/// A blocking non-reentrant fair lock (see [`crate::NonReentrantFairLock`]).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// client.non_reentrant_fair_lock("orders:42").lock()?.unlock()?;
/// # Ok(()) }
/// ```
pub type NonReentrantFairLock = Handle<NonReentrantFair>;
/// A hold of a blocking non-reentrant fair lock (see [`crate::NonReentrantFairGuard`]).
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::NonReentrantFairLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::NonReentrantFairGuard = lock.lock()?;
/// # Ok(()) }
/// ```
pub type NonReentrantFairGuard = Guard<NonReentrantFair>;

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
        Handle {
            client: Arc::clone(&self.inner),
            lock,
            owner: None,
        }
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

    /// A handle to the reentrant lock `name` (Redisson's `getLock`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let lock = client.lock("orders:42");
    /// # }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        self.handle(self.inner.client.lock(name))
    }

    /// A handle to the fenced lock `name` (Redisson's `getFencedLock`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let lock = client.fenced_lock("orders:42");
    /// # }
    /// ```
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        self.handle(self.inner.client.fenced_lock(name))
    }

    /// A handle to the fair lock `name` (Redisson's `getFairLock`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let lock = client.fair_lock("orders:42");
    /// # }
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        self.handle(self.inner.client.fair_lock(name))
    }

    /// A handle to the spin lock `name` (Redisson's `getSpinLock`), with the default back-off.
    /// Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let lock = client.spin_lock("jobs:7");
    /// # }
    /// ```
    pub fn spin_lock(&self, name: impl Into<String>) -> SpinLock {
        self.handle(self.inner.client.spin_lock(name))
    }

    /// A handle to the non-reentrant lock `name` (Redisson's `getNonReentrantLock`). Sends
    /// nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let lock = client.non_reentrant_lock("orders:42");
    /// # }
    /// ```
    pub fn non_reentrant_lock(&self, name: impl Into<String>) -> NonReentrantLock {
        self.handle(self.inner.client.non_reentrant_lock(name))
    }

    /// A handle to the non-reentrant fair lock `name` (Redisson's
    /// `getNonReentrantFairLock`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let lock = client.non_reentrant_fair_lock("orders:42");
    /// # }
    /// ```
    pub fn non_reentrant_fair_lock(&self, name: impl Into<String>) -> NonReentrantFairLock {
        self.handle(self.inner.client.non_reentrant_fair_lock(name))
    }
}

impl<P: Protocol> Handle<P> {
    /// The async lock acting for this handle's owner.
    pub(super) fn bound(&self) -> crate::Handle<P> {
        self.lock.with_owner(self.owner())
    }

    /// Runs an operation of the async lock bound to this handle's owner.
    fn run<F: Future<Output = Result<T>>, T>(
        &self,
        operation: impl FnOnce(crate::Handle<P>) -> F,
    ) -> Result<T> {
        self.client.block_on(operation(self.bound()))?
    }

    fn guard(&self, guard: crate::Guard<P>) -> Guard<P> {
        Guard {
            held: Held::new(guard, &self.client),
        }
    }

    /// The same lock as another primitive's handle, owner kept.
    fn with_lock<Q: Protocol>(&self, lock: crate::Handle<Q>) -> Handle<Q> {
        Handle {
            client: Arc::clone(&self.client),
            lock,
            owner: self.owner,
        }
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

    /// Blocks until the lock is acquired; watchdog lease (see [`crate::Handle::lock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> Result<Guard<P>> {
        let guard = self.run(|lock| async move { lock.lock().await })?;
        Ok(self.guard(guard))
    }

    /// Blocks until the lock is acquired; fixed `lease`, no watchdog (see
    /// [`crate::Handle::lock_with_lease`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn lock_with_lease(&self, lease: Duration) -> Result<Guard<P>> {
        let guard = self.run(|lock| async move { lock.lock_with_lease(lease).await })?;
        Ok(self.guard(guard))
    }

    /// One attempt without waiting; watchdog lease (see [`crate::Handle::try_lock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// if let Some(guard) = lock.try_lock()?.acquired() {
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self) -> Result<Attempt<Guard<P>>> {
        let attempt = self.run(|lock| async move { lock.try_lock().await })?;
        Ok(attempt.map(|guard| self.guard(guard)))
    }

    /// Waits at most `wait`; `lease`, or the watchdog when `None` (see
    /// [`crate::Handle::try_lock_for`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let attempt = lock.try_lock_for(std::time::Duration::from_secs(1), None)?;
    /// # Ok(()) }
    /// ```
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<Guard<P>>> {
        let attempt = self.run(|lock| async move { lock.try_lock_for(wait, lease).await })?;
        Ok(attempt.map(|guard| self.guard(guard)))
    }

    /// Releases one hold of this handle's owner without a guard (see
    /// [`crate::Handle::unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// lock.lock()?.detach();
    /// lock.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(&self) -> Result<()> {
        self.run(|lock| async move { lock.unlock().await })
    }

    /// Deletes the lock whoever holds it (see [`crate::Handle::force_unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let existed = lock.force_unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.run(|lock| async move { lock.force_unlock().await })
    }

    /// Whether anyone holds the lock (see [`crate::Handle::is_locked`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let locked = lock.is_locked()?;
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.run(|lock| async move { lock.is_locked().await })
    }

    /// Whether this handle's owner holds the lock (see
    /// [`crate::Handle::is_held_by_current_owner`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let _guard = lock.lock()?;
    /// assert!(lock.is_held_by_current_owner()?);
    /// # Ok(()) }
    /// ```
    pub fn is_held_by_current_owner(&self) -> Result<bool> {
        self.run(|lock| async move { lock.is_held_by_current_owner().await })
    }

    /// Whether `owner` holds the lock (see [`crate::Handle::is_held_by`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// assert!(!lock.is_held_by(ferrisson::Owner::new())?);
    /// # Ok(()) }
    /// ```
    pub fn is_held_by(&self, owner: Owner) -> Result<bool> {
        self.run(|lock| async move { lock.is_held_by(owner).await })
    }

    /// How many holds this handle's owner has (see [`crate::Handle::hold_count`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// assert_eq!(lock.hold_count()?, 0);
    /// # Ok(()) }
    /// ```
    pub fn hold_count(&self) -> Result<u64> {
        self.run(|lock| async move { lock.hold_count().await })
    }

    /// The lock's remaining time to live (see [`crate::Handle::remaining_ttl`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// println!("{:?}", lock.remaining_ttl()?);
    /// # Ok(()) }
    /// ```
    pub fn remaining_ttl(&self) -> Result<RemainingTtl> {
        self.run(|lock| async move { lock.remaining_ttl().await })
    }
}

impl<P: Protocol> std::fmt::Debug for Handle<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Handle")
            .field("lock", &self.lock)
            .field("owner", &self.owner)
            .finish()
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
        self.held.unlock_settled()
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
        self.held.guard.as_ref().map(crate::Guard::acquisition)
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
            .guard
            .as_ref()
            .map_or_else(Owner::current_thread, crate::Guard::owner)
    }
}

impl<P: Protocol> std::fmt::Debug for Guard<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Guard")
            .field("guard", &self.held.guard)
            .finish()
    }
}

impl FencedLock {
    /// The last token handed out (see [`crate::FencedLock::token`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// assert_eq!(lock.token()?, Some(guard.token()));
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> Result<Option<u64>> {
        self.run(|lock| async move { lock.token().await })
    }

    /// Deletes the lock and its token key (see [`crate::FencedLock::delete`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// lock.delete()?;
    /// # Ok(()) }
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.run(|lock| async move { lock.delete().await })
    }
}

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
        self.held
            .guard
            .as_ref()
            .map_or(0, crate::FencedGuard::token)
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

    /// Deletes the lock, its queue and its timeout set (see [`crate::FairLock::delete`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// lock.delete()?;
    /// # Ok(()) }
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.run(|lock| async move { lock.delete().await })
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

impl<P: Protocol> super::SettledGuard for crate::Guard<P> {
    fn release_settled(self) -> impl Future<Output = Result<()>> {
        self.unlock_settled()
    }
}
