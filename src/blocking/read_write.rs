//! The blocking twin of the read-write lock ([`crate::ReadWriteLock`]): the owner is the calling
//! thread, or an explicit owner.

use std::sync::Arc;

use super::{Client, Handle, Inner};
use crate::lock::{Read, Write};
use crate::Owner;

impl Client {
    /// A handle to the read-write lock `name` (Redisson's `getReadWriteLock`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let rw = client.read_write_lock("catalog");
    /// let guard = rw.read_lock().lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock {
            client: Arc::clone(&self.inner),
            rw: self.inner.client.read_write_lock(name),
            owner: None,
        }
    }
}

/// A blocking handle to a read-write lock; see [`crate::ReadWriteLock`] for the semantics. The
/// owner is the calling thread, or the explicit owner bound with
/// [`with_owner`](ReadWriteLock::with_owner).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let rw = client.read_write_lock("catalog");
/// let writing = rw.write_lock().lock()?;
/// let reading = rw.read_lock().lock()?; // the writer may read (downgrade)
/// writing.unlock()?;
/// reading.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ReadWriteLock {
    client: Arc<Inner>,
    rw: crate::ReadWriteLock,
    owner: Option<Owner>,
}

impl ReadWriteLock {
    /// The lock's name (the Redis key of its hash).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.read_write_lock("catalog").name(), "catalog");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.rw.name()
    }

    /// The same lock acting for `owner` instead of the calling thread.
    ///
    /// ```no_run
    /// # fn demo(rw: ferrisson::blocking::ReadWriteLock) {
    /// let owner = ferrisson::Owner::new();
    /// assert_eq!(rw.with_owner(owner).owner(), owner);
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> ReadWriteLock {
        ReadWriteLock {
            owner: Some(owner),
            ..self.clone()
        }
    }

    /// The owner this handle acts for: the bound owner, or the calling thread.
    ///
    /// ```no_run
    /// # fn demo(rw: ferrisson::blocking::ReadWriteLock) {
    /// let me = rw.owner();
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.owner.unwrap_or_else(Owner::current_thread)
    }

    /// The read side, acting for this handle's owner (see [`crate::ReadWriteLock::read_lock`]).
    ///
    /// ```no_run
    /// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
    /// let guard = rw.read_lock().lock()?;
    /// # Ok(()) }
    /// ```
    pub fn read_lock(&self) -> ReadLock {
        Handle::new(&self.client, self.rw.read_lock(), self.owner)
    }

    /// The write side, acting for this handle's owner (see
    /// [`crate::ReadWriteLock::write_lock`]).
    ///
    /// ```no_run
    /// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
    /// let guard = rw.write_lock().lock()?;
    /// # Ok(()) }
    /// ```
    pub fn write_lock(&self) -> WriteLock {
        Handle::new(&self.client, self.rw.write_lock(), self.owner)
    }
}

/// The blocking read side (see [`crate::ReadLock`]).
///
/// ```no_run
/// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
/// let read: ferrisson::blocking::ReadLock = rw.read_lock();
/// assert!(!read.is_locked()?);
/// # Ok(()) }
/// ```
pub type ReadLock = Handle<Read>;

/// The blocking write side (see [`crate::WriteLock`]).
///
/// ```no_run
/// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
/// let write: ferrisson::blocking::WriteLock = rw.write_lock();
/// assert!(!write.is_locked()?);
/// # Ok(()) }
/// ```
pub type WriteLock = Handle<Write>;

/// A read hold taken through the blocking API (see [`crate::ReadGuard`]).
///
/// ```no_run
/// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::ReadGuard = rw.read_lock().lock()?;
/// # Ok(()) }
/// ```
pub type ReadGuard = super::Guard<Read>;

/// A write hold taken through the blocking API (see [`crate::WriteGuard`]).
///
/// ```no_run
/// # fn demo(rw: ferrisson::blocking::ReadWriteLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::blocking::WriteGuard = rw.write_lock().lock()?;
/// # Ok(()) }
/// ```
pub type WriteGuard = super::Guard<Write>;
