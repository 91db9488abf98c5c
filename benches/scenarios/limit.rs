//! The physical limit, measured in the same run: the acquire script run by `redis-benchmark`
//! at the same concurrency (with and without pipelining), and single-connection PING latency.
//! (Owned by the peers work; stubs for now.)

use std::time::Duration;

/// Acquire-script executions per second by `redis-benchmark` with `clients` connections and
/// `pipeline` commands in flight per connection, for about `duration`.
pub fn redis_benchmark_acquire(_port: u16, _clients: usize, _pipeline: usize, _duration: Duration) -> Result<f64, String> {
    Err("not implemented yet".into())
}

/// p50 of sequential PINGs on one connection, in microseconds.
pub async fn ping_p50_us(_url: &str, _samples: usize) -> Result<f64, String> {
    Err("not implemented yet".into())
}
