//! Fresh-start stress: a new client, 2 and 3 tasks, lock/unlock pairs on one lock, repeated.
//!
//! An acquire that waits past a bound while the lock is free is a liveness fault (a lost
//! wake-up, `support::liveness`), reported with the key's state and the client's local state,
//! and fails the test.
//!
//! `STRESS_ROUNDS` (default 30) rounds per task count, `STRESS_PAIRS` (default 100) pairs per
//! task per round: the brief run that CI makes. A longer run:
//! `STRESS_ROUNDS=1000 STRESS_PAIRS=200 cargo test --release --test stress`.

use crate::support;

use std::time::Duration;

use ferrisson::Owner;
use support::liveness::{watch_acquire, LivenessFault};
use support::RedisServer;

/// When an acquire's lock is first looked at (see `support::liveness`): far above any honest
/// wait here (a hand-off takes well under a millisecond), far below the 30 s watchdog bound a
/// lost wake-up waits for.
const BOUND: Duration = Duration::from_secs(1);

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
    let rounds = env_or("STRESS_ROUNDS", 30);
    let pairs = env_or("STRESS_PAIRS", 100);
    let mut acquisitions = 0usize;
    for tasks in [2usize, 3] {
        for round in 0..rounds {
            // The client is made on a worker thread, as a service makes it: the tasks it
            // spawns queue behind the ones spawned right after it.
            let url = server.url();
            let name = format!("stress:{tasks}:{round}");
            let raw = raw.clone();
            let (client, handles) = tokio::spawn(async move {
                let client = ferrisson::Client::connect(&url).await.expect("connect");
                let handles: Vec<_> = (0..tasks)
                    .map(|_| {
                        let lock = client.lock(&name).with_owner(Owner::new());
                        let (client, raw, name) = (client.clone(), raw.clone(), name.clone());
                        tokio::spawn(async move {
                            for _ in 0..pairs {
                                let acquire = lock.lock();
                                let guard = watch_acquire(acquire, BOUND, &client, &raw, &name)
                                    .await?
                                    .expect("lock");
                                guard.unlock().await.expect("unlock");
                            }
                            Ok::<_, LivenessFault>(pairs)
                        })
                    })
                    .collect();
                (client, handles)
            })
            .await
            .expect("round");
            for handle in handles {
                match handle.await.expect("task") {
                    Ok(pairs) => acquisitions += pairs,
                    Err(fault) => panic!("T = {tasks}, round {round}: {fault}"),
                }
            }
            client.shutdown().await;
        }
    }
    assert_eq!(
        acquisitions,
        rounds * pairs * 5,
        "2 + 3 tasks, every pair done"
    );
}

/// The local state names this client's holder, its parked waiters in arrival order and the
/// subscription they share, and is empty again once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_state_shows_the_holds_the_line_and_the_subscription() {
    use ferrisson::inspect::LocalWaiterState;
    let server = RedisServer::start();
    let client = support::connect(&server).await;
    let name = "stress:local-state";
    let holder = client.lock(name).with_owner(Owner::new());
    let guard = holder.lock().await.expect("lock");
    let mut waiters = Vec::new();
    let mut fields = Vec::new();
    for _ in 0..2 {
        let lock = client.lock(name).with_owner(Owner::new());
        fields.push(format!("{}:{}", client.id(), lock.owner().id()));
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await.expect("waiter");
            guard.unlock().await.expect("unlock");
        }));
        // In arrival order: the second lines up after the first is parked.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let state = client.local_state(name);
            if state.line.len() == fields.len()
                && state
                    .subscriptions
                    .first()
                    .is_some_and(|s| s.parked == fields.len())
            {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "not parked: {state}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let state = client.local_state(name);
    assert_eq!(state.name, name);
    assert_eq!(state.holds.len(), 1);
    assert_eq!(state.holds[0].field, guard.holder_field());
    assert_eq!(state.holds[0].count, 1);
    assert!(!state.holds[0].lost);
    let line: Vec<_> = state.line.iter().map(|w| w.field.clone()).collect();
    assert_eq!(line, fields, "head first, in arrival order");
    assert!(
        state
            .line
            .iter()
            .all(|w| w.state == LocalWaiterState::Parked),
        "{state}"
    );
    assert_eq!(state.subscriptions.len(), 1, "{state}");
    let sub = &state.subscriptions[0];
    assert_eq!(sub.channel, format!("redisson_lock__channel:{{{name}}}"));
    assert!(sub.confirmed);
    assert_eq!((sub.waiters, sub.parked, sub.banked_wakeups), (2, 2, 0));
    let shown = state.to_string();
    assert!(
        shown.contains("parked") && shown.contains(&fields[0]),
        "{shown}"
    );
    guard.unlock().await.expect("unlock");
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiters are served")
            .expect("waiter task");
    }
    let state = client.local_state(name);
    assert!(state.holds.is_empty() && state.line.is_empty(), "{state}");
}
