//! The measuring instrument (issue 4):
//!
//! ```text
//! cargo bench --bench scenarios -- [--quick] [--url URL] [--only SCENARIO,...] [--tasks T,...]
//! ```
//!
//! Starts a private `redis-server` (persistence off), or uses the one at `--url`, and runs the
//! scenarios `limit`, `uncontended`, `hot`, `waiters`, `held`, `peers` and `processes` (P worker
//! processes, this binary run again, × T tasks on one lock) against it, and `cluster`: the
//! uncontended and hot loops on a local 3-master Redis Cluster of its own, taking turns with the
//! same loops on that server, `costs` (what one uncontended cycle of each primitive costs the
//! servers, counted: `costs.rs`), `synced` (the uncontended loop with and without waiting for
//! a replica after every write: `synced.rs`), `deadlock` (what deadlock detection costs: the
//! uncontended and hot loops, the counts per cycle and parked waiters with it off and on:
//! `deadlock.rs`), `java` (Java Redisson's own uncontended, hot and cross-language hand-off rows
//! beside ferrisson's: `java.rs`) and `family` (each primitive of the lock family under
//! contention, against the reentrant lock and its closest peer: `family.rs`). Prints a
//! table with every target as a ratio against the baselines of the same run, and writes
//! `target/bench/run.json` (machine, settings, every scenario's rows and the target checks),
//! `target/bench/summary.json` (complete runs only), `target/bench/family.json` and charts
//! `target/bench/*.svg`.
//!
//! * `--quick`: every scenario at small sizes, well under a minute.
//! * `--only uncontended,limit`: a subset (no `summary.json` is written).
//! * `--tasks 64`: only these T in the `limit`, `uncontended` and `hot` scenarios (no
//!   `summary.json` either).
//! * `--url redis://host:port`: an existing server. The run uses its own key names, but it does
//!   reset the server's command statistics (`CONFIG RESETSTAT`) for the held, waiters, cluster,
//!   costs and deadlock scenarios, and other clients of that server distort the numbers.
//!
//! * `--write-baseline`: the figures the regression gate holds (`gate.rs`) become the committed
//!   baseline `benches/scenarios/baseline.json` instead of being checked against it.
//!
//! `cargo bench` passes `--bench` to this harness-less target. Without it (as under
//! `cargo test --all-targets`) it runs a tiny smoke configuration in a few seconds that writes
//! to `target/bench-smoke/` and fails when one of ferrisson's own scenarios fails or when the
//! gate finds a count or a byte figure above the baseline.

#[path = "../../tests/it/support/mod.rs"]
mod support;

mod cluster;
mod costs;
mod deadlock;
mod family;
mod ferrisson;
mod gate;
mod java;
mod limit;
mod measure;
mod peers;
mod processes;
mod report;
mod synced;

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use measure::CpuPer;
use report::{HotRow, LimitRow, ProcessesRow, Run, UncontendedRow};

/// Which configuration runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `cargo bench --bench scenarios`: the full sizes.
    Full,
    /// `-- --quick`: small sizes, under a minute.
    Quick,
    /// Run without `--bench` (by `cargo test`): tiny sizes, a few seconds, even in debug.
    Smoke,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Quick => "quick",
            Mode::Smoke => "smoke",
        }
    }
}

/// Sizes and durations of one mode.
/// One run of the held scenario: `locks` locks under a `watchdog` timeout, measured over
/// `periods` renewal periods (a third of the timeout each).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct HeldRun {
    pub locks: usize,
    #[serde(serialize_with = "millis")]
    pub watchdog: Duration,
    pub periods: u32,
}

pub fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

impl HeldRun {
    const fn new(locks: usize, watchdog: Duration, periods: u32) -> HeldRun {
        HeldRun {
            locks,
            watchdog,
            periods,
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    pub mode: Mode,
    pub uncontended_tasks: Vec<usize>,
    /// The T of `summary.json` (and of the peers' uncontended runs).
    pub uncontended_summary: usize,
    pub hot_tasks: Vec<usize>,
    pub hot_summary: usize,
    pub waiters: Vec<usize>,
    /// The held scenario's runs; the last one is held against the targets.
    pub held: Vec<HeldRun>,
    #[serde(serialize_with = "millis")]
    pub warmup: Duration,
    #[serde(serialize_with = "millis")]
    pub duration: Duration,
    #[serde(serialize_with = "millis")]
    pub limit_duration: Duration,
    pub limit_pipeline: usize,
    pub ping_samples: usize,
    /// Rounds of the uncontended comparison at `uncontended_summary` (see `compare_uncontended`).
    pub compare_rounds: u32,
    /// The processes scenario's spreads: (P worker processes, T tasks each) on one lock.
    pub processes: Vec<(usize, usize)>,
    /// The cluster scenario's sizes, each run in `compare_rounds` rounds of turns.
    pub cluster: Vec<(cluster::Kind, usize)>,
    /// T of the synced-writes scenario's uncontended loop.
    pub synced: Vec<usize>,
    /// Rounds of the deadlock scenario's timed turns, each `duration / deadlock_rounds` long.
    pub deadlock_rounds: u32,
    /// The deadlock scenario's parked waiters, and how long they stay parked after they parked.
    pub deadlock_waiters: usize,
    #[serde(serialize_with = "millis")]
    pub deadlock_hold: Duration,
}

/// The processes scenario's (P, T) in full and quick runs: 2 and 4 processes on 2 cores, with
/// one task each (no local hand-offs) and with 8 (local hand-offs between the switches).
const PROCESS_SPREADS: [(usize, usize); 4] = [(2, 1), (2, 8), (4, 1), (4, 8)];

/// The cluster scenario's sizes in full and quick runs: the ends of the uncontended range (a
/// lone call, and batches on the single server) and the hot scenario's summary T and T = 2.
const CLUSTER_SIZES: [(cluster::Kind, usize); 4] = [
    (cluster::Kind::Uncontended, 1),
    (cluster::Kind::Uncontended, 64),
    (cluster::Kind::Hot, 2),
    (cluster::Kind::Hot, 16),
];

impl Plan {
    fn new(mode: Mode) -> Plan {
        let ms = Duration::from_millis;
        match mode {
            Mode::Full => Plan {
                mode,
                uncontended_tasks: vec![1, 16, 64, 256],
                uncontended_summary: 64,
                hot_tasks: vec![2, 16, 64],
                hot_summary: 16,
                waiters: vec![10, 1_000, 10_000],
                // A 3 s watchdog (renewals 10 × as often as by default) keeps the short runs
                // short; the last run uses the default 30 s over one 10 s period and is the one
                // held against the targets.
                held: vec![
                    HeldRun::new(1_000, Duration::from_secs(3), 3),
                    HeldRun::new(100_000, Duration::from_secs(3), 3),
                    HeldRun::new(100_000, ::ferrisson::Config::new("").watchdog_timeout, 1),
                ],
                warmup: ms(500),
                duration: Duration::from_secs(5),
                limit_duration: Duration::from_secs(3),
                limit_pipeline: 16,
                ping_samples: 20_000,
                compare_rounds: 5,
                processes: PROCESS_SPREADS.to_vec(),
                cluster: CLUSTER_SIZES.to_vec(),
                synced: vec![1, 64],
                // Twice the other comparisons' rounds, half as long: an on ÷ off within a few
                // percent needs more pairs of turns than this VM's drift gives in 5.
                deadlock_rounds: 10,
                deadlock_waiters: 1_000,
                // Two thresholds of the detecting side (`deadlock.rs`): every wait written and
                // renewed, and looked at once or twice.
                deadlock_hold: Duration::from_secs(2),
            },
            Mode::Quick => Plan {
                mode,
                uncontended_tasks: vec![1, 16, 64],
                uncontended_summary: 64,
                hot_tasks: vec![2, 16],
                hot_summary: 16,
                waiters: vec![10, 100, 1_000],
                held: vec![
                    HeldRun::new(1_000, Duration::from_secs(3), 2),
                    HeldRun::new(10_000, Duration::from_secs(3), 2),
                ],
                warmup: ms(200),
                duration: Duration::from_secs(1),
                limit_duration: ms(700),
                limit_pipeline: 16,
                ping_samples: 2_000,
                compare_rounds: 2,
                processes: PROCESS_SPREADS.to_vec(),
                cluster: CLUSTER_SIZES.to_vec(),
                synced: vec![1, 64],
                deadlock_rounds: 2,
                deadlock_waiters: 1_000,
                deadlock_hold: Duration::from_secs(2),
            },
            Mode::Smoke => Plan {
                mode,
                uncontended_tasks: vec![1, 4],
                uncontended_summary: 4,
                hot_tasks: vec![2],
                hot_summary: 2,
                waiters: vec![1_000],
                held: vec![HeldRun::new(100, ms(300), 2)],
                warmup: ms(30),
                duration: ms(150),
                limit_duration: ms(150),
                limit_pipeline: 16,
                ping_samples: 100,
                compare_rounds: 1,
                processes: vec![(2, 2)],
                // Hot at T = 2, where the fresh-start hang of issue 24 showed.
                cluster: vec![(cluster::Kind::Uncontended, 4), (cluster::Kind::Hot, 2)],
                synced: vec![1, 4],
                deadlock_rounds: 1,
                // Past the threshold: the walks run too.
                deadlock_waiters: 100,
                deadlock_hold: ms(1_200),
            },
        }
    }

    /// How long one ferrisson scenario may take before it counts as failed (a hang must not
    /// stall the run, least of all under `cargo test`).
    fn scenario_timeout(&self) -> Duration {
        match self.mode {
            Mode::Smoke => Duration::from_secs(30),
            _ => Duration::from_secs(300),
        }
    }

    /// The same for one peer or limit measurement.
    fn baseline_timeout(&self) -> Duration {
        self.duration * 4 + Duration::from_secs(60)
    }
}

pub const SCENARIOS: [&str; 13] = [
    "limit",
    "uncontended",
    "hot",
    "waiters",
    "held",
    "peers",
    "cluster",
    "costs",
    "synced",
    "deadlock",
    "java",
    "processes",
    "family",
];

struct Options {
    mode: Mode,
    url: Option<String>,
    only: Option<Vec<String>>,
    /// `--tasks 64`: only these T in `uncontended`, `hot` and `limit`.
    tasks: Option<Vec<usize>>,
    /// `--write-baseline`: the gated figures become the committed baseline (`gate.rs`).
    write_baseline: bool,
}

impl Options {
    fn parse() -> Result<Options, String> {
        let mut bench = false;
        let mut quick = false;
        let mut url = None;
        let mut only = None;
        let mut tasks = None;
        let mut write_baseline = false;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = |name: &str| match arg.split_once('=') {
                Some((_, v)) => Ok(v.to_owned()),
                None => args.next().ok_or(format!("{name} needs a value")),
            };
            match arg.split_once('=').map_or(arg.as_str(), |(flag, _)| flag) {
                "--bench" => bench = true,
                "--quick" => quick = true,
                "--write-baseline" => write_baseline = true,
                "--url" => url = Some(value("--url")?),
                "--only" => {
                    let list: Vec<String> = value("--only")?
                        .split(',')
                        .map(|s| s.trim().to_ascii_lowercase())
                        .filter(|s| !s.is_empty())
                        .collect();
                    if let Some(bad) = list.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
                        return Err(format!(
                            "unknown scenario {bad:?}; known: {}",
                            SCENARIOS.join(", ")
                        ));
                    }
                    only = Some(list);
                }
                "--tasks" => {
                    let list = value("--tasks")?
                        .split(',')
                        .map(|t| t.trim().parse::<usize>())
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| format!("--tasks takes numbers like 16,64: {e}"))?;
                    tasks = Some(list);
                }
                "--help" | "-h" => {
                    println!(
                        "cargo bench --bench scenarios -- [--quick] [--url URL] [--tasks T,...] [--write-baseline] [--only {}]",
                        SCENARIOS.join(",")
                    );
                    std::process::exit(0);
                }
                // libtest-style flags (`--nocapture`, filters) passed by `cargo test`: ignored.
                _ => {}
            }
        }
        let mode = match (bench, quick) {
            (false, _) => Mode::Smoke,
            (true, true) => Mode::Quick,
            (true, false) => Mode::Full,
        };
        Ok(Options {
            mode,
            url,
            only,
            tasks,
            write_baseline,
        })
    }

    fn runs(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|s| s == scenario))
    }
}

/// `$CARGO_TARGET_DIR` or the package's `target/`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
    }
}

fn port_of(url: &str) -> u16 {
    url.rsplit_once(':')
        .and_then(|(_, rest)| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(6379)
}

/// Logs progress to stderr (the table goes to stdout at the end).
macro_rules! progress {
    ($($arg:tt)*) => { eprintln!("[bench {:>6.1}s] {}", crate::started().elapsed().as_secs_f64(), format!($($arg)*)) };
}
pub(crate) use progress;

fn started() -> Instant {
    static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *STARTED.get_or_init(Instant::now)
}

/// Runs `future` with a time limit; a timeout is a failure.
async fn bounded<T>(
    limit: Duration,
    future: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| Err(format!("did not finish within {limit:?}")))
}

/// A blocking baseline measurement on the blocking pool, with a time limit.
async fn bounded_blocking<T: Send + 'static>(
    limit: Duration,
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    bounded(limit, async {
        tokio::task::spawn_blocking(work)
            .await
            .unwrap_or_else(|e| Err(format!("panicked: {e}")))
    })
    .await
}

fn show<T>(result: &Result<T, String>, ok: impl Fn(&T) -> String) -> String {
    match result {
        Ok(value) => ok(value),
        Err(e) => format!("n/a ({e})"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some((processes::WORKER, rest)) = args.split_first().map(|(a, r)| (a.as_str(), r)) {
        std::process::exit(processes::worker(rest));
    }
    started();
    let options = match Options::parse() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let mut plan = Plan::new(options.mode);
    if let Some(tasks) = &options.tasks {
        plan.uncontended_tasks.retain(|t| tasks.contains(t));
        plan.hot_tasks.retain(|t| tasks.contains(t));
    }
    let out_dir = target_dir().join(match plan.mode {
        Mode::Smoke => "bench-smoke",
        _ => "bench",
    });

    let server = match &options.url {
        Some(_) => None,
        None => Some(support::RedisServer::start()),
    };
    let url = options
        .url
        .clone()
        .unwrap_or_else(|| server.as_ref().map(|s| s.url()).unwrap_or_default());
    let port = server
        .as_ref()
        .map_or_else(|| port_of(&url), support::RedisServer::port);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let raw = runtime.block_on(support::raw_client(&url));
    let machine = runtime.block_on(report::Machine::detect(&raw, &url));
    progress!(
        "{} run against redis {} at {} ({} CPUs, {}); results go to {}",
        plan.mode.name(),
        machine.redis_version,
        support_redacted(&url),
        machine.cpus,
        machine.cpu_model,
        out_dir.display()
    );

    let mut run = Run::new(plan.clone(), machine);
    run.complete = options.only.is_none() && options.tasks.is_none();
    let mut family = None;
    let mut costs = None;
    let mut synced = None;
    let mut deadlock = None;
    let mut java = None;
    runtime.block_on(async {
        // The smoke starts the cluster (2–3 s) while the other scenarios run; a measuring run
        // starts it at its scenario, so that the start disturbs no other measurement.
        let mut cluster_starting =
            (plan.mode == Mode::Smoke && options.runs("cluster")).then(cluster::start);
        if options.runs("limit") {
            run.limit = Some(run_limit(&plan, &url, port).await);
        }
        if options.runs("uncontended") {
            run.uncontended =
                Some(run_uncontended(&plan, &url, port, &raw, options.runs("peers")).await);
        }
        if options.runs("hot") {
            run.hot = Some(run_hot(&plan, &url, options.runs("peers")).await);
        }
        // The cluster's start allocates on this process's heap: it must be over before the
        // scenarios that count the heap (the regression gate holds their bytes, `gate.rs`).
        let mut cluster = match cluster_starting.take() {
            Some(starting) => Some(cluster::started(starting).await),
            None => None,
        };
        if options.runs("waiters") {
            run.waiters = Some(run_waiters(&plan, &url, &raw).await);
        }
        if options.runs("held") {
            run.held = Some(run_held(&plan, &url, &raw).await);
        }
        if options.runs("cluster") || options.runs("costs") {
            let started = match cluster.take() {
                Some(started) => started,
                None => cluster::started(cluster::start()).await,
            };
            if options.runs("cluster") {
                let progress = |line| progress!("{line}");
                run.cluster = Some(cluster::run(&started, (&url, &raw), &plan, progress).await);
            }
            if options.runs("costs") {
                let on_cluster = async {
                    let cluster = started.as_ref().map_err(Clone::clone)?;
                    costs::run(&cluster.url(), &cluster.master_clients).await
                };
                let measured = costs::Run {
                    single: costs::run(&url, std::slice::from_ref(&raw)).await,
                    cluster: on_cluster.await,
                    held_lock_bytes: costs::held_lock_bytes(&url, costs::HELD_LOCKS).await,
                };
                progress!("costs: {}", costs::summary(&measured));
                costs = Some(measured);
            }
            // Stops the cluster: it must not share the machine with the scenarios after it.
            drop(started);
        }
        if options.runs("synced") {
            let progress = |line| progress!("{line}");
            synced = Some(synced::run(&plan, &plan.synced, progress).await);
        }
        if options.runs("deadlock") {
            let progress = |line| progress!("{line}");
            deadlock = Some(deadlock::run(&plan, &url, &raw, progress).await);
        }
        if options.runs("java") {
            let progress = |line| progress!("{line}");
            java = Some(java::run(&plan, &url, progress).await);
        }
        if options.runs("processes") {
            run.processes = Some(run_processes(&plan, &url).await);
        }
        if options.runs("family") {
            family = Some(family::run(&plan, &url).await);
        }
    });

    report::print(&run);
    if let Err(e) = report::write(&run, &out_dir) {
        eprintln!("error: writing results to {}: {e}", out_dir.display());
        std::process::exit(1);
    }
    // A scenario with a table of its own: printed, then written to `out_dir` (or the run ends).
    let shown = |table: String, written: std::io::Result<()>| {
        println!("\n{table}");
        if let Err(e) = written {
            eprintln!("error: writing results to {}: {e}", out_dir.display());
            std::process::exit(1);
        }
    };
    let mut failures = run.ferrisson_failures();
    if let Some(family) = &family {
        shown(
            family::render(family),
            family::write(family, &out_dir, plan.mode.name()),
        );
        failures.extend(family.failures());
    }
    if let Some(synced) = &synced {
        let written = report::write_json(&out_dir, "synced.json", synced);
        shown(synced::render(synced), written);
        failures.extend(synced.failures());
    }
    if let Some(deadlock) = &deadlock {
        let written = report::write_json(&out_dir, "deadlock.json", deadlock);
        shown(deadlock::render(deadlock), written);
        failures.extend(deadlock.failures());
    }
    if let Some(java) = &java {
        let written = report::write_json(&out_dir, "java.json", java);
        shown(java::render(java), written);
        failures.extend(java.failures());
    }
    if let Some(costs) = &costs {
        let written = report::write_json(&out_dir, "costs.json", costs);
        shown(costs::render(costs), written);
        failures.extend(costs.failures());
    }
    let figures = gate::Figures::of(&run, costs.as_ref(), deadlock.as_ref());
    if options.write_baseline {
        match gate::write_baseline(&figures) {
            Ok(path) => println!("\ngate: wrote the baseline {}", path.display()),
            Err(e) => failures.push(format!("gate: writing the baseline: {e}")),
        }
    } else {
        let verdict = gate::check(&figures);
        println!("\ngate (against {}):", gate::baseline_path().display());
        for line in &verdict.lines {
            println!("  {line}");
        }
        failures.extend(verdict.failures);
    }
    drop(server);
    if !failures.is_empty() {
        eprintln!("error: ferrisson scenarios failed:");
        for failure in &failures {
            eprintln!("  {failure}");
        }
        std::process::exit(1);
    }
}

fn support_redacted(url: &str) -> String {
    ::ferrisson::Config::new(url).redacted_url()
}

/// A round trip's (p50, p99, max) in µs, for progress lines.
fn tails((p50, p99, max): &(f64, f64, f64)) -> String {
    format!("p50 {p50:.0} µs, p99 {p99:.0} µs, max {max:.0} µs")
}

async fn run_limit(plan: &Plan, url: &str, port: u16) -> report::Limit {
    let ping = bounded(
        plan.baseline_timeout(),
        limit::ping_us(url, plan.ping_samples),
    )
    .await;
    progress!(
        "limit: PING p50 {}",
        show(&ping, |(p50, p99)| format!("{p50:.0} µs, p99 {p99:.0} µs"))
    );
    // As long as a hot scenario's window, for its worst case too.
    let relay = bounded(
        plan.baseline_timeout(),
        limit::ping_relay(url, plan.duration),
    )
    .await;
    progress!("limit: PING relay between 2 tasks: {}", show(&relay, tails));
    // The same window again, by a C client: how long this machine stalls a bare round trip.
    let (duration, p50_hint) = (plan.duration, ping.as_ref().ok().map(|(p50, _)| *p50));
    let bare = bounded_blocking(plan.baseline_timeout(), move || {
        limit::redis_benchmark_ping(port, duration, p50_hint)
    })
    .await;
    progress!(
        "limit: redis-benchmark PING, 1 connection: {}",
        show(&bare, tails)
    );
    let threads = bounded_blocking(plan.baseline_timeout(), move || {
        limit::thread_relay(duration)
    })
    .await;
    progress!(
        "limit: 2 threads taking turns through a socket pair: {}",
        show(&threads, tails)
    );
    let mut rows = Vec::new();
    for &clients in &plan.uncontended_tasks {
        let (duration, pipeline) = (plan.limit_duration, plan.limit_pipeline);
        let plain = bounded_blocking(plan.baseline_timeout(), move || {
            limit::redis_benchmark_acquire(port, clients, 1, duration)
        })
        .await;
        let pipelined = bounded_blocking(plan.baseline_timeout(), move || {
            limit::redis_benchmark_acquire(port, clients, pipeline, duration)
        })
        .await;
        progress!(
            "limit: redis-benchmark acquire script, {clients} clients: {} /s, pipelined ×{pipeline}: {} /s",
            show(&plain, |r| report::rate(*r)),
            show(&pipelined, |r| report::rate(*r)),
        );
        rows.push(LimitRow {
            clients,
            plain_per_s: plain,
            pipelined_per_s: pipelined,
        });
    }
    report::Limit {
        ping_p50_us: ping.clone().map(|(p50, _)| p50),
        ping_p99_us: ping.map(|(_, p99)| p99),
        relay_us: relay,
        bare_ping_us: bare,
        thread_relay_us: threads,
        pipeline: plan.limit_pipeline,
        rows,
    }
}

async fn run_uncontended(
    plan: &Plan,
    url: &str,
    port: u16,
    raw: &fred::clients::Client,
    with_peers: bool,
) -> Vec<UncontendedRow> {
    let mut rows = Vec::new();
    for &tasks in &plan.uncontended_tasks {
        if with_peers && tasks == plan.uncontended_summary {
            rows.push(compare_uncontended(plan, url, port, raw, tasks).await);
            continue;
        }
        let cpu = Cpu::start(raw).await;
        let ferrisson = bounded(
            plan.scenario_timeout(),
            ferrisson::uncontended(url, tasks, plan.warmup, plan.duration),
        )
        .await;
        let mut cpu_us_per_pair = std::collections::BTreeMap::new();
        if let Ok(t) = &ferrisson {
            let pairs = t.pairs_per_s * (plan.warmup + plan.duration).as_secs_f64();
            cpu_us_per_pair.insert("ferrisson", cpu.used(false, raw).await.per(pairs));
        }
        progress!(
            "uncontended T={tasks}: ferrisson {}",
            show(&ferrisson, report::throughput)
        );
        rows.push(UncontendedRow {
            tasks,
            ferrisson,
            rslock: None,
            spin: None,
            node: None,
            limit_in_turns: None,
            cpu_us_per_pair,
        });
    }
    rows
}

/// The locks of the uncontended comparison.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Compared {
    Ferrisson,
    Rslock,
    Spin,
    NodeRedisson,
}

impl Compared {
    /// In the order each round runs them.
    const ALL: [Compared; 4] = [
        Compared::Ferrisson,
        Compared::Rslock,
        Compared::Spin,
        Compared::NodeRedisson,
    ];

    fn name(self) -> &'static str {
        match self {
            Compared::Ferrisson => "ferrisson",
            Compared::Rslock => "rslock",
            Compared::Spin => "spin",
            Compared::NodeRedisson => "node-redisson",
        }
    }
}

/// The uncontended comparison at T = `tasks`: ferrisson, the three peers and the limit
/// (`redis-benchmark` running the acquire script pipelined, as in the limit scenario) take turns,
/// in `plan.compare_rounds` rounds of `duration / rounds` each (every turn after its own warm-up).
///
/// Why rounds: this machine's speed drifts by up to 2× within a minute, so runs of the full
/// duration one after another compared ferrisson with peers measured on a different machine, in
/// effect (the same build's ratio to rslock moved between 0.53 and 1.11 that way). Taking turns
/// exposes every lock to the same drift. pairs/s is the mean over the rounds (total pairs over
/// total time, the rounds being equally long); latency p50 and p99 are the medians of the
/// rounds' own; CPU per pair is the total CPU over the total pairs.
async fn compare_uncontended(
    plan: &Plan,
    url: &str,
    port: u16,
    raw: &fred::clients::Client,
    tasks: usize,
) -> UncontendedRow {
    let rounds = plan.compare_rounds.max(1);
    let turn = plan.duration / rounds;
    let mut taken: [Turns; 4] = Default::default();
    let mut limit_turns = Vec::new();
    for round in 1..=rounds {
        let pipeline = plan.limit_pipeline;
        let limit = bounded_blocking(plan.baseline_timeout(), move || {
            limit::redis_benchmark_acquire(port, tasks, pipeline, turn)
        })
        .await
        .map(|per_s| per_s / 2.0);
        progress!(
            "uncontended T={tasks}, round {round}/{rounds}: limit/2 {}",
            show(&limit, |pairs| format!("{} pairs/s", report::rate(*pairs)))
        );
        limit_turns.push(limit);
        for (lock, turns) in Compared::ALL.into_iter().zip(taken.iter_mut()) {
            let cpu = Cpu::start(raw).await;
            let limit = plan.baseline_timeout();
            // CPU is counted over the warm-up too, so per pair it counts the warm-up's pairs.
            let (result, counted) = match lock {
                Compared::Ferrisson => (
                    bounded(
                        plan.scenario_timeout(),
                        ferrisson::uncontended(url, tasks, plan.warmup, turn),
                    )
                    .await,
                    plan.warmup + turn,
                ),
                Compared::Rslock => (
                    bounded(limit, peers::rslock_uncontended(url, tasks, turn)).await,
                    turn,
                ),
                Compared::Spin => (
                    bounded(limit, peers::spin_uncontended(url, tasks, turn)).await,
                    turn,
                ),
                Compared::NodeRedisson => (
                    bounded(limit, peers::node_uncontended(url, tasks, turn)).await,
                    turn,
                ),
            };
            // Node runs in a child process.
            let used = cpu.used(lock == Compared::NodeRedisson, raw).await;
            if let Ok(t) = &result {
                turns.pairs += t.pairs_per_s * counted.as_secs_f64();
                turns.used = Some(turns.used.map_or(used, |sum| sum.plus(&used)));
            }
            progress!(
                "uncontended T={tasks}, round {round}/{rounds}: {} {}",
                lock.name(),
                show(&result, report::throughput)
            );
            turns.results.push(result);
        }
    }
    let [ferrisson, rslock, spin, node] = taken;
    let mut cpu_us_per_pair = std::collections::BTreeMap::new();
    for (lock, turns) in Compared::ALL
        .into_iter()
        .zip([&ferrisson, &rslock, &spin, &node])
    {
        if let Some(used) = turns.used {
            cpu_us_per_pair.insert(lock.name(), used.per(turns.pairs));
        }
    }
    UncontendedRow {
        tasks,
        ferrisson: ferrisson.combined(),
        rslock: Some(rslock.combined()),
        spin: Some(spin.combined()),
        node: Some(node.combined()),
        limit_in_turns: Some(
            limit_turns
                .into_iter()
                .collect::<Result<Vec<f64>, String>>()
                .map(|turns| turns.iter().sum::<f64>() / turns.len().max(1) as f64),
        ),
        cpu_us_per_pair,
    }
}

/// One lock's turns in [`compare_uncontended`].
#[derive(Default)]
struct Turns {
    results: Vec<Result<measure::Throughput, String>>,
    /// Pairs made while its CPU was counted (warm-ups included).
    pairs: f64,
    used: Option<CpuUsed>,
}

impl Turns {
    /// The turns as one measurement; any failed turn fails it.
    fn combined(self) -> Result<measure::Throughput, String> {
        let turns = self.results.into_iter().collect::<Result<Vec<_>, _>>()?;
        let median = |field: fn(&measure::Throughput) -> f64| {
            measure::median(turns.iter().map(field).collect())
        };
        Ok(measure::Throughput {
            pairs_per_s: turns.iter().map(|t| t.pairs_per_s).sum::<f64>()
                / turns.len().max(1) as f64,
            p50_us: median(|t| t.p50_us),
            p99_us: median(|t| t.p99_us),
        })
    }
}

/// CPU used by one measurement: the client's (this process's, or its finished children's: the
/// Node process of node-redisson) and the server's (`INFO cpu`).
struct Cpu {
    own: Duration,
    children: Duration,
    server: Option<Duration>,
}

impl Cpu {
    async fn start(raw: &fred::clients::Client) -> Cpu {
        Cpu {
            own: measure::cpu_time(),
            children: measure::children_cpu_time(),
            server: measure::server_cpu_time(raw).await,
        }
    }

    /// Client and server CPU used since `start`.
    async fn used(&self, children: bool, raw: &fred::clients::Client) -> CpuUsed {
        let client = if children {
            measure::children_cpu_time().saturating_sub(self.children)
        } else {
            measure::cpu_time().saturating_sub(self.own)
        };
        let server = match (self.server, measure::server_cpu_time(raw).await) {
            (Some(before), Some(after)) => Some(after.saturating_sub(before)),
            _ => None,
        };
        CpuUsed { client, server }
    }
}

/// CPU used by the client and the server (`None`: `INFO cpu` did not answer).
#[derive(Clone, Copy, Debug)]
struct CpuUsed {
    client: Duration,
    server: Option<Duration>,
}

impl CpuUsed {
    fn plus(&self, other: &CpuUsed) -> CpuUsed {
        CpuUsed {
            client: self.client + other.client,
            server: self.server.zip(other.server).map(|(a, b)| a + b),
        }
    }

    /// µs per unit of work.
    fn per(&self, units: f64) -> CpuPer {
        let per = |used: Duration| {
            if units > 0.0 {
                used.as_secs_f64() * 1e6 / units
            } else {
                0.0
            }
        };
        CpuPer {
            client_us: per(self.client),
            server_us: self.server.map(per),
        }
    }
}

async fn run_hot(plan: &Plan, url: &str, with_peers: bool) -> Vec<HotRow> {
    let mut rows = Vec::new();
    for &tasks in &plan.hot_tasks {
        let ferrisson = bounded(
            plan.scenario_timeout(),
            ferrisson::hot(url, tasks, plan.warmup, plan.duration),
        )
        .await;
        progress!(
            "hot T={tasks}: ferrisson {}",
            show(&ferrisson, |(hot, _)| report::hot(hot))
        );
        let mut row = HotRow {
            tasks,
            ferrisson,
            spin: None,
            rslock: None,
        };
        if with_peers {
            let limit = plan.baseline_timeout();
            let spin = bounded(limit, peers::spin_hot(url, tasks, plan.duration)).await;
            progress!("hot T={tasks}: spin {}", show(&spin, report::hot));
            let rslock = bounded(limit, peers::rslock_hot(url, tasks, plan.duration)).await;
            progress!("hot T={tasks}: rslock {}", show(&rslock, report::hot));
            (row.spin, row.rslock) = (Some(spin), Some(rslock));
        }
        rows.push(row);
    }
    rows
}

async fn run_waiters(
    plan: &Plan,
    url: &str,
    raw: &fred::clients::Client,
) -> Vec<Result<measure::Waiters, String>> {
    let mut rows = Vec::new();
    for &waiters in &plan.waiters {
        let result = bounded(
            plan.scenario_timeout(),
            ferrisson::waiters(url, raw, waiters, plan.warmup, plan.duration),
        )
        .await
        .map_err(|e| format!("W={waiters}: {e}"));
        progress!(
            "waiters W={waiters}: {}",
            show(&result, |w| format!(
                "{} hand-offs/s, {:.0} B heap / {:.0} B RSS per parked waiter (parked in {:.2} s)",
                report::rate(w.handoffs_per_s),
                w.heap_bytes_per_waiter,
                w.rss_bytes_per_waiter,
                w.park_s
            ))
        );
        rows.push(result);
    }
    rows
}

async fn run_held(
    plan: &Plan,
    url: &str,
    raw: &fred::clients::Client,
) -> Vec<Result<measure::Held, String>> {
    let mut rows = Vec::new();
    for &HeldRun {
        locks,
        watchdog,
        periods,
    } in &plan.held
    {
        let result = bounded(
            plan.scenario_timeout(),
            ferrisson::held(url, raw, locks, watchdog, periods),
        )
        .await
        .map_err(|e| format!("L={locks}: {e}"));
        progress!(
            "held L={locks}: {}",
            show(&result, |h| {
                format!(
                "{:.1} renewal calls/period, CPU {:.2} %, {:.0} B heap / {:.0} B RSS per lock (acquired in {:.2} s)",
                h.renewal_calls_per_period, h.cpu_pct, h.heap_bytes_per_lock, h.rss_bytes_per_lock, h.acquire_s
            )
            })
        );
        rows.push(result);
    }
    rows
}

async fn run_processes(plan: &Plan, url: &str) -> Vec<ProcessesRow> {
    use processes::Contended;
    let mut rows = Vec::new();
    for &(procs, tasks) in &plan.processes {
        let spread = |lock: Contended| async move {
            let limit = match lock {
                Contended::Ferrisson => plan.scenario_timeout(),
                Contended::Spin => plan.baseline_timeout(),
            };
            let run = processes::run(lock, url, procs, tasks, plan.warmup, plan.duration);
            let outcome = bounded(limit, run).await;
            progress!(
                "processes P={procs} × T={tasks}: {} {}",
                lock.name(),
                show(&outcome, report::fleet)
            );
            outcome
        };
        rows.push(ProcessesRow {
            procs,
            tasks,
            ferrisson: spread(Contended::Ferrisson).await,
            spin: spread(Contended::Spin).await,
        });
    }
    rows
}
