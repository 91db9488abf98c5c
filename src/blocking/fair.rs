//! The blocking twin of the fair lock ([`crate::FairLock`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{Client, Held, Inner};
use crate::error::Result;
use crate::kit::Attempt;
use crate::lock::RemainingTtl;
use crate::Owner;

impl Client {
    /// A handle to the fair lock `name` (Redisson's `getFairLock`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let lock = client.fair_lock("orders:42");
    /// # }
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock {
            client: Arc::clone(&self.inner),
            fair: self.inner.client.fair_lock(name),
            owner: None,
        }
    }
}

/// A blocking handle to a fair lock; see [`crate::FairLock`] for the semantics. The owner is the
/// calling thread, or the explicit owner bound with [`with_owner`](FairLock::with_owner).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let lock = client.fair_lock("orders:42");
/// let guard = lock.lock()?; // in turn, behind earlier waiters
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    client: Arc<Inner>,
    fair: crate::FairLock,
    owner: Option<Owner>,
}

impl FairLock {
    /// The async lock acting for this handle's owner.
    fn bound(&self) -> crate::FairLock {
        self.fair.with_owner(self.owner())
    }

    /// Runs `operation` on the bound async lock on this handle's runtime.
    fn run<F: Future<Output = Result<T>>, T>(
        &self,
        operation: impl FnOnce(crate::FairLock) -> F,
    ) -> Result<T> {
        self.client.block_on(operation(self.bound()))?
    }

    fn guard(&self, guard: crate::FairGuard) -> FairGuard {
        FairGuard {
            held: Held::new(guard, &self.client),
        }
    }

    /// The lock's name (the Redis key of its hash).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.fair_lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.fair.name()
    }

    /// The same lock acting for `owner` instead of the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) {
    /// let shared = lock.with_owner(ferrisson::Owner::new());
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> FairLock {
        FairLock {
            client: Arc::clone(&self.client),
            fair: self.fair.clone(),
            owner: Some(owner),
        }
    }

    /// The owner this handle acts for: the bound owner, or the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) {
    /// let me = lock.owner();
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.owner.unwrap_or_else(Owner::current_thread)
    }

    /// The same lock with another wait time for unbounded acquires (see
    /// [`crate::FairLock::with_wait_timeout`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// let lock = lock.with_wait_timeout(std::time::Duration::from_secs(60))?;
    /// # Ok(()) }
    /// ```
    pub fn with_wait_timeout(&self, timeout: Duration) -> Result<FairLock> {
        Ok(FairLock {
            client: Arc::clone(&self.client),
            fair: self.fair.with_wait_timeout(timeout)?,
            owner: self.owner,
        })
    }

    /// Blocks until the lock is acquired in its turn; watchdog lease.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> Result<FairGuard> {
        let guard = self.run(|lock| async move { lock.lock().await })?;
        Ok(self.guard(guard))
    }

    /// Blocks until the lock is acquired in its turn; fixed `lease`, no watchdog.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn lock_with_lease(&self, lease: Duration) -> Result<FairGuard> {
        let guard = self.run(|lock| async move { lock.lock_with_lease(lease).await })?;
        Ok(self.guard(guard))
    }

    /// One attempt without waiting or queueing; watchdog lease.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = lock.try_lock()?.acquired() { guard.unlock()?; }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self) -> Result<Attempt<FairGuard>> {
        let attempt = self.run(|lock| async move { lock.try_lock().await })?;
        Ok(attempt.map(|guard| self.guard(guard)))
    }

    /// Queues and waits at most `wait`; `lease` or the watchdog when `None`. Leaves the queue
    /// when the wait runs out.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// let attempt = lock.try_lock_for(std::time::Duration::from_secs(1), None)?;
    /// # Ok(()) }
    /// ```
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<FairGuard>> {
        let attempt = self.run(|lock| async move { lock.try_lock_for(wait, lease).await })?;
        Ok(attempt.map(|guard| self.guard(guard)))
    }

    /// Releases one hold of this handle's owner without a guard (see
    /// [`crate::FairLock::unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// lock.lock()?.detach();
    /// lock.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(&self) -> Result<()> {
        self.run(|lock| async move { lock.unlock().await })
    }

    /// Deletes the lock whoever holds it and tells the queue's head (see
    /// [`crate::FairLock::force_unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// let existed = lock.force_unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.run(|lock| async move { lock.force_unlock().await })
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

    /// Whether anyone holds the lock.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// let locked = lock.is_locked()?;
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.run(|lock| async move { lock.is_locked().await })
    }

    /// Whether this handle's owner holds the lock.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// let mine = lock.is_held_by_current_owner()?;
    /// # Ok(()) }
    /// ```
    pub fn is_held_by_current_owner(&self) -> Result<bool> {
        self.run(|lock| async move { lock.is_held_by_current_owner().await })
    }

    /// How many holds this handle's owner has.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// let holds = lock.hold_count()?;
    /// # Ok(()) }
    /// ```
    pub fn hold_count(&self) -> Result<u64> {
        self.run(|lock| async move { lock.hold_count().await })
    }

    /// The lock's remaining time to live.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
    /// println!("{:?}", lock.remaining_ttl()?);
    /// # Ok(()) }
    /// ```
    pub fn remaining_ttl(&self) -> Result<RemainingTtl> {
        self.run(|lock| async move { lock.remaining_ttl().await })
    }
}

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::FairLock")
            .field("name", &self.name())
            .field("owner", &self.owner)
            .finish()
    }
}

/// One hold of a fair lock taken through the blocking API; released when dropped (in the
/// background, without blocking). The shared blocking [`Guard`](super::Guard).
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::FairLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::FairGuard = lock.lock()?;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
pub type FairGuard = super::Guard<crate::FairLock>;
