//! The release path every primitive's guards and the janitor share: one release now, with a
//! local hand-off when this client has waiters of the lock.

use arcstr::ArcStr;
use fred::prelude::Value;
use tokio::sync::oneshot;

use super::janitor::{Release, Releaser};
use super::{give_way, InFlight};
use crate::error::{Error, Result};
use crate::kit::ClientInner;
use crate::lease::doubt::{outcome_unknown, Call, Settlement};
use crate::lease::watchdog::HoldKey;
use crate::transport::script::{Heir, LockCall};
use crate::transport::Redis;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a release sent now came to.
pub(crate) enum Sent {
    /// The script's reply: nil (not held), 0 (partial) or 1 (full release).
    Reply(Value),
    /// The outcome is unknown: the call failed after it may have been sent (`cause`), or the
    /// field was in doubt and the release was left to the reconcile (`cause` is `None`). The
    /// field is in doubt now; `settlement` tells how the reconcile settled it.
    Unknown {
        cause: Option<Error>,
        settlement: Settlement,
    },
}

impl Sent {
    /// The reply, or [`Error::ReleaseUnknown`] (the hold may remain) for a release of `name`
    /// whose outcome is unknown.
    pub(crate) fn reply(self, name: &str) -> Result<Value> {
        match self {
            Sent::Reply(reply) => Ok(reply),
            Sent::Unknown { cause, .. } => Err(release_unknown(name, true, cause)),
        }
    }
}

/// [`Error::ReleaseUnknown`] for a release of `name`.
pub(crate) fn release_unknown(name: &str, may_remain: bool, cause: Option<Error>) -> Error {
    Error::ReleaseUnknown {
        name: name.to_owned(),
        may_remain,
        cause: cause.map(Box::new),
    }
}

/// The error of a release of `name` that failed with `err`: [`Error::ReleaseUnknown`] when it
/// may have been sent (the hold may remain), as it is otherwise (for the primitives whose
/// releases are not settled: semaphores).
pub(crate) fn release_error(client: &ClientInner, name: &str, err: fred::error::Error) -> Error {
    let unknown = outcome_unknown(&err);
    let err = client.redis_error(name, err);
    // A client shut down or without its runtime says so rather than the outcome.
    if unknown && err.is_transient() {
        release_unknown(name, true, Some(err))
    } else {
        err
    }
}

/// Releases one hold now and returns what became of it: the script's reply, or an unknown
/// outcome with the settlement to wait for. `call` is the release's registration, taken before
/// the lease table counted the hold released (`doubt.rs`).
///
/// # Cancel safety
/// Cancel safe: once sent, a dropped call's release is finished by the background task.
pub(crate) async fn send_release(
    client: &ClientInner,
    release: &Release,
    call: Call,
) -> Result<Sent> {
    let releaser = client.releaser();
    let (settlement, watcher) = Settlement::new(&client.leases.doubts);
    let settling = Arc::new(AtomicBool::new(false));
    let release_now = release.clone();
    let left = Arc::clone(&settling);
    let reply = InFlight::new(
        async move {
            let released = release_or_hand_off(releaser, release_now, Some(watcher)).await;
            drop(call);
            released.map(|released| match released {
                Released::Reply(reply) => reply,
                Released::Settling => {
                    left.store(true, Ordering::Release);
                    Value::Null
                }
            })
        },
        None,
        None,
        client.janitor.clone(),
    )
    .await;
    let sent = match reply {
        Ok(_) if settling.load(Ordering::Acquire) => Sent::Unknown {
            cause: None,
            settlement,
        },
        Ok(reply) => Sent::Reply(reply),
        Err(err) if outcome_unknown(&err) => {
            let err = client.redis_error(&release.name, err);
            if !err.is_transient() {
                // The client was shut down, or its runtime is gone: that is the news.
                return Err(err);
            }
            Sent::Unknown {
                cause: Some(err),
                settlement,
            }
        }
        Err(err) => return Err(client.redis_error(&release.name, err)),
    };
    match &sent {
        Sent::Reply(reply) => {
            tracing::debug!(lock = %release.name, field = %release.field, reply = %crate::shown::Reply(reply), "released")
        }
        Sent::Unknown { cause, .. } => {
            tracing::debug!(lock = %release.name, field = %release.field, cause = ?cause, "release of unknown outcome; the holder field is settled")
        }
    }
    Ok(sent)
}

/// What [`release_or_hand_off`] came to.
pub(crate) enum Released {
    /// As `RELEASE` replies to a caller: nil (not held), 0 (partial) or 1 (full release, a
    /// hand-off included).
    Reply(Value),
    /// The field was in doubt: the release was left to the reconcile, which brings the field
    /// down to the client's count (already lowered for this hold). Its outcome is unknown.
    Settling,
}

/// The one release path (guards, `Lock::unlock`, dropped guards, undone acquires): a primitive's
/// own release script (`Release::script`) runs as it is; for `RELEASE`, when a local
/// waiter is queued for the lock, the release names it and hands the lock to it in the same
/// script (see `handoff.rs`); otherwise it is a plain `RELEASE`, after which this client gives
/// way to other clients' waiters if its unlock message reached any. Replies as `RELEASE` to a
/// caller: nil (not held), 0 (partial) or 1 (full release, a hand-off included); or says that
/// the release was left to the reconcile. A release whose outcome is unknown (left to the
/// reconcile, or failed after it may have been sent) puts the field in doubt with `watcher`,
/// which then learns how it was settled.
pub(crate) async fn release_or_hand_off(
    releaser: Releaser,
    mut release: Release,
    mut watcher: Option<oneshot::Sender<bool>>,
) -> Result<Released, fred::error::Error> {
    let Releaser {
        redis,
        handoffs,
        doubts,
    } = releaser;
    // Set once the caller's own hold was handed over: later rounds only clean up after a waiter
    // that left, and do not change the caller's outcome (a full release).
    let mut handed_over = false;
    let released = loop {
        let key = release.key();
        // Rounds after a hand-off release the heir's hold: the caller's outcome is known.
        if handed_over {
            watcher = None;
        }
        // A field in doubt is brought down to this client's count by the reconciler, which the
        // lease table already lowered for this hold: that does this release's work.
        if doubts.take_release(&key, &mut watcher) {
            break Ok(Released::Settling);
        }
        if let Some(by) = release.script.filter(|by| by.hand_off.is_none()) {
            // A primitive's own release that hands nothing over (its waiters do not line up).
            let reply = redis.run_release(&release, by, None).await;
            if reply.as_ref().is_err_and(outcome_unknown) {
                doubts.mark_release(&key, watcher.take());
            }
            break reply.map(Released::Reply);
        }
        // No hand-offs while anything is in doubt: a field in doubt must not receive a hold
        // that the reconciler does not count.
        let claimed = if doubts.any() {
            Err(handoffs.contended(&release.name))
        } else {
            handoffs.claim(&release.name, release.script, || release.channel())
        };
        let (claim, heir) = match claimed {
            Ok(claim) => claim,
            Err(local_waiters) => {
                let plain =
                    handoffs.plain_release(&release.name, || release.channel(), local_waiters);
                let reply = send(&redis, release, None).await;
                if reply.as_ref().is_err_and(outcome_unknown) {
                    doubts.mark_release(&key, watcher.take());
                }
                break plain_release_reply(plain, reply).map(Released::Reply);
            }
        };
        // Becomes a plain release if another field holds the lock too (lua/release.lua): not
        // worth making local waiters wait for the outcome of every hand-off. A conditional
        // hand-off becomes one whenever another client listens: then they wait for it.
        let plain = handoffs.plain_release(&release.name, || release.channel(), claim.conditional);
        let to_field = ArcStr::clone(&heir.field);
        let reply = send(&redis, release.clone(), Some(heir)).await;
        if reply.as_ref().is_err_and(outcome_unknown) {
            // Either field may now hold what this client does not know of: the releasing
            // field a hold whose release may not have run, the heir one it may have been given.
            doubts.mark_release(&key, watcher.take());
            doubts.mark(&HoldKey {
                name: ArcStr::clone(&release.name),
                field: ArcStr::clone(&to_field),
            });
        }
        let handed = reply.as_ref().ok().and_then(handed_over_with);
        if handed.is_some() {
            crate::metrics::handed_off();
        }
        handed_over |= handed.is_some();
        match claim.settle(handed) {
            // The waiter left while the lock was being handed to it: release its hold too.
            Some(lease_ms) => {
                release = Release {
                    field: to_field,
                    lease_ms,
                    ..release
                };
            }
            None if handed_over => break Ok(Released::Reply(Value::Integer(1))),
            // Not handed over: another field held the lock too and the script fell back to
            // the plain full release, or the call failed.
            None => break plain_release_reply(plain, reply).map(Released::Reply),
        }
    };
    if handed_over {
        return Ok(Released::Reply(Value::Integer(1)));
    }
    released
}

/// Sends one release of `release` that may hand the lock to `to`: `RELEASE` through the
/// dispatcher (batched), or the primitive's own script that hands over (alone).
async fn send(
    redis: &Redis,
    release: Release,
    to: Option<Heir>,
) -> Result<Value, fred::error::Error> {
    match release.script {
        Some(by) => redis.run_release(&release, by, to.as_ref()).await,
        None => {
            let call = LockCall::Release {
                release,
                publish: redis.settings.publish_arg,
                to,
            };
            redis.run_lock_call(call).await
        }
    }
}

/// Whether `lua/release.lua`'s reply is a hand-off's, and the fencing token it took for the heir
/// (0 when the heir takes none): -1, or `[-1, token]`.
fn handed_over_with(reply: &Value) -> Option<u64> {
    match reply {
        Value::Integer(-1) => Some(0),
        Value::Array(parts) => match parts.as_slice() {
            [Value::Integer(-1), Value::Integer(token)] => u64::try_from(*token).ok(),
            _ => None,
        },
        _ => None,
    }
}

/// Reads `lua/release.lua`'s reply to a call that freed the lock (1 + the number of subscribers
/// its unlock message reached) as the 1 that callers see, settling `plain` with that number
/// (see `give_way.rs`). Other replies pass through, and leave `plain` unsettled.
fn plain_release_reply(
    plain: Option<give_way::PlainRelease<'_>>,
    reply: Result<Value, fred::error::Error>,
) -> Result<Value, fred::error::Error> {
    match reply {
        Ok(Value::Integer(full)) if full >= 1 => {
            if let Some(plain) = plain {
                plain.settle(full.unsigned_abs() - 1);
            }
            Ok(Value::Integer(1))
        }
        other => other,
    }
}
