//! Fresh-start stress: a new client, 2 and 3 tasks, lock/unlock pairs on one lock, repeated.
//!
//! Each acquire is bounded; one that waits past the bound while the lock is free is a liveness
//! fault (a lost wake-up), reported with the key's state and fails the test.
//!
//! `STRESS_ROUNDS` (default 40) rounds per task count, `STRESS_PAIRS` (default 200) pairs per
//! task per round.

use crate::support;

use std::time::Duration;

use ferrisson::Owner;
use fred::prelude::*;
use support::RedisServer;

/// Far above any honest wait here (a hand-off takes well under a millisecond), far below the
/// 30 s watchdog bound a lost wake-up waits for.
const BOUND: Duration = Duration::from_secs(5);

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_clients_never_leave_a_waiter_parked_on_a_free_lock() {
    let server = RedisServer::start();
    let raw = support::raw_client(&server.url()).await;
    let rounds = env_or("STRESS_ROUNDS", 40);
    let pairs = env_or("STRESS_PAIRS", 200);
    for tasks in [2usize, 3] {
        for round in 0..rounds {
            // The client is made on a worker thread, as a service makes it: the tasks it
            // spawns then queue behind the ones spawned right after it.
            let url = server.url();
            let name = format!("stress:{tasks}:{round}");
            let lock_name = name.clone();
            let (client, handles) = tokio::spawn(async move {
                let client = ferrisson::Client::connect(&url).await.expect("connect");
                let name = lock_name;
                let handles: Vec<_> = (0..tasks)
                    .map(|_| {
                        let lock = client.lock(&name).with_owner(Owner::new());
                        tokio::spawn(async move {
                            for pair in 0..pairs {
                                match tokio::time::timeout(BOUND, lock.lock()).await {
                                    Ok(guard) => {
                                        guard.expect("lock").unlock().await.expect("unlock")
                                    }
                                    Err(_) => return Err(pair),
                                }
                            }
                            Ok(())
                        })
                    })
                    .collect();
                (client, handles)
            })
            .await
            .expect("round");
            let mut hung = Vec::new();
            for handle in handles {
                if let Err(pair) = handle.await.expect("task") {
                    hung.push(pair);
                }
            }
            if !hung.is_empty() {
                let pttl: i64 = raw.pttl(&name).await.expect("PTTL");
                let holders: std::collections::HashMap<String, i64> =
                    raw.hgetall(&name).await.expect("HGETALL");
                panic!(
                    "T = {tasks}, round {round}: acquires hung past {BOUND:?} at pairs {hung:?}; \
                     the lock: PTTL {pttl}, holders {holders:?}"
                );
            }
            client.shutdown().await;
        }
    }
}
