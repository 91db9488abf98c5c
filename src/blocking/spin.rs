//! The blocking twin of the spin lock ([`crate::SpinLock`]).

use super::twin::twin_methods;
use super::{Client, Guard, Lock};
use crate::lock::BackOff;

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
            inner: self.inner.client.spin_lock(lock.name()),
            lock,
        }
    }
}

/// A blocking handle to a spin lock; see [`crate::SpinLock`] for the semantics (polling with
/// back-off; releases, [`unlock`](SpinLock::unlock) and [`force_unlock`](SpinLock::force_unlock)
/// included, publish nothing). The owner is the calling thread, or the explicit owner bound with
/// [`with_owner`](SpinLock::with_owner).
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
    /// The blocking reentrant lock of the same name and owner: the owner and the queries (its
    /// own `unlock` and `force_unlock` publish; this handle's do not).
    lock: Lock,
    inner: crate::SpinLock,
}

twin_methods!(SpinLock, SpinLock);

impl SpinLock {
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
            inner: self.inner.with_backoff(backoff),
        }
    }
}

impl std::fmt::Debug for SpinLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::SpinLock")
            .field("name", &self.name())
            .field("owner", &self.lock.owner)
            .field("backoff", &self.inner.backoff())
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
