//! The blocking twin of the non-reentrant lock ([`crate::NonReentrantLock`]).

use super::twin::twin_methods;
use super::{Client, Guard, Lock};

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
            inner: self.inner.client.non_reentrant_lock(lock.name()),
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
/// let guard = lock.lock()?;
/// assert!(matches!(lock.lock(), Err(ferrisson::Error::AlreadyHeld { .. })));
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NonReentrantLock {
    /// The blocking reentrant lock of the same name and owner: the owner and the queries.
    lock: Lock,
    inner: crate::NonReentrantLock,
}

twin_methods!(NonReentrantLock, NonReentrantLock);

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
