//! The spin lock, Redisson's `RSpinLock` (protocol §6): the reentrant lock's hash, taken by
//! polling with back-off instead of waiting for unlock messages, and released without any.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use tokio::time::Instant;

use super::held::Guard;
use super::reentrant::Lock;
use crate::config::{lease_millis, WhenUnavailable};
use crate::error::{Error, Result};
use crate::kit::acquire::acquire_call;
use crate::kit::hold::Hold;
use crate::kit::janitor::Release;
use crate::kit::wait::{out_of_time, script_error, TryOutcome};
use crate::kit::{Acquisition, Attempt, Client, WokenBy};
use crate::lease::watchdog::{HoldKey, Lease};
use crate::metrics;
use crate::owner::{holder_field, Owner};
use crate::transport::script::{self, Encoded, ReleaseScript, Script};

/// Release one hold without publishing (`lua/spin_release.lua`).
static SPIN_RELEASE_SCRIPT: Script =
    Script::new("spin_release", include_str!("../../lua/spin_release.lua"));

/// The spin lock's release, for guards, dropped guards, undone acquires and rollbacks.
static SPIN_RELEASE: ReleaseScript = ReleaseScript {
    script: &SPIN_RELEASE_SCRIPT,
    encode: encode_release,
};

fn encode_release(release: &Release, _publish: &'static str) -> Encoded {
    script::encode(
        &[&*release.name],
        &[release.lease_ms.to_string().as_str(), &*release.field],
    )
}

/// How long a spin lock's waiter pauses between attempts: Redisson's `LockOptions.BackOff`.
///
/// * [`BackOff::exponential`] (the default: 1 ms, doubling, at most 128 ms): each pause is
///   the previous one times the multiplier plus a random 0..n−1 ms after the n-th failure, so
///   that contenders that started together drift apart;
/// * [`BackOff::constant`]: the same pause every time (Redisson's default for it: 64 ms).
///
/// Delays count in whole milliseconds, as Redisson's. The first attempt never waits.
///
/// ```
/// use std::time::Duration;
/// use ferrisson::BackOff;
///
/// let gentle = BackOff::exponential(Duration::from_millis(5), Duration::from_millis(200), 3)?;
/// let steady = BackOff::constant(Duration::from_millis(64))?;
/// assert_ne!(gentle, steady);
/// assert!(BackOff::constant(Duration::ZERO).is_err());
/// # Ok::<(), ferrisson::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackOff {
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Exponential {
        initial_ms: u64,
        max_ms: u64,
        multiplier: u32,
    },
    Constant {
        delay_ms: u64,
    },
}

impl BackOff {
    /// Pauses that start at `initial`, grow by `multiplier` (plus the jitter) after each
    /// failed attempt, and stop growing at `max`: Redisson's `ExponentialBackOff`.
    ///
    /// Fails with [`Error::InvalidArgument`] when a delay is below 1 ms (a zero pause would
    /// hammer Redis) or too large, when `initial` exceeds `max`, or when `multiplier` is 0.
    ///
    /// ```
    /// use std::time::Duration;
    /// let backoff = ferrisson::BackOff::exponential(Duration::from_millis(1), Duration::from_millis(128), 2)?;
    /// assert_eq!(backoff, ferrisson::BackOff::default());
    /// assert!(ferrisson::BackOff::exponential(Duration::from_millis(9), Duration::from_millis(8), 2).is_err());
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn exponential(initial: Duration, max: Duration, multiplier: u32) -> Result<BackOff> {
        let initial_ms = lease_millis(initial, "the back-off's initial delay")?;
        let max_ms = lease_millis(max, "the back-off's maximum delay")?;
        if initial_ms > max_ms {
            return Err(Error::InvalidArgument(format!(
                "the back-off's initial delay {initial:?} exceeds its maximum {max:?}"
            )));
        }
        if multiplier == 0 {
            return Err(Error::InvalidArgument(
                "the back-off's multiplier must be at least 1, got 0".into(),
            ));
        }
        Ok(BackOff {
            kind: Kind::Exponential {
                initial_ms,
                max_ms,
                multiplier,
            },
        })
    }

    /// The same pause, `delay`, after every failed attempt: Redisson's `ConstantBackOff`
    /// (whose default is 64 ms). Fails with [`Error::InvalidArgument`] for a delay below
    /// 1 ms or too large.
    ///
    /// ```
    /// let backoff = ferrisson::BackOff::constant(std::time::Duration::from_millis(64))?;
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn constant(delay: Duration) -> Result<BackOff> {
        let delay_ms = lease_millis(delay, "the back-off's delay")?;
        Ok(BackOff {
            kind: Kind::Constant { delay_ms },
        })
    }

    /// The pauses of one acquire.
    fn pauses(self) -> Pauses {
        let next_ms = match self.kind {
            Kind::Exponential { initial_ms, .. } => initial_ms,
            Kind::Constant { delay_ms } => delay_ms,
        };
        Pauses {
            kind: self.kind,
            next_ms,
            failures: 0,
        }
    }
}

impl Default for BackOff {
    /// Redisson's default `ExponentialBackOff`: 1 ms, doubling, at most 128 ms.
    ///
    /// ```
    /// let backoff = ferrisson::BackOff::default();
    /// ```
    fn default() -> BackOff {
        BackOff {
            kind: Kind::Exponential {
                initial_ms: 1,
                max_ms: 128,
                multiplier: 2,
            },
        }
    }
}

/// One acquire's sequence of pauses: Redisson's `BackOffPolicy`.
struct Pauses {
    kind: Kind,
    next_ms: u64,
    failures: u32,
}

impl Pauses {
    fn next(&mut self) -> Duration {
        let pause = self.next_ms;
        if let Kind::Exponential {
            max_ms, multiplier, ..
        } = self.kind
        {
            // As Redisson: the n-th failure adds 0..n-1 ms, so that contenders drift apart.
            self.failures = self.failures.saturating_add(1);
            let jitter = fastrand::u64(0..u64::from(self.failures));
            self.next_ms = pause
                .saturating_mul(u64::from(multiplier))
                .saturating_add(jitter)
                .min(max_ms);
        }
        Duration::from_millis(pause)
    }
}

/// A reentrant lock whose waiters **poll** with back-off instead of subscribing to unlock
/// messages, on the same Redis keys as Java Redisson's `RSpinLock`.
///
/// It suits many short-lived locks on distinct names, where one subscription per waited-for
/// name would cost more than a few polls; under long waits it sends more requests than
/// [`Lock`]. The hash is the reentrant lock's (so [`Lock`], Java's `RLock` and the spin lock
/// on one name exclude each other), acquisitions are [`Lock`]'s script, renewal is the
/// watchdog's. The release never publishes, since a spin lock has no channel.
///
/// **Hazard**: because a spin lock's release (and [`force_unlock`](SpinLock::force_unlock))
/// publishes nothing, a [`Lock`] or Java `RLock` waiter on the same name is not woken by it:
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
/// if let Some(guard) = patient.try_lock_for(Duration::from_secs(1), None).await?.acquired() {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SpinLock {
    /// The reentrant lock of the same name and owner: queries are its own.
    lock: Lock,
    backoff: BackOff,
}

impl Client {
    /// A handle to the spin lock named `name` (Redisson's `getSpinLock(name)`), with the
    /// default [`BackOff`].
    ///
    /// This sends nothing to Redis. An empty name is reported by the lock's operations as
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let lock = client.spin_lock("jobs:7");
    /// assert_eq!(lock.name(), "jobs:7");
    /// # }
    /// ```
    pub fn spin_lock(&self, name: impl Into<String>) -> SpinLock {
        SpinLock {
            lock: self.lock(name),
            backoff: BackOff::default(),
        }
    }
}

impl SpinLock {
    /// The lock's name, which is also the Redis key of its hash.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.spin_lock("jobs:7").name(), "jobs:7");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The same lock, operated on behalf of `owner` instead of the current task (see
    /// [`Lock::with_owner`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::SpinLock) {
    /// let owner = ferrisson::Owner::new();
    /// assert_eq!(lock.with_owner(owner).owner(), owner);
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> SpinLock {
        SpinLock {
            lock: self.lock.with_owner(owner),
            backoff: self.backoff,
        }
    }

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
        SpinLock {
            lock: self.lock.clone(),
            backoff,
        }
    }

    /// The back-off this handle waits with.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.spin_lock("jobs:7").backoff(), ferrisson::BackOff::default());
    /// # }
    /// ```
    pub fn backoff(&self) -> BackOff {
        self.backoff
    }

    /// The owner this handle acts for: the bound explicit owner, or the current task.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::SpinLock) {
    /// assert_eq!(lock.owner(), ferrisson::Owner::current());
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.lock.owner()
    }

    /// The reentrant lock on the same hash and owner (for its other queries, such as
    /// [`Lock::remaining_ttl`]). Its own acquires and releases are pub/sub ones.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// let ttl = lock.as_lock().remaining_ttl().await?;
    /// # Ok(()) }
    /// ```
    pub fn as_lock(&self) -> &Lock {
        &self.lock
    }

    /// Acquires the lock, polling as long as it takes, with the watchdog lease (renewed until
    /// released). Redisson's `lock()`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<SpinGuard> {
        self.spin(None, None).await?.ok_or_else(|| self.not_held())
    }

    /// Acquires the lock, polling as long as it takes, with a fixed `lease` and no watchdog.
    /// Redisson's `lock(leaseTime)`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<SpinGuard> {
        self.spin(Some(lease), None)
            .await?
            .ok_or_else(|| self.not_held())
    }

    /// One attempt, no waiting, watchdog lease. Redisson's `tryLock()`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// match lock.try_lock().await? {
    ///     ferrisson::Attempt::Acquired(guard) => guard.unlock().await?,
    ///     ferrisson::Attempt::Busy => println!("busy"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Attempt<SpinGuard>> {
        self.spin(None, Some(Duration::ZERO))
            .await
            .map(Attempt::from)
    }

    /// Polls at most `wait` for the lock; holds it for `lease`, or with the watchdog when
    /// `lease` is `None`. Redisson's `tryLock(waitTime, leaseTime)`. Returns
    /// [`Attempt::Busy`] when the wait ran out; no attempt is sent after it, and a pause never
    /// outlasts it. As for [`Lock::try_lock_for`], a wait that ends before Redis answered at
    /// all is an [`Error::Timeout`].
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = lock.try_lock_for(Duration::from_millis(500), None).await?.acquired() {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<SpinGuard>> {
        self.spin(lease, Some(wait)).await.map(Attempt::from)
    }

    /// Releases one hold of this handle's owner without a guard, publishing nothing. Fails with
    /// [`Error::NotHeld`] when the owner holds none, [`Error::ReleaseUnknown`] when the outcome
    /// is unknown (see [`Lock::unlock`]).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// lock.lock().await?.detach();
    /// lock.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self) -> Result<()> {
        self.lock.unlock_by(Some(&SPIN_RELEASE)).await
    }

    /// Deletes the lock whoever holds it (`DEL`), publishing nothing (Redisson's
    /// `forceUnlock`). Returns whether a lock existed; a key of another type is an
    /// [`Error::WrongType`] and stays.
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense that a dropped call may or may not have deleted the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// let existed = lock.force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.lock.force_release(false).await
    }

    /// Whether anyone holds the lock (see [`Lock::is_locked`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// let _guard = lock.lock().await?;
    /// assert!(lock.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.lock.is_locked().await
    }

    /// Whether this handle's owner holds the lock (see [`Lock::is_held_by_current_owner`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// let _guard = lock.lock().await?;
    /// assert!(lock.is_held_by_current_owner().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_owner(&self) -> Result<bool> {
        self.lock.is_held_by_current_owner().await
    }

    /// How many holds this handle's owner has on the lock (see [`Lock::hold_count`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
    /// let _outer = lock.lock().await?;
    /// let _inner = lock.lock().await?;
    /// assert_eq!(lock.hold_count().await?, 2);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u64> {
        self.lock.hold_count().await
    }

    /// The spin lock's own wait (protocol §6): attempt, and while busy pause by the back-off
    /// and attempt again, all within `wait` (None: no limit). `lease` None = watchdog.
    async fn spin(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<SpinGuard>> {
        let (lease_kind, lease_ms) = self.lock.acquire_lease(lease, wait)?;
        let owner = self.owner();
        let field = holder_field(&self.lock.client().id, owner);
        let span = tracing::debug_span!("ferrisson.acquire", lock = %self.name(), owner = owner.id(), spin = true);
        let outcome = tracing::Instrument::instrument(
            self.poll(owner, field, lease_kind, lease_ms, wait),
            span,
        )
        .await;
        match &outcome {
            Ok(Some(_)) => {}
            Ok(None) => metrics::not_acquired(metrics::Failure::Busy),
            Err(_) => metrics::not_acquired(metrics::Failure::Error),
        }
        outcome
    }

    async fn poll(
        &self,
        owner: Owner,
        field: Arc<str>,
        lease: Lease,
        lease_ms: u64,
        wait: Option<Duration>,
    ) -> Result<Option<SpinGuard>> {
        let client = self.lock.client();
        let start = Instant::now();
        // A wait too large for the clock is no bound at all.
        let deadline = wait.and_then(|wait| start.checked_add(wait));
        let time_left = || deadline.map(|end| end.saturating_duration_since(Instant::now()));
        let mut pauses = self.backoff.pauses();
        let mut attempts = 0u32;
        // Whether Redis ever answered, and the outage that failed the last attempt: what the
        // wait reports when it runs out (as the pub/sub locks do).
        let mut answered = false;
        let mut outage: Option<Error> = None;
        loop {
            attempts += 1;
            let attempt = self.attempt(owner, Arc::clone(&field), lease, lease_ms);
            // Bounded by the time left; the first attempt of a lone try by the response
            // timeout only. A dropped attempt is settled by the kit.
            let outcome = match time_left() {
                Some(left) if !left.is_zero() => tokio::time::timeout(left, attempt).await.ok(),
                Some(_) if attempts > 1 => None,
                _ => Some(attempt.await),
            };
            match outcome {
                // Its lease ended before it could be handed out (see `kit::wait::Lapse`): let it
                // go (dropping it gives it up) and poll on.
                Some(Ok(TryOutcome::Acquired(guard, _))) if guard.hold.is_lost() => {
                    drop(guard);
                    tracing::debug!(
                        attempts,
                        "acquired only after the lease ran out; not handed out"
                    );
                    answered = true;
                    outage = None;
                }
                Some(Ok(TryOutcome::Acquired(mut guard, reentered))) => {
                    let woken_by = match attempts {
                        1 => WokenBy::Immediate,
                        _ => WokenBy::BackOff,
                    };
                    let how = metrics::How::of(woken_by, reentered);
                    let acquisition = Acquisition::record(start, woken_by, attempts, how);
                    guard.hold.set_acquisition(acquisition);
                    return Ok(Some(guard));
                }
                Some(Ok(TryOutcome::Busy(_))) => {
                    answered = true;
                    outage = None;
                }
                Some(Err(err))
                    if err.is_transient()
                        && client.config.when_unavailable == WhenUnavailable::KeepWaiting =>
                {
                    tracing::debug!(error = %err, "redis unavailable; polling on");
                    outage = Some(err);
                }
                Some(Err(err)) => return Err(client.explain(err)),
                None => break,
            }
            let pause = pauses.next();
            match time_left() {
                Some(left) if left.is_zero() => break,
                Some(left) => tokio::time::sleep(pause.min(left)).await,
                None => tokio::time::sleep(pause).await,
            }
        }
        tracing::debug!(attempts, "not acquired within the wait bound");
        out_of_time(client, wait, answered, outage)
    }

    /// One run of the reentrant lock's acquire script (§6: acquisition is §2.2), made cancel
    /// safe by the kit, with the spin release for undo and rollback; on success the hold is
    /// registered and its guard built before anything else can be awaited.
    async fn attempt(
        &self,
        owner: Owner,
        field: Arc<str>,
        lease: Lease,
        lease_ms: u64,
    ) -> Result<TryOutcome<SpinGuard>> {
        let client = self.lock.client();
        let redis = Arc::clone(&client.redis);
        let key = HoldKey {
            name: self.lock.name_arc(),
            field: Arc::clone(&field),
        };
        let keys = [self.lock.name_arc()];
        let args = [Arc::from(lease_ms.to_string()), Arc::clone(&field)];
        let rollback = Release {
            name: self.lock.name_arc(),
            field,
            lease_ms,
            script: Some(&SPIN_RELEASE),
        };
        // Alone rather than batched: a synced-writes rollback must be the spin release, which
        // does not publish. Boxed: fred's command future is several KB.
        let send = async move {
            let call = redis.run_acquire(&script::ACQUIRE, &keys, &args, Value::is_null, rollback);
            Box::pin(call).await
        };
        let read = |reply: std::result::Result<Value, fred::error::Error>, sent_at| match reply
            .map_err(|err| script_error(client, self.name(), err))?
        {
            Value::Null => {
                let (hold, reentered) = Hold::acquired(
                    self.lock.client_arc(),
                    &key,
                    lease,
                    sent_at,
                    Some(&SPIN_RELEASE),
                );
                let guard = Guard {
                    lock: self.with_owner(owner),
                    hold,
                };
                Ok(TryOutcome::Acquired(guard, reentered))
            }
            Value::Integer(ttl) => Ok(TryOutcome::Busy(ttl)),
            other => Err(Error::Redis(fred::error::Error::new(
                fred::error::ErrorKind::Protocol,
                format!(
                    "unexpected reply to the acquire script: {}",
                    crate::shown::Reply(&other)
                ),
            ))),
        };
        acquire_call(
            client,
            &key,
            lease_ms,
            Some(&SPIN_RELEASE),
            Value::is_null,
            send,
            read,
        )
        .await
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.name().to_owned(),
        }
    }
}

impl std::fmt::Debug for SpinLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLock")
            .field("name", &self.name())
            .field("backoff", &self.backoff)
            .finish()
    }
}

/// One hold of a spin lock, released when dropped (in the background) without any unlock
/// message: the shared [`Guard`] of the reentrant lock's hash, whose release is the spin lock's.
///
/// ```no_run
/// # async fn demo(lock: ferrisson::SpinLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::SpinGuard = lock.lock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type SpinGuard = Guard<SpinLock>;

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync_static<T: Send + Sync + 'static>() {}
    fn send<T: Send>(_: &T) {}

    #[test]
    fn handles_and_guards_are_send_sync_static() {
        send_sync_static::<SpinLock>();
        send_sync_static::<SpinGuard>();
        send_sync_static::<BackOff>();
        send_sync_static::<crate::lock::NonReentrantLock>();
        send_sync_static::<crate::lock::NonReentrantGuard>();
    }

    #[allow(dead_code)] // only type-checked: the futures are never run
    fn futures_are_send(lock: SpinLock, guard: SpinGuard, other: crate::lock::NonReentrantLock) {
        send(&lock.lock());
        send(&lock.try_lock_for(Duration::from_secs(1), None));
        send(&lock.unlock());
        send(&lock.force_unlock());
        send(&guard.lost());
        send(&guard.unlock());
        send(&other.lock());
        send(&other.try_lock_for(Duration::from_secs(1), None));
    }

    fn sequence(backoff: BackOff, n: usize) -> Vec<u64> {
        let mut pauses = backoff.pauses();
        (0..n).map(|_| pauses.next().as_millis() as u64).collect()
    }

    #[test]
    fn the_default_backoff_doubles_from_1_ms_with_jitter_up_to_128_ms() {
        for _ in 0..100 {
            let pauses = sequence(BackOff::default(), 12);
            assert_eq!(pauses[..2], [1, 2], "{pauses:?}");
            for (n, pair) in pauses.windows(2).enumerate() {
                // The pause after the (n+1)-th failure: twice the previous plus 0..=n ms.
                let low = (pair[0] * 2).min(128);
                let high = (pair[0] * 2 + n as u64).min(128);
                assert!(
                    (low..=high).contains(&pair[1]),
                    "{pauses:?} at {n}: {} not in {low}..={high}",
                    pair[1]
                );
            }
            assert_eq!(pauses[11], 128, "capped: {pauses:?}");
        }
    }

    #[test]
    fn a_constant_backoff_pauses_the_same_every_time() {
        let backoff = BackOff::constant(Duration::from_millis(64)).expect("valid");
        assert_eq!(sequence(backoff, 5), [64; 5]);
    }

    #[test]
    fn bad_backoffs_are_invalid_arguments() {
        let ms = Duration::from_millis;
        for bad in [
            BackOff::constant(Duration::ZERO),
            BackOff::constant(Duration::from_micros(999)),
            BackOff::constant(Duration::MAX),
            BackOff::exponential(Duration::ZERO, ms(10), 2),
            BackOff::exponential(ms(20), ms(10), 2),
            BackOff::exponential(ms(1), ms(10), 0),
            BackOff::exponential(ms(1), Duration::MAX, 2),
        ] {
            assert!(
                matches!(bad, Err(Error::InvalidArgument(_))),
                "{bad:?} should be refused"
            );
        }
        assert!(BackOff::exponential(ms(10), ms(10), 1).is_ok());
    }
}
