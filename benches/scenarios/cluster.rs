//! The cluster scenario (issue 14): ferrisson's own uncontended and hot loops (`ferrisson.rs`),
//! run against a local Redis Cluster of 3 masters without replicas
//! (`support::cluster::RedisCluster`, on this machine's loopback, like the single server), and
//! against the run's single server, taking turns.
//!
//! Why no replicas: on the 2-core machine of docs/benchmarks.md every replica is one more
//! process replaying every write, on the cores that the client and the masters use; what this
//! scenario compares is the client's path (batches per node in a cluster, batches on a
//! single server), not replication.
//!
//! Turns: for each size, `rounds` rounds of one turn on each server (the single server first in
//! odd rounds, the cluster first in even ones), each turn the loop's own warm-up then
//! `duration / rounds`, so both sides see the same drift of the machine (see
//! `compare_uncontended` in main.rs). Rate is the mean over the turns, p50 and p99 the medians
//! of the turns' own.
//!
//! Round trips: `INFO commandstats` of every server (all masters of the cluster), reset before
//! each turn and read after it (warm-up included on both sides of the ratio):
//! * acquisitions = `hincrby` (`lua/acquire.lua`'s acquiring branch; no loop here re-enters or
//!   releases partially) + `hset` (`lua/release.lua`'s hand-off to a local waiter);
//! * script runs = `evalsha` + `eval`: one per round trip of lock calls, a batch being one;
//! * lock calls = `exists` (every acquire attempt runs it first) + `hget` (every release);
//! * unlock messages = `publish` + `spublish`;
//! * and the servers' CPU (`INFO cpu`, user + system) over the turn.

use std::time::Duration;

use fred::clients::Client as RawClient;
use serde::Serialize;

use crate::measure;
use crate::support::cluster::RedisCluster;
use crate::support::redis_state::{command_stats, reset_stats};
use crate::Plan;

type Res<T> = Result<T, String>;

/// What the cluster is made of.
pub const MASTERS: usize = 3;
pub const REPLICAS_PER_MASTER: usize = 0;

/// Which of ferrisson's loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `ferrisson::uncontended`: lock+unlock pairs, each task on its own lock.
    Uncontended,
    /// `ferrisson::hot`: T tasks on one lock.
    Hot,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Uncontended => "uncontended",
            Kind::Hot => "hot",
        }
    }

    /// What the rate counts.
    pub fn unit(self) -> &'static str {
        match self {
            Kind::Uncontended => "pairs/s",
            Kind::Hot => "acq/s",
        }
    }
}

/// One side (single server or cluster) of one size, over its turns.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Side {
    /// Lock+unlock pairs/s (uncontended) or acquisitions/s (hot): the mean over the turns.
    pub per_s: f64,
    /// Acquire latency: the medians of the turns' p50 and p99.
    pub p50_us: f64,
    pub p99_us: f64,
    /// Acquisitions counted by the servers over the turns (warm-ups included).
    pub acquisitions: u64,
    /// Script runs (round trips of lock calls) per acquisition.
    pub scripts_per_acquisition: f64,
    /// Lock calls (acquire attempts + releases) per acquisition.
    pub calls_per_acquisition: f64,
    /// Unlock messages sent (`publish` + `spublish`) per acquisition.
    pub publishes_per_acquisition: f64,
    /// Server CPU (`INFO cpu`, user + system, all servers) per acquisition, in µs.
    pub server_cpu_us_per_acquisition: f64,
}

/// One size: the same loop on both sides.
#[derive(Serialize)]
pub struct Row {
    pub kind: Kind,
    pub tasks: usize,
    pub single: Res<Side>,
    pub cluster: Res<Side>,
}

/// The scenario's outcome: the cluster's description (or why it did not start) and the rows.
#[derive(Serialize)]
pub struct Outcome {
    pub nodes: Res<String>,
    pub rounds: u32,
    #[serde(serialize_with = "crate::millis")]
    pub turn: Duration,
    pub rows: Vec<Row>,
}

/// One server set: a URL for ferrisson and raw clients of every server for the statistics.
struct Target<'a> {
    url: &'a str,
    servers: &'a [RawClient],
}

/// What the servers counted over one turn.
#[derive(Clone, Copy, Default)]
struct Counts {
    acquisitions: u64,
    scripts: u64,
    calls: u64,
    publishes: u64,
    server_cpu: Duration,
}

impl Counts {
    /// Resets the command statistics; the CPU used so far, to subtract at [`Counts::read`].
    async fn reset(servers: &[RawClient]) -> Duration {
        let mut cpu = Duration::ZERO;
        for server in servers {
            reset_stats(server).await;
            cpu += measure::server_cpu_time(server).await.unwrap_or_default();
        }
        cpu
    }

    async fn read(servers: &[RawClient], cpu_before: Duration) -> Counts {
        let mut counts = Counts::default();
        for server in servers {
            let stats = command_stats(server).await;
            let calls = |name: &str| stats.get(name).copied().unwrap_or(0);
            counts.acquisitions += calls("hincrby") + calls("hset");
            counts.scripts += calls("evalsha") + calls("eval");
            counts.calls += calls("exists") + calls("hget");
            counts.publishes += calls("publish") + calls("spublish");
            counts.server_cpu += measure::server_cpu_time(server).await.unwrap_or_default();
        }
        counts.server_cpu = counts.server_cpu.saturating_sub(cpu_before);
        counts
    }

    fn plus(self, other: Counts) -> Counts {
        Counts {
            acquisitions: self.acquisitions + other.acquisitions,
            scripts: self.scripts + other.scripts,
            calls: self.calls + other.calls,
            publishes: self.publishes + other.publishes,
            server_cpu: self.server_cpu + other.server_cpu,
        }
    }
}

/// What one turn measured.
struct Turn {
    per_s: f64,
    p50_us: f64,
    p99_us: f64,
    counts: Counts,
}

/// One turn of `kind` at T = `tasks` on `target`.
async fn turn(
    kind: Kind,
    tasks: usize,
    target: &Target<'_>,
    warmup: Duration,
    duration: Duration,
) -> Res<Turn> {
    let cpu_before = Counts::reset(target.servers).await;
    let (per_s, p50_us, p99_us) = match kind {
        Kind::Uncontended => crate::ferrisson::uncontended(target.url, tasks, warmup, duration)
            .await
            .map(|t| (t.pairs_per_s, t.p50_us, t.p99_us))?,
        Kind::Hot => crate::ferrisson::hot(target.url, tasks, warmup, duration)
            .await
            .map(|(h, _)| (h.acq_per_s, h.p50_us, h.p99_us))?,
    };
    Ok(Turn {
        per_s,
        p50_us,
        p99_us,
        counts: Counts::read(target.servers, cpu_before).await,
    })
}

/// A side's turns as one [`Side`]; any failed turn fails it.
fn combined(turns: Vec<Res<Turn>>) -> Res<Side> {
    let turns = turns.into_iter().collect::<Res<Vec<_>>>()?;
    let pick = |field: fn(&Turn) -> f64| turns.iter().map(field);
    let counts = turns
        .iter()
        .fold(Counts::default(), |sum, turn| sum.plus(turn.counts));
    let per = |n: u64| n as f64 / counts.acquisitions.max(1) as f64;
    Ok(Side {
        per_s: pick(|t| t.per_s).sum::<f64>() / turns.len().max(1) as f64,
        p50_us: measure::median(pick(|t| t.p50_us).collect()),
        p99_us: measure::median(pick(|t| t.p99_us).collect()),
        acquisitions: counts.acquisitions,
        scripts_per_acquisition: per(counts.scripts),
        calls_per_acquisition: per(counts.calls),
        publishes_per_acquisition: per(counts.publishes),
        server_cpu_us_per_acquisition: counts.server_cpu.as_secs_f64() * 1e6
            / counts.acquisitions.max(1) as f64,
    })
}

/// Starts the cluster on a task of its own (the fixture panics when a node does not come up:
/// there that is an error), on the caller's runtime, which its raw clients need.
pub fn start() -> tokio::task::JoinHandle<RedisCluster> {
    tokio::spawn(RedisCluster::start(MASTERS, REPLICAS_PER_MASTER))
}

/// Waits for the cluster `starting`: `Err` says why it did not start.
pub async fn started(starting: tokio::task::JoinHandle<RedisCluster>) -> Res<RedisCluster> {
    starting
        .await
        .map_err(|e| format!("the cluster did not start: {e}"))
}

/// The whole scenario: every size of the plan's `cluster` in its `compare_rounds` rounds of
/// turns on `single` (its URL and a raw client) and on the `started` cluster. `progress`
/// reports each turn.
pub async fn run(
    started: &Res<RedisCluster>,
    single: (&str, &RawClient),
    plan: &Plan,
    progress: impl Fn(String),
) -> Outcome {
    let rounds = plan.compare_rounds.max(1);
    let turn_length = plan.duration / rounds;
    let mut outcome = Outcome {
        nodes: started
            .as_ref()
            .map(|c| {
                format!(
                    "{} masters, {} replicas each, at {}",
                    c.masters.len(),
                    REPLICAS_PER_MASTER,
                    c.url()
                )
            })
            .map_err(Clone::clone),
        rounds,
        turn: turn_length,
        rows: Vec::new(),
    };
    let Ok(cluster) = started else {
        return outcome;
    };
    let cluster_url = cluster.url();
    let progress = &progress;
    let single_servers = [single.1.clone()];
    let targets = [
        (
            "single",
            Target {
                url: single.0,
                servers: &single_servers,
            },
        ),
        (
            "cluster",
            Target {
                url: &cluster_url,
                servers: &cluster.master_clients,
            },
        ),
    ];
    for &(kind, tasks) in &plan.cluster {
        let [single, clustered] = measure::in_turns(rounds, |side, round| {
            let (name, target) = &targets[side];
            async move {
                let result = crate::bounded(
                    plan.scenario_timeout(),
                    turn(kind, tasks, target, plan.warmup, turn_length),
                )
                .await;
                progress(format!(
                    "cluster: {} T={tasks}, round {round}/{rounds}, {name}: {}",
                    kind.name(),
                    crate::show(&result, |t| format!(
                        "{} {}, acquire p50 {} p99 {}, {:.2} script runs per acquisition",
                        crate::report::rate(t.per_s),
                        kind.unit(),
                        crate::report::us(t.p50_us),
                        crate::report::us(t.p99_us),
                        t.counts.scripts as f64 / t.counts.acquisitions.max(1) as f64
                    ))
                ));
                result
            }
        })
        .await;
        outcome.rows.push(Row {
            kind,
            tasks,
            single: combined(single),
            cluster: combined(clustered),
        });
    }
    outcome
}
