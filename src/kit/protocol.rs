//! The contract between a lock primitive and the kit ([`Protocol`]): what the kit must know of a
//! primitive on the reentrant lock's hash to acquire it, wait for it, hand it over, release it
//! and force it free. A primitive (`src/lock/`) is a small type that implements it; the kit's
//! [`Handle`] and [`Guard`](super::guard::Guard) give every primitive the same public surface,
//! and its wait loop, in-flight settling, janitor, lease table and give-way serve each alike.

use arcstr::ArcStr;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use futures::future::BoxFuture;

use super::handle::Handle;
pub(crate) use super::handoff::Receives;
use super::janitor::Release;
use super::poll::BackOff;
use super::wait::{lock_channel, lock_wake};
use crate::error::{Error, Result};
use crate::transport::pubsub::WakeRule;
use crate::transport::script::{
    BatchedAcquire, LockCall, ReleaseScript, Script, REENTRANT_ACQUIRE,
};
use crate::transport::Rollback;

/// What a lock primitive is to the engine that runs it: its acquire script and what the reply
/// means, how its waiters wait (woken on a channel, with or without a local hand-off, or polling
/// with back-off), its release and force-release scripts, and the errors it names itself.
///
/// Implemented by the primitives of this crate ([`Reentrant`](crate::kind::Reentrant),
/// [`NonReentrant`](crate::kind::NonReentrant), [`Spin`](crate::kind::Spin),
/// [`Fenced`](crate::kind::Fenced), [`Fair`](crate::kind::Fair)), which
/// [`Handle`](crate::Handle) and [`Guard`](crate::Guard) take as their parameter: [`Lock`](crate::Lock)
/// is `Handle<Reentrant>`. It is sealed: the contract's items are the crate's own.
///
/// Its defaults are the reentrant lock's engine, fast paths included: the acquire batched with
/// the client's other calls, waiters woken on the lock channel and handed the lock by a release
/// of their own client, `RELEASE` with its give-way. A primitive states only where it differs.
///
/// ```
/// fn name_of<P: ferrisson::Protocol>(lock: &ferrisson::Handle<P>) -> &str {
///     lock.name()
/// }
/// ```
pub trait Protocol: sealed::Sealed + Clone + fmt::Debug + Send + Sync + 'static {
    /// What a guard carries besides its hold: the fenced lock's token, `()` for most.
    #[doc(hidden)]
    type Extra: fmt::Debug + Default + Send + Sync + 'static;

    /// What one acquire keeps across its attempts: the fair lock's pause and queue give-up, `()`
    /// for most.
    #[doc(hidden)]
    type Acquiring: Send + Sync;

    /// The handle's and the guard's names in `Debug` output (`"Lock"`, `"LockGuard"`).
    #[doc(hidden)]
    const NAMES: (&'static str, &'static str);

    /// What a local hand-off to its waiters writes (with a `hand_off` in
    /// [`waits`](Protocol::waits)): what its own acquire would.
    #[doc(hidden)]
    const RECEIVES: Receives = Receives::Hold;

    /// The release script of its holds (`None`, the default: `RELEASE`, which is batched and
    /// may hand the lock to a waiter of this client).
    #[doc(hidden)]
    const RELEASE: Option<&'static ReleaseScript> = None;

    /// The acquire the default [`send`](Protocol::send) runs, batched: a mode of
    /// `lua/acquire.lua` (the reentrant lock's by default).
    #[doc(hidden)]
    const BATCHED_ACQUIRE: &'static BatchedAcquire = &REENTRANT_ACQUIRE;

    /// How its waiters wait. By default as the reentrant lock's: on the lock channel, woken by
    /// its messages, and handed the lock by a release of their own client (`RELEASE` hands
    /// over). A primitive with a release of its own, or whose guard carries more than a hand-off
    /// can give it, waits otherwise.
    #[doc(hidden)]
    fn waits(&self) -> Waits<Self::Extra> {
        Waits::Channel {
            channel: lock_channel,
            wake: lock_wake,
            hand_off: Some(|_| Self::Extra::default()),
        }
    }

    /// The hash field of an owner whose holder field is `base` (`<client uuid>:<owner id>`): the
    /// base itself for most, `base:write` for a read-write lock's write side.
    #[doc(hidden)]
    fn field(&self, base: ArcStr) -> ArcStr {
        base
    }

    /// Starts one acquire of `field` that waits at most `wait` (`None`: no bound).
    #[doc(hidden)]
    fn begin(&self, lock: &Handle<Self>, field: &ArcStr, wait: Option<Duration>)
        -> Self::Acquiring;

    /// The acquire script call of one attempt, not yet sent: by default
    /// [`BATCHED_ACQUIRE`](Protocol::BATCHED_ACQUIRE) through the dispatcher.
    #[doc(hidden)]
    fn send(
        &self,
        call: AcquireCall<'_, Self>,
    ) -> BoxFuture<'static, Result<Value, fred::error::Error>> {
        call.batched(Self::BATCHED_ACQUIRE)
    }

    /// What the acquire script's reply means; `None` for a reply it never gives. By default
    /// `ACQUIRE`'s: nil when acquired, else the lock's PTTL.
    #[doc(hidden)]
    fn read(reply: &Value) -> Option<Reply<Self::Extra>> {
        read_hash_reply(reply)
    }

    /// The acquire's wait time in the lock's queue in Redis, which a local hand-off passes on
    /// (the fair lock's W); 0 for locks without a queue.
    #[doc(hidden)]
    fn queue_wait_ms(_acquiring: &Self::Acquiring) -> u64 {
        0
    }

    /// The wait bound (ms) after a refusal that replied `ttl`; the lock's TTL for most.
    #[doc(hidden)]
    fn busy(&self, ttl: i64, _acquiring: &Self::Acquiring) -> i64 {
        ttl
    }

    /// What an unbounded wait reports for a [`Reply::OwnHold`]: it would wait for itself. A
    /// bounded wait reports the lock busy.
    #[doc(hidden)]
    fn own_hold_error(&self, lock: &Handle<Self>) -> Error {
        Error::AlreadyHeld {
            name: lock.name().to_owned(),
        }
    }

    /// Whether anyone holds the lock: the hash has a field (`HLEN`) for most.
    #[doc(hidden)]
    fn is_locked(&self, lock: &Handle<Self>) -> impl Future<Output = Result<bool>> + Send {
        lock.hash_is_locked()
    }

    /// How many holds `field` has on the lock: `HGET` of the field for most.
    #[doc(hidden)]
    fn hold_count(
        &self,
        lock: &Handle<Self>,
        field: ArcStr,
    ) -> impl Future<Output = Result<u64>> + Send {
        async move {
            let count: Option<u64> = lock.query("HGET", &[&*field]).await?;
            Ok(count.unwrap_or(0))
        }
    }

    /// The error for a failed script call or query of this primitive.
    #[doc(hidden)]
    fn script_error(&self, lock: &Handle<Self>, err: fred::error::Error) -> Error {
        lock.redis_error(err)
    }

    /// Ends an acquire (`acquired` or not), after its last attempt: at once, or by the future
    /// returned (the fair lock leaving its queue).
    #[doc(hidden)]
    fn end(acquiring: Self::Acquiring, _acquired: bool) -> Option<impl Future<Output = ()> + Send> {
        drop(acquiring);
        None::<std::future::Ready<()>>
    }

    /// The error an operation of this primitive reports for `err` (the fair lock names the one
    /// of its keys that has another type).
    #[doc(hidden)]
    fn explain(&self, _lock: &Handle<Self>, err: Error) -> impl Future<Output = Error> + Send {
        std::future::ready(err)
    }

    /// Deletes the lock whoever holds it; whether a lock existed.
    #[doc(hidden)]
    fn force_release(&self, lock: &Handle<Self>) -> impl Future<Output = Result<bool>> + Send {
        lock.force_release(true)
    }
}

/// Implemented by the crate's primitives only.
pub(crate) mod sealed {
    /// The seal of [`Protocol`](super::Protocol).
    pub trait Sealed {}
}

/// How a primitive's waiters wait (see `kit::wait` and `kit::poll`).
pub enum Waits<E> {
    /// Parked on a channel until a message or the lock's TTL ends the wait. `channel` derives
    /// the channel from the lock's name and the waiter's field. With `hand_off`, a release by
    /// this client may hand the lock straight to a waiter.
    Channel {
        /// The waiter's channel.
        channel: fn(&str, &str) -> String,
        /// How a message on it wakes the channel's waiters.
        wake: WakeRule,
        /// For a primitive that takes hand-offs: what a handed-over guard carries, given the
        /// fencing token the hand-off took (0 when it takes none).
        hand_off: Option<fn(u64) -> E>,
    },
    /// Polling, pausing by the back-off between attempts (the spin lock).
    Poll(BackOff),
    /// For a lock whose other holders publish nothing (the token lock): parked on the lock
    /// key's keyspace channel, woken by its `del` and `expired` events, where the server sends
    /// them (`transport::keyspace`); else parked on the lock channel (this crate's releases
    /// publish there) for no longer than the next pause of `backoff`: polling, each pause
    /// bounded by the lock's PTTL. `hand_off` as for [`Waits::Channel`].
    Keyspace {
        /// The pauses of a wait without keyspace events.
        backoff: BackOff,
        /// For a primitive that takes hand-offs: what a handed-over guard carries.
        hand_off: Option<fn(u64) -> E>,
    },
}

/// What an acquire script's reply means.
pub enum Reply<E> {
    /// Acquired (or re-entered); the guard carries `E`.
    Acquired(E),
    /// Held by another owner; the lock's PTTL in ms (−1: no TTL, −2: gone meanwhile).
    Busy(i64),
    /// Busy only because of holds of the asking owner itself (a reader asking to write): a
    /// bounded wait sees it busy (the PTTL), an unbounded one fails with
    /// [`Protocol::own_hold_error`] rather than wait for itself.
    OwnHold(i64),
}

/// One attempt's acquire call, for [`Protocol::send`].
pub struct AcquireCall<'a, P: Protocol> {
    pub(crate) lock: &'a Handle<P>,
    /// The hash field this call takes ([`Protocol::field`] of `base`).
    pub(crate) field: &'a ArcStr,
    /// The owner's holder field, `<client uuid>:<owner id>`.
    pub(crate) base: &'a ArcStr,
    pub(crate) lease_ms: u64,
    pub(crate) acquiring: &'a P::Acquiring,
}

impl<P: Protocol> AcquireCall<'_, P> {
    /// `op`, a mode of `ACQUIRE`, through the dispatcher (batched with the client's other
    /// calls; a synced-writes rollback is `op`'s release, which must be `P::RELEASE`).
    pub(crate) fn batched(
        &self,
        op: &'static BatchedAcquire,
    ) -> BoxFuture<'static, Result<Value, fred::error::Error>> {
        debug_assert!(
            op.release.map(std::ptr::from_ref) == P::RELEASE.map(std::ptr::from_ref),
            "a batched acquire's rollback is its primitive's release"
        );
        let redis = Arc::clone(&self.lock.client().redis);
        let call = LockCall::Acquire {
            name: self.lock.name_arc(),
            field: ArcStr::clone(self.field),
            lease_ms: self.lease_ms,
            op,
        };
        Box::pin(async move { redis.run_lock_call(call).await })
    }

    /// `script` with `keys` and `args`, alone; a synced-writes rollback is the primitive's own
    /// release. Boxed: fred's command future is several KB.
    pub(crate) fn run<
        K: AsRef<str> + Send + Sync + 'static,
        A: AsRef<str> + Send + Sync + 'static,
    >(
        &self,
        script: &'static Script,
        keys: Vec<K>,
        args: Vec<A>,
    ) -> BoxFuture<'static, Result<Value, fred::error::Error>> {
        let redis = Arc::clone(&self.lock.client().redis);
        // The release of the hold this call may take.
        let rollback = Release {
            name: self.lock.name_arc(),
            field: ArcStr::clone(self.field),
            lease_ms: self.lease_ms,
            script: P::RELEASE,
        };
        Box::pin(async move {
            let encoded = crate::transport::script::encode(&keys, &args);
            let rollback = Rollback::Hold(rollback);
            redis
                .run_acquire_encoded(script, &encoded, acquired::<P>, rollback)
                .await
        })
    }

    /// The lease this call asks for, in ms (the script's argument).
    pub(crate) fn lease_arg(&self) -> String {
        self.lease_ms.to_string()
    }
}

/// The reply of `ACQUIRE` and of the acquires of its family: nil when acquired, else the lock's
/// PTTL.
pub(crate) fn read_hash_reply<E: Default>(reply: &Value) -> Option<Reply<E>> {
    match reply {
        Value::Null => Some(Reply::Acquired(E::default())),
        Value::Integer(ttl) => Some(Reply::Busy(*ttl)),
        _ => None,
    }
}

/// Whether `reply` took a hold (what an undone or rolled-back attempt releases).
pub(crate) fn acquired<P: Protocol>(reply: &Value) -> bool {
    matches!(P::read(reply), Some(Reply::Acquired(_)))
}
