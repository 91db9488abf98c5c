//! The report: Markdown tables with every target checked as a ratio against the baselines of
//! the same run, `run.json` with the whole run (every size), `summary.json` for comparing
//! commits, and SVG charts.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use crate::ferrisson::HotExtra;
use crate::measure::{Held, Hot, Throughput, Waiters};
use crate::processes::Fleet;
use crate::Plan;

type Res<T> = Result<T, String>;

/// Where the run happened.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory: String,
    pub kernel: String,
    pub redis_version: String,
    pub redis_url: String,
    pub commit: String,
    pub debug_build: bool,
}

impl Machine {
    pub async fn detect(raw: &fred::clients::Client, url: &str) -> Machine {
        use fred::interfaces::ClientLike;
        let info: String = raw
            .info(Some(fred::types::InfoKind::Server))
            .await
            .unwrap_or_default();
        let field = |text: &str, key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        };
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory = field(&meminfo, "MemTotal")
            .and_then(|kb| kb.trim_end_matches(" kB").trim().parse::<f64>().ok())
            .map_or("unknown".into(), |kb| {
                format!("{:.1} GiB", kb / 1024.0 / 1024.0)
            });
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        };
        let commit = match git(&["rev-parse", "--short", "HEAD"]) {
            Some(hash) => {
                let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                    .is_some_and(|s| !s.is_empty());
                if dirty {
                    format!("{hash}+changes")
                } else {
                    hash
                }
            }
            None => "unknown".into(),
        };
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
            memory,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or("unknown".into(), |s| s.trim().to_owned()),
            redis_version: field(&info, "redis_version").unwrap_or_else(|| "unknown".into()),
            redis_url: ferrisson::Config::new(url).redacted_url(),
            commit,
            debug_build: cfg!(debug_assertions),
        }
    }
}

/// The physical limit of this machine and server.
#[derive(serde::Serialize)]
pub struct Limit {
    pub ping_p50_us: Res<f64>,
    /// The same samples' p99: how far this machine's own round trips spread.
    pub ping_p99_us: Res<f64>,
    /// Two tasks taking turns, one PING each (`limit::ping_relay`): p50, p99 and max in µs.
    pub relay_us: Res<(f64, f64, f64)>,
    /// Sequential PINGs on one connection by `redis-benchmark`, a C client
    /// (`limit::redis_benchmark_ping`), for a hot window's length: p50, p99 and max in µs.
    pub bare_ping_us: Res<(f64, f64, f64)>,
    /// Two threads taking turns through a socket pair (`limit::thread_relay`), for a hot
    /// window's length: p50, p99 and max in µs.
    pub thread_relay_us: Res<(f64, f64, f64)>,
    pub pipeline: usize,
    pub rows: Vec<LimitRow>,
}

/// `redis-benchmark` running the acquire script with `clients` connections.
#[derive(serde::Serialize)]
pub struct LimitRow {
    pub clients: usize,
    pub plain_per_s: Res<f64>,
    pub pipelined_per_s: Res<f64>,
}

/// One T of the uncontended scenario; peers are `None` where they did not run.
#[derive(serde::Serialize)]
pub struct UncontendedRow {
    pub tasks: usize,
    pub ferrisson: Res<Throughput>,
    pub rslock: Option<Res<Throughput>>,
    pub spin: Option<Res<Throughput>>,
    pub node: Option<Res<Throughput>>,
    /// The limit (pipelined `redis-benchmark` acquire-script rate / 2) measured in turns with the
    /// locks at this T (`compare_uncontended`); `None` where it was not.
    pub limit_in_turns: Option<Res<f64>>,
    /// Client and server CPU µs per lock+unlock pair, by lock (approximate: connection set-up
    /// included).
    pub cpu_us_per_pair: std::collections::BTreeMap<&'static str, crate::measure::CpuPer>,
}

/// One T of the hot scenario.
#[derive(serde::Serialize)]
pub struct HotRow {
    pub tasks: usize,
    pub ferrisson: Res<(Hot, HotExtra)>,
    pub spin: Option<Res<Hot>>,
    pub rslock: Option<Res<Hot>>,
}

/// One spread (P processes × T tasks on one lock) of the processes scenario.
#[derive(serde::Serialize)]
pub struct ProcessesRow {
    pub procs: usize,
    pub tasks: usize,
    pub ferrisson: Res<Fleet>,
    pub spin: Res<Fleet>,
}

/// Everything one run measured; `None`: the scenario was not selected.
#[derive(serde::Serialize)]
pub struct Run {
    pub plan: Plan,
    pub machine: Machine,
    /// Every scenario was selected (no `--only`): only then is `summary.json` written.
    pub complete: bool,
    pub limit: Option<Limit>,
    pub uncontended: Option<Vec<UncontendedRow>>,
    pub hot: Option<Vec<HotRow>>,
    pub waiters: Option<Vec<Res<Waiters>>>,
    pub held: Option<Vec<Res<Held>>>,
    pub processes: Option<Vec<ProcessesRow>>,
    pub cluster: Option<crate::cluster::Outcome>,
}

impl Run {
    pub fn new(plan: Plan, machine: Machine) -> Run {
        Run {
            plan,
            machine,
            complete: false,
            limit: None,
            uncontended: None,
            hot: None,
            waiters: None,
            held: None,
            processes: None,
            cluster: None,
        }
    }

    /// Errors of ferrisson's own scenarios (peers and limit may be n/a).
    pub fn ferrisson_failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for row in self.uncontended.iter().flatten() {
            if let Err(e) = &row.ferrisson {
                failures.push(format!("uncontended T={}: {e}", row.tasks));
            }
        }
        for row in self.hot.iter().flatten() {
            if let Err(e) = &row.ferrisson {
                failures.push(format!("hot T={}: {e}", row.tasks));
            }
        }
        for row in self.waiters.iter().flatten() {
            if let Err(e) = row {
                failures.push(format!("waiters {e}"));
            }
        }
        for row in self.held.iter().flatten() {
            if let Err(e) = row {
                failures.push(format!("held {e}"));
            }
        }
        // A cluster that did not start is the fixture's failure, not ferrisson's: n/a.
        for row in self.cluster.iter().flat_map(|c| &c.rows) {
            for (side, result) in [("single", &row.single), ("cluster", &row.cluster)] {
                if let Err(e) = result {
                    let kind = row.kind.name();
                    failures.push(format!("cluster: {kind} T={} on {side}: {e}", row.tasks));
                }
            }
        }
        for row in self.processes.iter().flatten() {
            if let Err(e) = &row.ferrisson {
                failures.push(format!("processes P={} × T={}: {e}", row.procs, row.tasks));
            }
        }
        failures
    }

    /// The limit on pairs/s at T = `tasks`: measured in turns with the locks where it was, else
    /// from the limit scenario (pipelined rate / 2).
    fn limit_pairs(&self, tasks: usize) -> Res<f64> {
        let in_turns = self
            .uncontended
            .iter()
            .flatten()
            .find(|r| r.tasks == tasks)
            .and_then(|r| r.limit_in_turns.clone());
        match (in_turns, self.limit_row(tasks)) {
            (Some(limit), _) => limit,
            (None, Some(l)) => l.pipelined_per_s.clone().map(|r| r / 2.0),
            (None, None) => Err("limit not run".into()),
        }
    }

    fn limit_row(&self, clients: usize) -> Option<&LimitRow> {
        self.limit
            .as_ref()
            .and_then(|l| l.rows.iter().find(|r| r.clients == clients))
    }

    /// How far this run's bare round trips spread (`Spread::P99`) or stalled (`Spread::Max`),
    /// against their own p50: for a missed acquire-p99 or worst-wait target, the part of a
    /// wait no lock client can avoid.
    fn round_trip_spread(&self, spread: Spread) -> Option<String> {
        let limit = self.limit.as_ref()?;
        let name = match spread {
            Spread::P99 => "p99",
            Spread::Max => "max",
        };
        // "<tail> = <tail / p50> × its p50", from (p50, p99, max).
        let tail = |&(p50, p99, max): &(f64, f64, f64)| {
            let tail = match spread {
                Spread::P99 => p99,
                Spread::Max => max,
            };
            format!("{} = {:.2} × its p50", us(tail), tail / p50.max(1.0))
        };
        let floors: Vec<String> = [
            ("redis-benchmark PING", &limit.bare_ping_us),
            ("PING relay", &limit.relay_us),
            ("socket-pair thread relay", &limit.thread_relay_us),
        ]
        .into_iter()
        .filter_map(|(what, sample)| Some(format!("{what} {name} {}", tail(sample.as_ref().ok()?))))
        .collect();
        (!floors.is_empty()).then(|| format!("bare round trips in this run: {}", floors.join(", ")))
    }

    /// Adds the round trips' own spread to a missed latency check.
    fn explain_miss(&self, check: &mut Check, spread: Spread) {
        if check.met == Some(false) {
            if let Some(floor) = self.round_trip_spread(spread) {
                check.text = format!("{}; {floor}", check.text);
            }
        }
    }

    fn ping(&self) -> Res<f64> {
        match &self.limit {
            Some(limit) => limit.ping_p50_us.clone(),
            None => Err("limit not run".into()),
        }
    }
}

// ---------------------------------------------------------------- formatting

/// `31.2k`, `1.05M`, `812`.
pub fn rate(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e4 {
        format!("{:.1}k", value / 1e3)
    } else if value >= 1e3 {
        format!("{:.2}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

/// Microseconds as `45 µs`, `1.23 ms`, `2.1 s`.
pub fn us(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2} s", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.2} ms", value / 1e3)
    } else {
        format!("{value:.0} µs")
    }
}

fn bytes(value: f64) -> String {
    if value >= 1024.0 {
        format!("{:.2} KiB", value / 1024.0)
    } else {
        format!("{value:.0} B")
    }
}

pub fn throughput(t: &Throughput) -> String {
    format!(
        "{} pairs/s, acquire p50 {} p99 {}",
        rate(t.pairs_per_s),
        us(t.p50_us),
        us(t.p99_us)
    )
}

pub fn hot(h: &Hot) -> String {
    format!(
        "{} acq/s, acquire p50 {} p99 {} max {}, hand-off p50 {} p99 {}, per task {}..{}",
        rate(h.acq_per_s),
        us(h.p50_us),
        us(h.p99_us),
        us(h.max_us),
        us(h.handoff_p50_us),
        us(h.handoff_p99_us),
        h.min_per_task,
        h.max_per_task
    )
}

pub fn fleet(s: &Fleet) -> String {
    format!(
        "{} acq/s, per process {:?} (min/max {:.2}), per task {}..{}, acquire p50 {} (median of processes) p99 {} (worst process) max {}; {}",
        rate(s.acq_per_s),
        s.per_process,
        s.fairness(),
        s.per_task_min,
        s.per_task_max,
        us(s.p50_us),
        us(s.p99_us),
        us(s.max_us),
        turns(&s.turns)
    )
}

fn turns(t: &crate::processes::Turns) -> String {
    format!(
        "{} turns, {:.1} acquisitions per turn, next acquisition p50/p99 {}/{} within a turn and {}/{} at a switch; switches took {:.0} % of the time",
        t.turns,
        t.per_turn,
        us(t.within_us[0] as f64),
        us(t.within_us[1] as f64),
        us(t.switch_us[0] as f64),
        us(t.switch_us[1] as f64),
        t.switch_share * 100.0
    )
}

fn short_err(e: &str) -> String {
    let first = e.lines().next().unwrap_or(e);
    if first.chars().count() > 60 {
        format!("{}…", first.chars().take(60).collect::<String>())
    } else {
        first.to_owned()
    }
}

// ---------------------------------------------------------------- targets

/// One target checked against this run.
/// Which part of a latency distribution [`Run::round_trip_spread`] compares with its p50.
#[derive(Clone, Copy)]
enum Spread {
    P99,
    Max,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Check {
    pub scenario: &'static str,
    pub text: String,
    /// `None`: a baseline was missing, so it could not be checked.
    pub met: Option<bool>,
}

impl Check {
    fn mark(&self) -> &'static str {
        match self.met {
            Some(true) => "✓",
            Some(false) => "✗",
            None => "?",
        }
    }
}

/// "`subject` = `ratio` × `base` (target ≥ `bound`) ✓", or n/a when the baseline is missing.
fn ratio_check(
    scenario: &'static str,
    subject: String,
    value: f64,
    base_name: &str,
    base: Res<f64>,
    at_least: bool,
    bound: f64,
) -> Check {
    let op = if at_least { "≥" } else { "≤" };
    match base {
        Ok(base) if base > 0.0 => {
            let ratio = value / base;
            // A ratio of quotients (1033 calls / 1.033 rounds) can land a rounding error past an
            // exact bound: 1000.0000000000001 is 1000.
            const ROUNDING: f64 = 1e-9;
            let met = if at_least {
                ratio >= bound * (1.0 - ROUNDING)
            } else {
                ratio <= bound * (1.0 + ROUNDING)
            };
            Check {
                scenario,
                text: format!("{subject} = {ratio:.2} × {base_name} (target {op} {bound})"),
                met: Some(met),
            }
        }
        Ok(_) => Check {
            scenario,
            text: format!("{subject} vs {base_name}: n/a (baseline is 0) (target {op} {bound})"),
            met: None,
        },
        Err(e) => Check {
            scenario,
            text: format!(
                "{subject} vs {base_name}: n/a ({}) (target {op} {bound})",
                short_err(&e)
            ),
            met: None,
        },
    }
}

fn peer<T: Clone>(peer: &Option<Res<T>>) -> Res<T> {
    peer.clone().unwrap_or_else(|| Err("not run".into()))
}

pub fn checks(run: &Run) -> Vec<Check> {
    let mut checks = Vec::new();
    if let Some(rows) = &run.uncontended {
        let t = run.plan.uncontended_summary;
        if let Some(Ok(f)) = rows.iter().find(|r| r.tasks == t).map(|r| &r.ferrisson) {
            let row = rows.iter().find(|r| r.tasks == t).expect("row exists");
            let subject = format!("uncontended T={t}: {} pairs/s", rate(f.pairs_per_s));
            let limit = run.limit_pairs(t);
            checks.push(ratio_check(
                "uncontended",
                subject.clone(),
                f.pairs_per_s,
                "limit/2",
                limit,
                true,
                0.8,
            ));
            let pairs = |p: &Option<Res<Throughput>>| peer(p).map(|t| t.pairs_per_s);
            checks.push(ratio_check(
                "uncontended",
                subject.clone(),
                f.pairs_per_s,
                "rslock",
                pairs(&row.rslock),
                true,
                0.8,
            ));
            checks.push(ratio_check(
                "uncontended",
                subject,
                f.pairs_per_s,
                "node-redisson",
                pairs(&row.node),
                true,
                2.0,
            ));
        }
    }
    if let Some(rows) = &run.hot {
        for row in rows {
            let Ok((h, _)) = &row.ferrisson else { continue };
            let t = row.tasks;
            let others = (t - 1) as f64;
            if let Some(spin) = &row.spin {
                checks.push(ratio_check(
                    "hot",
                    format!("hot T={t}: {} acq/s", rate(h.acq_per_s)),
                    h.acq_per_s,
                    "spin",
                    spin.clone().map(|s| s.acq_per_s),
                    true,
                    0.8,
                ));
            }
            let fairness = if h.max_per_task == 0 {
                0.0
            } else {
                h.min_per_task as f64 / h.max_per_task as f64
            };
            checks.push(Check {
                scenario: "hot",
                text: format!(
                    "hot T={t}: fairness min/max = {}/{} = {fairness:.2} (target ≥ 0.5)",
                    h.min_per_task, h.max_per_task
                ),
                met: Some(fairness >= 0.5),
            });
            // At T = 2 an acquire waits for one release and one hand-off: about two bare round
            // trips, whose own tail is this machine's floor (a round trip's p99 alone is
            // 2.6–2.9 × its p50 here). Its tails are held against that floor, measured in the
            // same run: within twice the bare round trip's p99 and max.
            if t == 2 {
                let floor = match &run.limit {
                    Some(limit) => limit.bare_ping_us.clone(),
                    None => Err("limit not run".into()),
                };
                checks.push(ratio_check(
                    "hot",
                    format!("hot T=2: acquire p99 {}", us(h.p99_us)),
                    h.p99_us,
                    "redis-benchmark PING p99",
                    floor.clone().map(|(_, p99, _)| p99),
                    false,
                    2.0,
                ));
                checks.push(ratio_check(
                    "hot",
                    format!("hot T=2: worst wait {}", us(h.max_us)),
                    h.max_us,
                    "redis-benchmark PING max",
                    floor.map(|(_, _, max)| max),
                    false,
                    2.0,
                ));
            } else {
                let handoff = if h.handoff_p50_us > 0.0 {
                    Ok(others * h.handoff_p50_us)
                } else {
                    Err("no hand-offs measured".to_owned())
                };
                let mut p99 = ratio_check(
                    "hot",
                    format!("hot T={t}: acquire p99 {}", us(h.p99_us)),
                    h.p99_us,
                    "(T−1)·hand-off p50",
                    handoff.clone(),
                    false,
                    2.0,
                );
                run.explain_miss(&mut p99, Spread::P99);
                checks.push(p99);
                let mut worst = ratio_check(
                    "hot",
                    format!("hot T={t}: worst wait {}", us(h.max_us)),
                    h.max_us,
                    "(T−1)·hand-off p50",
                    handoff,
                    false,
                    10.0,
                );
                run.explain_miss(&mut worst, Spread::Max);
                checks.push(worst);
            }
            checks.push(ratio_check(
                "hot",
                format!("hot T={t}: hand-off p50 {}", us(h.handoff_p50_us)),
                h.handoff_p50_us,
                "PING p50",
                run.ping(),
                false,
                4.0,
            ));
        }
    }
    if let Some(rows) = &run.waiters {
        let ok: Vec<&Waiters> = rows.iter().filter_map(|r| r.as_ref().ok()).collect();
        if let (Some(first), Some(last)) = (ok.first(), ok.last()) {
            if ok.len() > 1 {
                checks.push(ratio_check(
                    "waiters",
                    format!(
                        "waiters W={}: {} hand-offs/s",
                        last.waiters,
                        rate(last.handoffs_per_s)
                    ),
                    last.handoffs_per_s,
                    &format!("W={}", first.waiters),
                    Ok(first.handoffs_per_s),
                    true,
                    0.8,
                ));
            }
            // Issue 26's target is the live heap's (RSS moves with the allocator's pages).
            let per = last.heap_bytes_per_waiter;
            checks.push(Check {
                scenario: "waiters",
                text: format!(
                    "waiters W={}: {} heap per parked waiter (RSS {}) (target ≤ 1 KiB)",
                    last.waiters,
                    bytes(per),
                    bytes(last.rss_bytes_per_waiter)
                ),
                met: Some(per <= 1024.0),
            });
        }
    }
    for row in run.processes.iter().flatten() {
        let Ok(f) = &row.ferrisson else { continue };
        let spread = format!("processes P={} × T={}", row.procs, row.tasks);
        checks.push(ratio_check(
            "processes",
            format!("{spread}: {} acq/s", rate(f.acq_per_s)),
            f.acq_per_s,
            "spin",
            row.spin.clone().map(|s| s.acq_per_s),
            true,
            0.8,
        ));
        let (min, max) = (
            f.per_process.iter().min().copied().unwrap_or(0),
            f.per_process.iter().max().copied().unwrap_or(0),
        );
        checks.push(Check {
            scenario: "processes",
            text: format!(
                "{spread}: fairness between processes min/max = {min}/{max} = {:.2} (target ≥ 0.5)",
                f.fairness()
            ),
            met: Some(f.fairness() >= 0.5),
        });
    }
    if let Some(rows) = &run.held {
        if let Some(Ok(h)) = rows.last() {
            let l = h.locks;
            checks.push(ratio_check(
                "held",
                format!(
                    "held L={l}: {:.1} renewal calls/period",
                    h.renewal_calls_per_period
                ),
                h.renewal_calls_per_period,
                "L/100",
                Ok(l as f64 / 100.0),
                false,
                1.0,
            ));
            checks.push(Check {
                scenario: "held",
                text: format!(
                    "held L={l}: client CPU {:.2} % of a core over {} ms periods (target ≤ 10 %)",
                    h.cpu_pct,
                    h.watchdog_timeout_ms / 3
                ),
                met: Some(h.cpu_pct <= 10.0),
            });
            // Issue 26's target is the live heap's, as for the parked waiter.
            let per = h.heap_bytes_per_lock;
            checks.push(Check {
                scenario: "held",
                text: format!(
                    "held L={l}: {} heap per held lock (RSS {}) (target ≤ 256 B)",
                    bytes(per),
                    bytes(h.rss_bytes_per_lock)
                ),
                met: Some(per <= 256.0),
            });
        }
    }
    checks
}

/// The memory figure of `summary.json` (issue 4's schema): the larger of live heap and RSS
/// growth (the heap count is exact but misses allocator overhead; RSS includes it but can read
/// low when freed memory of earlier scenarios is reused). The report's checks hold the live
/// heap alone against issue 26's targets.
fn bytes_per_waiter(w: &Waiters) -> f64 {
    w.heap_bytes_per_waiter.max(w.rss_bytes_per_waiter)
}

fn bytes_per_lock(h: &Held) -> f64 {
    h.heap_bytes_per_lock.max(h.rss_bytes_per_lock)
}

// ---------------------------------------------------------------- tables

fn cell<T>(result: &Option<Res<T>>, show: impl Fn(&T) -> String) -> String {
    match result {
        None => "–".into(),
        Some(Ok(value)) => show(value),
        Some(Err(e)) => format!("n/a ({})", short_err(e)),
    }
}

/// The report as Markdown (printed, and saved as `report.md`).
pub fn render(run: &Run) -> String {
    let mut out = String::new();
    let m = &run.machine;
    let _ = writeln!(
        out,
        "## ferrisson scenarios — {} run\n\n{}, {} CPUs, {} RAM, Linux {}, redis {} at {}, commit {}{}\n",
        run.plan.mode.name(),
        m.cpu_model,
        m.cpus,
        m.memory,
        m.kernel,
        m.redis_version,
        m.redis_url,
        m.commit,
        if m.debug_build { " (DEBUG build: numbers are meaningless)" } else { "" }
    );
    if let Some(limit) = &run.limit {
        let _ = writeln!(out, "### limit\n");
        let _ = writeln!(
            out,
            "PING p50 on one connection: {}, p99 {}\n",
            match &limit.ping_p50_us {
                Ok(v) => us(*v),
                Err(e) => format!("n/a ({})", short_err(e)),
            },
            match &limit.ping_p99_us {
                Ok(v) => us(*v),
                Err(_) => "n/a".into(),
            }
        );
        let round_trips = [
            (
                "PING relay, 2 tasks taking turns on one connection (a T = 2 hand-off with no \
                 lock)",
                &limit.relay_us,
            ),
            (
                "Thread relay, 2 threads taking turns through a socket pair for a hot window's \
                 length (no Redis: two thread wakes)",
                &limit.thread_relay_us,
            ),
            (
                "PING by redis-benchmark, one connection, for a hot window's length (a C \
                 client: no runtime, no task wakes)",
                &limit.bare_ping_us,
            ),
        ];
        for (what, sample) in round_trips {
            if let Ok((p50, p99, max)) = sample {
                let _ = writeln!(
                    out,
                    "{what}: p50 {}, p99 {} ({:.2} × p50), max {} ({:.2} × p50)\n",
                    us(*p50),
                    us(*p99),
                    p99 / p50.max(1.0),
                    us(*max),
                    max / p50.max(1.0)
                );
            }
        }
        let _ = writeln!(
            out,
            "| clients | acquire script/s | pipelined ×{} /s | pipelined / 2 (pairs/s) |\n|---:|---:|---:|---:|",
            limit.pipeline
        );
        for row in &limit.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                row.clients,
                cell(&Some(row.plain_per_s.clone()), |v| rate(*v)),
                cell(&Some(row.pipelined_per_s.clone()), |v| rate(*v)),
                cell(&Some(row.pipelined_per_s.clone()), |v| rate(v / 2.0)),
            );
        }
        out.push('\n');
    }
    if let Some(rows) = &run.uncontended {
        let _ = writeln!(out, "### uncontended\n");
        let _ = writeln!(
            out,
            "| T | lock | pairs/s | acquire p50 | acquire p99 | × limit/2 | client CPU/pair | server CPU/pair |\n|---:|---|---:|---:|---:|---:|---:|---:|"
        );
        for row in rows {
            let limit = run.limit_pairs(row.tasks).ok();
            let mut line = |name: &str, result: &Option<Res<Throughput>>| {
                let vs = match (result, limit) {
                    (Some(Ok(t)), Some(l)) if l > 0.0 => format!("{:.2}", t.pairs_per_s / l),
                    _ => "–".into(),
                };
                let cpu = row.cpu_us_per_pair.get(name);
                let client = cpu.map_or("–".into(), |cpu| format!("{:.1} µs", cpu.client_us));
                let server = cpu
                    .and_then(|cpu| cpu.server_us)
                    .map_or("–".into(), |us| format!("{us:.1} µs"));
                let _ = writeln!(
                    out,
                    "| {} | {name} | {} | {} | {} | {vs} | {client} | {server} |",
                    row.tasks,
                    cell(result, |t| rate(t.pairs_per_s)),
                    cell(result, |t| us(t.p50_us)),
                    cell(result, |t| us(t.p99_us)),
                );
            };
            line("ferrisson", &Some(row.ferrisson.clone()));
            if row.rslock.is_some() || row.spin.is_some() || row.node.is_some() {
                line("rslock", &row.rslock);
                line("spin", &row.spin);
                line("node-redisson", &row.node);
            }
        }
        out.push('\n');
    }
    if let Some(rows) = &run.hot {
        let _ = writeln!(out, "### hot\n");
        let _ = writeln!(
            out,
            "| T | lock | acq/s | acquire p50 | p99 | max | hand-off p50 | hand-off p99 | per task min..max |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        for row in rows {
            let mut line = |name: &str, result: &Option<Res<Hot>>| {
                let _ = writeln!(
                    out,
                    "| {} | {name} | {} | {} | {} | {} | {} | {} | {} |",
                    row.tasks,
                    cell(result, |h| rate(h.acq_per_s)),
                    cell(result, |h| us(h.p50_us)),
                    cell(result, |h| us(h.p99_us)),
                    cell(result, |h| us(h.max_us)),
                    cell(result, |h| us(h.handoff_p50_us)),
                    cell(result, |h| us(h.handoff_p99_us)),
                    cell(result, |h| format!(
                        "{}..{}",
                        h.min_per_task, h.max_per_task
                    )),
                );
            };
            line(
                "ferrisson",
                &Some(row.ferrisson.clone().map(|(hot, _)| hot)),
            );
            if row.spin.is_some() || row.rslock.is_some() {
                line("spin", &row.spin);
                line("rslock", &row.rslock);
            }
        }
        let extras: Vec<String> = rows
            .iter()
            .filter_map(|r| r.ferrisson.as_ref().ok().map(|(_, x)| (r.tasks, x)))
            .map(|(t, x)| {
                format!(
                    "T={t}: {:.0} % of acquisitions did not wait, {} hand-offs, acquire p99.9 {}, \
                     acquisitions by others during one acquire p50/p99/max {}/{}/{}, \
                     acquisitions per 100 ms min/median/max {}/{}/{}",
                    x.immediate_share * 100.0,
                    x.handoffs,
                    us(x.p999_us),
                    x.overtaken[0],
                    x.overtaken[1],
                    x.overtaken[2],
                    x.per_slot[0],
                    x.per_slot[1],
                    x.per_slot[2]
                )
            })
            .collect();
        if !extras.is_empty() {
            let _ = writeln!(out, "\nferrisson: {}", extras.join("; "));
        }
        out.push('\n');
    }
    if let Some(rows) = &run.waiters {
        let _ = writeln!(out, "### waiters\n");
        let _ = writeln!(
            out,
            "| W | hand-offs/s | acquisitions/s | heap per parked waiter | RSS per parked waiter | parked in |\n|---:|---:|---:|---:|---:|---:|"
        );
        for (i, row) in rows.iter().enumerate() {
            match row {
                Ok(w) => {
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} | {} | {} | {:.2} s |",
                        w.waiters,
                        rate(w.handoffs_per_s),
                        rate(w.acq_per_s),
                        bytes(w.heap_bytes_per_waiter),
                        bytes(w.rss_bytes_per_waiter),
                        w.park_s
                    );
                }
                Err(e) => {
                    let w = run.plan.waiters.get(i).copied().unwrap_or(0);
                    let _ = writeln!(out, "| {w} | failed: {} | | | | |", short_err(e));
                }
            }
        }
        out.push('\n');
    }
    if let Some(rows) = &run.held {
        let _ = writeln!(out, "### held\n");
        let _ = writeln!(
            out,
            "| L | renewal period | renewal calls/period | client CPU | heap per lock | RSS per lock | of which guard | acquired at |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (i, row) in rows.iter().enumerate() {
            match row {
                Ok(h) => {
                    let _ = writeln!(
                        out,
                        "| {} | {} ms | {:.1} | {:.2} % | {} | {} | {} B | {} locks/s |",
                        h.locks,
                        h.watchdog_timeout_ms / 3,
                        h.renewal_calls_per_period,
                        h.cpu_pct,
                        bytes(h.heap_bytes_per_lock),
                        bytes(h.rss_bytes_per_lock),
                        h.guard_bytes,
                        rate(h.acquire_per_s)
                    );
                }
                Err(e) => {
                    let l = run.plan.held.get(i).map_or(0, |h| h.locks);
                    let _ = writeln!(out, "| {l} | failed: {} | | | | | | |", short_err(e));
                }
            }
        }
        out.push('\n');
    }
    if let Some(cluster) = &run.cluster {
        render_cluster(&mut out, cluster);
    }
    if let Some(rows) = &run.processes {
        let _ = writeln!(out, "### processes\n");
        let _ = writeln!(
            out,
            "P worker processes × T tasks each on one lock, one window. Latency: the median of the \
             processes' acquire p50s, the worst process's p99, the longest acquire.\n"
        );
        let _ = writeln!(
            out,
            "| P × T | lock | acq/s | per process | min/max | per task min..max | acquire p50 | p99 | max |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        for row in rows {
            for (name, result) in [("ferrisson", &row.ferrisson), ("spin", &row.spin)] {
                let result = Some(result.clone());
                let _ = writeln!(
                    out,
                    "| {} × {} | {name} | {} | {} | {} | {} | {} | {} | {} |",
                    row.procs,
                    row.tasks,
                    cell(&result, |s| rate(s.acq_per_s)),
                    cell(&result, |s| s
                        .per_process
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(" / ")),
                    cell(&result, |s| format!("{:.2}", s.fairness())),
                    cell(&result, |s| format!(
                        "{}..{}",
                        s.per_task_min, s.per_task_max
                    )),
                    cell(&result, |s| us(s.p50_us)),
                    cell(&result, |s| us(s.p99_us)),
                    cell(&result, |s| us(s.max_us)),
                );
            }
        }
        let _ = writeln!(
            out,
            "\nTurns (runs of consecutive acquisitions by one process):\n"
        );
        for row in rows {
            for (name, result) in [("ferrisson", &row.ferrisson), ("spin", &row.spin)] {
                if let Ok(fleet) = result {
                    let _ = writeln!(
                        out,
                        "- {} × {} {name}: {}",
                        row.procs,
                        row.tasks,
                        turns(&fleet.turns)
                    );
                }
            }
        }
        out.push('\n');
    }
    let checks = checks(run);
    if !checks.is_empty() {
        let _ = writeln!(out, "### targets\n");
        for check in &checks {
            let _ = writeln!(out, "- {} {}", check.text, check.mark());
        }
        let met = checks.iter().filter(|c| c.met == Some(true)).count();
        let missed = checks.iter().filter(|c| c.met == Some(false)).count();
        let unknown = checks.iter().filter(|c| c.met.is_none()).count();
        let _ = writeln!(
            out,
            "\n{met} met, {missed} missed, {unknown} not checkable (baseline n/a)."
        );
    }
    out
}

fn render_cluster(out: &mut String, cluster: &crate::cluster::Outcome) {
    let _ = writeln!(out, "### cluster\n");
    match &cluster.nodes {
        Ok(nodes) => {
            let _ = writeln!(
                out,
                "A local Redis Cluster ({nodes}) taking turns with the single server: {} rounds \
                 of one turn each ({} after the warm-up). × single: cluster ÷ single server, from \
                 the same turns. Script runs (round trips), lock calls and unlock messages per \
                 acquisition: from `INFO commandstats` of every server; server CPU: `INFO cpu` of \
                 every server, over the turns with their warm-ups.\n",
                cluster.rounds,
                us(cluster.turn.as_secs_f64() * 1e6)
            );
        }
        Err(e) => {
            let _ = writeln!(out, "n/a: {e}\n");
            return;
        }
    }
    let _ = writeln!(
        out,
        "| loop | T | server | rate | acquire p50 | acquire p99 | × single: rate | p50 | p99 | script runs / acq | lock calls / acq | messages / acq | server CPU / acq |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for row in &cluster.rows {
        for (name, side) in [("single", &row.single), ("cluster", &row.cluster)] {
            let side = Some(side.clone());
            let single = row.single.as_ref().ok();
            let versus = |field: fn(&crate::cluster::Side) -> f64| match (&side, single) {
                (Some(Ok(s)), Some(base)) if name == "cluster" && field(base) > 0.0 => {
                    format!("{:.2}", field(s) / field(base))
                }
                _ => "–".into(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                row.kind.name(),
                row.tasks,
                cell(&side, |s| format!("{} {}", rate(s.per_s), row.kind.unit())),
                cell(&side, |s| us(s.p50_us)),
                cell(&side, |s| us(s.p99_us)),
                versus(|s| s.per_s),
                versus(|s| s.p50_us),
                versus(|s| s.p99_us),
                cell(&side, |s| format!("{:.2}", s.scripts_per_acquisition)),
                cell(&side, |s| format!("{:.2}", s.calls_per_acquisition)),
                cell(&side, |s| format!("{:.2}", s.publishes_per_acquisition)),
                cell(&side, |s| format!(
                    "{:.1} µs",
                    s.server_cpu_us_per_acquisition
                )),
            );
        }
    }
    out.push('\n');
}

pub fn print(run: &Run) {
    println!("\n{}", render(run));
}

// ---------------------------------------------------------------- JSON

/// `null` unless measured (for `summary.json`).
fn ok_json<T: serde::Serialize>(result: Option<&Res<T>>) -> Value {
    match result {
        Some(Ok(value)) => serde_json::to_value(value).unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

/// `summary.json`: exactly the schema of issue 4, failed or missing measurements as `null`.
pub fn summary(run: &Run) -> Value {
    let ut = run.plan.uncontended_summary;
    let urow = run
        .uncontended
        .as_ref()
        .and_then(|rows| rows.iter().find(|r| r.tasks == ut));
    let limit = run
        .limit_pairs(ut)
        .map_or(Value::Null, |pairs| json!({ "pairs_per_s": pairs }));
    let ht = run.plan.hot_summary;
    let hrow = run
        .hot
        .as_ref()
        .and_then(|rows| rows.iter().find(|r| r.tasks == ht));
    let mut waiters = serde_json::Map::new();
    let ok_waiters: Vec<&Waiters> = run
        .waiters
        .iter()
        .flatten()
        .filter_map(|r| r.as_ref().ok())
        .collect();
    for (i, &w) in run.plan.waiters.iter().enumerate() {
        let value = run
            .waiters
            .as_ref()
            .and_then(|rows| rows.get(i))
            .and_then(|r| r.as_ref().ok())
            .map_or(
                Value::Null,
                |r| json!({ "handoffs_per_s": r.handoffs_per_s }),
            );
        waiters.insert(w.to_string(), value);
    }
    waiters.insert(
        "bytes_per_waiter".into(),
        ok_waiters
            .last()
            .map_or(Value::Null, |w| json!(bytes_per_waiter(w))),
    );
    let held = run
        .held
        .as_ref()
        .and_then(|rows| rows.last())
        .and_then(|r| r.as_ref().ok());
    json!({
        "uncontended": {
            "T": ut,
            "ferrisson": ok_json(urow.map(|r| &r.ferrisson)),
            "rslock": ok_json(urow.and_then(|r| r.rslock.as_ref())),
            "spin": ok_json(urow.and_then(|r| r.spin.as_ref())),
            "node_redisson": ok_json(urow.and_then(|r| r.node.as_ref())),
            "limit": limit,
        },
        "hot": {
            "T": ht,
            "ping_p50_us": run.ping().ok(),
            "ferrisson": ok_json(hrow.map(|r| r.ferrisson.as_ref().map(|(h, _)| h.clone()).map_err(Clone::clone)).as_ref()),
            "spin": ok_json(hrow.and_then(|r| r.spin.as_ref())),
            "rslock": ok_json(hrow.and_then(|r| r.rslock.as_ref())),
        },
        "waiters": waiters,
        "held": match held {
            Some(h) => json!({
                "locks": h.locks,
                "renewal_period_ms": h.watchdog_timeout_ms / 3,
                "renewal_calls_per_period": h.renewal_calls_per_period,
                "cpu_pct": h.cpu_pct,
                "bytes_per_lock": bytes_per_lock(h),
            }),
            None => json!({
                "locks": run.plan.held.last().map(|h| h.locks),
                "renewal_calls_per_period": null,
                "cpu_pct": null,
                "bytes_per_lock": null,
            }),
        },
    })
}

/// Writes `value` as pretty JSON to `dir/name`.
pub fn write_json<T: serde::Serialize + ?Sized>(
    dir: &Path,
    name: &str,
    value: &T,
) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(name), text + "\n")
}

/// Writes every file of the run into `dir`: `run.json` (the whole run as measured: machine,
/// plan, every scenario's rows, each measurement `{"Ok": ..}` or `{"Err": why}`, and every
/// target check), `summary.json` (complete runs), `report.md` and the charts.
pub fn write(run: &Run, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let unix_time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let whole = json!({ "run": run, "checks": checks(run), "unix_time": unix_time });
    write_json(dir, "run.json", &whole)?;
    let mut written = vec!["run.json"];
    if run.complete {
        write_json(dir, "summary.json", &summary(run))?;
        written.push("summary.json");
    }
    std::fs::write(dir.join("report.md"), render(run))?;
    written.push("report.md");
    for (name, chart) in [
        ("uncontended.svg", chart_uncontended(run)),
        ("hot.svg", chart_hot(run)),
        ("waiters.svg", chart_waiters(run)),
    ] {
        let Some(mut chart) = chart else { continue };
        chart.series.retain(|s| !s.points.is_empty());
        if chart.series.is_empty() {
            continue;
        }
        match charts::draw(&dir.join(name), &chart) {
            Ok(()) => written.push(name),
            Err(e) => eprintln!("warning: chart {name}: {e}"),
        }
    }
    crate::progress!(
        "wrote {} in {}{}",
        written.join(", "),
        dir.display(),
        if run.complete {
            ""
        } else {
            " (partial run: summary.json not written)"
        }
    );
    Ok(())
}

// ---------------------------------------------------------------- charts

mod charts {
    use plotters::prelude::*;

    pub const COLORS: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];

    /// A series of (x, y) points drawn as a line with markers, or markers only.
    pub struct Series {
        pub name: String,
        pub points: Vec<(f64, f64)>,
        pub line: bool,
    }

    impl Series {
        pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>, line: bool) -> Series {
            let name = name.into();
            Series { name, points, line }
        }
    }

    /// A log-x chart, linear or log y, with the y labels `y_label` writes.
    pub struct Chart {
        pub title: String,
        pub x_desc: &'static str,
        pub y_desc: &'static str,
        pub log_y: bool,
        pub y_label: fn(f64) -> String,
        pub series: Vec<Series>,
    }

    pub fn draw(path: &std::path::Path, chart: &Chart) -> Result<(), String> {
        let Chart {
            title,
            x_desc,
            y_desc,
            log_y,
            y_label,
            series,
        } = chart;
        let (log_y, y_label, x_desc, y_desc) = (*log_y, *y_label, *x_desc, *y_desc);
        let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.clone()).collect();
        let x_max = all.iter().map(|p| p.0).fold(1.0, f64::max) * 1.6;
        // Start just below a power of ten, so that the log axis labels its first decade.
        let x_min = 10f64.powf(
            all.iter()
                .map(|p| p.0)
                .fold(f64::INFINITY, f64::min)
                .max(1.0)
                .log10()
                .floor(),
        ) * 0.8;
        let y_max = all.iter().map(|p| p.1).fold(1.0, f64::max) * if log_y { 3.0 } else { 1.15 };
        let y_min = all
            .iter()
            .map(|p| p.1)
            .filter(|y| *y > 0.0)
            .fold(f64::INFINITY, f64::min)
            .min(y_max / 10.0)
            / 2.0;
        let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(80);
        macro_rules! body {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .x_label_formatter(&|x| format!("{x:.0}"))
                    .y_label_formatter(&|y| y_label(*y))
                    .draw()
                    .map_err(|e| e.to_string())?;
                for (i, s) in series.iter().enumerate() {
                    let color = COLORS[i % COLORS.len()];
                    let style = ShapeStyle::from(&color).stroke_width(2);
                    if s.line && s.points.len() > 1 {
                        chart
                            .draw_series(LineSeries::new(s.points.clone(), style))
                            .map_err(|e| e.to_string())?;
                    }
                    chart
                        .draw_series(s.points.iter().map(|&p| Circle::new(p, 5, color.filled())))
                        .map_err(|e| e.to_string())?
                        .label(s.name.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
                }
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()
                    .map_err(|e| e.to_string())?;
            }};
        }
        if log_y {
            body!(builder
                .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())
                .map_err(|e| e.to_string())?);
        } else {
            body!(builder
                .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..y_max)
                .map_err(|e| e.to_string())?);
        }
        root.present().map_err(|e| e.to_string())
    }
}

use charts::{Chart, Series};

/// The ferrisson loop's and its peers' pairs/s by T, with the machine's limit.
fn chart_uncontended(run: &Run) -> Option<Chart> {
    let rows = run.uncontended.as_ref()?;
    let by_t = |pick: fn(&UncontendedRow) -> Option<&Res<Throughput>>| -> Vec<(f64, f64)> {
        let ok = |r: &UncontendedRow| Some((r.tasks as f64, pick(r)?.as_ref().ok()?.pairs_per_s));
        rows.iter().filter_map(ok).collect()
    };
    let mut series = vec![Series::new("ferrisson", by_t(|r| Some(&r.ferrisson)), true)];
    if let Some(limit) = &run.limit {
        let halved = |pick: fn(&LimitRow) -> &Res<f64>| -> Vec<(f64, f64)> {
            let ok = |r: &LimitRow| Some((r.clients as f64, pick(r).as_ref().ok()? / 2.0));
            limit.rows.iter().filter_map(ok).collect()
        };
        let name = format!("limit/2 (redis-benchmark, pipelined ×{})", limit.pipeline);
        series.push(Series::new(name, halved(|r| &r.pipelined_per_s), true));
        let name = "redis-benchmark unpipelined / 2";
        series.push(Series::new(name, halved(|r| &r.plain_per_s), true));
    }
    series.push(Series::new("rslock", by_t(|r| r.rslock.as_ref()), false));
    series.push(Series::new("spin", by_t(|r| r.spin.as_ref()), false));
    series.push(Series::new(
        "node-redisson",
        by_t(|r| r.node.as_ref()),
        false,
    ));
    Some(Chart {
        title: format!(
            "uncontended: lock+unlock pairs/s vs tasks ({} run)",
            run.plan.mode.name()
        ),
        x_desc: "tasks T (each its own lock)",
        y_desc: "pairs/s",
        log_y: false,
        y_label: rate,
        series,
    })
}

/// ferrisson's acquire and hand-off latencies by T, with the PING round trip.
fn chart_hot(run: &Run) -> Option<Chart> {
    let ok: Vec<(f64, &Hot)> = (run.hot.iter().flatten())
        .filter_map(|r| r.ferrisson.as_ref().ok().map(|(h, _)| (r.tasks as f64, h)))
        .collect();
    let pick = |f: fn(&Hot) -> f64| ok.iter().map(|(t, h)| (*t, f(h).max(1.0))).collect();
    let mut series = vec![
        Series::new("acquire p50", pick(|h| h.p50_us), true),
        Series::new("acquire p99", pick(|h| h.p99_us), true),
        Series::new("hand-off p50", pick(|h| h.handoff_p50_us), true),
        Series::new("hand-off p99", pick(|h| h.handoff_p99_us), true),
    ];
    if let Ok(ping) = run.ping() {
        let points = ok.iter().map(|(t, _)| (*t, ping.max(1.0))).collect();
        series.push(Series::new("PING p50", points, true));
    }
    Some(Chart {
        title: format!(
            "hot: ferrisson latency vs tasks on one lock ({} run)",
            run.plan.mode.name()
        ),
        x_desc: "tasks T on one lock",
        y_desc: "latency",
        log_y: true,
        y_label: us,
        series,
    })
}

/// Hand-offs/s by the number of parked waiters.
fn chart_waiters(run: &Run) -> Option<Chart> {
    let points = (run.waiters.iter().flatten())
        .filter_map(|r| r.as_ref().ok())
        .map(|w| (w.waiters as f64, w.handoffs_per_s))
        .collect();
    Some(Chart {
        title: format!(
            "waiters: hand-offs/s vs parked waiters ({} run)",
            run.plan.mode.name()
        ),
        x_desc: "parked waiters W",
        y_desc: "hand-offs/s",
        log_y: false,
        y_label: rate,
        series: vec![Series::new("ferrisson", points, true)],
    })
}
