//! The fair lock, Redisson's `RFairLock` (protocol §4): the reentrant lock's hash, plus a queue
//! of waiters served in arrival order across every client.

use arcstr::ArcStr;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::clock::epoch_ms;
use crate::error::{Error, Result};
use crate::kit::handoff::Receives;
use crate::kit::janitor::{Janitor, Job, Release};
use crate::kit::protocol::{sealed, AcquireCall, Protocol, Waits};
use crate::kit::wait::lock_wake;
use crate::kit::{Client, ClientInner, Guard, Handle, InFlight};
use crate::name;
use crate::transport::script::lua_scripts;
use crate::transport::script::{self, Encoded, Heir, ReleaseScript, Script, ScriptHandOff};

lua_scripts! {
    ["lib/fair_prune.lua", "fair_lock.lua"];
    /// Acquire, re-enter, queue, or try once (`acquire`, §4.3–§4.4).
    static FAIR_ACQUIRE = ("fair_acquire",
        "return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])\n");
    /// Release one hold and tell the queue's head (`release`, §4.6).
    static FAIR_RELEASE_SCRIPT = ("fair_release",
        "return release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4], \
         ARGV[5], ARGV[6], ARGV[7])\n");
    /// Leave the queue (`give_up`, §4.5).
    static FAIR_GIVE_UP = ("fair_give_up", "return give_up(KEYS[1], KEYS[2], ARGV[1], ARGV[2])\n");
    /// Delete the lock whoever holds it and tell the queue's head (`force_release`, §4.7).
    static FAIR_FORCE_RELEASE = ("fair_force_release",
        "return force_release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])\n");
}

/// The fair lock's release, for guards, dropped guards, undone acquires and rollbacks.
static FAIR_RELEASE: ReleaseScript = ReleaseScript {
    script: &FAIR_RELEASE_SCRIPT,
    encode: encode_release,
    hand_off: Some(ScriptHandOff {
        encode: encode_hand_off,
        channel: name::lock_channel,
    }),
};

/// Redisson's `fairLockWaitTimeout` default: the wait time W of a waiter without a bound.
const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_millis(300_000);

/// The largest W: deadlines (the client's epoch ms + the lock's TTL + W) must stay exact in
/// Lua's doubles (2^53), far beyond any real wait (about 31 years).
const MAX_WAIT_MS: u64 = 1_000_000_000_000;

/// The first and the longest pause of a queued waiter that the script told the lock is free
/// while another waiter is at the head (see [`FairLock`]'s docs, "Waiting").
const FIRST_PAUSE_MS: u64 = 10;
const MAX_PAUSE_MS: u64 = 1_000;

/// The fair lock's [`Protocol`], with the wait time W of acquires without a bound: [`FairLock`]
/// is `Handle<Fair>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fair {
    wait_timeout: Duration,
}

/// A distributed lock served in arrival order, on the same Redis keys as Java Redisson's
/// `RFairLock`.
///
/// Acquires that find the lock held queue up, across every client (Java or Rust), and get the
/// lock in the order they queued. It is reentrant per [`Owner`](crate::Owner), as [`Lock`](crate::Lock) is, and its hash is
/// the reentrant lock's: a [`Lock`](crate::Lock) or Java `RLock` of the same name sees it held.
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
/// wait time W: the wait of [`try_lock_within`](FairLock::try_lock_within), otherwise the lock's wait
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
/// When the waiter at the head of the queue belongs to the client that releases, the release
/// hands the lock to it in the same script, doing what that waiter's own acquire would have
/// done (it leaves the queue, and those behind it move up by its W); nobody is told, and the
/// waiter needs no attempt of its own. Any other head is told, as Redisson does. So the queue's
/// order holds across every client: a hand-off never passes a waiter of another client.
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
/// if let Some(guard) = lock.try_lock_within(Duration::from_secs(2)).await?.acquired() {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
pub type FairLock = Handle<Fair>;

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
pub type FairGuard = Guard<Fair>;

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
        Handle::new(Arc::clone(&self.inner), name.into(), Fair::DEFAULT)
    }
}

/// A lock on the fair lock's keys and queue (§4): the fair lock, and a lock that differs from
/// it only in its acquire script (the non-reentrant fair lock). Everything else (waiting on
/// each waiter's channel, the queue give-up, the release, the force release, the wait time W
/// and `delete`) is the fair lock's, given to each through a blanket [`Protocol`].
pub trait Queued: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The handle's and the guard's names in `Debug` output.
    const NAMES: (&'static str, &'static str);
    /// The acquire script: called as `FAIR_ACQUIRE` is, replying as it does.
    const ACQUIRE: &'static Script;
    /// The wait time W of acquires without a bound of their own.
    fn wait_timeout(&self) -> Duration;
    /// The same primitive with another wait time W.
    fn with_wait_timeout(&self, timeout: Duration) -> Self;
    /// The error for a failed script call or query (see [`Protocol::script_error`]).
    fn script_error(&self, lock: &Handle<Self>, err: fred::error::Error) -> Error
    where
        Self: Protocol,
    {
        lock.redis_error(err)
    }
}

impl Queued for Fair {
    const NAMES: (&'static str, &'static str) = ("FairLock", "FairGuard");
    const ACQUIRE: &'static Script = &FAIR_ACQUIRE;
    fn wait_timeout(&self) -> Duration {
        self.wait_timeout
    }
    fn with_wait_timeout(&self, wait_timeout: Duration) -> Fair {
        Fair { wait_timeout }
    }
}

impl Fair {
    /// The fair lock's default wait time W.
    pub(super) const DEFAULT: Fair = Fair {
        wait_timeout: DEFAULT_WAIT_TIMEOUT,
    };
}

impl<Q: Queued + Protocol> Handle<Q> {
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
    pub fn with_wait_timeout(&self, timeout: Duration) -> Result<Handle<Q>> {
        let ms = timeout.as_millis();
        if ms == 0 || ms > u128::from(MAX_WAIT_MS) {
            return Err(Error::InvalidArgument(format!(
                "a fair lock's wait timeout must be between 1 ms and {MAX_WAIT_MS} ms, got {timeout:?}"
            )));
        }
        Ok(self.as_kind(self.kind.with_wait_timeout(timeout)))
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
        self.kind.wait_timeout()
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
        let name = self.name();
        let (queue, timeouts) = (name::fair_queue_key(name), name::fair_timeout_key(name));
        let deleted: u64 = self.query("DEL", &[&queue, &timeouts]).await?;
        Ok(deleted > 0)
    }
}

/// What one acquire of a fair lock keeps across its attempts.
pub struct Acquiring {
    /// W: the bounded wait itself (at least 1 ms, at most `MAX_WAIT_MS`), else the timeout.
    wait_ms: u64,
    /// A lone try: try once without queueing.
    once: bool,
    /// The next pause of a waiter told the lock is free while another waiter is at the head.
    pause: AtomicU64,
    /// Each attempt's script call holds a clone until it answered (also when the janitor
    /// settles it for a dropped attempt): the give-up waits for them, or an attempt still in
    /// flight could queue the waiter again after it left.
    in_flight: mpsc::Sender<Infallible>,
    /// The give-up this waiter owes unless it acquires (none for a lone try, which never queues).
    give_up: Option<GiveUp>,
}

impl<Q: Queued> sealed::Sealed for Q {}

impl<Q: Queued> Protocol for Q {
    type Extra = ();
    type Acquiring = Acquiring;
    const NAMES: (&'static str, &'static str) = <Q as Queued>::NAMES;
    const RELEASE: Option<&'static ReleaseScript> = Some(&FAIR_RELEASE);
    const RECEIVES: Receives = Receives::HeadOfQueue(&FAIR_RELEASE);

    /// Each waiter listens on its own channel. A release by this client hands the lock to a
    /// local waiter only when that waiter heads the queue in Redis, so nobody's turn is jumped.
    fn waits(&self) -> Waits<()> {
        Waits::Channel {
            channel: name::fair_waiter_channel,
            wake: lock_wake,
            hand_off: Some(|_| ()),
        }
    }

    fn queue_wait_ms(acquiring: &Acquiring) -> u64 {
        acquiring.wait_ms
    }

    /// A waiter that may queue owes a give-up unless it acquires (now, or from the janitor if
    /// the acquire is dropped).
    fn begin(&self, lock: &Handle<Q>, field: &ArcStr, wait: Option<Duration>) -> Acquiring {
        let once = wait == Some(Duration::ZERO);
        let wait_ms = match wait {
            Some(wait) if !once => (wait.as_millis() as u64).clamp(1, MAX_WAIT_MS),
            _ => self.wait_timeout().as_millis() as u64,
        };
        let (in_flight, settled) = mpsc::channel::<Infallible>(1);
        let give_up =
            (!once).then(|| GiveUp::new(lock.client(), lock.name(), field, wait_ms, settled));
        Acquiring {
            wait_ms,
            once,
            pause: AtomicU64::new(FIRST_PAUSE_MS),
            in_flight,
            give_up,
        }
    }

    fn send(
        &self,
        call: AcquireCall<'_, Self>,
    ) -> BoxFuture<'static, Result<Value, fred::error::Error>> {
        let name = call.lock.name();
        let acquiring = call.acquiring;
        let keys = vec![
            name.to_owned(),
            name::fair_queue_key(name),
            name::fair_timeout_key(name),
        ];
        let args = vec![
            call.lease_arg(),
            call.field.to_string(),
            acquiring.wait_ms.to_string(),
            epoch_ms().to_string(),
            if acquiring.once { "1" } else { "0" }.to_owned(),
        ];
        let reply = call.run(Q::ACQUIRE, keys, args);
        let in_flight = acquiring.in_flight.clone();
        Box::pin(async move {
            let reply = reply.await;
            drop(in_flight);
            reply
        })
    }

    fn script_error(&self, lock: &Handle<Q>, err: fred::error::Error) -> Error {
        Queued::script_error(self, lock, err)
    }

    /// Free, but another waiter is at the head (or the lock has no TTL): wait for this
    /// waiter's channel a little, longer each time, instead of re-polling.
    fn busy(&self, ttl: i64, acquiring: &Acquiring) -> i64 {
        if ttl > 0 {
            acquiring.pause.store(FIRST_PAUSE_MS, Ordering::Relaxed);
            return ttl;
        }
        let wait = acquiring.pause.load(Ordering::Relaxed);
        acquiring
            .pause
            .store((wait * 2).min(MAX_PAUSE_MS), Ordering::Relaxed);
        wait as i64
    }

    /// A waiter that acquired was taken out of the queue by the script; any other leaves it.
    fn end(acquiring: Acquiring, acquired: bool) -> Option<impl Future<Output = ()> + Send> {
        let Acquiring {
            in_flight, give_up, ..
        } = acquiring;
        drop(in_flight);
        match give_up {
            Some(give_up) if acquired => {
                give_up.disarm();
                None
            }
            Some(give_up) => Some(give_up.run()),
            None => None,
        }
    }

    /// For a key of another type, the [`Error::WrongType`] of the one of the lock's three keys
    /// that is not a hash, a list and a sorted set respectively (a script's `WRONGTYPE` does
    /// not say which).
    fn explain(&self, lock: &Handle<Q>, err: Error) -> impl Future<Output = Error> + Send {
        name_wrong_type(lock.client_arc(), lock.name().to_owned(), err)
    }

    /// Deletes the lock whoever holds it and tells the queue's head (Redisson's
    /// `forceUnlock`); the queue stays.
    async fn force_release(&self, lock: &Handle<Q>) -> Result<bool> {
        let name = lock.name();
        let keys = [
            name.to_owned(),
            name::fair_queue_key(name),
            name::fair_timeout_key(name),
            name::lock_channel(name),
        ];
        let now = epoch_ms().to_string();
        let args = [now.as_str(), lock.client().redis.settings.publish_arg];
        match lock.run_flag(&FAIR_FORCE_RELEASE, true, &keys, &args).await {
            Err(err) => Err(self.explain(lock, err).await),
            flag => flag,
        }
    }
}

/// `err`, or for a key of another type the [`Error::WrongType`] of the one of the lock's three
/// keys that is not a hash, a list and a sorted set respectively.
async fn name_wrong_type(client: Arc<ClientInner>, name: String, err: Error) -> Error {
    if !matches!(err, Error::WrongType { .. }) {
        return err;
    }
    let keys = [
        (name.clone(), "hash"),
        (name::fair_queue_key(&name), "list"),
        (name::fair_timeout_key(&name), "zset"),
    ];
    for (key, expected) in keys {
        let kind: Option<String> = client.redis.query("TYPE", &key, &[]).await.ok();
        if kind.is_some_and(|kind| kind != expected && kind != "none") {
            return Error::WrongType { name: key };
        }
    }
    err
}

/// `FAIR_RELEASE`'s keys and arguments for one release.
fn encode_release(release: &Release, publish: &'static str) -> Encoded {
    encode_release_to(release, publish, None)
}

/// `FAIR_RELEASE`'s keys and arguments for a release that hands the lock to `heir` if it is
/// the queue's head.
fn encode_hand_off(release: &Release, publish: &'static str, heir: &Heir) -> Encoded {
    encode_release_to(release, publish, Some(heir))
}

fn encode_release_to(release: &Release, publish: &'static str, heir: Option<&Heir>) -> Encoded {
    let name = &*release.name;
    let keys = [
        name.to_owned(),
        name::fair_queue_key(name),
        name::fair_timeout_key(name),
        name::lock_channel(name),
    ];
    let (lease, now) = (release.lease_ms.to_string(), epoch_ms().to_string());
    let mut args = vec![lease.as_str(), &release.field, now.as_str(), publish];
    let heir_numbers = heir.map(|heir| (heir.lease_ms.to_string(), heir.wait_ms.to_string()));
    if let (Some(heir), Some((lease, wait))) = (heir, &heir_numbers) {
        args.extend([&*heir.field, lease.as_str(), wait.as_str()]);
    }
    script::encode(&keys, &args)
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
                &self.redis.settings.write_options,
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
