//! The runnable examples (`cargo run --example NAME`) run against real deployments started
//! here, so that the code the docs point newcomers to keeps working: each must exit 0 and print
//! what it claims to show.

use crate::support;

use std::process::{Command, Output};

use support::cluster::RedisCluster;
use support::sentinel::RedisSentinel;
use support::RedisServer;

/// The example's binary, built if it is not up to date (`support::built`).
fn example(name: &str) -> Command {
    let binary = support::built::example(name);
    let mut command = Command::new(binary);
    command
        .env_remove("REDIS_URL")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1");
    command
}

/// Runs it to the end and returns its output, failing with its stderr if it did not exit 0.
fn run(command: &mut Command) -> (String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("run the example");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    );
    assert!(
        status.success(),
        "{status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

fn assert_lines(output: &str, expected: &[&str]) {
    for line in expected {
        assert!(output.contains(line), "missing {line:?} in:\n{output}");
    }
}

#[test]
fn the_errors_example_provokes_each_typed_error() {
    let server = RedisServer::start();
    let (stdout, _) = run(example("errors").arg(server.url()));
    assert_lines(
        &stdout,
        &[
            "try_lock: Busy",
            "unlock by a non-owner: NotHeld",
            "release of a lost hold: LeaseLost",
            "is_locked on a list: WrongType",
            "lock on a list: WrongType",
            "a 500 µs lease: InvalidArgument",
            "an empty name: InvalidArgument",
            "owner id 0: InvalidArgument",
            "(transient: true)",
        ],
    );
    assert!(!stdout.contains("unexpectedly Ok"), "{stdout}");
}

#[test]
fn the_blocking_example_excludes_threads_and_reenters_on_one() {
    let server = RedisServer::start();
    let (stdout, _) = run(example("blocking").env("REDIS_URL", server.url()));
    assert_lines(
        &stdout,
        &[
            "main thread holds it 2 times",
            "the other thread saw it busy: true",
            "at most 1 thread inside at once",
        ],
    );
}

#[test]
fn the_tracing_example_logs_the_acquisitions_and_the_lost_lease() {
    let server = RedisServer::start();
    let (stdout, stderr) = run(example("tracing").arg(server.url()));
    assert_lines(
        &stdout,
        &["woken by Message", "the holder noticed the loss"],
    );
    assert_lines(&stderr, &["DEBUG", "acquired", "WARN", "lost"]);

    let (_, quiet) = run(example("tracing")
        .arg(server.url())
        .env("RUST_LOG", "ferrisson=warn"));
    assert!(!quiet.contains("DEBUG"), "RUST_LOG is honoured:\n{quiet}");
    assert_lines(&quiet, &["WARN"]);
}

#[tokio::test]
async fn the_cluster_example_locks_across_slots_and_wakes_its_waiter() {
    let cluster = RedisCluster::start(3, 0).await;
    let (stdout, _) = run(example("cluster").arg(cluster.url()));
    assert_lines(
        &stdout,
        &[
            "holding 8 locks across the cluster's slots",
            "the waiter was woken by Message",
        ],
    );
}

#[tokio::test]
async fn the_sentinel_example_locks_on_the_master() {
    let sentinel = RedisSentinel::start().await;
    let (stdout, _) = run(example("sentinel").arg(sentinel.url()));
    assert_lines(
        &stdout,
        &["locked example:sentinel on the master named by the sentinels"],
    );
}

#[cfg(feature = "tls")]
#[test]
fn the_tls_example_locks_with_a_private_ca_and_a_client_certificate() {
    if support::tls::unsupported() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (_server, tls_port, _) = support::tls::tls_server(dir.path());
    let file = |name: &str| dir.path().join(name);
    let (stdout, _) = run(example("tls")
        .arg(format!("rediss://127.0.0.1:{tls_port}"))
        .arg(file("ca.crt"))
        .arg(file("client.crt"))
        .arg(file("client.key")));
    assert_lines(&stdout, &["locked example:tls over TLS (hold count 1)"]);
}

#[cfg(feature = "metrics")]
#[test]
fn the_prometheus_example_renders_the_lock_metrics() {
    let server = RedisServer::start();
    let (stdout, _) = run(example("prometheus").env("REDIS_URL", server.url()));
    assert_lines(
        &stdout,
        &[
            "ferrisson_acquisitions_total{how=\"immediate\"}",
            "ferrisson_acquisitions_total{how=\"reentrant\"}",
            "ferrisson_handoffs_total",
            "ferrisson_acquire_wait_seconds",
            "ferrisson_held_locks 1",
        ],
    );
}
