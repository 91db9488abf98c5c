//! Peers measured in the same run against the same server: rslock (Redlock on one server,
//! retry polling), a classic SET NX PX + Lua compare-and-delete spin lock with a 10 ms retry
//! sleep, and node-redisson driven by a Node script.
//!
//! How each peer is driven:
//!
//! * **rslock 0.10**: one `LockManager::new(vec![url])`, cloned into every task. Its clones share
//!   one lazily opened redis-rs `MultiplexedConnection` per server (behind a `tokio::sync::Mutex`
//!   that each call takes briefly to clone the handle), so all tasks use one multiplexed
//!   connection, opened by a warm-up pair before the clock starts. `lock()` is one `SET NX PX`
//!   (plus, on failure, an `EVALSHA` of its compare-and-delete script on the same key, then a
//!   random sleep in `0..retry_delay`); `unlock()` is that script. Retry is set to
//!   `set_retry(u32::MAX, 10 ms)`: an acquire polls until it gets the lock, sleeping a uniformly
//!   random 0–10 ms between attempts. Lease 30 s (the locks are released long before).
//! * **spin lock**: one fred client (one multiplexed connection). Acquire = `SET key token NX PX
//!   30000`, sleeping a fixed 10 ms after every refusal; release = `EVALSHA` of
//!   `if GET == token then DEL` (loaded once before the clock starts). Tokens are unique per
//!   acquisition.
//! * **node-redisson**: `tests/interop/bench.js` in one Node process, one node-redisson client
//!   (one ioredis command connection), T async workers, `lock(30000 ms lease)` (so no watchdog)
//!   then `unlock()`.
//!
//! What is measured (the same for both Rust peers):
//!
//! * uncontended: T tasks, task i on its own key, each doing lock+unlock pairs until `duration`
//!   has passed (at least one pair each). Latency = one acquire call, from the call to its
//!   return. pairs/s = all pairs / wall time from the start until the last task finished.
//! * hot: T tasks on one key, each looping acquire → release (no work in between) while the
//!   window is open. acq/s = acquisitions that returned within the window / window. Every
//!   acquire started within the window is waited for and recorded (also when it returns after
//!   the window closed, so long waits are not cut off). Hand-off = time from the holder starting
//!   its release (a shared "release started at" stamp, set just before the release is sent) to
//!   the next holder's acquire returning. min/max per task count acquisitions within the window.
//!
//! Keys are `bench:peers:<peer>:<run id>:...`, unique per call, and every lock is released at
//! the end, so nothing is left behind on a shared server (except, after an error, keys that
//! expire with their 30 s lease).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use hdrhistogram::Histogram;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::measure::{self, Hot, Throughput};

/// The lease (PX) every peer's lock is taken with.
const LEASE: Duration = Duration::from_secs(30);
/// The classic spin lock's sleep after a refused SET NX.
const SPIN_RETRY: Duration = Duration::from_millis(10);
/// rslock's retry delay: it sleeps a random 0..this between attempts.
const RSLOCK_RETRY_DELAY: Duration = Duration::from_millis(10);
/// How long an acquire started within the window may still take after the window closed
/// before the scenario is declared broken.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// The whole Node run may take this much longer than `duration` (startup, npm ci check, drain).
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
    let prefix = key_prefix("rslock");
    uncontended(peer, &prefix, tasks, duration).await
}

/// T tasks on one rslock lock for `duration`.
pub async fn rslock_hot(url: &str, tasks: usize, duration: Duration) -> Result<Hot, String> {
    let peer = Rslock::connect(url).await?;
    let key = format!("{}:hot", key_prefix("rslock"));
    hot(peer, &key, tasks, duration).await
}

/// T tasks, each locking and unlocking its own spin lock for `duration`.
pub async fn spin_uncontended(
    url: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Throughput, String> {
    let peer = Spin::connect(url).await?;
    let prefix = key_prefix("spin");
    let result = uncontended(peer.clone(), &prefix, tasks, duration).await;
    peer.close().await;
    result
}

/// T tasks on one spin lock for `duration`.
pub async fn spin_hot(url: &str, tasks: usize, duration: Duration) -> Result<Hot, String> {
    let peer = Spin::connect(url).await?;
    let key = format!("{}:hot", key_prefix("spin"));
    let result = hot(peer.clone(), &key, tasks, duration).await;
    peer.close().await;
    result
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
    let mut command = tokio::process::Command::new(crate::support::node::node_binary());
    command
        .arg(dir.join("bench.js"))
        .arg(url)
        .arg(tasks.to_string())
        .arg(duration.as_millis().to_string())
        .arg(key_prefix("node"))
        .arg(LEASE.as_millis().to_string())
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(duration + NODE_SLACK, command.output())
        .await
        .map_err(|_| {
            format!(
                "`node bench.js` did not finish within {:?}",
                duration + NODE_SLACK
            )
        })?
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
    /// Acquires `key`, polling until it gets it.
    fn acquire(&self, key: &str) -> impl Future<Output = Result<Self::Held, String>> + Send;
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
        // rslock panics on a URL redis-rs cannot parse; report it as an error instead.
        let owned = url.to_owned();
        let mut manager = std::panic::catch_unwind(move || rslock::LockManager::new(vec![owned]))
            .map_err(|_| format!("rslock rejects the redis url {url}"))?;
        manager.set_retry(u32::MAX, RSLOCK_RETRY_DELAY);
        let peer = Rslock { manager };
        // Opens the shared multiplexed connection before any clock starts.
        let warm_up = format!("{}:warm-up", key_prefix("rslock"));
        let held = tokio::time::timeout(Duration::from_secs(10), peer.acquire(&warm_up))
            .await
            .map_err(|_| {
                format!(
                    "rslock could not lock a free key on {url} within 10 s (server unreachable?)"
                )
            })??;
        peer.release(&warm_up, held).await?;
        Ok(peer)
    }
}

impl Peer for Rslock {
    type Held = rslock::Lock;

    fn acquire(&self, key: &str) -> impl Future<Output = Result<rslock::Lock, String>> + Send {
        let manager = self.manager.clone();
        let key = key.to_owned();
        async move {
            manager
                .lock(key.as_bytes(), LEASE)
                .await
                .map_err(|e| format!("rslock lock({key}): {e}"))
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

    fn acquire(&self, key: &str) -> impl Future<Output = Result<String, String>> + Send {
        let spin = self.clone();
        let key = key.to_owned();
        async move {
            let token = format!(
                "{}:{}",
                spin.token_prefix,
                spin.next_token.fetch_add(1, Ordering::Relaxed)
            );
            loop {
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
                    return Ok(token);
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

/// T tasks, task i on key `<prefix>:u:<i>`, lock+unlock pairs for `duration` (at least one each).
async fn uncontended<P: Peer>(
    peer: P,
    prefix: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Throughput, String> {
    let tasks = tasks.max(1);
    let start = Instant::now();
    let deadline = start + duration;
    let mut set = JoinSet::new();
    for i in 0..tasks {
        let peer = peer.clone();
        let key = format!("{prefix}:u:{i}");
        set.spawn(async move {
            let mut latency = measure::histogram();
            let mut pairs = 0u64;
            loop {
                let t0 = Instant::now();
                let held = bounded_acquire(&peer, &key, deadline).await?;
                measure::record(&mut latency, t0.elapsed());
                peer.release(&key, held).await?;
                pairs += 1;
                if Instant::now() >= deadline {
                    return Ok::<_, String>((latency, pairs));
                }
            }
        });
    }
    let results = join_all_or_abort(set).await?;
    let elapsed = start.elapsed().as_secs_f64();
    let mut latency = measure::histogram();
    let mut pairs = 0u64;
    for (histogram, count) in results {
        merge(&mut latency, &histogram);
        pairs += count;
    }
    let (p50_us, p99_us, _) = measure::percentiles(&latency);
    Ok(Throughput {
        pairs_per_s: pairs as f64 / elapsed,
        p50_us,
        p99_us,
    })
}

/// What one task of the hot scenario brings back.
struct HotTask {
    acquire: Histogram<u64>,
    handoff: Histogram<u64>,
    in_window: u64,
}

/// T tasks on one `key`, acquire → release while the window of `duration` is open.
async fn hot<P: Peer>(peer: P, key: &str, tasks: usize, duration: Duration) -> Result<Hot, String> {
    const NO_RELEASE: u64 = u64::MAX;
    let tasks = tasks.max(1);
    let start = Instant::now();
    let deadline = start + duration;
    // When the last holder started its release, in ns since `start`.
    let release_started = Arc::new(AtomicU64::new(NO_RELEASE));
    let since_start = move |at: Instant| {
        u64::try_from(at.duration_since(start).as_nanos()).unwrap_or(u64::MAX - 1)
    };
    let mut set = JoinSet::new();
    for _ in 0..tasks {
        let peer = peer.clone();
        let key = key.to_owned();
        let release_started = Arc::clone(&release_started);
        set.spawn(async move {
            let mut acquire = measure::histogram();
            let mut handoff = measure::histogram();
            let mut in_window = 0u64;
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let held = bounded_acquire(&peer, &key, deadline).await?;
                let acquired = Instant::now();
                measure::record(&mut acquire, acquired - t0);
                let released_at = release_started.load(Ordering::Acquire);
                if released_at != NO_RELEASE {
                    let gap = since_start(acquired).saturating_sub(released_at);
                    measure::record(&mut handoff, Duration::from_nanos(gap));
                }
                if acquired <= deadline {
                    in_window += 1;
                }
                release_started.store(since_start(Instant::now()), Ordering::Release);
                peer.release(&key, held).await?;
            }
            Ok::<_, String>(HotTask {
                acquire,
                handoff,
                in_window,
            })
        });
    }
    let results = join_all_or_abort(set).await?;
    let mut acquire = measure::histogram();
    let mut handoff = measure::histogram();
    let mut total = 0u64;
    let mut min_per_task = u64::MAX;
    let mut max_per_task = 0u64;
    for task in &results {
        merge(&mut acquire, &task.acquire);
        merge(&mut handoff, &task.handoff);
        total += task.in_window;
        min_per_task = min_per_task.min(task.in_window);
        max_per_task = max_per_task.max(task.in_window);
    }
    let (p50_us, p99_us, max_us) = measure::percentiles(&acquire);
    let (handoff_p50_us, handoff_p99_us, _) = measure::percentiles(&handoff);
    Ok(Hot {
        acq_per_s: total as f64 / duration.as_secs_f64().max(1e-9),
        p50_us,
        p99_us,
        max_us,
        handoff_p50_us,
        handoff_p99_us,
        min_per_task: if results.is_empty() { 0 } else { min_per_task },
        max_per_task,
    })
}

/// `peer.acquire(key)`, failing if it has not returned `DRAIN_LIMIT` after the window closed.
async fn bounded_acquire<P: Peer>(
    peer: &P,
    key: &str,
    deadline: Instant,
) -> Result<P::Held, String> {
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

/// `bench:peers:<peer>:<uuid>`: a key prefix unique to this call.
fn key_prefix(peer: &str) -> String {
    format!("bench:peers:{peer}:{}", uuid::Uuid::new_v4().simple())
}

/// A connected fred client (one multiplexed connection).
async fn fred_client(url: &str) -> Result<fred::clients::Client, String> {
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
