//! The reentrant lock, Redisson's `RLock` (protocol §2).

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use tokio::time::Instant;

use super::guard::LockGuard;
use crate::config::lease_millis;
use crate::error::{Error, Result};
use crate::kit::acquire::acquire_call;
use crate::kit::hold::Hold;
use crate::kit::janitor::Release;
use crate::kit::release::send_release;
use crate::kit::wait::{acquire_with_wait, lock_channel, script_error, TryOutcome, Waiter};
use crate::kit::ClientInner;
use crate::kit::{Attempt, Client};
use crate::lease::watchdog::{HoldKey, Lease};
use crate::name;
use crate::owner::{holder_field, Owner};
use crate::transport::script::{self, LockCall, ReleaseScript};

/// A reentrant distributed lock, on the same Redis keys as Java Redisson's `RLock`.
///
/// Use it to let one holder at a time, across processes and across Rust and Java services,
/// run a critical section. It is reentrant per [`Owner`]: by default the current tokio task (as a
/// Java thread), or an explicit owner bound with [`with_owner`](Lock::with_owner).
///
/// On Redis the lock is a hash at the lock's name with one field `<client uuid>:<owner id>` whose
/// value is the hold count, and a TTL: the lease. Taken without a lease, the lock gets the
/// client's watchdog timeout (30 s by default) and is renewed every third of it until released;
/// taken with a lease, it expires after that lease unless released earlier.
///
/// # Fairness
/// Not strictly fair across clients (like Redisson's `RLock`): after a release, whichever
/// waiter's retry reaches Redis first wins. But when a release by this client frees the lock
/// and its unlock message reached waiters of other clients, this client gives way for a moment
/// (twice the release's round trip, at least 2 ms) before its own next attempt on the lock, so
/// one of them takes it rather than losing the race to this client's waiters or to the
/// releasing task asking again. Within one client, waiters are served in the order they lined
/// up: an acquire that starts while other owners of the same client wait for the lock queues
/// behind them without trying first, and a release hands the lock straight to the first of them
/// (after [`Config::max_local_handoffs`](crate::Config::max_local_handoffs) such hand-offs in a
/// row, one release frees it for other clients: on a single server with classic `PUBLISH`, only
/// if another client subscribes to the lock's channel, or after 16 such budgets regardless).
/// A lone `try_lock` and a re-entry by the holder always attempt at once.
///
/// # Cancel safety
/// Every acquire method is cancel safe: a dropped acquire future never leaves the lock held (an
/// acquire whose reply is lost to cancellation is released by the client's background task) and
/// never leaks a subscription.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("orders:42");
///
/// let guard = lock.lock().await?;                                   // watchdog lease
/// let again = lock.lock().await?;                                   // same task: re-enters
/// assert_eq!(lock.hold_count().await?, 2);
/// drop(again);
/// guard.unlock().await?;
///
/// let attempt = lock.try_lock_for(Duration::from_secs(1), Some(Duration::from_secs(10))).await?;
/// if let Some(guard) = attempt.acquired() {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    // The parts inline rather than behind one shared allocation: a guard keeps its `Lock`, so
    // every held lock would pay for that allocation.
    client: Arc<ClientInner>,
    name: Arc<str>,
    owner: Option<Owner>,
}

/// The remaining time to live of a lock (Redisson's `remainTimeToLive`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemainingTtl {
    /// Nobody holds the lock.
    NotLocked,
    /// The lock exists without an expiry (only an outside `PERSIST` can cause this).
    NoExpiry,
    /// The lock expires after this time unless renewed or released.
    Expires(Duration),
}

impl Client {
    /// A handle to the reentrant lock named `name` (Redisson's `getLock(name)`).
    ///
    /// This sends nothing to Redis. The name is the Redis key of the lock, as on the Java side;
    /// an empty name is reported by the lock's operations as [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.lock("orders:42");
    /// assert_eq!(lock.name(), "orders:42");
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(Arc::clone(&self.inner), name.into())
    }
}

impl Lock {
    pub(crate) fn new(client: Arc<ClientInner>, name: String) -> Lock {
        Lock {
            client,
            name: name.into(),
            owner: None,
        }
    }

    /// The lock's name, which is also its Redis key.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.lock("orders:42").name(), "orders:42");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock, operated on behalf of `owner` instead of the current task.
    ///
    /// Use an explicit owner when one logical holder spans several tasks, or when concurrent
    /// branches of one task (`join!`, `select!`) must exclude each other: the branches share the
    /// task's implicit identity and would otherwise re-enter each other's hold.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// use ferrisson::Owner;
    ///
    /// let (a, b) = (lock.with_owner(Owner::new()), lock.with_owner(Owner::new()));
    /// // These two branches now exclude each other although they run in one task.
    /// let (ga, gb) = tokio::join!(a.lock(), b.lock());
    /// # Ok(()) }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> Lock {
        Lock {
            client: Arc::clone(&self.client),
            name: Arc::clone(&self.name),
            owner: Some(owner),
        }
    }

    /// The owner this handle acts for: the bound explicit owner, or the current task.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::Lock) {
    /// let owner = ferrisson::Owner::new();
    /// assert_eq!(lock.with_owner(owner).owner(), owner);
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.owner.unwrap_or_else(Owner::current)
    }

    /// Acquires the lock, waiting as long as it takes, with the watchdog lease (renewed until
    /// released). Redisson's `lock()`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire_loop(None, None)
            .await?
            .ok_or_else(|| self.not_held())
    }

    /// Acquires the lock, waiting as long as it takes, with a fixed `lease` and no watchdog: the
    /// lock expires after `lease` unless released. Redisson's `lock(leaseTime)`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire_loop(Some(lease), None)
            .await?
            .ok_or_else(|| self.not_held())
    }

    /// One attempt, no waiting, watchdog lease: [`Attempt::Acquired`] with the guard if acquired
    /// (or re-entered), [`Attempt::Busy`] if another owner holds the lock. Redisson's
    /// `tryLock()`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// use ferrisson::Attempt;
    /// match lock.try_lock().await? {
    ///     Attempt::Acquired(guard) => guard.unlock().await?,
    ///     Attempt::Busy => println!("busy"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Attempt<LockGuard>> {
        self.acquire_loop(None, Some(Duration::ZERO))
            .await
            .map(Attempt::from)
    }

    /// Waits at most `wait` for the lock; holds it for `lease`, or with the watchdog when `lease`
    /// is `None`. Redisson's `tryLock(waitTime, leaseTime)`. Returns [`Attempt::Busy`] when the wait
    /// ran out.
    ///
    /// The bound is strict: a slow server counts against it. A wait shorter than the server's
    /// answer (a sub-millisecond wait, or a server that stalls) ends with [`Error::Timeout`]
    /// rather than `Busy`, since nobody said the lock is busy; whatever the unanswered attempt
    /// may have taken is released by the client once Redis answers again.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
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
    ) -> Result<Attempt<LockGuard>> {
        self.acquire_loop(lease, Some(wait))
            .await
            .map(Attempt::from)
    }

    /// Releases one hold of this handle's owner without a guard, Redisson style (for holds kept
    /// with [`LockGuard::detach`]). Fails with [`Error::NotHeld`] when the owner holds no hold,
    /// leaving the lock untouched, and with [`Error::ReleaseUnknown`] when the release's outcome
    /// is unknown (it failed after it may have reached Redis, or was left to the settling of an
    /// earlier call of unknown outcome): never `Ok` then.
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// lock.lock().await?.detach();
    /// lock.unlock().await?;
    /// assert!(matches!(lock.unlock().await, Err(ferrisson::Error::NotHeld { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self) -> Result<()> {
        self.unlock_by(None).await
    }

    /// [`Lock::unlock`] with a primitive's own release script (`None`: `RELEASE`), for the
    /// primitives on this hash whose release differs (the spin lock's publishes nothing).
    pub(crate) async fn unlock_by(&self, script: Option<&'static ReleaseScript>) -> Result<()> {
        let client = self.client();
        client.ensure_open()?;
        self.check_name()?;
        let field = holder_field(&client.id, self.owner());
        let key = HoldKey {
            name: self.name_arc(),
            field: Arc::clone(&field),
        };
        let call = client.leases.doubts.enter();
        let lease_ms = client.leases.released_by_key(&key);
        let release = Release {
            name: self.name_arc(),
            field,
            lease_ms,
            script,
        };
        // An unknown outcome is `Error::ReleaseUnknown`, never `Ok`.
        let reply = send_release(client, &release, call)
            .await?
            .reply(self.name())?;
        match reply {
            Value::Null => Err(self.not_held()),
            _ => Ok(()),
        }
    }

    /// Deletes the lock whoever holds it and wakes its waiters (Redisson's `forceUnlock`).
    /// Returns whether a lock existed. Holders lose their lease; their guards report it.
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense that a dropped call may or may not have deleted the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let existed = lock.force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.force_release(true).await
    }

    /// Deletes the lock whoever holds it; with `announce`, publishes the unlock message (the
    /// spin lock, which has no channel, does not).
    pub(crate) async fn force_release(&self, announce: bool) -> Result<bool> {
        let client = self.client();
        client.ensure_open()?;
        self.check_name()?;
        let channel = name::lock_channel(self.name());
        let keys: &[&str] = if announce {
            &[self.name(), &channel]
        } else {
            &[self.name()]
        };
        let reply = script::FORCE_RELEASE
            .run(
                &client.redis.pool,
                &client.redis.write_options,
                keys,
                &[client.redis.publish_arg],
            )
            .await
            .map_err(|err| script_error(client, self.name(), err))?;
        Ok(reply.as_i64() == Some(1))
    }

    /// Whether anyone holds the lock (`HLEN`, so that a key of another type is an
    /// [`Error::WrongType`] rather than "locked"; Redisson's `isLocked` asks `EXISTS`).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let _guard = lock.lock().await?;
    /// assert!(lock.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let fields: u64 = self.query("HLEN", &[]).await?;
        Ok(fields > 0)
    }

    /// Whether this handle's owner (the current task, or the bound explicit owner) holds the
    /// lock (`HEXISTS`). Redisson's `isHeldByCurrentThread`.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let _guard = lock.lock().await?;
    /// assert!(lock.is_held_by_current_owner().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_owner(&self) -> Result<bool> {
        self.is_held_by(self.owner()).await
    }

    /// Whether `owner` of this client holds the lock (`HEXISTS`). Redisson's
    /// `isHeldByThread(threadId)`; see [`Owner::from_id`] for an owner given by its id.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// use ferrisson::Owner;
    /// let worker = Owner::from_id(42)?;
    /// let _guard = lock.with_owner(worker).lock().await?;
    /// assert!(lock.is_held_by(worker).await?);
    /// assert!(!lock.is_held_by(Owner::new()).await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by(&self, owner: Owner) -> Result<bool> {
        let field = holder_field(&self.client().id, owner);
        self.query("HEXISTS", &[&*field]).await
    }

    /// How many holds this handle's owner has on the lock (`HGET`; 0 when it holds none).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// assert_eq!(lock.hold_count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u64> {
        let field = holder_field(&self.client().id, self.owner());
        let count: Option<u64> = self.query("HGET", &[&*field]).await?;
        Ok(count.unwrap_or(0))
    }

    /// The lock's remaining time to live (`PTTL`).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// use ferrisson::RemainingTtl;
    /// if let RemainingTtl::Expires(left) = lock.remaining_ttl().await? {
    ///     println!("expires in {left:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn remaining_ttl(&self) -> Result<RemainingTtl> {
        let ttl: i64 = self.query("PTTL", &[]).await?;
        Ok(match ttl {
            -2 => RemainingTtl::NotLocked,
            ttl if ttl < 0 => RemainingTtl::NoExpiry,
            ttl => RemainingTtl::Expires(Duration::from_millis(ttl as u64)),
        })
    }

    /// The shared acquire path: `lease` None = watchdog; `wait` None = no limit.
    pub(crate) async fn acquire_loop(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let client = self.client();
        let (lease_kind, lease_ms) = self.acquire_lease(lease, wait)?;
        let owner = self.owner();
        let field = holder_field(&client.id, owner);
        let span =
            tracing::debug_span!("ferrisson.acquire", lock = %self.name(), owner = owner.id());
        let attempt = || self.attempt(owner, Arc::clone(&field), lease_kind, lease_ms);
        let adopt = |sent_at| self.adopt(owner, Arc::clone(&field), lease_kind, sent_at).0;
        let waiter = Waiter {
            name: self.name_arc(),
            field: Arc::clone(&field),
            lease_ms,
            handoff: true,
            channel: lock_channel,
        };
        let acquired = tracing::Instrument::instrument(
            acquire_with_wait(client, &waiter, wait, attempt, adopt),
            span,
        )
        .await?;
        Ok(acquired.map(|(mut guard, acquisition)| {
            guard.set_acquisition(acquisition);
            guard
        }))
    }

    /// One run of the acquire script; on success the hold is registered and its guard built
    /// before anything else can be awaited, so the hold can never be dropped unseen.
    async fn attempt(
        &self,
        owner: Owner,
        field: Arc<str>,
        lease: Lease,
        lease_ms: u64,
    ) -> Result<TryOutcome<LockGuard>> {
        let client = self.client();
        let redis = Arc::clone(&client.redis);
        let key = HoldKey {
            name: self.name_arc(),
            field: Arc::clone(&field),
        };
        let call = LockCall::Acquire {
            name: self.name_arc(),
            field: Arc::clone(&field),
            lease_ms,
        };
        let send = async move { redis.run_lock_call(call).await };
        let read = |reply: std::result::Result<Value, fred::error::Error>, sent_at| match reply
            .map_err(|err| script_error(client, self.name(), err))?
        {
            Value::Null => {
                let (guard, reentered) = self.adopt(owner, field, lease, sent_at);
                Ok(TryOutcome::Acquired(guard, reentered))
            }
            Value::Integer(ttl) => Ok(TryOutcome::Busy(ttl)),
            other => Err(Error::Redis(fred::error::Error::new(
                fred::error::ErrorKind::Protocol,
                format!("unexpected reply to the acquire script: {other:?}"),
            ))),
        };
        acquire_call(client, &key, lease_ms, None, Value::is_null, send, read).await
    }

    /// Registers a hold this owner just got (by its own acquire, or handed over by a local
    /// releaser) and builds its guard; also tells whether the hold re-entered one the owner
    /// had. Synchronous, so nothing can drop the hold unseen.
    fn adopt(
        &self,
        owner: Owner,
        field: Arc<str>,
        lease: Lease,
        sent_at: Instant,
    ) -> (LockGuard, bool) {
        let key = HoldKey {
            name: self.name_arc(),
            field,
        };
        let (hold, reentered) = Hold::acquired(self.client_arc(), &key, lease, sent_at, None);
        (LockGuard::new(self.with_owner(owner), hold), reentered)
    }

    /// Checks what every acquire of this lock's name checks before sending anything (the
    /// client is open, the name is usable, the wait fits the clock) and reads the lease:
    /// `None` is the watchdog's.
    pub(crate) fn acquire_lease(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<(Lease, u64)> {
        let client = self.client();
        client.ensure_open()?;
        self.check_name()?;
        if let Some(wait) = wait {
            if wait.as_millis() > i64::MAX as u128 {
                return Err(Error::InvalidArgument(format!(
                    "wait is too large: {wait:?}"
                )));
            }
        }
        Ok(match lease {
            Some(lease) => {
                let ms = lease_millis(lease, "lease")?;
                (Lease::Fixed(ms), ms)
            }
            None => (
                Lease::Watchdog,
                lease_millis(client.config.watchdog_timeout, "watchdog_timeout")?,
            ),
        })
    }

    pub(crate) fn check_name(&self) -> Result<()> {
        let name = self.name();
        if name.is_empty() {
            return Err(Error::InvalidArgument(
                "a lock name must not be empty".into(),
            ));
        }
        // Redisson's naming puts the unlock channel in the name's slot for plain names and
        // valid hash tags, but not for a `}` without `{` or a `{` without a closing `}`
        // (protocol §15.1): in a cluster the scripts would fail with CROSSSLOT.
        if self.client().redis.clustered {
            let channel = crate::name::lock_channel(name);
            if fred::util::redis_keyslot(name.as_bytes())
                != fred::util::redis_keyslot(channel.as_bytes())
            {
                return Err(Error::InvalidArgument(format!(
                    "lock name `{name}` cannot be used in a cluster: its unlock channel \
                     `{channel}` hashes to another slot (use a plain name or a valid {{hash tag}})"
                )));
            }
        }
        Ok(())
    }

    /// A read-only command about this lock: `COMMAND name extra...`.
    async fn query<T: fred::types::FromValue>(
        &self,
        command: &'static str,
        extra: &[&str],
    ) -> Result<T> {
        let client = self.client();
        client.ensure_open()?;
        self.check_name()?;
        client
            .redis
            .query(command, self.name(), extra)
            .await
            .map_err(|err| script_error(client, self.name(), err))
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.name().to_owned(),
        }
    }

    pub(crate) fn client(&self) -> &ClientInner {
        &self.client
    }

    pub(crate) fn name_arc(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }

    pub(crate) fn client_arc(&self) -> Arc<ClientInner> {
        Arc::clone(&self.client)
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name())
            .field("owner", &self.owner)
            .finish()
    }
}
