//! The wait loop shared by every pub/sub lock (protocol §1.6).
//!
//! 1. Try once. Acquired: done.
//! 2. Take a share of the lock channel's subscription and wait for the server's confirmation.
//! 3. Try again: a release between step 1 and the subscription is caught here, so no wake-up is
//!    ever lost.
//! 4. Park on the channel's semaphore for at most min(the lock's TTL, the time left), then go to
//!    3. An unlock message lets one local waiter retry; a TTL that runs out means the holder's
//!    lease expired (or its message was lost), so retrying then is right too.
//!
//! There is no fixed-interval polling: every retry follows a message, a TTL, or a reconnect.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::guard::{Acquisition, WokenBy};
use crate::client::ClientInner;
use crate::config::WhenUnavailable;
use crate::error::{Error, Result};
use crate::pubsub::Wake;

/// The outcome of one acquire attempt.
pub(crate) enum Attempt<T> {
    /// Acquired; `T` is the new hold.
    Acquired(T),
    /// Held by someone else; the lock's PTTL in ms (−1: no TTL, −2: gone meanwhile).
    Busy(i64),
}

/// Runs `attempt` until it acquires or `wait` (None: no limit) runs out (`Ok(None)`).
///
/// # Cancel safety
/// Cancel safe as long as `attempt` is: the subscription share is released on drop.
pub(crate) async fn acquire_with_wait<T, F, Fut>(
    client: &ClientInner,
    channel: &Arc<str>,
    wait: Option<Duration>,
    mut attempt: F,
) -> Result<Option<(T, Acquisition)>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let start = Instant::now();
    // A wait too large for the clock is no bound at all.
    let deadline = wait.and_then(|wait| start.checked_add(wait));
    let time_left = || deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()));
    let mut subscription = None;
    let mut woken_by = WokenBy::Immediate;
    let mut attempts = 0u32;
    let mut backoff = Duration::from_millis(50);
    loop {
        attempts += 1;
        // An attempt may wait for a connection (KeepWaiting) or a slow server: it counts against
        // the wait bound. A lone try (no time to wait at all) gets the response timeout instead.
        let outcome = match time_left() {
            Some(left) if !left.is_zero() => match tokio::time::timeout(left, attempt()).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    tracing::debug!(attempts, "not acquired within the wait bound");
                    return Ok(None);
                }
            },
            _ => attempt().await,
        };
        let ttl_ms = match outcome {
            Ok(Attempt::Acquired(hold)) => {
                let acquisition = Acquisition {
                    waited: start.elapsed(),
                    woken_by,
                    attempts,
                };
                tracing::debug!(
                    waited_ms = acquisition.waited.as_millis() as u64,
                    ?woken_by,
                    attempts,
                    "acquired"
                );
                return Ok(Some((hold, acquisition)));
            }
            Ok(Attempt::Busy(ttl_ms)) => ttl_ms,
            Err(err)
                if err.is_transient()
                    && client.config.when_unavailable == WhenUnavailable::KeepWaiting =>
            {
                // Redis is unreachable: wait for it within the bound, backing off.
                let pause = match time_left() {
                    Some(left) if left.is_zero() => return Err(err),
                    Some(left) => backoff.min(left),
                    None => backoff,
                };
                tracing::debug!(error = %err, ?pause, "redis unavailable; waiting for it");
                tokio::time::sleep(pause).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                subscription = None; // re-subscribe once Redis is back
                continue;
            }
            Err(err) => return Err(err),
        };
        backoff = Duration::from_millis(50);
        if time_left().is_some_and(|left| left.is_zero()) {
            tracing::debug!(attempts, "not acquired within the wait bound");
            return Ok(None);
        }
        let Some(share) = subscription.as_ref() else {
            // Subscribe (bounded by the time left), then retry at once (step 3).
            let subscribe = client.pubsub.subscribe(channel);
            let share = match time_left() {
                Some(left) => match tokio::time::timeout(left, subscribe).await {
                    Ok(share) => share,
                    Err(_) => return Ok(None),
                },
                None => subscribe.await,
            };
            match share {
                Ok(share) => subscription = Some(share),
                Err(err)
                    if err.is_transient()
                        && client.config.when_unavailable == WhenUnavailable::KeepWaiting =>
                {
                    tokio::time::sleep(time_left().map_or(backoff, |left| left.min(backoff))).await;
                }
                Err(err) => return Err(err),
            }
            continue;
        };
        // A negative TTL: the lock has no expiry (wait for a message only) or just vanished.
        let bound = match (ttl_ms, time_left()) {
            (-2 | 0, _) => continue,
            (ttl, left) if ttl > 0 => {
                let ttl = Duration::from_millis(ttl as u64);
                Some(left.map_or(ttl, |left| left.min(ttl)))
            }
            (_, left) => left,
        };
        woken_by = match share.wait(bound).await {
            Wake::Message => WokenBy::Message,
            Wake::Timeout => WokenBy::Ttl,
        };
    }
}

/// Maps a script error to the crate's error for the lock `name`.
pub(crate) fn script_error(client: &ClientInner, name: &str, err: fred::error::Error) -> Error {
    Error::from_redis(err, name, client.redis.response_timeout)
}
