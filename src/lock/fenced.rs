//! The fenced lock, Redisson's `RFencedLock` (protocol §7): the reentrant lock's hash, plus a
//! fencing token taken from a counter by every acquisition.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::reentrant::Lock;
use crate::error::{Error, Result};
use crate::kit::acquire::acquire_call;
use crate::kit::hold::Hold;
use crate::kit::janitor::Release;
use crate::kit::wait::{acquire_with_wait, lock_channel, script_error, TryOutcome, Waiter};
use crate::kit::{Acquisition, Attempt, Client};
use crate::lease::watchdog::{HoldKey, Lease};
use crate::name;
use crate::owner::{holder_field, Owner};
use crate::transport::script::Script;

/// Acquire or re-enter and take the next token (`lua/fenced_acquire.lua`).
static FENCED_ACQUIRE: Script = Script::new(
    "fenced_acquire",
    include_str!("../../lua/fenced_acquire.lua"),
);

/// A reentrant lock that hands out a **fencing token** with every acquisition, on the same Redis
/// keys as Java Redisson's `RFencedLock`.
///
/// A lease can run out while its holder is paused (a GC pause, a stalled VM): the holder then
/// still believes it holds the lock while another holder has it. The token protects a resource
/// against that stale holder: every acquisition, re-entries included, takes the next value of a
/// counter, so a later holder always has a larger token. A resource that remembers the largest
/// token it has seen and refuses writes with a smaller one rejects the stale holder's writes.
///
/// On Redis the lock is the reentrant lock's hash (so [`Lock`] and Java's `RLock` on the same
/// name see it held), and the counter is the string `redisson_lock_token:{name}`, with no TTL.
/// Releases, renewals and waiting are the reentrant lock's. One difference: a waiter of a fenced
/// lock is never handed the lock by a release of its own client, since that would skip the token;
/// it takes the lock with its own script after the unlock message.
///
/// # Cancel safety
/// Every acquire method is cancel safe, as [`Lock`]'s.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.fenced_lock("orders:42");
///
/// let guard = lock.lock().await?;
/// let token = guard.token();
/// // Pass `token` with every write to the protected resource, which refuses tokens lower than
/// // the highest it has seen.
/// assert_eq!(lock.token().await?, Some(token));
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedLock {
    /// The reentrant lock of the same name and owner: queries and releases are its own.
    lock: Lock,
}

impl Client {
    /// A handle to the fenced lock named `name` (Redisson's `getFencedLock(name)`).
    ///
    /// This sends nothing to Redis. An empty name is reported by the lock's operations as
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.fenced_lock("orders:42");
    /// assert_eq!(lock.name(), "orders:42");
    /// # Ok(()) }
    /// ```
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        FencedLock {
            lock: self.lock(name),
        }
    }
}

impl FencedLock {
    /// The lock's name, which is also the Redis key of its hash.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.fenced_lock("orders:42").name(), "orders:42");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The same lock, operated on behalf of `owner` instead of the current task (see
    /// [`Lock::with_owner`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::FencedLock) {
    /// let owner = ferrisson::Owner::new();
    /// assert_eq!(lock.with_owner(owner).owner(), owner);
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> FencedLock {
        FencedLock {
            lock: self.lock.with_owner(owner),
        }
    }

    /// The owner this handle acts for: the bound explicit owner, or the current task.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::FencedLock) {
    /// assert_eq!(lock.owner(), ferrisson::Owner::current());
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.lock.owner()
    }

    /// The reentrant lock on the same hash and owner.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::FencedLock) {
    /// assert_eq!(lock.as_lock().name(), lock.name());
    /// # }
    /// ```
    pub fn as_lock(&self) -> &Lock {
        &self.lock
    }

    /// Acquires the lock, waiting as long as it takes, with the watchdog lease; the guard
    /// carries the acquisition's token. Redisson's `lockAndGetToken()`.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// println!("token {}", guard.token());
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<FencedGuard> {
        self.acquire_loop(None, None)
            .await?
            .ok_or_else(|| self.not_held())
    }

    /// Acquires the lock, waiting as long as it takes, with a fixed `lease` and no watchdog.
    /// Redisson's `lockAndGetToken(leaseTime)`.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<FencedGuard> {
        self.acquire_loop(Some(lease), None)
            .await?
            .ok_or_else(|| self.not_held())
    }

    /// One attempt, no waiting, watchdog lease. Redisson's `tryLockAndGetToken()`.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = lock.try_lock().await?.acquired() {
    ///     println!("token {}", guard.token());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Attempt<FencedGuard>> {
        self.acquire_loop(None, Some(Duration::ZERO))
            .await
            .map(Attempt::from)
    }

    /// Waits at most `wait` for the lock; holds it for `lease`, or with the watchdog when
    /// `lease` is `None`. Redisson's `tryLockAndGetToken(waitTime, leaseTime)`. The bound is
    /// as strict as [`Lock::try_lock_for`]'s.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let attempt = lock.try_lock_for(Duration::from_millis(500), None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<FencedGuard>> {
        self.acquire_loop(lease, Some(wait))
            .await
            .map(Attempt::from)
    }

    /// The last token handed out (`GET` of the token key; Redisson's `getToken()`), `None`
    /// before the first acquisition or after [`delete`](FencedLock::delete). A token key that
    /// does not hold an integer is an [`Error::WrongType`] naming it.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// assert_eq!(lock.token().await?, Some(guard.token()));
    /// # Ok(()) }
    /// ```
    pub async fn token(&self) -> Result<Option<u64>> {
        let client = self.lock.client();
        client.ensure_open()?;
        self.lock.check_name()?;
        let key = self.token_key();
        let value: Option<String> = client
            .redis
            .query("GET", &key, &[])
            .await
            .map_err(|err| self.error(&key, err))?;
        value
            .map(|text| text.parse().map_err(|_| Error::WrongType { name: key }))
            .transpose()
    }

    /// Releases one hold of this handle's owner without a guard (see [`Lock::unlock`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// lock.lock().await?.detach();
    /// lock.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self) -> Result<()> {
        self.lock.unlock().await
    }

    /// Deletes the lock whoever holds it and wakes its waiters; the token sequence goes on.
    /// Returns whether a lock existed (see [`Lock::force_unlock`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// let existed = lock.force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.lock.force_unlock().await
    }

    /// Deletes the lock **and its token key** (`DEL name token-key`; Redisson's `delete()`):
    /// the next acquisition starts the token sequence again at 1, so tokens handed out before
    /// no longer order after it. Publishes nothing. Returns whether anything was deleted.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// lock.delete().await?;
    /// assert_eq!(lock.token().await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        let client = self.lock.client();
        client.ensure_open()?;
        self.lock.check_name()?;
        let key = self.token_key();
        let deleted: u64 = client
            .redis
            .query("DEL", self.name(), &[&key])
            .await
            .map_err(|err| self.error(self.name(), err))?;
        Ok(deleted > 0)
    }

    /// Whether anyone holds the lock (see [`Lock::is_locked`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
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
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
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
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// assert_eq!(lock.hold_count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u64> {
        self.lock.hold_count().await
    }

    /// The acquire path: `lease` None = watchdog; `wait` None = no limit.
    async fn acquire_loop(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<FencedGuard>> {
        let (lease_kind, lease_ms) = self.lock.acquire_lease(lease, wait)?;
        let client = self.lock.client();
        let owner = self.owner();
        let field = holder_field(&client.id, owner);
        let span = tracing::debug_span!("ferrisson.acquire", lock = %self.name(), owner = owner.id(), fenced = true);
        let token_key: Arc<str> = self.token_key().into();
        let attempt = || {
            self.attempt(
                owner,
                Arc::clone(&field),
                Arc::clone(&token_key),
                lease_kind,
                lease_ms,
            )
        };
        // Never called: the waiter opts out of hand-offs, which would skip the token.
        let adopt = |_sent_at| unreachable_handoff();
        let waiter = Waiter {
            name: self.lock.name_arc(),
            field: Arc::clone(&field),
            lease_ms,
            handoff: false,
            channel: lock_channel,
        };
        let acquired = tracing::Instrument::instrument(
            acquire_with_wait(client, &waiter, wait, attempt, adopt),
            span,
        )
        .await?;
        Ok(acquired.map(|(mut guard, acquisition)| {
            guard.hold.set_acquisition(acquisition);
            guard
        }))
    }

    /// One run of `FENCED_ACQUIRE`, made cancel safe by the kit; on success the hold is
    /// registered and its guard built before anything else can be awaited.
    async fn attempt(
        &self,
        owner: Owner,
        field: Arc<str>,
        token_key: Arc<str>,
        lease: Lease,
        lease_ms: u64,
    ) -> Result<TryOutcome<FencedGuard>> {
        let client = self.lock.client();
        let redis = Arc::clone(&client.redis);
        let key = HoldKey {
            name: self.lock.name_arc(),
            field: Arc::clone(&field),
        };
        let keys = [self.lock.name_arc(), Arc::clone(&token_key)];
        let args = [Arc::from(lease_ms.to_string()), Arc::clone(&field)];
        let rollback = Release {
            name: self.lock.name_arc(),
            field: Arc::clone(&field),
            lease_ms,
            script: None,
        };
        // Boxed: the script call's future is several KB (fred's command future), and inline it
        // would size every fenced acquire's future (and overflow a test thread's stack).
        let send = async move {
            let call = redis.run_acquire(&FENCED_ACQUIRE, &keys, &args, acquired, rollback);
            Box::pin(call).await
        };
        let read = |reply: std::result::Result<Value, fred::error::Error>, sent_at: Instant| {
            let reply = reply.map_err(|err| self.error(&token_key, err))?;
            match read_reply(&reply) {
                Some(Reply::Acquired(token)) => {
                    let (hold, reentered) =
                        Hold::acquired(self.lock.client_arc(), &key, lease, sent_at, None);
                    let guard = FencedGuard {
                        lock: self.with_owner(owner),
                        hold,
                        token,
                    };
                    Ok(TryOutcome::Acquired(guard, reentered))
                }
                Some(Reply::Busy(ttl)) => Ok(TryOutcome::Busy(ttl)),
                None => Err(Error::Redis(fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    format!(
                        "unexpected reply to the fenced acquire script: {}",
                        crate::shown::Reply(&reply)
                    ),
                ))),
            }
        };
        acquire_call(client, &key, lease_ms, None, acquired, send, read).await
    }

    fn token_key(&self) -> String {
        name::fenced_token_key(self.name())
    }

    /// A script or query error; the script's own error for a token key that is not an integer
    /// (`lua/fenced_acquire.lua`) names the token key, any other the lock.
    fn error(&self, token_key: &str, err: fred::error::Error) -> Error {
        let client = self.lock.client();
        if err.details().contains("fencing token key") {
            return client.redis_error(token_key, err);
        }
        script_error(client, self.name(), err)
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.name().to_owned(),
        }
    }
}

impl std::fmt::Debug for FencedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedLock")
            .field("name", &self.name())
            .finish()
    }
}

/// `FENCED_ACQUIRE`'s reply: `[-1, token]` when acquired, `[PTTL, -1]` when busy.
enum Reply {
    Acquired(u64),
    Busy(i64),
}

fn read_reply(reply: &Value) -> Option<Reply> {
    let Value::Array(parts) = reply else {
        return None;
    };
    match parts.as_slice() {
        [Value::Integer(-1), Value::Integer(token)] => {
            u64::try_from(*token).ok().map(Reply::Acquired)
        }
        [Value::Integer(ttl), Value::Integer(-1)] => Some(Reply::Busy(*ttl)),
        _ => None,
    }
}

/// Whether `FENCED_ACQUIRE` took a hold (what a cancelled attempt's undo releases).
fn acquired(reply: &Value) -> bool {
    matches!(read_reply(reply), Some(Reply::Acquired(_)))
}

/// The wait loop adopts a hold only after a local hand-off, which a fenced waiter opts out of.
fn unreachable_handoff() -> FencedGuard {
    unreachable!("a fenced lock's waiter is never handed the lock")
}

/// One hold of a fenced lock and the token its acquisition took, released when dropped.
///
/// Everything but [`token`](FencedGuard::token) is as [`LockGuard`](crate::LockGuard)'s: the
/// release is the reentrant lock's (same hash, same unlock message).
///
/// ```no_run
/// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
/// let guard = lock.lock().await?;
/// let token = guard.token();
/// // ... write to the resource with `token` ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct FencedGuard {
    /// Bound to the owner that holds.
    lock: FencedLock,
    hold: Hold,
    token: u64,
}

impl crate::kit::wait::Lapse for FencedGuard {
    fn lapsed(&self) -> bool {
        self.is_lost()
    }
}

impl FencedGuard {
    /// The fencing token this acquisition took: larger than every token handed out before it
    /// on this lock (until [`FencedLock::delete`] resets the sequence).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// let first = lock.lock().await?;
    /// let again = lock.lock().await?; // a re-entry takes a new token too
    /// assert!(again.token() > first.token());
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Releases this hold now (see [`LockGuard::unlock`](crate::LockGuard::unlock)).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// lock.lock().await?.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.hold.release()
    }

    /// Releases this hold now, and settles a release of unknown outcome before answering (see
    /// [`LockGuard::unlock_settled`](crate::LockGuard::unlock_settled)).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// lock.lock().await?.unlock_settled().await?;
    /// # Ok(()) }
    /// ```
    pub fn unlock_settled(self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.hold.release_settled()
    }

    /// Keeps the hold without a guard, for a later [`FencedLock::unlock`].
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// lock.lock().await?.detach();
    /// lock.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn detach(self) {
        self.hold.detach();
    }

    /// Resolves when the lease is lost (see [`LockGuard::lost`](crate::LockGuard::lost)).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
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
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// let cancelled = lock.lock().await?.lost_token();
    /// # Ok(()) }
    /// ```
    pub fn lost_token(&self) -> CancellationToken {
        self.hold.lost_token()
    }

    /// Whether the lease is already known lost or past its proven end.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// assert!(!lock.lock().await?.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// How the acquisition went.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// println!("{:?}", lock.lock().await?.acquisition());
    /// # Ok(()) }
    /// ```
    pub fn acquisition(&self) -> &Acquisition {
        self.hold.acquisition()
    }

    /// The holder field written in the lock's hash: `<client uuid>:<owner id>`.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
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
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// assert_eq!(lock.lock().await?.lock().name(), lock.name());
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> &FencedLock {
        &self.lock
    }
}

impl std::fmt::Debug for FencedGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedGuard")
            .field("lock", &self.lock.name())
            .field("field", &self.hold.field())
            .field("token", &self.token)
            .field("lease", &self.hold.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}
