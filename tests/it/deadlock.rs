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
use tokio::time::{sleep, timeout, Instant};

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

/// The environment variable that makes `processes_in_a_ring_*` a contender: `<url> <n>`.
const RING_CHILD: &str = "FERRISSON_DEADLOCK_RING";

/// A contender of a ring in separate processes: takes `<prefix>:<i>`, counts down the ring's
/// latch, waits for every contender to hold its first lock, then waits for `<prefix>:<i+1>`.
/// Prints `OUTCOME acquired`, or `OUTCOME gave-way <steps> <waited ms>`.
async fn ring_contender(prefix: &str) -> bool {
    let Ok(value) = std::env::var(RING_CHILD) else {
        return false;
    };
    let (url, n) = value.split_once(' ').expect("<url> <n>");
    let n: usize = n.parse().expect("n");
    let i: usize = std::env::var(support::processes::CONTENDER_INDEX)
        .expect("index")
        .parse()
        .expect("a number");
    let mut config = Config::new(url);
    config.deadlock_detection = DeadlockDetection::Detect {
        threshold: THRESHOLD,
    };
    let client = connect_with(config).await;
    let held = client
        .lock(format!("{prefix}:{i}"))
        .lock()
        .await
        .expect("first");
    let latch = client.count_down_latch(format!("{prefix}:ready"));
    latch.count_down().await.expect("count down");
    latch
        .wait()
        .await
        .expect("every contender holds its first lock");
    let start = Instant::now();
    let second = client.lock(format!("{prefix}:{}", (i + 1) % n));
    match timeout(Duration::from_secs(20), second.lock()).await {
        Err(_) => panic!("the deadlock was not broken within 20 s"),
        Ok(Ok(guard)) => {
            println!("OUTCOME acquired");
            guard.unlock().await.expect("unlock second");
        }
        Ok(Err(Error::Deadlock { cycle, .. })) => {
            let waited = start.elapsed().as_millis();
            println!("OUTCOME gave-way {} {waited}", cycle.steps.len());
        }
        Ok(Err(err)) => panic!("unexpected error: {err}"),
    }
    held.unlock().await.expect("unlock first");
    client.shutdown().await;
    true
}

/// Runs `n` contenders of `test` in processes of their own on a fresh server; exactly one
/// gives way (naming a cycle of `n` waits), the others acquire, and nothing is left.
async fn processes_in_a_ring(test: &str, prefix: &str, n: usize) {
    let server = RedisServer::start();
    let setup = connect_with(Config::new(server.url())).await;
    let latch = setup.count_down_latch(format!("{prefix}:ready"));
    assert!(latch.try_set_count(n as u64).await.expect("set count"));
    let value = format!("{} {n}", server.url());
    let name = support::processes::test_name(module_path!(), test);
    let reports = support::processes::contenders(&name, RING_CHILD, &value, n, "OUTCOME ").await;
    let outcomes: Vec<&str> = reports
        .iter()
        .map(|lines| lines.first().map(String::as_str).expect("an outcome"))
        .collect();
    let gave_way: Vec<&&str> = outcomes
        .iter()
        .filter(|o| o.starts_with("gave-way"))
        .collect();
    assert_eq!(gave_way.len(), 1, "{outcomes:?}");
    assert_eq!(
        outcomes.iter().filter(|o| **o == "acquired").count(),
        n - 1,
        "{outcomes:?}"
    );
    let parts: Vec<&str> = gave_way[0].split(' ').collect();
    assert_eq!(parts[1], n.to_string(), "the cycle has every contender");
    println!("{n} processes: the victim gave way after {} ms", parts[2]);
    assert_nothing_left(&server, &format!("{prefix}:")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_in_opposite_orders_one_gives_way() {
    const NAME: &str = "two_processes_in_opposite_orders_one_gives_way";
    if ring_contender("pr2").await {
        return;
    }
    processes_in_a_ring(NAME, "pr2", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_in_a_ring_one_gives_way() {
    const NAME: &str = "three_processes_in_a_ring_one_gives_way";
    if ring_contender("pr3").await {
        return;
    }
    processes_in_a_ring(NAME, "pr3", 3).await;
}

/// The edges hash of `client`.
fn edges_key(client: &Client) -> String {
    format!("ferrisson_waits:{{{}}}", client.id())
}

/// Waits (a liveness bound of 10 s) until `client`'s edges hash has `n` waits recorded.
async fn wait_recorded(raw: &fred::clients::Client, client: &Client, n: i64) {
    let key = edges_key(client);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let fields: i64 = raw.hlen(&key).await.expect("HLEN");
        // The `ttl` and `detects` fields come along with the first wait.
        let waits = (fields - 2).max(0);
        if waits == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key} records {waits} waits, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `wait` (a bounded acquire that must end `Busy`, never with a deadlock) while checking,
/// after three thresholds, that `client` finds no deadlock.
async fn busy_without_deadlock<T: std::fmt::Debug>(
    client: &Client,
    wait: impl std::future::Future<Output = ferrisson::Result<ferrisson::Attempt<T>>>,
) {
    let check = async {
        tokio::time::sleep(THRESHOLD * 3).await;
        let found = client.find_deadlocks().await.expect("find_deadlocks");
        assert!(found.is_empty(), "a false cycle: {found:?}");
    };
    let (attempt, ()) = tokio::join!(wait, check);
    let attempt = attempt.expect("no error, no deadlock");
    assert!(attempt.is_busy(), "{attempt:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edges_hash_holds_one_field_per_lasting_wait_with_its_ttl_and_is_gone_after() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let holder = connect_with(detecting(&server)).await;
    let waiter = connect_with(detecting(&server)).await;
    let guard = holder.lock("layout").lock().await.expect("held");
    let owner = ferrisson::Owner::new();
    let lock = waiter.lock("layout").with_owner(owner);
    let waiting = tokio::spawn(async move { lock.lock().await.map(|g| g.detach()) });
    wait_recorded(&raw, &waiter, 1).await;
    let key = edges_key(&waiter);
    let all: std::collections::HashMap<String, String> = raw.hgetall(&key).await.expect("HGETALL");
    let ttl: u64 = all["ttl"].parse().expect("a ttl in ms");
    // Detect { 300 ms }: renewed every 75 ms, a TTL of four renewals but at least 2 s.
    assert_eq!(ttl, 2_000);
    let pttl: i64 = raw.pttl(&key).await.expect("PTTL");
    assert!(pttl > 0 && pttl as u64 <= ttl, "PTTL {pttl}");
    let (field, value) = all
        .iter()
        .find(|(field, _)| *field != "ttl" && *field != "detects")
        .expect("the wait's field");
    let (owner_id, wait_id) = field.split_once(':').expect("<owner id>:<wait id>");
    assert_eq!(owner_id, owner.id().to_string());
    assert!(wait_id.parse::<u64>().is_ok(), "{field}");
    let mut parts = value.splitn(3, ' ');
    let since: u64 = parts.next().and_then(|s| s.parse().ok()).expect("since");
    assert!(since > 1_600_000_000_000, "epoch ms: {since}");
    let holder_field = format!("{}:{}", waiter.id(), owner.id());
    assert_eq!(parts.next(), Some(holder_field.as_str()));
    assert_eq!(parts.next(), Some("layout"));
    // Renewed while the wait lasts: still there after several TTLs.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    // The wait, `ttl`, and `detects` (1: this client breaks deadlocks).
    assert_eq!(raw.hlen::<i64, _>(&key).await.expect("HLEN"), 3);
    let detects: String = raw.hget(&key, "detects").await.expect("HGET");
    assert_eq!(detects, "1");
    guard.unlock().await.expect("unlock");
    waiting.await.expect("join").expect("acquired");
    let deadline = Instant::now() + Duration::from_secs(5);
    while raw.exists::<i64, _>(&key).await.expect("EXISTS") == 1 {
        assert!(
            Instant::now() < deadline,
            "the edge stays after the wait ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_detection_off_nothing_is_written_and_a_deadlock_waits() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let one = connect_with(Config::new(server.url())).await;
    let two = connect_with(Config::new(server.url())).await;
    let a = one.lock("off:a").lock().await.expect("a");
    let b = two.lock("off:b").lock().await.expect("b");
    let wait = Duration::from_millis(1_200);
    let (one_b, two_a) = (one.lock("off:b"), two.lock("off:a"));
    let (x, y) = tokio::join!(one_b.try_lock_within(wait), two_a.try_lock_within(wait));
    assert!(x.expect("no error").is_busy());
    assert!(y.expect("no error").is_busy());
    let keys: Vec<String> = raw
        .custom(fred::cmd!("KEYS"), vec!["ferrisson_waits*"])
        .await
        .expect("KEYS");
    assert!(keys.is_empty(), "{keys:?}");
    assert!(one.find_deadlocks().await.expect("find").is_empty());
    a.unlock().await.expect("unlock");
    b.unlock().await.expect("unlock");
}

/// A new owner of `one` takes `<prefix>:a`, a new owner of `two` takes `<prefix>:b`: each
/// owner with its guard.
async fn cross_holds(
    one: &Client,
    two: &Client,
    prefix: &str,
) -> ((ferrisson::Owner, LockGuard), (ferrisson::Owner, LockGuard)) {
    let mut held = Vec::new();
    for (client, name) in [(one, format!("{prefix}:a")), (two, format!("{prefix}:b"))] {
        let owner = ferrisson::Owner::new();
        let guard = client
            .lock(&name)
            .with_owner(owner)
            .lock()
            .await
            .expect("held");
        held.push((owner, guard));
    }
    let second = held.pop().expect("two holds");
    (held.pop().expect("two holds"), second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_mode_fails_nobody_and_find_deadlocks_names_the_cycle_and_its_youngest_wait() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let record = |server: &RedisServer| {
        let mut config = Config::new(server.url());
        config.deadlock_detection = DeadlockDetection::Record {
            after: Duration::from_millis(50),
        };
        config
    };
    let one = connect_with(record(&server)).await;
    let two = connect_with(record(&server)).await;
    let observer = connect_with(Config::new(server.url())).await;
    // Explicit owners: each holds one lock and waits for the other from another task.
    let ((owner_one, a), (owner_two, b)) = cross_holds(&one, &two, "rec").await;
    let wait = Duration::from_millis(2_500);
    let first = tokio::spawn({
        let lock = one.lock("rec:b").with_owner(owner_one);
        async move { lock.try_lock_within(wait).await.map(|a| a.is_busy()) }
    });
    wait_recorded(&raw, &one, 1).await;
    let second = tokio::spawn({
        let lock = two.lock("rec:a").with_owner(owner_two);
        async move { lock.try_lock_within(wait).await.map(|a| a.is_busy()) }
    });
    wait_recorded(&raw, &two, 1).await;
    let found = observer.find_deadlocks().await.expect("find_deadlocks");
    assert_eq!(found.len(), 1, "{found:?}");
    let cycle = &found[0];
    let mut locks: Vec<&str> = cycle.steps.iter().map(|s| s.lock.as_str()).collect();
    locks.sort();
    assert_eq!(locks, ["rec:a", "rec:b"]);
    // The youngest wait is the second one's (`two` waiting for `rec:a`).
    assert_eq!(cycle.victim().lock, "rec:a");
    assert!(cycle.victim().owner.starts_with(two.id()));
    let waits = observer.recorded_waits().await.expect("recorded_waits");
    assert_eq!(waits.len(), 2);
    assert_eq!(waits[0].lock, "rec:b", "oldest first");
    // Record mode breaks nothing: both bounded waits run out.
    assert!(first.await.expect("join").expect("no deadlock error"));
    assert!(second.await.expect("join").expect("no deadlock error"));
    a.unlock().await.expect("unlock");
    b.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_mixed_modes_the_detecting_clients_wait_gives_way_though_it_is_older() {
    // `one` detects, `two` only records its waits. `two`'s wait is the younger, but a client
    // that only records never fails a wait: so `one`'s wait gives way, and `two` gets its lock.
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let one = connect_with(detecting(&server)).await;
    let mut record = Config::new(server.url());
    record.deadlock_detection = DeadlockDetection::Record {
        after: Duration::from_millis(50),
    };
    let two = connect_with(record).await;
    let ((owner_one, a), (owner_two, b)) = cross_holds(&one, &two, "mix").await;
    let first = tokio::spawn({
        let lock = one.lock("mix:b").with_owner(owner_one);
        async move { lock.try_lock_within(Duration::from_secs(20)).await }
    });
    wait_recorded(&raw, &one, 1).await;
    // Started after `one`'s wait was written: the younger by far more than a clock's tick.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = tokio::spawn({
        let lock = two.lock("mix:a").with_owner(owner_two);
        async move { lock.try_lock_within(Duration::from_secs(20)).await }
    });
    match timeout(Duration::from_secs(20), first)
        .await
        .expect("the deadlock is broken")
        .expect("join")
    {
        Err(Error::Deadlock { name, cycle }) => {
            assert_eq!(name, "mix:b");
            assert_eq!(cycle.steps.len(), 2, "{cycle}");
            assert!(cycle.victim().owner.starts_with(one.id()), "{cycle:?}");
            assert!(cycle.victim().detects);
            let other = cycle
                .steps
                .iter()
                .find(|step| step.owner.starts_with(two.id()))
                .expect("two's wait in the cycle");
            assert!(!other.detects);
            assert!(other.since_ms > cycle.victim().since_ms, "{cycle:?}");
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
    // `one` lets go of `mix:a`, which `two` was waiting for.
    a.unlock().await.expect("unlock a");
    let acquired = timeout(Duration::from_secs(20), second)
        .await
        .expect("two gets mix:a")
        .expect("join")
        .expect("no error")
        .acquired()
        .expect("acquired");
    acquired.unlock().await.expect("unlock");
    b.unlock().await.expect("unlock b");
    assert_nothing_left(&server, "mix").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_wait_in_a_deadlock_gives_way_too() {
    let server = RedisServer::start();
    let one = connect_with(detecting(&server)).await;
    let two = connect_with(detecting(&server)).await;
    // Explicit owners: each holds one lock and waits for the other from another task.
    let (first, second) = (ferrisson::Owner::new(), ferrisson::Owner::new());
    let a = one.lock("bd:a").with_owner(first).lock().await.expect("a");
    let b = two.lock("bd:b").with_owner(second).lock().await.expect("b");
    let older = tokio::spawn({
        let lock = one.lock("bd:b").with_owner(first);
        async move {
            lock.try_lock_within(Duration::from_secs(30))
                .await
                .map(|a| a.is_busy())
        }
    });
    support::wait_waits_recorded(&one, 1).await;
    let younger = two
        .lock("bd:a")
        .with_owner(second)
        .try_lock_within(Duration::from_secs(30))
        .await;
    assert!(
        matches!(&younger, Err(Error::Deadlock { name, .. }) if name == "bd:a"),
        "{younger:?}"
    );
    b.unlock().await.expect("the victim releases");
    assert!(
        !older.await.expect("join").expect("acquired"),
        "the older wait proceeds"
    );
    a.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_leaves_no_edge() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let holder = connect_with(detecting(&server)).await;
    let waiter = connect_with(detecting(&server)).await;
    let guard = holder.lock("cancel").lock().await.expect("held");
    let lock = waiter.lock("cancel");
    let waiting = tokio::spawn(async move { lock.lock().await.map(|g| g.detach()) });
    wait_recorded(&raw, &waiter, 1).await;
    waiting.abort();
    assert!(waiting.await.expect_err("aborted").is_cancelled());
    wait_recorded(&raw, &waiter, 0).await;
    assert_eq!(
        raw.exists::<i64, _>(&edges_key(&waiter))
            .await
            .expect("EXISTS"),
        0
    );
    // And a wait dropped by its own timeout.
    let lock = waiter.lock("cancel");
    let dropped = timeout(THRESHOLD * 2, lock.lock()).await;
    assert!(dropped.is_err(), "still held");
    wait_recorded(&raw, &waiter, 0).await;
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_holder_is_no_cycle() {
    let server = RedisServer::start();
    let one = connect_with(detecting(&server)).await;
    let two = connect_with(detecting(&server)).await;
    let lock = one.lock("re:x");
    let first = lock.lock().await.expect("x");
    let again = lock.lock().await.expect("x again: re-entered");
    assert_eq!(lock.hold_count().await.expect("count"), 2);
    busy_without_deadlock(&two, two.lock("re:x").try_lock_within(THRESHOLD * 4)).await;
    again.unlock().await.expect("unlock");
    first.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_downgrade_is_no_cycle() {
    let server = RedisServer::start();
    let one = connect_with(detecting(&server)).await;
    let two = connect_with(detecting(&server)).await;
    let rw = one.read_write_lock("rw:d");
    let write = rw.write_lock().lock().await.expect("write");
    // Another client's reader waits for the writer (a wait of at least three thresholds).
    let reader = tokio::spawn({
        let rw = two.read_write_lock("rw:d");
        async move { rw.read_lock().try_lock_within(THRESHOLD * 4).await }
    });
    tokio::time::sleep(THRESHOLD * 2).await;
    // The writer downgrades: takes a read hold, then lets the write one go. (As Redisson's,
    // that release publishes nothing, so the reader may see it only at its next retry.)
    let read = rw.read_lock().lock().await.expect("downgrade");
    assert!(two.find_deadlocks().await.expect("find").is_empty());
    write.unlock().await.expect("unlock write");
    let attempt = reader.await.expect("join").expect("no deadlock error");
    if let Some(theirs) = attempt.acquired() {
        theirs.unlock().await.expect("unlock");
    }
    // A writer of the other client now waits for the downgraded reader.
    busy_without_deadlock(
        &two,
        two.read_write_lock("rw:d")
            .write_lock()
            .try_lock_within(THRESHOLD * 4),
    )
    .await;
    read.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_queue_is_no_cycle() {
    let server = RedisServer::start();
    let holder = connect_with(detecting(&server)).await;
    let guard = holder.fair_lock("fair:q").lock().await.expect("held");
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let client = connect_with(detecting(&server)).await;
        waiters.push(tokio::spawn(async move {
            let guard = client.fair_lock("fair:q").lock().await?;
            guard.unlock().await?;
            client.shutdown().await;
            Ok::<_, Error>(())
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(THRESHOLD * 3).await;
    assert!(holder.find_deadlocks().await.expect("find").is_empty());
    assert_eq!(holder.recorded_waits().await.expect("waits").len(), 3);
    guard.unlock().await.expect("unlock");
    for waiter in waiters {
        waiter
            .await
            .expect("join")
            .expect("every queued waiter gets its turn");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_wait_records_nothing() {
    let server = RedisServer::start();
    let one = connect_with(detecting(&server)).await;
    let two = connect_with(detecting(&server)).await;
    let semaphore = one.semaphore("sem:d");
    assert!(semaphore.try_set_permits(1).await.expect("set"));
    let permit = semaphore.acquire(1).await.expect("the one permit");
    // `one` also holds a lock `two` will want; `two` waits for the permit.
    let x = one.lock("sem:x").lock().await.expect("x");
    let waiting = two
        .semaphore("sem:d")
        .try_acquire_for(1, THRESHOLD * 4)
        .await;
    assert!(waiting.expect("no error").is_busy());
    assert!(two.recorded_waits().await.expect("waits").is_empty());
    x.unlock().await.expect("unlock");
    drop(permit);
}

/// Writes, as Java Redisson does, a hold of `name` by a Java client's thread (`<uuid>:<id>`).
async fn java_hold(raw: &fred::clients::Client, name: &str, holder: &str) {
    let _: () = raw.hset(name, (holder, 1)).await.expect("HSET");
    let _: () = raw.pexpire(name, 30_000, None).await.expect("PEXPIRE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_written_holder_that_does_not_wait_is_no_cycle() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(detecting(&server)).await;
    let java = "3f8c8a4e-4c4b-4b4e-9a8e-1d2c3b4a5f60:77";
    java_hold(&raw, "java:b", java).await;
    let a = client.lock("java:a").lock().await.expect("a");
    // The Java thread would wait for `java:a` in a real deadlock; it records no edge.
    busy_without_deadlock(
        &client,
        client.lock("java:b").try_lock_within(THRESHOLD * 4),
    )
    .await;
    a.unlock().await.expect("unlock");
}

/// Writes the edges hash of a client `id` that records `owner` (of it) waiting for `lock`
/// since `since_ms`, with `ttl` in its field and `pttl` left.
async fn foreign_edges(
    raw: &fred::clients::Client,
    id: &str,
    owner: u64,
    lock: &str,
    ttl: u64,
    pttl: u64,
) {
    let key = format!("ferrisson_waits:{{{id}}}");
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        - 5_000;
    let value = format!("{since} {id}:{owner} {lock}");
    let _: () = raw
        .hset(
            &key,
            [
                (format!("{owner}:1"), value),
                ("ttl".into(), ttl.to_string()),
            ],
        )
        .await
        .expect("HSET");
    let _: () = raw.pexpire(&key, pttl as i64, None).await.expect("PEXPIRE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_edge_of_a_stopped_client_is_ignored_and_a_live_one_closes_the_cycle() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(detecting(&server)).await;
    let id = "0d7a3e2c-1111-4b4e-9a8e-1d2c3b4a5f60";
    java_hold(&raw, "st:b", &format!("{id}:9")).await;
    let a = client.lock("st:a").lock().await.expect("a");
    // A client that stopped renewing: 30 s TTL in its field, 5 s left.
    foreign_edges(&raw, id, 9, "st:a", 30_000, 5_000).await;
    busy_without_deadlock(&client, client.lock("st:b").try_lock_within(THRESHOLD * 4)).await;
    // The same edge, renewed just now: a cycle, whose youngest wait is ours.
    foreign_edges(&raw, id, 9, "st:a", 30_000, 30_000).await;
    let outcome = client
        .lock("st:b")
        .try_lock_within(Duration::from_secs(20))
        .await;
    match outcome {
        Err(Error::Deadlock { name, cycle }) => {
            assert_eq!(name, "st:b");
            assert_eq!(cycle.steps.len(), 2, "{cycle}");
            assert!(cycle.steps.iter().any(|s| s.owner == format!("{id}:9")));
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
    a.unlock().await.expect("unlock");
}

/// An owner that queues behind waiters of its own client waits without a refusal of its own
/// (it does not try until woken): its wait is recorded all the same, so that a cycle through it
/// is broken long before the lock's TTL (30 s here) would have made it try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_queued_behind_its_own_clients_waiters_is_recorded_too() {
    let server = RedisServer::start();
    let (local, remote) = (
        connect_with(detecting(&server)).await,
        connect_with(detecting(&server)).await,
    );
    let (r, x) = (ferrisson::Owner::new(), ferrisson::Owner::new());
    let held_a = remote.lock("q:a").with_owner(r).lock().await.expect("a");
    let held_b = local.lock("q:b").with_owner(x).lock().await.expect("b");
    let ahead = tokio::spawn({
        let lock = local.lock("q:a").with_owner(ferrisson::Owner::new());
        async move { lock.lock().await.map(|guard| guard.detach()) }
    });
    support::wait_parked(&local, "q:a", 1).await;
    let queued = tokio::spawn({
        let lock = local.lock("q:a").with_owner(x);
        async move { lock.lock().await.map(|guard| guard.detach()) }
    });
    support::wait_parked(&local, "q:a", 2).await;
    // r waits for b: the cycle r → b → x → a → r, whose youngest wait is r's. Waits are ordered
    // by their start in epoch milliseconds, ties broken by owner: begun in x's millisecond
    // (x is parked before `wait_parked` looks, r's refusal is a sub-millisecond round trip
    // later), r's wait tied with x's, and x, the greater owner string half the time, gave way
    // instead (reproduced 1 in 17 rounds beside two busy loops; 60 of 60 with this pause).
    sleep(Duration::from_millis(5)).await;
    let r_waits = remote.lock("q:b").with_owner(r);
    let outcome = timeout(Duration::from_secs(10), r_waits.lock())
        .await
        .expect("broken well before a's TTL would have made x try");
    assert!(
        matches!(&outcome, Err(Error::Deadlock { name, .. }) if name == "q:b"),
        "{outcome:?}"
    );
    held_a.unlock().await.expect("unlock");
    for (task, owner) in [(ahead, None), (queued, Some(x))] {
        timeout(Duration::from_secs(10), task)
            .await
            .expect("proceeds")
            .expect("join")
            .expect("acquired");
        let lock = local.lock("q:a");
        let lock = match owner {
            Some(owner) => lock.with_owner(owner),
            None => lock,
        };
        if owner.is_some() {
            lock.unlock().await.expect("unlock a");
        } else {
            lock.force_unlock().await.expect("free a for the next");
        }
    }
    held_b.unlock().await.expect("unlock");
}

/// Two owners of one client in opposite orders: the cycle is found from the client's own
/// table, whether or not its waits reached Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_owners_of_one_client_in_opposite_orders_one_gives_way() {
    let server = RedisServer::start();
    let client = connect_with(detecting(&server)).await;
    let ready = std::sync::Arc::new(tokio::sync::Barrier::new(2));
    let one = tokio::spawn(take_in_order(
        client.clone(),
        "own:a".into(),
        "own:b".into(),
        ready.clone(),
    ));
    let two = tokio::spawn(take_in_order(
        client.clone(),
        "own:b".into(),
        "own:a".into(),
        ready,
    ));
    let outcomes = [one.await.expect("join"), two.await.expect("join")];
    let gave_way = outcomes
        .iter()
        .filter(|o| matches!(o, Second::GaveWay(..)))
        .count();
    assert_eq!(gave_way, 1, "{outcomes:?}");
    assert_nothing_left(&server, "own:").await;
}

/// A hash that lost its fields (a restart without persistence, a flush), or holds one its
/// client did not write, is written whole again at the next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_edges_are_written_again() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let holder = connect_with(detecting(&server)).await;
    let waiter = connect_with(detecting(&server)).await;
    let guard = holder.lock("lost:e").lock().await.expect("held");
    let lock = waiter.lock("lost:e");
    let waiting = tokio::spawn(async move { lock.lock().await.map(|g| g.detach()) });
    wait_recorded(&raw, &waiter, 1).await;
    let _: i64 = raw.del(edges_key(&waiter)).await.expect("DEL");
    wait_recorded(&raw, &waiter, 1).await;
    // A field the client did not write (as a write whose reply was lost may leave): the
    // count disagrees, and the hash is written whole again without it.
    let _: i64 = raw
        .hset(edges_key(&waiter), ("9:9", "1 x:9 elsewhere"))
        .await
        .expect("HSET");
    wait_recorded(&raw, &waiter, 1).await;
    let stale: bool = raw
        .hexists(edges_key(&waiter), "9:9")
        .await
        .expect("HEXISTS");
    assert!(!stale, "the stray field is gone");
    guard.unlock().await.expect("unlock");
    waiting.await.expect("join").expect("acquired");
    wait_recorded(&raw, &waiter, 0).await;
}
