//! The fenced lock, Redisson's `RFencedLock` (protocol §7): the reentrant lock's hash, plus a
//! fencing token taken from a counter by every acquisition.

use arcstr::ArcStr;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use futures::future::BoxFuture;

use crate::error::{Error, Result};
use crate::kit::protocol::{sealed, AcquireCall, Protocol, Receives, Reply, Waits};
use crate::kit::wait::{lock_channel, lock_wake};
use crate::kit::{Client, Guard, Handle};
use crate::name;
use crate::transport::script::Script;

/// Acquire or re-enter and take the next token (`lua/fenced_acquire.lua`).
static FENCED_ACQUIRE: Script = Script::new(
    "fenced_acquire",
    include_str!("../../lua/fenced_acquire.lua"),
);

/// The fenced lock's [`Protocol`]: [`FencedLock`] is `Handle<Fenced>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fenced;

/// A reentrant lock that hands out a **fencing token** with every acquisition, on the same Redis
/// keys as Java Redisson's `RFencedLock`.
///
/// A lease can run out while its holder is paused (a GC pause, a stalled VM): the holder then
/// still believes it holds the lock while another holder has it. The token protects a resource
/// against that stale holder: every acquisition, re-entries included, takes the next value of a
/// counter, so a later holder always has a larger token. A resource that remembers the largest
/// token it has seen and refuses writes with a smaller one rejects the stale holder's writes.
///
/// On Redis the lock is the reentrant lock's hash (so [`Lock`](crate::Lock) and Java's `RLock` on the same
/// name see it held), and the counter is the string `redisson_lock_token:{name}`, with no TTL.
/// Releases, renewals and waiting are the reentrant lock's. One difference: a waiter of a fenced
/// lock is never handed the lock by a release of its own client, since that would skip the token;
/// it takes the lock with its own script after the unlock message.
///
/// # Cancel safety
/// Every acquire method is cancel safe, as [`Lock`](crate::Lock)'s.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.fenced_lock("orders:42");
///
/// let guard = lock.lock().await?;
/// let token = guard.token();
/// // Pass `token` with every write to the protected resource, which refuses tokens lower than
/// // the highest it has seen.
/// assert_eq!(lock.token().await?, Some(token));
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type FencedLock = Handle<Fenced>;

/// One hold of a fenced lock and the token its acquisition took, released when dropped.
///
/// Everything but [`token`](FencedGuard::token) is the kit's [`Guard`]'s: the release is the
/// reentrant lock's (same hash, same unlock message).
///
/// ```no_run
/// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
/// let guard = lock.lock().await?;
/// let token = guard.token();
/// // ... write to the resource with `token` ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type FencedGuard = Guard<Fenced>;

impl Client {
    /// A handle to the fenced lock named `name` (Redisson's `getFencedLock(name)`).
    ///
    /// This sends nothing to Redis. An empty name is reported by the lock's operations as
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.fenced_lock("orders:42");
    /// assert_eq!(lock.name(), "orders:42");
    /// # Ok(()) }
    /// ```
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        Handle::new(Arc::clone(&self.inner), name.into(), Fenced)
    }
}

impl FencedLock {
    /// The last token handed out (`GET` of the token key; Redisson's `getToken()`), `None`
    /// before the first acquisition or after [`delete`](FencedLock::delete). A token key that
    /// does not hold an integer is an [`Error::WrongType`] naming it.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// assert_eq!(lock.token().await?, Some(guard.token()));
    /// # Ok(()) }
    /// ```
    pub async fn token(&self) -> Result<Option<u64>> {
        let key = name::fenced_token_key(self.name());
        let value: Option<String> = self.query_key("GET", &key, &[]).await?;
        value
            .map(|text| text.parse().map_err(|_| Error::WrongType { name: key }))
            .transpose()
    }

    /// Deletes the lock **and its token key** (`DEL name token-key`; Redisson's `delete()`):
    /// the next acquisition starts the token sequence again at 1, so tokens handed out before
    /// no longer order after it. Publishes nothing. Returns whether anything was deleted.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// lock.delete().await?;
    /// assert_eq!(lock.token().await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        let key = name::fenced_token_key(self.name());
        let deleted: u64 = self.query("DEL", &[&key]).await?;
        Ok(deleted > 0)
    }
}

impl FencedGuard {
    /// The fencing token this acquisition took: larger than every token handed out before it
    /// on this lock (until [`FencedLock::delete`] resets the sequence).
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::FencedLock) -> ferrisson::Result<()> {
    /// let first = lock.lock().await?;
    /// let again = lock.lock().await?; // a re-entry takes a new token too
    /// assert!(again.token() > first.token());
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> u64 {
        self.extra
    }
}

impl sealed::Sealed for Fenced {}

impl Protocol for Fenced {
    /// The token.
    type Extra = u64;
    type Acquiring = ();
    const NAMES: (&'static str, &'static str) = ("FencedLock", "FencedGuard");
    const RECEIVES: Receives = Receives::FencedHold;

    /// A release of its own client hands the lock to a waiter as to the reentrant lock's, and
    /// takes the waiter's fencing token in the same script (`lua/release.lua`'s `token_key`).
    fn waits(&self) -> Waits<u64> {
        Waits::Channel {
            channel: lock_channel,
            wake: lock_wake,
            hand_off: Some(|token| token),
        }
    }

    fn begin(&self, _lock: &FencedLock, _field: &ArcStr, _wait: Option<Duration>) {}

    fn send(
        &self,
        call: AcquireCall<'_, Self>,
    ) -> BoxFuture<'static, Result<Value, fred::error::Error>> {
        let name = call.lock.name();
        let keys = vec![name.to_owned(), name::fenced_token_key(name)];
        let args = vec![call.lease_arg(), call.field.to_string()];
        call.run(&FENCED_ACQUIRE, keys, args)
    }

    /// `[-1, token]` when acquired, `[PTTL, -1]` when busy.
    fn read(reply: &Value) -> Option<Reply<u64>> {
        let Value::Array(parts) = reply else {
            return None;
        };
        match parts.as_slice() {
            [Value::Integer(-1), Value::Integer(token)] => {
                u64::try_from(*token).ok().map(Reply::Acquired)
            }
            [Value::Integer(ttl), Value::Integer(-1)] => Some(Reply::Busy(*ttl)),
            _ => None,
        }
    }

    /// The script's own error for a token key that is not an integer
    /// (`lua/fenced_acquire.lua`) names the token key; any other names the lock.
    fn script_error(&self, lock: &FencedLock, err: fred::error::Error) -> Error {
        if err.details().contains("fencing token key") {
            let key = name::fenced_token_key(lock.name());
            return lock.client().redis_error(&key, err);
        }
        lock.redis_error(err)
    }
}
