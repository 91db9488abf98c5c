//! Shared result types and measuring helpers for the scenario benchmark.
//!
//! Every scenario reports plain numbers; ratios against the baselines of the same run are
//! computed in `report.rs`.

use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Lock+unlock throughput of T independent workers (uncontended scenario).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Throughput {
    pub pairs_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// One hot lock shared by T workers.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
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

/// When a timed loop's measured window opens.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    /// After this warm-up, counted from when the loop starts.
    After(Duration),
    /// At this wall-clock instant: one instant for the loops of several processes (the
    /// processes scenario), whose monotonic clocks do not compare.
    At(SystemTime),
}

/// The measured window of a timed loop, `warm_end .. deadline`; `epoch` is when the loop
/// started (for stamps shared between its tasks).
#[derive(Clone, Copy)]
pub struct Window {
    pub epoch: Instant,
    pub warm_end: Instant,
    pub deadline: Instant,
}

impl Window {
    pub fn new(start: Start, duration: Duration) -> Window {
        let epoch = Instant::now();
        let warm_end = match start {
            Start::After(warmup) => epoch + warmup,
            Start::At(at) => match at.duration_since(SystemTime::now()) {
                Ok(ahead) => epoch + ahead,
                // Already open: the window keeps its wall-clock place, this loop joins it late.
                Err(behind) => epoch.checked_sub(behind.duration()).unwrap_or(epoch),
            },
        };
        Window {
            epoch,
            warm_end,
            deadline: warm_end + duration,
        }
    }

    /// Whether an operation that started at `started` and ended at `ended` lies in the window.
    pub fn counts(&self, started: Instant, ended: Instant) -> bool {
        started >= self.warm_end && ended <= self.deadline
    }

    /// `at` in µs since the window opened (0 before it): comparable between the processes
    /// of one [`Start::At`].
    pub fn offset_us(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.warm_end).as_micros()).unwrap_or(u64::MAX)
    }

    /// `at` in ns since the epoch (for a "release started" stamp shared by the tasks).
    pub fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Two sides' turns: `rounds` rounds of one turn each, side 0 first in odd rounds and side 1
/// first in even ones, so that both see the same drift of the machine (see
/// `compare_uncontended` in main.rs). `turn(side, round)` runs one; its results by side, in
/// round order.
pub async fn in_turns<T, F, Fut>(rounds: u32, mut turn: F) -> [Vec<T>; 2]
where
    F: FnMut(usize, u32) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut turns: [Vec<T>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for side in order {
            let result = turn(side, round).await;
            turns[side].push(result);
        }
    }
    turns
}

/// The median of `values` (0 for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// A latency histogram in microseconds (1 µs .. 60 s, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Records `elapsed` (saturating at the histogram's bounds).
pub fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let us = u64::try_from(elapsed.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, 60_000_000);
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

/// Returns memory that the allocator holds free to the OS where it can (glibc `malloc_trim`),
/// so that a following [`rss_bytes`] counts live memory rather than the high-water mark of
/// earlier transient allocations.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::os::raw::c_int;
        }
        // SAFETY: glibc's malloc_trim only releases free memory; any argument is valid.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// This process's resident set size in bytes (from /proc/self/statm).
pub fn rss_bytes() -> u64 {
    let page = 4096u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| {
            statm
                .split_whitespace()
                .nth(1)
                .and_then(|rss| rss.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * page)
}

/// CPU time (user + system) of this process's children that have been waited for (such as a
/// finished `node` or `redis-benchmark` run; not the still running `redis-server`).
pub fn children_cpu_time() -> Duration {
    // cutime (16) and cstime (17): indices 13 and 14 after the name.
    self_stat_ticks(13, 14)
}

/// CPU time (user + system) the Redis server has used so far (`INFO cpu`), if it tells.
pub async fn server_cpu_time(raw: &fred::clients::Client) -> Option<Duration> {
    use fred::interfaces::ClientLike;
    let info: String = raw.info(Some(fred::types::InfoKind::Cpu)).await.ok()?;
    let seconds = |key: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let total = seconds("used_cpu_user:")? + seconds("used_cpu_sys:")?;
    Some(Duration::from_secs_f64(total))
}

/// CPU µs per unit of work (such as a lock+unlock pair), on the client and on the server.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CpuPer {
    /// The client process's user + system CPU.
    pub client_us: f64,
    /// The Redis server's (`None`: `INFO cpu` did not answer).
    pub server_us: Option<f64>,
}

/// CPU time (user + system) this process has used so far.
pub fn cpu_time() -> Duration {
    // utime (14) and stime (15): indices 11 and 12 after the name.
    self_stat_ticks(11, 12)
}

/// The sum of two clock-tick fields of /proc/self/stat (100 Hz on Linux), indexed from the
/// field after the process name (field 3, the state, is index 0).
fn self_stat_ticks(first: usize, second: usize) -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(first) + ticks(second)) * 10)
}

/// The waiters scenario at one size: W owners parked on one lock.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Waiters {
    /// Parked waiters (W).
    pub waiters: usize,
    /// Hand-offs per second (acquisitions by another owner than the previous holder) while all
    /// W loop lock → unlock on the one lock.
    pub handoffs_per_s: f64,
    /// All acquisitions per second (including an owner re-taking the lock it just released).
    pub acq_per_s: f64,
    /// Live heap bytes (counting allocator) per parked waiter: task, future, subscription share.
    pub heap_bytes_per_waiter: f64,
    /// Resident set size growth per parked waiter, both readings taken after `malloc_trim` (page
    /// granular; noisy at small W).
    pub rss_bytes_per_waiter: f64,
    /// Seconds until all W were parked (each had run its attempts and the server saw no more).
    pub park_s: f64,
}

/// The held scenario at one size: L locks held under the watchdog.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Held {
    /// Locks held (L).
    pub locks: usize,
    /// The watchdog timeout used; the renewal period is a third of it.
    pub watchdog_timeout_ms: u64,
    /// Renewal rounds in the measured window: renewed holds (PEXPIRE calls) / L.
    pub renewal_rounds: f64,
    /// Renewal script calls (EVALSHA + EVAL in INFO commandstats) per renewal round, i.e. per
    /// period of the steady state.
    pub renewal_calls_per_period: f64,
    /// Client CPU time per renewal round / the renewal period, in % of one core.
    pub cpu_pct: f64,
    /// Live heap bytes (counting allocator) per held lock, guard included.
    pub heap_bytes_per_lock: f64,
    /// Resident set size growth per held lock (after `malloc_trim`, as for waiters).
    pub rss_bytes_per_lock: f64,
    /// Seconds to acquire all L locks (concurrently, in chunks).
    pub acquire_s: f64,
    /// Locks acquired per second while taking them.
    pub acquire_per_s: f64,
    /// `size_of::<LockGuard>()`: the part of the per-lock memory that the caller's `Vec` holds.
    pub guard_bytes: usize,
}

/// A counting global allocator: [`heap_bytes`] is the number of bytes currently allocated by
/// this process through Rust's allocator. The count is kept in per-thread shards (each on its own
/// cache line), so that counting costs an uncontended atomic add per allocation.
pub struct CountingAlloc;

const SHARDS: usize = 64;

#[repr(align(128))]
struct Shard(std::sync::atomic::AtomicIsize);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO_SHARD: Shard = Shard(std::sync::atomic::AtomicIsize::new(0));
static SHARD_COUNTS: [Shard; SHARDS] = [ZERO_SHARD; SHARDS];
static NEXT_SHARD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    static MY_SHARD: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

fn shard() -> &'static std::sync::atomic::AtomicIsize {
    use std::sync::atomic::Ordering;
    let index = MY_SHARD
        .try_with(|cell| {
            if cell.get() == usize::MAX {
                cell.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            cell.get()
        })
        .unwrap_or(0);
    &SHARD_COUNTS[index].0
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are updated.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let ptr = std::alloc::System.alloc(layout);
        if !ptr.is_null() {
            shard().fetch_add(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let ptr = std::alloc::System.alloc_zeroed(layout);
        if !ptr.is_null() {
            shard().fetch_add(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        std::alloc::System.dealloc(ptr, layout);
        shard().fetch_sub(layout.size() as isize, std::sync::atomic::Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let new = std::alloc::System.realloc(ptr, layout, new_size);
        if !new.is_null() {
            let delta = new_size as isize - layout.size() as isize;
            shard().fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
        }
        new
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Bytes currently allocated on the heap by this process (see [`CountingAlloc`]).
pub fn heap_bytes() -> u64 {
    let total: isize = SHARD_COUNTS
        .iter()
        .map(|shard| shard.0.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    total.max(0) as u64
}

/// A connected fred client (one multiplexed connection).
pub async fn fred_client(url: &str) -> Result<fred::clients::Client, String> {
    use fred::interfaces::ClientLike;
    let config = fred::types::config::Config::from_url(url)
        .map_err(|e| format!("bad redis url {url}: {e}"))?;
    let client = fred::types::Builder::from_config(config)
        .build()
        .map_err(|e| format!("cannot build a fred client for {url}: {e}"))?;
    tokio::time::timeout(Duration::from_secs(10), client.init())
        .await
        .map_err(|_| format!("cannot connect to {url} within 10 s"))?
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    Ok(client)
}
