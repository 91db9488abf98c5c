//! The reentrant lock, Redisson's `RLock` (protocol §2): the kit's handle and guard with the
//! `ACQUIRE` and `RELEASE` scripts, woken on the lock channel, with local hand-off.

use arcstr::ArcStr;
use std::sync::Arc;
use std::time::Duration;

use crate::kit::protocol::{sealed, Protocol};
use crate::kit::{Client, Guard, Handle};

/// The reentrant lock's [`Protocol`]: [`Lock`] is `Handle<Reentrant>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reentrant;

/// A reentrant distributed lock, on the same Redis keys as Java Redisson's `RLock`.
///
/// Use it to let one holder at a time, across processes and across Rust and Java services,
/// run a critical section. It is reentrant per [`Owner`](crate::Owner): by default the current
/// tokio task (as a Java thread), or an explicit owner bound with
/// [`with_owner`](Handle::with_owner).
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
/// let attempt = lock.try_lock_within_with_lease(Duration::from_secs(1), Duration::from_secs(10)).await?;
/// if let Some(guard) = attempt.acquired() {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
pub type Lock = Handle<Reentrant>;

/// One hold of a reentrant lock, released when dropped: the kit's [`Guard`] (see its docs for
/// `unlock`, `lost` and the rest).
///
/// ```no_run
/// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
/// let guard: ferrisson::LockGuard = lock.lock().await?;
/// let inner = guard.reenter().await?; // a second hold of the same owner
/// inner.unlock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type LockGuard = Guard<Reentrant>;

impl Client {
    /// A handle to the reentrant lock named `name` (Redisson's `getLock(name)`).
    ///
    /// This sends nothing to Redis. The name is the Redis key of the lock, as on the Java side;
    /// an empty name is reported by the lock's operations as
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.lock("orders:42");
    /// assert_eq!(lock.name(), "orders:42");
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Handle::new(Arc::clone(&self.inner), name.into(), Reentrant)
    }
}

impl<P: Protocol> Handle<P> {
    /// The reentrant lock on the same hash and owner: what Java's `RLock` of the name is.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.spin_lock("jobs:7");
    /// let _guard = lock.lock().await?;
    /// assert!(lock.as_lock().is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub fn as_lock(&self) -> Lock {
        self.as_kind(Reentrant)
    }
}

impl sealed::Sealed for Reentrant {}

/// Every other item is the contract's default: the reentrant lock is what the kit is made of.
impl Protocol for Reentrant {
    type Extra = ();
    type Acquiring = ();
    const NAMES: (&'static str, &'static str) = ("Lock", "LockGuard");

    fn begin(&self, _lock: &Lock, _field: &ArcStr, _wait: Option<Duration>) {}
}

#[cfg(test)]
mod future_sizes {
    /// The size of the future that `make` returns.
    fn future_size<A, F: Fn(A) -> Fut, Fut>(_: &F) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// A task that locks and unlocks in a loop (the benchmark's parked waiter) keeps its future
    /// in tokio's task cell, which grows in 128-byte steps (a 104-byte header and trailer
    /// besides the future): the future's largest state, parked in `lock()` or in `unlock()`,
    /// is what each parked waiter costs. A future of at most 664 bytes fits a 768-byte cell.
    /// (A parked `lock()` was 1,000 bytes before the parked state was made one hand-written
    /// future, the acquire's state kept once, and the TTL bound left to the line's timer.)
    #[test]
    fn a_task_parked_in_lock_fits_a_768_byte_task_cell() {
        type Extra = (
            std::sync::Arc<u64>,
            std::sync::Arc<u64>,
            std::sync::Arc<u64>,
            u64,
        );
        let task = |(lock, extra): (crate::Lock, Extra)| async move {
            loop {
                let guard = lock.lock().await?;
                let _ = &extra;
                guard.unlock().await?;
            }
            #[allow(unreachable_code)]
            Ok::<(), crate::Error>(())
        };
        let task_size = future_size(&task);
        let cell = (task_size + 104).div_ceil(128) * 128;
        assert!(
            task_size <= 664,
            "task future {task_size} B: a {cell} B task cell"
        );
        let unlock = |guard: crate::LockGuard| guard.unlock();
        assert!(
            future_size(&unlock) <= 400,
            "unlock future {} B",
            future_size(&unlock)
        );
    }

    /// A held lock's guard is most of what holding costs where the caller keeps it (the
    /// benchmark's `held` scenario keeps 100,000 in a `Vec`): its handle (client, name, owner)
    /// and its hold (field, generation, lease, how the acquisition went). It was 152 bytes
    /// before the hold stopped keeping its client and name twice, 104 before names and holder
    /// fields became 8-byte pointers (`ArcStr`).
    #[test]
    fn a_lock_guard_takes_88_bytes() {
        let size = std::mem::size_of::<crate::LockGuard>();
        assert!(size <= 88, "LockGuard {size} B");
    }
}
