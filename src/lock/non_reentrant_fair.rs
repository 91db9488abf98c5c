//! The non-reentrant fair lock, Redisson 4.x's `RNonReentrantFairLock`: the fair lock's keys,
//! queue, waiting, release and renewal (`fair.rs`), with an acquire that refuses its own holder.

use std::sync::Arc;
use std::time::Duration;

use super::fair::{Fair, Queued};
use crate::error::Error;
use crate::kit::{Client, Guard, Handle};
use crate::transport::script::{lua_scripts, Script};

lua_scripts! {
    ["lib/fair_prune.lua", "fair_lock.lua", "non_reentrant_fair_acquire.lua"];
    /// The fair lock's acquire, refusing the field that holds the lock already.
    static NON_REENTRANT_FAIR_ACQUIRE = ("non_reentrant_fair_acquire", "");
}

/// The error reply of the acquire when the field holds the lock already.
const REACQUIRE: &str = "NON_REENTRANT_REACQUIRE";

/// The non-reentrant fair lock's [`Protocol`](crate::Protocol): [`NonReentrantFairLock`] is
/// `Handle<NonReentrantFair>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NonReentrantFair(Fair);

/// A lock served in arrival order that its holder cannot take twice, on the same Redis keys as
/// Java Redisson's `RNonReentrantFairLock` (Redisson 4.x).
///
/// Everything is the [`FairLock`](crate::FairLock)'s (the hash at the name, the waiters' queue
/// `redisson_lock_queue:{name}` and deadlines `redisson_lock_timeout:{name}`, each waiter
/// woken on its own channel in arrival order across clients, the release, the watchdog, the
/// wait time W) except the acquire: a second acquire by the owner that holds the lock fails
/// with [`Error::AlreadyHeld`] at once, rather than re-entering or waiting for itself. The hold
/// count is therefore always 1. A fair lock, a [`Lock`](crate::Lock) and Java's `RLock` on the
/// same name see it held.
///
/// # Cancel safety
/// Every acquire method is cancel safe, as the fair lock's: a dropped acquire never leaves the
/// lock held nor its waiter queued.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.non_reentrant_fair_lock("orders:42");
///
/// let guard = lock.lock().await?; // queues behind earlier waiters, if any
/// assert!(matches!(lock.try_lock().await, Err(ferrisson::Error::AlreadyHeld { .. })));
/// guard.unlock().await?; // tells the next waiter in line
/// # Ok(()) }
/// ```
pub type NonReentrantFairLock = Handle<NonReentrantFair>;

/// The one hold of a non-reentrant fair lock, released when dropped: the kit's [`Guard`], whose
/// release is the fair lock's (it tells the next waiter in line).
///
/// ```no_run
/// # async fn demo(lock: ferrisson::NonReentrantFairLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::NonReentrantFairGuard = lock.lock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type NonReentrantFairGuard = Guard<NonReentrantFair>;

impl Client {
    /// A handle to the non-reentrant fair lock named `name` (Redisson's
    /// `getNonReentrantFairLock(name)`), with the fair lock's default wait time W (5 minutes).
    ///
    /// This sends nothing to Redis. An empty name is reported by the lock's operations as
    /// [`Error::InvalidArgument`]. Its blocking twin is
    /// [`blocking::Client::handle`](crate::blocking::Client::handle) of this handle.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let lock = client.non_reentrant_fair_lock("orders:42");
    /// assert_eq!(lock.name(), "orders:42");
    /// # }
    /// ```
    pub fn non_reentrant_fair_lock(&self, name: impl Into<String>) -> NonReentrantFairLock {
        let kind = NonReentrantFair(Fair::DEFAULT);
        Handle::new(Arc::clone(&self.inner), name.into(), kind)
    }
}

impl Queued for NonReentrantFair {
    const NAMES: (&'static str, &'static str) = ("NonReentrantFairLock", "NonReentrantFairGuard");
    const ACQUIRE: &'static Script = &NON_REENTRANT_FAIR_ACQUIRE;

    fn wait_timeout(&self) -> Duration {
        self.0.wait_timeout()
    }

    fn with_wait_timeout(&self, timeout: Duration) -> NonReentrantFair {
        NonReentrantFair(self.0.with_wait_timeout(timeout))
    }

    /// The script's refusal of a second acquire is [`Error::AlreadyHeld`].
    fn script_error(&self, lock: &NonReentrantFairLock, err: fred::error::Error) -> Error {
        if err.details().contains(REACQUIRE) {
            return Error::AlreadyHeld {
                name: lock.name().to_owned(),
            };
        }
        lock.redis_error(err)
    }
}
