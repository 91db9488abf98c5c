//! The blocking twin of [`crate::CountDownLatch`]: every call blocks the calling thread.

use std::sync::Arc;
use std::time::Duration;

use super::{Client, Inner};
use crate::error::Result;

impl Client {
    /// A handle to the count-down latch `name` (Redisson's `getCountDownLatch`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let latch = client.count_down_latch("batch:7");
    /// # }
    /// ```
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        CountDownLatch {
            client: Arc::clone(&self.inner),
            latch: self.inner.client.count_down_latch(name),
        }
    }
}

/// A blocking handle to a count-down latch; see [`crate::CountDownLatch`] for the semantics of
/// each method.
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let latch = client.count_down_latch("batch:7");
/// latch.try_set_count(1)?;
/// let worker = latch.clone();
/// std::thread::spawn(move || worker.count_down());
/// latch.wait()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    client: Arc<Inner>,
    latch: crate::CountDownLatch,
}

impl CountDownLatch {
    /// The latch's name (its Redis key).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.count_down_latch("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.latch.name()
    }

    /// Sets the count if the latch does not exist (see [`crate::CountDownLatch::try_set_count`]).
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::CountDownLatch) -> ferrisson::Result<()> {
    /// latch.try_set_count(3)?;
    /// # Ok(()) }
    /// ```
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        self.client.block_on(self.latch.try_set_count(count))?
    }

    /// Takes one off the count (see [`crate::CountDownLatch::count_down`]).
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::CountDownLatch) -> ferrisson::Result<()> {
    /// latch.count_down()?;
    /// # Ok(()) }
    /// ```
    pub fn count_down(&self) -> Result<()> {
        self.client.block_on(self.latch.count_down())?
    }

    /// The remaining count (see [`crate::CountDownLatch::count`]).
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::CountDownLatch) -> ferrisson::Result<()> {
    /// println!("{}", latch.count()?);
    /// # Ok(()) }
    /// ```
    pub fn count(&self) -> Result<u64> {
        self.client.block_on(self.latch.count())?
    }

    /// Blocks until the count is 0 (see [`crate::CountDownLatch::wait`]).
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::CountDownLatch) -> ferrisson::Result<()> {
    /// latch.wait()?;
    /// # Ok(()) }
    /// ```
    pub fn wait(&self) -> Result<()> {
        self.client.block_on(self.latch.wait())?
    }

    /// Blocks at most `timeout` for the count to reach 0; whether it did (see
    /// [`crate::CountDownLatch::wait_for`]).
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::CountDownLatch) -> ferrisson::Result<()> {
    /// let opened = latch.wait_for(std::time::Duration::from_secs(5))?;
    /// # Ok(()) }
    /// ```
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.client.block_on(self.latch.wait_for(timeout))?
    }

    /// Deletes the latch; whether it existed (see [`crate::CountDownLatch::delete`]).
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::CountDownLatch) -> ferrisson::Result<()> {
    /// latch.delete()?;
    /// # Ok(()) }
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.client.block_on(self.latch.delete())?
    }
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::CountDownLatch")
            .field("name", &self.name())
            .finish()
    }
}
