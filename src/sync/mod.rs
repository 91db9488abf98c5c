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

use arcstr::ArcStr;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use fred::prelude::Value;
use futures::future::BoxFuture;

use crate::error::{Error, Result};
use crate::kit::in_flight::Undo;
use crate::kit::janitor::Job;
use crate::kit::release::release_error;
use crate::kit::wait::{acquire_with_wait, Holder, Lapse, TryOutcome, WaitChannel, Waiter};
use crate::kit::{Acquisition, ClientInner, InFlight};
use crate::transport::pubsub::Wakes;
use crate::transport::script::{encode, Encoded, Script};
use crate::transport::{Gone, Redis, Rollback};

/// What a semaphore's acquire took and its release gives back (permits; one permit by id), sent
/// alone and synced as every release: for a release, a dropped guard, a cancelled acquire's
/// undo, and the rollback of an acquire no replica acknowledged. Displayed in log lines.
trait GiveBack: std::fmt::Display + Send + Sync + Sized + 'static {
    /// The release script.
    const SCRIPT: &'static Script;

    /// Gives what it can to this client's waiters in line (a semaphore's permits), and returns
    /// what is left to give back to Redis.
    fn hand_over(self, _client: &ClientInner) -> Option<Self> {
        Some(self)
    }
    /// What a background give-back that failed leaves behind, for its log line.
    const IF_LOST: &'static str;
    /// Whether giving it back twice gives back no more than once (a permit released by its
    /// id), so that a give-back the runtime's shutdown cut off may be sent again at exit.
    const IDEMPOTENT: bool;
    fn name(&self) -> &ArcStr;
    /// The release script's keys and arguments, with the publish mode's script argument.
    fn encoded(&self, publish: &'static str) -> Encoded;

    /// The undo of an acquisition no replica acknowledged.
    fn rollback(&self, publish: &'static str) -> Rollback {
        Rollback::Write {
            name: ArcStr::clone(self.name()),
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
    let encoded = give_back.encoded(redis.settings.publish_arg);
    redis.run_write(give_back.name(), G::SCRIPT, &encoded).await
}

/// Gives `release` back for nobody who waits for it (`why`: a dropped guard, a cancelled
/// acquire); the outcome is logged, since nobody is left to report it to.
/// Tells whether the task that carried it was gone (then it logs nothing).
async fn give_back_logged<G: GiveBack>(
    redis: Arc<Redis>,
    release: &G,
    why: &'static str,
) -> Option<Gone> {
    match give_back(&redis, release).await {
        Ok(Value::Null) => tracing::debug!("{release} ({why}) was no longer taken"),
        Ok(_) => tracing::debug!("gave back {release} ({why})"),
        Err(err) => match Gone::of(&err) {
            Some(gone) => return Some(gone),
            None => tracing::warn!(
                error = %err,
                "could not give back {release} ({why}); {}",
                G::IF_LOST
            ),
        },
    }
    None
}

/// What a guard took, given back in the background (the client's janitor, so that a drop never
/// blocks) when the guard is dropped before it was released or forgotten.
struct Taken<G: GiveBack> {
    client: Arc<ClientInner>,
    /// What to give back; taken out (for a release now, or to forget it) so that the drop gives
    /// back nothing.
    release: Option<G>,
}

impl<G: GiveBack> Drop for Taken<G> {
    fn drop(&mut self) {
        let Some(release) = self.release.take() else {
            return;
        };
        let Some(release) = release.hand_over(&self.client) else {
            return;
        };
        let release = Arc::new(release);
        self.client.janitor.submit(Job::Write {
            write: Arc::new(move |redis| {
                let release = Arc::clone(&release);
                Box::pin(async move { give_back_logged(redis, &*release, "a dropped guard").await })
            }),
            twice: G::IDEMPOTENT,
        });
    }
}

/// One run of an acquire `script`, synced with `WAIT` when configured: an acquisition no replica
/// acknowledged gives back `release` and fails, as Redisson 3.21+'s.
///
/// # Cancel safety
/// Cancel safe: a reply whose caller is gone is read by the janitor, which gives back `release`
/// when the reply `took` something.
async fn take<G: GiveBack>(
    client: &ClientInner,
    script: &'static Script,
    encoded: Encoded,
    release: G,
    took: fn(&Value) -> bool,
) -> std::result::Result<Value, fred::error::Error> {
    let redis = Arc::clone(&client.redis);
    let rollback = release.rollback(redis.settings.publish_arg);
    let undo_redis = Arc::clone(&redis);
    let undo = Undo::Run(Box::new(move |reply: &Value| {
        took(reply).then(|| -> BoxFuture<'static, ()> {
            Box::pin(async move {
                give_back_logged(undo_redis, &release, "a cancelled acquire").await;
            })
        })
    }));
    // Boxed: fred's command future is several KB.
    let send =
        async move { Box::pin(redis.run_acquire_encoded(script, &encoded, took, rollback)).await };
    InFlight::new(send, Some(undo), None, client.janitor.clone()).await
}

/// How a semaphore's waiter takes a local hand-off: the permits it asks for, and how it builds a
/// guard of them (`None`: it takes none).
type HandOff<A> = Option<(u64, A)>;

/// Both semaphores' acquire: runs `attempt` until it takes what it asks for or `wait` (None: no
/// limit) runs out (`Ok(None)`), woken by the semaphore channel's messages. With `hand_off`
/// (the number of permits asked for, and how to build a guard of them), this client's guards
/// may give their permits straight to this waiter (`Handoffs::hand_permits`); without, every
/// acquisition is its own script's.
async fn acquire_loop<T: Lapse, F, Fut, A>(
    client: &ClientInner,
    name: &ArcStr,
    wait: Option<Duration>,
    attempt: F,
    hand_off: HandOff<A>,
    span: tracing::Span,
) -> Result<Option<(T, Acquisition)>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<TryOutcome<T>>>,
    A: FnMut(Instant, u64) -> T,
{
    let (holder, adopt) = match hand_off {
        // A semaphore's line is keyed by its name; the place's lease is the permits asked for.
        Some((permits, adopt)) => {
            let holder = Holder {
                field: name,
                lease_ms: permits,
                wait_ms: 0,
            };
            (Some(holder), Some(adopt))
        }
        None => (None, None),
    };
    let waiter = Waiter {
        name,
        holder,
        channel: WaitChannel::Of(|name, _| crate::name::semaphore_channel(name)),
        wake: permits_wake,
    };
    let acquired = acquire_with_wait(client, &waiter, wait, attempt, adopt);
    tracing::Instrument::instrument(acquired, span).await
}

/// Runs `release` now for a caller that waits for it: a release that failed after it may have
/// been sent is [`Error::ReleaseUnknown`](crate::Error::ReleaseUnknown) (the permits may not be
/// back).
///
/// # Cancel safety
/// Cancel safe: once sent, the janitor finishes it.
async fn give_back_now<G: GiveBack>(client: &ClientInner, release: G) -> Result<Value> {
    let redis = Arc::clone(&client.redis);
    let name = ArcStr::clone(release.name());
    let send = async move { give_back(&redis, &release).await };
    InFlight::new(send, None, None, client.janitor.clone())
        .await
        .map_err(|err| release_error(client, &name, err))
}

/// Rejects a closed client and an unusable name ([`ClientInner::check_name`]).
fn check_name<const N: usize>(
    client: &ClientInner,
    what: &str,
    name: &str,
    others: impl FnOnce() -> [String; N],
) -> Result<()> {
    client.ensure_open()?;
    client.check_name(what, name, others)
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
    name: &ArcStr,
    script: &'static Script,
    keys: &[&str],
    args: &[&str],
) -> Result<Value> {
    let redis = Arc::clone(&client.redis);
    let encoded = encode(keys, args);
    InFlight::new(
        async move {
            script
                .run_encoded(&redis.pool, &redis.settings.write_options, &encoded)
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
