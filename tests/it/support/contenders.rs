//! Contenders for one lock: processes (a test re-runs its own binary, filtered to itself, with
//! an environment variable that makes the copy a contender; each contender prints one
//! `HOLD <numbers...>` line per hold, which the parent collects: [`run`], or
//! [`hold_repeatedly`] + [`assert_holds_never_overlap`]), tasks of one client
//! ([`assert_tasks_never_overlap`]) and acquires dropped while in flight
//! ([`assert_dropped_acquires_leave_no_hold`]).
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn contenders_in_processes_never_overlap() {
//!     if let Some(url) = contenders::child_url() {
//!         let client = ferrisson::Client::connect(&url).await.expect("connect");
//!         let lock = client.spin_lock("x");
//!         contenders::hold_repeatedly(|| async { lock.lock().await.expect("lock") }, |g| g.unlock()).await;
//!         return;
//!     }
//!     let server = RedisServer::start();
//!     let me = support::processes::test_name(module_path!(), "contenders_in_processes_never_overlap");
//!     contenders::assert_holds_never_overlap(&me, &server.url()).await;
//! }
//! ```

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The env variable that makes the test binary a contender process ([`hold_repeatedly`]'s).
const CHILD_URL: &str = "FERRISSON_CONTENDER_URL";
/// Contender processes, and holds per process.
pub const PROCESSES: usize = 3;
pub const HOLDS: usize = 20;

/// The server's URL when this process is a contender.
pub fn child_url() -> Option<String> {
    std::env::var(CHILD_URL).ok()
}

/// The wall clock in microseconds since the epoch: what contenders of one machine compare.
pub fn micros_since_epoch() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_micros()
}

/// Runs `count` copies of this test binary's test `test` (its full name:
/// [`test_name`](super::processes::test_name)), each with `env` set to
/// `url`, waits for all of them and returns the numbers of every `HOLD ` line they printed, in
/// the order of the contenders. Panics when a contender fails.
pub async fn run(test: &str, env: &str, url: &str, count: usize) -> Vec<Vec<u128>> {
    super::processes::contenders(test, env, url, count, "HOLD ")
        .await
        .into_iter()
        .flatten()
        .map(|report| {
            report
                .split(' ')
                .map(|n| n.parse().expect("a number"))
                .collect()
        })
        .collect()
}

/// In a contender: takes the lock [`HOLDS`] times with `acquire`, holds it 1 ms, releases it with
/// `release`, and prints `HOLD <start µs> <end µs>` per hold.
pub async fn hold_repeatedly<G, A, AF, R, RF>(mut acquire: A, mut release: R)
where
    A: FnMut() -> AF,
    AF: Future<Output = G>,
    R: FnMut(G) -> RF,
    RF: Future<Output = ferrisson::Result<()>>,
{
    for _ in 0..HOLDS {
        let guard = acquire().await;
        let start = micros_since_epoch();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let end = micros_since_epoch();
        println!("HOLD {start} {end}");
        release(guard).await.expect("the contender releases");
    }
}

/// The lease of a composite lock's hold in a contender: far longer than any stall of a loaded
/// machine, so that a hold never runs out while its process reports it (the overlap check
/// would count that as two holders; it is a lease that ran out, not the lock failing).
pub const COMPOSITE_LEASE: Duration = Duration::from_secs(10);

/// In a contender: takes a MultiLock or RedLock with `attempt(wait)` (a
/// `try_lock_within_with_lease(wait, COMPOSITE_LEASE)`), in short rounds (a random wait in `waits` ms, so that contenders
/// each holding part of the servers give up soon), until it acquires. Tried again: busy; a
/// part that ran out while the round stalled past its lease of twice the wait (`LeaseLost`
/// when the lease is set); an outage, as a round whose parts got no reply within their share
/// of a short wait on a loaded machine reports. Any other error fails the contender.
pub async fn take_in_short_rounds<G, F, Fut>(waits: std::ops::Range<u64>, mut attempt: F) -> G
where
    F: FnMut(Duration) -> Fut,
    Fut: Future<Output = ferrisson::Result<ferrisson::Attempt<G>>>,
{
    loop {
        let wait = Duration::from_millis(fastrand::u64(waits.clone()));
        match attempt(wait).await {
            Ok(ferrisson::Attempt::Acquired(guard)) => return guard,
            Ok(ferrisson::Attempt::Busy) | Err(ferrisson::Error::LeaseLost { .. }) => {}
            Err(err) if err.is_transient() => {}
            Err(err) => panic!("the contender's acquire: {err:?}"),
        }
    }
}

/// Runs [`PROCESSES`] contenders (this binary running `test`, the caller's full name, against `url`) at
/// once and asserts that every hold was reported and that, sorted by start, each starts after
/// the previous one ended.
pub async fn assert_holds_never_overlap(test: &str, url: &str) {
    let mut holds: Vec<(u128, u128)> = run(test, CHILD_URL, url, PROCESSES)
        .await
        .into_iter()
        .map(|numbers| (numbers[0], numbers[1]))
        .collect();
    assert_eq!(
        holds.len(),
        PROCESSES * HOLDS,
        "every contender reported its holds"
    );
    holds.sort_unstable();
    for pair in holds.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "a hold started at {} before the previous one ended at {}: {holds:?}",
            pair[1].0,
            pair[0].1
        );
    }
}

/// Runs 4 tasks that each take `lock` (a clone each) 20 times with `acquire`, hold it 1 ms and
/// release it with `release`; panics if two tasks ever hold it at once.
pub async fn assert_tasks_never_overlap<L, G, A, AF, R, RF>(lock: L, acquire: A, release: R)
where
    L: Clone + Send + 'static,
    G: Send + 'static,
    A: Fn(L) -> AF + Clone + Send + 'static,
    AF: Future<Output = G> + Send,
    R: Fn(G) -> RF + Clone + Send + 'static,
    RF: Future<Output = ferrisson::Result<()>> + Send,
{
    let inside = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (lock, acquire, release) = (lock.clone(), acquire.clone(), release.clone());
        let inside = Arc::clone(&inside);
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let guard = acquire(lock.clone()).await;
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.store(false, Ordering::SeqCst);
                release(guard).await.expect("unlock");
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task panicked");
    }
}

/// Drops 200 acquires, each by `acquire` of a fresh owner's handle from `handle`, after 0, 10,
/// 20, ... µs (most while their script is in flight, some after they completed), then checks
/// through `raw` that the lock `name` is gone within 3 s: nothing a dropped acquire took stays.
pub async fn assert_dropped_acquires_leave_no_hold<L, G, H, A, AF>(
    raw: &fred::clients::Client,
    name: &str,
    handle: H,
    acquire: A,
) where
    H: Fn(ferrisson::Owner) -> L,
    A: Fn(L) -> AF,
    AF: Future<Output = ferrisson::Result<G>>,
{
    for k in 0..200u64 {
        let attempt = acquire(handle(ferrisson::Owner::new()));
        if let Ok(guard) = tokio::time::timeout(Duration::from_micros(k * 10), attempt).await {
            drop(guard.expect("acquire"));
        }
    }
    super::redis_state::wait_key_gone(raw, name, Duration::from_secs(3)).await;
}
