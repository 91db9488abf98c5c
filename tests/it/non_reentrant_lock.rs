//! The non-reentrant lock (Redisson 4.5's `RNonReentrantLock`, protocol §8) against a real
//! redis-server: a second acquire by the holder is `Error::AlreadyHeld` and leaves one hold,
//! other owners wait and are woken by the release's unlock message (across clients, and by a
//! local hand-off within one), the Redis layout Java reads, mutual exclusion among tasks and
//! processes, dropped acquires, wrong-type keys and the blocking twin.

use crate::support;

use std::time::Duration;

use ferrisson::{Error, Owner, WokenBy};
use fred::prelude::*;
use support::contenders;
use support::redis_state::{
    channel_of, command_calls, exists, hgetall, pttl, reset_stats, wait_numsub,
};
use support::{connect, raw_client, RedisServer};

#[tokio::test]
async fn a_second_acquire_by_the_holder_is_already_held_and_leaves_one_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let owner = Owner::new();
    let name = "nr:again";
    let lock = client.non_reentrant_lock(name).with_owner(owner);

    let guard = lock.lock().await.expect("lock");
    let ttl_before = pttl(&raw, name).await;
    every_acquire_is_already_held(&lock, name).await;
    assert_eq!(
        lock.lock().await.expect_err("lock").to_string(),
        "lock `nr:again` is already held by this owner and is not reentrant"
    );
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(
        fields.values().next().map(String::as_str),
        Some("1"),
        "still one hold"
    );
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    assert!(
        pttl(&raw, name).await <= ttl_before,
        "the refusals did not extend the lease"
    );

    // One release frees it: the refusals added nothing to release.
    guard.unlock().await.expect("release");
    assert_eq!(exists(&raw, name).await, 0);
    assert!(matches!(lock.unlock().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn another_clients_waiter_is_woken_by_the_unlock_message() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let a = connect(&server).await;
    let b = connect(&server).await;
    let name = "nr:wake";
    // A watchdog lease (30 s): only the unlock message can wake the waiter within the bound.
    let holder = a.non_reentrant_lock(name).lock().await.expect("a locks");
    let lock_b = b.non_reentrant_lock(name);
    let waiter = tokio::spawn(async move { lock_b.try_lock_within(Duration::from_secs(20)).await });
    wait_numsub(&raw, &channel_of(name), 1, Duration::from_secs(5)).await;
    holder.unlock().await.expect("a releases");
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("b is woken by the release (a liveness bound)")
        .expect("task")
        .expect("try_lock_within")
        .acquired()
        .expect("acquired");
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message);
    let fields = hgetall(&raw, name).await;
    assert_eq!(
        fields.get(guard.holder_field()).map(String::as_str),
        Some("1")
    );
    guard.unlock().await.expect("b releases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_waiter_is_handed_the_lock_with_one_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "nr:handoff";
    let holder = client
        .non_reentrant_lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("holder");
    let lock = client.non_reentrant_lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move { lock.lock().await });
    support::wait_parked(&client, name, 1).await;
    reset_stats(&raw).await;
    holder.unlock().await.expect("release");
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter acquires")
        .expect("task")
        .expect("lock");
    assert_eq!(
        command_calls(&raw, "publish").await,
        0,
        "handed over in the release's script: the lock was never free, nothing was published"
    );
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(
        fields.get(guard.holder_field()).map(String::as_str),
        Some("1")
    );
    // The handed-over hold is a non-reentrant one too.
    assert!(matches!(
        guard.lock().try_lock().await,
        Err(Error::AlreadyHeld { .. })
    ));
    guard.unlock().await.expect("release");
    assert_eq!(exists(&raw, name).await, 0);
}

#[tokio::test]
async fn the_redis_layout_is_redissons_and_the_reentrant_lock_sees_it() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let owner = Owner::new();
    let name = "nr:layout";
    let guard = client
        .non_reentrant_lock(name)
        .with_owner(owner)
        .lock_with_lease(Duration::from_secs(30))
        .await
        .expect("lock");
    let field = format!("{}:{}", client.id(), owner.id());
    assert_eq!(guard.holder_field(), field);
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(fields.get(&field).map(String::as_str), Some("1"));
    let ttl = pttl(&raw, name).await;
    assert!(ttl > 0 && ttl <= 30_000, "the lease is the TTL: {ttl}");

    let plain = client.lock(name);
    assert_eq!(
        plain.with_owner(owner).hold_count().await.expect("count"),
        1
    );
    assert!(plain
        .with_owner(Owner::new())
        .try_lock()
        .await
        .expect("try")
        .is_busy());
    guard.unlock().await.expect("release");
    assert_eq!(exists(&raw, name).await, 0, "released like an RLock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_among_tasks_never_overlap() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    contenders::assert_tasks_never_overlap(
        client.non_reentrant_lock("nr:tasks"),
        |lock: ferrisson::NonReentrantLock| async move { lock.lock().await.expect("lock") },
        |guard| guard.unlock(),
    )
    .await;
}

const CROSS_PROCESS: &str = "contenders_in_separate_processes_never_overlap";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_in_separate_processes_never_overlap() {
    if let Some(url) = contenders::child_url() {
        let client = ferrisson::Client::connect(&url).await.expect("connect");
        let lock = client.non_reentrant_lock("nr:processes");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_in_flight_leave_no_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "nr:cancel";
    contenders::assert_dropped_acquires_leave_no_hold(
        &raw,
        name,
        |owner| client.non_reentrant_lock(name).with_owner(owner),
        |lock: ferrisson::NonReentrantLock| async move { lock.lock().await },
    )
    .await;
    // Another client gets the lock at once.
    let other = connect(&server).await.non_reentrant_lock(name);
    let attempt = other.try_lock().await.expect("try_lock");
    attempt
        .acquired()
        .expect("free")
        .unlock()
        .await
        .expect("release");
}

#[tokio::test]
async fn a_key_of_another_type_is_wrong_type() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    raw.set::<(), _, _>("nr:plain", "hello", None, None, false)
        .await
        .expect("SET");
    let lock = client.non_reentrant_lock("nr:plain");
    for (what, err) in [
        ("lock", lock.lock().await.expect_err("lock")),
        ("try_lock", lock.try_lock().await.expect_err("try_lock")),
        ("unlock", lock.unlock().await.expect_err("unlock")),
    ] {
        match err {
            Error::WrongType { name } => assert_eq!(name, "nr:plain", "{what}"),
            other => panic!("{what}: expected WrongType, got {other:?}"),
        }
    }
    let value: Option<String> = raw.get("nr:plain").await.expect("GET");
    assert_eq!(value.as_deref(), Some("hello"));
}

#[test]
fn the_blocking_non_reentrant_lock_refuses_its_own_thread_and_excludes_others() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let lock = client.non_reentrant_lock("nr:blocking");

    let guard = lock.lock().expect("lock");
    assert!(matches!(lock.lock(), Err(Error::AlreadyHeld { .. })));
    assert_eq!(lock.as_lock().hold_count().expect("hold_count"), 1);
    let other = lock.clone();
    let waiter = std::thread::spawn(move || {
        let guard = other
            .try_lock_within(Duration::from_secs(5))
            .expect("try_lock_within")
            .acquired()
            .expect("acquired after the release");
        guard.unlock().expect("unlock");
    });
    std::thread::sleep(Duration::from_millis(200));
    guard.unlock().expect("unlock");
    waiter.join().expect("thread");
    assert!(!lock.as_lock().is_locked().expect("is_locked"));
}

/// Every acquire method of `lock`, whose owner holds it, fails with `Error::AlreadyHeld` naming
/// `name` (the non-reentrant locks' refusal).
pub(crate) async fn every_acquire_is_already_held<P: ferrisson::Protocol>(
    lock: &ferrisson::Handle<P>,
    name: &str,
) {
    for (what, err) in [
        ("lock", lock.lock().await.expect_err("lock")),
        (
            "lock_with_lease",
            lock.lock_with_lease(Duration::from_secs(5))
                .await
                .expect_err("lock_with_lease"),
        ),
        ("try_lock", lock.try_lock().await.expect_err("try_lock")),
        (
            "try_lock_within",
            lock.try_lock_within(Duration::from_secs(1))
                .await
                .expect_err("try_lock_within"),
        ),
    ] {
        match &err {
            Error::AlreadyHeld { name: named } => assert_eq!(named, name, "{what}"),
            other => panic!("{what}: expected AlreadyHeld, got {other:?}"),
        }
    }
}
