//! The blocking twin of the shared guard [`crate::Guard`] (the spin lock's, the non-reentrant
//! lock's and the fair lock's).

use std::future::Future;

use super::{AsyncGuard, Held, SettledGuard};
use crate::error::Result;
use crate::kit::Acquisition;

/// One hold of a lock of type `L` taken through the blocking API, released when dropped (in the
/// background, without blocking): [`SpinGuard`](super::SpinGuard) and
/// [`NonReentrantGuard`](super::NonReentrantGuard), [`FairGuard`](super::FairGuard). The guard remembers its owner, so it may be
/// released on another thread.
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
/// let guard = lock.lock()?;
/// std::thread::spawn(move || guard.unlock()).join().expect("thread")?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct Guard<L> {
    pub(super) held: Held<crate::Guard<L>>,
}

impl<L> Guard<L> {
    /// Releases now: [`crate::Error::LeaseLost`] if the hold had been lost (see
    /// [`crate::Guard::unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// lock.lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> Result<()> {
        self.held.unlock()
    }

    /// Releases now, and settles a release of unknown outcome before answering (see
    /// [`crate::Guard::unlock_settled`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
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
    /// # fn demo(lock: ferrisson::blocking::NonReentrantLock) -> ferrisson::Result<()> {
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
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// assert!(!lock.lock()?.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// How the acquisition went (wait time, attempts, what ended the wait); `None` once
    /// released.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::SpinLock) -> ferrisson::Result<()> {
    /// println!("{:?}", lock.lock()?.acquisition());
    /// # Ok(()) }
    /// ```
    pub fn acquisition(&self) -> Option<&Acquisition> {
        self.held.guard.as_ref().map(crate::Guard::acquisition)
    }
}

impl<L: std::fmt::Debug> std::fmt::Debug for Guard<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Guard")
            .field("guard", &self.held.guard)
            .finish()
    }
}

impl<L> SettledGuard for crate::Guard<L> {
    fn release_settled(self) -> impl Future<Output = Result<()>> {
        self.unlock_settled()
    }
}

impl<L> AsyncGuard for crate::Guard<L> {
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
