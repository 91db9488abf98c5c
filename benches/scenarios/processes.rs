//! The processes scenario (issue 14): P worker processes × T tasks each, all on one lock, in one
//! window: ferrisson, and the spin lock of `peers.rs` under the same spread as its baseline.
//!
//! Every worker is this binary run again with [`WORKER`] (the pattern of `tests/soak.rs`). It
//! connects one client (ferrisson: default configuration; spin: one fred client), prints
//! `ready`, and reads from stdin the wall-clock instant at which the window opens, the same for
//! every worker: the driver sends it once all P are connected, a warm-up ahead. Each worker then
//! runs the hot loop of its lock (`ferrisson::hot_on`, `peers::SpinHot::run`: T tasks, each its
//! own owner, lock → unlock with no work inside) on the shared lock, and prints its figures as
//! one JSON line.
//!
//! Per process: acquisitions that returned within the window, and the acquire latency of that
//! process's tasks (p50, p99, max). Together: acquisitions/s (the sum), fairness between
//! processes (min/max of their acquisition counts), and the per-task counts over all processes.
//! Latency percentiles do not merge across processes without the histograms: the table shows
//! the median of the processes' p50s, the worst process's p99, and the overall max. Hand-off
//! latency is not measured: a process cannot see when another one started its release.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::measure::{self, Hot, Start};
use crate::peers::{self, SpinHot};

/// The first argument that makes this binary a worker process of this scenario.
pub const WORKER: &str = "--processes-worker";

/// The locks this scenario runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contended {
    Ferrisson,
    Spin,
}

impl Contended {
    pub fn name(self) -> &'static str {
        match self {
            Contended::Ferrisson => "ferrisson",
            Contended::Spin => "spin",
        }
    }

    fn parse(name: &str) -> Option<Contended> {
        [Contended::Ferrisson, Contended::Spin]
            .into_iter()
            .find(|lock| lock.name() == name)
    }
}

/// What one worker process reports.
#[derive(Serialize, Deserialize)]
struct Figures {
    hot: Hot,
    /// How late the worker learned the window's start, after it had opened (0: in time).
    late_ms: f64,
    /// When each of its acquisitions within the window returned, in µs since it opened.
    acquired_us: Vec<u64>,
}

/// P processes × T tasks on one lock, together (a fleet).
#[derive(Clone, Debug, Serialize)]
pub struct Fleet {
    pub procs: usize,
    pub tasks: usize,
    /// Acquisitions per second, all processes together.
    pub acq_per_s: f64,
    /// Acquisitions within the window, by process.
    pub per_process: Vec<u64>,
    /// Fewest and most acquisitions of one task, over all processes' tasks.
    pub per_task_min: u64,
    pub per_task_max: u64,
    /// The median of the processes' acquire p50s.
    pub p50_us: f64,
    /// The worst process's acquire p99.
    pub p99_us: f64,
    /// The longest acquire of any process.
    pub max_us: f64,
    /// The latest any worker learned the window's start after it opened (0: all in time).
    pub late_ms: f64,
    pub turns: Turns,
}

/// How the lock went round the processes: a turn is a run of consecutive acquisitions (in
/// the window, by the time each returned) by one process.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Turns {
    pub turns: u64,
    /// Acquisitions per turn, mean.
    pub per_turn: f64,
    /// From one acquisition to the next within a turn: p50, p99 in µs.
    pub within_us: [u64; 2],
    /// From the last acquisition of a turn to the first of the next (another process's): p50,
    /// p99 in µs.
    pub switch_us: [u64; 2],
    /// The share of the time from the first acquisition to the last that went to switches.
    pub switch_share: f64,
}

impl Turns {
    /// From every process's acquisition times (µs since the window opened; one clock for all,
    /// the window having opened at one wall-clock instant).
    fn of(by_process: &[&[u64]]) -> Turns {
        let mut all: Vec<(u64, usize)> = by_process
            .iter()
            .enumerate()
            .flat_map(|(process, times)| times.iter().map(move |&at| (at, process)))
            .collect();
        all.sort_unstable();
        let (mut within, mut switch) = (Vec::new(), Vec::new());
        for pair in all.windows(2) {
            let gap = pair[1].0 - pair[0].0;
            if pair[1].1 == pair[0].1 {
                within.push(gap);
            } else {
                switch.push(gap);
            }
        }
        let turns = if all.is_empty() {
            0
        } else {
            switch.len() as u64 + 1
        };
        let span = match (all.first(), all.last()) {
            (Some(first), Some(last)) => last.0 - first.0,
            _ => 0,
        };
        let switch_share = switch.iter().sum::<u64>() as f64 / span.max(1) as f64;
        let tails = |mut gaps: Vec<u64>| {
            gaps.sort_unstable();
            let at = |q: f64| gaps.get(((gaps.len() as f64 - 1.0) * q) as usize).copied();
            [at(0.5).unwrap_or(0), at(0.99).unwrap_or(0)]
        };
        Turns {
            turns,
            per_turn: all.len() as f64 / turns.max(1) as f64,
            within_us: tails(within),
            switch_us: tails(switch),
            switch_share,
        }
    }
}

impl Fleet {
    /// Fairness between processes: fewest / most acquisitions of one process.
    pub fn fairness(&self) -> f64 {
        let min = self.per_process.iter().copied().min().unwrap_or(0);
        let max = self.per_process.iter().copied().max().unwrap_or(0);
        if max == 0 {
            0.0
        } else {
            min as f64 / max as f64
        }
    }
}

/// Runs `procs` worker processes of `tasks` tasks each on one `lock`, for `duration` after a
/// common `warmup`.
pub async fn run(
    lock: Contended,
    url: &str,
    procs: usize,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<Fleet, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let name = match lock {
        Contended::Ferrisson => format!("ferrisson-bench:processes:{procs}x{tasks}"),
        Contended::Spin => format!("{}:processes", peers::key_prefix("spin")),
    };
    let mut workers = Vec::with_capacity(procs);
    for _ in 0..procs {
        let mut child = Command::new(&exe)
            .arg(WORKER)
            .arg(lock.name())
            .arg(url)
            .arg(&name)
            .arg(tasks.to_string())
            .arg(duration.as_millis().to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            // A timeout of the caller drops this future: no worker outlives it.
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start a worker process: {e}"))?;
        let stdout = child.stdout.take().ok_or("a worker without stdout")?;
        workers.push((child, BufReader::new(stdout).lines()));
    }
    for (index, (_, lines)) in workers.iter_mut().enumerate() {
        match lines.next_line().await {
            Ok(Some(line)) if line == "ready" => {}
            other => return Err(format!("worker {index} did not connect: {other:?}")),
        }
    }
    let opens = SystemTime::now() + warmup;
    let micros = opens
        .duration_since(UNIX_EPOCH)
        .map_err(|e| format!("clock before 1970: {e}"))?
        .as_micros();
    for (index, (child, _)) in workers.iter_mut().enumerate() {
        let mut stdin = child.stdin.take().ok_or("a worker without stdin")?;
        stdin
            .write_all(format!("{micros}\n").as_bytes())
            .await
            .map_err(|e| format!("worker {index}: sending the window's start: {e}"))?;
    }
    let mut figures = Vec::with_capacity(procs);
    for (index, (mut child, mut lines)) in workers.into_iter().enumerate() {
        let mut reported = None;
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(outcome) = serde_json::from_str::<Result<Figures, String>>(&line) {
                reported = Some(outcome);
            }
        }
        let status = child.wait().await;
        match reported {
            Some(Ok(f)) => figures.push(f),
            Some(Err(e)) => return Err(format!("worker {index}: {e}")),
            None => {
                return Err(format!(
                    "worker {index} reported nothing (exit: {status:?})"
                ))
            }
        }
    }
    let per_process: Vec<u64> = figures
        .iter()
        .map(|f| (f.hot.acq_per_s * duration.as_secs_f64()).round() as u64)
        .collect();
    let hots = || figures.iter().map(|f| &f.hot);
    Ok(Fleet {
        procs,
        tasks,
        acq_per_s: hots().map(|h| h.acq_per_s).sum(),
        per_process,
        per_task_min: hots().map(|h| h.min_per_task).min().unwrap_or(0),
        per_task_max: hots().map(|h| h.max_per_task).max().unwrap_or(0),
        p50_us: measure::median(hots().map(|h| h.p50_us).collect()),
        p99_us: hots().map(|h| h.p99_us).fold(0.0, f64::max),
        max_us: hots().map(|h| h.max_us).fold(0.0, f64::max),
        late_ms: figures.iter().map(|f| f.late_ms).fold(0.0, f64::max),
        turns: Turns::of(
            &figures
                .iter()
                .map(|f| &f.acquired_us[..])
                .collect::<Vec<_>>(),
        ),
    })
}

/// One connected client of the lock under test.
enum Contender {
    Ferrisson(::ferrisson::Client),
    Spin(SpinHot),
}

impl Contender {
    async fn connect(lock: Contended, url: &str) -> Result<Contender, String> {
        Ok(match lock {
            Contended::Ferrisson => Contender::Ferrisson(crate::ferrisson::connect(url).await?),
            Contended::Spin => Contender::Spin(SpinHot::connect(url).await?),
        })
    }

    async fn hot(
        &self,
        name: &str,
        tasks: usize,
        start: Start,
        duration: Duration,
    ) -> Result<(Hot, Vec<u64>), String> {
        match self {
            Contender::Ferrisson(client) => {
                crate::ferrisson::hot_on(client, name, tasks, start, duration)
                    .await
                    .map(|(hot, extra)| (hot, extra.acquired_us))
            }
            Contender::Spin(spin) => spin.run(name, tasks, start, duration).await,
        }
    }

    async fn close(self) {
        match self {
            Contender::Ferrisson(client) => client.shutdown().await,
            Contender::Spin(spin) => spin.close().await,
        }
    }
}

/// A worker process: `WORKER LOCK URL NAME TASKS DURATION_MS`. Prints `ready` once connected,
/// reads the window's start (µs since the Unix epoch) from stdin, and prints its outcome as one
/// JSON line (`{"Ok": figures}` or `{"Err": message}`). Returns the exit code.
pub fn worker(args: &[String]) -> i32 {
    let outcome = match args {
        [lock, url, name, tasks, duration_ms] => {
            match (
                Contended::parse(lock),
                tasks.parse::<usize>(),
                duration_ms.parse::<u64>(),
            ) {
                (Some(lock), Ok(tasks), Ok(ms)) => tokio::runtime::Runtime::new()
                    .map_err(|e| format!("tokio runtime: {e}"))
                    .and_then(|runtime| {
                        runtime.block_on(work(lock, url, name, tasks, Duration::from_millis(ms)))
                    }),
                _ => Err(format!("bad worker arguments {args:?}")),
            }
        }
        _ => Err(format!("bad worker arguments {args:?}")),
    };
    match serde_json::to_string(&outcome) {
        Ok(line) => {
            println!("{line}");
            0
        }
        Err(e) => {
            eprintln!("worker: cannot report: {e}");
            1
        }
    }
}

async fn work(
    lock: Contended,
    url: &str,
    name: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Figures, String> {
    let contender = Contender::connect(lock, url).await?;
    let outcome = async {
        println!("ready");
        let mut line = String::new();
        BufReader::new(tokio::io::stdin())
            .read_line(&mut line)
            .await
            .map_err(|e| format!("reading the window's start: {e}"))?;
        let micros: u64 = line
            .trim()
            .parse()
            .map_err(|e| format!("bad window start {line:?}: {e}"))?;
        let opens = UNIX_EPOCH + Duration::from_micros(micros);
        let late = SystemTime::now().duration_since(opens).unwrap_or_default();
        let (hot, acquired_us) = contender
            .hot(name, tasks, Start::At(opens), duration)
            .await?;
        Ok(Figures {
            hot,
            late_ms: late.as_secs_f64() * 1e3,
            acquired_us,
        })
    }
    .await;
    contender.close().await;
    outcome
}
