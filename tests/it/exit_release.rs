//! A process that leaves `main` with its guards still held ends with its locks free: the
//! releases of guards dropped as the runtime shuts down are not lost with it (issue 47). The
//! child is `tests/bin/exit_probe.rs`, which takes a lock of every kind (a re-entered reentrant
//! lock, a leased one, fair, spin, fenced, non-reentrant, write, read, token, a permit of a
//! permit-expirable semaphore, and one held by a spawned task) and leaves `main` as told.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fred::prelude::*;

use crate::support::RedisServer;

/// Runs of the probe per way out of `main` and runtime flavour.
const RUNS: usize = 20;
/// The probe's response timeout: the bound on what a release at exit may hold the process up.
const BOUND: Duration = Duration::from_secs(2);

fn probe(url: &str, prefix: &str, how: &str, flavor: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_exit-probe"));
    command
        .args([url, prefix, how, flavor])
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// What a run may leave behind: the semaphore's counter with its one permit back, and the fenced
/// lock's token counter. Anything else is a lock (or a queue, or a permit) left held.
async fn stranded(redis: &Client, prefix: &str) -> Vec<String> {
    let keys: Vec<String> = redis
        .custom(fred::cmd!("KEYS"), vec!["*"])
        .await
        .expect("KEYS");
    let mut left = Vec::new();
    for key in keys {
        if key == format!("redisson_lock_token:{{{prefix}:fenced}}") {
            continue;
        }
        if key == format!("{prefix}:permits") {
            let permits: String = redis.get(&key).await.expect("GET");
            if permits == "1" {
                continue;
            }
            left.push(format!("{key} = {permits} (one permit was set)"));
            continue;
        }
        let ttl: i64 = redis.pttl(&key).await.expect("PTTL");
        left.push(format!("{key} (PTTL {ttl} ms)"));
    }
    left
}

/// Runs the probe [`RUNS`] times each with both runtime flavours, leaving `main` by `how`
/// (which exits with `code`), and checks after each run that nothing is held.
async fn every_key_is_free_after(how: &str, code: i32) {
    let server = RedisServer::start();
    let redis = crate::support::raw_client(&server.url()).await;
    let mut failures = Vec::new();
    for flavor in ["multi", "current"] {
        for run in 0..RUNS {
            let prefix = format!("{how}-{flavor}-{run}");
            let started = Instant::now();
            let output = probe(&server.url(), &prefix, how, flavor)
                .output()
                .expect("the exit probe runs");
            let took = started.elapsed();
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                stdout.starts_with("held"),
                "run {prefix}: the probe did not take its locks: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            assert_eq!(
                output.status.code(),
                Some(code),
                "run {prefix}: exit status; stderr: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let left = stranded(&redis, &prefix).await;
            if !left.is_empty() {
                failures.push(format!("run {prefix} ({took:?}): {}", left.join(", ")));
            }
            redis.flushall::<()>(false).await.expect("FLUSHALL");
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs left locks held after the process ended:\n{}",
        failures.len(),
        2 * RUNS,
        failures.join("\n")
    );
}

#[tokio::test]
async fn returning_from_main_with_guards_held_leaves_every_lock_free() {
    every_key_is_free_after("return", 0).await;
}

#[tokio::test]
async fn an_error_out_of_main_with_guards_held_leaves_every_lock_free() {
    every_key_is_free_after("error", 1).await;
}

#[tokio::test]
async fn a_panic_out_of_main_with_guards_held_leaves_every_lock_free() {
    every_key_is_free_after("panic", 101).await;
}

#[tokio::test]
async fn guards_dropped_after_shutdown_leave_every_lock_free() {
    every_key_is_free_after("shutdown", 0).await;
}

/// With the server stopped (SIGSTOP: connections hang rather than fail), the releases at exit
/// cannot be sent: the process still ends, held up by at most the bound (its response timeout)
/// plus the process's own start and end.
#[tokio::test]
async fn a_server_that_cannot_answer_holds_the_exit_up_by_at_most_the_bound() {
    use std::io::Write;
    let server = RedisServer::start();
    let pid = nix::unistd::Pid::from_raw(server.pid().expect("server pid") as i32);
    for flavor in ["multi", "current"] {
        let mut child = probe(&server.url(), flavor, "stalled", flavor)
            .stdin(Stdio::piped())
            .spawn()
            .expect("the exit probe starts");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut held = [0u8; 4];
        std::io::Read::read_exact(&mut stdout, &mut held).expect("the probe says it holds");
        assert_eq!(&held, b"held");
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
        let started = Instant::now();
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b"go\n")
            .expect("tell the probe to return");
        // Bounded: a hang fails here instead of hanging the suite.
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if started.elapsed() > BOUND * 10 {
                let _ = child.kill();
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).ok();
                panic!(
                    "{flavor}: the probe did not end within {:?} of returning",
                    BOUND * 10
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = started.elapsed();
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
        assert!(status.success(), "{flavor}: {status}");
        // The bound, and up to two more seconds for the process to end on a loaded machine.
        assert!(
            took < BOUND + Duration::from_secs(2),
            "{flavor}: the exit took {took:?}, past the bound of {BOUND:?}"
        );
        // It did wait for the release (a process that does not try would end at once).
        assert!(
            took >= BOUND - Duration::from_millis(100),
            "{flavor}: the exit took {took:?}: it did not wait for its releases"
        );
    }
}

/// The exit connection is opened when first needed; if the server does not answer then, what
/// that round handed over is kept and a later round (a bound after it) connects again and
/// sends it: a guard dropped after `shutdown` while the server was stopped is released once a
/// later guard's drop finds it back.
#[tokio::test]
async fn releases_at_exit_that_found_no_connection_go_out_with_the_next_round() {
    use std::io::{BufRead, Write};
    let server = RedisServer::start();
    let redis = crate::support::raw_client(&server.url()).await;
    let pid = nix::unistd::Pid::from_raw(server.pid().expect("server pid") as i32);
    let mut child = probe(&server.url(), "retry", "retry", "multi")
        .stdin(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the exit probe starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next_line = |expected: &str| {
        let line = lines
            .next()
            .expect("a line from the probe")
            .expect("stdout");
        assert_eq!(line, expected, "the probe's steps");
    };
    next_line("held");
    next_line("shut");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
    let stopped = Instant::now();
    writeln!(stdin, "go").expect("drop the first guard");
    next_line("first");
    let first_took = stopped.elapsed();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
    // The first round waited for its connection, and gave up by its bound.
    assert!(
        first_took >= BOUND - Duration::from_millis(100) && first_took < BOUND * 3,
        "the first round took {first_took:?}, the bound is {BOUND:?}"
    );
    let leased: i64 = redis.pttl("retry:leased").await.expect("PTTL");
    assert!(
        leased > 0,
        "the leased lock is still held while its release found no connection (PTTL {leased})"
    );
    // A hand-over within a bound of the round that gave up is not held up (the drops at the
    // end of `main` are held up by one bound in all): the next round comes after that.
    std::thread::sleep(BOUND + Duration::from_millis(200));
    writeln!(stdin, "go").expect("drop the second guard");
    next_line("second");
    // Both guards' releases have run by the time the second drop returned.
    for key in ["retry:leased", "retry:fair"] {
        let exists: i64 = redis.exists(key).await.expect("EXISTS");
        assert_eq!(exists, 0, "`{key}` is free after the second round");
    }
    let status = child.wait().expect("the probe ends");
    assert!(status.success(), "{status}");
    let left = stranded(&redis, "retry").await;
    assert!(left.is_empty(), "left held after exit: {}", left.join(", "));
}
