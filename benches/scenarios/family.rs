//! The family scenario (issue 15): each primitive of the lock family under contention.
//!
//! For every primitive, T tasks (each its own owner) work on one name, each looping acquire →
//! release with no work in between, for the run's duration after its warm-up. Measured per
//! primitive: completed cycles per second (acquisitions/s), the acquire latency's p50 and p99
//! (from the call to its return), the hand-off latency (from the latest release's start to an
//! acquire's return, for acquires that started before that release: they waited for it), and
//! the fewest and most cycles any one task completed (how evenly the primitive shares).
//!
//! Every row is reported as a ratio against the reentrant lock's loop measured in the same run
//! (the baseline: the primitive they all extend), and, where a peer outside ferrisson is closer,
//! against that peer measured in the same run too: the spin lock against the classic
//! `SET NX PX` spin lock, the token lock against rslock on the same server (the same layout:
//! `SET NX PX`, compare-and-delete), MultiLock, RedLock and TokenRedLock (over 3 independent
//! servers this scenario starts) against rslock over the same 3 servers (`peers.rs`).
//!
//! The count-down latch has no acquire → release: its row counts rounds (`try_set_count(1)`,
//! T − 1 tasks `wait`, one `count_down`), its acquire latency is a `wait` call's, and its
//! hand-off latency is the wake: from the `count_down` call to the last waiter's return.
//!
//! Written to `<out>/family.json`; printed as its own table.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrisson::{Client, CountDownLatch, MultiLock, Owner, RedLock, RedlockOptions, TokenRedLock};
use fred::prelude::*;
use hdrhistogram::Histogram;
use serde_json::json;

use crate::measure;
use crate::peers;
use crate::support::RedisServer;
use crate::Plan;

/// One primitive's contended loop.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Contended {
    pub acq_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// `None`: no hand-off seen, or a row whose tasks hold at once (readers, several permits).
    pub handoff_p50_us: Option<f64>,
    pub handoff_p99_us: Option<f64>,
    pub min_per_task: u64,
    pub max_per_task: u64,
}

/// What a row's rate counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counts {
    /// Acquire → release cycles.
    Acquisitions,
    /// Count-down latch rounds: one `count_down` waking T − 1 waiters.
    LatchRounds,
}

/// One row of the table: a primitive, and its closest outside peer when it has one.
pub struct Row {
    pub primitive: &'static str,
    pub counts: Counts,
    pub result: Result<Contended, String>,
    pub peer: Option<(&'static str, Result<f64, String>)>,
}

impl Row {
    fn new(primitive: &'static str, result: Result<Contended, String>) -> Row {
        Row {
            primitive,
            counts: Counts::Acquisitions,
            result,
            peer: None,
        }
    }

    fn with_peer(mut self, name: &'static str, peer: Result<f64, String>) -> Row {
        self.peer = Some((name, peer));
        self
    }
}

/// The scenario's outcome.
pub struct Report {
    pub tasks: usize,
    pub rows: Vec<Row>,
}

impl Report {
    /// Errors of ferrisson's own rows (a peer may be n/a).
    pub fn failures(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter_map(|row| {
                row.result
                    .as_ref()
                    .err()
                    .map(|e| format!("family {}: {e}", row.primitive))
            })
            .collect()
    }
}

/// The tasks per primitive: the hot scenario's summary T, at least 4 (the smoke's T = 2 would
/// hardly contend).
fn tasks(plan: &Plan) -> usize {
    plan.hot_summary.max(4)
}

/// The independent servers of the MultiLock, RedLock and rslock rows.
const COMPOSITE_SERVERS: usize = 3;

/// [`primitive`] for a lock whose handles take it with `lock()`, its guards giving it back
/// with `unlock()`.
macro_rules! locks {
    ($plan:expr, $tasks:expr, $limit:expr, $new:expr) => {
        primitive(
            $plan,
            $tasks,
            $limit,
            $new,
            |lock| async move { lock.lock().await },
            |guard| guard.unlock(),
        )
    };
}

/// `$semaphore` deleted, then given exactly `$permits`, awaited in place.
macro_rules! fresh {
    ($semaphore:expr, $permits:expr) => {
        async {
            let semaphore = $semaphore;
            semaphore
                .delete()
                .await
                .map_err(|e| format!("delete: {e}"))?;
            match semaphore.try_set_permits($permits).await {
                Ok(true) => Ok(semaphore),
                Ok(false) => Err(format!(
                    "try_set_permits({}) refused on a deleted semaphore",
                    $permits
                )),
                Err(e) => Err(format!("try_set_permits({}): {e}", $permits)),
            }
        }
        .await
    };
}

/// Runs every primitive's loop against the server at `url` (MultiLock and RedLock against 3
/// servers of their own).
pub async fn run(plan: &Plan, url: &str) -> Report {
    let tasks = tasks(plan);
    let client = match Client::connect(url).await {
        Ok(client) => client,
        Err(e) => {
            return Report {
                tasks,
                rows: vec![Row::new("reentrant", Err(format!("connect: {e}")))],
            }
        }
    };
    let limit = plan.scenario_timeout();
    let peer_limit = plan.baseline_timeout();
    // Unique per run: a semaphore or latch left by an aborted run must not change this one.
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let name = |kind: &str| format!("ferrisson-bench:family:{run_id}:{kind}");
    let mut rows = Vec::new();

    // Each task's handle acts for an owner of its own.
    macro_rules! row {
        ($kind:literal, $handle:expr) => {
            Row::new(
                $kind,
                locks!(plan, tasks, limit, || $handle.with_owner(Owner::new())).await,
            )
        };
    }
    rows.push(row!("reentrant", client.lock(name("reentrant"))));
    let spin = row!("spin", client.spin_lock(name("spin")));
    let peer = crate::bounded(peer_limit, peers::spin_hot(url, tasks, plan.duration)).await;
    rows.push(spin.with_peer("SET NX PX spin", peer.map(|hot| hot.acq_per_s)));
    rows.push(row!(
        "non-reentrant",
        client.non_reentrant_lock(name("non-reentrant"))
    ));
    rows.push(row!("fair", client.fair_lock(name("fair"))));
    rows.push(row!("fenced", client.fenced_lock(name("fenced"))));
    // The peers' own layout: rslock on the same server is its closest peer. They take turns,
    // TURNS each, and the row reports the median of each side: this VM's rate drifts by up to
    // 2x within a run, and one turn each put the ratio anywhere in 0.73-1.57.
    let mut ours = Vec::with_capacity(TURNS);
    let mut theirs = Vec::with_capacity(TURNS);
    for _ in 0..TURNS {
        ours.push(row!("token", client.token_lock(name("token"))).result);
        let peer = crate::bounded(peer_limit, peers::rslock_hot(url, tasks, plan.duration)).await;
        theirs.push(peer.map(|hot| hot.acq_per_s));
    }
    // Any turn of ours that failed fails the row (a hang must not hide behind a median); the
    // peer's row is the median of its turns that ran.
    let ours = ours
        .into_iter()
        .collect::<Result<Vec<_>, String>>()
        .and_then(|turns| median_of(turns.into_iter().map(Ok).collect(), |c| c.acq_per_s));
    let theirs = median_of(theirs, |rate| *rate);
    rows.push(Row::new("token", ours).with_peer("rslock", theirs));
    let rw = client.read_write_lock(name("rw-write"));
    rows.push(row!("rw: writers", rw.write_lock()));
    let rw = client.read_write_lock(name("rw-read"));
    let mut readers = row!("rw: readers", rw.read_lock());
    readers.result = readers.result.map(shared);
    rows.push(readers);

    // A semaphore's loop, on `$semaphore` deleted and given exactly `$permits` first
    // (`try_set_permits` sets only a new one); deleted after.
    macro_rules! permits {
        ($semaphore:expr, $permits:expr, $acquire:expr) => {
            match fresh!($semaphore, $permits) {
                Ok(semaphore) => {
                    let result = primitive(
                        plan,
                        tasks,
                        limit,
                        || semaphore.clone(),
                        $acquire,
                        |permits| permits.release(),
                    )
                    .await;
                    let _ = semaphore.delete().await;
                    result
                }
                Err(e) => Err(e),
            }
        };
    }
    let half = (tasks / 2).max(1) as u64;
    let one = permits!(client.semaphore(name("semaphore-1")), 1, |s| async move {
        s.acquire(1).await
    });
    rows.push(Row::new("semaphore 1", one));
    // Several permits: several hold at once, so no hand-off to speak of.
    let half = permits!(
        client.semaphore(name("semaphore-half")),
        half,
        |s| async move { s.acquire(1).await }
    );
    rows.push(Row::new("semaphore T/2", half.map(shared)));
    let semaphore = client.permit_expirable_semaphore(name("permit-expirable"));
    let expirable = permits!(semaphore, 1, |s| async move { s.acquire(None).await });
    rows.push(Row::new("permit-expirable 1", expirable));

    let latch = latch_rounds(
        plan,
        url,
        client.count_down_latch(name("latch")),
        tasks,
        limit,
    );
    rows.push(Row {
        counts: Counts::LatchRounds,
        ..Row::new("latch", latch.await)
    });

    client.shutdown().await;
    rows.extend(composite_rows(plan, tasks, &name("composite")).await);
    Report { tasks, rows }
}

/// Turns each of the token lock and rslock take, alternating.
const TURNS: usize = 3;

/// The turn with the median `rate` (the upper one of an even count); the first error if every
/// turn failed.
fn median_of<T>(turns: Vec<Result<T, String>>, rate: impl Fn(&T) -> f64) -> Result<T, String> {
    let mut done = Vec::with_capacity(turns.len());
    let mut first_error = None;
    for turn in turns {
        match turn {
            Ok(done_turn) => done.push(done_turn),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if done.is_empty() {
        return Err(first_error.unwrap_or_else(|| "no turn ran".into()));
    }
    done.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    let middle = done.len() / 2;
    Ok(done.swap_remove(middle))
}

/// A row whose tasks hold at once (readers, several permits): an acquire overlapping another
/// task's release did not wait for it, so the hand-off latency means nothing there.
fn shared(mut contended: Contended) -> Contended {
    contended.handoff_p50_us = None;
    contended.handoff_p99_us = None;
    contended
}

/// [`contended`] for a primitive whose handles `new` makes (one per task: its own owner), taken
/// by `acquire` and given back by `release`.
async fn primitive<L, G, A, R>(
    plan: &Plan,
    tasks: usize,
    limit: Duration,
    new: impl Fn() -> L,
    acquire: impl Fn(L) -> A + Clone + Send + 'static,
    release: impl Fn(G) -> R + Clone + Send + 'static,
) -> Result<Contended, String>
where
    L: Clone + Send + 'static,
    A: Future<Output = ferrisson::Result<G>> + Send,
    R: Future<Output = ferrisson::Result<()>> + Send,
{
    // When the latest release started (ns after `epoch`), for the hand-off latency.
    let epoch = Instant::now();
    let released = Arc::new(AtomicU64::new(u64::MAX));
    contended(plan, tasks, limit, |_| {
        let handle = new();
        let (acquire, release) = (acquire.clone(), release.clone());
        let released = Arc::clone(&released);
        let nanos = move || epoch.elapsed().as_nanos() as u64;
        move || {
            let (handle, acquire, release) = (handle.clone(), acquire.clone(), release.clone());
            let released = Arc::clone(&released);
            async move {
                let started = Instant::now();
                let started_ns = nanos();
                let held = acquire(handle).await.map_err(|e| format!("acquire: {e}"))?;
                let acquired_ns = nanos();
                let waited = started.elapsed();
                // Started before the latest release began: it waited for that release.
                let last = released.load(Ordering::SeqCst);
                let handoff = (last != u64::MAX && last > started_ns)
                    .then(|| Duration::from_nanos(acquired_ns.saturating_sub(last)));
                released.store(nanos(), Ordering::SeqCst);
                release(held).await.map_err(|e| format!("release: {e}"))?;
                Ok((waited, handoff))
            }
        }
    })
    .await
}

/// T tasks each running `cycle` (from `make(task)`: one acquire → release, returning the
/// acquire's latency and, if it waited for a release, the hand-off latency) in a loop; a cycle
/// counts when it started after the warm-up and ended within the window.
async fn contended<C, Fut>(
    plan: &Plan,
    tasks: usize,
    limit: Duration,
    make: impl Fn(usize) -> C,
) -> Result<Contended, String>
where
    C: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(Duration, Option<Duration>), String>> + Send,
{
    let start = Instant::now();
    let warm_end = start + plan.warmup;
    let deadline = warm_end + plan.duration;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let mut cycle = make(task);
            tokio::spawn(async move {
                let mut latency = measure::histogram();
                let mut handoffs = measure::histogram();
                let mut cycles = 0u64;
                loop {
                    let started = Instant::now();
                    if started >= deadline {
                        break;
                    }
                    let (waited, handoff) = cycle().await?;
                    if started >= warm_end && Instant::now() <= deadline {
                        cycles += 1;
                        measure::record(&mut latency, waited);
                        if let Some(handoff) = handoff {
                            measure::record(&mut handoffs, handoff);
                        }
                    }
                }
                Ok::<_, String>((cycles, latency, handoffs))
            })
        })
        .collect();
    let joined = bounded_join(limit, handles).await?;
    let mut latency = measure::histogram();
    let mut handoffs = measure::histogram();
    let mut counts = Vec::with_capacity(tasks);
    for (cycles, worker, worker_handoffs) in joined {
        latency.add(&worker).map_err(|e| e.to_string())?;
        handoffs.add(&worker_handoffs).map_err(|e| e.to_string())?;
        counts.push(cycles);
    }
    Ok(summarize(plan, &counts, &latency, &handoffs))
}

/// Joins `handles` within `limit`, aborting them all if it runs out (a hang must end the row,
/// not leave tasks behind).
async fn bounded_join<T: Send + 'static>(
    limit: Duration,
    handles: Vec<tokio::task::JoinHandle<Result<T, String>>>,
) -> Result<Vec<T>, String> {
    let aborts: Vec<_> = handles.iter().map(|h| h.abort_handle()).collect();
    let joined = tokio::time::timeout(limit, futures::future::join_all(handles)).await;
    let Ok(joined) = joined else {
        aborts.iter().for_each(|abort| abort.abort());
        return Err(format!("did not finish within {limit:?}"));
    };
    joined
        .into_iter()
        .map(|handle| handle.map_err(|e| format!("task: {e}"))?)
        .collect()
}

fn summarize(
    plan: &Plan,
    counts: &[u64],
    latency: &Histogram<u64>,
    handoffs: &Histogram<u64>,
) -> Contended {
    let (p50_us, p99_us, _) = measure::percentiles(latency);
    let (handoff_p50_us, handoff_p99_us) = if handoffs.is_empty() {
        (None, None)
    } else {
        let (p50, p99, _) = measure::percentiles(handoffs);
        (Some(p50), Some(p99))
    };
    Contended {
        acq_per_s: counts.iter().sum::<u64>() as f64 / plan.duration.as_secs_f64(),
        p50_us,
        p99_us,
        handoff_p50_us,
        handoff_p99_us,
        min_per_task: counts.iter().copied().min().unwrap_or(0),
        max_per_task: counts.iter().copied().max().unwrap_or(0),
    }
}

/// The count-down latch in rounds until the window closes: `try_set_count(1)`, T − 1 waiter
/// tasks call `wait` and park, one `count_down` wakes them. A round counts when it started
/// after the warm-up and ended within the window; its wake latency runs from the `count_down`
/// call to the last waiter's return. "Parked" is read on the server: the waiters' `GET`s
/// (`INFO commandstats`; every wait attempt is one `GET`, so at least T − 1 of them), the
/// channel's subscriber (`PUBSUB NUMSUB`), and no new `GET` over two more reads. A waiter that
/// had not parked yet returns by its own `GET`, which is no faster than a wake.
async fn latch_rounds(
    plan: &Plan,
    url: &str,
    latch: CountDownLatch,
    tasks: usize,
    limit: Duration,
) -> Result<Contended, String> {
    let raw = measure::fred_client(url).await?;
    let result = tokio::time::timeout(limit, latch_loop(plan, &raw, &latch, tasks))
        .await
        .unwrap_or_else(|_| Err(format!("did not finish within {limit:?}")));
    let _ = latch.delete().await;
    let _ = raw.quit().await;
    result
}

async fn latch_loop(
    plan: &Plan,
    raw: &fred::clients::Client,
    latch: &CountDownLatch,
    tasks: usize,
) -> Result<Contended, String> {
    let waiters = tasks.saturating_sub(1).max(1);
    let channel = format!("redisson_countdownlatch__channel__{{{}}}", latch.name());
    latch.delete().await.map_err(|e| format!("delete: {e}"))?;
    let start = Instant::now();
    let warm_end = start + plan.warmup;
    let deadline = warm_end + plan.duration;
    let mut waits = measure::histogram();
    let mut wakes = measure::histogram();
    let mut woken = vec![0u64; waiters];
    while Instant::now() < deadline {
        let round_started = Instant::now();
        match latch.try_set_count(1).await {
            Ok(true) => {}
            Ok(false) => return Err("try_set_count(1) refused: last round's latch is set".into()),
            Err(e) => return Err(format!("try_set_count(1): {e}")),
        }
        let gets = get_calls(raw).await?;
        let handles: Vec<_> = (0..waiters)
            .map(|_| {
                let latch = latch.clone();
                tokio::spawn(async move {
                    let called = Instant::now();
                    latch.wait().await.map_err(|e| format!("wait: {e}"))?;
                    Ok((called, Instant::now()))
                })
            })
            .collect();
        parked(raw, &channel, gets + waiters as u64).await?;
        let counted = Instant::now();
        latch
            .count_down()
            .await
            .map_err(|e| format!("count_down: {e}"))?;
        // The loop's own bound (`latch_rounds`) ends a waiter that is never woken.
        let returned = bounded_join(Duration::MAX, handles).await?;
        let last = returned.iter().map(|(_, at)| *at).max().unwrap_or(counted);
        if round_started >= warm_end && last <= deadline {
            measure::record(&mut wakes, last.saturating_duration_since(counted));
            for (waiter, (called, at)) in returned.iter().enumerate() {
                measure::record(&mut waits, at.saturating_duration_since(*called));
                woken[waiter] += 1;
            }
        }
    }
    let rounds = woken.first().copied().unwrap_or(0);
    let mut result = summarize(plan, &woken, &waits, &wakes);
    result.acq_per_s = rounds as f64 / plan.duration.as_secs_f64();
    Ok(result)
}

/// Polls the server until the latch's waiters look parked (see [`latch_rounds`]): at least
/// `gets` `GET`s counted, a subscriber on `channel`, then the count still over two more reads.
async fn parked(raw: &fred::clients::Client, channel: &str, gets: u64) -> Result<(), String> {
    let mut last = 0;
    let mut still = 0;
    loop {
        let now = get_calls(raw).await?;
        if now >= gets && numsub(raw, channel).await? >= 1 {
            still = if now == last { still + 1 } else { 0 };
            if still >= 2 {
                return Ok(());
            }
        }
        last = now;
    }
}

/// The server's `GET` count (`INFO commandstats`; Redis 7 counts a script's commands too).
async fn get_calls(raw: &fred::clients::Client) -> Result<u64, String> {
    let info: String = raw
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .map_err(|e| format!("INFO commandstats: {e}"))?;
    Ok(info
        .lines()
        .find_map(|line| line.trim().strip_prefix("cmdstat_get:"))
        .and_then(|stats| stats.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0))
}

async fn numsub(raw: &fred::clients::Client, channel: &str) -> Result<i64, String> {
    let reply: Vec<Value> = raw
        .custom(fred::cmd!("PUBSUB"), vec!["NUMSUB", channel])
        .await
        .map_err(|e| format!("PUBSUB NUMSUB: {e}"))?;
    reply
        .get(1)
        .and_then(Value::as_i64)
        .ok_or_else(|| format!("unexpected PUBSUB NUMSUB reply {reply:?}"))
}

/// MultiLock (every part) and RedLock (a majority) over 3 servers started here, one client
/// each, and rslock over the same 3 servers as their peer.
async fn composite_rows(plan: &Plan, tasks: usize, name: &str) -> Vec<Row> {
    let failed = |e: String| {
        vec![
            Row::new("MultiLock ×3", Err(e.clone())),
            Row::new("RedLock ×3", Err(e.clone())),
            Row::new("TokenRedLock ×3", Err(e)),
        ]
    };
    let started = tokio::task::spawn_blocking(|| {
        std::panic::catch_unwind(|| {
            (0..COMPOSITE_SERVERS)
                .map(|_| RedisServer::start())
                .collect::<Vec<_>>()
        })
    })
    .await;
    let servers = match started {
        Ok(Ok(servers)) => servers,
        _ => return failed("could not start 3 redis-servers".into()),
    };
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let rows = composite_on(plan, tasks, name, &urls).await;
    // Stopping a server waits for its process: off the runtime's threads.
    let _ = tokio::task::spawn_blocking(move || drop(servers)).await;
    rows.unwrap_or_else(failed)
}

async fn composite_on(
    plan: &Plan,
    tasks: usize,
    name: &str,
    urls: &[String],
) -> Result<Vec<Row>, String> {
    let mut clients = Vec::with_capacity(urls.len());
    for url in urls {
        clients.push(
            Client::connect(url)
                .await
                .map_err(|e| format!("connect {url}: {e}"))?,
        );
    }
    let parts = |kind: &str| {
        clients
            .iter()
            .map(|client| client.lock(format!("{name}:{kind}")))
            .collect::<Vec<_>>()
    };
    let limit = plan.scenario_timeout();
    let multi = MultiLock::new(parts("multi")).map_err(|e| format!("MultiLock::new: {e}"))?;
    let red = RedLock::new(parts("red")).map_err(|e| format!("RedLock::new: {e}"))?;
    let multi = locks!(plan, tasks, limit, || multi.with_owner(Owner::new())).await;
    let red = locks!(plan, tasks, limit, || red.with_owner(Owner::new())).await;
    let token_parts = clients
        .iter()
        .map(|client| client.token_lock(format!("{name}:token-red")));
    // Retrying as the rslock row does (a random 0..10 ms), so that the two compare the
    // algorithms, not their default pauses (node redlock's 200 ± 100 ms).
    let mut retry = RedlockOptions::default();
    retry.retry_delay = peers::RSLOCK_RETRY_DELAY / 2;
    retry.retry_jitter = peers::RSLOCK_RETRY_DELAY / 2;
    let token_red = TokenRedLock::new(token_parts)
        .and_then(|red| red.with_options(retry))
        .map_err(|e| format!("TokenRedLock::new: {e}"))?;
    let token_red = locks!(plan, tasks, limit, || token_red.clone()).await;
    for client in clients {
        client.shutdown().await;
    }
    let peer = crate::bounded(
        plan.baseline_timeout(),
        peers::rslock_hot_on(urls, tasks, plan.duration),
    )
    .await
    .map(|hot| hot.acq_per_s);
    Ok(vec![
        Row::new("MultiLock ×3", multi).with_peer("rslock ×3", peer.clone()),
        Row::new("RedLock ×3", red).with_peer("rslock ×3", peer.clone()),
        Row::new("TokenRedLock ×3", token_red).with_peer("rslock ×3", peer),
    ])
}

/// The reentrant lock's row: the baseline of every ratio.
fn baseline(report: &Report) -> Option<&Contended> {
    report
        .rows
        .iter()
        .find(|row| row.primitive == "reentrant")
        .and_then(|row| row.result.as_ref().ok())
}

fn ratio(value: f64, base: Option<f64>) -> String {
    match base {
        Some(base) if base > 0.0 => format!("{:.2}", value / base),
        _ => "n/a".into(),
    }
}

fn micros(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |us| format!("{us:.0}"))
}

/// The last column: the peer and the ratio against it, or for the latch, its wake against the
/// reentrant lock's hand-off.
fn comparison(row: &Row, base: Option<&Contended>) -> String {
    if row.counts == Counts::LatchRounds {
        let wake = row.result.as_ref().ok().and_then(|c| c.handoff_p50_us);
        let handoff = base.and_then(|b| b.handoff_p50_us);
        return match (wake, handoff) {
            (Some(wake), Some(handoff)) => format!(
                "rounds/s; wake of T−1 p50 = {} × RLock hand-off p50",
                ratio(wake, Some(handoff))
            ),
            _ => "rounds/s".into(),
        };
    }
    match &row.peer {
        Some((name, Ok(peer))) => match &row.result {
            Ok(c) => format!(
                "{name} {peer:.0} acq/s, ×{}",
                ratio(c.acq_per_s, Some(*peer))
            ),
            Err(_) => format!("{name} {peer:.0} acq/s"),
        },
        Some((name, Err(e))) => format!("{name}: n/a ({e})"),
        None => String::new(),
    }
}

/// The table, one line per primitive.
pub fn render(report: &Report) -> String {
    let base = baseline(report);
    let base_rate = base.map(|b| b.acq_per_s);
    let mut out = format!(
        "family (T = {} tasks on one name, acquire → release; ratios against the reentrant lock of this run)\n",
        report.tasks
    );
    out.push_str(&format!(
        "{:<20} {:>10} {:>8} {:>9} {:>9} {:>10} {:>10} {:>13}  {}\n",
        "primitive",
        "acq/s",
        "×RLock",
        "p50 µs",
        "p99 µs",
        "h-o p50",
        "h-o p99",
        "min/max task",
        "peer"
    ));
    for row in &report.rows {
        match &row.result {
            Ok(c) => out.push_str(&format!(
                "{:<20} {:>10.0} {:>8} {:>9.0} {:>9.0} {:>10} {:>10} {:>6}/{:<6}  {}\n",
                row.primitive,
                c.acq_per_s,
                ratio(c.acq_per_s, base_rate),
                c.p50_us,
                c.p99_us,
                micros(c.handoff_p50_us),
                micros(c.handoff_p99_us),
                c.min_per_task,
                c.max_per_task,
                comparison(row, base)
            )),
            Err(e) => out.push_str(&format!("{:<20} failed: {e}\n", row.primitive)),
        }
    }
    out
}

/// `family.json`: every row with its ratios.
pub fn write(report: &Report, dir: &Path, mode: &str) -> std::io::Result<()> {
    let base = baseline(report);
    let base_rate = base.map(|b| b.acq_per_s).filter(|b| *b > 0.0);
    let rows: Vec<_> = report
        .rows
        .iter()
        .map(|row| {
            let result = match &row.result {
                Ok(c) => json!({
                    "acq_per_s": c.acq_per_s,
                    "vs_reentrant": base_rate.map(|b| c.acq_per_s / b),
                    "p50_us": c.p50_us,
                    "p99_us": c.p99_us,
                    "handoff_p50_us": c.handoff_p50_us,
                    "handoff_p99_us": c.handoff_p99_us,
                    "min_per_task": c.min_per_task,
                    "max_per_task": c.max_per_task,
                }),
                Err(e) => json!({ "error": e }),
            };
            let peer = row.peer.as_ref().map(|(name, peer)| match peer {
                Ok(acq) => json!({
                    "name": name,
                    "acq_per_s": acq,
                    "ratio": row.result.as_ref().ok().filter(|_| *acq > 0.0).map(|c| c.acq_per_s / acq),
                }),
                Err(e) => json!({ "name": name, "error": e }),
            });
            let counts = match row.counts {
                Counts::Acquisitions => "acquisitions",
                Counts::LatchRounds => "latch rounds (hand-off = wake of every waiter)",
            };
            json!({ "primitive": row.primitive, "counts": counts, "ferrisson": result, "peer": peer })
        })
        .collect();
    let value = json!({ "mode": mode, "tasks": report.tasks, "rows": rows });
    let text = serde_json::to_string_pretty(&value).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("family.json"), text)
}
