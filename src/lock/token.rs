//! The token lock: the classic single-key lock of the other ecosystems (redis-py's `Lock`, Go's
//! redsync, node's `redlock`, rslock), `SET name <token> NX PX <ms>` with a compare-and-delete
//! release, on the lock kit: the watchdog, `lost()`, cancel safety and typed errors of every
//! primitive. Its waiters listen for keyspace notifications, or for ferrisson's own releases
//! while they poll, since its peers publish nothing on release; a release may hand the key to a
//! waiter of the same client.

use arcstr::ArcStr;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use futures::future::BoxFuture;

use crate::error::{Error, Result};
use crate::kit::janitor::Release;
use crate::kit::protocol::{sealed, AcquireCall, Protocol, Receives, Waits};
use crate::kit::{BackOff, Client, Guard, Handle};
use crate::name;
use crate::transport::script::{
    self, lua_scripts, Encoded, Heir, ReleaseScript, Script, ScriptHandOff,
};

/// `SET NX PX`, or the holder's PTTL (`lua/token_lock.lua`).
static TOKEN_ACQUIRE: Script = Script::new("token_lock", include_str!("../../lua/token_lock.lua"));

lua_scripts! {
    ["token_release.lua"];
    /// Compare-and-delete, or a local hand-off (`lua/token_release.lua`).
    static TOKEN_RELEASE_SCRIPT = ("token_release",
        "return token_release(KEYS[1], KEYS[2], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])\n");
}

/// `DEL` of a token lock, refusing a key of another type (`lua/token_force_release.lua`).
static TOKEN_FORCE_RELEASE: Script = Script::new(
    "token_force_release",
    include_str!("../../lua/token_force_release.lua"),
);

/// The token lock's release, for guards, dropped guards, undone acquires and rollbacks; it may
/// hand the key to a waiter of the same client.
static TOKEN_RELEASE: ReleaseScript = ReleaseScript {
    script: &TOKEN_RELEASE_SCRIPT,
    encode: encode_release,
    hand_off: Some(ScriptHandOff {
        encode: encode_hand_off,
        channel: name::lock_channel,
    }),
};

/// `token_release`'s keys and arguments.
fn encode_release(release: &Release, publish: &'static str) -> Encoded {
    let channel = name::lock_channel(&release.name);
    script::encode_channel_release(release, &channel, publish, None)
}

/// `token_release`'s keys and arguments for a release that hands the key to `heir`. The
/// release that ends a budget of hand-offs (`heir.conditional`) frees the key whoever listens:
/// the peers poll, and no subscriber count shows them.
fn encode_hand_off(release: &Release, publish: &'static str, heir: &Heir) -> Encoded {
    let channel = name::lock_channel(&release.name);
    let heir = heir
        .unless_listeners_above()
        .is_none()
        .then_some((heir, None));
    script::encode_channel_release(release, &channel, publish, heir)
}

/// The acquire script's refusal of a second acquire by the holder.
const REACQUIRE: &str = "TOKEN_REACQUIRE";

/// How long a waiter parked on keyspace events waits, at most, before it tries again when the
/// holder's key has no expiry (a peer's lock taken without a TTL): a retry in case the server
/// stopped sending the events meanwhile.
const NO_EXPIRY_RETRY_MS: i64 = 10_000;

/// The token lock's [`Protocol`], with the back-off its waiters poll by where the server sends
/// no keyspace events: [`TokenLock`] is `Handle<Token>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    backoff: BackOff,
    /// The value written instead of the owner's holder field: a
    /// [`TokenRedLock`](crate::TokenRedLock)'s, the same on every server.
    shared: Option<ArcStr>,
}

impl Default for Token {
    fn default() -> Token {
        Token {
            backoff: DEFAULT_BACKOFF,
            shared: None,
        }
    }
}

/// 10 ms, doubling (plus Redisson's growing jitter), at most 100 ms: redis-py's fixed poll is
/// 100 ms, node `redlock` retries after 100-300 ms, redsync after 50-250 ms.
const DEFAULT_BACKOFF: BackOff = BackOff::exponential_ms(10, 100, 2);

/// The classic single-key lock of the other ecosystems, on the same key and value layout as
/// redis-py's `Lock`, Go's redsync, node's `redlock` and rslock: the key is the lock's name, a
/// string holding the holder's token, taken with `SET name token NX PX lease` and released by a
/// script that deletes it only while it still holds that token.
///
/// Use it to share a lock with services written with those libraries. Between ferrisson
/// services (and Java Redisson ones), [`Lock`](crate::Lock) is the better lock: its releases
/// wake the next waiter at once, and it is reentrant.
///
/// # Tokens
/// The token is the owner's holder field, `<client uuid>:<owner id>`, the same on every
/// acquisition by that owner: a late release of an earlier hold cannot free a later one, since
/// an owner's releases run in order and its acquires wait for the releases of its dropped
/// guards. The peers' tokens are 32 hex characters (redis-py, node `redlock`), 24 base64
/// characters (redsync) or 20 random bytes (rslock), and none of them contains `:`: ours and
/// theirs never collide. A peer that is *given* our token (redis-py's `token=`, redsync's
/// `WithValue`) can release our lock, as it could any peer's.
///
/// # What it does
/// * **Not reentrant**, as the peers' locks: a second acquire by the owner that holds it fails
///   with [`Error::AlreadyHeld`] at once, rather than waiting for itself.
/// * **Leases.** [`lock`](TokenLock::lock) takes the watchdog's lease, renewed every third of it
///   while held (a compare-and-`PEXPIRE`, batched with the other locks' renewals); a fixed
///   lease ([`lock_with_lease`](TokenLock::lock_with_lease)) ends when it ends. A renewal that
///   finds another value under the key reports the hold lost ([`TokenGuard::lost`]).
/// * **Waiting.** The peers publish nothing when they release. Where the server sends keyspace
///   notifications (see [`KeyspaceEvents`](crate::KeyspaceEvents)) a waiter parks on the key's
///   `__keyspace@<db>__:<name>` channel and retries on its `del` and `expired` events
///   ([`WokenBy::Keyspace`](crate::WokenBy::Keyspace)). Elsewhere, and always in a cluster, it
///   parks on the lock channel, where ferrisson's releases publish
///   ([`WokenBy::Message`](crate::WokenBy::Message)), for no longer than its next back-off
///   pause (times the client's waiters in line for the lock, so that together they poll as
///   often as one) and the holder's PTTL ([`WokenBy::BackOff`](crate::WokenBy::BackOff)). A
///   peer's key without a TTL (redis-py's default `timeout=None`) is held until its holder
///   deletes it: ferrisson never deletes it.
/// * **Hand-off.** A release with a waiter of the same client parked hands the key straight to
///   it (one `SET` of its token with its lease: never free between them), as the reentrant
///   lock's release does; every [`max_local_handoffs`](crate::Config::max_local_handoffs)-th
///   release frees the key, so that polling peers get their turn.
/// * **Exclusion across layouts.** `SET NX` fails on any existing key: a Redisson hash lock or
///   any other key of the same name keeps a token lock busy, and a token lock keeps
///   [`Lock`](crate::Lock) and Java's `RLock` busy too.
///
/// # Cancel safety
/// Every acquire method is cancel safe: a dropped acquire future never leaves the lock held,
/// and the pauses and parked waits hold nothing.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.token_lock("reports:daily");
///
/// let guard = lock.lock().await?; // SET reports:daily <token> NX PX 30000, renewed while held
/// assert!(matches!(lock.lock().await, Err(ferrisson::Error::AlreadyHeld { .. })));
/// guard.unlock().await?; // deleted only while it still holds our token
/// # Ok(()) }
/// ```
pub type TokenLock = Handle<Token>;

/// The hold of a token lock, released when dropped (in the background): the kit's [`Guard`],
/// whose release is a compare-and-delete.
///
/// ```no_run
/// # async fn demo(lock: ferrisson::TokenLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::TokenGuard = lock.lock().await?;
/// assert_eq!(guard.holder_field(), lock.token());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type TokenGuard = Guard<Token>;

impl Client {
    /// A handle to the token lock named `name`: the single-key lock of redis-py, redsync, node
    /// `redlock` and rslock, with the default back-off for polling waits.
    ///
    /// This sends nothing to Redis. An empty name is reported by the lock's operations as
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let lock = client.token_lock("reports:daily");
    /// assert_eq!(lock.name(), "reports:daily");
    /// # }
    /// ```
    pub fn token_lock(&self, name: impl Into<String>) -> TokenLock {
        Handle::new(Arc::clone(&self.inner), name.into(), Token::default())
    }
}

impl TokenLock {
    /// The same lock, polling with `backoff` between attempts where the server sends no
    /// keyspace events.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::TokenLock) -> ferrisson::Result<()> {
    /// use ferrisson::BackOff;
    /// let steady = lock.with_backoff(BackOff::constant(std::time::Duration::from_millis(100))?);
    /// assert_ne!(steady.backoff(), lock.backoff());
    /// # Ok(()) }
    /// ```
    pub fn with_backoff(&self, backoff: BackOff) -> TokenLock {
        self.as_kind(Token {
            backoff,
            shared: self.kind.shared.clone(),
        })
    }

    /// The same lock, writing `token` instead of the owner's holder field: the value one
    /// acquisition of a [`TokenRedLock`](crate::TokenRedLock) writes on every server.
    pub(crate) fn with_shared_token(&self, token: ArcStr) -> TokenLock {
        self.as_kind(Token {
            backoff: self.kind.backoff,
            shared: Some(token),
        })
    }

    /// The back-off this handle polls with: by default 10 ms, doubling with jitter, at most
    /// 100 ms.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let lock = client.token_lock("reports:daily");
    /// assert_ne!(lock.backoff(), ferrisson::BackOff::default());
    /// # }
    /// ```
    pub fn backoff(&self) -> BackOff {
        self.kind.backoff
    }

    /// The value this handle's owner writes under the key while it holds the lock:
    /// `<client uuid>:<owner id>`, as [`TokenGuard::holder_field`].
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let lock = client.token_lock("reports:daily");
    /// assert!(lock.token().ends_with(&format!(":{}", lock.owner().id())));
    /// # }
    /// ```
    pub fn token(&self) -> String {
        let field = crate::owner::holder_field(&self.client().id, self.owner());
        self.kind.field(field).to_string()
    }
}

impl TokenLock {
    /// Deletes the lock if, and only if, it holds `token`, whoever wrote it: a peer's lock
    /// (redis-py, redsync, node `redlock`, rslock's raw bytes) released by the token that peer
    /// holds, or a ferrisson holder's ([`TokenLock::token`]). `Ok(true)` when it was deleted,
    /// `Ok(false)` when the key held another token or did not exist; a key of another type is
    /// refused with [`Error::WrongType`](crate::Error::WrongType) and left alone. Publishes nothing, as the
    /// peers' releases: ferrisson's waiters hear the deletion by keyspace event, or poll.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.token_lock("reports:daily");
    /// let released = lock.release_token("6fd1c9a26ba24c1f8ba1f6ad3bfb11a0").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// One script call: dropped, it either ran or did not.
    pub async fn release_token(&self, token: impl AsRef<[u8]>) -> Result<bool> {
        let hex: String = token
            .as_ref()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        self.run_flag(&TOKEN_FORCE_RELEASE, true, &[self.name()], &[&hex])
            .await
    }
}

impl sealed::Sealed for Token {}

impl Protocol for Token {
    type Extra = ();
    type Acquiring = ();
    const NAMES: (&'static str, &'static str) = ("TokenLock", "TokenGuard");
    const RELEASE: Option<&'static ReleaseScript> = Some(&TOKEN_RELEASE);
    /// Only the token release hands the key over (a `RELEASE` of a hash never could).
    const RECEIVES: Receives = Receives::HoldOf(&TOKEN_RELEASE);

    /// Keyspace events where the server sends them, else the lock channel (ferrisson's
    /// releases) and polling: the peers publish nothing. A release of this client may hand the
    /// key over: it writes what the heir's own `SET NX PX` would.
    fn waits(&self) -> Waits<()> {
        Waits::Keyspace {
            backoff: self.backoff,
            hand_off: Some(|_| ()),
        }
    }

    /// The owner's holder field, or the shared token of a [`TokenRedLock`](crate::TokenRedLock)'s
    /// part.
    fn field(&self, base: ArcStr) -> ArcStr {
        self.shared.clone().unwrap_or(base)
    }

    fn begin(&self, _lock: &TokenLock, _field: &ArcStr, _wait: Option<Duration>) {}

    /// `lua/token_lock.lua`, alone: its reply is nil, the PTTL, or the refusal of a re-entry.
    fn send(
        &self,
        call: AcquireCall<'_, Self>,
    ) -> BoxFuture<'static, Result<Value, fred::error::Error>> {
        let name = call.lock.name_arc();
        let (lease, token) = (call.lease_arg(), ArcStr::clone(call.field));
        call.run(&TOKEN_ACQUIRE, vec![name], vec![ArcStr::from(lease), token])
    }

    /// A key without expiry is retried every [`NO_EXPIRY_RETRY_MS`] by a parked waiter.
    fn busy(&self, ttl: i64, _acquiring: &()) -> i64 {
        if ttl == -1 {
            NO_EXPIRY_RETRY_MS
        } else {
            ttl
        }
    }

    /// `EXISTS`: a key of any layout under the name keeps the lock busy.
    async fn is_locked(&self, lock: &TokenLock) -> Result<bool> {
        let keys: u64 = lock.query("EXISTS", &[]).await?;
        Ok(keys > 0)
    }

    /// The script's refusal of a second acquire is [`Error::AlreadyHeld`].
    fn script_error(&self, lock: &TokenLock, err: fred::error::Error) -> Error {
        if err.details().contains(REACQUIRE) {
            return Error::AlreadyHeld {
                name: lock.name().to_owned(),
            };
        }
        lock.redis_error(err)
    }

    /// `DEL` of a string key, publishing nothing: the token lock has no channel.
    async fn force_release(&self, lock: &TokenLock) -> Result<bool> {
        lock.run_flag(&TOKEN_FORCE_RELEASE, true, &[lock.name()], &[] as &[&str])
            .await
    }

    /// 1 while the key holds `field`'s token (`GET`), else 0; a key of another layout holds
    /// no token.
    async fn hold_count(&self, lock: &TokenLock, field: ArcStr) -> Result<u64> {
        let value: Option<Value> = match lock.query("GET", &[]).await {
            Err(Error::WrongType { .. }) => None,
            other => other?,
        };
        let held = matches!(value, Some(Value::String(ref token)) if **token == *field)
            || matches!(value, Some(Value::Bytes(ref token)) if **token == *field.as_bytes());
        Ok(u64::from(held))
    }
}
