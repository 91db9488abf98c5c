//! The blocking twin of [`crate::CountDownLatch`]: every call blocks the calling thread.

use std::sync::Arc;
use std::time::Duration;

use super::{twins, Client, Inner};
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
#[derive(Clone, Debug)]
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

    fn latch(&self) -> &crate::CountDownLatch {
        &self.latch
    }

    twins! { latch: "CountDownLatch", "crate::CountDownLatch", on latch;
        /// Sets the count if the latch does not exist.
        fn try_set_count(count: u64) -> bool, "latch.try_set_count(3)?;";
        /// Takes one off the count.
        fn count_down() -> (), "latch.count_down()?;";
        /// The remaining count.
        fn count() -> u64, "println!(\"{}\", latch.count()?);";
        /// Blocks until the count is 0.
        fn wait() -> (), "latch.wait()?;";
        /// Blocks at most `timeout` for the count to reach 0; whether it did.
        fn wait_for(timeout: Duration) -> bool,
            "let opened = latch.wait_for(std::time::Duration::from_secs(5))?;";
        /// Deletes the latch; whether it existed.
        fn delete() -> bool, "latch.delete()?;";
    }
}
