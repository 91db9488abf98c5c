//! The blocking twin of [`crate::Client::inspect_as`].

use super::Client;
use crate::error::Result;
use crate::inspect::{LockInfo, Primitive};

impl Client {
    /// Reads the state of `name` atomically as `primitive` (see
    /// [`crate::Client::inspect_as`]): a key holding another primitive of the family is refused
    /// with [`crate::Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// use ferrisson::inspect::Primitive;
    ///
    /// let latch = client.inspect_as("jobs:done", Primitive::CountDownLatch)?;
    /// println!("count {}", latch.count.unwrap_or(0));
    /// # Ok(()) }
    /// ```
    pub fn inspect_as(&self, name: &str, primitive: Primitive) -> Result<LockInfo> {
        self.inner
            .block_on(self.inner.client.inspect_as(name, primitive))?
    }
}
