//! Looking at locks without taking them: what a name holds on Redis, and what this client
//! holds and waits for.
//!
//! * [`Client::inspect`] and [`Client::inspect_as`] read any primitive of the lock family,
//!   whoever wrote it (ferrisson or Java Redisson), into a [`LockInfo`]: its [`LockKind`], its
//!   [`Holder`]s, a fair lock's [`QueuedWaiter`]s, a permit-expirable semaphore's
//!   [`ExpirablePermit`]s. It is what `ferrisson status` and `ferrisson watch` display.
//! * [`Client::local_state`] tells what this client itself knows of a name, without a call to
//!   Redis: its [`LocalHold`]s, its [`LocalWaiter`]s in line and its [`LocalSubscription`].
//!
//! ```no_run
//! # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
//! use ferrisson::inspect::{LockKind, ReadWriteMode};
//!
//! let info = client.inspect("orders:42").await?;
//! match info.kind {
//!     LockKind::ReadWrite { mode: ReadWriteMode::Read } => println!("{} readers", info.holders.len()),
//!     _ if info.is_locked() => println!("held by {}", info.holders[0].field),
//!     _ => println!("free"),
//! }
//! # Ok(()) }
//! ```
//!
//! One script (`lua/inspect.lua`) reads the name's key and every auxiliary key of the family
//! (fair queue and deadlines, fenced token, permits out, read-hold timeouts) in one atomic step;
//! the kind is then inferred from what is certain, or checked against the kind the caller names.

use std::time::Duration;

use fred::prelude::Value;

use crate::clock::epoch_ms;
use crate::error::{Error, Result};
use crate::kit::Client;
use crate::kit::RemainingTtl;
use crate::name;
use crate::sync::PermitIdFormat;
use crate::transport::script;

/// The most entries listed per list (queue, permits out, holds of one reader); the totals are
/// still counted ([`LockInfo::queued`], [`LockInfo::permits_out`]).
const LISTED: u64 = 100;
/// The longest string value the inspect script reads: longer than any token (ferrisson's, 36 +
/// 1 + up to 20 digits, is the longest) or counter. A longer string's length alone is read.
const LONGEST_READ: u64 = 256;

/// Redisson's score for a permit that never expires (§11).
const NEVER: i64 = 922_337_203_685_477;

pub use crate::kit::{LocalHold, LocalState, LocalSubscription, LocalWaiter, LocalWaiterState};

/// The mode field of a read-write lock's hash ([`LockKind::ReadWrite`]).
///
/// ```
/// use ferrisson::inspect::ReadWriteMode;
///
/// assert_eq!(ReadWriteMode::from_stored("read"), ReadWriteMode::Read);
/// assert_eq!(ReadWriteMode::Write.as_str(), "write");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadWriteMode {
    /// `read`: held by one or more readers.
    Read,
    /// `write`: held by one writer (who may hold read holds too).
    Write,
    /// Any other value, which neither Redisson nor ferrisson writes, as stored.
    Other(String),
}

impl ReadWriteMode {
    /// The mode a hash's `mode` field holds.
    ///
    /// ```
    /// use ferrisson::inspect::ReadWriteMode;
    /// assert_eq!(ReadWriteMode::from_stored("x"), ReadWriteMode::Other("x".into()));
    /// ```
    pub fn from_stored(mode: &str) -> ReadWriteMode {
        match mode {
            "read" => ReadWriteMode::Read,
            "write" => ReadWriteMode::Write,
            other => ReadWriteMode::Other(other.to_owned()),
        }
    }

    /// The mode as Redis stores it: `read`, `write`, or the other value.
    ///
    /// ```
    /// assert_eq!(ferrisson::inspect::ReadWriteMode::Read.as_str(), "read");
    /// ```
    pub fn as_str(&self) -> &str {
        match self {
            ReadWriteMode::Read => "read",
            ReadWriteMode::Write => "write",
            ReadWriteMode::Other(other) => other,
        }
    }
}

impl std::fmt::Display for ReadWriteMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of Redisson primitive a key holds, as far as its Redis values tell (or as the
/// caller named it with [`Client::inspect_as`]).
///
/// ```
/// use ferrisson::inspect::{LockKind, ReadWriteMode};
///
/// let kind = LockKind::ReadWrite { mode: ReadWriteMode::Read };
/// assert!(kind.is_lock());
/// assert!(!LockKind::CountDownLatch.is_lock());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// The key does not exist, and no auxiliary key tells what it was: nothing is stored.
    Free,
    /// A hash of holder fields: `RLock`, spin or non-reentrant lock (indistinguishable on Redis),
    /// or a fair or fenced lock without waiters or token.
    Reentrant,
    /// A hash of holder fields with a waiter queue `redisson_lock_queue:{name}`: a fair lock
    /// (also when the hash is gone but waiters are still queued).
    Fair,
    /// A hash with a `mode` field: a read-write lock in `read` or `write` mode.
    ReadWrite {
        /// The `mode` field.
        mode: ReadWriteMode,
    },
    /// Any other value: not a primitive of the family (a list, a string that is neither an
    /// integer nor a token, ...); a string's length is [`LockInfo::string_len`].
    Other {
        /// The Redis type name (`string`, `list`, ...).
        redis_type: String,
    },
    /// A lock hash (or none) with a fencing-token counter `redisson_lock_token:{name}`.
    Fenced,
    /// A string integer of available permits, named a semaphore by the caller.
    Semaphore,
    /// A string integer of available permits with the permits out in `{name}:timeout`.
    PermitSemaphore,
    /// A string integer count, named a count-down latch by the caller.
    CountDownLatch,
    /// A string integer that only the caller can tell apart: a semaphore's available permits
    /// or a count-down latch's count ([`LockInfo::count`]).
    SemaphoreOrLatch,
    /// A string holding a time in epoch milliseconds (between the years 2000 and 2100): the lock
    /// of the `SETNX` + `GETSET` recipe, which stores its expiry by its writer's clock
    /// ([`LockInfo::count`] holds it). Not supported, as unsafe: a client's clock decides when
    /// another's lock has expired, and any client may overwrite another's timestamp (see
    /// docs/compatibility.md). A semaphore or latch of that many permits is read as one when
    /// named with [`Client::inspect_as`].
    TimestampLock,
    /// A string holding a lock token: the single-key lock of redis-py, redsync, pottery,
    /// python-redis-lock, node `redlock` and rslock, and ferrisson's
    /// [`TokenLock`](crate::TokenLock). A string is read as one only when it is positively
    /// one, since any cached value is a string too: it has a TTL and its value has the shape
    /// one of these clients writes ([`token_shape`]), or the caller named it a token lock
    /// ([`Client::inspect_as`] with [`Primitive::TokenLock`]; a peer's lock taken without a
    /// TTL, redis-py's default, is read so only). Its one holder ([`LockInfo::holders`]) is the
    /// token it holds, shown as text where it is printable UTF-8, else as `\xNN` escapes
    /// (rslock's tokens are 20 raw bytes).
    TokenLock,
}

impl LockKind {
    /// Whether this is a lock: a hash of holder fields (reentrant, fair, fenced or read-write),
    /// or a token lock.
    ///
    /// ```
    /// assert!(ferrisson::inspect::LockKind::Fenced.is_lock());
    /// assert!(!ferrisson::inspect::LockKind::Semaphore.is_lock());
    /// ```
    pub fn is_lock(&self) -> bool {
        matches!(
            self,
            LockKind::Reentrant
                | LockKind::Fair
                | LockKind::Fenced
                | LockKind::ReadWrite { .. }
                | LockKind::TokenLock
        )
    }

    /// Whether this is a counter (a string integer): semaphore, permit-expirable semaphore,
    /// count-down latch, or one of them.
    ///
    /// ```
    /// assert!(ferrisson::inspect::LockKind::SemaphoreOrLatch.is_counter());
    /// assert!(!ferrisson::inspect::LockKind::Reentrant.is_counter());
    /// ```
    pub fn is_counter(&self) -> bool {
        matches!(
            self,
            LockKind::Semaphore
                | LockKind::PermitSemaphore
                | LockKind::CountDownLatch
                | LockKind::SemaphoreOrLatch
        )
    }
}

/// Which primitive to read a name as, for [`Client::inspect_as`]: what the Redis value alone
/// cannot tell (a semaphore or a latch, a fair lock without waiters, a fenced lock before its
/// first token).
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::inspect::Primitive;
///
/// let info = client.inspect_as("jobs:done", Primitive::CountDownLatch).await?;
/// println!("count {}", info.count.unwrap_or(0));
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Primitive {
    /// A reentrant, spin or non-reentrant lock (`getLock`, `getSpinLock`, ...).
    Lock,
    /// A fair lock (`getFairLock`).
    FairLock,
    /// A fenced lock (`getFencedLock`).
    FencedLock,
    /// A read-write lock (`getReadWriteLock`).
    ReadWriteLock,
    /// A semaphore (`getSemaphore`).
    Semaphore,
    /// A permit-expirable semaphore (`getPermitExpirableSemaphore`).
    PermitExpirableSemaphore,
    /// A count-down latch (`getCountDownLatch`).
    CountDownLatch,
    /// A token lock ([`Client::token_lock`](crate::Client::token_lock), and the peers'
    /// `SET NX PX` locks).
    TokenLock,
}

impl Primitive {
    /// The primitive in words, with its article: `a fair lock`.
    ///
    /// ```
    /// assert_eq!(ferrisson::inspect::Primitive::CountDownLatch.described(), "a count-down latch");
    /// ```
    pub fn described(self) -> &'static str {
        match self {
            Primitive::Lock => "a lock",
            Primitive::FairLock => "a fair lock",
            Primitive::FencedLock => "a fenced lock",
            Primitive::ReadWriteLock => "a read-write lock",
            Primitive::Semaphore => "a semaphore",
            Primitive::PermitExpirableSemaphore => "a permit-expirable semaphore",
            Primitive::CountDownLatch => "a count-down latch",
            Primitive::TokenLock => "a token lock",
        }
    }
}

/// One holder field of a hash lock and its hold count.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The field, `<client uuid>:<thread id>` (`...:write` for a write holder).
    pub field: String,
    /// The hold count stored in the field.
    pub count: i64,
    /// A read holder's per-hold timeout keys `{name}:<field>:rwlock_timeout:<k>`, k = 1, 2, ...
    /// (at most 100): the time each hold has left. A hold whose key is gone
    /// ([`RemainingTtl::NotLocked`]) no longer keeps the lock alive. Empty for other holders.
    pub read_holds: Vec<RemainingTtl>,
}

impl Holder {
    /// The client uuid part of the field (everything before the first `:`).
    ///
    /// ```
    /// # use ferrisson::inspect::Holder;
    /// # fn demo(holder: &Holder) {
    /// println!("held by client {}", holder.client_id());
    /// # }
    /// ```
    pub fn client_id(&self) -> &str {
        self.field.split(':').next().unwrap_or_default()
    }
}

/// A waiter in a fair lock's queue, in queue order.
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let info = client.inspect("orders:42").await?;
/// for waiter in &info.waiters {
///     println!("{} stale: {}", waiter.field, waiter.stale);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// The waiter's holder field.
    pub field: String,
    /// Its deadline in `redisson_lock_timeout:{name}`, epoch milliseconds of the waiter's clock;
    /// `None` when the queue entry has no deadline (an inconsistent queue).
    pub deadline_ms: Option<i64>,
    /// Time left until the deadline by this machine's clock (zero once it has passed).
    pub remaining: Option<Duration>,
    /// The deadline has passed: the next fair-lock call on the name removes the waiter.
    pub stale: bool,
}

/// A permit out of a permit-expirable semaphore (a member of `{name}:timeout`).
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let info = client.inspect("pool").await?;
/// for permit in &info.permits {
///     println!("{} ({:?}) expired: {}", permit.id, permit.id_format, permit.expired);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExpirablePermit {
    /// The permit id in lowercase hex, whichever way it is stored.
    pub id: String,
    /// How the id is stored: 16 raw bytes (Redisson ≥ 3.17) or 32 hex characters (3.16);
    /// `None` for neither.
    pub id_format: Option<PermitIdFormat>,
    /// Expiry, epoch milliseconds of the acquirer's clock; `None` for a permit without expiry.
    pub expires_ms: Option<i64>,
    /// Time left by this machine's clock (zero once expired), `None` without expiry.
    pub remaining: Option<Duration>,
    /// The expiry has passed: the next call on the semaphore reclaims the permit.
    pub expired: bool,
}

/// A snapshot of one primitive, read atomically.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The primitive's name (its Redis key).
    pub name: String,
    /// What the key holds.
    pub kind: LockKind,
    /// Holder fields with their counts (empty unless the key is a hash lock).
    pub holders: Vec<Holder>,
    /// The key's remaining time to live.
    pub ttl: RemainingTtl,
    /// Waiters queued in a fair lock's queue (0 for other kinds).
    pub queued: u64,
    /// The first 100 waiters of a fair lock's queue, in order, with their deadlines.
    pub waiters: Vec<QueuedWaiter>,
    /// A fenced lock's last token (`redisson_lock_token:{name}`), if that key exists.
    pub token: Option<i64>,
    /// A counter's value: available permits of a semaphore, a latch's count; `None` when the
    /// key does not exist (Redisson reads that as 0).
    pub count: Option<i64>,
    /// Permits out of a permit-expirable semaphore (members of `{name}:timeout`).
    pub permits_out: u64,
    /// The first 100 permits out, soonest expiry first.
    pub permits: Vec<ExpirablePermit>,
    /// The length in bytes of a string value (a token lock's, a counter's, or any other
    /// string's); `None` for other types.
    pub string_len: Option<u64>,
}

impl LockInfo {
    /// Whether the key exists (for a lock: someone holds it).
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let info = client.inspect("orders:42").await?;
    /// println!("{} is {}", info.name, if info.is_locked() { "locked" } else { "free" });
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> bool {
        self.ttl != RemainingTtl::NotLocked
    }
}

/// The pub/sub channels on which the primitives named `name` announce a release (Redisson's
/// names, protocol §1.1): the lock's (the full release of a reentrant or fenced lock, and the
/// force unlock of any lock but a spin lock, which publishes nothing), the read-write lock's, the
/// semaphores' and the count-down latch's, in that order. A fair lock tells only its queue's head, on the lock's channel +
/// `:` + the head's holder field. Releases publish there classically, or sharded (`SPUBLISH`)
/// under [`PublishMode::Sharded`](crate::PublishMode::Sharded) and `Both`. For tools that
/// watch a name, as `ferrisson watch` does. Note that a subscriber counts as a listener: a
/// ferrisson client whose release reaches it gives way for a moment, as to another client's
/// waiter.
///
/// ```
/// let channels = ferrisson::inspect::release_channels("orders:42");
/// assert_eq!(channels[0], "redisson_lock__channel:{orders:42}");
/// assert_eq!(channels[3], "redisson_countdownlatch__channel__{orders:42}");
/// ```
pub fn release_channels(name: &str) -> [String; 4] {
    [
        name::lock_channel(name),
        name::rwlock_channel(name),
        name::semaphore_channel(name),
        name::latch_channel(name),
    ]
}

impl Client {
    /// Reads the state of the primitive `name` in one atomic step, without changing it, and
    /// infers its kind from what is certain: holder fields and counts, TTL, a fair lock's queue
    /// with deadlines, a fenced lock's token, a read-write lock's mode and per-hold timeouts,
    /// a counter's value, a permit-expirable semaphore's permits out. A string integer with no
    /// permits out is [`LockKind::SemaphoreOrLatch`]: name it with [`Client::inspect_as`].
    /// Works on primitives written by Java Redisson too.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let info = client.inspect("orders:42").await?;
    /// for holder in &info.holders {
    ///     println!("{} holds it {} time(s)", holder.field, holder.count);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: the script only reads, so dropping the future changes nothing on Redis.
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        resolve(self.read_facts(name).await?, None)
    }

    /// [`Client::inspect`] for a name the caller knows to be `primitive`: a string integer is
    /// read as that semaphore or latch, a hash as that lock kind, and a missing semaphore or
    /// latch as such. A key that holds another primitive of the family is refused with
    /// [`Error::InvalidArgument`] naming what it holds; a key that is no primitive of the
    /// family at all is reported as [`LockKind::Other`], as by [`Client::inspect`].
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use ferrisson::inspect::{LockKind, Primitive};
    ///
    /// let info = client.inspect_as("pool", Primitive::Semaphore).await?;
    /// if info.kind == LockKind::Semaphore {
    ///     println!("{} permits available", info.count.unwrap_or(0));
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Client::inspect`].
    pub async fn inspect_as(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        resolve(self.read_facts(name).await?, Some(primitive))
    }

    async fn read_facts(&self, name: &str) -> Result<Facts> {
        let inner = &self.inner;
        inner.ensure_open()?;
        if name.is_empty() {
            return Err(Error::InvalidArgument(
                "a lock name must not be empty".into(),
            ));
        }
        let keys = [
            name.to_owned(),
            name::fair_queue_key(name),
            name::fair_timeout_key(name),
            name::fenced_token_key(name),
            name::permit_timeout_key(name),
            name::tagged(name),
        ];
        let reply = script::INSPECT
            .run(
                &inner.redis.pool,
                &inner.redis.settings.read_options,
                &keys,
                &[LISTED.to_string(), LONGEST_READ.to_string()],
            )
            .await
            .map_err(|err| inner.redis_error(name, err))?;
        parse(name, reply, i64::try_from(epoch_ms()).unwrap_or(i64::MAX))
    }
}

/// What the key `name` stores.
enum Stored {
    Missing,
    Hash {
        mode: Option<String>,
    },
    Integer,
    /// A string that is not an integer: its value (empty when longer than [`LONGEST_READ`]),
    /// and whether it is positively a token lock (a TTL and a token's shape).
    Text {
        value: Vec<u8>,
        token: bool,
    },
    /// Not a family member: its Redis type.
    Other(String),
}

/// Everything the script read, before the kind is decided.
struct Facts {
    info: LockInfo,
    stored: Stored,
}

fn unexpected(what: &str) -> Error {
    Error::Redis(fred::error::Error::new(
        fred::error::ErrorKind::Protocol,
        format!("unexpected reply to the inspect script ({what})"),
    ))
}

fn array(value: Value) -> Vec<Value> {
    match value {
        Value::Array(values) => values,
        _ => Vec::new(),
    }
}

fn text(value: &Value) -> Option<String> {
    value
        .as_bytes()
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
}

/// A score as epoch milliseconds (Redis prints scores as `%.17g`).
fn score(value: &Value) -> Option<i64> {
    let parsed: f64 = text(value)?.trim().parse().ok()?;
    parsed.is_finite().then_some(parsed as i64)
}

fn ttl_of(pttl: i64) -> RemainingTtl {
    match pttl {
        -2 => RemainingTtl::NotLocked,
        ttl if ttl < 0 => RemainingTtl::NoExpiry,
        ttl => RemainingTtl::Expires(Duration::from_millis(ttl.unsigned_abs())),
    }
}

/// Time left until `at` (epoch ms, if any) and whether it has passed.
fn left_until(at: Option<i64>, now: i64) -> (Option<Duration>, bool) {
    let left = at.map(|at| at.saturating_sub(now));
    let remaining = left.map(|left| Duration::from_millis(left.max(0).unsigned_abs()));
    (remaining, left.is_some_and(|left| left <= 0))
}

/// A permit id as hex, and how it is stored: 16 raw bytes (≥ 3.17) or 32 hex characters (3.16).
fn permit_id(bytes: &[u8]) -> (String, Option<PermitIdFormat>) {
    let hex = || bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    match bytes.len() {
        32 if bytes.iter().all(u8::is_ascii_hexdigit) => (
            String::from_utf8_lossy(bytes).to_ascii_lowercase(),
            Some(PermitIdFormat::Hex),
        ),
        16 => (hex(), Some(PermitIdFormat::Raw)),
        _ => (hex(), None),
    }
}

fn parse(name: &str, reply: Value, now: i64) -> Result<Facts> {
    let Value::Array(parts) = reply else {
        return Err(unexpected("not an array"));
    };
    let [redis_type, pttl, fields, queued, waiters, token, value, permits_out, permits, reads, length] =
        <[Value; 11]>::try_from(parts).map_err(|_| unexpected("length"))?;
    let redis_type = redis_type.as_string().ok_or_else(|| unexpected("type"))?;
    let pttl = pttl.as_i64().ok_or_else(|| unexpected("pttl"))?;

    let mut mode = None;
    let mut holders = Vec::new();
    for pair in array(fields).chunks(2) {
        let [field, value] = pair else { continue };
        let (Some(field), Some(value)) = (text(field), text(value)) else {
            continue;
        };
        if field == "mode" {
            mode = Some(value);
        } else {
            // Non-numeric values are not hold counts; show them as 0 rather than fail a display.
            holders.push(Holder {
                field,
                count: value.parse().unwrap_or(0),
                read_holds: Vec::new(),
            });
        }
    }
    for reader in array(reads) {
        let mut parts = array(reader).into_iter();
        let Some(field) = parts.next().as_ref().and_then(text) else {
            continue;
        };
        if let Some(holder) = holders.iter_mut().find(|holder| holder.field == field) {
            holder.read_holds = parts.filter_map(|pttl| pttl.as_i64()).map(ttl_of).collect();
        }
    }
    holders.sort_by(|a, b| a.field.cmp(&b.field));

    let waiters = array(waiters)
        .chunks(2)
        .filter_map(|pair| {
            let [field, deadline] = pair else { return None };
            let deadline_ms = score(deadline);
            let (remaining, stale) = left_until(deadline_ms, now);
            Some(QueuedWaiter {
                field: text(field)?,
                deadline_ms,
                remaining,
                stale,
            })
        })
        .collect();

    let permits = array(permits)
        .chunks(2)
        .filter_map(|pair| {
            let [id, expiry] = pair else { return None };
            let (id, id_format) = permit_id(id.as_bytes()?);
            let expires_ms = score(expiry).filter(|at| *at < NEVER);
            let (remaining, expired) = left_until(expires_ms, now);
            Some(ExpirablePermit {
                id,
                id_format,
                expires_ms,
                remaining,
                expired,
            })
        })
        .collect();

    let integer = |value: &Value| text(value).and_then(|text| text.trim().parse::<i64>().ok());
    let count = (redis_type == "string").then(|| integer(&value)).flatten();
    let string_len = (redis_type == "string").then(|| length.as_u64().unwrap_or(0));
    let stored = match (redis_type.as_str(), count) {
        ("none", _) => Stored::Missing,
        ("hash", _) => Stored::Hash { mode },
        ("string", Some(_)) => Stored::Integer,
        ("string", None) => {
            let value = value.as_bytes().unwrap_or_default().to_vec();
            let token = pttl > 0 && token_shape(&value).is_some();
            Stored::Text { value, token }
        }
        _ => Stored::Other(redis_type),
    };

    Ok(Facts {
        info: LockInfo {
            name: name.to_owned(),
            kind: LockKind::Free,
            holders,
            ttl: ttl_of(pttl),
            queued: queued.as_u64().unwrap_or(0),
            waiters,
            token: integer(&token),
            count,
            permits_out: permits_out.as_u64().unwrap_or(0),
            permits,
            string_len,
        },
        stored,
    })
}

/// Whether `value` reads as a time in epoch milliseconds between the years 2000 and 2100, as
/// the `SETNX` + `GETSET` lock stores its expiry: no count a semaphore or latch plausibly holds
/// (seconds since the epoch are not recognised: `i32::MAX` permits would read as 2038).
fn is_epoch_ms(value: i64) -> bool {
    (946_684_800_000..4_102_444_800_000).contains(&value)
}

/// What `stored` is, in words, for a refused [`Primitive`].
fn stored_described(stored: &Stored) -> &'static str {
    match stored {
        Stored::Hash { mode: Some(_) } => "a read-write lock (a hash with a `mode` field)",
        Stored::Hash { mode: None } => "a lock (a hash of holder fields, without a `mode` field)",
        Stored::Integer => "a semaphore or count-down latch (a string integer)",
        Stored::Text { token: true, .. } => "a token lock (a string holding its holder's token)",
        Stored::Text { token: false, .. } => "a string that is neither an integer nor a token",
        Stored::Missing | Stored::Other(_) => "no primitive of the family",
    }
}

/// Decides the kind: from what is certain, or as `expected` when the stored value agrees.
fn resolve(facts: Facts, expected: Option<Primitive>) -> Result<LockInfo> {
    let Facts { mut info, stored } = facts;
    let has_token = info.token.is_some();
    let has_queue = info.queued > 0;
    let has_permits = info.permits_out > 0;
    let inferred = match &stored {
        Stored::Missing if has_queue => LockKind::Fair,
        Stored::Missing if has_token => LockKind::Fenced,
        Stored::Missing if has_permits => LockKind::PermitSemaphore,
        Stored::Missing => LockKind::Free,
        Stored::Hash { mode: Some(mode) } => LockKind::ReadWrite {
            mode: ReadWriteMode::from_stored(mode),
        },
        Stored::Hash { mode: None } if has_queue => LockKind::Fair,
        Stored::Hash { mode: None } if has_token => LockKind::Fenced,
        Stored::Hash { mode: None } => LockKind::Reentrant,
        Stored::Integer if has_permits => LockKind::PermitSemaphore,
        Stored::Integer if info.count.is_some_and(is_epoch_ms) => LockKind::TimestampLock,
        Stored::Integer => LockKind::SemaphoreOrLatch,
        Stored::Text { token: true, .. } => LockKind::TokenLock,
        Stored::Text { token: false, .. } => LockKind::Other {
            redis_type: "string".to_owned(),
        },
        Stored::Other(redis_type) => LockKind::Other {
            redis_type: redis_type.clone(),
        },
    };
    info.kind = match (expected, &stored) {
        (None, _) | (_, Stored::Other(_)) => inferred,
        // Named a token lock, a string is one if it could hold a token at all.
        (Some(Primitive::TokenLock), Stored::Text { value, .. })
            if value.is_empty() || info.string_len.unwrap_or(0) > LONGEST_READ =>
        {
            return Err(Error::InvalidArgument(format!(
                "`{}` is a string of {} bytes, not a token lock (no client writes a token that \
                 long)",
                info.name,
                info.string_len.unwrap_or(0)
            )));
        }
        (Some(primitive), stored) => {
            as_primitive(primitive, stored, inferred).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "`{}` is {}, not {}",
                    info.name,
                    stored_described(stored),
                    primitive.described()
                ))
            })?
        }
    };
    if let (LockKind::TokenLock, Stored::Text { value, .. }) = (&info.kind, &stored) {
        info.holders.push(Holder {
            field: token_shown(value),
            count: 1,
            read_holds: Vec::new(),
        });
    }
    Ok(info)
}

/// The client whose lock tokens `value` is shaped like, if any: what makes a string with a TTL
/// positively a token lock for [`Client::inspect`] (a string of another shape is
/// [`LockKind::Other`], since a cached value is a string too).
///
/// | client | token |
/// |---|---|
/// | ferrisson | `<client uuid>:<owner id>` |
/// | redis-py, node `redlock` | 32 lowercase hex digits (a uuid's hex, 16 random bytes) |
/// | pottery | a uuid, 36 characters with dashes |
/// | redsync | 16 random bytes in base64 (24 characters ending `==`) |
/// | python-redis-lock | 18 random bytes in URL-safe base64 (24 characters) |
/// | rslock | 20 random bytes, raw (at least one of them not printable ASCII) |
///
/// ```
/// use ferrisson::inspect::token_shape;
///
/// assert_eq!(token_shape(b"6fd1c9a26ba24c1f8ba1f6ad3bfb11a0"), Some("redis-py or node redlock"));
/// assert_eq!(token_shape(b"{\"name\":\"bob\"}"), None);
/// ```
pub fn token_shape(value: &[u8]) -> Option<&'static str> {
    let hex = |bytes: &[u8]| bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let uuid = |bytes: &[u8]| {
        bytes.len() == 36
            && bytes.iter().enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => *b == b'-',
                _ => b.is_ascii_hexdigit(),
            })
    };
    let base64 = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/');
    let url_safe = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_');
    match value.len() {
        32 if hex(value) => Some("redis-py or node redlock"),
        36 if uuid(value) => Some("pottery"),
        24 if value.ends_with(b"==") && value[..22].iter().all(base64) => Some("redsync"),
        24 if value.iter().all(url_safe) => Some("python-redis-lock"),
        20 if value.iter().any(|b| !(0x20..0x7f).contains(b)) => Some("rslock"),
        38..=57 => {
            let (client, owner) = value.split_at(36);
            (uuid(client)
                && owner.len() > 1
                && owner[0] == b':'
                && owner[1..].iter().all(u8::is_ascii_digit))
            .then_some("ferrisson")
        }
        _ => None,
    }
}

/// The kind of `stored` read as `primitive`, or `None` when the value contradicts it. A
/// missing lock stays what its auxiliary keys show (free without them); a missing counter is
/// that counter.
fn as_primitive(primitive: Primitive, stored: &Stored, inferred: LockKind) -> Option<LockKind> {
    let missing = matches!(stored, Stored::Missing);
    let lock_hash = matches!(stored, Stored::Hash { mode: None });
    let counter = matches!(stored, Stored::Integer) || missing;
    let lock = |kind: LockKind, evidence: bool| {
        if lock_hash || (missing && evidence) {
            Some(kind)
        } else if missing {
            Some(LockKind::Free)
        } else {
            None
        }
    };
    match primitive {
        Primitive::Lock => lock(LockKind::Reentrant, false),
        Primitive::FairLock => lock(LockKind::Fair, inferred == LockKind::Fair),
        Primitive::FencedLock => lock(LockKind::Fenced, inferred == LockKind::Fenced),
        Primitive::ReadWriteLock => match stored {
            Stored::Hash { mode: Some(_) } => Some(inferred),
            Stored::Missing => Some(LockKind::Free),
            _ => None,
        },
        Primitive::Semaphore => counter.then_some(LockKind::Semaphore),
        Primitive::PermitExpirableSemaphore => counter.then_some(LockKind::PermitSemaphore),
        Primitive::CountDownLatch => counter.then_some(LockKind::CountDownLatch),
        Primitive::TokenLock => match stored {
            Stored::Text { .. } => Some(LockKind::TokenLock),
            Stored::Missing => Some(LockKind::Free),
            _ => None,
        },
    }
}

/// A token as text where it is printable UTF-8, else with every byte outside printable ASCII
/// as `\xNN` (and `\` as `\\`), so that a binary token (rslock's) prints on one line and
/// reads back unambiguously.
fn token_shown(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(char::is_control) && !text.contains('\\') => text.to_owned(),
        _ => bytes
            .iter()
            .map(|&byte| match byte {
                b'\\' => "\\\\".to_owned(),
                0x20..=0x7e => char::from(byte).to_string(),
                _ => format!("\\x{byte:02x}"),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    /// A reply of the inspect script with nothing but `kind`, `pttl`, `fields` and `queued`.
    fn reply(kind: &str, pttl: i64, fields: &[&str], queued: i64) -> Value {
        Reply::new(kind, pttl, fields)
            .set(3, Value::Integer(queued))
            .value()
    }

    struct Reply {
        parts: Vec<Value>,
    }

    impl Reply {
        fn new(kind: &str, pttl: i64, fields: &[&str]) -> Reply {
            Reply {
                parts: vec![
                    kind.into(),
                    Value::Integer(pttl),
                    strings(fields),
                    Value::Integer(0),
                    Value::Array(Vec::new()),
                    "".into(),
                    "".into(),
                    Value::Integer(0),
                    Value::Array(Vec::new()),
                    Value::Array(Vec::new()),
                    Value::Integer(0),
                ],
            }
        }
        fn set(mut self, at: usize, value: Value) -> Reply {
            self.parts[at] = value;
            self
        }
        fn value(self) -> Value {
            Value::Array(self.parts)
        }
    }

    fn strings(items: &[&str]) -> Value {
        Value::Array(items.iter().map(|f| Value::from(*f)).collect())
    }

    fn inspect(reply: Value, expected: Option<Primitive>) -> Result<LockInfo> {
        resolve(parse("x", reply, NOW)?, expected)
    }

    fn infer(reply: Value) -> LockInfo {
        inspect(reply, None).expect("parse")
    }

    fn other(redis_type: &str) -> LockKind {
        LockKind::Other {
            redis_type: redis_type.into(),
        }
    }

    #[test]
    fn a_missing_key_is_free() {
        let info = infer(reply("none", -2, &[], 0));
        assert_eq!(info.kind, LockKind::Free);
        assert_eq!(info.ttl, RemainingTtl::NotLocked);
        assert!(!info.is_locked());
    }

    #[test]
    fn holders_and_kinds_are_read_from_the_hash() {
        let info = infer(reply("hash", 1500, &["u:1", "2"], 0));
        assert_eq!(info.kind, LockKind::Reentrant);
        assert_eq!(
            info.holders,
            vec![Holder {
                field: "u:1".into(),
                count: 2,
                read_holds: Vec::new(),
            }]
        );
        assert_eq!(info.holders[0].client_id(), "u");
        assert_eq!(info.ttl, RemainingTtl::Expires(Duration::from_millis(1500)));

        let rw = infer(reply("hash", 10, &["mode", "write", "u:1:write", "1"], 0));
        assert_eq!(
            rw.kind,
            LockKind::ReadWrite {
                mode: ReadWriteMode::Write
            }
        );
        assert_eq!(rw.holders.len(), 1);

        let fair = infer(reply("hash", 10, &["u:1", "1"], 3));
        assert_eq!((fair.kind, fair.queued), (LockKind::Fair, 3));

        let list = infer(reply("list", -1, &[], 0));
        assert_eq!(list.kind, other("list"));
        assert_eq!(list.ttl, RemainingTtl::NoExpiry);
    }

    #[test]
    fn a_string_integer_is_a_semaphore_or_latch() {
        let counter = infer(Reply::new("string", -1, &[]).set(6, "3".into()).value());
        assert_eq!(counter.kind, LockKind::SemaphoreOrLatch);
        assert_eq!(counter.count, Some(3));
        let permits = Reply::new("string", 5000, &[])
            .set(6, "1".into())
            .set(7, Value::Integer(2));
        assert_eq!(infer(permits.value()).kind, LockKind::PermitSemaphore);
        // An expiry in epoch ms, as the SETNX + GETSET recipe writes: not a counter.
        let stamp = Reply::new("string", -1, &[]).set(6, "1764345600000".into());
        let stamp = infer(stamp.value());
        assert_eq!(
            (stamp.kind, stamp.count),
            (LockKind::TimestampLock, Some(1_764_345_600_000))
        );
        // Seconds are not: a semaphore of i32::MAX permits would read as 2038.
        let seconds = Reply::new("string", -1, &[]).set(6, "2147483647".into());
        assert_eq!(infer(seconds.value()).kind, LockKind::SemaphoreOrLatch);
    }

    /// A string `value` with `pttl` and its length, as the script replies.
    fn string(value: Value, pttl: i64) -> Value {
        let length = value.as_bytes().map_or(0, <[u8]>::len) as i64;
        Reply::new("string", pttl, &[])
            .set(6, value)
            .set(10, Value::Integer(length))
            .value()
    }

    #[test]
    fn a_string_is_a_token_lock_only_with_a_ttl_and_a_tokens_shape() {
        let redis_py = infer(string("6fd1c9a26ba24c1f8ba1f6ad3bfb11a0".into(), 9000));
        assert_eq!(redis_py.kind, LockKind::TokenLock);
        assert_eq!(
            (
                redis_py.holders[0].field.as_str(),
                redis_py.holders[0].count
            ),
            ("6fd1c9a26ba24c1f8ba1f6ad3bfb11a0", 1)
        );
        assert_eq!(redis_py.string_len, Some(32));
        let rslock = Value::Bytes(
            vec![
                0x00, b'a', 0xff, b'\\', 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                22,
            ]
            .into(),
        );
        let rslock = infer(string(rslock, 900));
        assert_eq!(rslock.kind, LockKind::TokenLock);
        assert!(rslock.holders[0].field.starts_with("\\x00a\\xff\\\\"));
        // The same shape without a TTL, and cache-like values with one: strings, not locks.
        for (value, pttl) in [
            ("6fd1c9a26ba24c1f8ba1f6ad3bfb11a0", -1),
            ("{\"name\":\"bob\"}", 60_000),
            ("hello world", 60_000),
            ("", 60_000),
        ] {
            let info = infer(string(value.into(), pttl));
            assert_eq!(info.kind, other("string"), "{value:?} with PTTL {pttl}");
            assert!(info.holders.is_empty());
        }
        assert!(
            inspect(string("abc".into(), -1), Some(Primitive::Lock)).is_err(),
            "a string is not a hash lock"
        );
        // Named a token lock, any short string is one (a peer's lock without a TTL)...
        let named = inspect(string("abc".into(), -1), Some(Primitive::TokenLock)).expect("named");
        assert_eq!(named.kind, LockKind::TokenLock);
        assert_eq!(named.ttl, RemainingTtl::NoExpiry);
        // ... but not one too long to be read (the script sends only its length).
        let long = Reply::new("string", 9000, &[])
            .set(10, Value::Integer(1 << 20))
            .value();
        assert_eq!(infer(long.clone()).kind, other("string"));
        assert!(inspect(long, Some(Primitive::TokenLock)).is_err());
    }

    #[test]
    fn token_shapes_are_those_the_peers_write() {
        for (token, client) in [
            (
                &b"0f3c1d1e-6b7a-4f5e-9a3b-2c1d0e9f8a7b:4611686018427387905"[..],
                "ferrisson",
            ),
            (
                b"6fd1c9a26ba24c1f8ba1f6ad3bfb11a0",
                "redis-py or node redlock",
            ),
            (b"0f3c1d1e-6b7a-4f5e-9a3b-2c1d0e9f8a7b", "pottery"),
            (b"q83vEjRWeJASNFZ4kBI0Vg==", "redsync"),
            (b"q83vEjRWeJASNFZ4kBI0Vg-_", "python-redis-lock"),
            (
                &[
                    0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                ][..],
                "rslock",
            ),
        ] {
            assert_eq!(token_shape(token), Some(client), "{token:?}");
        }
        for value in [
            &b"6FD1C9A26BA24C1F8BA1F6AD3BFB11A0"[..],
            b"6fd1c9a26ba24c1f8ba1f6ad3bfb11a",
            b"0f3c1d1e-6b7a-4f5e-9a3b-2c1d0e9f8a7b:",
            b"0f3c1d1e-6b7a-4f5e-9a3b-2c1d0e9f8a7b:x1",
            b"twenty printable chr",
            b"q83vEjRWeJASNFZ4kBI0Vg=",
            b"{\"a\":1}",
            b"",
        ] {
            assert_eq!(token_shape(value), None, "{value:?}");
        }
    }

    #[test]
    fn a_token_makes_a_fenced_lock_even_when_free() {
        let held = Reply::new("hash", 900, &["u:1", "1"]).set(5, "17".into());
        let held = infer(held.value());
        assert_eq!((held.kind, held.token), (LockKind::Fenced, Some(17)));
        let free = infer(Reply::new("none", -2, &[]).set(5, "4".into()).value());
        assert_eq!((free.kind.clone(), free.token), (LockKind::Fenced, Some(4)));
        assert!(!free.is_locked());
    }

    #[test]
    fn waiters_get_deadlines_and_stale_ones_are_marked() {
        let waiters = Value::Array(vec![
            "a:1".into(),
            (NOW + 2_000).to_string().into(),
            "b:2".into(),
            (NOW - 1).to_string().into(),
            "c:3".into(),
            "".into(),
        ]);
        let info = infer(
            Reply::new("hash", 10, &["u:1", "1"])
                .set(3, Value::Integer(3))
                .set(4, waiters)
                .value(),
        );
        let seen: Vec<_> = info
            .waiters
            .iter()
            .map(|w| (w.field.as_str(), w.remaining, w.stale))
            .collect();
        assert_eq!(
            seen,
            [
                ("a:1", Some(Duration::from_secs(2)), false),
                ("b:2", Some(Duration::ZERO), true),
                ("c:3", None, false)
            ]
        );
    }

    #[test]
    fn permit_ids_are_hex_in_both_formats() {
        let raw: Vec<u8> = (0u8..16).map(|b| b * 17).collect();
        let permits = Value::Array(vec![
            Value::Bytes(raw.into()),
            (NOW + 500).to_string().into(),
            "00112233445566778899AABBCCDDEEFF".into(),
            "922337203685477".into(),
            "zz".into(),
            (NOW - 10).to_string().into(),
        ]);
        let info = infer(
            Reply::new("string", -1, &[])
                .set(6, "0".into())
                .set(7, Value::Integer(3))
                .set(8, permits)
                .value(),
        );
        let seen: Vec<_> = info
            .permits
            .iter()
            .map(|p| (p.id.as_str(), p.id_format, p.expires_ms, p.expired))
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "00112233445566778899aabbccddeeff",
                    Some(PermitIdFormat::Raw),
                    Some(NOW + 500),
                    false
                ),
                (
                    "00112233445566778899aabbccddeeff",
                    Some(PermitIdFormat::Hex),
                    None,
                    false
                ),
                ("7a7a", None, Some(NOW - 10), true),
            ]
        );
    }

    #[test]
    fn read_holds_are_attached_to_their_holders() {
        let reads = Value::Array(vec![Value::Array(vec![
            "r:1".into(),
            Value::Integer(4_000),
            Value::Integer(-2),
        ])]);
        let info = infer(
            Reply::new("hash", 4_000, &["mode", "read", "r:1", "2"])
                .set(9, reads)
                .value(),
        );
        assert_eq!(
            info.holders[0].read_holds,
            [
                RemainingTtl::Expires(Duration::from_secs(4)),
                RemainingTtl::NotLocked
            ]
        );
    }

    #[test]
    fn a_named_primitive_must_agree_with_the_stored_value() {
        let counter = || Reply::new("string", -1, &[]).set(6, "2".into()).value();
        let hash = || reply("hash", 10, &["u:1", "1"], 0);
        let rw = || reply("hash", 10, &["mode", "read", "u:1", "1"], 0);
        let missing = || reply("none", -2, &[], 0);
        let kind = |reply: Value, primitive| inspect(reply, Some(primitive)).map(|i| i.kind);
        use {LockKind as K, Primitive as P};

        // The last one is no member of the family at all: reported as such, not refused.
        for (reply, primitive, expected) in [
            (counter(), P::CountDownLatch, K::CountDownLatch),
            (counter(), P::Semaphore, K::Semaphore),
            (hash(), P::FairLock, K::Fair),
            (missing(), P::CountDownLatch, K::CountDownLatch),
            (missing(), P::Lock, K::Free),
            (reply("set", -1, &[], 0), P::Lock, other("set")),
        ] {
            assert_eq!(kind(reply, primitive).ok(), Some(expected), "{primitive:?}");
        }
        let refused = kind(hash(), P::CountDownLatch).expect_err("a hash is no latch");
        assert!(
            refused.to_string().contains("is a lock") && refused.to_string().contains("latch"),
            "{refused}"
        );
        for (reply, primitive) in [
            (rw(), P::Lock),
            (hash(), P::ReadWriteLock),
            (counter(), P::FencedLock),
        ] {
            assert!(kind(reply, primitive).is_err(), "{primitive:?}");
        }
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        assert!(parse("x", Value::Null, NOW).is_err());
        assert!(parse("x", Value::Array(vec![Value::Null]), NOW).is_err());
    }
}
