//! The permit-expirable semaphore, Redisson's `RPermitExpirableSemaphore` (protocol §11): a
//! semaphore whose permits each have an id and a lease of their own.

use arcstr::ArcStr;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use tokio::time::Instant;

use super::Taken;
use crate::clock::epoch_ms;
use crate::config::lease_millis;
use crate::error::{Error, Result};
use crate::kit::wait::TryOutcome;
use crate::kit::{Acquisition, Attempt, Client, ClientInner};
use crate::name;
use crate::transport::script::lua_scripts;
use crate::transport::script::{Encoded, Script, ScriptArgs};

/// The lease end Redisson writes for a permit that never expires (`nonExpirableTimeout`).
const NEVER: u64 = 922_337_203_685_477;

/// A permit has an id and an expiry of its own: a release cannot hand it over, and every
/// acquisition is its own script's.
const NO_HAND_OFF: super::HandOff<fn(Instant, u64) -> Permit> = None;

lua_scripts! {
    ["permit_semaphore.lua"];
    static ACQUIRE = ("permit_acquire",
        "return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])\n");
    static RELEASE = ("permit_release",
        "return release(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])\n");
    static TRY_SET = ("permit_try_set", "return try_set(KEYS[1], KEYS[2], ARGV[1], ARGV[2])\n");
    static ADD = ("permit_add", "return add(KEYS[1], KEYS[2], ARGV[1], ARGV[2])\n");
    static AVAILABLE = ("permit_available",
        "return available(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])\n");
    static UPDATE_LEASE = ("permit_update_lease",
        "return update_lease(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])\n");
}

/// The release of one permit, by its (checked) hex id: what `release`, a dropped [`Permit`], a
/// cancelled acquire's undo and an unreplicated acquire's rollback send.
struct PermitRelease {
    name: ArcStr,
    id: String,
    format: PermitIdFormat,
}

impl super::GiveBack for PermitRelease {
    const SCRIPT: &'static Script = &RELEASE;
    const IF_LOST: &'static str = "it comes back when its lease ends";
    // A release by id gives the permit back only while the id is out.
    const IDEMPOTENT: bool = true;

    fn name(&self) -> &ArcStr {
        &self.name
    }

    fn encoded(&self, publish: &'static str) -> Encoded {
        let name = &*self.name;
        let mut out = ScriptArgs::with_capacity(6, 3 * name.len() + 80);
        out.key(name)
            .prefixed_key(name::SEMAPHORE_CHANNEL_PREFIX, name)
            .key(&name::permit_timeout_key(name));
        self.format.member(&mut out, &self.id);
        out.number(epoch_ms()).arg(publish);
        out.finish()
    }
}

impl std::fmt::Display for PermitRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "permit {} of semaphore `{}`", self.id, self.name)
    }
}

/// How permit ids are stored in the semaphore's sorted set. Java Redisson changed it in 3.17.0,
/// and the two are not interchangeable: a permit taken in one format cannot be released in the
/// other (protocol §16.10). Choose the format of the Java services that share the semaphore
/// ([`PermitExpirableSemaphore::with_id_format`]). Either way the API shows ids as 32 lowercase
/// hex characters.
///
/// ```
/// use ferrisson::PermitIdFormat;
/// assert_eq!(PermitIdFormat::default(), PermitIdFormat::Raw);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PermitIdFormat {
    /// The id's raw 16 bytes, as Redisson 3.17.0 and later (4.x included) write it. The default.
    #[default]
    Raw,
    /// The id's 32-character hex string, as Redisson up to 3.16.x writes it.
    Hex,
}

impl PermitIdFormat {
    /// Appends the sorted-set member of the permit `hex`, already checked by [`decode_hex`].
    fn member(self, out: &mut ScriptArgs, hex: &str) {
        match (self, decode_hex(hex)) {
            (PermitIdFormat::Raw, Some(raw)) => out.bytes(&raw),
            // Redisson's hex ids are lowercase. (A Raw id that is not hex is not reached: ids
            // are checked first.)
            _ => out.arg(&hex.to_ascii_lowercase()),
        };
    }
}

/// A semaphore whose permits each carry an id and their own lease, on the same Redis keys as
/// Java Redisson's `RPermitExpirableSemaphore`.
///
/// A permit is taken with a lease (or none: it never expires); when the lease ends, the permit
/// goes back to the semaphore at the next operation that runs the reclaim step (any acquire,
/// [`available_permits`](Self::available_permits), [`update_lease_time`](Self::update_lease_time)),
/// which also wakes waiters. Permits have no owner: anyone who knows a permit's id may release
/// it ([`release`](Self::release)), from any client or process, as in Redisson.
///
/// On Redis, the name `N` holds the available permits (a string integer), `{N}:timeout` is a
/// sorted set of the permits taken (member: the id, in the semaphore's [`PermitIdFormat`];
/// score: the lease's end in epoch milliseconds from the client's clock, or 922337203685477 for
/// none), and releases are announced on `redisson_sc:{N}` with the permits now available. Leases
/// are read against the clients' clocks, so keep them synchronised (NTP).
///
/// The semaphore has no permits until they are set: [`try_set_permits`](Self::try_set_permits)
/// or [`add_permits`](Self::add_permits).
///
/// # Cancel safety
/// Every acquire method is cancel safe: a dropped acquire future never leaves a permit taken (a
/// permit whose reply is lost to cancellation is released by the client's background task).
/// Releases are cancel safe once sent: the background task finishes them.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let semaphore = client.permit_expirable_semaphore("workers");
/// semaphore.try_set_permits(2).await?;
///
/// let permit = semaphore.acquire(Some(Duration::from_secs(30))).await?; // back after 30 s at the latest
/// println!("permit {}", permit.id());
/// permit.release().await?; // or drop it: released in the background
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PermitExpirableSemaphore {
    client: Arc<ClientInner>,
    name: ArcStr,
    format: PermitIdFormat,
}

impl Client {
    /// A handle to the permit-expirable semaphore named `name` (Redisson's
    /// `getPermitExpirableSemaphore(name)`), storing permit ids in the 3.17+ format
    /// ([`PermitIdFormat::Raw`]; see [`PermitExpirableSemaphore::with_id_format`]).
    ///
    /// This sends nothing to Redis. An empty name is reported by the semaphore's operations as
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let semaphore = client.permit_expirable_semaphore("workers");
    /// assert_eq!(semaphore.name(), "workers");
    /// # }
    /// ```
    pub fn permit_expirable_semaphore(&self, name: impl Into<String>) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore {
            client: Arc::clone(&self.inner),
            name: name.into().into(),
            format: PermitIdFormat::default(),
        }
    }
}

impl PermitExpirableSemaphore {
    /// The semaphore's name, which is also the Redis key of its permit count.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.permit_expirable_semaphore("workers").name(), "workers");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How this handle stores permit ids in Redis.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// use ferrisson::PermitIdFormat;
    /// assert_eq!(client.permit_expirable_semaphore("workers").id_format(), PermitIdFormat::Raw);
    /// # }
    /// ```
    pub fn id_format(&self) -> PermitIdFormat {
        self.format
    }

    /// The same semaphore, storing permit ids in `format`: [`PermitIdFormat::Hex`] to share it
    /// with Java services on Redisson 3.16.x or older, [`PermitIdFormat::Raw`] (the default)
    /// with 3.17.0 and later. Every client of one semaphore must use the same format.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// use ferrisson::PermitIdFormat;
    /// let legacy = client.permit_expirable_semaphore("workers").with_id_format(PermitIdFormat::Hex);
    /// assert_eq!(legacy.id_format(), PermitIdFormat::Hex);
    /// # }
    /// ```
    pub fn with_id_format(&self, format: PermitIdFormat) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore {
            format,
            ..self.clone()
        }
    }

    /// Takes a permit, waiting as long as it takes; it expires after `lease`, or never with
    /// `None`. Redisson's `acquire(leaseTime)` / `acquire()`.
    ///
    /// While no permit is available the wait ends with a release message or when the first
    /// taken permit's lease ends, whichever comes first (no polling).
    ///
    /// # Cancel safety
    /// Cancel safe: dropped before it returns, it leaves no permit taken.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let permit = semaphore.acquire(Some(std::time::Duration::from_secs(10))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, lease: Option<Duration>) -> Result<Permit> {
        self.acquire_loop(lease, None)
            .await?
            .ok_or(Error::Timeout(Duration::ZERO))
    }

    /// One attempt, no waiting: a permit that expires after `lease` (or never), or
    /// [`Attempt::Busy`] when none is available. Redisson's `tryAcquire()`.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// if let Some(permit) = semaphore.try_acquire(None).await?.acquired() {
    ///     permit.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, lease: Option<Duration>) -> Result<Attempt<Permit>> {
        self.acquire_loop(lease, Some(Duration::ZERO))
            .await
            .map(Attempt::from)
    }

    /// Waits at most `wait` for a permit that expires after `lease` (or never). Redisson's
    /// `tryAcquire(waitTime, leaseTime)`.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let attempt = semaphore
    ///     .try_acquire_for(Duration::from_millis(500), Some(Duration::from_secs(10)))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<Permit>> {
        self.acquire_loop(lease, Some(wait))
            .await
            .map(Attempt::from)
    }

    /// Releases the permit `id` (from [`Permit::id`], another client, or a Java service), and
    /// wakes waiters. Redisson's `release(permitId)`.
    ///
    /// Fails with [`Error::NotHeld`] when no such permit is taken (released already, reclaimed
    /// after its lease, or never taken), and with [`Error::LeaseLost`] when the permit was still
    /// there but its lease had ended: it is given back all the same. An id that is not hex is
    /// [`Error::InvalidArgument`]. [`Error::ReleaseUnknown`] when the release failed after it
    /// may have reached Redis (also from [`try_release`](Self::try_release)).
    ///
    /// # Cancel safety
    /// Cancel safe once sent: the release completes in the background.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let id = semaphore.acquire(None).await?.forget();
    /// semaphore.release(&id).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(&self, id: &str) -> Result<()> {
        let reply = self.release_id(id).await?;
        self.release_result(reply)
    }

    /// Releases the permit `id` if it is taken and its lease has not ended: Redisson 4's
    /// `tryRelease(permitId)`. `false` when no such permit is taken, or when its lease had
    /// ended (it is given back all the same, as Redisson does).
    ///
    /// # Cancel safety
    /// Cancel safe once sent, as [`release`](Self::release).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let id = semaphore.acquire(None).await?.forget();
    /// assert!(semaphore.try_release(&id).await?);
    /// assert!(!semaphore.try_release(&id).await?);
    /// # Ok(()) }
    /// ```
    pub async fn try_release(&self, id: &str) -> Result<bool> {
        Ok(self.release_id(id).await? == Value::Integer(1))
    }

    /// Sets the number of permits if the semaphore does not exist yet, and wakes waiters;
    /// returns whether it did. Redisson's `trySetPermits(permits)`.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// assert!(semaphore.try_set_permits(3).await?);
    /// assert!(!semaphore.try_set_permits(5).await?); // set already
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        let mut args = self.args(2, 16);
        args.key(&self.name)
            .prefixed_key(name::SEMAPHORE_CHANNEL_PREFIX, &self.name)
            .number(permits.into())
            .arg(self.client.redis.settings.publish_arg);
        let reply = self.write(&TRY_SET, &args.finish()).await?;
        Ok(reply == Value::Integer(1))
    }

    /// Adds `delta` permits (fewer when negative), creating the semaphore if needed; a positive
    /// `delta` wakes up to that many waiters. Redisson's `addPermits(permits)`. Like Redisson's,
    /// it clears a TTL set on the semaphore's key.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// semaphore.add_permits(2).await?;
    /// semaphore.add_permits(-1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, delta: i64) -> Result<()> {
        let mut args = self.args(2, 24);
        args.key(&self.name)
            .prefixed_key(name::SEMAPHORE_CHANNEL_PREFIX, &self.name)
            .arg(itoa::Buffer::new().format(delta))
            .arg(self.client.redis.settings.publish_arg);
        self.write(&ADD, &args.finish()).await.map(drop)
    }

    /// The permits available now, after the reclaim step has given back every permit whose
    /// lease ended (and woken waiters for them). Redisson's `availablePermits()`. 0 when the
    /// semaphore does not exist; negative after [`add_permits`](Self::add_permits) took more
    /// than there were.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// println!("{} permits free", semaphore.available_permits().await?);
    /// # Ok(()) }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        let mut args = self.args(3, 32);
        args.key(&self.name)
            .key(&self.timeout_key())
            .prefixed_key(name::SEMAPHORE_CHANNEL_PREFIX, &self.name)
            .number(epoch_ms())
            .arg(self.client.redis.settings.publish_arg);
        let reply = self.write(&AVAILABLE, &args.finish()).await?;
        integer(&reply).ok_or_else(|| unexpected("available permits", &reply))
    }

    /// Moves the end of permit `id`'s lease to `lease` from now (`None`: it never expires),
    /// after the reclaim step; returns whether the permit was still taken. Redisson's
    /// `updateLeaseTime(permitId, leaseTime)`.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let permit = semaphore.acquire(Some(Duration::from_secs(5))).await?;
    /// assert!(semaphore.update_lease_time(permit.id(), Some(Duration::from_secs(60))).await?);
    /// # Ok(()) }
    /// ```
    pub async fn update_lease_time(&self, id: &str, lease: Option<Duration>) -> Result<bool> {
        self.check_name()?;
        check_id(id)?;
        let lease_ms = lease
            .map(|lease| lease_millis(lease, "lease"))
            .transpose()?;
        let now = epoch_ms();
        let mut args = self.args(3, 64);
        args.key(&self.name)
            .key(&self.timeout_key())
            .prefixed_key(name::SEMAPHORE_CHANNEL_PREFIX, &self.name);
        self.format.member(&mut args, id);
        args.number(deadline(now, lease_ms)?)
            .number(now)
            .arg(self.client.redis.settings.publish_arg);
        let reply = self.write(&UPDATE_LEASE, &args.finish()).await?;
        Ok(reply == Value::Integer(1))
    }

    /// Deletes the semaphore: its permit count and its set of taken permits (`DEL`; Redisson's
    /// `delete()`). Publishes nothing. Returns whether anything was deleted.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// semaphore.delete().await?;
    /// assert_eq!(semaphore.available_permits().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        self.check_name()?;
        let timeout = self.timeout_key();
        let deleted: u64 = self
            .client
            .redis
            .query("DEL", &self.name, &[&timeout])
            .await
            .map_err(|err| self.error(err))?;
        Ok(deleted > 0)
    }

    /// The acquire path: `lease` None = never expires; `wait` None = no limit.
    async fn acquire_loop(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<Permit>> {
        self.check_name()?;
        let lease_ms = lease
            .map(|lease| lease_millis(lease, "lease"))
            .transpose()?;
        if wait.is_some_and(|wait| wait.as_millis() > i64::MAX as u128) {
            return Err(Error::InvalidArgument(format!(
                "wait is too large: {wait:?}"
            )));
        }
        // Checked once here, so that no attempt fails on it.
        deadline(epoch_ms(), lease_ms)?;
        let span = tracing::debug_span!("ferrisson.acquire", semaphore = %self.name);
        let attempt = || self.attempt(lease_ms);
        let acquired =
            super::acquire_loop(&self.client, &self.name, wait, attempt, NO_HAND_OFF, span).await?;
        Ok(acquired.map(|(mut permit, acquisition)| {
            permit.acquisition = acquisition;
            permit
        }))
    }

    /// One run of the acquire script for a fresh permit id, made cancel safe: if its caller is
    /// gone when the reply comes, the janitor releases the permit it took.
    async fn attempt(&self, lease_ms: Option<u64>) -> Result<TryOutcome<Permit>> {
        // 32 lowercase hex digits, as Redisson shows ids.
        let id = uuid::Uuid::new_v4().simple().to_string();
        let now = epoch_ms();
        let mut args = self.args(3, 128);
        args.key(&self.name)
            .key(&self.timeout_key())
            .prefixed_key(name::SEMAPHORE_CHANNEL_PREFIX, &self.name)
            .number(deadline(now, lease_ms)?)
            .number(now)
            .number(NEVER)
            .arg(self.client.redis.settings.publish_arg);
        self.format.member(&mut args, &id);
        let release = self.release_of(&id);
        let sent_at = Instant::now();
        let reply = super::take(&self.client, &ACQUIRE, args.finish(), release, taken)
            .await
            .map_err(|err| self.error(err))?;
        match read_reply(&reply) {
            Some(Reply::Taken) => {
                let lease_ends =
                    lease_ms.and_then(|ms| sent_at.checked_add(Duration::from_millis(ms)));
                let taken = Taken {
                    client: Arc::clone(&self.client),
                    release: Some(self.release_of(&id)),
                };
                let permit = Permit {
                    semaphore: self.clone(),
                    id,
                    lease_ends,
                    acquisition: Acquisition::immediate(1),
                    taken,
                };
                Ok(TryOutcome::Acquired(permit, false))
            }
            // Retry when the first permit's lease ends (at once if it has already: the next
            // attempt's reclaim step takes it back).
            Some(Reply::NextExpiry(at)) => Ok(TryOutcome::Busy(
                i64::try_from(at.saturating_sub(epoch_ms())).unwrap_or(i64::MAX),
            )),
            // No permit expires: only a release message helps.
            Some(Reply::None) => Ok(TryOutcome::Busy(-1)),
            None => Err(unexpected("acquire", &reply)),
        }
    }

    /// Runs the release script for `id` (checked), cancel safe once sent.
    async fn release_id(&self, id: &str) -> Result<Value> {
        self.check_name()?;
        check_id(id)?;
        self.send_release(self.release_of(id)).await
    }

    async fn send_release(&self, release: PermitRelease) -> Result<Value> {
        let reply = super::give_back_now(&self.client, release).await?;
        tracing::debug!(semaphore = %self.name, reply = %crate::shown::Reply(&reply), "released a permit");
        Ok(reply)
    }

    /// What `release` makes of the release script's reply (`lua/permit_semaphore.lua`).
    fn release_result(&self, reply: Value) -> Result<()> {
        let name = self.name.to_string();
        match reply {
            Value::Integer(1) => Ok(()),
            Value::Integer(0) => Err(Error::LeaseLost { name }),
            Value::Null => Err(Error::NotHeld { name }),
            other => Err(unexpected("release", &other)),
        }
    }

    /// The release of permit `id` (checked hex).
    fn release_of(&self, id: &str) -> PermitRelease {
        PermitRelease {
            name: ArcStr::clone(&self.name),
            id: id.to_owned(),
            format: self.format,
        }
    }

    /// Runs a script that changes the semaphore (not an acquire), synced with the replicas as
    /// Redisson 3.21+ does; an unacknowledged write only logs, as a release does.
    async fn write(&self, script: &'static Script, encoded: &Encoded) -> Result<Value> {
        self.check_name()?;
        (self.client.redis)
            .run_write(&self.name, script, encoded)
            .await
            .map_err(|err| self.error(err))
    }

    fn args(&self, keys: usize, extra: usize) -> ScriptArgs {
        ScriptArgs::with_capacity(keys + 5, 3 * self.name.len() + extra)
    }

    fn timeout_key(&self) -> String {
        name::permit_timeout_key(&self.name)
    }

    fn check_name(&self) -> Result<()> {
        let others = || [name::semaphore_channel(&self.name), self.timeout_key()];
        super::check_name(&self.client, "semaphore", &self.name, others)
    }

    fn error(&self, err: fred::error::Error) -> Error {
        self.client.redis_error(&self.name, err)
    }
}

impl std::fmt::Debug for PermitExpirableSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitExpirableSemaphore")
            .field("name", &self.name())
            .field("id_format", &self.format)
            .finish()
    }
}

/// The acquire script's reply.
enum Reply {
    /// `OK`: the permit was taken.
    Taken,
    /// `:<score>`: none free; the first taken permit's lease ends at this epoch ms.
    NextExpiry(u64),
    /// nil: none free, and no taken permit expires.
    None,
}

fn read_reply(reply: &Value) -> Option<Reply> {
    let text = match reply {
        Value::Null => return Some(Reply::None),
        Value::String(text) => &**text,
        Value::Bytes(bytes) => std::str::from_utf8(bytes).ok()?,
        _ => return None,
    };
    if text == "OK" {
        return Some(Reply::Taken);
    }
    // Scores come back in Redis' double format; Redisson writes whole milliseconds.
    let at = text.strip_prefix(':')?.parse::<f64>().ok();
    at.filter(|at| at.is_finite())
        .map(|at| Reply::NextExpiry(at.max(0.0) as u64))
}

/// Whether the acquire script took the permit (what a cancelled attempt's undo releases).
fn taken(reply: &Value) -> bool {
    matches!(read_reply(reply), Some(Reply::Taken))
}

/// The lease end written for a permit taken at `now` with `lease_ms` (None: never).
fn deadline(now: u64, lease_ms: Option<u64>) -> Result<u64> {
    match lease_ms {
        None => Ok(NEVER),
        Some(ms) => now
            .checked_add(ms)
            .filter(|end| *end < NEVER)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "lease of {ms} ms is too large (give no lease for a permit that never expires)"
                ))
            }),
    }
}

fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || decode_hex(id).is_none() {
        return Err(Error::InvalidArgument(format!(
            "`{id}` is not a permit id (an even number of hex digits, as Permit::id shows)"
        )));
    }
    Ok(())
}

/// The bytes of a hex string (either case), as Redisson's `ByteBufUtil.decodeHexDump`.
fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| char::from(c).to_digit(16);
    hex.as_bytes()
        .chunks_exact(2)
        .map(|pair| Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8))
        .collect()
}

fn integer(reply: &Value) -> Option<i64> {
    match reply {
        Value::Integer(n) => Some(*n),
        Value::String(text) => text.parse().ok(),
        Value::Bytes(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        _ => None,
    }
}

fn unexpected(what: &str, reply: &Value) -> Error {
    super::unexpected(&format!("permit semaphore's {what}"), reply)
}

/// One permit of a [`PermitExpirableSemaphore`], released when dropped.
///
/// [`release`](Permit::release) gives it back now; dropping the permit gives it back in the
/// background; [`forget`](Permit::forget) keeps it taken (until its lease ends, or a release by
/// its id). Its lease runs on the server whatever happens to the `Permit`: once it ends, the
/// permit can be reclaimed and handed to someone else ([`is_expired`](Permit::is_expired)).
///
/// ```no_run
/// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
/// let permit = semaphore.acquire(Some(std::time::Duration::from_secs(10))).await?;
/// println!("working under permit {}", permit.id());
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the permit releases it at once"]
#[clippy::has_significant_drop]
pub struct Permit {
    semaphore: PermitExpirableSemaphore,
    /// 32 lowercase hex characters.
    id: String,
    /// When the lease ends, measured from before the acquire was sent; `None`: never.
    lease_ends: Option<Instant>,
    acquisition: Acquisition,
    /// What a drop gives back: nothing once released or forgotten.
    taken: Taken<PermitRelease>,
}

impl crate::kit::wait::Lapse for Permit {
    fn lapsed(&self) -> bool {
        self.lease_ends.is_some_and(|end| Instant::now() >= end)
    }
}

impl Permit {
    /// The permit's id: 32 lowercase hex characters, as Redisson shows it. Anyone may release
    /// the permit with it ([`PermitExpirableSemaphore::release`]).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// assert_eq!(semaphore.acquire(None).await?.id().len(), 32);
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Releases the permit now and wakes waiters. [`Error::LeaseLost`] when its lease had
    /// ended: reclaimed already, or given back now (Redisson 4's `tryRelease` says false then).
    /// [`Error::ReleaseUnknown`] when the release failed after it may have reached Redis: the
    /// permit may still be taken, until its lease ends if it has one.
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background; dropped before that,
    /// the permit is dropped, which releases it.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(None).await?.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        // The permit is moved into the future: dropped unpolled, it releases as a dropped one.
        self.semaphore.client.ensure_open()?;
        let taken = self.taken.release.take();
        let release = taken.unwrap_or_else(|| self.semaphore.release_of(&self.id));
        let reply = self.semaphore.send_release(release).await?;
        match self.semaphore.release_result(reply) {
            Err(Error::NotHeld { name }) => Err(Error::LeaseLost { name }),
            other => other,
        }
    }

    /// Keeps the permit taken without a guard and returns its id: it comes back when its lease
    /// ends, or when someone releases it by id.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let id = semaphore.acquire(None).await?.forget();
    /// semaphore.release(&id).await?;
    /// # Ok(()) }
    /// ```
    pub fn forget(mut self) -> String {
        self.taken.release.take();
        self.id
    }

    /// Moves the end of this permit's lease to `lease` from now (`None`: never); `false` if the
    /// permit was no longer taken. See [`PermitExpirableSemaphore::update_lease_time`].
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let mut permit = semaphore.acquire(Some(Duration::from_secs(5))).await?;
    /// assert!(permit.update_lease(Some(Duration::from_secs(60))).await?);
    /// # Ok(()) }
    /// ```
    pub async fn update_lease(&mut self, lease: Option<Duration>) -> Result<bool> {
        let sent_at = Instant::now();
        let updated = self.semaphore.update_lease_time(&self.id, lease).await?;
        if updated {
            self.lease_ends = lease.and_then(|lease| sent_at.checked_add(lease));
        }
        Ok(updated)
    }

    /// Whether the permit's lease has ended by this client's clock: it may have been reclaimed
    /// and taken by someone else.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// assert!(!semaphore.acquire(None).await?.is_expired());
    /// # Ok(()) }
    /// ```
    pub fn is_expired(&self) -> bool {
        self.lease_ends.is_some_and(|end| Instant::now() >= end)
    }

    /// How the acquisition went: how long it waited and what woke it.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// println!("{:?}", semaphore.acquire(None).await?.acquisition());
    /// # Ok(()) }
    /// ```
    pub fn acquisition(&self) -> &Acquisition {
        &self.acquisition
    }

    /// The semaphore this permit belongs to.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// assert_eq!(semaphore.acquire(None).await?.semaphore().name(), semaphore.name());
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self) -> &PermitExpirableSemaphore {
        &self.semaphore
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("semaphore", &self.semaphore.name())
            .field("id", &self.id)
            .field("expired", &self.is_expired())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_go_to_hex_and_back() {
        let raw = [0x00, 0x7f, 0x80, 0xff, 0x12, 0xab];
        assert_eq!(decode_hex("007F80ff12AB").as_deref(), Some(&raw[..]));
        let id = uuid::Uuid::from_u128(0x007f80ff12ab).simple().to_string();
        assert_eq!(id, "00000000000000000000007f80ff12ab");
        assert_eq!(decode_hex(&id).map(|bytes| bytes.len()), Some(16));
        assert_eq!(decode_hex("abc"), None, "odd length");
        assert_eq!(decode_hex("zz"), None, "not hex");
        assert!(check_id("").is_err());
    }

    #[test]
    fn the_acquire_reply_reads_as_taken_next_expiry_or_none() {
        assert!(matches!(
            read_reply(&Value::from_static_str("OK")),
            Some(Reply::Taken)
        ));
        assert!(matches!(
            read_reply(&Value::from_static_str(":1764085000000")),
            Some(Reply::NextExpiry(1_764_085_000_000))
        ));
        assert!(matches!(read_reply(&Value::Null), Some(Reply::None)));
        assert!(read_reply(&Value::from_static_str("nope")).is_none());
        assert!(read_reply(&Value::Integer(1)).is_none());
    }

    #[test]
    fn a_lease_ends_before_never() {
        assert_eq!(deadline(1_000, None).ok(), Some(NEVER));
        assert_eq!(deadline(1_000, Some(500)).ok(), Some(1_500));
        assert!(deadline(1_000, Some(NEVER)).is_err());
    }
}
