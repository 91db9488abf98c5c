//! The client's clock as Redisson reads it (`System.currentTimeMillis()`): the fair lock's
//! deadlines and the permit-expirable semaphore's leases are client time (protocol §0.3).

/// Milliseconds since the Unix epoch (0 for a clock set before 1970).
pub(crate) fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}
