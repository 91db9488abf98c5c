//! The count-down latch, Redisson's `RCountDownLatch` (protocol §12): a string integer (the
//! remaining count) at the latch's name, changed by `lua/latch.lua`, and the channel
//! `redisson_countdownlatch__channel__{name}` (braces whatever the name holds), on which `0` says
//! the count reached zero and `1` that a new count was set or the latch deleted.

use arcstr::ArcStr;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;

use super::{check_name, get, integer, unexpected, write};
use crate::error::Result;
use crate::kit::wait::{acquire_with_wait, no_hand_off, TryOutcome, WaitChannel, Waiter};
use crate::kit::{Client, ClientInner};
use crate::name;
use crate::transport::pubsub::Wakes;
use crate::transport::script::lua_scripts;

lua_scripts! {
    ["latch.lua"];
    static TRY_SET_COUNT = ("latch_try_set_count",
        "return try_set_count(KEYS[1], KEYS[2], ARGV[1], ARGV[2])\n");
    static COUNT_DOWN = ("latch_count_down", "return count_down(KEYS[1], KEYS[2], ARGV[1])\n");
    static DELETE = ("latch_delete", "return delete(KEYS[1], KEYS[2], ARGV[1])\n");
}

/// A distributed count-down latch on the same Redis keys as Java Redisson's `RCountDownLatch`.
///
/// The latch is a string integer at its name: the remaining count.
/// [`try_set_count`](CountDownLatch::try_set_count) sets it once (while the latch does not
/// exist); every [`count_down`](CountDownLatch::count_down) takes one off, and the one that
/// reaches 0 deletes the key and publishes `0`, which wakes every waiter
/// ([`wait`](CountDownLatch::wait), [`wait_for`](CountDownLatch::wait_for)) here and in Java.
/// A latch that does not exist has count 0: waiting on it returns at once. No `WAIT` for
/// replicas is used for latches, as in Redisson.
///
/// # Cancel safety
/// Every method is cancel safe: a dropped wait leaves nothing behind, and a dropped write
/// completes once it was sent.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let latch = client.count_down_latch("batch:7");
/// latch.try_set_count(3).await?;
///
/// for _ in 0..3 {
///     let latch = latch.clone();
///     tokio::spawn(async move { /* ... a worker's part ... */ latch.count_down().await });
/// }
/// latch.wait().await?; // returns once the three parts are done
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    client: Arc<ClientInner>,
    name: ArcStr,
}

impl Client {
    /// A handle to the count-down latch named `name` (Redisson's `getCountDownLatch(name)`).
    ///
    /// This sends nothing to Redis. An empty name is reported by the latch's operations as
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let latch = client.count_down_latch("batch:7");
    /// assert_eq!(latch.name(), "batch:7");
    /// # }
    /// ```
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        CountDownLatch {
            client: Arc::clone(&self.inner),
            name: ArcStr::from(name.into()),
        }
    }
}

impl CountDownLatch {
    /// The latch's name, which is also its Redis key.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.count_down_latch("batch:7").name(), "batch:7");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the count if the latch does not exist, and publishes `1` (a new count); whether it
    /// did (Redisson's `trySetCount(count)`). A count of 0 creates a latch that is open.
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// assert!(latch.try_set_count(2).await?);
    /// assert!(!latch.try_set_count(5).await?, "set already");
    /// # Ok(()) }
    /// ```
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        self.check()?;
        let count = integer(count, "count")?.to_string();
        let channel = self.channel();
        let keys = [&*self.name, &channel];
        let args = [count.as_str(), self.client.redis.settings.publish_arg];
        match write(&self.client, &self.name, &TRY_SET_COUNT, &keys, &args).await? {
            Value::Integer(set) => Ok(set == 1),
            other => Err(unexpected("latch try-set-count", &other)),
        }
    }

    /// Takes one off the count (Redisson's `countDown()`). The call that reaches 0 deletes the
    /// latch and publishes `0`, waking every waiter. On a latch that does not exist it does
    /// nothing visible (the key becomes −1 and is deleted at once, with no message), as in
    /// Redisson.
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// latch.count_down().await?;
    /// # Ok(()) }
    /// ```
    pub async fn count_down(&self) -> Result<()> {
        self.check()?;
        let channel = self.channel();
        let keys = [&*self.name, &channel];
        let args = [self.client.redis.settings.publish_arg];
        match write(&self.client, &self.name, &COUNT_DOWN, &keys, &args).await? {
            Value::Integer(_) => Ok(()),
            other => Err(unexpected("latch count-down", &other)),
        }
    }

    /// The remaining count (`GET`; Redisson's `getCount()`): 0 when the latch does not exist.
    /// A negative value (only ever written by someone else) reads as 0: the latch is open.
    ///
    /// # Cancel safety
    /// Cancel safe: a read.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// println!("{} parts to go", latch.count().await?);
    /// # Ok(()) }
    /// ```
    pub async fn count(&self) -> Result<u64> {
        self.check()?;
        let count = get(&self.client, &self.name).await?.unwrap_or(0);
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Waits until the count is 0, as long as it takes (Redisson's `await()`). Woken only by the
    /// `0` message of the count-down that reaches zero (as Java's waiters), never polling.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait only gives up its share of the subscription.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// latch.wait().await?;
    /// assert_eq!(latch.count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn wait(&self) -> Result<()> {
        self.wait_loop(None).await.map(drop)
    }

    /// Waits at most `timeout` for the count to reach 0; whether it did (Redisson's
    /// `await(timeout)`). A zero timeout checks once. As in Java, the count is read once more
    /// when the time is up, so a latch deleted meanwhile (which sends no `0`) counts as open.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`wait`](CountDownLatch::wait).
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if !latch.wait_for(Duration::from_secs(5)).await? {
    ///     println!("still {} parts to go", latch.count().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.wait_loop(Some(timeout)).await
    }

    /// Deletes the latch and, when it existed, publishes `1` (a new count: Java waiters keep
    /// waiting); whether it existed (Redisson's `delete()`). Unlike Redisson's, a key of another
    /// type is left alone ([`Error::WrongType`](crate::Error::WrongType)).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes.
    ///
    /// ```no_run
    /// # async fn demo(latch: ferrisson::CountDownLatch) -> ferrisson::Result<()> {
    /// latch.delete().await?;
    /// assert_eq!(latch.count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        self.check()?;
        let channel = self.channel();
        let keys = [&*self.name, &channel];
        let args = [self.client.redis.settings.publish_arg];
        match write(&self.client, &self.name, &DELETE, &keys, &args).await? {
            Value::Integer(deleted) => Ok(deleted == 1),
            other => Err(unexpected("latch delete", &other)),
        }
    }

    /// Waits through the kit's wait loop: an attempt is a `GET` (0 or absent: open; else busy
    /// with no TTL, so only a `0` message wakes it, which wakes every parked waiter).
    async fn wait_loop(&self, timeout: Option<Duration>) -> Result<bool> {
        self.check()?;
        let span = tracing::debug_span!("ferrisson.acquire", latch = %self.name);
        let waiter = Waiter {
            name: &self.name,
            // Waiting for the count, nobody holds anything.
            holder: None,
            channel: WaitChannel::Of(|name, _| name::latch_channel(name)),
            wake: opened_wake,
        };
        let attempt = || async {
            match get(&self.client, &self.name).await? {
                Some(count) if count > 0 => Ok(TryOutcome::Busy(-1)),
                _ => Ok(TryOutcome::Acquired((), false)),
            }
        };
        let opened = tracing::Instrument::instrument(
            acquire_with_wait(&*self.client, &waiter, timeout, attempt, no_hand_off()),
            span,
        )
        .await?;
        if opened.is_some() {
            return Ok(true);
        }
        // Out of time: one last look, as Java's `await(timeout)`, whose loop ends on the count
        // (a latch deleted meanwhile, which sends no `0`, is open).
        // Boxed: a command future is large, and inline it would size every parked waiter's.
        Ok(Box::pin(self.count()).await? == 0)
    }

    fn check(&self) -> Result<()> {
        check_name(&self.client, "count-down latch", &self.name, || {
            [self.channel()]
        })
    }

    fn channel(&self) -> String {
        name::latch_channel(&self.name)
    }
}

/// How a latch channel's message wakes its waiters, as Java's `CountDownLatchPubSub` reads it
/// (protocol §1.4): `0` (the count reached zero) every waiter, `1` (a new count) none.
pub(crate) fn opened_wake(message: i64) -> Wakes {
    if message == 0 {
        Wakes::Everyone
    } else {
        Wakes::Nobody
    }
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.name)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(dead_code)] // only type-checked: the futures are never run
    fn handles_and_futures_are_send(latch: CountDownLatch) {
        fn send<T: Send + Sync + 'static>(_: &T) {}
        fn send_future<T: Send>(_: &T) {}
        send(&latch);
        send_future(&latch.wait());
        send_future(&latch.wait_for(Duration::from_secs(1)));
        send_future(&latch.count_down());
    }

    #[test]
    fn a_latch_channel_wakes_everyone_when_it_opens_and_nobody_on_a_new_count() {
        assert_eq!(opened_wake(0), Wakes::Everyone);
        assert_eq!(opened_wake(1), Wakes::Nobody);
    }
}
