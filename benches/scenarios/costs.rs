//! The costs scenario (issue 26): what one uncontended cycle of each primitive costs the server,
//! counted, not timed.
//!
//! For every primitive of the family, one task and one owner run `CYCLES` acquire → release
//! cycles on one name, alone (nothing contends, so nothing batches or waits: the counts are the
//! same on every run of the same code). The latch's cycle is `try_set_count(1)`, `count_down`,
//! `wait`. `INFO commandstats` of every server is reset after a warm-up cycle (which loads the
//! scripts) and read after the cycles; per cycle:
//! * script runs = `evalsha` + `eval`: the round trips of lock calls;
//! * messages = `publish` + `spublish`;
//! * commands = every command the servers ran, a script's own commands included (Redis counts
//!   them), the statistics' own `CONFIG` and `INFO` and fred's `CLUSTER` refreshes left out.
//!
//! It runs on the run's single server and, where the cluster scenario's cluster started, on the
//! cluster too. With the parked-waiter and held-lock bytes of the `waiters` and `held`
//! scenarios, these figures are what the smoke run's gate (`gate.rs`) holds against its
//! committed baseline.

use std::future::Future;
use std::pin::Pin;

use ferrisson::{Client, MultiLock};
use fred::clients::Client as RawClient;
use serde::{Deserialize, Serialize};

use crate::support::redis_state::{command_stats, reset_stats};

/// Cycles counted per primitive (after one warm-up cycle).
const CYCLES: u64 = 20;

/// One primitive's counts per cycle.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub scripts: f64,
    pub messages: f64,
    pub commands: f64,
}

/// One primitive's row.
#[derive(Serialize)]
pub struct Row {
    pub primitive: &'static str,
    /// Whether the gate holds it against the baseline: not MultiLock's parts on one server,
    /// whose concurrent calls share script runs as their timing allows. (In a cluster the
    /// parts swept at once may share a node's run too, which only lowers the count: the gate
    /// fails on a count above its baseline.)
    pub gated: bool,
    /// `Err`: why the row has no figures.
    pub cost: Result<Cost, String>,
}

/// Every primitive's row on one server set, in the family's order.
pub type Costs = Vec<Row>;

type Cycle = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send>;

/// Builds each primitive's cycle on `client`, every name under `prefix`.
async fn cycles(client: &Client, prefix: &str) -> Vec<(&'static str, Result<Cycle, String>)> {
    let name = |kind: &str| format!("{prefix}:{kind}");
    let e = |what: &'static str| move |e: ferrisson::Error| format!("{what}: {e}");
    let mut out: Vec<(&'static str, Result<Cycle, String>)> = Vec::new();

    macro_rules! lock_cycle {
        ($kind:literal, $handle:expr) => {{
            let handle = $handle;
            let cycle: Cycle = Box::new(move || {
                let handle = handle.clone();
                Box::pin(async move {
                    let guard = handle.lock().await.map_err(e("lock"))?;
                    guard.unlock().await.map_err(e("unlock"))
                })
            });
            out.push(($kind, Ok(cycle)));
        }};
    }
    lock_cycle!("reentrant", client.lock(name("reentrant")));
    lock_cycle!("spin", client.spin_lock(name("spin")));
    lock_cycle!(
        "non-reentrant",
        client.non_reentrant_lock(name("non-reentrant"))
    );
    lock_cycle!("fair", client.fair_lock(name("fair")));
    lock_cycle!("fenced", client.fenced_lock(name("fenced")));
    lock_cycle!("token", client.token_lock(name("token")));
    lock_cycle!(
        "rw: writer",
        client.read_write_lock(name("rw")).write_lock()
    );
    lock_cycle!("rw: reader", client.read_write_lock(name("rw")).read_lock());
    // Parts on one client (names in other slots on a cluster): the cost of holding three.
    let parts: Vec<_> = (0..3)
        .map(|i| client.lock(name(&format!("multi{i}"))))
        .collect();
    match MultiLock::new(parts) {
        Ok(multi) => lock_cycle!("MultiLock ×3", multi),
        Err(err) => out.push(("MultiLock ×3", Err(format!("MultiLock::new: {err}")))),
    }

    // A semaphore deleted and given exactly one permit, then acquired and released.
    macro_rules! permit_cycle {
        ($kind:literal, $semaphore:expr, $acquire:expr) => {{
            let semaphore = $semaphore;
            let ready = match semaphore.delete().await {
                Ok(_) => semaphore
                    .try_set_permits(1)
                    .await
                    .map_err(e("try_set_permits")),
                Err(err) => Err(format!("delete: {err}")),
            };
            let cycle = move || -> Cycle {
                Box::new(move || {
                    let semaphore = semaphore.clone();
                    Box::pin(async move {
                        let taken = $acquire(semaphore).await.map_err(e("acquire"))?;
                        taken.release().await.map_err(e("release"))
                    })
                })
            };
            out.push(($kind, ready.map(|_| cycle())));
        }};
    }
    permit_cycle!(
        "semaphore 1",
        client.semaphore(name("semaphore")),
        |s: ferrisson::Semaphore| async move { s.acquire(1).await }
    );
    permit_cycle!(
        "permit-expirable 1",
        client.permit_expirable_semaphore(name("permit-expirable")),
        |s: ferrisson::PermitExpirableSemaphore| async move { s.acquire(None).await }
    );

    let latch = client.count_down_latch(name("latch"));
    let cycle: Cycle = Box::new(move || {
        let latch = latch.clone();
        Box::pin(async move {
            if !latch.try_set_count(1).await.map_err(e("try_set_count"))? {
                return Err("try_set_count(1) refused: the latch was still set".into());
            }
            latch.count_down().await.map_err(e("count_down"))?;
            latch.wait().await.map_err(e("wait"))
        })
    });
    out.push(("latch", Ok(cycle)));
    out
}

/// Counts every primitive's cycle against the servers behind `url`; `servers` are raw clients
/// of each of them (every master of a cluster), whose statistics are reset and read.
pub async fn run(url: &str, servers: &[RawClient]) -> Result<Costs, String> {
    let client = Client::connect(url)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    Ok(run_on(client, servers).await)
}

/// [`run`] on `client` (configured as the caller needs), which it shuts down after.
pub async fn run_on(client: Client, servers: &[RawClient]) -> Costs {
    let cluster = servers.len() > 1;
    let prefix = format!("ferrisson-bench:costs:{}", uuid::Uuid::new_v4().simple());
    let mut costs = Costs::new();
    for (primitive, cycle) in cycles(&client, &prefix).await {
        let cost = match cycle {
            Ok(cycle) => count(&cycle, servers).await,
            Err(e) => Err(e),
        };
        let gated = cluster || !primitive.starts_with("MultiLock");
        costs.push(Row {
            primitive,
            gated,
            cost,
        });
    }
    client.shutdown().await;
    costs
}

async fn count(cycle: &Cycle, servers: &[RawClient]) -> Result<Cost, String> {
    // The warm-up loads the scripts (a first EVALSHA may meet NOSCRIPT and fall back to EVAL).
    cycle().await?;
    for server in servers {
        reset_stats(server).await;
    }
    for _ in 0..CYCLES {
        cycle().await?;
    }
    let (mut scripts, mut messages, mut commands) = (0, 0, 0);
    for server in servers {
        for (command, calls) in command_stats(server).await {
            match command.split('|').next().unwrap_or_default() {
                "config" | "info" | "cluster" => {}
                "evalsha" | "eval" => {
                    scripts += calls;
                    commands += calls;
                }
                "publish" | "spublish" => {
                    messages += calls;
                    commands += calls;
                }
                _ => commands += calls,
            }
        }
    }
    let per_cycle = |n: u64| n as f64 / CYCLES as f64;
    Ok(Cost {
        scripts: per_cycle(scripts),
        messages: per_cycle(messages),
        commands: per_cycle(commands),
    })
}

/// The scenario's outcome: the costs on the run's server and on the cluster, and the heap per
/// held lock ([`held_lock_bytes`] of [`HELD_LOCKS`] locks).
#[derive(Serialize)]
pub struct Run {
    pub single: Result<Costs, String>,
    pub cluster: Result<Costs, String>,
    pub held_lock_bytes: Result<f64, String>,
}

/// The locks of [`held_lock_bytes`]: enough that the client's fixed costs hardly show.
pub const HELD_LOCKS: usize = 1_000;

impl Run {
    fn sets(&self) -> [(&'static str, &Result<Costs, String>); 2] {
        [("single", &self.single), ("cluster", &self.cluster)]
    }

    /// A set or a row that could not be counted. The cluster may be missing (it did not start
    /// here): that is the cluster scenario's failure, not this one's.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for (set, costs) in self.sets() {
            match costs {
                Ok(costs) => failures.extend(costs.iter().filter_map(|row| {
                    let e = row.cost.as_ref().err()?;
                    Some(format!("costs {set} {}: {e}", row.primitive))
                })),
                Err(e) if set == "single" => failures.push(format!("costs {set}: {e}")),
                Err(_) => {}
            }
        }
        if let Err(e) = &self.held_lock_bytes {
            failures.push(format!("costs: heap per held lock: {e}"));
        }
        failures
    }
}

/// One progress line: script runs per cycle on each set.
pub fn summary(run: &Run) -> String {
    let held = match &run.held_lock_bytes {
        Ok(bytes) => format!("heap per held lock {bytes:.0} B"),
        Err(e) => format!("heap per held lock failed: {e}"),
    };
    let sets = run
        .sets()
        .iter()
        .map(|(set, costs)| match costs {
            Ok(costs) => {
                let rows: Vec<String> = costs
                    .iter()
                    .map(|row| match &row.cost {
                        Ok(cost) => format!("{} {:.2}", row.primitive, cost.scripts),
                        Err(e) => format!("{} failed: {e}", row.primitive),
                    })
                    .collect();
                format!("{set}: script runs per cycle: {}", rows.join(", "))
            }
            Err(e) => format!("{set}: {e}"),
        })
        .collect::<Vec<_>>()
        .join("; ");
    format!("{sets}; {held}")
}

/// The table: a row per primitive, both sets side by side.
pub fn render(run: &Run) -> String {
    let mut out = format!(
        "costs (one uncontended acquire → release cycle, counted by the servers over {CYCLES} cycles)\n\
         {:<20} {:>14} {:>14} {:>14}   {:>14} {:>14} {:>14}\n",
        "primitive",
        "script runs",
        "messages",
        "commands",
        "cluster: runs",
        "messages",
        "commands"
    );
    let cell = |costs: &Result<Costs, String>, kind: &str| match costs {
        Ok(costs) => match costs
            .iter()
            .find(|row| row.primitive == kind)
            .map(|r| &r.cost)
        {
            Some(Ok(c)) => format!(
                "{:>14.2} {:>14.2} {:>14.2}",
                c.scripts, c.messages, c.commands
            ),
            Some(Err(_)) => format!("{:>44}", "failed"),
            None => format!("{:>44}", "-"),
        },
        Err(_) => format!("{:>44}", "n/a"),
    };
    let kinds: Vec<&str> = match (&run.single, &run.cluster) {
        (Ok(costs), _) | (Err(_), Ok(costs)) => costs.iter().map(|row| row.primitive).collect(),
        (Err(_), Err(_)) => Vec::new(),
    };
    for kind in kinds {
        out.push_str(&format!(
            "{kind:<20} {}   {}\n",
            cell(&run.single, kind),
            cell(&run.cluster, kind)
        ));
    }
    match &run.held_lock_bytes {
        Ok(bytes) => out.push_str(&format!(
            "heap per held lock ({HELD_LOCKS} locks, guards kept in a Vec, nothing in flight): {bytes:.0} B\n"
        )),
        Err(e) => out.push_str(&format!("heap per held lock: failed: {e}\n")),
    }
    out
}

/// Live heap per held lock: `locks` locks taken by one client with the default watchdog (whose
/// first renewal, a third of 30 s away, stays out of the window), their guards kept in a `Vec`
/// as a service would keep them; read once the client's background work on them (the
/// watchdog's tracking, drained once per grid tick: a thirtieth of the timeout, 1 s) has
/// settled. Unlike the `held` scenario's figure, which is read between renewal rounds, nothing
/// is in flight here: the count is the same on every run.
pub async fn held_lock_bytes(url: &str, locks: usize) -> Result<f64, String> {
    let client = Client::connect(url)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let prefix = format!(
        "ferrisson-bench:held-bytes:{}",
        uuid::Uuid::new_v4().simple()
    );
    let result = async {
        // Loads the scripts and starts the watchdog before the window.
        let warm = client.lock(format!("{prefix}:warm-up"));
        warm.lock()
            .await
            .map_err(|e| format!("lock: {e}"))?
            .unlock()
            .await
            .map_err(|e| format!("unlock: {e}"))?;
        let before = settled_heap().await;
        let mut guards = Vec::with_capacity(locks);
        for first in (0..locks).step_by(100) {
            let taken = futures::future::join_all((first..locks.min(first + 100)).map(|i| {
                let lock = client.lock(format!("{prefix}:{i}"));
                async move { lock.lock().await }
            }))
            .await;
            for guard in taken {
                guards.push(guard.map_err(|e| format!("lock: {e}"))?);
            }
        }
        // Past the watchdog's next grid tick, so that its track requests are drained into its
        // buckets: what holding costs from then on, not the requests in between.
        tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
        let after = settled_heap().await;
        for guard in guards {
            guard.unlock().await.map_err(|e| format!("unlock: {e}"))?;
        }
        Ok(after.saturating_sub(before) as f64 / locks as f64)
    }
    .await;
    client.shutdown().await;
    result
}

/// The live heap once it has stopped changing (three equal reads 20 ms apart; at most 2 s).
async fn settled_heap() -> u64 {
    let mut last = crate::measure::heap_bytes();
    let mut same = 0;
    for _ in 0..100 {
        if same == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let now = crate::measure::heap_bytes();
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    last
}
