//! The family scenario (issue 15): each primitive of the lock family under contention.
//!
//! For every primitive, T tasks (each its own owner) work on one name, each looping acquire →
//! release with no work in between, for the run's duration after its warm-up. Measured per
//! primitive: completed cycles per second (acquisitions/s), the acquire latency's p50 and p99
//! (from the call to its return), and the fewest and most cycles any one task completed (how
//! evenly the primitive shares).
//!
//! Every row is reported as a ratio against the reentrant lock's loop measured in the same run
//! (the baseline: the primitive they all extend), and, where a peer outside ferrisson is closer,
//! against that peer measured in the same run too: the spin lock against the classic
//! `SET NX PX` spin lock (`peers.rs`).
//!
//! Written to `<out>/family.json`; printed as its own table.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use ferrisson::{Client, Owner};
use serde_json::json;

use crate::measure;
use crate::Plan;

/// One primitive's contended loop.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Contended {
    pub acq_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub min_per_task: u64,
    pub max_per_task: u64,
}

/// One row of the table: a primitive, and its closest outside peer when it has one.
pub struct Row {
    pub primitive: &'static str,
    pub result: Result<Contended, String>,
    pub peer: Option<(&'static str, Result<f64, String>)>,
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

/// Runs every primitive's loop against the server at `url`.
pub async fn run(plan: &Plan, url: &str) -> Report {
    let tasks = tasks(plan);
    let client = match Client::connect(url).await {
        Ok(client) => client,
        Err(e) => {
            return Report {
                tasks,
                rows: vec![Row {
                    primitive: "reentrant",
                    result: Err(format!("connect: {e}")),
                    peer: None,
                }],
            }
        }
    };
    let limit = plan.scenario_timeout();
    let mut rows = Vec::new();

    let reentrant = primitive(
        plan,
        tasks,
        limit,
        || {
            client
                .lock("ferrisson-bench:family:reentrant")
                .with_owner(Owner::new())
        },
        |lock| async move { lock.lock().await },
        |guard| guard.unlock(),
    );
    rows.push(Row {
        primitive: "reentrant",
        result: reentrant.await,
        peer: None,
    });

    let fenced = primitive(
        plan,
        tasks,
        limit,
        || {
            client
                .fenced_lock("ferrisson-bench:family:fenced")
                .with_owner(Owner::new())
        },
        |lock| async move { lock.lock().await },
        |guard| guard.unlock(),
    );
    rows.push(Row {
        primitive: "fenced",
        result: fenced.await,
        peer: None,
    });

    client.shutdown().await;
    Report { tasks, rows }
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
    contended(plan, tasks, limit, |_| {
        let handle = new();
        let (acquire, release) = (acquire.clone(), release.clone());
        move || {
            let (handle, acquire, release) = (handle.clone(), acquire.clone(), release.clone());
            async move {
                let started = Instant::now();
                let held = acquire(handle).await.map_err(|e| format!("acquire: {e}"))?;
                let waited = started.elapsed();
                release(held).await.map_err(|e| format!("release: {e}"))?;
                Ok(waited)
            }
        }
    })
    .await
}

/// T tasks each running `cycle` (from `make(task)`: one acquire → release, returning the
/// acquire's latency) in a loop; a cycle counts when it started after the warm-up and ended
/// within the window.
async fn contended<C, Fut>(
    plan: &Plan,
    tasks: usize,
    limit: Duration,
    make: impl Fn(usize) -> C,
) -> Result<Contended, String>
where
    C: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Duration, String>> + Send,
{
    let start = Instant::now();
    let warm_end = start + plan.warmup;
    let deadline = warm_end + plan.duration;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let mut cycle = make(task);
            tokio::spawn(async move {
                let mut latency = measure::histogram();
                let mut cycles = 0u64;
                loop {
                    let started = Instant::now();
                    if started >= deadline {
                        break;
                    }
                    let waited = cycle().await?;
                    if started >= warm_end && Instant::now() <= deadline {
                        cycles += 1;
                        measure::record(&mut latency, waited);
                    }
                }
                Ok::<_, String>((cycles, latency))
            })
        })
        .collect();
    let joined = tokio::time::timeout(limit, futures::future::join_all(handles))
        .await
        .map_err(|_| format!("did not finish within {limit:?}"))?;
    let mut latency = measure::histogram();
    let mut counts = Vec::with_capacity(tasks);
    for handle in joined {
        let (cycles, worker) = handle.map_err(|e| format!("task: {e}"))??;
        latency.add(&worker).map_err(|e| e.to_string())?;
        counts.push(cycles);
    }
    let (p50_us, p99_us, _) = measure::percentiles(&latency);
    Ok(Contended {
        acq_per_s: counts.iter().sum::<u64>() as f64 / plan.duration.as_secs_f64(),
        p50_us,
        p99_us,
        min_per_task: counts.iter().copied().min().unwrap_or(0),
        max_per_task: counts.iter().copied().max().unwrap_or(0),
    })
}

/// The reentrant lock's row: the baseline of every ratio.
fn baseline(report: &Report) -> Option<f64> {
    report
        .rows
        .iter()
        .find(|row| row.primitive == "reentrant")
        .and_then(|row| row.result.as_ref().ok())
        .map(|c| c.acq_per_s)
}

fn ratio(value: f64, base: Option<f64>) -> String {
    match base {
        Some(base) if base > 0.0 => format!("{:.2}", value / base),
        _ => "n/a".into(),
    }
}

/// The table, one line per primitive.
pub fn render(report: &Report) -> String {
    let base = baseline(report);
    let mut out = format!(
        "family (T = {} tasks on one name, acquire → release; ratios against the reentrant lock of this run)\n",
        report.tasks
    );
    out.push_str(&format!(
        "{:<18} {:>10} {:>8} {:>9} {:>9} {:>13}  {}\n",
        "primitive", "acq/s", "×RLock", "p50 µs", "p99 µs", "min/max task", "peer"
    ));
    for row in &report.rows {
        let peer = match &row.peer {
            Some((name, Ok(peer))) => match &row.result {
                Ok(c) => format!(
                    "{name} {peer:.0} acq/s, ×{}",
                    ratio(c.acq_per_s, Some(*peer))
                ),
                Err(_) => format!("{name} {peer:.0} acq/s"),
            },
            Some((name, Err(e))) => format!("{name}: n/a ({e})"),
            None => String::new(),
        };
        match &row.result {
            Ok(c) => out.push_str(&format!(
                "{:<18} {:>10.0} {:>8} {:>9.0} {:>9.0} {:>6}/{:<6}  {}\n",
                row.primitive,
                c.acq_per_s,
                ratio(c.acq_per_s, base),
                c.p50_us,
                c.p99_us,
                c.min_per_task,
                c.max_per_task,
                peer
            )),
            Err(e) => out.push_str(&format!("{:<18} failed: {e}\n", row.primitive)),
        }
    }
    out
}

/// `family.json`: every row with its ratios.
pub fn write(report: &Report, dir: &Path, mode: &str) -> std::io::Result<()> {
    let base = baseline(report);
    let rows: Vec<_> = report
        .rows
        .iter()
        .map(|row| {
            let result = match &row.result {
                Ok(c) => json!({
                    "acq_per_s": c.acq_per_s,
                    "vs_reentrant": base.filter(|b| *b > 0.0).map(|b| c.acq_per_s / b),
                    "p50_us": c.p50_us,
                    "p99_us": c.p99_us,
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
            json!({ "primitive": row.primitive, "ferrisson": result, "peer": peer })
        })
        .collect();
    let value = json!({ "mode": mode, "tasks": report.tasks, "rows": rows });
    let text = serde_json::to_string_pretty(&value).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("family.json"), text)
}
