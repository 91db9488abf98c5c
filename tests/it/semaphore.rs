//! The semaphore (Redisson's `RSemaphore`) against a real redis-server: permits never
//! over-granted among tasks and among processes, releases that publish the new count and wake
//! waiters, `try_set_permits` (with and without a TTL), negative `add_permits`, `drain_permits`,
//! acquires dropped in flight and while waiting that lose no permits, guards that give permits
//! back when dropped and keep them when forgotten, local hand-offs of permits (no call to Redis;
//! in line order; given back when their waiter left; other clients get turns), the Redis layout
//! Java reads, wrong-type keys, bad arguments and the blocking twin.

use crate::support;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrisson::{Error, WokenBy};
use fred::prelude::*;
use support::redis_state::{
    command_calls, numsub, poll_until, pttl, reset_stats, script_runs, wait_numsub, POLL_INTERVAL,
};
use support::sync::{
    assert_left_alone, assert_wrong_type, get, plant_wrong_types, run_contenders, wait_value,
    Messages,
};
use support::{connect, raw_client, RedisServer};
use tokio::time::timeout;

fn channel(name: &str) -> String {
    format!("redisson_sc:{{{name}}}")
}

/// A server, a raw client on it, a ferrisson client, and that client's semaphore `name`.
struct Fixture {
    server: RedisServer,
    raw: fred::clients::Client,
    client: ferrisson::Client,
    semaphore: ferrisson::Semaphore,
}

async fn start(name: &str) -> Fixture {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let semaphore = client.semaphore(name);
    Fixture {
        server,
        raw,
        client,
        semaphore,
    }
}

/// One holder's critical section: counts itself into `holders` (a Redis counter shared by every
/// task and process) and reports the count it saw, which must never exceed the permits.
async fn hold_and_count(raw: &fred::clients::Client, holders: &str) -> i64 {
    let seen: i64 = raw.incr(holders).await.expect("INCR");
    tokio::time::sleep(Duration::from_millis(2)).await;
    let _: i64 = raw.decr(holders).await.expect("DECR");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_never_over_granted_among_tasks_of_two_clients() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let clients = [connect(&server).await, connect(&server).await];
    let name = "sem:tasks";
    assert!(clients[0]
        .semaphore(name)
        .try_set_permits(3)
        .await
        .expect("set"));
    let most = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let semaphore = clients[i % 2].semaphore(name);
        let raw = raw.clone();
        let most = Arc::clone(&most);
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let permits = semaphore.acquire(1).await.expect("acquire");
                let seen = hold_and_count(&raw, "sem:tasks:holders").await;
                most.fetch_max(seen, Ordering::Relaxed);
                permits.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        timeout(Duration::from_secs(30), task)
            .await
            .expect("every task finishes: waiters are woken")
            .expect("task");
    }
    let most = most.load(Ordering::Relaxed);
    assert!(
        (1..=3).contains(&most),
        "at most 3 holders at a time: {most}"
    );
    assert_eq!(
        get(&raw, name).await.as_deref(),
        Some("3"),
        "every permit back"
    );
}

/// The env variable that makes this test binary a contender process of the test below.
const CHILD_URL: &str = "FERRISSON_SEMAPHORE_CHILD_URL";
const CROSS_PROCESS: &str = "permits_are_never_over_granted_among_processes";

/// Three processes, each with 3 tasks, take 1 of 2 permits 10 times per task. Each holder counts
/// itself into a shared Redis counter; no holder ever sees more than 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_never_over_granted_among_processes() {
    let name = "sem:processes";
    let holders = "sem:processes:holders";
    if let Ok(url) = std::env::var(CHILD_URL) {
        // A contender: prints `SEEN <n>` for each hold.
        let client = ferrisson::Client::connect(&url)
            .await
            .expect("child connects");
        let raw = raw_client(&url).await;
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let semaphore = client.semaphore(name);
            let raw = raw.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let permits = semaphore.acquire(1).await.expect("child acquires");
                    let seen = hold_and_count(&raw, holders).await;
                    println!("SEEN {seen}");
                    permits.release().await.expect("child releases");
                }
            }));
        }
        for task in tasks {
            task.await.expect("child task");
        }
        client.shutdown().await;
        return;
    }
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    assert!(client
        .semaphore(name)
        .try_set_permits(2)
        .await
        .expect("set"));
    let reports = run_contenders(
        &support::processes::test_name(module_path!(), CROSS_PROCESS),
        CHILD_URL,
        &server.url(),
        3,
        "SEEN ",
    )
    .await;
    let seen: Vec<i64> = reports
        .iter()
        .flatten()
        .map(|n| n.parse().expect("a number"))
        .collect();
    assert_eq!(seen.len(), 90, "every contender reported its 30 holds");
    let most = seen.iter().copied().max().unwrap_or_default();
    assert!(
        (1..=2).contains(&most),
        "at most 2 holders at a time across processes: {seen:?}"
    );
    assert_eq!(
        get(&raw, name).await.as_deref(),
        Some("2"),
        "every permit back"
    );
}

#[tokio::test]
async fn a_release_publishes_the_new_count_and_wakes_a_waiter() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "sem:wake";
    let mut messages = Messages::subscribe(&server, &channel(name)).await;

    let semaphore = client.semaphore(name);
    assert!(semaphore.try_set_permits(2).await.expect("set"));
    assert_eq!(messages.next().await, "2");
    let held = semaphore.acquire(2).await.expect("acquire both");
    messages.none().await; // an acquire publishes nothing
    assert_eq!(get(&raw, name).await.as_deref(), Some("0"));

    // A waiter of another client: one of this client would be handed a permit, with no message.
    let other = connect(&server).await;
    let waiter = {
        let semaphore = other.semaphore(name);
        tokio::spawn(async move { semaphore.acquire(1).await })
    };
    // The waiter is parked once the other client subscribed too.
    wait_numsub(&raw, &channel(name), 2, Duration::from_secs(5)).await;
    assert!(!waiter.is_finished(), "no permit yet");
    held.release().await.expect("release");
    assert_eq!(messages.next().await, "2");
    let permits = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the release wakes the waiter")
        .expect("task")
        .expect("acquire");
    assert_eq!(permits.acquisition().woken_by, WokenBy::Message);
    assert_eq!(get(&raw, name).await.as_deref(), Some("1"));
    permits.release().await.expect("release");
    assert_eq!(messages.next().await, "2");
    // The waiter's subscription is gone with it.
    wait_numsub(&raw, &channel(name), 1, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn try_set_permits_sets_only_once_and_add_permits_clears_its_ttl() {
    let Fixture {
        server: _server,
        raw,
        client,
        semaphore,
    } = start("sem:set").await;
    assert_eq!(semaphore.available_permits().await.expect("read"), 0);
    assert!(semaphore.try_set_permits(3).await.expect("set"));
    assert!(!semaphore.try_set_permits(5).await.expect("set again"));
    assert_eq!(semaphore.available_permits().await.expect("read"), 3);
    assert_eq!(pttl(&raw, "sem:set").await, -1, "no TTL");

    let with_ttl = client.semaphore("sem:ttl");
    assert!(with_ttl
        .try_set_permits_with_ttl(4, Duration::from_secs(60))
        .await
        .expect("set with ttl"));
    let ttl = pttl(&raw, "sem:ttl").await;
    assert!((1..=60_000).contains(&ttl), "PX 60000: {ttl}");
    assert!(!with_ttl
        .try_set_permits_with_ttl(9, Duration::from_secs(60))
        .await
        .expect("set again"));
    with_ttl.add_permits(1).await.expect("add");
    assert_eq!(get(&raw, "sem:ttl").await.as_deref(), Some("5"));
    assert_eq!(pttl(&raw, "sem:ttl").await, -1, "SET cleared the TTL");

    let short = client.semaphore("sem:short");
    assert!(short
        .try_set_permits_with_ttl(1, Duration::from_millis(50))
        .await
        .expect("set"));
    let gone = poll_until(
        Duration::from_secs(5),
        POLL_INTERVAL,
        || short.available_permits(),
        |n| matches!(n, Ok(0)),
    )
    .await;
    assert!(gone.is_ok(), "the semaphore expired with its TTL");
    assert!(short.try_set_permits(2).await.expect("set after expiry"));
}

#[tokio::test]
async fn add_permits_may_go_negative_and_publishes_the_new_count() {
    let name = "sem:add";
    let Fixture {
        server,
        raw,
        semaphore,
        ..
    } = start(name).await;
    let mut messages = Messages::subscribe(&server, &channel(name)).await;

    semaphore
        .add_permits(2)
        .await
        .expect("add to an absent semaphore");
    assert_eq!(messages.next().await, "2");
    semaphore.add_permits(-3).await.expect("remove");
    assert_eq!(messages.next().await, "-1");
    assert_eq!(get(&raw, name).await.as_deref(), Some("-1"));
    assert_eq!(semaphore.available_permits().await.expect("read"), -1);
    assert!(semaphore.try_acquire(1).await.expect("try").is_busy());
    semaphore.release(2).await.expect("release");
    assert_eq!(messages.next().await, "1");
    let permits = semaphore
        .try_acquire(1)
        .await
        .expect("try")
        .acquired()
        .expect("one permit now");
    assert!(semaphore.try_acquire(1).await.expect("try").is_busy());
    permits.release().await.expect("release");
    assert_eq!(messages.next().await, "1");
}

#[tokio::test]
async fn drain_takes_every_permit() {
    let Fixture {
        server: _server,
        raw,
        semaphore,
        ..
    } = start("sem:drain").await;
    assert_eq!(semaphore.drain_permits().await.expect("drain absent"), 0);
    assert_eq!(
        get(&raw, "sem:drain").await,
        None,
        "draining writes nothing"
    );
    semaphore.try_set_permits(5).await.expect("set");
    let held = semaphore.acquire(1).await.expect("acquire");
    assert_eq!(semaphore.drain_permits().await.expect("drain"), 4);
    assert_eq!(get(&raw, "sem:drain").await.as_deref(), Some("0"));
    assert!(semaphore.try_acquire(1).await.expect("try").is_busy());
    held.release().await.expect("release");
    assert_eq!(semaphore.available_permits().await.expect("read"), 1);
    semaphore.add_permits(-3).await.expect("remove");
    assert_eq!(semaphore.drain_permits().await.expect("drain"), -2);
    assert_eq!(get(&raw, "sem:drain").await.as_deref(), Some("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_in_flight_lose_no_permits() {
    let name = "sem:cancel";
    let Fixture {
        server: _server,
        raw,
        semaphore,
        ..
    } = start(name).await;
    semaphore.try_set_permits(2).await.expect("set");
    let mut completed = 0;
    for k in 0..200u64 {
        // An acquire whose reply was lost to the drop must give its permits back; a completed
        // one hands back its guard, dropped at once (which gives them back too).
        let acquire = timeout(Duration::from_micros(k * 10), semaphore.acquire(2));
        if let Ok(permits) = acquire.await {
            completed += 1;
            drop(permits.expect("acquire"));
        }
    }
    eprintln!("{completed} of 200 acquires completed before being dropped");
    wait_value(&raw, name, "2").await;
    // No more than 2 either: a give-back counts once.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get(&raw, name).await.as_deref(), Some("2"));
}

#[tokio::test]
async fn an_acquire_dropped_while_waiting_takes_nothing() {
    let name = "sem:parked";
    let Fixture {
        server: _server,
        raw,
        semaphore,
        ..
    } = start(name).await;
    semaphore.try_set_permits(1).await.expect("set");
    let held = semaphore.acquire(1).await.expect("acquire");
    let waiter = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire(1).await })
    };
    wait_numsub(&raw, &channel(name), 1, Duration::from_secs(5)).await;
    waiter.abort();
    assert!(waiter.await.is_err_and(|err| err.is_cancelled()));
    wait_numsub(&raw, &channel(name), 0, Duration::from_secs(5)).await;
    held.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        get(&raw, name).await.as_deref(),
        Some("1"),
        "the permit is free"
    );
    // A bounded wait that runs out takes nothing either.
    let held = semaphore.acquire(1).await.expect("acquire");
    let attempt = semaphore
        .try_acquire_for(1, Duration::from_millis(100))
        .await
        .expect("try");
    assert!(attempt.is_busy());
    held.release().await.expect("release");
    assert_eq!(get(&raw, name).await.as_deref(), Some("1"));
}

/// A semaphore `name` of 1 permit, held, and a task of the same client parked waiting for it.
async fn held_with_a_local_waiter(
    name: &str,
) -> (
    Fixture,
    ferrisson::SemaphorePermits,
    tokio::task::JoinHandle<ferrisson::Result<ferrisson::SemaphorePermits>>,
) {
    let fixture = start(name).await;
    let semaphore = fixture.semaphore.clone();
    assert!(semaphore.try_set_permits(1).await.expect("set"));
    let held = semaphore.acquire(1).await.expect("acquire");
    let waiter = tokio::spawn(async move { semaphore.acquire(1).await });
    support::wait_parked(&fixture.client, name, 1).await;
    (fixture, held, waiter)
}

#[tokio::test]
async fn a_guard_hands_its_permits_to_a_local_waiter_without_a_call_to_redis() {
    let name = "sem:handoff";
    let (fixture, held, waiter) = held_with_a_local_waiter(name).await;
    let raw = fixture.raw.clone();
    reset_stats(&raw).await;
    held.release().await.expect("release");
    let handed = support::acquired_within(waiter, Duration::from_secs(2)).await;
    assert_eq!(handed.permits(), 1);
    assert_eq!(handed.acquisition().woken_by, WokenBy::Message);
    assert_eq!(
        script_runs(&raw).await,
        0,
        "no script: the permit changed hands here"
    );
    assert_eq!(command_calls(&raw, "publish").await, 0);
    assert_eq!(get(&raw, name).await.as_deref(), Some("0"), "still taken");

    // Dropped, with nobody in line: back to Redis.
    drop(handed);
    wait_value(&raw, name, "1").await;
}

#[tokio::test]
async fn permits_are_handed_to_every_waiter_they_cover_and_the_rest_given_back() {
    let name = "sem:handoff-order";
    let Fixture {
        server: _server,
        raw,
        client,
        semaphore,
    } = start(name).await;
    assert!(semaphore.try_set_permits(3).await.expect("set"));
    let held = semaphore.acquire(3).await.expect("acquire all");
    let waiters: Vec<_> = [2, 1]
        .into_iter()
        .enumerate()
        .map(|(i, permits)| {
            let semaphore = semaphore.clone();
            let waiter = tokio::spawn(async move { semaphore.acquire(permits).await });
            (i, waiter)
        })
        .collect();
    support::wait_parked(&client, name, 2).await;
    // 3 permits: 2 to the head, 1 to the next, none to Redis.
    held.release().await.expect("release");
    for (i, waiter) in waiters {
        let got = support::acquired_within(waiter, Duration::from_secs(2)).await;
        assert_eq!(got.permits(), [2, 1][i]);
        got.forget();
    }
    assert_eq!(get(&raw, name).await.as_deref(), Some("0"));

    // A guard of more permits than the line asks for gives the rest back.
    semaphore.release(3).await.expect("release");
    let all = semaphore.acquire(3).await.expect("acquire all");
    let waiter = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire(1).await })
    };
    support::wait_parked(&client, name, 1).await;
    all.release().await.expect("release");
    let got = support::acquired_within(waiter, Duration::from_secs(2)).await;
    assert_eq!(
        get(&raw, name).await.as_deref(),
        Some("2"),
        "3 - 1 handed over"
    );
    got.release().await.expect("release");
    wait_value(&raw, name, "3").await;
}

#[tokio::test]
async fn permits_handed_to_a_waiter_that_left_go_back_to_redis() {
    // On this one-thread runtime the waiter cannot run between the release, which hands it the
    // permit, and the abort: it never takes the permit, and its place gives it back.
    let name = "sem:handoff-orphan";
    let (fixture, held, waiter) = held_with_a_local_waiter(name).await;
    let raw = fixture.raw.clone();
    held.release().await.expect("release");
    waiter.abort();
    assert!(waiter.await.is_err_and(|err| err.is_cancelled()));
    wait_value(&raw, name, "1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_guards_handing_permits_over_give_another_clients_waiter_its_turns() {
    let name = "sem:handoff-fair";
    let Fixture {
        server,
        client: local,
        semaphore,
        ..
    } = start(name).await;
    assert!(semaphore.try_set_permits(1).await.expect("set"));
    let remote = connect(&server).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let semaphore = local.semaphore(name);
            let (stop, taken) = (stop.clone(), taken.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let permits = semaphore.acquire(1).await.expect("acquire");
                    taken.fetch_add(1, Ordering::SeqCst);
                    permits.release().await.expect("release");
                }
            })
        })
        .collect();
    while taken.load(Ordering::SeqCst) < 50 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut overtaken = Vec::new();
    for _ in 0..20 {
        let other = remote.semaphore(name);
        let call = tokio::spawn(async move { other.acquire(1).await });
        // Counted from when the other client's waiter is parked on a confirmed subscription:
        // before that no unlock message can reach it, and no client can give way to it (its
        // subscription takes a few round trips, which a loaded machine stretches to tens of
        // local acquisitions). From then on, each plain release reaches it.
        let before = loop {
            let heard = remote
                .local_state(name)
                .subscriptions
                .iter()
                .any(|s| s.confirmed && s.parked > 0);
            if heard || call.is_finished() {
                break taken.load(Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let permits = timeout(Duration::from_secs(10), call)
            .await
            .expect("the other client got a turn")
            .expect("task")
            .expect("acquire");
        overtaken.push(taken.load(Ordering::SeqCst) - before);
        permits.release().await.expect("release");
    }
    stop.store(true, Ordering::Relaxed);
    for task in loops {
        timeout(Duration::from_secs(10), task)
            .await
            .expect("loop ends")
            .expect("task");
    }
    overtaken.sort_unstable();
    let worst = overtaken[overtaken.len() - 1];
    // A release that gives the permit back to Redis (nobody in line, or a spent budget of 16
    // hand-offs) reaches the other client's waiter, and this client gives way to it: the other
    // client gets the permit within a budget. Measured from the parked waiter, on a 2-core
    // machine loaded with two busy loops and three copies of this test: worst 4-7 local
    // acquisitions per run in 150 runs; with giving way patched out, worst 33-90 in 5 runs.
    // (Counted from the call, as this test once did, it measured the subscription's latency,
    // which such a load stretched past 50.)
    assert!(
        worst <= 32,
        "worst {worst} local acquisitions: {overtaken:?}"
    );
}

#[tokio::test]
async fn a_spent_hand_off_budget_gives_the_permits_back_to_redis() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let mut config = ferrisson::Config::new(server.url());
    config.max_local_handoffs = 2;
    let client = support::connect_with(config).await;
    let name = "sem:handoff-budget";
    let semaphore = client.semaphore(name);
    assert!(semaphore.try_set_permits(1).await.expect("set"));
    let held = semaphore.acquire(1).await.expect("acquire");
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let semaphore = semaphore.clone();
            tokio::spawn(async move {
                let permits = semaphore.acquire(1).await.expect("acquire");
                permits.release().await.expect("release");
            })
        })
        .collect();
    support::wait_parked(&client, name, 3).await;
    reset_stats(&raw).await;
    // Two hand-offs, then a release to Redis that the last waiter takes, then its own.
    held.release().await.expect("release");
    for waiter in waiters {
        timeout(Duration::from_secs(5), waiter)
            .await
            .expect("every waiter gets the permit")
            .expect("task");
    }
    assert_eq!(
        command_calls(&raw, "publish").await,
        2,
        "two releases reached Redis"
    );
    assert_eq!(get(&raw, name).await.as_deref(), Some("1"));
}

#[tokio::test]
async fn a_dropped_guard_gives_permits_back_and_a_forgotten_one_keeps_them() {
    let name = "sem:guard";
    let Fixture {
        server,
        raw,
        semaphore,
        ..
    } = start(name).await;
    semaphore.try_set_permits(3).await.expect("set");

    let permits = semaphore.acquire(2).await.expect("acquire");
    assert_eq!(permits.permits(), 2);
    assert_eq!(get(&raw, name).await.as_deref(), Some("1"));
    drop(permits);
    wait_value(&raw, name, "3").await;

    semaphore.acquire(2).await.expect("acquire").forget();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        get(&raw, name).await.as_deref(),
        Some("1"),
        "forgotten permits stay taken"
    );
    // Anyone may release them, Redisson style: another client here.
    let other = connect(&server).await;
    other.semaphore(name).release(2).await.expect("release");
    assert_eq!(get(&raw, name).await.as_deref(), Some("3"));

    // A release future dropped before it was polled still gives the permits back.
    let permits = semaphore.acquire(1).await.expect("acquire");
    drop(permits.release());
    wait_value(&raw, name, "3").await;

    // 0 permits: nothing sent, nothing to give back.
    let none = semaphore.acquire(0).await.expect("acquire 0");
    assert_eq!(none.permits(), 0);
    drop(none);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(get(&raw, name).await.as_deref(), Some("3"));
}

#[tokio::test]
async fn the_redis_layout_is_redissons() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    // A name with a hash tag: the channel embeds it unchanged.
    let name = "{jobs}:uploads";
    let mut messages = Messages::subscribe(&server, "redisson_sc:{jobs}:uploads").await;
    let semaphore = client.semaphore(name);
    semaphore.try_set_permits(7).await.expect("set");
    let kind: String = raw
        .custom(fred::cmd!("TYPE"), vec![name])
        .await
        .expect("TYPE");
    assert_eq!(kind, "string");
    assert_eq!(get(&raw, name).await.as_deref(), Some("7"));
    assert_eq!(messages.next().await, "7");
    // A Java peer's permits are ours: a value written as Java writes it is taken from.
    let _: () = raw.set(name, "1", None, None, false).await.expect("SET");
    let permits = semaphore
        .try_acquire(1)
        .await
        .expect("try")
        .acquired()
        .expect("taken");
    assert_eq!(get(&raw, name).await.as_deref(), Some("0"));
    permits.release().await.expect("release");
    assert_eq!(messages.next().await, "1");
    assert!(semaphore.delete().await.expect("delete"));
    assert_eq!(get(&raw, name).await, None);
    messages.none().await; // delete publishes nothing
    assert!(!semaphore.delete().await.expect("delete again"));
}

#[tokio::test]
async fn keys_of_another_type_are_wrong_type_and_left_alone() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let keys = plant_wrong_types(&raw, "sem").await;
    for name in &keys {
        let semaphore = client.semaphore(name);
        let wrong = |result, what| assert_wrong_type(result, name, what);
        wrong(semaphore.try_acquire(1).await.map(drop), "try_acquire");
        wrong(semaphore.acquire(1).await.map(drop), "acquire");
        wrong(semaphore.release(1).await, "release");
        wrong(
            semaphore.try_set_permits(1).await.map(drop),
            "try_set_permits",
        );
        wrong(semaphore.add_permits(1).await, "add_permits");
        wrong(semaphore.drain_permits().await.map(drop), "drain_permits");
        wrong(
            semaphore.available_permits().await.map(drop),
            "available_permits",
        );
        wrong(semaphore.delete().await.map(drop), "delete");
    }
    assert_left_alone(&raw, &keys).await;
}

#[tokio::test]
async fn bad_arguments_are_rejected_before_sending() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let _: () = raw.hset("sem:bad", ("f", "1")).await.expect("HSET");
    let semaphore = client.semaphore("sem:bad");
    let invalid = |result: Result<(), Error>, what: &str| {
        assert!(
            matches!(result, Err(Error::InvalidArgument(_))),
            "{what}: {result:?}"
        );
    };
    invalid(semaphore.release(0).await, "release(0)");
    invalid(
        semaphore.acquire(u64::MAX).await.map(drop),
        "acquire(u64::MAX)",
    );
    invalid(semaphore.release(u64::MAX).await, "release(u64::MAX)");
    invalid(
        semaphore
            .try_set_permits_with_ttl(1, Duration::ZERO)
            .await
            .map(drop),
        "a zero ttl",
    );
    invalid(
        client.semaphore("").try_acquire(1).await.map(drop),
        "an empty name",
    );
    // 0 permits are taken without a call: the key of the wrong type is never read.
    let none = semaphore.try_acquire(0).await.expect("try 0").acquired();
    assert_eq!(none.map(|permits| permits.permits()), Some(0));
}

#[test]
fn the_blocking_semaphore_shares_permits_between_threads() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let semaphore = client.semaphore("sem:blocking");
    assert!(semaphore.try_set_permits(1).expect("set"));
    let permits = semaphore.acquire(1).expect("acquire");
    assert_eq!(permits.permits(), 1);
    let other = semaphore.clone();
    let waiter = std::thread::spawn(move || {
        let permits = other
            .try_acquire_for(1, Duration::from_secs(10))
            .expect("try")
            .acquired()
            .expect("woken by the release");
        permits.forget();
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(semaphore.try_acquire(1).expect("try").is_busy());
    // Released on another thread than the one that took it: permits have no owner.
    std::thread::spawn(move || permits.release())
        .join()
        .expect("thread")
        .expect("release");
    waiter.join().expect("waiter");
    assert_eq!(semaphore.available_permits().expect("read"), 0, "forgotten");
    semaphore.release(1).expect("release");
    semaphore.add_permits(1).expect("add");
    assert_eq!(semaphore.drain_permits().expect("drain"), 2);
    assert!(semaphore.delete().expect("delete"));
    assert!(matches!(
        semaphore.try_set_permits_with_ttl(1, Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn an_uncontended_acquire_is_one_script_call_and_never_subscribes() {
    let Fixture {
        server: _server,
        raw,
        semaphore,
        ..
    } = start("sem:quiet").await;
    semaphore.try_set_permits(1).await.expect("set");
    reset_stats(&raw).await;
    let permits = semaphore.acquire(1).await.expect("acquire");
    assert_eq!(command_calls(&raw, "evalsha").await, 1, "one script call");
    permits.release().await.expect("release");
    assert_eq!(command_calls(&raw, "subscribe").await, 0);
    assert_eq!(numsub(&raw, &channel("sem:quiet")).await, 0);
}
