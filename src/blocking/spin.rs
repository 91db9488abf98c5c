//! The blocking twin of the spin lock ([`crate::SpinLock`]).

use std::future::Future;
use std::time::Duration;

use super::{Client, Guard, Held, Lock};
use crate::error::Result;
use crate::kit::Attempt;
use crate::lock::BackOff;
use crate::Owner;

impl Client {
    /// A blocking handle to the spin lock named `name` (see [`crate::Client::spin_lock`]).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let guard = client.spin_lock("jobs:7").lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn spin_lock(&self, name: impl Into<String>) -> SpinLock {
        let lock = self.lock(name);
        SpinLock {
            spin: self.inner.client.spin_lock(lock.name()),
            lock,
        }
    }
}

/// A blocking handle to a spin lock; see [`crate::SpinLock`] for the semantics (polling with
/// back-off, releases that publish nothing). The owner is the calling thread, or the explicit
/// owner bound with [`with_owner`](SpinLock::with_owner).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let lock = client.spin_lock("jobs:7");
/// if let Some(guard) = lock.try_lock_for(std::time::Duration::from_millis(200), None)?.acquired() {
///     guard.unlock()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SpinLock {
    /// The blocking reentrant lock of the same name and owner: the owner and the queries.
    lock: Lock,
    spin: crate::SpinLock,
}

impl SpinLock {
    /// Runs an operation of the async lock bound to this handle's owner.
    fn run<F: Future<Output = Result<T>>, T>(
        &self,
        operation: impl FnOnce(crate::SpinLock) -> F,
    ) -> Result<T> {
        let spin = self.spin.with_owner(self.owner());
        self.lock.client.block_on(operation(spin))?
    }

    fn guard(&self, guard: crate::SpinGuard) -> SpinGuard {
        SpinGuard {
            held: Held::new(guard, &self.lock.client),
        }
    }

    /// The lock's name (the Redis key of its hash).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.spin_lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.spin.name()
    }

    /// The same lock acting for `owner` instead of the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) {
    /// let shared = lock.with_owner(ferrisson::Owner::new());
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> SpinLock {
        SpinLock {
            lock: self.lock.with_owner(owner),
            spin: self.spin.clone(),
        }
    }

    /// The same lock, pausing by `backoff` between attempts (see
    /// [`crate::SpinLock::with_backoff`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// let steady = lock.with_backoff(ferrisson::BackOff::constant(std::time::Duration::from_millis(64))?);
    /// # Ok(()) }
    /// ```
    pub fn with_backoff(&self, backoff: BackOff) -> SpinLock {
        SpinLock {
            lock: self.lock.clone(),
            spin: self.spin.with_backoff(backoff),
        }
    }

    /// The owner this handle acts for: the bound owner, or the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) {
    /// let me = lock.owner();
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.lock.owner()
    }

    /// The blocking reentrant lock on the same hash and owner, for the queries
    /// (`is_locked`, `hold_count`, `remaining_ttl`, ...). Its `unlock` and `force_unlock`
    /// publish; this handle's do not.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// assert_eq!(lock.as_lock().hold_count()?, 1);
    /// # Ok(()) }
    /// ```
    pub fn as_lock(&self) -> &Lock {
        &self.lock
    }

    /// Blocks until the lock is acquired, polling; watchdog lease.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// lock.lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> Result<SpinGuard> {
        let guard = self.run(|lock| async move { lock.lock().await })?;
        Ok(self.guard(guard))
    }

    /// Blocks until the lock is acquired, polling; fixed `lease`, no watchdog.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn lock_with_lease(&self, lease: Duration) -> Result<SpinGuard> {
        let guard = self.run(|lock| async move { lock.lock_with_lease(lease).await })?;
        Ok(self.guard(guard))
    }

    /// One attempt without waiting; watchdog lease.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = lock.try_lock()?.acquired() { guard.unlock()?; }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self) -> Result<Attempt<SpinGuard>> {
        let attempt = self.run(|lock| async move { lock.try_lock().await })?;
        Ok(attempt.map(|guard| self.guard(guard)))
    }

    /// Polls at most `wait`; `lease` or the watchdog when `None`.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// let attempt = lock.try_lock_for(std::time::Duration::from_secs(1), None)?;
    /// # Ok(()) }
    /// ```
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<SpinGuard>> {
        let attempt = self.run(|lock| async move { lock.try_lock_for(wait, lease).await })?;
        Ok(attempt.map(|guard| self.guard(guard)))
    }

    /// Releases one hold of this handle's owner, publishing nothing (see
    /// [`crate::SpinLock::unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// lock.lock()?.detach();
    /// lock.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(&self) -> Result<()> {
        self.run(|lock| async move { lock.unlock().await })
    }

    /// Deletes the lock whoever holds it, publishing nothing (see
    /// [`crate::SpinLock::force_unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// let existed = lock.force_unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.lock.client.block_on(self.spin.force_unlock())?
    }
}

impl std::fmt::Debug for SpinLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::SpinLock")
            .field("name", &self.name())
            .field("owner", &self.lock.owner)
            .field("backoff", &self.spin.backoff())
            .finish()
    }
}

/// One hold of a spin lock taken through the blocking API; released when dropped (in the
/// background, without blocking), publishing nothing.
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::SpinGuard = lock.lock()?;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
pub type SpinGuard = Guard<crate::SpinLock>;
