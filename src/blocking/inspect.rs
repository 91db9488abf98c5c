//! The blocking twins of [`crate::Client::inspect_as`], [`crate::Client::find_deadlocks`] and
//! [`crate::Client::recorded_waits`].

use super::Client;
use crate::error::Result;
use crate::inspect::{LockInfo, Primitive};
use crate::wait_for::{Deadlock, WaitStep};

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

    /// The deadlocks visible now (see [`crate::Client::find_deadlocks`]).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// for deadlock in client.find_deadlocks()? {
    ///     println!("{deadlock}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn find_deadlocks(&self) -> Result<Vec<Deadlock>> {
        self.inner.block_on(self.inner.client.find_deadlocks())?
    }

    /// Every wait recorded now (see [`crate::Client::recorded_waits`]).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// for wait in client.recorded_waits()? {
    ///     println!("{} waits for {}", wait.owner, wait.lock);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn recorded_waits(&self) -> Result<Vec<WaitStep>> {
        self.inner.block_on(self.inner.client.recorded_waits())?
    }
}
