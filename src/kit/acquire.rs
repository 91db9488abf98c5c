//! One acquire script call, made cancel safe the same way for every hash-based primitive: it
//! waits while the holder field is in doubt (`doubt.rs`), registers as a lock-changing call,
//! marks the field in doubt when the outcome is unknown, and hands a reply whose caller is gone
//! to the janitor, which takes back the hold the script may have added.

use std::future::Future;
use std::sync::Arc;

use fred::prelude::Value;
use tokio::time::Instant;

use super::in_flight::{InFlight, Undo};
use super::janitor::Release;
use super::wait::TryOutcome;
use crate::config::WhenUnavailable;
use crate::error::{Error, Result};
use crate::kit::ClientInner;
use crate::lease::doubt::{outcome_unknown, Call};
use crate::lease::watchdog::HoldKey;
use crate::transport::script::ReleaseScript;

/// Sends `send` (an acquire script call for `key`, not yet started: a lazy future) and gives its
/// reply, with the instant from before it was sent, to `read`, which registers the hold and
/// builds its guard. `read` runs synchronously while the call is still registered, so the hold
/// can never be dropped unseen. `acquired` tells from a reply whether the script took a hold
/// (one hold of `lease_ms` is released again, with the primitive's release script `release_by`,
/// if nobody is left to own it).
///
/// # Cancel safety
/// Cancel safe: once sent, a dropped call's reply is settled by the janitor.
pub(crate) async fn acquire_call<T>(
    client: &ClientInner,
    key: &HoldKey,
    lease_ms: u64,
    release_by: Option<&'static ReleaseScript>,
    acquired: fn(&Value) -> bool,
    send: impl Future<Output = Result<Value, fred::error::Error>> + Send + 'static,
    read: impl FnOnce(Result<Value, fred::error::Error>, Instant) -> Result<TryOutcome<T>>,
) -> Result<TryOutcome<T>> {
    let registration = settled_call(client, key).await?;
    let undo = Undo::Release {
        release: Release::of(key, lease_ms, release_by),
        acquired,
    };
    let doubts = Arc::clone(&client.leases.doubts);
    let doubtful = key.clone();
    let sent_at = Instant::now();
    // Bound to a name: its registration must outlive `read`, which records the hold.
    let mut in_flight = InFlight::new(
        async move {
            let reply = send.await;
            if reply.as_ref().is_err_and(outcome_unknown) {
                doubts.mark(&doubtful);
            }
            reply
        },
        Some(undo),
        Some(registration),
        client.janitor.clone(),
    );
    let reply = (&mut in_flight).await;
    read(reply, sent_at)
}

/// Registers an acquire of `key` as a lock-changing call (`doubt.rs`), first waiting while
/// the field is in doubt (the reconciler settles it before this owner may take it again) or a
/// dropped guard's release of it is on its way.
/// Fails at once with `Unavailable` under `FailFast` while the connection is down.
async fn settled_call(client: &ClientInner, key: &HoldKey) -> Result<Call> {
    let doubts = &client.leases.doubts;
    loop {
        let call = doubts.enter();
        if !doubts.holds_back(key) {
            return Ok(call);
        }
        drop(call);
        if client.config.when_unavailable == WhenUnavailable::FailFast
            && !fred::interfaces::ClientLike::is_connected(&client.redis.pool)
        {
            return Err(Error::Unavailable(fred::error::Error::new(
                fred::error::ErrorKind::IO,
                "redis is unreachable, and an earlier call on this lock of unknown outcome is not settled yet",
            )));
        }
        doubts.settled(key).await;
        client.ensure_open()?;
    }
}
