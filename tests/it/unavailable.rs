//! Behaviour while Redis is unreachable: connecting fails quickly with a typed error, the default
//! FailFast policy fails every acquire at once and recovers after a restart, and KeepWaiting
//! waits within the caller's bound (or, for `lock()`, until the server is back).

use crate::support;

use std::time::{Duration, Instant};

use ferrisson::{Config, Error, Owner, WhenUnavailable};
use support::redis_state::{exists, hgetall};
use support::{connect, connect_with, free_port, raw_client, RedisServer};

fn assert_transient(err: &Error, what: &str) {
    assert!(
        err.is_transient(),
        "{what} should fail with a transient error, got {err:?}"
    );
}

/// Connects a ferrisson client that keeps waiting (within the caller's bound) while Redis is
/// unavailable.
async fn connect_keep_waiting(server: &RedisServer) -> ferrisson::Client {
    let mut config = Config::new(server.url());
    config.when_unavailable = WhenUnavailable::KeepWaiting;
    connect_with(config).await
}

/// Kills the server and gives the client a moment to notice: fred queues commands sent before
/// its first reconnect attempt (about 50 ms after the connection drops) instead of failing
/// them, so the tests below observe an outage in progress, not the instant it starts.
async fn take_down(server: &mut RedisServer) {
    server.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Runs an acquire against a server that is down and checks that it fails with a transient
/// error well within 2 s.
async fn fails_fast<T: std::fmt::Debug>(
    what: &str,
    acquire: impl std::future::Future<Output = ferrisson::Result<T>>,
) {
    let start = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(2), acquire)
        .await
        .unwrap_or_else(|_| panic!("{what} did not fail within 2 s while Redis was down"));
    let err = result.expect_err(&format!("{what} while Redis is down should fail"));
    assert_transient(&err, what);
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_secs(2), "{what} took {elapsed:?}");
}

/// Polls `lock.try_lock()` until it succeeds (the server is back), at most `bound`.
async fn lock_when_back(lock: &ferrisson::Lock, bound: Duration) -> ferrisson::LockGuard {
    let start = Instant::now();
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(2), lock.try_lock()).await;
        match attempt {
            Ok(Ok(ferrisson::Attempt::Acquired(guard))) => return guard,
            Ok(Ok(ferrisson::Attempt::Busy)) => {
                panic!("the lock is held by someone else after the restart")
            }
            Ok(Err(err)) if start.elapsed() < bound => {
                assert_transient(&err, "try_lock while reconnecting");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(_) if start.elapsed() < bound => {}
            Ok(Err(err)) => panic!("still failing {bound:?} after the restart: {err:?}"),
            Err(_) => panic!("try_lock still hangs {bound:?} after the restart"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_a_port_without_server_fails_quickly_with_a_transient_error() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let start = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), ferrisson::Client::connect(&url))
        .await
        .expect("Client::connect hangs when nothing listens");
    let elapsed = start.elapsed();
    let err = result.expect_err("connect to a port without a server should fail");
    assert!(
        matches!(err, Error::Unavailable(_)) || err.is_transient(),
        "expected Unavailable, got {err:?}"
    );
    assert!(
        elapsed < Duration::from_secs(6),
        "connect took {elapsed:?} to fail (connect timeout is 5 s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_acquires_error_at_once_while_down_and_work_again_after_restart() {
    let mut server = RedisServer::start();
    let client = connect(&server).await;
    let lock = client.lock("down:failfast").with_owner(Owner::new());

    take_down(&mut server).await;

    // Each acquire must fail at once: the 2 s bound is far below the 10 s response timeout,
    // and the 5 s wait budget of try_lock_within must not be spent waiting for a dead server.
    fails_fast("lock()", lock.lock()).await;
    fails_fast("try_lock()", lock.try_lock()).await;
    fails_fast(
        "try_lock_within(5 s)",
        lock.try_lock_within(Duration::from_secs(5)),
    )
    .await;

    server.restart();
    let guard = lock_when_back(&lock, Duration::from_secs(10)).await;
    let raw = raw_client(&server.url()).await;
    let fields = hgetall(&raw, "down:failfast").await;
    assert_eq!(
        fields.get(guard.holder_field()).map(String::as_str),
        Some("1"),
        "the lock is held on the restarted server: {fields:?}"
    );
    guard.unlock().await.expect("unlock after the restart");
    assert_eq!(exists(&raw, "down:failfast").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_waiting_try_lock_within_waits_out_its_bound_while_down() {
    let mut server = RedisServer::start();
    let client = connect_keep_waiting(&server).await;
    let lock = client
        .lock("down:keepwaiting:bounded")
        .with_owner(Owner::new());

    take_down(&mut server).await;

    let start = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(3),
        lock.try_lock_within(Duration::from_millis(500)),
    )
    .await
    .expect("try_lock_within(500 ms) was still waiting after 3 s while Redis was down");
    let elapsed = start.elapsed();
    match &result {
        Err(err) => assert_transient(err, "try_lock_within(500 ms)"),
        Ok(ferrisson::Attempt::Busy) => panic!("an outage was reported as a busy lock"),
        Ok(ferrisson::Attempt::Acquired(_)) => panic!("acquired a lock on a server that is down"),
    }
    assert!(
        elapsed >= Duration::from_millis(400),
        "try_lock_within(500 ms) gave up after {elapsed:?}, before its bound ({result:?})"
    );
    assert!(
        elapsed <= Duration::from_secs(2),
        "try_lock_within(500 ms) returned only after {elapsed:?} ({result:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_waiting_lock_started_while_down_succeeds_after_restart() {
    let mut server = RedisServer::start();
    let client = connect_keep_waiting(&server).await;
    let name = "down:keepwaiting:lock";
    let lock = client.lock(name).with_owner(Owner::new());

    take_down(&mut server).await;

    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = lock.lock().await?;
            let field = guard.holder_field().to_owned();
            guard.detach();
            Ok::<_, Error>(field)
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "lock() returned while the server was down: {:?}",
        waiting.await
    );

    server.restart();
    let field = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("lock() did not succeed within 15 s of the restart")
        .expect("the waiting task panicked")
        .expect("lock() started while Redis was down should succeed once it is back");

    let raw = raw_client(&server.url()).await;
    let fields = hgetall(&raw, name).await;
    assert_eq!(
        fields.get(&field).map(String::as_str),
        Some("1"),
        "the lock is held on the restarted server: {fields:?}"
    );
    lock.unlock().await.expect("unlock the detached hold");
    assert_eq!(exists(&raw, name).await, 0);
}
