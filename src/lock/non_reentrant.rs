//! The non-reentrant lock, Redisson's `RNonReentrantLock` (4.4+, protocol §8): the reentrant
//! lock's hash, channel, release, renewal and hand-off, with an acquire that refuses its own
//! holder.

use arcstr::ArcStr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::kit::protocol::{sealed, Protocol};
use crate::kit::{Client, Guard, Handle};
use crate::transport::script::{BatchedAcquire, Script};

/// Take the lock only when it is free: `lua/acquire.lua` with `once`, batched as `acquire_once`.
static NON_REENTRANT_ACQUIRE: BatchedAcquire = BatchedAcquire {
    shape: "acquire_once",
    alone: &ALONE,
    release: None,
};
static ALONE: Script = Script::new(
    "non_reentrant_acquire",
    concat!(
        include_str!("../../lua/acquire.lua"),
        "return acquire(KEYS[1], ARGV[1], ARGV[2], true)\n"
    ),
);

/// The error reply of the acquire when the field holds the lock already.
const REACQUIRE: &str = "NON_REENTRANT_REACQUIRE";

/// The non-reentrant lock's [`Protocol`]: [`NonReentrantLock`] is `Handle<NonReentrant>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NonReentrant;

/// A lock that its holder cannot take twice, on the same Redis keys as Java Redisson's
/// `RNonReentrantLock` (Redisson 4.4 and later).
///
/// Everything is the reentrant lock's (the hash at the name with one field
/// `<client uuid>:<owner id>`, the unlock channel, the release, the watchdog, the waiting with
/// its local hand-off) except the acquire: a second acquire by the owner that holds the lock
/// fails with [`Error::AlreadyHeld`] at once, rather than re-entering (a second hold) or waiting
/// for itself (a deadlock). The hold count is therefore always 1. [`Lock`](crate::Lock) and
/// Java's `RLock` on the same name see it held, and exclude it.
///
/// # Cancel safety
/// Every acquire method is cancel safe, as [`Lock`](crate::Lock)'s.
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
pub type NonReentrantLock = Handle<NonReentrant>;

/// The one hold of a non-reentrant lock, released when dropped (in the background): the kit's
/// [`Guard`], whose release is the reentrant lock's (same unlock message).
///
/// ```no_run
/// # async fn demo(lock: ferrisson::NonReentrantLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::NonReentrantGuard = lock.lock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type NonReentrantGuard = Guard<NonReentrant>;

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
        Handle::new(Arc::clone(&self.inner), name.into(), NonReentrant)
    }
}

impl sealed::Sealed for NonReentrant {}

impl Protocol for NonReentrant {
    type Extra = ();
    type Acquiring = ();
    const NAMES: (&'static str, &'static str) = ("NonReentrantLock", "NonReentrantGuard");

    /// Batched; a local hand-off leaves the heir's field at 1 in the hash, exactly what this
    /// acquire writes, and the release is `RELEASE`: the default waits (with hand-off) serve.
    const BATCHED_ACQUIRE: &'static BatchedAcquire = &NON_REENTRANT_ACQUIRE;

    fn begin(&self, _lock: &NonReentrantLock, _field: &ArcStr, _wait: Option<Duration>) {}

    /// The script's refusal of a second acquire is [`Error::AlreadyHeld`].
    fn script_error(&self, lock: &NonReentrantLock, err: fred::error::Error) -> Error {
        if err.details().contains(REACQUIRE) {
            return Error::AlreadyHeld {
                name: lock.name().to_owned(),
            };
        }
        lock.redis_error(err)
    }
}
