//! Cancel safety: dropped acquire futures (while waiting, or right after their script was sent)
//! leave neither a held lock nor a subscription; dropped guards and dropped `unlock()` futures
//! still release the lock, in the background. Every test runs against its own real
//! `redis-server`.

use crate::support;

use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use ferrisson::{Attempt, Client, Owner, WokenBy};
use support::redis_state::{
    channel_of, holder_fields, poll_until, wait_key_gone, wait_numsub, POLL_INTERVAL,
};
use support::{connect, hold_with_lease, raw_client, RedisServer};
use tokio::time::timeout;

const HOLD: Duration = Duration::from_secs(20);

// 8 -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_dropped_while_waiting_leaves_no_hold_and_no_subscription() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    let canceller_client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "cancel:waiting";
    let channel = channel_of(name);

    let holder_guard = hold_with_lease(&holder_client, name, HOLD).await;
    let canceller = canceller_client.lock(name).with_owner(Owner::new());

    let cancelled = timeout(Duration::from_millis(100), canceller.lock()).await;
    assert!(
        cancelled.is_err(),
        "lock() returned while held: {cancelled:?}"
    );
    // Cancel also at many earlier points: during the first attempt, the SUBSCRIBE, the retry.
    for k in 0..30u64 {
        let cancelled = timeout(Duration::from_micros(k * 200), canceller.lock()).await;
        assert!(
            cancelled.is_err(),
            "lock() returned while held: {cancelled:?}"
        );
        let cancelled = timeout(
            Duration::from_micros(k * 200),
            canceller.try_lock_within(Duration::from_secs(10)),
        )
        .await;
        assert!(
            matches!(cancelled, Err(_) | Ok(Ok(Attempt::Busy))),
            "try_lock_within returned a guard while held: {cancelled:?}"
        );
    }

    assert_eq!(
        holder_fields(&raw, name).await,
        vec![holder_guard.holder_field().to_string()]
    );
    wait_numsub(&raw, &channel, 0, Duration::from_secs(3)).await;
    assert!(!canceller.is_held_by_current_owner().await.expect("hexists"));

    // The client's subscription bookkeeping still works: a new waiter is woken by the release.
    let waiter_lock = canceller.clone();
    let waiter = tokio::spawn(async move { waiter_lock.lock().await.expect("waiter acquires") });
    support::wait_parked(&canceller_client, name, 1).await;
    holder_guard.unlock().await.expect("holder releases");
    let guard = timeout(Duration::from_secs(2), waiter)
        .await
        .expect("waiter not woken within 2 s of the release")
        .expect("waiter task");
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message);
    guard.unlock().await.expect("waiter releases");
    wait_numsub(&raw, &channel, 0, Duration::from_secs(3)).await;
}

// 9 -------------------------------------------------------------------------------------------

/// Creates `lock()` futures on a free lock and drops them after `k` manual polls (with yields in
/// between) or after a timeout of `k * 10` µs, 200 times. A future that completed hands back its
/// guard, which is dropped too.
async fn drop_acquires_at_many_points(client: &Client, name: &str, fresh_owner_each_time: bool) {
    let lock = client.lock(name);
    drop_acquires_of(&lock, fresh_owner_each_time).await;
}

/// 200 acquires of `lock`, each dropped at another point: after a few polls, or by a timeout of
/// a few microseconds (any that completes is released by dropping its guard). Each by an owner
/// of its own, or all by one.
pub(crate) async fn drop_acquires_of<P: ferrisson::Protocol>(
    lock: &ferrisson::Handle<P>,
    fresh_owner_each_time: bool,
) {
    let shared_owner = Owner::new();
    let mut completed = 0;
    for k in 0..200u64 {
        let owner = if fresh_owner_each_time {
            Owner::new()
        } else {
            shared_owner
        };
        let lock = lock.with_owner(owner);
        let guard: Option<ferrisson::Guard<P>> = if k % 2 == 0 {
            let mut acquire = pin!(lock.lock());
            let mut got = None;
            for _ in 0..(k / 2) % 5 + 1 {
                if let Poll::Ready(result) = futures::poll!(acquire.as_mut()) {
                    got = Some(result.expect("acquire"));
                    break;
                }
                tokio::task::yield_now().await;
            }
            got
        } else {
            timeout(Duration::from_micros(k * 10), lock.lock())
                .await
                .ok()
                .map(|result| result.expect("acquire"))
        };
        if guard.is_some() {
            completed += 1;
        }
        drop(guard);
    }
    // Not an assertion target, but shows in failure output how the loop went.
    eprintln!("{completed} of 200 acquires completed before being dropped");
}

async fn assert_left_clean(server: &RedisServer, raw: &fred::clients::Client, name: &str) {
    wait_key_gone(raw, name, Duration::from_secs(3)).await;
    wait_numsub(raw, &channel_of(name), 0, Duration::from_secs(3)).await;
    let other = connect(server).await;
    let guard = other
        .lock(name)
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("another client gets the lock at once");
    guard.unlock().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_right_after_sending_leave_no_hold_fresh_owners() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "cancel:sent-fresh";
    drop_acquires_at_many_points(&client, name, true).await;
    assert_left_clean(&server, &raw, name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_right_after_sending_leave_no_hold_same_owner() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "cancel:sent-same";
    drop_acquires_at_many_points(&client, name, false).await;
    assert_left_clean(&server, &raw, name).await;
}

#[tokio::test]
async fn acquires_dropped_right_after_sending_leave_no_hold_current_thread_runtime() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "cancel:sent-current-thread";
    drop_acquires_at_many_points(&client, name, true).await;
    assert_left_clean(&server, &raw, name).await;
}

// 10 ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_in_the_background_without_blocking() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "cancel:drop-guard";
    let lock = client.lock(name).with_owner(Owner::new());

    let guard = lock.lock_with_lease(HOLD).await.expect("acquire");
    assert!(lock.is_locked().await.expect("is_locked"));
    let start = std::time::Instant::now();
    drop(guard);
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(100),
        "drop(guard) blocked for {took:?}"
    );
    let released = poll_until(
        Duration::from_secs(2),
        POLL_INTERVAL,
        || async { lock.is_locked().await.expect("is_locked") },
        |locked| !*locked,
    )
    .await;
    if released.is_err() {
        panic!(
            "dropped guard's lock still held after 2 s: {:?}",
            holder_fields(&raw, name).await
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_wakes_a_waiter_on_another_client() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    let waiter_client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "cancel:drop-guard-waiter";

    let guard = hold_with_lease(&holder_client, name, HOLD).await;
    let waiter_lock = waiter_client.lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move { waiter_lock.lock().await.expect("waiter acquires") });
    support::wait_parked(&waiter_client, name, 1).await;
    assert!(!waiter.is_finished(), "waiter got a lock that is held");

    drop(guard);
    let waiter_guard = timeout(Duration::from_secs(2), waiter)
        .await
        .expect("waiter not woken within 2 s of dropping the holder's guard")
        .expect("waiter task");
    assert_eq!(waiter_guard.acquisition().woken_by, WokenBy::Message);
    assert_eq!(
        holder_fields(&raw, name).await,
        vec![waiter_guard.holder_field().to_string()]
    );
    waiter_guard.unlock().await.expect("waiter releases");
}

// 11 ------------------------------------------------------------------------------------------

/// Polls `hold_count` of `lock` until it equals `expected` (0 also means the key is gone).
async fn wait_hold_count(lock: &ferrisson::Lock, expected: u64, what: &str) {
    let polled = poll_until(
        Duration::from_secs(2),
        POLL_INTERVAL,
        || async { lock.hold_count().await.expect("hold_count") },
        |count| *count == expected,
    )
    .await;
    if let Err(count) = polled {
        panic!("{what}: hold count stayed {count}, expected {expected}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_unlock_futures_still_release_exactly_one_hold() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "cancel:unlock";
    let lock = client.lock(name).with_owner(Owner::new());

    // Four holds, released by four differently abandoned unlock() futures.
    let mut guards = Vec::new();
    for _ in 0..4 {
        guards.push(lock.lock_with_lease(HOLD).await.expect("acquire"));
    }
    assert_eq!(lock.hold_count().await.expect("hold_count"), 4);

    // Dropped without being polled: the guard inside is dropped and releases.
    let never_polled = guards.pop().expect("guard").unlock();
    drop(never_polled);
    wait_hold_count(&lock, 3, "unpolled unlock future").await;

    // Polled once (the release script is sent), then dropped.
    {
        let mut unlock = pin!(guards.pop().expect("guard").unlock());
        if let Poll::Ready(result) = futures::poll!(unlock.as_mut()) {
            result.expect("unlock");
        }
    }
    wait_hold_count(&lock, 2, "unlock future polled once").await;

    // A zero timeout polls once and gives up.
    let _ = timeout(Duration::ZERO, guards.pop().expect("guard").unlock()).await;
    wait_hold_count(&lock, 1, "unlock future under a zero timeout").await;

    // The last one: the lock ends free and a waiter on another client gets it.
    let other = connect(&server).await;
    let waiter_lock = other.lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move { waiter_lock.lock().await.expect("waiter acquires") });
    wait_numsub(&raw, &channel_of(name), 1, Duration::from_secs(5)).await;
    {
        let mut unlock = pin!(guards.pop().expect("guard").unlock());
        let _ = futures::poll!(unlock.as_mut());
    }
    let waiter_guard = timeout(Duration::from_secs(2), waiter)
        .await
        .expect("waiter not woken after the dropped unlock")
        .expect("waiter task");
    assert_eq!(
        holder_fields(&raw, name).await,
        vec![waiter_guard.holder_field().to_string()]
    );
    waiter_guard.unlock().await.expect("waiter releases");
    wait_key_gone(&raw, name, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_future_dropped_at_many_points_ends_released() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "cancel:unlock-many";
    let lock = client.lock(name).with_owner(Owner::new());
    for k in 0..50u64 {
        let guard = lock.lock_with_lease(HOLD).await.expect("acquire");
        let _ = timeout(Duration::from_micros(k * 20), guard.unlock()).await;
        wait_key_gone(&raw, name, Duration::from_secs(2)).await;
    }
}
