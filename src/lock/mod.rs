//! The lock primitives, one file each, and what they share: the wait loop every pub/sub lock
//! uses ([`wait`]), guards, and the in-flight script wrapper that makes acquires cancel safe.

mod guard;
mod in_flight;
mod reentrant;
mod wait;

pub use guard::{Acquisition, LockGuard, WokenBy};
pub use reentrant::{Lock, RemainingTtl};

pub(crate) use in_flight::InFlight;

use std::time::Duration;

use fred::prelude::Value;

use crate::client::ClientInner;
use crate::error::{Error, Result};
use crate::janitor::Release;

/// The longest lease accepted, about 146 million years.
const MAX_LEASE_MS: u64 = i64::MAX as u64 / 2;

/// Converts a lease to whole milliseconds, rejecting what Redis or Redisson cannot represent:
/// zero (Redisson ≤ 3.17.0 would read it as "expire now"), sub-millisecond leases, and values
/// beyond a Java `long`.
pub(crate) fn lease_millis(lease: Duration, what: &str) -> Result<u64> {
    let ms = lease.as_millis();
    if ms == 0 {
        return Err(Error::InvalidArgument(format!(
            "{what} must be at least 1 ms, got {lease:?}"
        )));
    }
    // Redis adds the lease to its clock in a signed 64-bit millisecond count: keep well clear.
    u64::try_from(ms)
        .ok()
        .filter(|ms| *ms <= MAX_LEASE_MS)
        .ok_or_else(|| Error::InvalidArgument(format!("{what} is too large: {lease:?}")))
}

/// Runs the release script for `release` now and returns its reply (nil: not held, 0: partial,
/// 1: full release).
///
/// # Cancel safety
/// Cancel safe: once sent, a dropped call's release is finished by the background task.
pub(crate) async fn send_release(client: &ClientInner, release: &Release) -> Result<Value> {
    let redis = std::sync::Arc::clone(&client.redis);
    let (keys, args) = (
        release.release_keys(),
        release.release_args(redis.publish_arg),
    );
    let reply = InFlight::new(
        async move {
            crate::script::RELEASE
                .run(&redis.pool, &redis.write_options, keys, args)
                .await
        },
        None,
        client.janitor.clone(),
    )
    .await
    .map_err(|err| Error::from_redis(err, &release.name, client.redis.response_timeout))?;
    tracing::debug!(lock = %release.name, field = %release.field, ?reply, "released");
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_must_be_whole_positive_milliseconds() {
        assert_eq!(
            lease_millis(Duration::from_secs(2), "lease").ok(),
            Some(2000)
        );
        assert!(matches!(
            lease_millis(Duration::ZERO, "lease"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lease_millis(Duration::from_micros(999), "lease"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lease_millis(Duration::MAX, "lease"),
            Err(Error::InvalidArgument(_))
        ));
    }
}
