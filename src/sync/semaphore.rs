//! The semaphore, Redisson's `RSemaphore` (protocol §10): a string integer of available permits
//! at the semaphore's name, changed by `lua/semaphore.lua`, and the channel `redisson_sc:` +
//! T(name) on which every increase publishes the permits now available.

use arcstr::ArcStr;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;

use super::{check_name, get, integer, unexpected, write, GiveBack, Taken};
use crate::error::{Error, Result};
use crate::kit::handoff::Receives;
use crate::kit::wait::TryOutcome;
use crate::kit::{Acquisition, Attempt, Client, ClientInner};
use crate::name;
use crate::transport::script::lua_scripts;
use crate::transport::script::{encode, Encoded, GiveBackScript, Script};

lua_scripts! {
    ["semaphore.lua"];
    /// tryAcquire(p): 1 taken, 0 too few permits.
    static ACQUIRE = ("semaphore_acquire", "return try_acquire(KEYS[1], ARGV[1])\n");
    static RELEASE_SCRIPT = ("semaphore_release",
        "return release(KEYS[1], KEYS[2], ARGV[1], ARGV[2])\n");
    static TRY_SET = ("semaphore_try_set",
        "return try_set(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])\n");
    static ADD = ("semaphore_add", "return add(KEYS[1], KEYS[2], ARGV[1], ARGV[2])\n");
    static DRAIN = ("semaphore_drain", "return drain(KEYS[1])\n");
    static DELETE = ("semaphore_delete", "return delete(KEYS[1])\n");
}

/// `p` permits of a semaphore to give back (`release`, synced as every release): a dropped
/// guard's, a cancelled acquire's, or a rollback's.
struct Permits {
    name: ArcStr,
    permits: u64,
}

impl super::GiveBack for Permits {
    const SCRIPT: &'static Script = &RELEASE_SCRIPT;
    const IF_LOST: &'static str = "they stay taken until someone releases them";
    // A second give-back adds permits that nobody took.
    const IDEMPOTENT: bool = false;

    /// Gives permits to this client's waiters in line first (no call to Redis).
    fn hand_over(mut self, client: &ClientInner) -> Option<Self> {
        self.permits -= client.handoffs.hand_permits(&self.name, self.permits);
        (self.permits > 0).then_some(self)
    }

    fn name(&self) -> &ArcStr {
        &self.name
    }

    fn encoded(&self, publish: &'static str) -> Encoded {
        encode_give_back(&self.name, self.permits, publish)
    }
}

/// How permits handed to a waiter that left go back to Redis (`RELEASE_SCRIPT`).
static GIVE_BACK: GiveBackScript = GiveBackScript {
    script: &RELEASE_SCRIPT,
    encode: encode_give_back,
};

/// `release`'s keys and arguments: give back `permits` of semaphore `name`.
fn encode_give_back(name: &str, permits: u64, publish: &'static str) -> Encoded {
    let channel = name::semaphore_channel(name);
    encode(&[name, &channel], &[&permits.to_string(), publish])
}

impl std::fmt::Display for Permits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} permits of semaphore `{}`", self.permits, self.name)
    }
}

/// Whether `ACQUIRE` took the permits.
fn took(reply: &Value) -> bool {
    matches!(reply, Value::Integer(1))
}

/// A distributed counting semaphore on the same Redis keys as Java Redisson's `RSemaphore`.
///
/// The semaphore is a string integer at its name: the permits available. It has no owners:
/// anyone may release permits, also permits nobody acquired (Redisson's semantics). It does not
/// exist until [`try_set_permits`](Semaphore::try_set_permits) (or a release, or
/// [`add_permits`](Semaphore::add_permits)) creates it; until then it has no permits.
///
/// [`acquire`](Semaphore::acquire) waits for permits and returns a [`SemaphorePermits`] guard
/// (as tokio's `SemaphorePermit`): release them with [`SemaphorePermits::release`], by dropping
/// the guard, or keep them taken with [`SemaphorePermits::forget`] for a later
/// [`release`](Semaphore::release), possibly by another process. Every increase publishes the
/// permits now available on `redisson_sc:{name}`, which wakes waiters here and in Java.
///
/// # Cancel safety
/// Every acquire is cancel safe: dropping it never loses permits (permits a dropped call took
/// on the server are given back in the background). The other operations are cancel safe too:
/// once sent, they complete. An operation that fails as [`Error::Unavailable`] or
/// [`Error::Timeout`] after it was sent has an unknown outcome (an acquire may have taken its
/// permits; nothing tells which), as with Redisson.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let semaphore = client.semaphore("uploads");
/// semaphore.try_set_permits(3).await?; // once; later calls find it set
///
/// let permits = semaphore.acquire(1).await?; // waits while all 3 are taken
/// // ... at most 3 holders here at a time, across processes ...
/// permits.release().await?; // or drop(permits): released in the background
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Arc<ClientInner>,
    name: ArcStr,
}

impl Client {
    /// A handle to the semaphore named `name` (Redisson's `getSemaphore(name)`).
    ///
    /// This sends nothing to Redis. An empty name is reported by the semaphore's operations as
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let semaphore = client.semaphore("uploads");
    /// assert_eq!(semaphore.name(), "uploads");
    /// # }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        Semaphore {
            client: Arc::clone(&self.inner),
            name: ArcStr::from(name.into()),
        }
    }
}

impl Semaphore {
    /// The semaphore's name, which is also its Redis key.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.semaphore("uploads").name(), "uploads");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes `permits` permits, waiting as long as it takes for them (Redisson's
    /// `acquire(permits)`). Taking 0 permits succeeds at once and sends nothing.
    ///
    /// Each attempt takes all `permits` or none (one script); a waiter is woken by the messages
    /// of releases, [`add_permits`](Semaphore::add_permits) and
    /// [`try_set_permits`](Semaphore::try_set_permits), here or in Java, and never polls.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped acquire never takes permits for good (see [`Semaphore`]).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// let permits = semaphore.acquire(2).await?;
    /// assert_eq!(permits.permits(), 2);
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, permits: u64) -> Result<SemaphorePermits> {
        self.acquire_loop(permits, None)
            .await?
            .ok_or(Error::Timeout(Duration::ZERO))
    }

    /// Takes `permits` permits if they are available now; `Busy` otherwise (Redisson's
    /// `tryAcquire(permits)`). Taking 0 permits succeeds at once and sends nothing.
    ///
    /// # Cancel safety
    /// Cancel safe (see [`Semaphore`]).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// if let Some(permits) = semaphore.try_acquire(1).await?.acquired() {
    ///     permits.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, permits: u64) -> Result<Attempt<SemaphorePermits>> {
        self.acquire_loop(permits, Some(Duration::ZERO))
            .await
            .map(Attempt::from)
    }

    /// Takes `permits` permits, waiting at most `wait` for them (Redisson's
    /// `tryAcquire(permits, waitTime)`); `Busy` when the wait ran out first.
    ///
    /// # Cancel safety
    /// Cancel safe (see [`Semaphore`]).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// match semaphore.try_acquire_for(1, Duration::from_millis(500)).await? {
    ///     ferrisson::Attempt::Acquired(permits) => permits.release().await?,
    ///     ferrisson::Attempt::Busy => println!("no permit within 500 ms"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        permits: u64,
        wait: Duration,
    ) -> Result<Attempt<SemaphorePermits>> {
        self.acquire_loop(permits, Some(wait))
            .await
            .map(Attempt::from)
    }

    /// Adds `permits` permits (`INCRBY`) and publishes the new count, whoever took them
    /// (Redisson's `release(permits)`): for permits kept with [`SemaphorePermits::forget`], or
    /// taken elsewhere. `permits` must be positive. Creates the semaphore when absent.
    /// [`Error::ReleaseUnknown`] when the release failed after it may have reached Redis: the
    /// permits may or may not have been given back (releasing again could add them twice).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(1).await?.forget();
    /// // ... later, anywhere:
    /// semaphore.release(1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(&self, permits: u64) -> Result<()> {
        self.check()?;
        if permits == 0 {
            return Err(Error::InvalidArgument(
                "a semaphore release needs at least 1 permit".into(),
            ));
        }
        integer(permits, "permits")?;
        send_release(&self.client, self.permits(permits)).await
    }

    /// Sets the number of permits if the semaphore does not exist yet, and publishes it;
    /// whether it did (Redisson's `trySetPermits(permits)`).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// assert!(semaphore.try_set_permits(3).await?);
    /// assert!(!semaphore.try_set_permits(5).await?, "set already");
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits(&self, permits: u64) -> Result<bool> {
        self.try_set(permits, None).await
    }

    /// [`try_set_permits`](Semaphore::try_set_permits) with a time to live: the semaphore key
    /// expires after `ttl` (`SET .. PX`; Redisson 3.29.0's `trySetPermits(permits, ttl)`). A
    /// later [`add_permits`](Semaphore::add_permits) clears the TTL, as in Redisson.
    /// `ttl` must be at least 1 ms.
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// semaphore.try_set_permits_with_ttl(3, Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits_with_ttl(&self, permits: u64, ttl: Duration) -> Result<bool> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 || integer(ms, "ttl").is_err() {
            return Err(Error::InvalidArgument(format!(
                "a semaphore's ttl must be from 1 ms to i64::MAX ms: {ttl:?}"
            )));
        }
        self.try_set(permits, Some(ms)).await
    }

    /// Adds `delta` permits, or removes them when negative (the count may go below zero), and
    /// publishes the new count (Redisson's `addPermits(delta)`). Creates the semaphore when
    /// absent, and clears a TTL it had (`SET`, as Redisson's).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// semaphore.add_permits(2).await?;
    /// semaphore.add_permits(-1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, delta: i64) -> Result<()> {
        self.check()?;
        let delta = delta.to_string();
        let channel = self.channel();
        let mode = self.client.redis.settings.publish_arg;
        let keys = [&*self.name, &channel];
        match write(&self.client, &self.name, &ADD, &keys, &[&delta, mode]).await? {
            Value::Integer(_) => Ok(()),
            other => Err(unexpected("semaphore add", &other)),
        }
    }

    /// Takes every available permit and returns how many there were (Redisson's
    /// `drainPermits()`); 0 when the semaphore does not exist. A negative count is set to 0 and
    /// returned as it was.
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes (and its permits are taken).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// let taken = semaphore.drain_permits().await?;
    /// semaphore.add_permits(taken).await?; // give them back
    /// # Ok(()) }
    /// ```
    pub async fn drain_permits(&self) -> Result<i64> {
        self.check()?;
        match write(&self.client, &self.name, &DRAIN, &[&self.name], &[]).await? {
            Value::Integer(drained) => Ok(drained),
            other => Err(unexpected("semaphore drain", &other)),
        }
    }

    /// The permits available now (`GET`; Redisson's `availablePermits()`): 0 when the semaphore
    /// does not exist, negative after [`add_permits`](Semaphore::add_permits) took more than
    /// there were.
    ///
    /// # Cancel safety
    /// Cancel safe: a read.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// println!("{} permits free", semaphore.available_permits().await?);
    /// # Ok(()) }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        self.check()?;
        Ok(get(&self.client, &self.name).await?.unwrap_or(0))
    }

    /// Deletes the semaphore (its permits with it); whether it existed. Publishes nothing, as
    /// Redisson's `delete()`. Unlike Redisson's, a key of another type is left alone
    /// ([`Error::WrongType`]).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// semaphore.delete().await?;
    /// assert_eq!(semaphore.available_permits().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        self.check()?;
        match write(&self.client, &self.name, &DELETE, &[&self.name], &[]).await? {
            Value::Integer(deleted) => Ok(deleted > 0),
            other => Err(unexpected("semaphore delete", &other)),
        }
    }

    async fn try_set(&self, permits: u64, ttl_ms: Option<u64>) -> Result<bool> {
        self.check()?;
        let permits = integer(permits, "permits")?.to_string();
        let channel = self.channel();
        let mode = self.client.redis.settings.publish_arg;
        let ttl = ttl_ms.map(|ms| ms.to_string());
        let mut args = vec![permits.as_str(), mode];
        args.extend(ttl.as_deref());
        let keys = [&*self.name, &channel];
        match write(&self.client, &self.name, &TRY_SET, &keys, &args).await? {
            Value::Integer(set) => Ok(set == 1),
            other => Err(unexpected("semaphore try-set", &other)),
        }
    }

    /// The acquire path: `wait` None = no limit. `Ok(None)`: the wait ran out.
    async fn acquire_loop(
        &self,
        permits: u64,
        wait: Option<Duration>,
    ) -> Result<Option<SemaphorePermits>> {
        self.check()?;
        integer(permits, "permits")?;
        if permits == 0 {
            let immediate = Acquisition::immediate(0);
            return Ok(Some(SemaphorePermits::new(self.clone(), 0, immediate)));
        }
        let span = tracing::debug_span!("ferrisson.acquire", semaphore = %self.name, permits);
        let attempt = || self.attempt(permits);
        // A guard of this client may give its permits straight to this waiter.
        let adopt = |_sent_at, _token| {
            SemaphorePermits::new(self.clone(), permits, Acquisition::immediate(0))
        };
        let hand_off = Some((permits, adopt));
        let acquired =
            super::acquire_loop(&self.client, &self.name, wait, attempt, hand_off, span).await?;
        Ok(acquired.map(|(mut permits, acquisition)| {
            permits.acquisition = acquisition;
            permits
        }))
    }

    /// One run of `ACQUIRE` ([`super::take`]). Too few permits is `Busy(-1)`: no TTL to wait
    /// for, only a message.
    async fn attempt(&self, permits: u64) -> Result<TryOutcome<SemaphorePermits>> {
        let encoded = encode(&[&*self.name], &[&permits.to_string()]);
        let release = self.permits(permits);
        let reply = super::take(&self.client, &ACQUIRE, encoded, release, took)
            .await
            .map_err(|err| self.client.redis_error(&self.name, err))?;
        match reply {
            Value::Integer(1) => {
                let guard = SemaphorePermits::new(self.clone(), permits, Acquisition::immediate(1));
                Ok(TryOutcome::Acquired(guard, false))
            }
            Value::Integer(0) => Ok(TryOutcome::Busy(-1)),
            other => Err(unexpected("semaphore acquire", &other)),
        }
    }

    fn permits(&self, permits: u64) -> Permits {
        Permits {
            name: ArcStr::clone(&self.name),
            permits,
        }
    }

    fn check(&self) -> Result<()> {
        check_name(&self.client, "semaphore", &self.name, || [self.channel()])
    }

    fn channel(&self) -> String {
        name::semaphore_channel(&self.name)
    }
}

/// Runs `release` (`RELEASE`, synced when configured) as [`super::give_back_now`] does; when its
/// message reached waiters of other clients, this client gives way to them (`give_way.rs`), as
/// after a lock's release.
///
/// # Cancel safety
/// Cancel safe: once sent, the janitor finishes it.
async fn send_release(client: &ClientInner, release: Permits) -> Result<()> {
    let handoffs = &client.handoffs;
    let semaphore = ArcStr::clone(&release.name);
    let channel = || name::semaphore_channel(&semaphore);
    // Unlike after a lock's release, this client's attempts do not wait for the outcome of a
    // release in flight: with several permits, several releases are in flight at once, and
    // every attempt would wait behind them (the family scenario's 8 permits among 16 tasks ran
    // at 0.65-0.69 x the rate before this hand-off with that wait, 0.99-1.27 x without).
    let plain = handoffs.plain_release(&semaphore, channel, false);
    match super::give_back_now(client, release).await? {
        Value::Integer(reached) if reached >= 1 => {
            if let Some(plain) = plain {
                plain.settle(reached.unsigned_abs() - 1);
            }
            Ok(())
        }
        other => Err(unexpected("semaphore release", &other)),
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .finish()
    }
}

/// Permits taken from a [`Semaphore`], given back when dropped (tokio's `SemaphorePermit` is
/// the model).
///
/// [`release`](SemaphorePermits::release) gives them back now; dropping the guard gives them
/// back in the background (the client's janitor task, so a drop never blocks); either hands
/// them to this client's waiters in line first;
/// [`forget`](SemaphorePermits::forget) keeps them taken, Redisson style, for a later
/// [`Semaphore::release`] by anyone.
///
/// ```no_run
/// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
/// let permits = semaphore.acquire(2).await?;
/// // ... the work the permits allow ...
/// permits.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard gives the permits back at once"]
#[clippy::has_significant_drop]
pub struct SemaphorePermits {
    semaphore: Semaphore,
    permits: u64,
    acquisition: Acquisition,
    /// What a drop gives back: nothing once released or forgotten.
    taken: Taken<Permits>,
}

/// A semaphore's permits have no lease: they never lapse. A guard of this client may hand them
/// to a waiter.
impl crate::kit::wait::Lapse for SemaphorePermits {
    const RECEIVES: Receives = Receives::Permits(&GIVE_BACK);

    fn lapsed(&self) -> bool {
        false
    }
}

impl SemaphorePermits {
    fn new(semaphore: Semaphore, permits: u64, acquisition: Acquisition) -> SemaphorePermits {
        let taken = Taken {
            client: Arc::clone(&semaphore.client),
            release: (permits > 0).then(|| semaphore.permits(permits)),
        };
        SemaphorePermits {
            semaphore,
            permits,
            acquisition,
            taken,
        }
    }

    /// How many permits this guard holds.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// assert_eq!(semaphore.acquire(3).await?.permits(), 3);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u64 {
        self.permits
    }

    /// Gives the permits back now: first to this client's waiters in line for them (a local
    /// hand-off, no call to Redis: the permits stay taken there and change hands here, within
    /// the client's [`max_local_handoffs`](crate::Config::max_local_handoffs) budget), the rest
    /// to Redis (one `release`, publishing the new count). [`Error::ReleaseUnknown`] when the
    /// release failed after it may have reached Redis: the permits may still be taken.
    ///
    /// # Cancel safety
    /// Cancel safe: a release dropped before it was sent is sent in the background, as for a
    /// dropped guard; once sent, it completes.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(1).await?.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        // From here `send_release`'s in-flight call finishes the release even if this future
        // is dropped; before (never polled), the guard's drop sends it.
        let client = &self.semaphore.client;
        match self.taken.release.take().and_then(|r| r.hand_over(client)) {
            Some(release) => send_release(client, release).await,
            None => Ok(()),
        }
    }

    /// Keeps the permits taken without a guard (tokio's `SemaphorePermit::forget`): they stay
    /// taken until someone calls [`Semaphore::release`].
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(1).await?.forget();
    /// semaphore.release(1).await?; // later, possibly in another process
    /// # Ok(()) }
    /// ```
    pub fn forget(mut self) {
        self.taken.release.take();
    }

    /// How the acquisition went (its wait, what woke it, its attempts).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// println!("{:?}", semaphore.acquire(1).await?.acquisition());
    /// # Ok(()) }
    /// ```
    pub fn acquisition(&self) -> &Acquisition {
        &self.acquisition
    }

    /// The semaphore the permits were taken from.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::Semaphore) -> ferrisson::Result<()> {
    /// assert_eq!(semaphore.acquire(1).await?.semaphore().name(), semaphore.name());
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }
}

impl std::fmt::Debug for SemaphorePermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphorePermits")
            .field("semaphore", &self.semaphore.name)
            .field("permits", &self.permits)
            .field("acquisition", &self.acquisition)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync_static<T: Send + Sync + 'static>() {}

    #[test]
    fn handles_and_guards_are_send_sync_static() {
        send_sync_static::<Semaphore>();
        send_sync_static::<SemaphorePermits>();
    }

    #[allow(dead_code)] // only type-checked: the futures are never run
    fn futures_are_send(semaphore: Semaphore, permits: SemaphorePermits) {
        fn send<T: Send>(_: &T) {}
        send(&semaphore.acquire(1));
        send(&semaphore.try_acquire_for(1, Duration::from_secs(1)));
        send(&semaphore.release(1));
        send(&semaphore.add_permits(-1));
        send(&permits.release());
    }
}
