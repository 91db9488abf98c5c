//! Shared result types and measuring helpers for the scenario benchmark.
//!
//! Every scenario reports plain numbers; ratios against the baselines of the same run are
//! computed in `report.rs`.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Lock+unlock throughput of T independent workers (uncontended scenario).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Throughput {
    pub pairs_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// One hot lock shared by T workers.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Hot {
    pub acq_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub handoff_p50_us: f64,
    pub handoff_p99_us: f64,
    pub min_per_task: u64,
    pub max_per_task: u64,
}

/// A latency histogram in microseconds (1 µs .. 60 s, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Records `elapsed` (saturating at the histogram's bounds).
pub fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX).clamp(1, 60_000_000);
    histogram.saturating_record(us);
}

/// (p50, p99, max) in microseconds.
pub fn percentiles(histogram: &Histogram<u64>) -> (f64, f64, f64) {
    if histogram.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    (
        histogram.value_at_quantile(0.50) as f64,
        histogram.value_at_quantile(0.99) as f64,
        histogram.max() as f64,
    )
}

/// This process's resident set size in bytes (from /proc/self/statm).
pub fn rss_bytes() -> u64 {
    let page = 4096u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1).and_then(|rss| rss.parse::<u64>().ok()))
        .map_or(0, |pages| pages * page)
}

/// CPU time (user + system) this process has used so far.
pub fn cpu_time() -> Duration {
    // Fields 14 and 15 of /proc/self/stat are utime and stime in clock ticks (100 Hz on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // after the name, field 3 (state) is index 0, so utime (14) is index 11 and stime (15) 12.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}
