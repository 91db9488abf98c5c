//! The handle every lock primitive shares ([`Handle`]): its name and owner, its acquires (the
//! wait loop, or polling, through the primitive's [`Protocol`]), its release without a guard,
//! its force release and its queries, written once with their docs.

use arcstr::ArcStr;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use tokio::time::Instant;

use super::acquire::acquire_call;
use super::guard::Guard;
use super::hold::Hold;
use super::janitor::Release;
use super::poll::poll_loop;
use super::protocol::{acquired, AcquireCall, Protocol, Reply, Waits};
use super::release::send_release;
use super::wait::{
    acquire_with_wait, lock_channel, lock_wake, Holder, TryOutcome, WaitChannel, Waiter,
};
use super::waits::{or_give_way, RecordsWait, WaitSlot};
use super::{Attempt, ClientInner, WokenBy};
use crate::config::lease_millis;
use crate::error::{Error, Result};
use crate::lease::watchdog::{HoldKey, Lease};
use crate::owner::{holder_field, Owner};
use crate::transport::script;

/// A handle to one lock of the primitive `P`, acting for one owner: what every lock primitive
/// offers. Users meet it by its primitives' names: [`Lock`](crate::Lock) is
/// `Handle<Reentrant>`, [`FencedLock`](crate::FencedLock) `Handle<Fenced>`, and so on; each
/// primitive adds its own methods (a fenced lock's `token`, a spin lock's `with_backoff`).
///
/// A handle is cheap to clone and sends nothing to Redis until an operation is called. It acts
/// for its owner: by default the current tokio task (as a Java thread), or the explicit owner
/// bound with [`with_owner`](Handle::with_owner).
///
/// # Cancel safety
/// Every acquire method is cancel safe: a dropped acquire future never leaves the lock held (an
/// acquire whose reply is lost to cancellation is released by the client's background task),
/// never leaks a subscription, and a fair lock's dropped waiter leaves the queue.
///
/// # Deadlocks
/// With [`DeadlockDetection::Detect`](crate::DeadlockDetection::Detect), an acquire that waits
/// may end with [`Error::Deadlock`] instead: its wait was the youngest of a cycle of owners
/// that each wait for a lock the next one holds. It took nothing; release what the owner holds
/// and retry.
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::{Handle, Protocol};
///
/// async fn with_lock<P: Protocol>(lock: &Handle<P>) -> ferrisson::Result<()> {
///     let guard = lock.lock().await?;
///     // ... the critical section ...
///     guard.unlock().await
/// }
/// with_lock(&client.lock("orders:42")).await?;
/// with_lock(&client.fair_lock("orders:43")).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Handle<P: Protocol> {
    // The parts inline rather than behind one shared allocation: a guard keeps its handle, so
    // every held lock would pay for that allocation.
    client: Arc<ClientInner>,
    name: ArcStr,
    owner: Option<Owner>,
    pub(crate) kind: P,
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

impl<P: Protocol> Handle<P> {
    pub(crate) fn new(client: Arc<ClientInner>, name: String, kind: P) -> Handle<P> {
        Handle {
            client,
            name: name.into(),
            owner: None,
            kind,
        }
    }

    /// The same lock as another primitive `Q` (which must share its keys), or as this one with
    /// another configuration (a spin lock's back-off), owner kept.
    pub(crate) fn as_kind<Q: Protocol>(&self, kind: Q) -> Handle<Q> {
        Handle {
            client: Arc::clone(&self.client),
            name: ArcStr::clone(&self.name),
            owner: self.owner,
            kind,
        }
    }

    /// The lock's name, which is also the Redis key of its hash.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.lock("orders:42").name(), "orders:42");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock, operated on behalf of `owner` instead of the current task. Clones of
    /// such a handle (and its guards) can be used from any task: reentrancy follows the owner.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let owner = ferrisson::Owner::new();
    /// let guard = lock.with_owner(owner).lock().await?;
    /// let again = tokio::spawn({
    ///     let lock = lock.with_owner(owner);
    ///     async move { lock.lock().await } // another task, same owner: re-enters
    /// });
    /// # Ok(()) }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> Handle<P> {
        Handle {
            owner: Some(owner),
            ..self.clone()
        }
    }

    /// The owner this handle acts for: the bound explicit owner, or the current task (or
    /// thread, outside a task).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::Lock) {
    /// assert_eq!(lock.owner(), ferrisson::Owner::current());
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.owner.unwrap_or_else(Owner::current)
    }

    /// Acquires the lock, waiting as long as it takes, with the watchdog lease (renewed every
    /// third of the client's watchdog timeout until released). Redisson's `lock()`. A
    /// reentrant primitive re-enters a hold of the same owner; a
    /// [`NonReentrantLock`](crate::NonReentrantLock) fails with [`Error::AlreadyHeld`] then.
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
    #[allow(clippy::manual_async_fn)] // a plain fn: see `Handle::acquire_then`
    pub fn lock(&self) -> impl Future<Output = Result<Guard<P>>> + Send + '_ {
        self.acquire_then(None, None, |lock, acquired| {
            acquired.ok_or_else(|| lock.not_held())
        })
    }

    /// Acquires the lock, waiting as long as it takes, with a fixed `lease` and no watchdog:
    /// the lock expires after `lease` unless released earlier. Redisson's `lock(leaseTime)`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<Guard<P>> {
        self.acquire(Some(lease), None)
            .await?
            .ok_or_else(|| self.not_held())
    }

    /// One attempt, no waiting, with the watchdog lease. Redisson's `tryLock()`. Returns
    /// [`Attempt::Busy`] if another owner holds the lock. The attempt is bounded by the
    /// client's response timeout.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// if let Some(guard) = lock.try_lock().await?.acquired() {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Attempt<Guard<P>>> {
        self.acquire(None, Some(Duration::ZERO))
            .await
            .map(Attempt::from)
    }

    /// Waits at most `wait` for the lock, and holds it with the watchdog lease. Redisson's
    /// `tryLock(waitTime, unit)`. Returns [`Attempt::Busy`] if the wait ran out while another
    /// owner held the lock.
    ///
    /// The bound is strict: no attempt is sent after it, and one still in flight when it runs
    /// out is abandoned (and released in the background if it acquired). A wait that ends
    /// before Redis answered at all (it is down, or the connection is being re-established) is
    /// an [`Error::Timeout`] or the outage's error, not `Busy`.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = lock.try_lock_within(Duration::from_millis(500)).await?.acquired() {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_within(&self, wait: Duration) -> Result<Attempt<Guard<P>>> {
        self.try_lock_bounded(wait, None).await
    }

    /// Waits at most `wait` for the lock, and holds it for a fixed `lease`, without the
    /// watchdog: the lock expires after `lease` unless released earlier. Redisson's
    /// `tryLock(waitTime, leaseTime, unit)`. The wait's bound is as
    /// [`try_lock_within`](Self::try_lock_within)'s.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let attempt = lock
    ///     .try_lock_within_with_lease(Duration::from_millis(500), Duration::from_secs(5))
    ///     .await?;
    /// if let Some(guard) = attempt.acquired() {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_within_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Attempt<Guard<P>>> {
        self.try_lock_bounded(wait, Some(lease)).await
    }

    /// The two above: `lease`, or the watchdog when `None`.
    pub(crate) async fn try_lock_bounded(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<Guard<P>>> {
        self.acquire(lease, Some(wait)).await.map(Attempt::from)
    }

    /// Releases one hold of this handle's owner without a guard (for holds kept with
    /// `detach`): Redisson's `unlock()`. The lock is free when it was the last hold; a full
    /// release wakes the lock's waiters as the primitive does (a spin lock publishes nothing).
    ///
    /// Fails with [`Error::NotHeld`] when the owner holds no hold of the lock, and with
    /// [`Error::ReleaseUnknown`] when the outcome is unknown (it failed after it may have
    /// reached Redis, or was left to the settling of an earlier call of unknown outcome): never
    /// `Ok` then.
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
        match self.release_own().await {
            Err(err) => Err(self.kind.explain(self, err).await),
            done => done,
        }
    }

    /// Deletes the lock whoever holds it (Redisson's `forceUnlock`) and wakes its waiters as
    /// the primitive does (a spin lock publishes nothing; a fair lock tells its queue's head
    /// and keeps the queue). Returns whether a lock existed. Holders lose their lease; their
    /// guards report it. A key of another type is an [`Error::WrongType`] and stays.
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
        self.kind.force_release(self).await
    }

    /// Whether anyone holds the lock: for most primitives `HLEN` (so that a key of another type
    /// is an [`Error::WrongType`] rather than "locked"; Redisson's `isLocked` asks `EXISTS`); a
    /// read-write lock's side answers for its side.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let _guard = lock.lock().await?;
    /// assert!(lock.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.kind.is_locked(self).await
    }

    /// Whether this handle's owner (the current task, or the bound explicit owner) holds the
    /// lock (`HGET` of its field; a token lock's `GET`). Redisson's `isHeldByCurrentThread`.
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

    /// Whether `owner` of this client holds the lock (`HGET` of its field; a token lock's
    /// `GET`). Redisson's
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
        let field = self.field_of(owner);
        Ok(self.kind.hold_count(self, field).await? > 0)
    }

    /// How many holds this handle's owner has on the lock (`HGET`; 0 when it holds none; a
    /// token lock's 1 while the key holds the owner's token).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// assert_eq!(lock.hold_count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u64> {
        let field = self.field_of(self.owner());
        self.kind.hold_count(self, field).await
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

    /// The acquire path of every primitive: `lease` None = watchdog; `wait` None = no limit.
    /// Waits as the primitive says (`Protocol::waits`); the guard is built, and its hold
    /// registered, in the same poll as the reply that took it.
    pub(crate) fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<Guard<P>>>> + Send + '_ {
        self.acquire_then(lease, wait, |_, acquired| Ok(acquired))
    }

    /// [`Handle::acquire`], its outcome passed through `finish`.
    ///
    /// A plain fn around an `async move` block rather than an `async fn`, which would keep its
    /// arguments twice in the future that every parked waiter is; `finish` lets `lock` be a
    /// plain fn too, where an `async fn` around this future would keep `self` twice more.
    #[allow(clippy::manual_async_fn)] // on purpose: see above
    fn acquire_then<R>(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
        finish: impl FnOnce(&Self, Option<Guard<P>>) -> Result<R> + Send + 'static,
    ) -> impl Future<Output = Result<R>> + Send + '_ {
        async move {
            let (lease, lease_ms) = self.acquire_lease(lease, wait)?;
            let client = self.client();
            // Built by a plain fn: locals of this block that went into it would keep their
            // storage in every parked waiter's future.
            let call = Call::new(self, lease, lease_ms, wait);
            let span = tracing::debug_span!(
                "ferrisson.acquire",
                lock = %self.name(),
                owner = call.owner.id(),
                kind = P::NAMES.0
            );
            let attempt = || call.attempt();
            // In a block that ends before the last await: the acquire's outcome (a guard) alive
            // across an await would keep its storage in every parked waiter's future.
            let err = {
                let outcome = match self.kind.waits() {
                    // Keyspace events where the server sends them, else polling: boxed, since
                    // the check may ask the server (a whole command future inline).
                    // Keyspace events where the server sends them, else the lock channel and
                    // polling. Boxed, as the check may ask the server (a whole command future
                    // inline), and so that this rarer wait does not size every primitive's
                    // parked future.
                    Waits::Keyspace { backoff, hand_off } => {
                        Box::pin(async {
                            let keyspace = &client.keyspace;
                            // A lone try waits for nothing: no need to ask.
                            let lone = wait == Some(Duration::ZERO);
                            let events = !lone && keyspace.usable(&client.redis.pool).await;
                            // Without events, a refusal parks no longer than the next pause,
                            // times the client's waiters in line for the lock: together they
                            // poll as often as one (a release of this client hands the key to
                            // one of them anyway; the polls are for the peers' releases).
                            let pauses = parking_lot::Mutex::new(backoff.pauses());
                            let attempt = || {
                                let attempt = call.attempt();
                                let pauses = &pauses;
                                async move {
                                    match attempt.await {
                                        Ok(TryOutcome::Busy(ttl)) if !events => {
                                            let in_line = client.handoffs.in_line(&self.name);
                                            let in_line =
                                                u32::try_from(in_line.max(1)).unwrap_or(u32::MAX);
                                            let pause =
                                                pauses.lock().next().saturating_mul(in_line);
                                            let pause = i64::try_from(pause.as_millis())
                                                .unwrap_or(i64::MAX);
                                            let bound =
                                                if ttl > 0 { ttl.min(pause) } else { pause };
                                            Ok(TryOutcome::Busy(bound))
                                        }
                                        other => other,
                                    }
                                }
                            };
                            let channel = if events {
                                WaitChannel::Keyspace(keyspace.db())
                            } else {
                                WaitChannel::Of(lock_channel)
                            };
                            let waiter = Waiter {
                                name: &self.name,
                                holder: Some(Holder {
                                    field: &call.field,
                                    lease_ms,
                                    wait_ms: 0,
                                }),
                                wake: lock_wake,
                                channel,
                            };
                            let adopt = hand_off.map(|extra| {
                                let call = &call;
                                move |sent_at, token| call.adopt(sent_at, extra(token)).0
                            });
                            let waited = acquire_with_wait(client, &waiter, wait, attempt, adopt);
                            let waited = or_give_way(&call, waited);
                            let outcome = super::in_span::in_span(waited, span).await;
                            // Without events, a bound that ran out was a poll.
                            outcome.map(|acquired| {
                                acquired.map(|(guard, mut acquisition)| {
                                    if !events && acquisition.woken_by == WokenBy::Ttl {
                                        acquisition.woken_by = WokenBy::BackOff;
                                    }
                                    (guard, acquisition)
                                })
                            })
                        })
                        .await
                    }
                    Waits::Channel {
                        channel,
                        wake,
                        hand_off,
                    } => {
                        let waiter = Waiter {
                            name: &self.name,
                            holder: Some(Holder {
                                field: &call.field,
                                lease_ms,
                                wait_ms: P::queue_wait_ms(&call.acquiring),
                            }),
                            wake,
                            channel: WaitChannel::Of(channel),
                        };
                        // A local releaser may hand the lock over: the hold is then adopted as is.
                        let adopt = hand_off.map(|extra| {
                            let call = &call;
                            move |sent_at, token| call.adopt(sent_at, extra(token)).0
                        });
                        let waited = acquire_with_wait(client, &waiter, wait, attempt, adopt);
                        let waited = or_give_way(&call, waited);
                        super::in_span::in_span(waited, span).await
                    }
                    Waits::Poll(backoff) => {
                        let polled = poll_loop(client, wait, backoff, attempt);
                        let polled = or_give_way(&call, polled);
                        super::in_span::in_span(polled, span).await
                    }
                };
                let outcome = match P::end(call.acquiring, matches!(outcome, Ok(Some(_)))) {
                    None => outcome,
                    // The outcome goes along into the box, for the same reason.
                    Some(ending) => {
                        Box::pin(async move {
                            ending.await;
                            outcome
                        })
                        .await
                    }
                };
                match outcome {
                    Ok(acquired) => {
                        return finish(
                            self,
                            acquired.map(|(mut guard, acquisition)| {
                                guard.hold.set_acquisition(acquisition);
                                guard
                            }),
                        )
                    }
                    Err(err) => err,
                }
            };
            // Boxed: a primitive's explanation may ask Redis (the fair lock's, a whole command
            // future inline), and this future is what a parked waiter costs.
            Err(Box::pin(self.kind.explain(self, err)).await)
        }
    }

    /// Releases one hold of this handle's owner with the primitive's release script.
    async fn release_own(&self) -> Result<()> {
        let client = self.checked()?;
        let key = self.key(&self.field_of(self.owner()));
        let call = client.leases.doubts.enter();
        let lease_ms = client.leases.released_by_key(&key);
        let release = Release::of(&key, lease_ms, P::RELEASE);
        // An unknown outcome is `Error::ReleaseUnknown`, never `Ok`.
        let reply = send_release(client, &release, call)
            .await?
            .reply(self.name())?;
        match reply {
            Value::Null => Err(self.not_held()),
            _ => Ok(()),
        }
    }

    /// The hash field of `owner` on this lock.
    fn field_of(&self, owner: Owner) -> ArcStr {
        self.kind.field(holder_field(&self.client.id, owner))
    }

    /// Whether the lock's hash has a field (`HLEN`, so that a key of another type is an
    /// [`Error::WrongType`] rather than "locked"; Redisson's `isLocked` asks `EXISTS`).
    pub(crate) async fn hash_is_locked(&self) -> Result<bool> {
        let fields: u64 = self.query("HLEN", &[]).await?;
        Ok(fields > 0)
    }

    /// Deletes the lock whoever holds it (`FORCE_RELEASE`); with `announce`, publishes the
    /// unlock message (the spin lock, which has no channel, does not).
    pub(crate) async fn force_release(&self, announce: bool) -> Result<bool> {
        let channel = crate::name::lock_channel(self.name());
        let keys: &[&str] = if announce {
            &[self.name(), &channel]
        } else {
            &[self.name()]
        };
        let publish = self.client.redis.settings.publish_arg;
        self.run_flag(&script::FORCE_RELEASE, true, keys, &[publish])
            .await
    }

    /// Runs `script` (a write, or read-only) on `keys` with `args`, once the lock is checked
    /// (see [`Handle::checked`]), and reads a reply of 1 as `true`.
    pub(crate) async fn run_flag<K: AsRef<str> + Sync>(
        &self,
        script: &'static script::Script,
        write: bool,
        keys: &[K],
        args: &[&str],
    ) -> Result<bool> {
        let redis = &self.checked()?.redis;
        let options = if write {
            &redis.settings.write_options
        } else {
            &redis.settings.read_options
        };
        let reply = script
            .run(&redis.pool, options, keys, args)
            .await
            .map_err(|err| self.redis_error(err))?;
        Ok(reply.as_i64() == Some(1))
    }

    /// Checks what every acquire of this lock's name checks before sending anything (the
    /// client is open, the name is usable, the wait fits the clock) and reads the lease:
    /// `None` is the watchdog's.
    pub(crate) fn acquire_lease(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<(Lease, u64)> {
        let client = self.checked()?;
        if let Some(wait) = wait.filter(|wait| wait.as_millis() > i64::MAX as u128) {
            return Err(Error::InvalidArgument(format!(
                "wait is too large: {wait:?}"
            )));
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

    /// Rejects an unusable name ([`ClientInner::check_name`]).
    pub(crate) fn check_name(&self) -> Result<()> {
        let channel = || [crate::name::lock_channel(self.name())];
        self.client.check_name("lock", self.name(), channel)
    }

    /// The client, once it is checked open and the name usable: what every command checks
    /// before it sends anything.
    pub(crate) fn checked(&self) -> Result<&ClientInner> {
        self.client.ensure_open()?;
        self.check_name()?;
        Ok(&self.client)
    }

    /// A read-only command about this lock: `COMMAND name extra...`.
    pub(crate) async fn query<T: fred::types::FromValue>(
        &self,
        command: &'static str,
        extra: &[&str],
    ) -> Result<T> {
        self.query_key(command, self.name(), extra).await
    }

    /// A read-only command about one of this lock's keys: `COMMAND key extra...`; its errors
    /// as the primitive names them.
    pub(crate) async fn query_key<T: fred::types::FromValue>(
        &self,
        command: &'static str,
        key: &str,
        extra: &[&str],
    ) -> Result<T> {
        let client = self.checked()?;
        client
            .redis
            .query(command, key, extra)
            .await
            .map_err(|err| self.kind.script_error(self, err))
    }

    /// A Redis error of an operation on this lock.
    pub(crate) fn redis_error(&self, err: fred::error::Error) -> Error {
        self.client().redis_error(self.name(), err)
    }

    pub(crate) fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.name().to_owned(),
        }
    }

    pub(crate) fn client(&self) -> &ClientInner {
        &self.client
    }

    /// The hold key of `field` in this lock.
    fn key(&self, field: &ArcStr) -> HoldKey {
        HoldKey {
            name: self.name_arc(),
            field: ArcStr::clone(field),
        }
    }

    pub(crate) fn name_ref(&self) -> &ArcStr {
        &self.name
    }

    pub(crate) fn name_arc(&self) -> ArcStr {
        ArcStr::clone(&self.name)
    }

    pub(crate) fn client_arc(&self) -> Arc<ClientInner> {
        Arc::clone(&self.client)
    }
}

/// One acquire call: who takes which field of `lock`, with what lease; what every attempt of
/// it sends and how it reads the reply. One struct, borrowed by the attempt and hand-off
/// closures, so that a parked waiter's future keeps each of these once.
struct Call<'a, P: Protocol> {
    lock: &'a Handle<P>,
    owner: Owner,
    /// The hash field taken.
    field: ArcStr,
    /// The owner's holder field.
    base: ArcStr,
    lease_ms: u64,
    /// A fixed lease of `lease_ms` (else the watchdog's).
    fixed: bool,
    /// The wait has no bound: a refusal by the owner's own holds is an error.
    unbounded: bool,
    /// A lone attempt (`try_lock`), which never waits.
    lone: bool,
    acquiring: P::Acquiring,
    /// The wait, recorded at the first refusal when deadlock detection is on (`waits.rs`).
    waiting: WaitSlot,
}

impl<'a, P: Protocol> Call<'a, P> {
    /// The call of `lock`'s owner for `lease` (`lease_ms` long), waiting at most `wait`; the
    /// primitive's acquire begins here ([`Protocol::begin`]).
    fn new(lock: &'a Handle<P>, lease: Lease, lease_ms: u64, wait: Option<Duration>) -> Self {
        let owner = lock.owner();
        let base = holder_field(&lock.client.id, owner);
        let field = lock.kind.field(ArcStr::clone(&base));
        let acquiring = lock.kind.begin(lock, &field, wait);
        Call {
            lock,
            owner,
            field,
            base,
            lease_ms,
            fixed: matches!(lease, Lease::Fixed(_)),
            // An unbounded wait that only the owner's own holds block would wait for itself.
            unbounded: wait.is_none(),
            lone: wait == Some(Duration::ZERO),
            acquiring,
            waiting: WaitSlot::new(),
        }
    }

    fn lease(&self) -> Lease {
        if self.fixed {
            Lease::Fixed(self.lease_ms)
        } else {
            Lease::Watchdog
        }
    }

    /// One run of the primitive's acquire script, made cancel safe by the kit; on success the
    /// hold is registered and its guard built before anything else can be awaited, so the hold
    /// can never be dropped unseen.
    async fn attempt(&self) -> Result<TryOutcome<Guard<P>>> {
        let lock = self.lock;
        let key = lock.key(&self.field);
        let send = lock.kind.send(AcquireCall {
            lock,
            field: &self.field,
            base: &self.base,
            lease_ms: self.lease_ms,
            acquiring: &self.acquiring,
        });
        let read = |reply: std::result::Result<Value, fred::error::Error>, sent_at| {
            let reply = reply.map_err(|err| lock.kind.script_error(lock, err))?;
            match P::read(&reply) {
                Some(Reply::Acquired(extra)) => {
                    let (guard, reentered) = self.adopt(sent_at, extra);
                    Ok(TryOutcome::Acquired(guard, reentered))
                }
                Some(Reply::Busy(ttl)) => {
                    self.record_wait();
                    Ok(TryOutcome::Busy(lock.kind.busy(ttl, &self.acquiring)))
                }
                Some(Reply::OwnHold(_)) if self.unbounded => Err(lock.kind.own_hold_error(lock)),
                Some(Reply::OwnHold(ttl)) => {
                    self.record_wait();
                    Ok(TryOutcome::Busy(ttl))
                }
                None => Err(Error::Redis(fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    format!(
                        "unexpected reply to the acquire script of {} `{}`: {}",
                        P::NAMES.0,
                        lock.name(),
                        crate::shown::Reply(&reply)
                    ),
                ))),
            }
        };
        acquire_call(
            lock.client(),
            &key,
            self.lease_ms,
            P::RELEASE,
            acquired::<P>,
            send,
            read,
        )
        .await
    }

    /// Records this acquire's wait, once, at a refusal, when the client detects deadlocks:
    /// until the acquire ends, the wait is in the client's table (`waits.rs`).
    fn record_wait(&self) {
        if self.lone || self.waiting.get().is_some() {
            return;
        }
        if let Some(table) = &self.lock.client().waits {
            let recorded = table.record(self.owner.id(), &self.field, self.lock.name_ref());
            // Only this acquire's own polls record, one at a time.
            let _ = self.waiting.set(recorded);
        }
    }

    /// Registers a hold this owner just got (by its own acquire, or handed over by a local
    /// releaser) and builds its guard; also tells whether the hold re-entered one the owner
    /// had. Synchronous, so nothing can drop the hold unseen.
    fn adopt(&self, sent_at: Instant, extra: P::Extra) -> (Guard<P>, bool) {
        let lock = self.lock;
        let key = lock.key(&self.field);
        let (hold, reentered) = Hold::acquired(lock.client(), &key, self.lease(), sent_at);
        let guard = Guard {
            lock: lock.with_owner(self.owner),
            hold,
            extra,
        };
        (guard, reentered)
    }
}

impl<P: Protocol> RecordsWait for Call<'_, P> {
    fn slot(&self) -> &WaitSlot {
        &self.waiting
    }

    /// Only with detection on, and only while other owners of this client are in line for the
    /// lock (the one case in which an acquire waits untried): nothing for an acquire alone.
    fn record_if_queued(&self) {
        let client = self.lock.client();
        if client.waits.is_some() && !self.lone && client.handoffs.contended(self.lock.name()) {
            self.record_wait();
        }
    }
}

impl<P: Protocol> std::fmt::Debug for Handle<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(P::NAMES.0)
            .field("name", &self.name())
            .field("owner", &self.owner)
            .field("kind", &self.kind)
            .finish()
    }
}
