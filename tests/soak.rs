//! The mutual-exclusion checker: a bounded soak run with faults (issue 13, section 2).
//!
//! `cargo test --test soak` runs the short variant (a few seconds of real processes and real
//! faults, then the same with the lock deliberately bypassed, which the checker must catch).
//! The long run: `cargo test --release --test soak -- --duration 120s --procs 4 --tasks 8`.
//!
//! The driver starts a `redis-server` (AOF with `appendfsync always`, so a kill -9 loses no
//! acknowledged write) and P worker processes (this binary re-run with `--worker`), each
//! running T tasks that take one of a few locks with `try_lock_within`, hold it for a few
//! milliseconds and release it. Meanwhile the driver injects faults at random: `CLIENT KILL`
//! of the workers' pub/sub and command connections, `DEBUG SLEEP`, SIGSTOP/SIGCONT of the
//! server, kill -9 and restart of the server on the same port, and SIGSTOP of a worker for
//! longer than its lease.
//!
//! Every critical section is recorded as (lock, owner, start, end) by the host's realtime
//! clock, which is the server's clock (every process and the server run on this machine),
//! with whether the holder's guard said the lease was lost (`is_lost()`) by the section's
//! end. The checker then verifies:
//! * **overlaps**: no two sections of one lock overlap, except where the earlier one ended with
//!   its holder told that the lease was lost (the documented pause class: a holder paused past
//!   its lease; it learns of the loss as soon as it runs again), or where the later one's holder
//!   was told, as it entered, that its lease was lost and the driver had frozen its process
//!   since its acquire began (the same class with the frozen holder entering last: frozen after
//!   the library handed it the lock). A holder asks right after its
//!   section's end; one whose process stalled before the answer "lost" came cannot say when it
//!   knew, and its section is not judged (counted as such);
//! * **hung waiters**: every `try_lock_within(wait)` returned within its bound plus a second (a
//!   wait of a worker while the driver froze that worker's process is not judged), and every
//!   worker exited;
//! * **leaked locks**: once every worker is gone, no lock key remains after a lease.
//!
//! With `--bypass`, one task of each worker sometimes enters the section without the lock; the
//! checker must then report overlaps (outside the pause class), which shows that it can fail.
//! With `--silent`, one task of each worker sometimes frees its lock with a bare `DEL`, which
//! publishes nothing; the hang detector must then report waiters parked on the free lock
//! (liveness faults), which shows that it can fail.

#[path = "it/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferrisson::{Config, Owner, WhenUnavailable};
use fred::prelude::*;
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use support::liveness::watch_acquire;
use support::{fault, RedisServer};

/// The watchdog timeout of the workers: short, so that a paused worker loses its lease and
/// renewals happen often.
const WATCHDOG: Duration = Duration::from_millis(1000);
/// How long after a section's end its holder may learn of a loss for the loss to count as
/// known at the end (µs): a round of the runtime, far less than any freeze the driver causes.
const TOLD_LATE_US: u64 = 50_000;
/// The wait bound of every acquire.
const WAIT: Duration = Duration::from_millis(1500);
/// How late an acquire may return after its bound before it counts as hung.
const WAIT_SLACK: Duration = Duration::from_secs(1);
/// When a waiting acquire's lock is looked at by the hang detector (`support::liveness`).
const LIVENESS_BOUND: Duration = Duration::from_millis(700);
/// How long after a fault ends its effects may still excuse a waiter parked on a free lock (a
/// killed subscriber reconnects and then wakes every waiter; a restarted server reloads).
const RECOVERY: Duration = Duration::from_millis(1500);
/// The lease of the `--silent` self-check's silently freed locks: longer than any wait, so that
/// their waiters' TTL bound does not end their wait first.
const SILENT_LEASE: Duration = Duration::from_secs(5);
/// The fault-free end of every run: waits there are judged by the hang detector.
const QUIET: Duration = Duration::from_millis(2500);

#[derive(Clone, Debug)]
struct Options {
    duration: Duration,
    procs: usize,
    tasks: usize,
    locks: usize,
    bypass: bool,
    silent: bool,
}

/// One line of a worker's report.
#[derive(Serialize, Deserialize, Debug)]
#[serde(tag = "kind")]
enum Record {
    /// A critical section: times in µs since the Unix epoch. `lost`: the holder's guard said
    /// the lease was lost when asked at `end`; `told_late`: it said so, but was asked well
    /// after `end` (its process stalled in between), so when it knew is not known.
    Section {
        lock: usize,
        owner: String,
        start: u64,
        end: u64,
        lost: bool,
        told_late: bool,
        /// The holder's guard said the lease was lost already when asked right after `start`:
        /// the holder was frozen between the acquire and its section (the pause class again,
        /// with the frozen holder entering last).
        #[serde(default)]
        lost_at_start: bool,
        /// When its acquire was asked for (µs since the Unix epoch).
        #[serde(default)]
        asked: u64,
        bypass: bool,
        /// How the section's acquire went (`Acquisition`), and how its release ended: for the
        /// description of an overlap.
        #[serde(default)]
        how: String,
    },
    /// How long an acquire took and how it ended (`acquired`, `busy`, `error`).
    /// An acquire by worker process `worker`, started at `start` (µs since the Unix epoch).
    Wait {
        worker: usize,
        start: u64,
        ms: u64,
        outcome: String,
    },
    /// An acquire by worker `worker`, started at `start`, still waiting at `at` (µs since the
    /// Unix epoch) while its lock was seen free twice (`support::liveness`), with the worker
    /// client's local state read then.
    Liveness {
        worker: usize,
        lock: usize,
        start: u64,
        at: u64,
        local: String,
    },
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

fn parse_duration(text: &str) -> Duration {
    let text = text.trim();
    let (number, scale) = match text.strip_suffix("ms") {
        Some(ms) => (ms, 1),
        None => (text.trim_end_matches('s'), 1000),
    };
    let number: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("bad duration {text}"));
    Duration::from_millis(number * scale)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        worker(&args[1..]);
        return;
    }
    let value = |name: &str| {
        args.iter()
            .position(|arg| arg == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    // `cargo test <filter>` passes the filter to every test binary: run only if it names us.
    let filters: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, arg)| {
            !arg.starts_with('-')
                && (*i == 0 || !args[i - 1].starts_with("--") || args[i - 1] == "--nocapture")
        })
        .map(|(_, arg)| arg)
        .collect();
    if !filters.is_empty()
        && !filters
            .iter()
            .any(|filter| "soak".contains(filter.as_str()))
    {
        println!("soak: skipped (filtered out)");
        println!("0 passed, 0 failed");
        return;
    }
    let long = value("--duration").is_some();
    let options = Options {
        duration: value("--duration").map_or(Duration::from_secs(8), |d| parse_duration(&d)),
        procs: value("--procs").map_or(3, |n| n.parse().expect("--procs N")),
        tasks: value("--tasks").map_or(3, |n| n.parse().expect("--tasks N")),
        locks: value("--locks").map_or(2, |n| n.parse().expect("--locks N")),
        bypass: args.iter().any(|arg| arg == "--bypass"),
        silent: args.iter().any(|arg| arg == "--silent"),
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let mut failed = 0;
    let mut passed = 0;
    let mut runs = vec![options.clone()];
    if !long && !options.bypass && !options.silent {
        // The self-checks: the same checker must catch a lock that is bypassed, and waiters
        // left parked on a lock freed without a message.
        runs.push(Options {
            duration: Duration::from_secs(3),
            bypass: true,
            ..options.clone()
        });
        runs.push(Options {
            duration: Duration::from_secs(3),
            silent: true,
            ..options
        });
    }
    for run in runs {
        let report = runtime.block_on(drive(&run));
        println!("{}", report.summary());
        let ok = if run.bypass {
            report.violations > 0
        } else if run.silent {
            report.liveness > 0
        } else {
            report.violations == 0 && report.hung == 0 && report.liveness == 0 && report.leaked == 0
        };
        if ok {
            passed += 1;
        } else {
            failed += 1;
            println!(
                "soak{}: FAILED",
                if run.bypass {
                    " --bypass (the checker missed the bypassed sections)"
                } else if run.silent {
                    " --silent (the hang detector missed the waiters of silently freed locks)"
                } else {
                    ""
                }
            );
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}

/// What one run found.
#[derive(Default, Debug)]
struct Report {
    acquisitions: usize,
    busy: usize,
    errors: usize,
    faults: BTreeMap<&'static str, usize>,
    violations: usize,
    /// The first overlap outside the pause class, as the checker describes it.
    first_violation: Option<String>,
    /// Sections whose holder was told of a loss only well after their end (not judged).
    unjudged: usize,
    pause_class: usize,
    /// Of them, overlaps by a holder told as it entered that its lease was lost.
    entered_lost: usize,
    max_pause_overlap_ms: u64,
    hung: usize,
    max_wait_ms: u64,
    /// Acquires that waited on a free lock outside any fault's reach (liveness faults).
    liveness: usize,
    /// The first of them, as the checker describes it.
    first_liveness: Option<String>,
    /// Acquires the hang detector flagged within a fault's reach (not judged).
    liveness_excused: usize,
    leaked: usize,
    bypass: bool,
    silent: bool,
}

impl Report {
    fn summary(&self) -> String {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        format!(
            "soak{}: acquisitions={} busy={} errors={} faults={} [{}] overlaps={} (pause class={}, of which entered lost={}, longest window {} ms; sections told of a loss late, not judged: {}) hung={} (longest wait {} ms, outside frozen workers) liveness faults={} (flagged within a fault's reach, not judged: {}) leaked={}{}",
            match (self.bypass, self.silent) {
                (true, _) => " --bypass",
                (_, true) => " --silent",
                _ => "",
            },
            self.acquisitions,
            self.busy,
            self.errors,
            self.faults.values().sum::<usize>(),
            faults.join(" "),
            self.violations,
            self.pause_class,
            self.entered_lost,
            self.max_pause_overlap_ms,
            self.unjudged,
            self.hung,
            self.max_wait_ms,
            self.liveness,
            self.liveness_excused,
            self.leaked,
            self.first_liveness
                .as_ref()
                .map_or(String::new(), |first| format!("; first: {first}")),
        ) + &self
            .first_violation
            .as_ref()
            .map_or(String::new(), |first| format!("; first overlap: {first}"))
    }
}

fn lock_name(lock: usize) -> String {
    format!("soak:lock:{lock}")
}

async fn drive(options: &Options) -> Report {
    let mut server = RedisServer::start_with_args(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        fault::DEBUG_COMMAND[0],
        fault::DEBUG_COMMAND[1],
    ]);
    let url = server.url();
    // A diagnostic aid: `FERRISSON_SOAK_MONITOR=FILE` appends the server's MONITOR stream (every
    // command, scripts' own calls included, stamped by the server's clock) to FILE, across
    // restarts of the server.
    let mut monitor = std::env::var("FERRISSON_SOAK_MONITOR").ok().map(|file| {
        Command::new("bash")
            .args([
                "-c",
                &format!(
                    "while true; do redis-cli -p {} monitor; sleep 0.01; done >> {file} 2>/dev/null",
                    server.port()
                ),
            ])
            .spawn()
            .expect("bash for MONITOR")
    });
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut workers: Vec<(Child, std::thread::JoinHandle<Vec<Record>>)> = (0..options.procs)
        .map(|index| {
            let mut child = Command::new(&exe)
                .args([
                    "--worker",
                    &url,
                    &options.duration.as_millis().to_string(),
                    &options.tasks.to_string(),
                    &options.locks.to_string(),
                    match (options.bypass, options.silent) {
                        (true, _) => "bypass",
                        (_, true) => "silent",
                        _ => "locked",
                    },
                    &index.to_string(),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a worker");
            let stdout = child.stdout.take().expect("the worker's stdout");
            let reader = std::thread::spawn(move || {
                BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .filter_map(|line| serde_json::from_str(&line).ok())
                    .collect()
            });
            (child, reader)
        })
        .collect();

    let mut report = Report {
        bypass: options.bypass,
        silent: options.silent,
        ..Report::default()
    };
    // The driver's own client must outlive the faults it causes.
    let raw = fault::resilient_raw_client(&url, Duration::from_secs(1)).await;
    fault::debug_sleep(&raw, 0.0)
        .await
        .expect("DEBUG SLEEP task")
        .expect("DEBUG is enabled");
    let deadline = Instant::now() + options.duration;
    // (worker, from, to): a frozen process's waits take as long as it is frozen.
    let mut worker_pauses: Vec<(usize, u64, u64)> = Vec::new();
    // (from, to) of every fault: a liveness record within RECOVERY of one is not judged.
    let mut fault_windows: Vec<(u64, u64)> = Vec::new();
    let mut rng = fastrand::Rng::with_seed(now_us());
    // Let the workers connect before the first fault.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while Instant::now() + QUIET < deadline {
        tokio::time::sleep(Duration::from_millis(rng.u64(150..600))).await;
        let fault_from = now_us();
        let fault = match rng.u8(0..6) {
            0 => {
                fault::client_kill(&raw, "pubsub").await;
                "client-kill-pubsub"
            }
            1 => {
                fault::client_kill(&raw, "normal").await;
                "client-kill-normal"
            }
            2 => {
                fault::debug_sleep(&raw, 0.3);
                "debug-sleep"
            }
            3 => {
                server.pause();
                tokio::time::sleep(Duration::from_millis(rng.u64(100..400))).await;
                server.resume();
                "server-pause"
            }
            4 => {
                server.restart(); // kill -9, same port, AOF reloaded
                "server-kill-restart"
            }
            _ => {
                // A holder paused past its lease: its lock may go to another owner meanwhile.
                let worker = rng.usize(..workers.len());
                let child = &workers[worker].0;
                let from = now_us();
                fault::signal_pid(child.id(), Signal::SIGSTOP);
                tokio::time::sleep(WATCHDOG + Duration::from_millis(rng.u64(200..600))).await;
                fault::signal_pid(child.id(), Signal::SIGCONT);
                worker_pauses.push((worker, from, now_us()));
                "worker-pause"
            }
        };
        *report.faults.entry(fault).or_default() += 1;
        // A DEBUG SLEEP goes on after its call returns.
        fault_windows.push((fault_from, now_us() + 300_000));
    }
    // Every worker stops taking locks at its deadline and exits after its last release.
    let mut records = Vec::new();
    for (mut child, reader) in workers.drain(..) {
        let exit = wait_exit(
            &mut child,
            deadline + WAIT + WAIT_SLACK + Duration::from_secs(5),
        );
        if !exit {
            report.hung += 1;
            let _ = child.kill();
            let _ = child.wait();
        }
        records.extend(reader.join().unwrap_or_default());
    }
    check(&records, &worker_pauses, &fault_windows, &mut report);
    // Nothing stays locked once every owner is gone: within a lease (and the settling of
    // calls of unknown outcome, which the exited workers cannot do any more).
    let raw = support::raw_client(&url).await;
    tokio::time::sleep(WATCHDOG + Duration::from_millis(200)).await;
    for lock in 0..options.locks {
        let exists: i64 = raw.exists(lock_name(lock)).await.expect("EXISTS");
        report.leaked += exists as usize;
    }
    if let Some(monitor) = monitor.as_mut() {
        let _ = monitor.kill();
        let _ = monitor.wait();
    }
    drop(server);
    report
}

/// Waits for `child` to exit until `deadline`; false if it did not.
fn wait_exit(child: &mut Child, deadline: Instant) -> bool {
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => return false,
        }
    }
}

/// One critical section of a lock, as the checker sorts them (by start).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Span<'a> {
    start: u64,
    end: u64,
    lost: bool,
    told_late: bool,
    lost_at_start: bool,
    asked: u64,
    owner: &'a str,
    how: &'a str,
}

/// Finds overlapping sections per lock and slow waits.
/// Checks the records; `pauses` are the (worker, from, to) intervals in which a worker process
/// was frozen by the driver: a wait of that worker spanning one is not counted as hung.
/// A liveness record counts unless a fault (or its RECOVERY after it) reaches into it.
fn check(
    records: &[Record],
    pauses: &[(usize, u64, u64)],
    faults: &[(u64, u64)],
    report: &mut Report,
) {
    let mut sections: BTreeMap<usize, Vec<Span>> = BTreeMap::new();
    for record in records {
        match record {
            Record::Section {
                lock,
                owner,
                start,
                end,
                lost,
                told_late,
                lost_at_start,
                asked,
                bypass,
                how,
            } => {
                if !bypass {
                    report.acquisitions += 1;
                }
                if *told_late {
                    report.unjudged += 1;
                }
                sections.entry(*lock).or_default().push(Span {
                    start: *start,
                    end: *end,
                    lost: *lost,
                    told_late: *told_late,
                    lost_at_start: *lost_at_start,
                    asked: *asked,
                    owner,
                    how,
                });
            }
            Record::Wait {
                worker,
                start,
                ms,
                outcome,
            } => {
                let end = start + ms * 1000;
                let frozen = pauses
                    .iter()
                    .any(|(paused, from, to)| paused == worker && *from < end && *to > *start);
                if !frozen {
                    report.max_wait_ms = report.max_wait_ms.max(*ms);
                }
                if !frozen && *ms > (WAIT + WAIT_SLACK).as_millis() as u64 {
                    report.hung += 1;
                }
                match outcome.as_str() {
                    "busy" => report.busy += 1,
                    "error" => report.errors += 1,
                    _ => {}
                }
            }
            Record::Liveness {
                worker,
                lock,
                start,
                at,
                local,
            } => {
                let recovery = RECOVERY.as_micros() as u64;
                let excused = faults
                    .iter()
                    .any(|(from, to)| *from < *at && to + recovery > *start);
                if excused {
                    report.liveness_excused += 1;
                    continue;
                }
                report.liveness += 1;
                report.first_liveness.get_or_insert_with(|| {
                    format!(
                        "worker {worker}'s acquire of {} waited {} ms on the free lock; {local}",
                        lock_name(*lock),
                        (at - start) / 1000
                    )
                });
            }
        }
    }
    for list in sections.values_mut() {
        list.sort_unstable();
        // For each section whose holder was told of the loss: when another owner first
        // entered during it. From then to its end, two owners believed they held the lock.
        let mut first_intruder: BTreeMap<usize, u64> = BTreeMap::new();
        for (i, a) in list.iter().enumerate() {
            // Every later section that starts before `a` ends overlaps it.
            for b in list[i + 1..].iter().take_while(|b| b.start < a.end) {
                if a.owner == b.owner || a.told_late {
                    // One owner (a re-entry cannot happen here, but be exact), or an earlier
                    // holder that learned of its loss too late to know when it was lost.
                    continue;
                }
                // The pause class: the earlier holder `a` lost its lease (it was paused past
                // it) and `b` took the lock meanwhile. A later holder told of a loss excuses
                // nothing: `b` entered while `a` still believed, rightly, that it held the lock.
                // The same class with the paused holder entering last: `b` was frozen after
                // its acquire, past its lease, and was told the lease was lost as it entered.
                // Only when the driver did freeze `b`'s worker between its ask and its start:
                // the library hands out no acquisition whose lease ended before it could be
                // handed out, so a lost guard handed out otherwise is a defect, not this class.
                let b_worker: Option<usize> =
                    b.owner.split(':').next().and_then(|w| w.parse().ok());
                let b_frozen_entering = pauses.iter().any(|(paused, from, to)| {
                    Some(*paused) == b_worker && *from < b.start && *to > b.asked
                });
                if b.lost_at_start && b_frozen_entering {
                    report.pause_class += 1;
                    report.entered_lost += 1;
                } else if a.lost {
                    report.pause_class += 1;
                    let first = first_intruder.entry(i).or_insert(b.start);
                    *first = (*first).min(b.start);
                } else {
                    report.violations += 1;
                    report.first_violation.get_or_insert_with(|| {
                        let worker = a.owner.split(':').next().and_then(|w| w.parse().ok());
                        let frozen = pauses.iter().any(|(paused, from, to)| {
                            Some(*paused) == worker && *from < a.end && *to > a.start
                        });
                        let b_frozen = pauses.iter().any(|(paused, from, to)| {
                            Some(*paused) == b_worker && *from < b.end && *to > b.start
                        });
                        let b_frozen_before = pauses
                            .iter()
                            .filter(|(paused, _, to)| Some(*paused) == b_worker && *to <= b.start)
                            .map(|(_, _, to)| b.start - to)
                            .min();
                        format!(
                            "{} held {}..{} µs (not told lost; its process frozen meanwhile: \
                             {frozen}; {}), {} held {}..{} µs (told lost: {}, late: {}, as it \
                             entered: {}; its process frozen meanwhile: {b_frozen}, last thawed \
                             {:?} µs before its start; {})",
                            a.owner,
                            a.start,
                            a.end,
                            a.how,
                            b.owner,
                            b.start,
                            b.end,
                            b.lost,
                            b.told_late,
                            b.lost_at_start,
                            b_frozen_before,
                            b.how
                        )
                    });
                }
            }
        }
        for (lost, intruder_start) in first_intruder {
            let window_ms = list[lost].end.saturating_sub(intruder_start) / 1000;
            report.max_pause_overlap_ms = report.max_pause_overlap_ms.max(window_ms);
        }
    }
}

/// A worker process: `--worker URL DURATION_MS TASKS LOCKS locked|bypass|silent INDEX`.
fn worker(args: &[String]) {
    let url = args[0].clone();
    let duration = Duration::from_millis(args[1].parse().expect("duration"));
    let tasks: usize = args[2].parse().expect("tasks");
    let locks: usize = args[3].parse().expect("locks");
    let bypass = args[4] == "bypass";
    let silent = args[4] == "silent";
    let index: u64 = args[5].parse().expect("index");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async move {
        let mut config = Config::new(url.clone());
        config.watchdog_timeout = WATCHDOG;
        config.response_timeout = Duration::from_millis(500);
        config.when_unavailable = WhenUnavailable::KeepWaiting;
        let raw = fault::resilient_raw_client(&url, Duration::from_secs(1)).await;
        let client = ferrisson::Client::new(config)
            .await
            .expect("the worker connects");
        let (sender, mut records) = tokio::sync::mpsc::unbounded_channel();
        let deadline = Instant::now() + duration;
        for task in 0..tasks {
            let client = client.clone();
            let raw = raw.clone();
            let sender = sender.clone();
            tokio::spawn(async move {
                let owner = Owner::new();
                let mut rng = fastrand::Rng::with_seed(now_us() ^ (index << 32) ^ task as u64);
                let mut round = 0u64;
                while Instant::now() < deadline {
                    round += 1;
                    let lock_index = rng.usize(..locks);
                    let lock = client.lock(lock_name(lock_index)).with_owner(owner);
                    // The bypassing task enters every third section without the lock.
                    if bypass && task == 0 && round.is_multiple_of(3) {
                        let start = now_us();
                        tokio::time::sleep(Duration::from_millis(rng.u64(5..20))).await;
                        let _ = sender.send(Record::Section {
                            lock: lock_index,
                            owner: format!("{index}:{task}"),
                            start,
                            end: now_us(),
                            lost: false,
                            told_late: false,
                            lost_at_start: false,
                            asked: start,
                            bypass: true,
                            how: "bypass".into(),
                        });
                        continue;
                    }
                    // The silent task takes every third lock with a long lease and frees it
                    // with a bare DEL, which publishes nothing: its waiters stay parked.
                    let silent_round = silent && task == 0 && round.is_multiple_of(3);
                    let asked = Instant::now();
                    let asked_us = now_us();
                    let attempt = async {
                        if silent_round {
                            lock.try_lock_within_with_lease(WAIT, SILENT_LEASE).await
                        } else {
                            lock.try_lock_within(WAIT).await
                        }
                    };
                    let acquired = watch_acquire(
                        attempt,
                        LIVENESS_BOUND,
                        &client,
                        &raw,
                        &lock_name(lock_index),
                    )
                    .await;
                    let acquired = match acquired {
                        Ok(acquired) => acquired,
                        Err(fault) => {
                            let _ = sender.send(Record::Liveness {
                                worker: index as usize,
                                lock: lock_index,
                                start: asked_us,
                                at: now_us(),
                                local: fault.local.to_string(),
                            });
                            continue;
                        }
                    };
                    let ms = asked.elapsed().as_millis() as u64;
                    let outcome = match &acquired {
                        Ok(ferrisson::Attempt::Acquired(_)) => "acquired",
                        Ok(ferrisson::Attempt::Busy) => "busy",
                        Err(_) => "error",
                    };
                    let _ = sender.send(Record::Wait {
                        worker: index as usize,
                        start: asked_us,
                        ms,
                        outcome: outcome.into(),
                    });
                    let Ok(ferrisson::Attempt::Acquired(guard)) = acquired else {
                        tokio::time::sleep(Duration::from_millis(rng.u64(1..10))).await;
                        continue;
                    };
                    let start = now_us();
                    let lost_at_start = guard.is_lost();
                    // Long enough for every other task to be parked on the lock.
                    let hold = if silent_round { 300..400 } else { 1..15 };
                    tokio::time::sleep(Duration::from_millis(rng.u64(hold))).await;
                    // The section ends here, and then the holder asks whether its lease was
                    // lost. Asked before `end`, a freeze of this process between the two
                    // stretched a section whose holder was told nothing across the sections
                    // of the owners let in meanwhile: a false overlap. Asked after, "held" is
                    // exact (the proven end, read from the clock, lies past `end`), and "lost"
                    // is exact unless the process stalled between `end` and the answer: then
                    // the loss may have come in that stall, and the section is not judged.
                    let end = now_us();
                    let lost = guard.is_lost();
                    let told_late = lost && now_us().saturating_sub(end) > TOLD_LATE_US;
                    let acquisition = guard.acquisition();
                    let mut section = Record::Section {
                        lock: lock_index,
                        owner: format!("{index}:{task}"),
                        start,
                        end,
                        lost,
                        told_late,
                        lost_at_start,
                        asked: asked_us,
                        bypass: false,
                        how: format!(
                            "asked at {asked_us} µs, {:?} after {} attempts",
                            acquisition.woken_by, acquisition.attempts
                        ),
                    };
                    if silent_round {
                        let _ = sender.send(section);
                        let _: Result<i64, _> = raw.del(lock_name(lock_index)).await;
                        // No release at all: one would hand the lock to a local waiter.
                        guard.detach();
                        // Let the waiters park on the free lock, unwoken.
                        tokio::time::sleep(LIVENESS_BOUND * 2).await;
                        continue;
                    }
                    let released = guard.unlock().await;
                    if let Record::Section { how, .. } = &mut section {
                        how.push_str(&format!(
                            ", released at {} µs: {}",
                            now_us(),
                            match released {
                                Ok(()) => "ok".to_owned(),
                                Err(err) => format!("{err:?}"),
                            }
                        ));
                    }
                    let _ = sender.send(section);
                }
            });
        }
        drop(sender);
        let mut stdout = std::io::stdout().lock();
        while let Some(record) = records.recv().await {
            if let Ok(line) = serde_json::to_string(&record) {
                let _ = writeln!(stdout, "{line}");
            }
        }
        let _ = stdout.flush();
        // Settle what is in doubt before leaving, within a bound.
        let _ = tokio::time::timeout(Duration::from_secs(3), client.shutdown()).await;
    });
}
