//! Peers measured in the same run against the same server: rslock (Redlock on one server,
//! retry polling), a classic SET NX PX + Lua compare-and-delete spin lock with a 10 ms retry
//! sleep, and node-redisson driven by a Node script.
//!
//! How each peer is driven:
//!
//! * **rslock 0.10**: one `LockManager::new(vec![url])`, cloned into every task. Its clones share
//!   one lazily opened redis-rs `MultiplexedConnection` per server (behind a `tokio::sync::Mutex`
//!   that each call takes briefly to clone the handle), so all tasks use one multiplexed
//!   connection, opened by a warm-up pair before the clock starts. One `lock()` attempt is a
//!   `SET NX PX` plus, when refused, an `EVALSHA` of its compare-and-delete script on the key;
//!   `unlock()` is that script. Retry polling: rslock retries inside `lock()` with a uniformly
//!   random sleep in `0..retry_delay` between attempts; the bench runs exactly that loop itself
//!   (`set_retry(1, ..)`, i.e. one attempt per `lock()` call, then a random 0–10 ms sleep and
//!   again, without limit), which is what `set_retry(u32::MAX, 10 ms)` does, but lets it count
//!   attempts. Lease 30 s. The family scenario runs the same loop over 3 independent servers
//!   (`rslock_hot_on`: one `LockManager` over all three, a majority to acquire).
//! * **spin lock**: one fred client (one multiplexed connection). Acquire = `SET key token NX PX
//!   30000`, sleeping a fixed 10 ms after every refusal; release = `EVALSHA` of
//!   `if GET == token then DEL` (loaded once before the clock starts). Tokens are unique per
//!   acquisition.
//! * **node-redisson**: `tests/interop/bench.js` in one Node process, one node-redisson client
//!   (one ioredis command connection), T async workers, `lock(30000 ms lease)` (a lease, so no
//!   watchdog timer) then `unlock()`.
//!
//! What is measured, with the same rules as ferrisson's own scenarios (`ferrisson.rs`):
//!
//! * Every run first warms up for `min(duration / 5, 500 ms)` (the signatures take no warm-up;
//!   this matches the harness's plans: 500 ms before 5 s, 200 ms before 1 s, 30 ms before
//!   150 ms), then measures for `duration`.
//! * uncontended: T tasks, task i on its own key, lock+unlock pairs in a loop. A pair counts
//!   when it started after the warm-up and ended within the window; pairs/s = those / duration;
//!   latency = one acquire call, from the call to its return.
//! * hot: T tasks on one key, each looping acquire → release with no work in between. Every
//!   acquire started after the warm-up is recorded, also one that returns after the window
//!   closed (long waits are not cut off); acq/s and the per-task counts take those that
//!   returned within it. Hand-off = time from the holder starting its release (a shared
//!   "release started at" stamp, set just before the release is sent) to the next holder's
//!   acquire returning, recorded for acquisitions that had to retry (more than one attempt), so
//!   a task re-taking the lock it just released is not counted as a hand-off.
//!
//! Keys are `bench:peers:<peer>:<uuid>:...`, unique per call, and every lock is released at the
//! end, so nothing is left behind on a shared server (except, after an error, keys that expire
//! with their 30 s lease).

use crate::measure::fred_client;
use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use hdrhistogram::Histogram;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::measure::{self, Hot, Start, Throughput, Window};

/// The lease (PX) every peer's lock is taken with.
const LEASE: Duration = Duration::from_secs(30);
/// The classic spin lock's sleep after a refused SET NX.
const SPIN_RETRY: Duration = Duration::from_millis(10);
/// rslock's retry delay: it sleeps a random 0..this between attempts.
pub const RSLOCK_RETRY_DELAY: Duration = Duration::from_millis(10);
/// Upper bound of the warm-up before the measured window.
const MAX_WARMUP: Duration = Duration::from_millis(500);
/// How long an acquire started within the window may still take after the window closed
/// before the scenario is declared broken.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// The whole Node run may take this much longer than warm-up + `duration` (startup, drain).
const NODE_SLACK: Duration = Duration::from_secs(60);
/// Compare-and-delete: the classic safe release of a SET NX lock.
const SPIN_RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// T tasks, each locking and unlocking its own rslock lock for `duration`.
pub async fn rslock_uncontended(
    url: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Throughput, String> {
    let peer = Rslock::connect(url).await?;
    uncontended(peer, &key_prefix("rslock"), tasks, duration).await
}

/// T tasks on one rslock lock for `duration`.
pub async fn rslock_hot(url: &str, tasks: usize, duration: Duration) -> Result<Hot, String> {
    rslock_hot_on(&[url.to_owned()], tasks, duration).await
}

/// T tasks on one rslock lock over every server in `urls` (with several: Redlock proper, a
/// majority of independent servers) for `duration`; the family scenario's peer of MultiLock
/// and RedLock.
pub async fn rslock_hot_on(
    urls: &[String],
    tasks: usize,
    duration: Duration,
) -> Result<Hot, String> {
    let peer = Rslock::connect_all(urls).await?;
    hot(
        peer,
        &format!("{}:hot", key_prefix("rslock")),
        tasks,
        Start::After(warmup_for(duration)),
        duration,
    )
    .await
    .map(|(hot, _)| hot)
}

/// T tasks, each locking and unlocking its own spin lock for `duration`.
pub async fn spin_uncontended(
    url: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Throughput, String> {
    let peer = Spin::connect(url).await?;
    let result = uncontended(peer.clone(), &key_prefix("spin"), tasks, duration).await;
    peer.close().await;
    result
}

/// T tasks on one spin lock for `duration`.
pub async fn spin_hot(url: &str, tasks: usize, duration: Duration) -> Result<Hot, String> {
    let spin = SpinHot::connect(url).await?;
    let key = format!("{}:hot", key_prefix("spin"));
    let start = Start::After(warmup_for(duration));
    let result = spin.run(&key, tasks, start, duration).await;
    spin.close().await;
    result.map(|(hot, _)| hot)
}

/// The spin lock's hot loop on a connected client, on a given key and window: the processes
/// scenario runs it in every worker process, on one key, in one window.
pub struct SpinHot(Spin);

impl SpinHot {
    pub async fn connect(url: &str) -> Result<SpinHot, String> {
        Spin::connect(url).await.map(SpinHot)
    }

    pub async fn run(
        &self,
        key: &str,
        tasks: usize,
        start: Start,
        duration: Duration,
    ) -> Result<(Hot, Vec<u64>), String> {
        hot(self.0.clone(), key, tasks, start, duration).await
    }

    pub async fn close(&self) {
        self.0.close().await;
    }
}

/// T concurrent node-redisson workers (in one Node process), each on its own lock.
pub async fn node_uncontended(
    url: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Throughput, String> {
    let dir = tokio::task::spawn_blocking(crate::support::node::install)
        .await
        .map_err(|e| format!("node-redisson install task failed: {e}"))?
        .map_err(|e| format!("node-redisson peer unavailable: {e}"))?;
    let warmup = warmup_for(duration);
    let mut command = tokio::process::Command::new(crate::support::node::node_binary());
    command
        .arg(dir.join("bench.js"))
        .arg(url)
        .arg(tasks.max(1).to_string())
        .arg(duration.as_millis().to_string())
        .arg(warmup.as_millis().to_string())
        .arg(key_prefix("node"))
        .arg(LEASE.as_millis().to_string())
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let limit = warmup + duration + NODE_SLACK;
    let output = tokio::time::timeout(limit, command.output())
        .await
        .map_err(|_| format!("`node bench.js` did not finish within {limit:?}"))?
        .map_err(|e| format!("cannot run `node bench.js`: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!(
            "`node bench.js` failed ({}): {}",
            output.status,
            stderr.trim()
        ));
    }
    let line = stdout
        .lines()
        .rev()
        .find(|line| line.trim_start().starts_with('{'))
        .ok_or_else(|| {
            format!(
                "`node bench.js` printed no result line; stdout: {stdout:?}, stderr: {stderr:?}"
            )
        })?;
    let value: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| format!("unparsable `node bench.js` result {line:?}: {e}"))?;
    let field = |name: &str| {
        value
            .get(name)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| format!("`node bench.js` result {line:?} has no number {name:?}"))
    };
    Ok(Throughput {
        pairs_per_s: field("pairs_per_s")?,
        p50_us: field("p50_us")?,
        p99_us: field("p99_us")?,
    })
}

// ---------------------------------------------------------------------------------------------
// The two Rust peers
// ---------------------------------------------------------------------------------------------

/// A lock client driven by the scenario loops.
trait Peer: Clone + Send + Sync + 'static {
    /// What a successful acquire returns and the release consumes.
    type Held: Send + 'static;
    /// Acquires `key`, polling until it gets it: the hold and the number of attempts it took.
    fn acquire(&self, key: &str) -> impl Future<Output = Result<(Self::Held, u32), String>> + Send;
    /// Releases a hold taken by `acquire`.
    fn release(
        &self,
        key: &str,
        held: Self::Held,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

#[derive(Clone)]
struct Rslock {
    manager: rslock::LockManager,
}

impl Rslock {
    async fn connect(url: &str) -> Result<Rslock, String> {
        Rslock::connect_all(&[url.to_owned()]).await
    }

    /// One manager over every server in `urls` (Redlock: a majority must agree).
    async fn connect_all(urls: &[String]) -> Result<Rslock, String> {
        let url = urls.join(", ");
        // rslock panics on a URL redis-rs cannot parse; report it as an error instead.
        let owned = urls.to_vec();
        let mut manager = std::panic::catch_unwind(move || rslock::LockManager::new(owned))
            .map_err(|_| format!("rslock rejects the redis urls {url}"))?;
        // One attempt per lock() call; the retry loop with rslock's jittered delay is in acquire.
        manager.set_retry(1, RSLOCK_RETRY_DELAY);
        let peer = Rslock { manager };
        // Opens the shared multiplexed connection before any clock starts.
        let warm_up = format!("{}:connect", key_prefix("rslock"));
        let lock = tokio::time::timeout(
            Duration::from_secs(10),
            peer.manager.lock(warm_up.as_bytes(), LEASE),
        )
        .await
        .map_err(|_| format!("rslock: no answer from {url} within 10 s"))?
        .map_err(|e| {
            format!("rslock cannot lock a free key on {url}: {e} (server unreachable?)")
        })?;
        peer.manager.unlock(&lock).await;
        Ok(peer)
    }
}

impl Peer for Rslock {
    type Held = rslock::Lock;

    fn acquire(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<(rslock::Lock, u32), String>> + Send {
        let manager = self.manager.clone();
        let key = key.to_owned();
        async move {
            let mut attempts = 0u32;
            loop {
                attempts += 1;
                match manager.lock(key.as_bytes(), LEASE).await {
                    Ok(lock) => return Ok((lock, attempts)),
                    // Busy, or a failed command (rslock maps both to "not acquired" and retries).
                    Err(rslock::LockError::Unavailable) => {}
                    Err(e) => return Err(format!("rslock lock({key}): {e}")),
                }
                // rslock's retry delay: uniformly random in 0..retry_delay (whole milliseconds).
                let delay_ms = random_u64() % RSLOCK_RETRY_DELAY.as_millis() as u64;
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
        }
    }

    fn release(
        &self,
        _key: &str,
        held: rslock::Lock,
    ) -> impl Future<Output = Result<(), String>> + Send {
        let manager = self.manager.clone();
        async move {
            // Best effort by design (rslock reports nothing); the lease bounds a lost release.
            manager.unlock(&held).await;
            Ok(())
        }
    }
}

#[derive(Clone)]
struct Spin {
    client: fred::clients::Client,
    release_sha: Arc<str>,
    /// Run-unique token prefix; the counter makes every acquisition's token unique.
    token_prefix: Arc<str>,
    next_token: Arc<AtomicU64>,
}

impl Spin {
    async fn connect(url: &str) -> Result<Spin, String> {
        let client = fred_client(url).await?;
        let release_sha: String = client
            .script_load(SPIN_RELEASE)
            .await
            .map_err(|e| format!("spin lock: SCRIPT LOAD: {e}"))?;
        Ok(Spin {
            client,
            release_sha: release_sha.into(),
            token_prefix: uuid::Uuid::new_v4().to_string().into(),
            next_token: Arc::new(AtomicU64::new(1)),
        })
    }

    async fn close(&self) {
        let _ = self.client.quit().await;
    }
}

impl Peer for Spin {
    type Held = String;

    fn acquire(&self, key: &str) -> impl Future<Output = Result<(String, u32), String>> + Send {
        let spin = self.clone();
        let key = key.to_owned();
        async move {
            let token = format!(
                "{}:{}",
                spin.token_prefix,
                spin.next_token.fetch_add(1, Ordering::Relaxed)
            );
            let mut attempts = 0u32;
            loop {
                attempts += 1;
                let set: Option<String> = spin
                    .client
                    .set(
                        key.as_str(),
                        token.as_str(),
                        Some(Expiration::PX(LEASE.as_millis() as i64)),
                        Some(SetOptions::NX),
                        false,
                    )
                    .await
                    .map_err(|e| format!("spin lock: SET {key} NX PX: {e}"))?;
                if set.is_some() {
                    return Ok((token, attempts));
                }
                tokio::time::sleep(SPIN_RETRY).await;
            }
        }
    }

    fn release(&self, key: &str, token: String) -> impl Future<Output = Result<(), String>> + Send {
        let spin = self.clone();
        let key = key.to_owned();
        async move {
            let deleted: i64 = spin
                .client
                .evalsha(&*spin.release_sha, key.as_str(), token.as_str())
                .await
                .map_err(|e| format!("spin lock: release of {key}: {e}"))?;
            if deleted == 1 {
                Ok(())
            } else {
                Err(format!(
                    "spin lock: release of {key} found another token (lease lost?)"
                ))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The scenario loops
// ---------------------------------------------------------------------------------------------

/// The warm-up before a window of `duration`.
fn warmup_for(duration: Duration) -> Duration {
    (duration / 5).min(MAX_WARMUP)
}

/// T tasks, task i on key `<prefix>:u:<i>`, lock+unlock pairs through warm-up and window.
async fn uncontended<P: Peer>(
    peer: P,
    prefix: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Throughput, String> {
    let window = Window::new(Start::After(warmup_for(duration)), duration);
    let mut set = JoinSet::new();
    for i in 0..tasks.max(1) {
        let peer = peer.clone();
        let key = format!("{prefix}:u:{i}");
        set.spawn(async move {
            let mut latency = measure::histogram();
            let mut pairs = 0u64;
            loop {
                let started = Instant::now();
                if started >= window.deadline {
                    return Ok::<_, String>((latency, pairs));
                }
                let (held, _) = bounded_acquire(&peer, &key, window.deadline).await?;
                let acquired = Instant::now();
                peer.release(&key, held).await?;
                if started >= window.warm_end && Instant::now() <= window.deadline {
                    pairs += 1;
                    measure::record(&mut latency, acquired - started);
                }
            }
        });
    }
    let results = join_all_or_abort(set).await?;
    let mut latency = measure::histogram();
    let mut pairs = 0u64;
    for (histogram, count) in results {
        merge(&mut latency, &histogram);
        pairs += count;
    }
    let (p50_us, p99_us, _) = measure::percentiles(&latency);
    Ok(Throughput {
        pairs_per_s: pairs as f64 / duration.as_secs_f64().max(1e-9),
        p50_us,
        p99_us,
    })
}

/// What one task of the hot scenario brings back.
struct HotTask {
    acquire: Histogram<u64>,
    handoff: Histogram<u64>,
    /// When each acquisition within the window returned, in µs since it opened.
    acquired_us: Vec<u64>,
}

/// T tasks on one `key`, acquire → release through warm-up and window. Also returns when each
/// acquisition within the window returned (µs since it opened, all tasks, unordered).
async fn hot<P: Peer>(
    peer: P,
    key: &str,
    tasks: usize,
    start: Start,
    duration: Duration,
) -> Result<(Hot, Vec<u64>), String> {
    const NO_RELEASE: u64 = u64::MAX;
    let window = Window::new(start, duration);
    // When the last holder started its release, in ns since the window's epoch.
    let release_started = Arc::new(AtomicU64::new(NO_RELEASE));
    let mut set = JoinSet::new();
    for _ in 0..tasks.max(1) {
        let peer = peer.clone();
        let key = key.to_owned();
        let release_started = Arc::clone(&release_started);
        set.spawn(async move {
            let mut task = HotTask {
                acquire: measure::histogram(),
                handoff: measure::histogram(),
                acquired_us: Vec::new(),
            };
            loop {
                let started = Instant::now();
                if started >= window.deadline {
                    return Ok::<_, String>(task);
                }
                let (held, attempts) = bounded_acquire(&peer, &key, window.deadline).await?;
                let acquired = Instant::now();
                if started >= window.warm_end {
                    if acquired <= window.deadline {
                        task.acquired_us.push(window.offset_us(acquired));
                    }
                    measure::record(&mut task.acquire, acquired - started);
                    let released_at = release_started.load(Ordering::SeqCst);
                    if attempts > 1 && released_at != NO_RELEASE {
                        let gap = window.nanos(acquired).saturating_sub(released_at);
                        measure::record(&mut task.handoff, Duration::from_nanos(gap));
                    }
                }
                release_started.store(window.nanos(Instant::now()), Ordering::SeqCst);
                peer.release(&key, held).await?;
            }
        });
    }
    let results = join_all_or_abort(set).await?;
    let mut acquire = measure::histogram();
    let mut handoff = measure::histogram();
    let mut total = 0u64;
    for task in &results {
        merge(&mut acquire, &task.acquire);
        merge(&mut handoff, &task.handoff);
        total += task.acquired_us.len() as u64;
    }
    let (p50_us, p99_us, max_us) = measure::percentiles(&acquire);
    let (handoff_p50_us, handoff_p99_us, _) = measure::percentiles(&handoff);
    let in_window = |task: &HotTask| task.acquired_us.len() as u64;
    let hot = Hot {
        acq_per_s: total as f64 / duration.as_secs_f64().max(1e-9),
        p50_us,
        p99_us,
        max_us,
        handoff_p50_us,
        handoff_p99_us,
        min_per_task: results.iter().map(in_window).min().unwrap_or(0),
        max_per_task: results.iter().map(in_window).max().unwrap_or(0),
    };
    let acquired_us = results.into_iter().flat_map(|t| t.acquired_us).collect();
    Ok((hot, acquired_us))
}

/// `peer.acquire(key)`, failing if it has not returned `DRAIN_LIMIT` after the window closed.
async fn bounded_acquire<P: Peer>(
    peer: &P,
    key: &str,
    deadline: Instant,
) -> Result<(P::Held, u32), String> {
    tokio::time::timeout_at(deadline + DRAIN_LIMIT, peer.acquire(key))
        .await
        .map_err(|_| {
            format!("acquire of {key} still waiting {DRAIN_LIMIT:?} after the window closed")
        })?
}

/// Every task's result, or the first error (the other tasks are then aborted).
async fn join_all_or_abort<T: 'static>(
    mut set: JoinSet<Result<T, String>>,
) -> Result<Vec<T>, String> {
    let mut results = Vec::with_capacity(set.len());
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(value)) => results.push(value),
            Ok(Err(e)) => {
                set.abort_all();
                return Err(e);
            }
            Err(e) => {
                set.abort_all();
                return Err(format!("benchmark task failed: {e}"));
            }
        }
    }
    Ok(results)
}

fn merge(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    // Same bounds on both sides (measure::histogram), so adding cannot fail.
    let _ = into.add(from);
}

/// A random number (std's randomly keyed SipHash of a counter; plenty for retry jitter).
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// `bench:peers:<peer>:<uuid>`: a key prefix unique to this call.
pub fn key_prefix(peer: &str) -> String {
    format!("bench:peers:{peer}:{}", uuid::Uuid::new_v4().simple())
}
