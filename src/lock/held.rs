//! The guard shared by the primitives on the reentrant lock's hash that add nothing to a hold
//! ([`SpinGuard`](crate::SpinGuard), [`NonReentrantGuard`](crate::NonReentrantGuard),
//! [`FairGuard`](crate::FairGuard)): a lock
//! handle bound to the holding owner, and the kit's [`Hold`], which knows its release script.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::kit::hold::Hold;
use crate::kit::Acquisition;

/// One hold of a lock of type `L`, released when dropped (in the background): the guard of
/// [`SpinLock`](crate::SpinLock) ([`SpinGuard`](crate::SpinGuard)) and of
/// [`NonReentrantLock`](crate::NonReentrantLock)
/// ([`NonReentrantGuard`](crate::NonReentrantGuard)) and of [`FairLock`](crate::FairLock)
/// ([`FairGuard`](crate::FairGuard)).
///
/// It behaves as [`LockGuard`](crate::LockGuard): [`unlock`](Guard::unlock) releases now (with
/// the lock's own release: the spin lock's publishes nothing), dropping it releases in the
/// background, [`lost`](Guard::lost) resolves when the lease is lost, and a guard taken without
/// a lease is renewed by the watchdog until released.
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let guard = client.spin_lock("jobs:7").lock().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lost the lock; stopping"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct Guard<L> {
    /// Bound to the owner that holds.
    pub(crate) lock: L,
    pub(crate) hold: Hold,
}

impl<L> crate::kit::wait::Lapse for Guard<L> {
    fn lapsed(&self) -> bool {
        self.is_lost()
    }
}

impl<L> Guard<L> {
    /// Releases this hold now (see [`LockGuard::unlock`](crate::LockGuard::unlock)): the lock is
    /// free if it was the last hold. [`Error::LeaseLost`](crate::Error::LeaseLost) if the hold
    /// had been lost, [`Error::ReleaseUnknown`](crate::Error::ReleaseUnknown) if the outcome is
    /// unknown.
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background; before that, dropping
    /// the future drops the guard, which releases.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// lock.lock().await?.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.hold.release()
    }

    /// Releases now, and settles a release of unknown outcome before answering (see
    /// [`LockGuard::unlock_settled`](crate::LockGuard::unlock_settled)): `Ok` only when the hold
    /// is shown to have lasted until it was released.
    ///
    /// # Cancel safety
    /// Cancel safe as [`unlock`](Guard::unlock).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// lock.lock().await?.unlock_settled().await?;
    /// # Ok(()) }
    /// ```
    pub fn unlock_settled(self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.hold.release_settled()
    }

    /// Keeps the hold without a guard, for a later `unlock` by the same owner on the lock
    /// ([`SpinLock::unlock`](crate::SpinLock::unlock),
    /// [`NonReentrantLock::unlock`](crate::NonReentrantLock::unlock)).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// lock.lock().await?.detach();
    /// lock.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn detach(self) {
        self.hold.detach();
    }

    /// Resolves when the lease is lost (see [`LockGuard::lost`](crate::LockGuard::lost)). A spin
    /// lock's force release publishes no unlock message, so its loss is found by the next
    /// renewal (within a third of the watchdog timeout) or at a fixed lease's end.
    ///
    /// # Cancel safety
    /// Cancel safe; it only observes.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// let lost = guard.lost();
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold.lost()
    }

    /// A token cancelled when the lease is found lost (see
    /// [`LockGuard::lost_token`](crate::LockGuard::lost_token)).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// let cancelled = lock.lock().await?.lost_token();
    /// # Ok(()) }
    /// ```
    pub fn lost_token(&self) -> CancellationToken {
        self.hold.lost_token()
    }

    /// Whether the lease is already known lost or past its proven end.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// assert!(!lock.lock().await?.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// How the acquisition went: its wait, its attempts, and what ended its wait
    /// ([`WokenBy::BackOff`](crate::WokenBy::BackOff) for a spin lock that polled).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// println!("{} attempts", lock.lock().await?.acquisition().attempts);
    /// # Ok(()) }
    /// ```
    pub fn acquisition(&self) -> &Acquisition {
        self.hold.acquisition()
    }

    /// The holder field written in the lock's hash: `<client uuid>:<owner id>`.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// assert!(guard.holder_field().ends_with(&format!(":{}", guard.lock().owner().id())));
    /// # Ok(()) }
    /// ```
    pub fn holder_field(&self) -> &str {
        self.hold.field()
    }

    /// The lock this guard holds, bound to the holding owner.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// assert_eq!(lock.lock().await?.lock().name(), lock.name());
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> &L {
        &self.lock
    }
}

impl<L: std::fmt::Debug> std::fmt::Debug for Guard<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("lock", &self.lock)
            .field("field", &self.hold.field())
            .field("lease", &self.hold.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}
