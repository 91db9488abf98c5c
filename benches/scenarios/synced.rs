//! The synced-writes scenario (issue 26): what waiting for a replica after every lock write
//! costs (`Config::synced_writes`: `WAIT 1 <timeout>` pipelined after each acquire and
//! release, Redisson's `checkLockSyncedSlaves`).
//!
//! A master and one replica of its own (persistence off, on this machine's loopback), and the
//! uncontended loop (`ferrisson::uncontended_on`) against the master with
//! `SyncedWrites::Off` and with `SyncedWrites::Always`, taking turns as the cluster scenario
//! does (`compare_rounds` rounds, the unsynced side first in odd rounds), so that both see the
//! same drift of the machine. Reported: pairs/s and acquire p50/p99 of each side (the mean rate
//! and the medians of the turns' latencies), and synced ÷ unsynced.
//!
//! Targets: acquire p50 ≤ 1.3 × unsynced at every T; pairs/s ≥ 0.7 × unsynced at T = 64.
//!
//! The machine's own floor, measured in the same run: one connection alternating a plain `SET`
//! and a `SET` pipelined with `WAIT 1`, [`FLOOR_SAMPLES`] of each; the ratio of their p50s is
//! what a replica's acknowledgement costs one write here, whoever sends it.

use std::time::{Duration, Instant};

use ferrisson::{Client, Config, SyncedWrites};
use serde::Serialize;

use crate::measure::{self, Throughput};
use crate::support::RedisServer;
use crate::Plan;

type Res<T> = Result<T, String>;

/// One side (unsynced or synced) of one T, over its turns.
#[derive(Clone, Debug, Serialize)]
pub struct Side {
    pub pairs_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// One T: both sides.
#[derive(Serialize)]
pub struct Row {
    pub tasks: usize,
    pub unsynced: Res<Side>,
    pub synced: Res<Side>,
}

/// Samples of each kind of write in the floor (at most: the plan's PING samples if fewer).
pub const FLOOR_SAMPLES: usize = 2_000;

/// The floor: p50 of a plain `SET` and of a `SET` + `WAIT 1`, in µs.
#[derive(Clone, Debug, Serialize)]
pub struct Floor {
    pub set_p50_us: f64,
    pub set_wait_p50_us: f64,
}

/// The scenario's outcome.
#[derive(Serialize)]
pub struct Outcome {
    pub rounds: u32,
    pub floor: Res<Floor>,
    /// `Err`: why the master and replica did not start.
    pub servers: Res<String>,
    pub rows: Vec<Row>,
}

impl Outcome {
    /// Rows (or sides) that failed: ferrisson's failures.
    pub fn failures(&self) -> Vec<String> {
        let mut failures: Vec<String> = self
            .servers
            .as_ref()
            .err()
            .map(|e| format!("synced: {e}"))
            .into_iter()
            .collect();
        for row in &self.rows {
            for (side, result) in [("unsynced", &row.unsynced), ("synced", &row.synced)] {
                if let Err(e) = result {
                    failures.push(format!("synced T={} {side}: {e}", row.tasks));
                }
            }
        }
        failures
    }
}

/// Starts a master and a replica of it, waits until the replica acknowledges writes, and runs
/// every T of `tasks` in turns.
pub async fn run(plan: &Plan, tasks: &[usize], progress: impl Fn(String)) -> Outcome {
    let rounds = plan.compare_rounds.max(1);
    let mut outcome = Outcome {
        rounds,
        floor: Err("not measured".into()),
        servers: Err("not started".into()),
        rows: Vec::new(),
    };
    let started = tokio::task::spawn_blocking(|| {
        std::panic::catch_unwind(|| {
            // No 5 s wait for more replicas before the first (diskless) sync.
            let master = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"]);
            let port = master.port().to_string();
            let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
            (master, replica)
        })
    })
    .await;
    let Ok(Ok((master, replica))) = started else {
        outcome.servers = Err("could not start a master and its replica".into());
        return outcome;
    };
    let url = master.url();
    let streaming = async {
        let raw = measure::fred_client(&url).await?;
        crate::support::redis_state::wait_replicas_streaming(&raw, 1).await;
        let _ = fred::interfaces::ClientLike::quit(&raw).await;
        Ok::<(), String>(())
    };
    match tokio::time::timeout(Duration::from_secs(30), streaming).await {
        Ok(Ok(())) => outcome.servers = Ok(format!("master {url}, replica {}", replica.url())),
        Ok(Err(e)) => outcome.servers = Err(e),
        Err(_) => outcome.servers = Err("the replica did not stream within 30 s".into()),
    }
    if outcome.servers.is_ok() {
        let samples = plan.ping_samples.min(FLOOR_SAMPLES);
        outcome.floor = crate::bounded(plan.baseline_timeout(), floor(&url, samples)).await;
        progress(format!(
            "synced: floor {}",
            crate::show(&outcome.floor, |f| format!(
                "SET p50 {}, SET + WAIT 1 p50 {}",
                crate::report::us(f.set_p50_us),
                crate::report::us(f.set_wait_p50_us)
            ))
        ));
        let turn_length = plan.duration / rounds;
        let (url, progress) = (&url, &progress);
        for &tasks in tasks {
            let [unsynced, synced] = measure::in_turns(rounds, |side, round| async move {
                let synced = side == 1;
                let result = crate::bounded(
                    plan.scenario_timeout(),
                    turn(url, synced, tasks, plan.warmup, turn_length),
                )
                .await;
                progress(format!(
                    "synced: T={tasks}, round {round}/{rounds}, {}: {}",
                    if synced { "synced" } else { "unsynced" },
                    crate::show(&result, |t| format!(
                        "{} pairs/s, acquire p50 {} p99 {}",
                        crate::report::rate(t.pairs_per_s),
                        crate::report::us(t.p50_us),
                        crate::report::us(t.p99_us)
                    ))
                ));
                result
            })
            .await;
            outcome.rows.push(Row {
                tasks,
                unsynced: combined(unsynced),
                synced: combined(synced),
            });
        }
    }
    // Stopping the servers waits for their processes: off the runtime's threads.
    let _ = tokio::task::spawn_blocking(move || drop((replica, master))).await;
    outcome
}

async fn turn(
    url: &str,
    synced: bool,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
) -> Res<Throughput> {
    let mut config = Config::new(url);
    config.synced_writes = if synced {
        SyncedWrites::Always
    } else {
        SyncedWrites::Off
    };
    let client = Client::new(config)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    crate::ferrisson::uncontended_on(client, tasks, warmup, duration).await
}

/// [`Floor`]: one connection, the two kinds of write alternating so that both see the same
/// drift of the machine.
async fn floor(url: &str, samples: usize) -> Res<Floor> {
    use fred::interfaces::{ClientLike, KeysInterface};
    let raw = measure::fred_client(url).await?;
    let key = "ferrisson-bench:synced:floor";
    let (mut set, mut set_wait) = (measure::histogram(), measure::histogram());
    let measured = async {
        for i in 0..2 * samples {
            let waits = i % 2 == 1;
            let started = Instant::now();
            let pipeline = raw.pipeline();
            let e = |e: fred::error::Error| format!("floor: {e}");
            let () = pipeline.set(key, i, None, None, false).await.map_err(e)?;
            if waits {
                let () = pipeline
                    .custom(fred::cmd!("WAIT"), vec![1, 1000])
                    .await
                    .map_err(e)?;
            }
            let _: Vec<fred::types::Value> = pipeline.all().await.map_err(e)?;
            let histogram = if waits { &mut set_wait } else { &mut set };
            measure::record(histogram, started.elapsed());
        }
        Ok::<(), String>(())
    }
    .await;
    let _ = raw.quit().await;
    measured?;
    Ok(Floor {
        set_p50_us: measure::percentiles(&set).0,
        set_wait_p50_us: measure::percentiles(&set_wait).0,
    })
}

/// A side's turns as one [`Side`]: the mean rate, the medians of the turns' p50 and p99; any
/// failed turn fails it.
pub fn combined(turns: Vec<Res<Throughput>>) -> Res<Side> {
    let turns = turns.into_iter().collect::<Res<Vec<_>>>()?;
    let pick = |field: fn(&Throughput) -> f64| turns.iter().map(field).collect::<Vec<_>>();
    Ok(Side {
        pairs_per_s: pick(|t| t.pairs_per_s).iter().sum::<f64>() / turns.len().max(1) as f64,
        p50_us: measure::median(pick(|t| t.p50_us)),
        p99_us: measure::median(pick(|t| t.p99_us)),
    })
}

/// The target lines: p50 at every T, the rate at T = 64.
pub fn checks(outcome: &Outcome) -> Vec<String> {
    let mut lines = Vec::new();
    if let Ok(floor) = &outcome.floor {
        lines.push(format!(
            "floor: SET + WAIT 1 p50 {} = {:.2} × SET p50 {} (one connection, this machine)",
            crate::report::us(floor.set_wait_p50_us),
            floor.set_wait_p50_us / floor.set_p50_us.max(f64::MIN_POSITIVE),
            crate::report::us(floor.set_p50_us)
        ));
    }
    for row in &outcome.rows {
        let (Ok(unsynced), Ok(synced)) = (&row.unsynced, &row.synced) else {
            continue;
        };
        let p50 = synced.p50_us / unsynced.p50_us.max(f64::MIN_POSITIVE);
        let mark = |ok: bool| if ok { "✓" } else { "✗" };
        lines.push(format!(
            "synced T={}: acquire p50 {} = {p50:.2} × unsynced {} (target ≤ 1.3) {}",
            row.tasks,
            crate::report::us(synced.p50_us),
            crate::report::us(unsynced.p50_us),
            mark(p50 <= 1.3)
        ));
        if row.tasks == 64 {
            let rate = synced.pairs_per_s / unsynced.pairs_per_s.max(f64::MIN_POSITIVE);
            lines.push(format!(
                "synced T=64: {} pairs/s = {rate:.2} × unsynced {} (target ≥ 0.7) {}",
                crate::report::rate(synced.pairs_per_s),
                crate::report::rate(unsynced.pairs_per_s),
                mark(rate >= 0.7)
            ));
        }
    }
    lines
}

/// The table, then the target lines.
pub fn render(outcome: &Outcome) -> String {
    let mut out = format!(
        "synced writes (one replica, WAIT after every acquire and release; {} rounds of turns)\n{:>4}  {:>28}  {:>28}  {:>8}  {:>8}\n",
        outcome.rounds, "T", "unsynced pairs/s p50 p99", "synced pairs/s p50 p99", "× rate", "× p50"
    );
    if let Err(e) = &outcome.servers {
        out.push_str(&format!("not run: {e}\n"));
    }
    let side = |s: &Res<Side>| match s {
        Ok(s) => format!(
            "{:>10} {:>8} {:>8}",
            crate::report::rate(s.pairs_per_s),
            crate::report::us(s.p50_us),
            crate::report::us(s.p99_us)
        ),
        Err(_) => format!("{:>28}", "failed"),
    };
    for row in &outcome.rows {
        let ratios = match (&row.unsynced, &row.synced) {
            (Ok(u), Ok(s)) => format!(
                "{:>8.2}  {:>8.2}",
                s.pairs_per_s / u.pairs_per_s.max(f64::MIN_POSITIVE),
                s.p50_us / u.p50_us.max(f64::MIN_POSITIVE)
            ),
            _ => format!("{:>8}  {:>8}", "-", "-"),
        };
        out.push_str(&format!(
            "{:>4}  {}  {}  {ratios}\n",
            row.tasks,
            side(&row.unsynced),
            side(&row.synced)
        ));
    }
    for line in checks(outcome) {
        out.push_str(&format!("- {line}\n"));
    }
    out
}
