//! The non-reentrant lock, Redisson's `RNonReentrantLock` (4.5+, protocol §8): the reentrant
//! lock's hash, channel, release and renewal, with an acquire that refuses its own holder.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use tokio::time::Instant;

use super::held::Guard;
use super::reentrant::Lock;
use crate::error::{Error, Result};
use crate::kit::acquire::acquire_call;
use crate::kit::hold::Hold;
use crate::kit::janitor::Release;
use crate::kit::wait::{acquire_with_wait, lock_channel, script_error, TryOutcome, Waiter};
use crate::kit::{Attempt, Client};
use crate::lease::watchdog::{HoldKey, Lease};
use crate::owner::{holder_field, Owner};
use crate::transport::script::Script;

/// Take the lock only when it is free (`lua/non_reentrant_acquire.lua`).
static NON_REENTRANT_ACQUIRE: Script = Script::new(
    "non_reentrant_acquire",
    include_str!("../../lua/non_reentrant_acquire.lua"),
);

/// The error reply of `NON_REENTRANT_ACQUIRE` when the field holds the lock already.
const REACQUIRE: &str = "NON_REENTRANT_REACQUIRE";

/// A lock that its holder cannot take twice, on the same Redis keys as Java Redisson's
/// `RNonReentrantLock` (Redisson 4.5 and later).
///
/// Everything is the reentrant lock's (the hash at the name with one field
/// `<client uuid>:<owner id>`, the unlock channel, the release, the watchdog, the waiting with
/// its local hand-off) except the acquire: a second acquire by the owner that holds the lock
/// fails with [`Error::AlreadyHeld`] at once, rather than re-entering (a second hold) or waiting
/// for itself (a deadlock). The hold count is therefore always 1. [`Lock`] and Java's `RLock`
/// on the same name see it held, and exclude it.
///
/// # Cancel safety
/// Every acquire method is cancel safe, as [`Lock`]'s.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.non_reentrant_lock("orders:42");
///
/// let guard = lock.lock().await?;
/// assert!(matches!(lock.lock().await, Err(ferrisson::Error::AlreadyHeld { .. })));
/// assert_eq!(lock.hold_count().await?, 1);
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NonReentrantLock {
    /// The reentrant lock of the same name and owner: queries and releases are its own.
    lock: Lock,
}

impl Client {
    /// A handle to the non-reentrant lock named `name` (Redisson's
    /// `getNonReentrantLock(name)`).
    ///
    /// This sends nothing to Redis. An empty name is reported by the lock's operations as
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let lock = client.non_reentrant_lock("orders:42");
    /// assert_eq!(lock.name(), "orders:42");
    /// # }
    /// ```
    pub fn non_reentrant_lock(&self, name: impl Into<String>) -> NonReentrantLock {
        NonReentrantLock {
            lock: self.lock(name),
        }
    }
}

impl NonReentrantLock {
    /// The lock's name, which is also the Redis key of its hash.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.non_reentrant_lock("orders:42").name(), "orders:42");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The same lock, operated on behalf of `owner` instead of the current task (see
    /// [`Lock::with_owner`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::NonReentrantLock) {
    /// let owner = ferrisson::Owner::new();
    /// assert_eq!(lock.with_owner(owner).owner(), owner);
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> NonReentrantLock {
        NonReentrantLock {
            lock: self.lock.with_owner(owner),
        }
    }

    /// The owner this handle acts for: the bound explicit owner, or the current task.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::NonReentrantLock) {
    /// assert_eq!(lock.owner(), ferrisson::Owner::current());
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.lock.owner()
    }

    /// The reentrant lock on the same hash and owner (for its other queries, such as
    /// [`Lock::remaining_ttl`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// let ttl = lock.as_lock().remaining_ttl().await?;
    /// # Ok(()) }
    /// ```
    pub fn as_lock(&self) -> &Lock {
        &self.lock
    }

    /// Acquires the lock, waiting as long as it takes, with the watchdog lease. Redisson's
    /// `lock()`. Fails with [`Error::AlreadyHeld`] when this owner holds it already.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<NonReentrantGuard> {
        self.acquire_loop(None, None)
            .await?
            .ok_or_else(|| self.not_held())
    }

    /// Acquires the lock, waiting as long as it takes, with a fixed `lease` and no watchdog.
    /// Redisson's `lock(leaseTime)`. Fails with [`Error::AlreadyHeld`] when this owner holds it
    /// already.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<NonReentrantGuard> {
        self.acquire_loop(Some(lease), None)
            .await?
            .ok_or_else(|| self.not_held())
    }

    /// One attempt, no waiting, watchdog lease. Redisson's `tryLock()`. Fails with
    /// [`Error::AlreadyHeld`] (not [`Attempt::Busy`]) when this owner holds the lock already.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = lock.try_lock().await?.acquired() {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Attempt<NonReentrantGuard>> {
        self.acquire_loop(None, Some(Duration::ZERO))
            .await
            .map(Attempt::from)
    }

    /// Waits at most `wait` for the lock; holds it for `lease`, or with the watchdog when
    /// `lease` is `None`. Redisson's `tryLock(waitTime, leaseTime)`; the bound is as strict as
    /// [`Lock::try_lock_for`]'s. Fails with [`Error::AlreadyHeld`] when this owner holds the
    /// lock already.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let attempt = lock.try_lock_for(Duration::from_millis(500), None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<NonReentrantGuard>> {
        self.acquire_loop(lease, Some(wait))
            .await
            .map(Attempt::from)
    }

    /// Releases this handle's owner's hold without a guard (see [`Lock::unlock`]).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// lock.lock().await?.detach();
    /// lock.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self) -> Result<()> {
        self.lock.unlock().await
    }

    /// Deletes the lock whoever holds it and wakes its waiters (see [`Lock::force_unlock`]).
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense that a dropped call may or may not have deleted the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// let existed = lock.force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.lock.force_unlock().await
    }

    /// Whether anyone holds the lock (see [`Lock::is_locked`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
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
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// let _guard = lock.lock().await?;
    /// assert!(lock.is_held_by_current_owner().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_owner(&self) -> Result<bool> {
        self.lock.is_held_by_current_owner().await
    }

    /// How many holds this handle's owner has: 0 or 1 (see [`Lock::hold_count`]).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
    /// assert_eq!(lock.hold_count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u64> {
        self.lock.hold_count().await
    }

    /// The acquire path, the kit's wait loop: `lease` None = watchdog; `wait` None = no limit.
    async fn acquire_loop(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<NonReentrantGuard>> {
        let (lease_kind, lease_ms) = self.lock.acquire_lease(lease, wait)?;
        let client = self.lock.client();
        let owner = self.owner();
        let field = holder_field(&client.id, owner);
        let span = tracing::debug_span!("ferrisson.acquire", lock = %self.name(), owner = owner.id(), non_reentrant = true);
        let attempt = || self.attempt(owner, Arc::clone(&field), lease_kind, lease_ms);
        let adopt = |sent_at| self.adopt(owner, Arc::clone(&field), lease_kind, sent_at).0;
        // A local hand-off leaves the heir's field at 1 in the hash, exactly what this
        // acquire writes, and the release is `RELEASE`: hand-offs are allowed.
        let waiter = Waiter {
            name: self.lock.name_arc(),
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
            guard.hold.set_acquisition(acquisition);
            guard
        }))
    }

    /// One run of `NON_REENTRANT_ACQUIRE`, made cancel safe by the kit; on success the hold is
    /// registered and its guard built before anything else can be awaited.
    async fn attempt(
        &self,
        owner: Owner,
        field: Arc<str>,
        lease: Lease,
        lease_ms: u64,
    ) -> Result<TryOutcome<NonReentrantGuard>> {
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
            field: Arc::clone(&field),
            lease_ms,
            script: None,
        };
        // Boxed: fred's command future is several KB.
        let send = async move {
            let call = redis.run_acquire(
                &NON_REENTRANT_ACQUIRE,
                &keys,
                &args,
                Value::is_null,
                rollback,
            );
            Box::pin(call).await
        };
        let read = |reply: std::result::Result<Value, fred::error::Error>, sent_at| match reply
            .map_err(|err| self.error(err))?
        {
            Value::Null => {
                let (guard, reentered) = self.adopt(owner, field, lease, sent_at);
                Ok(TryOutcome::Acquired(guard, reentered))
            }
            Value::Integer(ttl) => Ok(TryOutcome::Busy(ttl)),
            other => Err(Error::Redis(fred::error::Error::new(
                fred::error::ErrorKind::Protocol,
                format!(
                    "unexpected reply to the non-reentrant acquire script: {}",
                    crate::shown::Reply(&other)
                ),
            ))),
        };
        acquire_call(client, &key, lease_ms, None, Value::is_null, send, read).await
    }

    /// Registers a hold this owner just got (by its own acquire, or handed over by a local
    /// releaser) and builds its guard. Synchronous, so nothing can drop the hold unseen.
    fn adopt(
        &self,
        owner: Owner,
        field: Arc<str>,
        lease: Lease,
        sent_at: Instant,
    ) -> (NonReentrantGuard, bool) {
        let key = HoldKey {
            name: self.lock.name_arc(),
            field,
        };
        let (hold, reentered) = Hold::acquired(self.lock.client_arc(), &key, lease, sent_at, None);
        let guard = Guard {
            lock: self.with_owner(owner),
            hold,
        };
        (guard, reentered)
    }

    /// The script's refusal of a second acquire is [`Error::AlreadyHeld`]; any other error as
    /// for every lock.
    fn error(&self, err: fred::error::Error) -> Error {
        if err.details().contains(REACQUIRE) {
            return Error::AlreadyHeld {
                name: self.name().to_owned(),
            };
        }
        script_error(self.lock.client(), self.name(), err)
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.name().to_owned(),
        }
    }
}

impl std::fmt::Debug for NonReentrantLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonReentrantLock")
            .field("name", &self.name())
            .finish()
    }
}

/// The one hold of a non-reentrant lock, released when dropped (in the background): the shared
/// [`Guard`], whose release is the reentrant lock's (same unlock message).
///
/// ```no_run
/// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::NonReentrantGuard = lock.lock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type NonReentrantGuard = Guard<NonReentrantLock>;
