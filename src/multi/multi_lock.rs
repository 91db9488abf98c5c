//! Redisson's `RedissonMultiLock` (protocol §9): every part held.

use super::composite_methods;
use super::rounds::{Kind, Parts};
use crate::error::Result;
use crate::lock::Lock;

/// A lock made of several reentrant locks, held only when every one of them is: Redisson's
/// `RedissonMultiLock`. The locks may belong to different [`Client`](crate::Client)s (and so to
/// independent Redis servers), or to one; each is an ordinary [`Lock`] on Redisson's keys.
///
/// The locks are taken in the order given, each with all the wait that is left. When one fails
/// (busy, or an outage), the locks taken are released and, while the wait lasts, the next round
/// starts again from the first lock (Redisson's algorithm, protocol §9). A lock that cannot be
/// taken at all (a key of another type: [`Error::WrongType`](crate::Error::WrongType), or any
/// other error that is not an outage) ends the acquisition at once with that error, after
/// releasing what was taken: no round could succeed.
///
/// The guard ([`MultiGuard`](crate::MultiGuard)) is lost as soon as one part is.
///
/// # Cancel safety
/// Every acquire method is cancel safe: dropping its future drops the guards of the parts
/// already taken (each released in the background by its client) and the acquire in flight
/// (taken back by its client when the reply comes), so nothing is left held.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// use std::time::Duration;
/// use ferrisson::{Client, MultiLock};
///
/// let a = Client::connect("redis://10.0.0.1:6379").await?;
/// let b = Client::connect("redis://10.0.0.2:6379").await?;
/// let both = MultiLock::new([a.lock("accounts:1"), b.lock("accounts:2")])?;
/// if let Some(guard) = both.try_lock_within(Duration::from_secs(1)).await?.acquired() {
///     // ... both accounts are ours ...
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    parts: Parts,
}

impl MultiLock {
    /// A lock over `locks`, taken in that order. Fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty list (as
    /// Redisson's constructor) or a lock with an unusable name. Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(a: ferrisson::Client, b: ferrisson::Client) -> ferrisson::Result<()> {
    /// let multi = ferrisson::MultiLock::new([a.lock("x"), b.lock("y")])?;
    /// assert!(ferrisson::MultiLock::new([]).is_err());
    /// # Ok(()) }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<MultiLock> {
        Ok(MultiLock {
            parts: Parts::new(locks, Kind::All, 1, "MultiLock")?,
        })
    }
}

composite_methods!(MultiLock);
