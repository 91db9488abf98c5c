//! The release path every primitive's guards and the janitor share: one release now, with a
//! local hand-off when this client has waiters of the lock.

use fred::prelude::Value;

use super::janitor::{Release, Releaser};
use super::{give_way, InFlight};
use crate::error::Result;
use crate::kit::ClientInner;
use crate::lease::doubt::{outcome_unknown, Call};
use crate::lease::watchdog::HoldKey;
use crate::transport::script::LockCall;
use std::sync::Arc;

/// Releases one hold now and returns the script's reply (nil: not held, 0: partial, 1: full
/// release). `call` is the release's registration, taken before the lease table counted the
/// hold released (`doubt.rs`).
///
/// # Cancel safety
/// Cancel safe: once sent, a dropped call's release is finished by the background task.
pub(crate) async fn send_release(
    client: &ClientInner,
    release: &Release,
    call: Call,
) -> Result<Value> {
    let releaser = client.releaser();
    let release_now = release.clone();
    let reply = InFlight::new(
        async move {
            let reply = release_or_hand_off(releaser, release_now).await;
            drop(call);
            reply
        },
        None,
        None,
        client.janitor.clone(),
    )
    .await
    .map_err(|err| client.redis_error(&release.name, err))?;
    tracing::debug!(lock = %release.name, field = %release.field, reply = %crate::shown::Reply(&reply), "released");
    Ok(reply)
}

/// The one release path (guards, `Lock::unlock`, dropped guards, undone acquires): a primitive's
/// own release script (`Release::script`) runs as it is; for `RELEASE`, when a local
/// waiter is queued for the lock, the release names it and hands the lock to it in the same
/// script (see `handoff.rs`); otherwise it is a plain `RELEASE`, after which this client gives
/// way to other clients' waiters if its unlock message reached any. Replies as `RELEASE` to a
/// caller: nil (not held), 0 (partial) or 1 (full release, a hand-off included).
pub(crate) async fn release_or_hand_off(
    releaser: Releaser,
    mut release: Release,
) -> Result<Value, fred::error::Error> {
    let Releaser {
        redis,
        handoffs,
        doubts,
    } = releaser;
    // Set once the caller's own hold was handed over: later rounds only clean up after a waiter
    // that left, and do not change the caller's outcome.
    let mut handed_over = false;
    loop {
        let key = release.key();
        // A field in doubt is brought down to this client's count by the reconciler, which the
        // lease table already lowered for this hold: that does this release's work.
        if doubts.take_release(&key) {
            return Ok(Value::Integer(1));
        }
        if let Some(by) = release.script {
            // A primitive's own release: no local hand-off (its waiters do not line up here).
            let reply = redis.run_release(&release, by).await;
            if reply.as_ref().is_err_and(outcome_unknown) {
                doubts.mark(&key);
            }
            return if handed_over {
                Ok(Value::Integer(1))
            } else {
                reply
            };
        }
        // No hand-offs while anything is in doubt: a field in doubt must not receive a hold
        // that the reconciler does not count.
        let claimed = if doubts.any() {
            Err(handoffs.contended(&release.name))
        } else {
            handoffs.claim(&release.name)
        };
        let (claim, heir) = match claimed {
            Ok(claim) => claim,
            Err(local_waiters) => {
                let plain = handoffs.plain_release(&release.name, local_waiters);
                let reply = redis
                    .run_lock_call(LockCall::Release {
                        release,
                        publish: redis.publish_arg,
                        to: None,
                    })
                    .await;
                if reply.as_ref().is_err_and(outcome_unknown) {
                    doubts.mark(&key);
                }
                let reply = plain_release_reply(plain, reply);
                return if handed_over {
                    Ok(Value::Integer(1))
                } else {
                    reply
                };
            }
        };
        // Becomes a plain release if another field holds the lock too (lua/release.lua): not
        // worth making local waiters wait for the outcome of every hand-off. A conditional
        // hand-off becomes one whenever another client listens: then they wait for it.
        let plain = handoffs.plain_release(&release.name, claim.conditional);
        let to_field = Arc::clone(&heir.field);
        let reply = redis
            .run_lock_call(LockCall::Release {
                release: release.clone(),
                publish: redis.publish_arg,
                to: Some(heir),
            })
            .await;
        if reply.as_ref().is_err_and(outcome_unknown) {
            // Either field may now hold what this client does not know of.
            doubts.mark(&key);
            doubts.mark(&HoldKey {
                name: Arc::clone(&release.name),
                field: Arc::clone(&to_field),
            });
        }
        let handed = matches!(reply, Ok(Value::Integer(-1)));
        if handed {
            crate::metrics::handed_off();
        }
        match claim.settle(handed) {
            // The waiter left while the lock was being handed to it: release its hold too.
            Some(lease_ms) => {
                handed_over = true;
                release = Release {
                    field: to_field,
                    lease_ms,
                    ..release
                };
            }
            None if handed || handed_over => return Ok(Value::Integer(1)),
            // Not handed over: another field held the lock too and the script fell back to
            // the plain full release, or the call failed.
            None => return plain_release_reply(plain, reply),
        }
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
