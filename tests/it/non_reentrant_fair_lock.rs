//! The non-reentrant fair lock (Redisson 4.x's `RNonReentrantFairLock`) against a real
//! redis-server: a second acquire by the holder is `Error::AlreadyHeld` and changes nothing,
//! waiters of several clients are served in arrival order on their own channels, a waiter that
//! gives up or is dropped leaves the queue, the Redis layout is the fair lock's (so the fair
//! lock and the reentrant lock exclude it), and the blocking twin.

use crate::fair_lock::{field_of, joined, queue, queue_key, start, timeout_key};
use crate::non_reentrant_lock::every_acquire_is_already_held;
use crate::support;

use std::time::Duration;

use ferrisson::{Error, NonReentrantFairGuard, NonReentrantFairLock, Owner};
use support::redis_state::{exists, hgetall, poll_until, pttl, POLL_INTERVAL};
use support::{connect, raw_client, RedisServer};
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// Waits until the queue is exactly `expected`.
async fn wait_queue(raw: &fred::clients::Client, name: &str, expected: &[String]) {
    let reached = poll_until(
        Duration::from_secs(10),
        POLL_INTERVAL,
        || queue(raw, name),
        |found| found == expected,
    )
    .await;
    if let Err(found) = reached {
        panic!("queue of {name} is {found:?}, expected {expected:?}");
    }
}

/// `lock.lock()` in a task of its own (the lock's owner is explicit, so the task may be anyone).
fn spawn_lock(lock: &NonReentrantFairLock) -> JoinHandle<ferrisson::Result<NonReentrantFairGuard>> {
    let lock = lock.clone();
    tokio::spawn(async move { lock.lock().await })
}

#[tokio::test]
async fn a_second_acquire_by_the_holder_is_already_held_and_changes_nothing() {
    let (_server, raw, client) = start().await;
    let name = "nrf:again";
    let lock = client
        .non_reentrant_fair_lock(name)
        .with_owner(Owner::new());

    let guard = lock.lock().await.expect("lock");
    let ttl_before = pttl(&raw, name).await;
    every_acquire_is_already_held(&lock, name).await;
    match guard.reenter().await {
        Err(Error::AlreadyHeld { name: named }) => assert_eq!(named, name),
        other => panic!("reenter: expected AlreadyHeld, got {other:?}"),
    }
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(fields.values().next().map(String::as_str), Some("1"));
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    assert!(
        pttl(&raw, name).await <= ttl_before,
        "no refusal extended the lease"
    );
    assert_eq!(exists(&raw, &queue_key(name)).await, 0, "no refusal queued");
    assert_eq!(exists(&raw, &timeout_key(name)).await, 0);

    guard.unlock().await.expect("release");
    assert_eq!(exists(&raw, name).await, 0, "one release frees it");
    assert!(matches!(lock.unlock().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn waiters_of_several_clients_are_served_in_arrival_order() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let clients = [
        connect(&server).await,
        connect(&server).await,
        connect(&server).await,
    ];
    let name = "nrf:order";
    let holder = clients[0]
        .non_reentrant_fair_lock(name)
        .lock()
        .await
        .expect("hold");

    // Three waiters, each of another client than the one before, queued one after the other.
    let mut expected = Vec::new();
    let mut waiters = Vec::new();
    for (k, client) in [&clients[1], &clients[2], &clients[0]]
        .into_iter()
        .enumerate()
    {
        let owner = Owner::new();
        waiters.push((
            k,
            spawn_lock(&client.non_reentrant_fair_lock(name).with_owner(owner)),
        ));
        expected.push(field_of(client, owner));
        wait_queue(&raw, name, &expected).await;
    }

    holder.unlock().await.expect("release");
    for (k, task) in waiters {
        let guard = joined(task, Duration::from_secs(10), &format!("waiter {k}")).await;
        let fields = hgetall(&raw, name).await;
        assert_eq!(
            fields.keys().collect::<Vec<_>>(),
            [&expected[k]],
            "waiter {k} holds, alone"
        );
        assert_eq!(
            queue(&raw, name).await,
            expected[k + 1..],
            "the rest still queued"
        );
        guard.unlock().await.expect("release");
    }
    assert_eq!(exists(&raw, name).await, 0);
    assert_eq!(exists(&raw, &timeout_key(name)).await, 0);
}

#[tokio::test]
async fn a_waiter_that_gives_up_or_is_dropped_leaves_the_queue() {
    let (_server, raw, client) = start().await;
    let name = "nrf:leave";
    let holder = client
        .non_reentrant_fair_lock(name)
        .lock()
        .await
        .expect("hold");
    let (w1, w2, w3) = (Owner::new(), Owner::new(), Owner::new());

    let impatient = {
        let lock = client.non_reentrant_fair_lock(name).with_owner(w1);
        tokio::spawn(async move { lock.try_lock_within(Duration::from_millis(500)).await })
    };
    wait_queue(&raw, name, &[field_of(&client, w1)]).await;
    let dropped = spawn_lock(&client.non_reentrant_fair_lock(name).with_owner(w2));
    wait_queue(&raw, name, &[field_of(&client, w1), field_of(&client, w2)]).await;
    let patient = spawn_lock(&client.non_reentrant_fair_lock(name).with_owner(w3));
    let all = [
        field_of(&client, w1),
        field_of(&client, w2),
        field_of(&client, w3),
    ];
    wait_queue(&raw, name, &all).await;

    let attempt = timeout(Duration::from_secs(5), impatient)
        .await
        .expect("try_lock_within returns")
        .expect("task")
        .expect("try_lock_within");
    assert!(attempt.is_busy());
    dropped.abort();
    assert!(dropped.await.expect_err("aborted").is_cancelled());
    wait_queue(&raw, name, &[field_of(&client, w3)]).await;

    holder.unlock().await.expect("release");
    let taken = joined(patient, Duration::from_secs(10), "W3").await;
    taken.unlock().await.expect("release");
    assert_eq!(exists(&raw, &timeout_key(name)).await, 0);
}

#[tokio::test]
async fn the_layout_is_the_fair_locks_so_the_fair_and_reentrant_locks_exclude_it() {
    let (_server, raw, client) = start().await;
    let name = "nrf:layout";
    let owner = Owner::new();
    let guard = client
        .non_reentrant_fair_lock(name)
        .with_owner(owner)
        .lock_with_lease(Duration::from_secs(20))
        .await
        .expect("lock");

    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.len(), 1);
    assert_eq!(
        fields.get(&field_of(&client, owner)).map(String::as_str),
        Some("1")
    );
    let ttl = pttl(&raw, name).await;
    assert!(
        (19_000..=20_000).contains(&ttl),
        "the lease is the TTL: {ttl}"
    );
    let other = client.fair_lock(name).with_owner(Owner::new());
    assert!(other.try_lock().await.expect("fair try").is_busy());
    let plain = client.lock(name).with_owner(Owner::new());
    assert!(plain.try_lock().await.expect("lock try").is_busy());
    // The same owner through the fair lock re-enters: the hash is one lock.
    let fair_again = client
        .fair_lock(name)
        .with_owner(owner)
        .lock()
        .await
        .expect("re-enter");
    assert_eq!(
        hgetall(&raw, name)
            .await
            .get(&field_of(&client, owner))
            .map(String::as_str),
        Some("2")
    );
    fair_again.unlock().await.expect("partial release");
    guard.unlock().await.expect("release");
    assert_eq!(exists(&raw, name).await, 0);
}

#[test]
fn the_blocking_twin_refuses_its_own_thread_and_serves_others() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let lock: ferrisson::blocking::NonReentrantFairLock =
        client.non_reentrant_fair_lock("nrf:blocking");
    let guard = lock.lock().expect("lock");
    assert!(matches!(lock.lock(), Err(Error::AlreadyHeld { .. })));
    assert!(lock.is_held_by_current_owner().expect("held"));
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.try_lock_within(Duration::from_secs(5)))
    };
    std::thread::sleep(Duration::from_millis(100));
    guard.unlock().expect("release");
    let taken = waiter.join().expect("thread").expect("try_lock_within");
    let taken = taken.acquired().expect("the other thread acquires");
    taken.unlock().expect("release");
    assert_eq!(
        lock.with_wait_timeout(Duration::from_secs(9))
            .expect("W")
            .wait_timeout(),
        Duration::from_secs(9)
    );
    assert!(!lock.delete().expect("delete"));
}
