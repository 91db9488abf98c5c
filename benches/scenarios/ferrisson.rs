//! ferrisson's own scenarios (issue 4): uncontended, hot, waiters, held.
//!
//! Each scenario connects its own [`ferrisson::Client`] (default configuration: one multiplexed
//! command connection plus the subscriber) unless it says otherwise, and shuts it down at the
//! end, so that scenarios do not share state. Lock names start with `ferrisson-bench:`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client as RawClient;
use futures::future::join_all;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

use ferrisson::{Client, Config, Owner, WokenBy};

use crate::measure::{self, Held, Hot, Start, Throughput, Waiters, Window};
use crate::support::redis_state::{command_stats, numsub, reset_stats};

/// RSS after handing free allocator memory back to the OS.
pub fn trimmed_rss() -> u64 {
    measure::trim_heap();
    measure::rss_bytes()
}

/// A scenario's outcome: the numbers, or why it could not produce them.
pub type Outcome<T> = Result<T, String>;

fn err(what: &str) -> impl Fn(ferrisson::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

pub async fn connect(url: &str) -> Outcome<Client> {
    Client::connect(url).await.map_err(err("connect"))
}

/// Joins spawned workers, turning panics and errors into one message.
async fn join_workers<T>(handles: Vec<tokio::task::JoinHandle<Outcome<T>>>) -> Outcome<Vec<T>> {
    let mut out = Vec::with_capacity(handles.len());
    for joined in join_all(handles).await {
        match joined {
            Ok(Ok(value)) => out.push(value),
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(format!("worker task failed: {e}")),
        }
    }
    Ok(out)
}

/// What one worker of a timed loop measured.
struct Worker {
    pairs: u64,
    acquire: Histogram<u64>,
    handoff: Histogram<u64>,
    immediate: u64,
    /// Hot: acquisitions by other tasks while one acquire waited (FIFO: about T − 1).
    overtaken: Histogram<u64>,
    /// Hot: when each measured acquisition returned, in µs since the window opened.
    acquired_us: Vec<u64>,
}

impl Worker {
    fn new() -> Worker {
        Worker {
            pairs: 0,
            acquire: measure::histogram(),
            handoff: measure::histogram(),
            immediate: 0,
            overtaken: measure::histogram(),
            acquired_us: Vec::new(),
        }
    }
}

/// The slot length of [`HotExtra::per_slot`].
const SLOT: Duration = Duration::from_millis(100);

/// Uncontended: `tasks` tasks, each locking and unlocking its own lock in a loop for `duration`
/// (after `warmup`). Acquire latency is the time `lock()` takes.
pub async fn uncontended(
    url: &str,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
) -> Outcome<Throughput> {
    uncontended_on(connect(url).await?, tasks, warmup, duration).await
}

/// [`uncontended`] on `client` (configured as the caller needs), which it shuts down after.
pub async fn uncontended_on(
    client: Client,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
) -> Outcome<Throughput> {
    let window = Window::new(Start::After(warmup), duration);
    let handles = (0..tasks)
        .map(|i| {
            let lock = client.lock(format!("ferrisson-bench:uncontended:{tasks}:{i}"));
            tokio::spawn(async move {
                let mut worker = Worker::new();
                loop {
                    let started = Instant::now();
                    if started >= window.deadline {
                        break;
                    }
                    let guard = lock.lock().await.map_err(err("lock"))?;
                    let acquired = Instant::now();
                    guard.unlock().await.map_err(err("unlock"))?;
                    if window.counts(started, Instant::now()) {
                        worker.pairs += 1;
                        measure::record(&mut worker.acquire, acquired - started);
                    }
                }
                Ok(worker)
            })
        })
        .collect();
    let workers = join_workers(handles).await;
    client.shutdown().await;
    let workers = workers?;
    let mut acquire = measure::histogram();
    let mut pairs = 0;
    for worker in &workers {
        acquire.add(&worker.acquire).map_err(|e| e.to_string())?;
        pairs += worker.pairs;
    }
    let (p50_us, p99_us, _) = measure::percentiles(&acquire);
    Ok(Throughput {
        pairs_per_s: pairs as f64 / duration.as_secs_f64(),
        p50_us,
        p99_us,
    })
}

/// Diagnostics of the hot scenario beyond [`Hot`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct HotExtra {
    /// Share of acquisitions that did not wait (the lock was free at the first attempt: mostly
    /// the releasing task re-taking the lock before a woken waiter's retry arrived).
    pub immediate_share: f64,
    /// Acquisitions that waited, i.e. real hand-offs to a parked waiter.
    pub handoffs: u64,
    /// Acquire latency p99.9 in µs.
    pub p999_us: f64,
    /// Acquisitions by other tasks while one acquire waited: p50, p99, max. With FIFO service
    /// every acquire waits for about T − 1 others, so a long wait with few overtakers is the
    /// machine being slow then, not the lock serving out of order.
    pub overtaken: [u64; 3],
    /// Acquisitions per 100 ms slot of the window: min, median, max (how steady the machine
    /// was: with FIFO service the acquire tail follows the slow slots).
    pub per_slot: [u64; 3],
    /// When each acquisition within the window returned, in µs since it opened (all tasks,
    /// unordered): the processes scenario merges them across processes.
    #[serde(skip)]
    pub acquired_us: Vec<u64>,
}

/// Hot: `tasks` tasks, each with its own [`Owner`], lock and unlock one lock in a loop with no
/// work inside.
///
/// Hand-off latency: just before `unlock()` the holder stores "release started at"; every
/// acquisition that had to wait (woken by a message, a local hand-off or a TTL rather than
/// acquired at the first attempt) records now − that, i.e. release started → next owner holds
/// the lock.
pub async fn hot(
    url: &str,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
) -> Outcome<(Hot, HotExtra)> {
    let client = connect(url).await?;
    let name = format!("ferrisson-bench:hot:{tasks}");
    let outcome = hot_on(&client, &name, tasks, Start::After(warmup), duration).await;
    client.shutdown().await;
    outcome
}

/// [`hot`] on lock `name` with a connected client, whose window opens at `start` (the
/// processes scenario runs it in every worker process, on one lock, in one window).
pub async fn hot_on(
    client: &Client,
    name: &str,
    tasks: usize,
    start: Start,
    duration: Duration,
) -> Outcome<(Hot, HotExtra)> {
    let base = client.lock(name);
    let release_started = Arc::new(AtomicU64::new(0));
    let acquisitions = Arc::new(AtomicU64::new(0));
    let window = Window::new(start, duration);
    let waiting: Vec<_> = (0..tasks).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let handles: Vec<_> = waiting
        .iter()
        .map(|waiting| {
            let lock = base.with_owner(Owner::new());
            let release_started = Arc::clone(&release_started);
            let acquisitions = Arc::clone(&acquisitions);
            let waiting = Arc::clone(waiting);
            tokio::spawn(async move {
                let mut worker = Worker::new();
                loop {
                    let started = Instant::now();
                    if started >= window.deadline {
                        break;
                    }
                    let before = acquisitions.load(Ordering::SeqCst);
                    waiting.store(window.nanos(started) + 1, Ordering::SeqCst);
                    let guard = lock.lock().await.map_err(err("lock"))?;
                    waiting.store(0, Ordering::SeqCst);
                    let acquired = Instant::now();
                    let overtaken = acquisitions.fetch_add(1, Ordering::SeqCst) - before;
                    // Every acquire started in the window is recorded, also one that returns
                    // after it closed (long waits are not cut off); acq/s and the per-task
                    // counts take those that returned within it.
                    if started >= window.warm_end {
                        if acquired <= window.deadline {
                            worker.pairs += 1;
                            worker.acquired_us.push(window.offset_us(acquired));
                        }
                        measure::record(&mut worker.acquire, acquired - started);
                        worker.overtaken.saturating_record(overtaken);
                        if guard.acquisition().woken_by != WokenBy::Immediate {
                            let released_at = window.epoch
                                + Duration::from_nanos(release_started.load(Ordering::SeqCst));
                            measure::record(
                                &mut worker.handoff,
                                acquired.saturating_duration_since(released_at),
                            );
                        } else {
                            worker.immediate += 1;
                        }
                    }
                    release_started.store(window.nanos(Instant::now()), Ordering::SeqCst);
                    guard.unlock().await.map_err(err("unlock"))?;
                }
                Ok(worker)
            })
        })
        .collect();
    let aborts: Vec<_> = handles.iter().map(|h| h.abort_handle()).collect();
    let workers = tokio::select! {
        workers = join_workers(handles) => workers?,
        fault = liveness_watch(client, name, window.epoch, &waiting) => {
            aborts.iter().for_each(|abort| abort.abort());
            return Err(fault);
        }
    };
    let mut acquire = measure::histogram();
    let mut handoff = measure::histogram();
    let mut overtaken = measure::histogram();
    let slot_count = (duration.as_nanos() / SLOT.as_nanos()).max(1) as usize;
    let mut per_slot = vec![0u64; slot_count];
    let (mut total, mut immediate) = (0, 0);
    for worker in &workers {
        acquire.add(&worker.acquire).map_err(|e| e.to_string())?;
        handoff.add(&worker.handoff).map_err(|e| e.to_string())?;
        overtaken
            .add(&worker.overtaken)
            .map_err(|e| e.to_string())?;
        for &at in &worker.acquired_us {
            let slot = at / SLOT.as_micros() as u64;
            if let Some(count) = usize::try_from(slot).ok().and_then(|s| per_slot.get_mut(s)) {
                *count += 1;
            }
        }
        total += worker.pairs;
        immediate += worker.immediate;
    }
    let (p50_us, p99_us, max_us) = measure::percentiles(&acquire);
    let (handoff_p50_us, handoff_p99_us, _) = measure::percentiles(&handoff);
    let hot = Hot {
        acq_per_s: total as f64 / duration.as_secs_f64(),
        p50_us,
        p99_us,
        max_us,
        handoff_p50_us,
        handoff_p99_us,
        min_per_task: workers.iter().map(|w| w.pairs).min().unwrap_or(0),
        max_per_task: workers.iter().map(|w| w.pairs).max().unwrap_or(0),
    };
    let extra = HotExtra {
        immediate_share: if acquire.is_empty() {
            0.0
        } else {
            immediate as f64 / acquire.len() as f64
        },
        handoffs: handoff.len(),
        p999_us: if acquire.is_empty() {
            0.0
        } else {
            acquire.value_at_quantile(0.999) as f64
        },
        overtaken: if overtaken.is_empty() {
            [0; 3]
        } else {
            [
                overtaken.value_at_quantile(0.5),
                overtaken.value_at_quantile(0.99),
                overtaken.max(),
            ]
        },
        per_slot: {
            per_slot.sort_unstable();
            [
                per_slot[0],
                per_slot[per_slot.len() / 2],
                per_slot[per_slot.len() - 1],
            ]
        },
        acquired_us: workers
            .iter()
            .flat_map(|w| w.acquired_us.iter().copied())
            .collect(),
    };
    Ok((hot, extra))
}

/// How long an acquire of the hot loop waits before its lock is looked at (a hand-off takes
/// well under a millisecond here; a lost wake-up waits for the 30 s lease).
const LIVENESS_BOUND: Duration = Duration::from_secs(2);
/// How long the lock must then stay free, the acquire still waiting, to count as a fault.
const LIVENESS_RECHECK: Duration = Duration::from_millis(200);

/// The hang detector of the hot loop (issue 24): returns, as the scenario's failure, the first
/// acquire (by the nanoseconds since `epoch` + 1 at which it started, in `waiting`; 0: not
/// waiting) that waited past [`LIVENESS_BOUND`] while its lock was free, seen free twice
/// [`LIVENESS_RECHECK`] apart with the same acquire still waiting, with the client's local
/// state read then. Never returns otherwise. Costs the loop one atomic store per acquire.
async fn liveness_watch(
    client: &Client,
    name: &str,
    epoch: Instant,
    waiting: &[Arc<AtomicU64>],
) -> String {
    let free = || async {
        client
            .inspect(name)
            .await
            .is_ok_and(|info| !info.is_locked())
    };
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        for waiting in waiting {
            let since = waiting.load(Ordering::SeqCst);
            let started = epoch + Duration::from_nanos(since.saturating_sub(1));
            if since == 0 || started.elapsed() < LIVENESS_BOUND || !free().await {
                continue;
            }
            tokio::time::sleep(LIVENESS_RECHECK).await;
            if waiting.load(Ordering::SeqCst) == since && free().await {
                return format!(
                    "liveness fault: an acquire of `{name}` waited {:?} while the lock was free \
                     (seen free twice, {LIVENESS_RECHECK:?} apart); the client's local state: {}",
                    started.elapsed(),
                    client.local_state(name)
                );
            }
        }
    }
}

/// Waiters spawned at a time while parking them.
const PARK_CHUNK: usize = 250;

/// Spawns `count` tasks made by `spawn`, [`PARK_CHUNK`] at a time, 2 ms apart.
///
/// Waiters arrive in chunks, as they would in a service, rather than 10,000 attempts in one
/// burst: the burst's transient memory (in-flight attempts, batch buffers) would be freed
/// between live waiters and stay in RSS as fragmentation that no parked waiter uses.
pub async fn spawn_in_chunks<T>(
    count: usize,
    mut spawn: impl FnMut() -> tokio::task::JoinHandle<T>,
) -> Vec<tokio::task::JoinHandle<T>> {
    let mut handles = Vec::with_capacity(count);
    for chunk in 0..count.div_ceil(PARK_CHUNK) {
        if chunk > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let first = chunk * PARK_CHUNK;
        handles.extend((first..count.min(first + PARK_CHUNK)).map(|_| spawn()));
    }
    handles
}

/// Waits until `waiters` waiters on the lock of `channel` are parked: every one of them
/// `arrived` (counted by the waiter's task before it calls `lock()`), the channel has its one
/// subscriber, and the server has seen no attempt for 200 ms: nothing retries while the
/// holder's lease runs. Only the first waiters try the lock; the later ones line up behind them
/// without trying (src/kit/wait.rs), within the call's first poll. Attempts are counted by the
/// EXISTS that lua/acquire.lua runs first (Redis counts a script's commands in commandstats),
/// since concurrent attempts share one script run (src/transport/dispatch.rs). `Err`: the
/// attempts and subscribers seen when 120 s ran out.
pub async fn wait_parked(
    raw: &RawClient,
    channel: &str,
    waiters: usize,
    arrived: &AtomicU64,
) -> Result<(), (u64, i64)> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut last, mut changed) = (u64::MAX, Instant::now());
    loop {
        let stats = command_stats(raw).await;
        let attempts = stats.get("exists").copied().unwrap_or(0);
        let subscribers = numsub(raw, channel).await;
        if attempts != last {
            (last, changed) = (attempts, Instant::now());
        }
        let quiet = changed.elapsed() >= Duration::from_millis(200);
        let all_arrived = arrived.load(Ordering::SeqCst) >= waiters as u64;
        if all_arrived && attempts > 0 && subscribers == 1 && quiet {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err((attempts, subscribers));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waiters: `waiters` owners parked on one lock.
///
/// 1. A separate owner holds the lock with a 60 s lease.
/// 2. W tasks (each its own [`Owner`], all on one shared `Lock` handle) call `lock()`; they are
///    parked once each has run its acquire attempt(s), the channel has its one subscriber and
///    the server has seen no attempt for 200 ms. Memory per parked waiter = growth of the live
///    heap (and of RSS) / W.
/// 3. The holder releases; every waiter loops lock → unlock; hand-offs/s (acquisitions by
///    another owner than the previous one) over `duration`.
pub async fn waiters(
    url: &str,
    raw: &RawClient,
    waiters: usize,
    warmup: Duration,
    duration: Duration,
) -> Outcome<Waiters> {
    let client = connect(url).await?;
    let name = format!("ferrisson-bench:waiters:{waiters}");
    let channel = crate::support::redis_state::channel_of(&name);
    let base = client.lock(name.clone());
    let holder = base
        .with_owner(Owner::new())
        .lock_with_lease(Duration::from_secs(60))
        .await
        .map_err(err("holder lock"))?;
    reset_stats(raw).await;
    let (heap0, rss0) = (measure::heap_bytes(), trimmed_rss());
    // Acquisitions, and hand-offs: acquisitions by another owner than the previous one.
    let count = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let last_owner = Arc::new(AtomicU64::new(0));
    let arrived = Arc::new(AtomicU64::new(0));
    let parking_started = Instant::now();
    let handles = spawn_in_chunks(waiters, || {
        let owner = Owner::new();
        let lock = base.with_owner(owner);
        let count = Arc::clone(&count);
        let last_owner = Arc::clone(&last_owner);
        let arrived = Arc::clone(&arrived);
        tokio::spawn(async move {
            arrived.fetch_add(1, Ordering::SeqCst);
            loop {
                let guard = match lock.lock().await {
                    Ok(guard) => guard,
                    Err(e) => return Err::<(), String>(format!("lock: {e}")),
                };
                count[0].fetch_add(1, Ordering::Relaxed);
                if last_owner.swap(owner.id(), Ordering::Relaxed) != owner.id() {
                    count[1].fetch_add(1, Ordering::Relaxed);
                }
                if let Err(e) = guard.unlock().await {
                    return Err(format!("unlock: {e}"));
                }
            }
        })
    })
    .await;
    let parked = wait_parked(raw, &channel, waiters, &arrived).await;
    let outcome = async {
        if let Err((attempts, subscribers)) = parked {
            return Err(format!(
                "waiters did not park: {attempts} attempts by {waiters} waiters, {subscribers} subscribers"
            ));
        }
        let park_s = parking_started.elapsed().as_secs_f64();
        if let Some(finished) = handles.iter().position(|h| h.is_finished()) {
            return Err(format!("waiter {finished} ended while parked"));
        }
        let (heap1, rss1) = (measure::heap_bytes(), trimmed_rss());
        holder.unlock().await.map_err(err("holder unlock"))?;
        tokio::time::sleep(warmup).await;
        let snapshot = || [0, 1].map(|i| count[i].load(Ordering::Relaxed));
        let (before, started) = (snapshot(), Instant::now());
        tokio::time::sleep(duration).await;
        let (after, elapsed) = (snapshot(), started.elapsed());
        if let Some(finished) = handles.iter().position(|h| h.is_finished()) {
            return Err(format!("waiter {finished} ended during the hand-off loop"));
        }
        Ok(Waiters {
            waiters,
            handoffs_per_s: (after[1] - before[1]) as f64 / elapsed.as_secs_f64(),
            acq_per_s: (after[0] - before[0]) as f64 / elapsed.as_secs_f64(),
            heap_bytes_per_waiter: heap1.saturating_sub(heap0) as f64 / waiters as f64,
            rss_bytes_per_waiter: rss1.saturating_sub(rss0) as f64 / waiters as f64,
            park_s,
        })
    }
    .await;
    for handle in &handles {
        handle.abort();
    }
    let mut failure = None;
    for joined in join_all(handles).await {
        match joined {
            Ok(Err(e)) => failure = Some(e),
            Err(e) if e.is_panic() => failure = Some(format!("waiter panicked: {e}")),
            _ => {}
        }
    }
    // Aborted holders' guards are released by the client's background task; shutdown waits.
    client.shutdown().await;
    match (outcome, failure) {
        (Ok(_), Some(e)) => Err(e),
        (outcome, _) => outcome,
    }
}

/// Held: `locks` locks held under the watchdog (`watchdog_timeout`, renewed every third of it)
/// by one client. Acquired concurrently, 500 at a time; after one renewal period of warm-up,
/// over `periods` renewal periods: renewal script calls (INFO commandstats, EVALSHA + EVAL:
/// only the watchdog runs scripts then) and client CPU per renewal round (every lock renewed
/// once: a period's work), and memory per held lock at the end.
pub async fn held(
    url: &str,
    raw: &RawClient,
    locks: usize,
    watchdog_timeout: Duration,
    periods: u32,
) -> Outcome<Held> {
    let mut config = Config::new(url);
    config.watchdog_timeout = watchdog_timeout;
    let client = Client::new(config).await.map_err(err("connect"))?;
    let outcome = hold_and_measure(&client, raw, locks, watchdog_timeout, periods).await;
    client.shutdown().await;
    outcome
}

async fn hold_and_measure(
    client: &Client,
    raw: &RawClient,
    locks: usize,
    watchdog_timeout: Duration,
    periods: u32,
) -> Outcome<Held> {
    const CHUNK: usize = 500;
    let (heap0, rss0) = (measure::heap_bytes(), trimmed_rss());
    let started = Instant::now();
    let mut guards = Vec::with_capacity(locks);
    for first in (0..locks).step_by(CHUNK) {
        let acquired = join_all((first..locks.min(first + CHUNK)).map(|i| {
            let lock = client.lock(format!("ferrisson-bench:held:{i}"));
            async move { lock.lock().await }
        }))
        .await;
        for guard in acquired {
            guards.push(guard.map_err(err("lock"))?);
        }
    }
    let acquire_s = started.elapsed().as_secs_f64();

    let period = watchdog_timeout / 3;
    // One renewal period first: the holds taken over the acquisition get their first renewal
    // and settle into the wheel, and the acquisition's own background work is over.
    tokio::time::sleep(period).await;
    reset_stats(raw).await;
    let (cpu0, wall0) = (measure::cpu_time(), Instant::now());
    tokio::time::sleep(period * periods).await;
    let (cpu1, wall) = (measure::cpu_time(), wall0.elapsed());
    // Memory in the steady state, after whole renewal periods: every hold tracked and bucketed,
    // no acquire traffic or track requests still queued.
    let (heap1, rss1) = (measure::heap_bytes(), trimmed_rss());
    let stats = command_stats(raw).await;
    let calls =
        stats.get("evalsha").copied().unwrap_or(0) + stats.get("eval").copied().unwrap_or(0);
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    if lost > 0 {
        return Err(format!("{lost} of {locks} held locks were lost"));
    }
    // Per period = per round that renews every held lock once. The window need not hold whole
    // rounds (it may catch the tail of one and all of the next), so the figures are divided by
    // the rounds it did hold: the renewed holds (each runs one PEXPIRE in lua/renew.lua; Redis
    // counts a script's commands in commandstats) over L.
    let renewed = stats.get("pexpire").copied().unwrap_or(0);
    let rounds = renewed as f64 / locks as f64;
    if rounds < 0.5 {
        return Err(format!(
            "only {renewed} renewals of {locks} held locks in {:?}",
            wall
        ));
    }
    let cpu_per_round = (cpu1.saturating_sub(cpu0)).as_secs_f64() / rounds;
    let held = Held {
        locks,
        watchdog_timeout_ms: watchdog_timeout.as_millis() as u64,
        renewal_rounds: rounds,
        renewal_calls_per_period: calls as f64 / rounds,
        cpu_pct: cpu_per_round / period.as_secs_f64() * 100.0,
        heap_bytes_per_lock: heap1.saturating_sub(heap0) as f64 / locks as f64,
        rss_bytes_per_lock: rss1.saturating_sub(rss0) as f64 / locks as f64,
        acquire_s,
        acquire_per_s: locks as f64 / acquire_s,
        guard_bytes: std::mem::size_of::<ferrisson::LockGuard>(),
    };
    drop(guards);
    Ok(held)
}
