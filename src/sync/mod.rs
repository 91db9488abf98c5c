//! Synchronizers that are not locks, on Redisson's keys: the semaphore ([`Semaphore`], protocol
//! §10), the permit-expirable semaphore ([`PermitExpirableSemaphore`], [`Permit`], §11) and the
//! count-down latch ([`CountDownLatch`], §12). The semaphore and the latch are a string integer at their
//! name, changed by Lua scripts that publish on its channel; waiting goes through the kit's wait
//! loop, woken by the pub/sub layer as Java receivers are (a semaphore message `v` wakes up to
//! `v` waiters, a latch `0` every waiter).
//!
//! What they share lives here: the name checks, the cancel-safe script call, giving back what
//! an acquire took, and the reading of a string integer.

pub(crate) mod latch;
mod permit_semaphore;
mod semaphore;

pub use latch::CountDownLatch;
pub use permit_semaphore::{Permit, PermitExpirableSemaphore, PermitIdFormat};
pub use semaphore::{Semaphore, SemaphorePermits};

use std::sync::Arc;

use fred::prelude::Value;

use crate::error::{Error, Result};
use crate::kit::release::release_error;
use crate::kit::{ClientInner, InFlight};
use crate::transport::pubsub::Wakes;
use crate::transport::script::{encode, Encoded, Script};
use crate::transport::{Redis, Rollback};

/// What a semaphore's acquire took and its release gives back (permits; one permit by id), sent
/// alone and synced as every release: for a release, a dropped guard, a cancelled acquire's
/// undo, and the rollback of an acquire no replica acknowledged.
trait GiveBack {
    /// The release script.
    const SCRIPT: &'static Script;
    fn name(&self) -> &Arc<str>;
    /// The release script's keys and arguments, with the publish mode's script argument.
    fn encoded(&self, publish: &'static str) -> Encoded;

    /// The undo of an acquisition no replica acknowledged.
    fn rollback(&self, publish: &'static str) -> Rollback {
        Rollback::Write {
            name: Arc::clone(self.name()),
            script: Self::SCRIPT,
            encoded: self.encoded(publish),
        }
    }
}

/// Runs `give_back`'s release.
async fn give_back<G: GiveBack>(
    redis: &Redis,
    give_back: &G,
) -> std::result::Result<Value, fred::error::Error> {
    let encoded = give_back.encoded(redis.publish_arg);
    redis.run_write(give_back.name(), G::SCRIPT, &encoded).await
}

/// Runs `release` now for a caller that waits for it: a release that failed after it may have
/// been sent is [`Error::ReleaseUnknown`](crate::Error::ReleaseUnknown) (the permits may not be
/// back).
///
/// # Cancel safety
/// Cancel safe: once sent, the janitor finishes it.
async fn give_back_now<G: GiveBack + Send + Sync + 'static>(
    client: &ClientInner,
    release: G,
) -> Result<Value> {
    let redis = Arc::clone(&client.redis);
    let name = Arc::clone(release.name());
    let send = async move { give_back(&redis, &release).await };
    InFlight::new(send, None, None, client.janitor.clone())
        .await
        .map_err(|err| release_error(client, &name, err))
}

/// Rejects an empty name, and in a cluster a name whose `channel` hashes to another slot (the
/// scripts, which take both as keys, would fail with CROSSSLOT; protocol §15.1).
fn check_name(client: &ClientInner, what: &str, name: &str, channel: &str) -> Result<()> {
    client.ensure_open()?;
    if name.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "a {what} name must not be empty"
        )));
    }
    if client.redis.clustered
        && fred::util::redis_keyslot(name.as_bytes())
            != fred::util::redis_keyslot(channel.as_bytes())
    {
        return Err(Error::InvalidArgument(format!(
            "{what} name `{name}` cannot be used in a cluster: its channel `{channel}` hashes to \
             another slot"
        )));
    }
    Ok(())
}

/// `n` as a Redis integer (at most `i64::MAX`), or [`Error::InvalidArgument`] naming `what`.
fn integer(n: u64, what: &str) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::InvalidArgument(format!("{what} is too large: {n}")))
}

/// A `GET` reply read as the string integer the primitive stores (absent: `None`); any other
/// string is an [`Error::WrongType`] naming the key.
fn read_integer(value: Option<String>, name: &str) -> Result<Option<i64>> {
    value
        .map(|text| {
            text.parse().map_err(|_| Error::WrongType {
                name: name.to_owned(),
            })
        })
        .transpose()
}

/// `GET name`, read as [`read_integer`] does.
async fn get(client: &ClientInner, name: &str) -> Result<Option<i64>> {
    let value: Option<String> = client
        .redis
        .query("GET", name, &[])
        .await
        .map_err(|err| client.redis_error(name, err))?;
    read_integer(value, name)
}

/// Runs one of the primitive's write scripts (not synced: Redisson syncs only a semaphore's
/// acquire and release) with `keys` and `args`.
///
/// # Cancel safety
/// Cancel safe: once sent, a dropped call is finished by the janitor (including the EVAL after
/// a NOSCRIPT), so the operation happens whole or, if never sent, not at all.
async fn write(
    client: &ClientInner,
    name: &Arc<str>,
    script: &'static Script,
    keys: &[&str],
    args: &[&str],
) -> Result<Value> {
    let redis = Arc::clone(&client.redis);
    let encoded = encode(keys, args);
    InFlight::new(
        async move {
            script
                .run_encoded(&redis.pool, &redis.write_options, &encoded)
                .await
        },
        None,
        None,
        client.janitor.clone(),
    )
    .await
    .map_err(|err| client.redis_error(name, err))
}

/// An unexpected script reply, as a protocol error.
fn unexpected(script: &str, reply: &Value) -> Error {
    Error::Redis(fred::error::Error::new(
        fred::error::ErrorKind::Protocol,
        format!(
            "unexpected reply to the {script} script: {}",
            crate::shown::Reply(reply)
        ),
    ))
}

/// How a semaphore channel's message wakes its waiters, as Java's `SemaphorePubSub` reads it
/// (protocol §1.4): the message is the number of permits now available, an upper bound on the
/// waiters that can succeed, so that many.
pub(crate) fn permits_wake(message: i64) -> Wakes {
    match usize::try_from(message) {
        Ok(permits) if permits > 0 => Wakes::Up(permits),
        _ => Wakes::Nobody,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_their_bounds() {
        assert_eq!(integer(5, "permits").ok(), Some(5));
        assert!(matches!(
            integer(u64::MAX, "permits"),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(read_integer(Some("-3".into()), "s").ok(), Some(Some(-3)));
        assert_eq!(read_integer(None, "s").ok(), Some(None));
        assert!(matches!(
            read_integer(Some("many".into()), "s"),
            Err(Error::WrongType { name }) if name == "s"
        ));
    }

    #[test]
    fn a_semaphore_channel_wakes_as_many_as_the_permits_it_announces() {
        assert_eq!(super::permits_wake(3), Wakes::Up(3));
        assert_eq!(super::permits_wake(0), Wakes::Nobody);
        assert_eq!(super::permits_wake(-4), Wakes::Nobody);
    }
}
