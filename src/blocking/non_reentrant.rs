//! The blocking twin of the non-reentrant lock ([`crate::NonReentrantLock`]).

use std::future::Future;
use std::time::Duration;

use super::{Client, Guard, Held, Lock};
use crate::error::Result;
use crate::kit::Attempt;
use crate::Owner;

impl Client {
    /// A blocking handle to the non-reentrant lock named `name` (see
    /// [`crate::Client::non_reentrant_lock`]).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let guard = client.non_reentrant_lock("orders:42").lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn non_reentrant_lock(&self, name: impl Into<String>) -> NonReentrantLock {
        let lock = self.lock(name);
        NonReentrantLock {
            nr: self.inner.client.non_reentrant_lock(lock.name()),
            lock,
        }
    }
}

/// A blocking handle to a non-reentrant lock; see [`crate::NonReentrantLock`] for the semantics
/// (a second acquire by the holding thread fails with [`crate::Error::AlreadyHeld`]). The owner
/// is the calling thread, or the explicit owner bound with
/// [`with_owner`](NonReentrantLock::with_owner).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let lock = client.non_reentrant_lock("orders:42");
/// if let Some(guard) = lock.try_lock_for(std::time::Duration::from_millis(200), None)?.acquired() {
///     guard.unlock()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NonReentrantLock {
    /// The blocking reentrant lock of the same name and owner: the owner and the queries.
    lock: Lock,
    nr: crate::NonReentrantLock,
}

impl NonReentrantLock {
    /// Runs an operation of the async lock bound to this handle's owner.
    fn run<F: Future<Output = Result<T>>, T>(
        &self,
        operation: impl FnOnce(crate::NonReentrantLock) -> F,
    ) -> Result<T> {
        let nr = self.nr.with_owner(self.owner());
        self.lock.client.block_on(operation(nr))?
    }

    fn guard(&self, guard: crate::NonReentrantGuard) -> NonReentrantGuard {
        NonReentrantGuard {
            held: Held::new(guard, &self.lock.client),
        }
    }

    /// The lock's name (the Redis key of its hash).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.non_reentrant_lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.nr.name()
    }

    /// The same lock acting for `owner` instead of the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::NonReentrantLock) {
    /// let shared = lock.with_owner(ferrisson::Owner::new());
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> NonReentrantLock {
        NonReentrantLock {
            lock: self.lock.with_owner(owner),
            nr: self.nr.clone(),
        }
    }

    /// The owner this handle acts for: the bound owner, or the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::NonReentrantLock) {
    /// let me = lock.owner();
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.lock.owner()
    }

    /// The blocking reentrant lock on the same hash and owner, for the queries
    /// (`is_locked`, `hold_count`, `remaining_ttl`, ...).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::NonReentrantLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// assert_eq!(lock.as_lock().hold_count()?, 1);
    /// # Ok(()) }
    /// ```
    pub fn as_lock(&self) -> &Lock {
        &self.lock
    }

    /// Blocks until the lock is acquired; watchdog lease. [`crate::Error::AlreadyHeld`] if
    /// this owner holds it already.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::NonReentrantLock) -> ferrisson::Result<()> {
    /// lock.lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> Result<NonReentrantGuard> {
        let guard = self.run(|lock| async move { lock.lock().await })?;
        Ok(self.guard(guard))
    }

    /// Blocks until the lock is acquired; fixed `lease`, no watchdog.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::NonReentrantLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn lock_with_lease(&self, lease: Duration) -> Result<NonReentrantGuard> {
        let guard = self.run(|lock| async move { lock.lock_with_lease(lease).await })?;
        Ok(self.guard(guard))
    }

    /// One attempt without waiting; watchdog lease.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::NonReentrantLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = lock.try_lock()?.acquired() { guard.unlock()?; }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self) -> Result<Attempt<NonReentrantGuard>> {
        let attempt = self.run(|lock| async move { lock.try_lock().await })?;
        Ok(attempt.map(|guard| self.guard(guard)))
    }

    /// Waits at most `wait`; `lease` or the watchdog when `None`.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::NonReentrantLock) -> ferrisson::Result<()> {
    /// let attempt = lock.try_lock_for(std::time::Duration::from_secs(1), None)?;
    /// # Ok(()) }
    /// ```
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<NonReentrantGuard>> {
        let attempt = self.run(|lock| async move { lock.try_lock_for(wait, lease).await })?;
        Ok(attempt.map(|guard| self.guard(guard)))
    }

    /// Releases this handle's owner's hold (see [`crate::NonReentrantLock::unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::NonReentrantLock) -> ferrisson::Result<()> {
    /// lock.lock()?.detach();
    /// lock.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(&self) -> Result<()> {
        self.run(|lock| async move { lock.unlock().await })
    }

    /// Deletes the lock whoever holds it and wakes its waiters (see
    /// [`crate::NonReentrantLock::force_unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::NonReentrantLock) -> ferrisson::Result<()> {
    /// let existed = lock.force_unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.lock.client.block_on(self.nr.force_unlock())?
    }
}

impl std::fmt::Debug for NonReentrantLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::NonReentrantLock")
            .field("name", &self.name())
            .field("owner", &self.lock.owner)
            .finish()
    }
}

/// The hold of a non-reentrant lock taken through the blocking API; released when dropped (in
/// the background, without blocking).
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::NonReentrantLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::NonReentrantGuard = lock.lock()?;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
pub type NonReentrantGuard = Guard<crate::NonReentrantLock>;
