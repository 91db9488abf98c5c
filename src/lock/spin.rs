//! The spin lock, Redisson's `RSpinLock` (protocol §6): the reentrant lock's hash, taken by
//! polling with back-off instead of waiting for unlock messages, and released without any.

use arcstr::ArcStr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::kit::janitor::Release;
use crate::kit::protocol::{sealed, Protocol, Waits};
use crate::kit::{BackOff, Client, Guard, Handle};
use crate::transport::script::{self, BatchedAcquire, Encoded, ReleaseScript, Script};

/// Release one hold without publishing (`lua/spin_release.lua`).
static SPIN_RELEASE_SCRIPT: Script =
    Script::new("spin_release", include_str!("../../lua/spin_release.lua"));

/// The spin lock's release, for guards, dropped guards, undone acquires and rollbacks.
static SPIN_RELEASE: ReleaseScript = ReleaseScript {
    script: &SPIN_RELEASE_SCRIPT,
    encode: encode_release,
    hand_off: None,
};

/// The reentrant lock's acquire (§6: acquisition is §2.2), batched; a synced-writes rollback is
/// the spin release, which does not publish.
static SPIN_ACQUIRE: BatchedAcquire = BatchedAcquire {
    shape: "acquire",
    alone: &script::ACQUIRE,
    release: Some(&SPIN_RELEASE),
};

fn encode_release(release: &Release, _publish: &'static str) -> Encoded {
    script::encode(
        &[&*release.name],
        &[release.lease_ms.to_string().as_str(), &*release.field],
    )
}

/// The spin lock's [`Protocol`], with the back-off its waiters poll by: [`SpinLock`] is
/// `Handle<Spin>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spin {
    backoff: BackOff,
}

/// A reentrant lock whose waiters **poll** with back-off instead of subscribing to unlock
/// messages, on the same Redis keys as Java Redisson's `RSpinLock`.
///
/// It suits many short-lived locks on distinct names, where one subscription per waited-for
/// name would cost more than a few polls; under long waits it sends more requests than
/// [`Lock`](crate::Lock). The hash is the reentrant lock's (so [`Lock`](crate::Lock), Java's `RLock` and the spin lock
/// on one name exclude each other), acquisitions are [`Lock`](crate::Lock)'s script, renewal is the
/// watchdog's. The release never publishes, since a spin lock has no channel.
///
/// **Hazard**: because a spin lock's release (and [`force_unlock`](SpinLock::force_unlock))
/// publishes nothing, a [`Lock`](crate::Lock) or Java `RLock` waiter on the same name is not woken by it:
/// it retries only when its wait, bounded by the holder's TTL (up to the 30 s watchdog
/// lease), runs out. Do not mix spin and pub/sub locks on one name where waits matter.
///
/// # Cancel safety
/// Every acquire method is cancel safe: a dropped acquire future never leaves the lock held
/// (an attempt whose reply is lost to cancellation is released by the client's background
/// task), and the back-off pauses hold nothing.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.spin_lock("jobs:7");
/// let guard = lock.lock().await?; // polls 1, 2, 4, ... ms apart while busy
/// guard.unlock().await?;
///
/// let patient = lock.with_backoff(ferrisson::BackOff::constant(Duration::from_millis(64))?);
/// if let Some(guard) = patient.try_lock_within(Duration::from_secs(1)).await?.acquired() {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
pub type SpinLock = Handle<Spin>;

/// One hold of a spin lock, released when dropped (in the background) without any unlock
/// message: the kit's [`Guard`], whose release is the spin lock's.
///
/// ```no_run
/// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::SpinGuard = lock.lock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type SpinGuard = Guard<Spin>;

impl Client {
    /// A handle to the spin lock named `name` (Redisson's `getSpinLock(name)`), with the
    /// default [`BackOff`].
    ///
    /// This sends nothing to Redis. An empty name is reported by the lock's operations as
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let lock = client.spin_lock("jobs:7");
    /// assert_eq!(lock.name(), "jobs:7");
    /// # }
    /// ```
    pub fn spin_lock(&self, name: impl Into<String>) -> SpinLock {
        Handle::new(Arc::clone(&self.inner), name.into(), Spin::default())
    }
}

impl SpinLock {
    /// The same lock, waiting with `backoff` between attempts (Redisson's
    /// `getSpinLock(name, backOff)`).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// use ferrisson::BackOff;
    /// let steady = lock.with_backoff(BackOff::constant(std::time::Duration::from_millis(64))?);
    /// assert_ne!(steady.backoff(), BackOff::default());
    /// # Ok(()) }
    /// ```
    pub fn with_backoff(&self, backoff: BackOff) -> SpinLock {
        self.as_kind(Spin { backoff })
    }

    /// The back-off this handle waits with.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.spin_lock("jobs:7").backoff(), ferrisson::BackOff::default());
    /// # }
    /// ```
    pub fn backoff(&self) -> BackOff {
        self.kind.backoff
    }
}

impl sealed::Sealed for Spin {}

impl Protocol for Spin {
    type Extra = ();
    type Acquiring = ();
    const NAMES: (&'static str, &'static str) = ("SpinLock", "SpinGuard");
    const RELEASE: Option<&'static ReleaseScript> = Some(&SPIN_RELEASE);
    const BATCHED_ACQUIRE: &'static BatchedAcquire = &SPIN_ACQUIRE;

    /// Polls (§6): a spin lock has no channel.
    fn waits(&self) -> Waits<()> {
        Waits::Poll(self.backoff)
    }

    fn begin(&self, _lock: &SpinLock, _field: &ArcStr, _wait: Option<Duration>) {}

    /// `DEL`, publishing nothing: a spin lock has no channel.
    fn force_release(
        &self,
        lock: &SpinLock,
    ) -> impl std::future::Future<Output = Result<bool>> + Send {
        lock.force_release(false)
    }
}
