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

use crate::error::{Error, Result};

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
