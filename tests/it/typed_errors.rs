//! Misuse and outages get a clear typed error: a guard released after `shutdown`, a client whose
//! runtime is gone, and a `KeepWaiting` acquire whose wait ends while Redis is unreachable or
//! silent (not `Ok(None)`, which means "busy").

use crate::support;

use std::time::{Duration, Instant};

use ferrisson::{Config, Error, Owner, WhenUnavailable};
use support::{connect, connect_with, hold_with_lease, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_unlock_after_shutdown_is_a_shutdown_error() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let guard = client
        .lock("typed:shutdown")
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    client.shutdown().await;
    let err = guard.unlock().await.expect_err("unlock after shutdown");
    assert!(matches!(err, Error::Shutdown), "got {err:?}");
}

#[test]
fn a_client_whose_runtime_is_gone_says_so() {
    let server = RedisServer::start();
    let first = tokio::runtime::Runtime::new().expect("first runtime");
    let client = first.block_on(connect(&server));
    drop(first); // the client's connections and background tasks go with it

    let second = tokio::runtime::Runtime::new().expect("second runtime");
    second.block_on(async {
        let lock = client.lock("typed:runtime").with_owner(Owner::new());
        let err = tokio::time::timeout(Duration::from_secs(5), lock.try_lock())
            .await
            .expect("try_lock does not hang")
            .expect_err("a client without its runtime cannot lock");
        assert!(matches!(err, Error::RuntimeGone), "got {err:?}");
        let err = lock.is_locked().await.expect_err("nor query");
        assert!(matches!(err, Error::RuntimeGone), "got {err:?}");
        assert!(err.to_string().contains("runtime"), "{err}");
    });
}

async fn keep_waiting_client(server: &RedisServer) -> ferrisson::Client {
    let mut config = Config::new(server.url());
    config.when_unavailable = WhenUnavailable::KeepWaiting;
    config.response_timeout = Duration::from_secs(5);
    connect_with(config).await
}

/// An outage longer than the wait: the caller learns that Redis was unreachable, instead of
/// `Ok(None)` ("the lock is busy").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_waiting_outage_longer_than_the_wait_is_an_error() {
    let mut server = RedisServer::start();
    let client = keep_waiting_client(&server).await;
    let lock = client.lock("typed:outage").with_owner(Owner::new());
    server.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let start = Instant::now();
    let result = lock.try_lock_within(Duration::from_millis(600)).await;
    let elapsed = start.elapsed();
    let err = result.expect_err("an outage is not a busy lock");
    assert!(err.is_transient(), "got {err:?}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
}

/// A server that accepts the command but does not answer (paused): the wait bound holds, and the
/// result says Redis did not answer, not that the lock is busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_waiting_silent_server_within_the_wait_is_a_timeout() {
    let server = RedisServer::start();
    let client = keep_waiting_client(&server).await;
    let lock = client.lock("typed:silent").with_owner(Owner::new());
    server.pause();
    let start = Instant::now();
    let result = lock.try_lock_within(Duration::from_millis(400)).await;
    let elapsed = start.elapsed();
    server.resume();
    let err = result.expect_err("no answer is not a busy lock");
    assert!(matches!(err, Error::Timeout(_)), "got {err:?}");
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
}

/// Busy stays `Ok(None)`: Redis answered that another owner holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_waiting_busy_lock_is_still_none() {
    let server = RedisServer::start();
    let client = keep_waiting_client(&server).await;
    let _held = hold_with_lease(&client, "typed:busy", Duration::from_secs(30)).await;
    let lock = client.lock("typed:busy").with_owner(Owner::new());
    let result = lock
        .try_lock_within(Duration::from_millis(200))
        .await
        .expect("a busy lock is no error");
    assert!(result.is_busy());
}
