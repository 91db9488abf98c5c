//! Redisson's `RedissonRedLock` (protocol §9): a majority of the parts held.

use super::composite_methods;
use super::rounds::{Kind, Parts};
use crate::error::Result;
use crate::lock::Lock;

/// The Redlock algorithm over reentrant locks on independent Redis servers: held when a
/// majority of them (`n/2 + 1` of `n`) is, Redisson's `RedissonRedLock`. Give it one [`Lock`]
/// per server, each from its own [`Client`](crate::Client).
///
/// Redisson deprecates `RedissonRedLock` from 3.25.0 on: a plain `RLock` on a deployment whose
/// writes wait for replicas (synced writes, [`SyncedWrites`](crate::SyncedWrites)) covers the
/// failover it guards against, and Redlock's safety rests on bounded clock drift and pauses
/// (see Martin Kleppmann's critique). It is kept here for what it still does that one
/// deployment cannot: a lock over *independent* masters with no replication between them,
/// which stays available while a minority of them is down or unreachable, and for services that
/// already share RedLocks with Java.
///
/// The locks are taken in the order given, each with an equal share of the wait (at least
/// 1 ms). Up to `n − (n/2 + 1)` may fail per round: once the locks left to fail are no more
/// than that, the acquisition stops early, acquired. When more fail, the locks taken are
/// released and, while the wait lasts, the next round starts from the first lock. A failure is
/// a lock found busy, an outage (a server down, or one that does not answer within the lock's
/// share of the wait: the acquire in flight is dropped and the server's client takes back
/// whatever it took once the server answers), or a lock that cannot be taken (a key of another
/// type, [`Error::WrongType`](crate::Error::WrongType)): counted as a failed server like the
/// others, and reported instead of `Busy` if the majority is not reached.
///
/// The guard ([`MultiGuard`](crate::MultiGuard)) holds the locks taken (at least a majority);
/// it is lost once fewer than a majority of all `n` remain, or once its
/// [`validity`](crate::MultiGuard::validity) (lease − time since the start − drift) is spent.
/// Redisson does not fail an acquisition whose validity is already spent; check it when the
/// wait is long compared with the lease.
///
/// # Cancel safety
/// Every acquire method is cancel safe: dropping its future drops the guards of the locks
/// already taken (each released in the background by its client) and the acquire in flight
/// (taken back by its client when the reply comes), so nothing is left held.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// use std::time::Duration;
/// use ferrisson::{Client, RedLock};
///
/// let mut locks = Vec::new();
/// for host in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
///     let client = Client::connect(&format!("redis://{host}:6379")).await?;
///     locks.push(client.lock("jobs:nightly"));
/// }
/// let red = RedLock::new(locks)?;
/// let attempt = red.try_lock_within_with_lease(Duration::from_secs(1), Duration::from_secs(30)).await?;
/// if let Some(guard) = attempt.acquired() {
///     println!("valid for {:?}", guard.validity());
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedLock {
    parts: Parts,
}

impl RedLock {
    /// The fewest locks a RedLock accepts. With one or two, a majority is every lock: no
    /// server may fail, so the lock would be a [`MultiLock`](crate::MultiLock) with the cost of
    /// a RedLock; Redisson accepts them, this crate refuses them as a likely mistake.
    pub const MIN_LOCKS: usize = 3;

    /// A RedLock over `locks` (one per independent server), taken in that order. Fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for fewer than
    /// [`MIN_LOCKS`](RedLock::MIN_LOCKS) locks or a lock with an unusable name. Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(a: ferrisson::Client, b: ferrisson::Client, c: ferrisson::Client) -> ferrisson::Result<()> {
    /// let red = ferrisson::RedLock::new([a.lock("job"), b.lock("job"), c.lock("job")])?;
    /// assert!(ferrisson::RedLock::new([a.lock("job"), b.lock("job")]).is_err());
    /// # Ok(()) }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<RedLock> {
        Ok(RedLock {
            parts: Parts::new(locks, Kind::Majority, RedLock::MIN_LOCKS, "RedLock")?,
        })
    }
}

composite_methods!(RedLock);
