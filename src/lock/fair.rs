//! The fair lock, Redisson's `RFairLock` (protocol §4): the reentrant lock's hash, plus a queue
//! of waiters served in arrival order across every client.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fred::prelude::Value;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::reentrant::{Lock, RemainingTtl};
use crate::error::{Error, Result};
use crate::kit::acquire::acquire_call;
use crate::kit::hold::Hold;
use crate::kit::janitor::{Janitor, Job, Release};
use crate::kit::wait::{acquire_with_wait, script_error, TryOutcome, Waiter};
use crate::kit::{Attempt, Client, ClientInner, InFlight};
use crate::lease::watchdog::{HoldKey, Lease};
use crate::name;
use crate::owner::{holder_field, Owner};
use crate::transport::script::{self, Encoded, ReleaseScript, Script};

/// Prepends the publish prelude and the fair lock's functions (`lua/fair_lock.lua`) to one
/// call line.
macro_rules! fair_script {
    ($name:literal, $call:literal) => {
        Script::new(
            $name,
            concat!(
                include_str!("../../lua/lib/publish.lua"),
                include_str!("../../lua/lib/fair_prune.lua"),
                include_str!("../../lua/fair_lock.lua"),
                $call
            ),
        )
    };
}

/// Acquire, re-enter, queue, or try once (`acquire`, §4.3–§4.4).
static FAIR_ACQUIRE: Script = fair_script!(
    "fair_acquire",
    "return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])\n"
);

/// Release one hold and tell the queue's head (`release`, §4.6).
static FAIR_RELEASE_SCRIPT: Script = fair_script!(
    "fair_release",
    "return release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4])\n"
);

/// The fair lock's release, for guards, dropped guards, undone acquires and rollbacks.
static FAIR_RELEASE: ReleaseScript = ReleaseScript {
    script: &FAIR_RELEASE_SCRIPT,
    encode: encode_release,
};

/// Leave the queue (`give_up`, §4.5).
static FAIR_GIVE_UP: Script = fair_script!(
    "fair_give_up",
    "return give_up(KEYS[1], KEYS[2], ARGV[1], ARGV[2])\n"
);

/// Delete the lock whoever holds it and tell the queue's head (`force_release`, §4.7).
static FAIR_FORCE_RELEASE: Script = fair_script!(
    "fair_force_release",
    "return force_release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])\n"
);

/// Redisson's `fairLockWaitTimeout` default: the wait time W of a waiter without a bound.
const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_millis(300_000);

/// The largest W: deadlines (the client's epoch ms + the lock's TTL + W) must stay exact in
/// Lua's doubles (2^53), far beyond any real wait (about 31 years).
const MAX_WAIT_MS: u64 = 1_000_000_000_000;

/// The first and the longest pause of a queued waiter that the script told the lock is free
/// while another waiter is at the head (see [`FairLock`]'s docs, "Waiting").
const FIRST_PAUSE_MS: u64 = 10;
const MAX_PAUSE_MS: u64 = 1_000;

/// A distributed lock served in arrival order, on the same Redis keys as Java Redisson's
/// `RFairLock`.
///
/// Acquires that find the lock held queue up, across every client (Java or Rust), and get the
/// lock in the order they queued. It is reentrant per [`Owner`], as [`Lock`] is, and its hash is
/// the reentrant lock's: a [`Lock`] or Java `RLock` of the same name sees it held.
///
/// On Redis, besides the hash at the name:
/// * `redisson_lock_queue:{name}`: a list of the waiting holder fields, in arrival order;
/// * `redisson_lock_timeout:{name}`: a sorted set of the same fields, each scored with its
///   deadline (epoch ms, the waiter's clock): the time after which it is dropped from the queue
///   as stale, so that a crashed waiter blocks the ones behind it at most until then;
/// * each waiter listens on its own channel, `redisson_lock__channel:{name}:<field>`; a release
///   tells only the queue's head.
///
/// # Waiting
/// A waiter's deadline is the deadline of the waiter ahead of it (or the lock's TTL) plus its
/// wait time W: the wait of [`try_lock_for`](FairLock::try_lock_for), otherwise the lock's wait
/// timeout ([`with_wait_timeout`](FairLock::with_wait_timeout), 5 minutes by default as
/// Redisson's `fairLockWaitTimeout`). A waiter that outlives its deadline (it waited longer than
/// W behind a holder) is dropped from the queue by the next script that looks at it, and queues
/// again, at the back, on its next attempt.
///
/// A queued waiter retries when told on its channel, or when the lock's TTL runs out. When the
/// lock is free but another waiter is at the head (it was just told, or it crashed and waits to
/// be pruned at its deadline), Redisson's waiter retries at once, in a loop; this one waits for
/// its channel for 10 ms, then twice as long each time up to 1 s, so that a crashed head costs
/// at most one retry a second per waiter until it is pruned.
///
/// A waiter that stops waiting (its wait ran out, an error, or its future was dropped) leaves
/// the queue (Redisson's `acquireFailed`), so it does not hold up the waiters behind it. It
/// does so once its last attempt has answered (an attempt still in flight could queue it
/// again): before returning, or, for a dropped future or a wait that ran out during a slow
/// attempt, in the client's background task.
///
/// # Cancel safety
/// Every acquire method is cancel safe: a dropped acquire never leaves the lock held nor its
/// waiter queued (see above), and never leaks a subscription.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.fair_lock("orders:42");
///
/// let guard = lock.lock().await?; // queues behind earlier waiters, if any
/// guard.unlock().await?;          // tells the next waiter in line
///
/// if let Some(guard) = lock.try_lock_for(Duration::from_secs(2), None).await?.acquired() {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    /// The reentrant lock of the same name and owner: its checks and queries are this lock's.
    lock: Lock,
    wait_timeout: Duration,
}

impl Client {
    /// A handle to the fair lock named `name` (Redisson's `getFairLock(name)`).
    ///
    /// This sends nothing to Redis. An empty name is reported by the lock's operations as
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.fair_lock("orders:42");
    /// assert_eq!(lock.name(), "orders:42");
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock {
            lock: self.lock(name),
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
        }
    }
}

impl FairLock {
    /// The lock's name, which is also the Redis key of its hash.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.fair_lock("orders:42").name(), "orders:42");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The same lock, operated on behalf of `owner` instead of the current task (see
    /// [`Lock::with_owner`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::FairLock) {
    /// let owner = ferrisson::Owner::new();
    /// assert_eq!(lock.with_owner(owner).owner(), owner);
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> FairLock {
        FairLock {
            lock: self.lock.with_owner(owner),
            wait_timeout: self.wait_timeout,
        }
    }

    /// The owner this handle acts for: the bound explicit owner, or the current task.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::FairLock) {
    /// assert_eq!(lock.owner(), ferrisson::Owner::current());
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.lock.owner()
    }

    /// The same lock with another wait time W for acquires without a bound of their own
    /// ([`lock`](FairLock::lock), [`lock_with_lease`](FairLock::lock_with_lease)): Redisson's
    /// `fairLockWaitTimeout`, 5 minutes by default. It sets how long after the waiter ahead such
    /// a waiter stays queued if it stops answering (see the type's docs); a live waiter that
    /// outlives it queues again. Fails with [`Error::InvalidArgument`] below 1 ms or above about
    /// 31 years.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// let lock = lock.with_wait_timeout(std::time::Duration::from_secs(60))?;
    /// assert_eq!(lock.wait_timeout(), std::time::Duration::from_secs(60));
    /// # Ok(()) }
    /// ```
    pub fn with_wait_timeout(&self, timeout: Duration) -> Result<FairLock> {
        let ms = timeout.as_millis();
        if ms == 0 || ms > u128::from(MAX_WAIT_MS) {
            return Err(Error::InvalidArgument(format!(
                "a fair lock's wait timeout must be between 1 ms and {MAX_WAIT_MS} ms, got {timeout:?}"
            )));
        }
        Ok(FairLock {
            lock: self.lock.clone(),
            wait_timeout: timeout,
        })
    }

    /// The wait time W of acquires without a bound of their own (see
    /// [`with_wait_timeout`](FairLock::with_wait_timeout)).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.fair_lock("a").wait_timeout(), std::time::Duration::from_secs(300));
    /// # }
    /// ```
    pub fn wait_timeout(&self) -> Duration {
        self.wait_timeout
    }

    /// Acquires the lock in its turn, waiting as long as it takes, with the watchdog lease.
    /// Redisson's `lock()`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs): a dropped call leaves the queue.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<FairGuard> {
        self.acquire_loop(None, None)
            .await?
            .ok_or_else(|| self.not_held())
    }

    /// Acquires the lock in its turn, waiting as long as it takes, with a fixed `lease` and no
    /// watchdog. Redisson's `lock(leaseTime)`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<FairGuard> {
        self.acquire_loop(Some(lease), None)
            .await?
            .ok_or_else(|| self.not_held())
    }

    /// One attempt, no waiting, watchdog lease: acquired when the lock is free and nobody is
    /// queued (or this owner is the queue's head), or re-entered. Never queues. Redisson's
    /// `tryLock()`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = lock.try_lock().await?.acquired() {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Attempt<FairGuard>> {
        self.acquire_loop(None, Some(Duration::ZERO))
            .await
            .map(Attempt::from)
    }

    /// Queues for the lock and waits at most `wait` for its turn; holds it for `lease`, or with
    /// the watchdog when `lease` is `None`. Redisson's `tryLock(waitTime, leaseTime)`: `wait`
    /// is also the waiter's W (see the type's docs). When the wait runs out the waiter leaves
    /// the queue and gets [`Attempt::Busy`]. The bound is as strict as
    /// [`Lock::try_lock_for`]'s.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs): a dropped call leaves the queue.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let attempt = lock.try_lock_for(Duration::from_millis(500), None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<FairGuard>> {
        self.acquire_loop(lease, Some(wait))
            .await
            .map(Attempt::from)
    }

    /// Releases one hold of this handle's owner without a guard (for holds kept with
    /// [`FairGuard::detach`]); the last hold tells the queue's head. Fails with
    /// [`Error::NotHeld`] when the owner holds nothing, also when the lock does not exist (which
    /// Redisson does not count as an error; the head is told all the same).
    /// [`Error::ReleaseUnknown`] when the outcome is unknown (see [`Lock::unlock`]).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// lock.lock().await?.detach();
    /// lock.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self) -> Result<()> {
        match self.lock.unlock_by(Some(&FAIR_RELEASE)).await {
            Err(err) => Err(self.name_wrong_type(err).await),
            done => done,
        }
    }

    /// Deletes the lock whoever holds it and tells the queue's head (Redisson's
    /// `forceUnlock`); the queue stays. Returns whether a lock existed. A lock key of another
    /// type is an [`Error::WrongType`] and is left alone.
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense that a dropped call may or may not have deleted the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// let existed = lock.force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let client = self.lock.client();
        client.ensure_open()?;
        self.lock.check_name()?;
        let name = self.name();
        let reply = FAIR_FORCE_RELEASE
            .run(
                &client.redis.pool,
                &client.redis.write_options,
                &[
                    name.to_owned(),
                    name::fair_queue_key(name),
                    name::fair_timeout_key(name),
                    name::lock_channel(name),
                ],
                &[now_ms().to_string().as_str(), client.redis.publish_arg],
            )
            .await;
        match reply {
            Ok(reply) => Ok(reply.as_i64() == Some(1)),
            Err(err) => Err(self.name_wrong_type(script_error(client, name, err)).await),
        }
    }

    /// Deletes the lock, its queue and its timeout set (`DEL name queue timeouts`; Redisson's
    /// `delete()`). Tells nobody: queued waiters find out when their wait bound runs out, and
    /// queue again. Returns whether anything was deleted.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// lock.delete().await?;
    /// assert!(!lock.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        let client = self.lock.client();
        client.ensure_open()?;
        self.lock.check_name()?;
        let name = self.name();
        let (queue, timeouts) = (name::fair_queue_key(name), name::fair_timeout_key(name));
        let deleted: u64 = client
            .redis
            .query("DEL", name, &[&queue, &timeouts])
            .await
            .map_err(|err| script_error(client, name, err))?;
        Ok(deleted > 0)
    }

    /// Whether anyone holds the lock (see [`Lock::is_locked`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
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
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// let _guard = lock.lock().await?;
    /// assert!(lock.is_held_by_current_owner().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_owner(&self) -> Result<bool> {
        self.lock.is_held_by_current_owner().await
    }

    /// Whether `owner` of this client holds the lock (see [`Lock::is_held_by`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// assert!(!lock.is_held_by(ferrisson::Owner::new()).await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by(&self, owner: Owner) -> Result<bool> {
        self.lock.is_held_by(owner).await
    }

    /// How many holds this handle's owner has on the lock (see [`Lock::hold_count`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// assert_eq!(lock.hold_count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u64> {
        self.lock.hold_count().await
    }

    /// The lock's remaining time to live (see [`Lock::remaining_ttl`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
    /// println!("{:?}", lock.remaining_ttl().await?);
    /// # Ok(()) }
    /// ```
    pub async fn remaining_ttl(&self) -> Result<RemainingTtl> {
        self.lock.remaining_ttl().await
    }

    /// The acquire path: `lease` None = watchdog; `wait` None = no limit, `Some(ZERO)` = try
    /// once without queueing. A waiter that may have queued leaves the queue unless it acquired
    /// (now, or from the janitor if this future is dropped).
    async fn acquire_loop(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<FairGuard>> {
        let (lease_kind, lease_ms) = self.lock.acquire_lease(lease, wait)?;
        let client = self.lock.client();
        let owner = self.owner();
        let field = holder_field(&client.id, owner);
        let once = wait == Some(Duration::ZERO);
        // W: the bounded wait itself (at least 1 ms, at most MAX_WAIT_MS), else the timeout.
        let wait_ms = match wait {
            Some(wait) if !once => (wait.as_millis() as u64).clamp(1, MAX_WAIT_MS),
            _ => self.wait_timeout.as_millis() as u64,
        };
        // Each attempt's script call holds a sender until it answered (also when the janitor
        // settles it for a dropped attempt): the give-up waits for them, or an attempt still in
        // flight could queue the waiter again after it left.
        let (in_flight, settled) = mpsc::channel::<Infallible>(1);
        let give_up = (!once).then(|| GiveUp::new(client, self.name(), &field, wait_ms, settled));
        let pause = AtomicU64::new(FIRST_PAUSE_MS);
        let span = tracing::debug_span!("ferrisson.acquire", lock = %self.name(), owner = owner.id(), fair = true);
        let attempt = {
            let (field, pause) = (Arc::clone(&field), &pause);
            move || {
                let args = AttemptArgs {
                    owner,
                    field: Arc::clone(&field),
                    lease: lease_kind,
                    lease_ms,
                    wait_ms,
                    once,
                    in_flight: in_flight.clone(),
                };
                self.attempt(args, pause)
            }
        };
        // Never called: the waiter opts out of hand-offs, which would jump the queue.
        let adopt = |_sent_at| unreachable_handoff();
        let waiter = Waiter {
            name: self.lock.name_arc(),
            field,
            lease_ms,
            handoff: false,
            channel: name::fair_waiter_channel,
        };
        let acquired = tracing::Instrument::instrument(
            acquire_with_wait(client, &waiter, wait, attempt, adopt),
            span,
        )
        .await;
        match acquired {
            Ok(Some((mut guard, acquisition))) => {
                if let Some(give_up) = give_up {
                    give_up.disarm();
                }
                guard.hold.set_acquisition(acquisition);
                Ok(Some(guard))
            }
            other => {
                if let Some(give_up) = give_up {
                    give_up.run().await;
                }
                match other {
                    Err(err) => Err(self.name_wrong_type(err).await),
                    Ok(_) => Ok(None),
                }
            }
        }
    }

    /// One run of `FAIR_ACQUIRE`, made cancel safe by the kit; on success the hold is
    /// registered and its guard built before anything else can be awaited.
    async fn attempt(&self, args: AttemptArgs, pause: &AtomicU64) -> Result<TryOutcome<FairGuard>> {
        let client = self.lock.client();
        let redis = Arc::clone(&client.redis);
        let key = HoldKey {
            name: self.lock.name_arc(),
            field: Arc::clone(&args.field),
        };
        let name = self.name();
        let keys = [
            name.to_owned(),
            name::fair_queue_key(name),
            name::fair_timeout_key(name),
        ];
        let script_args = [
            args.lease_ms.to_string(),
            args.field.to_string(),
            args.wait_ms.to_string(),
            now_ms().to_string(),
            if args.once { "1" } else { "0" }.to_owned(),
        ];
        let rollback = Release {
            name: self.lock.name_arc(),
            field: Arc::clone(&args.field),
            lease_ms: args.lease_ms,
            script: Some(&FAIR_RELEASE),
        };
        let in_flight = args.in_flight;
        // Boxed: the script call's future is several KB (fred's command future).
        let send = async move {
            let call =
                redis.run_acquire(&FAIR_ACQUIRE, &keys, &script_args, Value::is_null, rollback);
            let reply = Box::pin(call).await;
            drop(in_flight);
            reply
        };
        let (owner, lease) = (args.owner, args.lease);
        let read = |reply: std::result::Result<Value, fred::error::Error>, sent_at: Instant| {
            match reply.map_err(|err| script_error(client, name, err))? {
                Value::Null => {
                    let (hold, reentered) = Hold::acquired(
                        self.lock.client_arc(),
                        &key,
                        lease,
                        sent_at,
                        Some(&FAIR_RELEASE),
                    );
                    let guard = FairGuard {
                        lock: self.with_owner(owner),
                        hold,
                    };
                    Ok(TryOutcome::Acquired(guard, reentered))
                }
                Value::Integer(ttl) if ttl > 0 => {
                    pause.store(FIRST_PAUSE_MS, Ordering::Relaxed);
                    Ok(TryOutcome::Busy(ttl))
                }
                // Free, but another waiter is at the head (or the lock has no TTL): wait for
                // this waiter's channel a little, longer each time, instead of re-polling.
                Value::Integer(_) => {
                    let wait = pause.load(Ordering::Relaxed);
                    pause.store((wait * 2).min(MAX_PAUSE_MS), Ordering::Relaxed);
                    Ok(TryOutcome::Busy(wait as i64))
                }
                other => Err(Error::Redis(fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    format!(
                        "unexpected reply to the fair acquire script: {}",
                        crate::shown::Reply(&other)
                    ),
                ))),
            }
        };
        acquire_call(
            client,
            &key,
            args.lease_ms,
            Some(&FAIR_RELEASE),
            Value::is_null,
            send,
            read,
        )
        .await
    }

    /// `err`, or for a key of another type the [`Error::WrongType`] of the one of the lock's
    /// three keys that is not a hash, a list and a sorted set respectively (a script's
    /// `WRONGTYPE` does not say which).
    async fn name_wrong_type(&self, err: Error) -> Error {
        if !matches!(err, Error::WrongType { .. }) {
            return err;
        }
        let name = self.name();
        let keys = [
            (name.to_owned(), "hash"),
            (name::fair_queue_key(name), "list"),
            (name::fair_timeout_key(name), "zset"),
        ];
        let redis = &self.lock.client().redis;
        for (key, expected) in keys {
            let kind: Option<String> = redis.query("TYPE", &key, &[]).await.ok();
            if kind.is_some_and(|kind| kind != expected && kind != "none") {
                return Error::WrongType { name: key };
            }
        }
        err
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.name().to_owned(),
        }
    }
}

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.name())
            .field("wait_timeout", &self.wait_timeout)
            .finish()
    }
}

/// What one acquire attempt sends.
struct AttemptArgs {
    owner: Owner,
    field: Arc<str>,
    lease: Lease,
    lease_ms: u64,
    wait_ms: u64,
    once: bool,
    in_flight: mpsc::Sender<Infallible>,
}

/// The client's clock in epoch ms: fair-lock deadlines are client time, as Redisson's
/// (`System.currentTimeMillis()`; protocol §0.3).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// `FAIR_RELEASE`'s keys and arguments for one release.
fn encode_release(release: &Release, publish: &'static str) -> Encoded {
    let name = &*release.name;
    script::encode(
        &[
            name.to_owned(),
            name::fair_queue_key(name),
            name::fair_timeout_key(name),
            name::lock_channel(name),
        ],
        &[
            release.lease_ms.to_string().as_str(),
            &release.field,
            now_ms().to_string().as_str(),
            publish,
        ],
    )
}

/// The wait loop adopts a hold only after a local hand-off, which a fair waiter opts out of.
fn unreachable_handoff() -> FairGuard {
    unreachable!("a fair lock's waiter is never handed the lock")
}

/// The give-up (`FAIR_GIVE_UP`) a waiter owes unless it acquires: run with [`GiveUp::run`],
/// or, if dropped armed, by the janitor. Either way it is sent only once every attempt of the
/// waiter has answered (`settled`), or an attempt still in flight could queue the waiter
/// again after it left.
struct GiveUp {
    /// `None` once disarmed or run.
    job: Option<GiveUpJob>,
    janitor: Janitor,
}

struct GiveUpJob {
    redis: Arc<crate::transport::Redis>,
    lock: String,
    keys: [String; 2],
    args: [String; 2],
    /// Closed when the last attempt's sender is dropped (nothing is ever sent on it).
    settled: mpsc::Receiver<Infallible>,
}

impl GiveUp {
    /// The give-up of `field` queued with wait time `wait_ms`.
    fn new(
        client: &ClientInner,
        name: &str,
        field: &str,
        wait_ms: u64,
        settled: mpsc::Receiver<Infallible>,
    ) -> GiveUp {
        let job = GiveUpJob {
            redis: Arc::clone(&client.redis),
            lock: name.to_owned(),
            keys: [name::fair_queue_key(name), name::fair_timeout_key(name)],
            args: [field.to_owned(), wait_ms.to_string()],
            settled,
        };
        GiveUp {
            job: Some(job),
            janitor: client.janitor.clone(),
        }
    }

    /// The waiter acquired: the script took it out of the queue.
    fn disarm(mut self) {
        self.job = None;
    }

    /// Leaves the queue now; or, while an attempt is still in flight (the wait ran out during
    /// a slow call), in the background once it answered, so that the caller's bound holds.
    /// Cancel safe: once started, the janitor finishes it.
    async fn run(mut self) {
        let Some(mut job) = self.job.take() else {
            return;
        };
        if job.settled.try_recv() != Err(mpsc::error::TryRecvError::Disconnected) {
            self.janitor.submit(job.settle());
            return;
        }
        let _ = InFlight::new(job.send(), None, None, self.janitor.clone()).await;
    }
}

impl GiveUpJob {
    /// Waits for the waiter's attempts to answer, then leaves the queue.
    async fn send(mut self) -> std::result::Result<Value, fred::error::Error> {
        let _ = self.settled.recv().await;
        let reply = FAIR_GIVE_UP
            .run(
                &self.redis.pool,
                &self.redis.write_options,
                &self.keys,
                &self.args,
            )
            .await;
        match &reply {
            Ok(_) => tracing::debug!(lock = %self.lock, "left the fair lock's queue"),
            Err(err) => tracing::warn!(
                lock = %self.lock,
                error = %err,
                "could not leave the fair lock's queue; the waiter's place lasts until its deadline"
            ),
        }
        reply
    }

    /// The give-up as the janitor's job.
    fn settle(self) -> Job {
        let reply: BoxFuture<'static, _> = Box::pin(self.send());
        Job::Settle {
            reply,
            undo: None,
            call: None,
        }
    }
}

impl Drop for GiveUp {
    fn drop(&mut self) {
        if let Some(job) = self.job.take() {
            self.janitor.submit(job.settle());
        }
    }
}

/// One hold of a fair lock, released when dropped; the last hold's release tells the next
/// waiter in line. The shared [`Guard`](crate::Guard): everything is as
/// [`LockGuard`](crate::LockGuard)'s, with the fair lock's release.
///
/// ```no_run
/// # async fn demo(lock: ferrisson::FairLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::FairGuard = lock.lock().await?;
/// // ... the critical section ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type FairGuard = super::held::Guard<FairLock>;

/// Compile-time checks that the fair lock's handles, guards and futures cross tasks and threads.
#[cfg(test)]
mod send_sync {
    use super::*;

    fn send_sync_static<T: Send + Sync + 'static>() {}
    fn send<T: Send>(_: &T) {}

    #[test]
    fn handles_and_guards_are_send_sync_static() {
        send_sync_static::<FairLock>();
        send_sync_static::<FairGuard>();
    }

    #[allow(dead_code)] // only type-checked: the futures are never run
    fn futures_are_send(lock: FairLock, guard: FairGuard) {
        send(&lock.lock());
        send(&lock.try_lock());
        send(&lock.try_lock_for(Duration::from_secs(1), None));
        send(&lock.unlock());
        send(&lock.force_unlock());
        send(&lock.delete());
        send(&guard.lost());
        send(&guard.unlock());
    }
}
