//! The spin lock (Redisson's `RSpinLock`, protocol §6) against a real redis-server: mutual
//! exclusion among tasks and among processes, waiting without pub/sub (no subscription, no
//! message on release), the back-off, bounded waits, exclusion with the reentrant lock on one
//! name (and its hazard: no wake-up), dropped acquires, wrong-type keys, the layout and the
//! watchdog, and the blocking twin.

use crate::support;

use std::time::Duration;

use ferrisson::{BackOff, Config, Error, Owner, SyncedWrites, WokenBy};
use fred::prelude::*;
use support::contenders;
use support::redis_state::{
    channel_of, command_calls, exists, hgetall, numsub, pttl, reset_stats, script_runs,
    wait_replicas_streaming,
};
use support::{connect, connect_with, raw_client, timed_config, RedisServer};
use tokio::time::Instant;

/// Every channel with a subscriber on the server (`PUBSUB CHANNELS`).
async fn channels(raw: &fred::clients::Client) -> Vec<String> {
    raw.custom(fred::cmd!("PUBSUB"), vec!["CHANNELS"])
        .await
        .expect("PUBSUB CHANNELS")
}

#[tokio::test]
async fn a_spin_waiter_acquires_after_the_release_without_pub_sub_and_nothing_is_published() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let a = connect(&server).await;
    let b = connect(&server).await;
    let name = "spin:quiet";
    let holder = a
        .spin_lock(name)
        .lock_with_lease(Duration::from_secs(30))
        .await
        .expect("a locks");
    reset_stats(&raw).await;

    let lock_b = b.spin_lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move { lock_b.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "b waits while a holds");
    assert_eq!(
        numsub(&raw, &channel_of(name)).await,
        0,
        "b never subscribes"
    );
    assert_eq!(
        channels(&raw).await,
        Vec::<String>::new(),
        "no channel at all"
    );

    holder.unlock().await.expect("a releases");
    let taken = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("b acquires once a released (a liveness bound)")
        .expect("task")
        .expect("b locks");
    let acquisition = *taken.acquisition();
    assert_eq!(acquisition.woken_by, WokenBy::BackOff, "{acquisition:?}");
    assert!(acquisition.attempts > 2, "b polled: {acquisition:?}");
    taken.unlock().await.expect("b releases");

    // And a force release publishes nothing either.
    let again = a.spin_lock(name).lock().await.expect("a locks again");
    assert!(a.spin_lock(name).force_unlock().await.expect("force"));
    assert!(matches!(again.unlock().await, Err(Error::LeaseLost { .. })));
    assert_eq!(
        command_calls(&raw, "publish").await + command_calls(&raw, "spublish").await,
        0,
        "no spin-lock release published anything"
    );
    assert_eq!(channels(&raw).await, Vec::<String>::new());
}

#[tokio::test]
async fn the_default_back_off_grows_from_1_ms_and_is_capped_at_128_ms() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "spin:backoff";
    let _holder = client
        .spin_lock(name)
        .with_owner(Owner::new())
        .lock_with_lease(Duration::from_secs(30))
        .await
        .expect("holder");

    // Over 3 s: about 8 attempts while the pause doubles to 128 ms, then one per 128 ms (~30
    // in all). Without growth (1 ms pauses) there would be hundreds; without the cap, ~12.
    reset_stats(&raw).await;
    let waiter = client.spin_lock(name).with_owner(Owner::new());
    let attempt = waiter
        .try_lock_within(Duration::from_secs(3))
        .await
        .expect("try");
    assert!(attempt.is_busy());
    let attempts = script_runs(&raw).await;
    assert!(
        (16..=60).contains(&attempts),
        "{attempts} attempts in 3 s with the default back-off"
    );

    // A constant back-off of 250 ms: one attempt, then one per pause (~5 in 1 s).
    reset_stats(&raw).await;
    let steady = waiter.with_backoff(BackOff::constant(Duration::from_millis(250)).expect("ok"));
    let attempt = steady
        .try_lock_within(Duration::from_secs(1))
        .await
        .expect("try");
    assert!(attempt.is_busy());
    let attempts = script_runs(&raw).await;
    assert!(
        (2..=6).contains(&attempts),
        "{attempts} attempts in 1 s, 250 ms apart"
    );
}

#[tokio::test]
async fn bad_back_offs_are_invalid_arguments() {
    for bad in [
        BackOff::constant(Duration::ZERO),
        BackOff::exponential(Duration::from_millis(50), Duration::from_millis(10), 2),
        BackOff::exponential(Duration::from_millis(1), Duration::from_millis(10), 0),
    ] {
        assert!(matches!(bad, Err(Error::InvalidArgument(_))), "{bad:?}");
    }
}

#[tokio::test]
async fn try_lock_within_gives_up_within_its_budget_and_try_lock_at_once() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let name = "spin:budget";
    let _holder = client
        .spin_lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("holder");
    let lock = client
        .spin_lock(name)
        .with_owner(Owner::new())
        .with_backoff(BackOff::constant(Duration::from_secs(2)).expect("ok"));

    let started = Instant::now();
    let attempt = lock
        .try_lock_within(Duration::from_millis(500))
        .await
        .expect("try_lock_within");
    let took = started.elapsed();
    assert!(attempt.is_busy());
    // Not before the budget, and the pause is cut to it: a whole 2 s pause would end at 2 s
    // (the upper bound is otherwise a generous liveness bound).
    assert!(
        took >= Duration::from_millis(500),
        "gave up early: {took:?}"
    );
    assert!(
        took < Duration::from_millis(1500),
        "overran the budget: {took:?}"
    );

    assert!(lock.try_lock().await.expect("try_lock").is_busy());
    assert_eq!(lock.hold_count().await.expect("hold_count"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_holders_among_tasks_never_overlap() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    contenders::assert_tasks_never_overlap(
        client.spin_lock("spin:tasks"),
        |lock: ferrisson::SpinLock| async move { lock.lock().await.expect("lock") },
        |guard| guard.unlock(),
    )
    .await;
}

const CROSS_PROCESS: &str = "spin_contenders_in_separate_processes_never_overlap";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_contenders_in_separate_processes_never_overlap() {
    if let Some(url) = contenders::child_url() {
        let client = ferrisson::Client::connect(&url).await.expect("connect");
        let lock = client.spin_lock("spin:processes");
        contenders::hold_repeatedly(
            || async { lock.lock().await.expect("the contender locks") },
            |guard| guard.unlock(),
        )
        .await;
        client.shutdown().await;
        return;
    }
    let server = RedisServer::start();
    contenders::assert_holds_never_overlap(
        &support::processes::test_name(module_path!(), CROSS_PROCESS),
        &server.url(),
    )
    .await;
}

#[tokio::test]
async fn the_spin_lock_and_the_reentrant_lock_on_one_name_exclude_each_other() {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    let name = "spin:mixed";

    let spin = a.spin_lock(name).lock().await.expect("spin locks");
    assert!(b.lock(name).try_lock().await.expect("try").is_busy());
    spin.unlock().await.expect("spin releases");

    let rlock = b.lock(name).lock().await.expect("rlock locks");
    assert!(a.spin_lock(name).try_lock().await.expect("try").is_busy());
    let spinner = a.spin_lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move { spinner.lock().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    rlock.unlock().await.expect("rlock releases");
    let taken = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the spinner acquires after the rlock's release")
        .expect("task")
        .expect("spin locks");
    assert!(b.lock(name).try_lock().await.expect("try").is_busy());
    taken.unlock().await.expect("release");
}

/// The documented hazard: a spin-lock release publishes nothing, so a reentrant-lock waiter is
/// not woken by it and retries only when its TTL-bounded wait ends.
#[tokio::test]
async fn a_reentrant_waiter_is_not_woken_by_a_spin_release_only_by_its_ttl_bound() {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    let name = "spin:hazard";
    let spin = a
        .spin_lock(name)
        .lock_with_lease(Duration::from_millis(1500))
        .await
        .expect("spin locks");
    let rlock = b.lock(name);
    let waiter = tokio::spawn(async move { rlock.try_lock_within(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    spin.unlock().await.expect("spin releases");
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter acquires at its TTL bound")
        .expect("task")
        .expect("try_lock_within")
        .acquired()
        .expect("acquired");
    assert_eq!(
        guard.acquisition().woken_by,
        WokenBy::Ttl,
        "no unlock message woke it"
    );
    guard.unlock().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_acquires_dropped_in_flight_leave_no_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "spin:cancel";
    contenders::assert_dropped_acquires_leave_no_hold(
        &raw,
        name,
        |owner| client.spin_lock(name).with_owner(owner),
        |lock: ferrisson::SpinLock| async move { lock.lock().await },
    )
    .await;
    // Another client gets the lock at once.
    let other = connect(&server).await.spin_lock(name);
    let attempt = other.try_lock().await.expect("try_lock");
    attempt
        .acquired()
        .expect("free")
        .unlock()
        .await
        .expect("release");
}

#[tokio::test]
async fn a_spin_lock_on_a_key_of_another_type_is_wrong_type() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    raw.set::<(), _, _>("spin:plain", "hello", None, None, false)
        .await
        .expect("SET");
    let lock = client.spin_lock("spin:plain");
    for (what, err) in [
        ("lock", lock.lock().await.expect_err("lock")),
        ("try_lock", lock.try_lock().await.expect_err("try_lock")),
        (
            "try_lock_within",
            lock.try_lock_within(Duration::from_millis(200))
                .await
                .expect_err("try_lock_within"),
        ),
        ("unlock", lock.unlock().await.expect_err("unlock")),
        (
            "force_unlock",
            lock.force_unlock().await.expect_err("force_unlock"),
        ),
        ("is_locked", lock.is_locked().await.expect_err("is_locked")),
    ] {
        match err {
            Error::WrongType { name } => assert_eq!(name, "spin:plain", "{what}"),
            other => panic!("{what}: expected WrongType, got {other:?}"),
        }
    }
    let value: Option<String> = raw.get("spin:plain").await.expect("GET");
    assert_eq!(value.as_deref(), Some("hello"), "the key is untouched");
}

#[tokio::test]
async fn the_layout_is_redissons_and_the_watchdog_renews_until_a_force_release() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // Renewals every 667 ms leave 1.3 s of slack for a loaded machine, and still find the
    // silent force release below well within its bound.
    let watchdog = Duration::from_secs(2);
    let config = timed_config(server.url(), watchdog, Duration::from_secs(2));
    let client = connect_with(config).await;
    let owner = Owner::new();
    let lock = client.spin_lock("spin:layout").with_owner(owner);

    let guard = lock.lock().await.expect("lock");
    let again = lock.lock().await.expect("re-enter");
    let field = format!("{}:{}", client.id(), owner.id());
    assert_eq!(guard.holder_field(), field);
    let fields = hgetall(&raw, "spin:layout").await;
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(fields.get(&field).map(String::as_str), Some("2"));
    assert_eq!(lock.hold_count().await.expect("hold_count"), 2);

    // More than two watchdog leases later the lock is still held, renewed.
    tokio::time::sleep(watchdog * 9 / 4).await;
    assert!(!guard.is_lost());
    let ttl = pttl(&raw, "spin:layout").await;
    assert!(
        ttl > 0 && ttl <= watchdog.as_millis() as i64,
        "renewed to the watchdog lease: {ttl}"
    );

    again.unlock().await.expect("partial release");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    guard.unlock().await.expect("release");
    assert_eq!(
        exists(&raw, "spin:layout").await,
        0,
        "deleted on the last release"
    );
    assert!(matches!(lock.unlock().await, Err(Error::NotHeld { .. })));

    // A silent force release is found by the next renewal (a liveness bound).
    let held = lock.lock().await.expect("lock again");
    assert!(lock.force_unlock().await.expect("force_unlock"));
    tokio::time::timeout(Duration::from_secs(3), held.lost())
        .await
        .expect("the renewal finds the hold gone");
    assert!(matches!(held.unlock().await, Err(Error::LeaseLost { .. })));
}

#[test]
fn the_blocking_spin_lock_is_reentrant_per_thread_and_excludes_other_threads() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let lock = client.spin_lock("spin:blocking");

    let first = lock.lock().expect("lock");
    let again = lock.lock().expect("same thread re-enters");
    assert_eq!(lock.as_lock().hold_count().expect("hold_count"), 2);
    let other = lock.clone();
    let waiter = std::thread::spawn(move || {
        let guard = other
            .try_lock_within(Duration::from_secs(5))
            .expect("try_lock_within")
            .acquired()
            .expect("acquired after the release");
        let attempts = guard.acquisition().map(|a| a.attempts);
        guard.unlock().expect("unlock");
        attempts
    });
    std::thread::sleep(Duration::from_millis(200));
    again.unlock().expect("unlock");
    first.detach();
    lock.unlock().expect("unlock by owner");
    let attempts = waiter.join().expect("thread").expect("an acquisition");
    assert!(attempts > 1, "the other thread polled: {attempts}");
    assert!(!lock.force_unlock().expect("force_unlock"), "nothing left");
}

/// With synced writes, a spin acquisition that no replica acknowledged fails with
/// `NotReplicated` and is rolled back with the spin lock's own release, which publishes
/// nothing (a rollback with the reentrant lock's release would publish an unlock message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreplicated_spin_acquisition_is_rolled_back_without_publishing() {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    let raw = raw_client(&master.url()).await;
    wait_replicas_streaming(&raw, 1).await;
    let mut config = Config::new(master.url());
    config.synced_writes = SyncedWrites::Always;
    // Long enough for an online replica to acknowledge on a loaded machine; the paused one
    // makes the second acquire wait it out.
    config.replica_sync_timeout = Duration::from_millis(1500);
    let client = connect_with(config).await;
    let lock = client.spin_lock("spin:synced");
    let first = lock
        .lock()
        .await
        .expect("acknowledged while the replica runs");
    first.unlock().await.expect("release");

    replica.pause(); // connected but silent: its WAIT acknowledgement never comes
    reset_stats(&raw).await;
    let err = lock
        .try_lock()
        .await
        .expect_err("no replica acknowledges the acquisition");
    replica.resume();
    assert!(
        matches!(&err, Error::NotReplicated { name } if name == "spin:synced"),
        "{err:?}"
    );
    assert_eq!(
        exists(&raw, "spin:synced").await,
        0,
        "rolled back on the master"
    );
    assert_eq!(
        command_calls(&raw, "publish").await,
        0,
        "the rollback was the spin release, which publishes nothing"
    );
}
