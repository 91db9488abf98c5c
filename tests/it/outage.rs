//! Composite locks started while masters are down (issue 47): clients made with
//! `Config::lazy_initialization` connect in the background, so that a process started during an
//! outage can build its `TokenRedLock`, `RedLock` and `MultiLock` and let their rules decide: a
//! majority acquires (and excludes the peers: node `redlock`, redis-py, rslock), a minority
//! refuses within its wait and leaves nothing, and a master that returns is used by the next
//! acquire.

use crate::support;

use std::time::{Duration, Instant};

use ferrisson::{Client, Config, Error, MultiLock, RedLock, TokenRedLock};
use fred::prelude::*;
use support::token_peers::{NodeRedlockPeer, PyAcquire, PyLockPeer, RedlockSettings, Unavailable};
use support::{raw_client, RedisServer};

const TTL: Duration = Duration::from_secs(30);

/// A client of `url` that connects in the background.
async fn lazy(url: &str) -> Client {
    let mut config = Config::new(url);
    config.lazy_initialization = true;
    let made = Instant::now();
    let client = Client::new(config).await.expect("a lazy client is made");
    // Made without waiting for its server (which may be down).
    assert!(
        made.elapsed() < Duration::from_secs(2),
        "{:?}",
        made.elapsed()
    );
    client
}

/// Waits (bounded) until `client` answers: its background connection is up.
async fn connected(client: &Client) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while let Err(err) = client.lock("outage:probe").is_locked().await {
        assert!(
            Instant::now() < deadline,
            "the client did not connect: {err}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three masters, the last `down` of them stopped before the clients are made.
async fn masters(down: usize) -> (Vec<RedisServer>, Vec<String>, Vec<Client>) {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    for server in servers.iter_mut().skip(3 - down) {
        server.stop();
    }
    let mut clients = Vec::new();
    for url in &urls {
        clients.push(lazy(url).await);
    }
    for client in clients.iter().take(3 - down) {
        connected(client).await;
    }
    (servers, urls, clients)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_client_fails_as_unavailable_until_its_server_is_up() {
    let mut server = RedisServer::start();
    server.stop();
    let client = lazy(&server.url()).await;
    let err = client
        .lock("outage:x")
        .try_lock()
        .await
        .expect_err("server down");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    server.restart();
    connected(&client).await;
    let guard = client.lock("outage:x").lock().await.expect("lock once up");
    let raw = raw_client(&server.url()).await;
    let fields: std::collections::HashMap<String, String> =
        raw.hgetall("outage:x").await.expect("HGETALL");
    assert_eq!(
        fields.get(guard.holder_field()).map(String::as_str),
        Some("1")
    );
    guard.unlock().await.expect("unlock");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_red_lock_started_with_one_master_down_takes_two_and_excludes_the_peers(
) -> Result<(), Unavailable> {
    let (mut servers, urls, clients) = masters(1).await;
    let key = "outage:token-red";
    let red = TokenRedLock::new(clients.iter().map(|c| c.token_lock(key))).expect("red");
    let ours = red.lock_with_lease(TTL).await.expect("2 of 3 acquire");
    assert_eq!(ours.parts().len(), 2);
    let mut tokens = Vec::new();
    for url in &urls[..2] {
        let value: Option<String> = raw_client(url).await.get(key).await.expect("GET");
        tokens.push(value.expect("held on the masters that are up"));
    }
    assert_eq!(tokens[0], tokens[1], "one token on every master");

    // The peers are excluded.
    let node = NodeRedlockPeer::start(&urls).await?;
    let err = node
        .lock(key, TTL, &RedlockSettings::once())
        .await
        .expect_err("node redlock refused");
    assert_eq!(err.class, "LockError", "{err}");
    let py = PyLockPeer::start(&urls[0]).await?;
    let refused = py
        .acquire(key, &PyAcquire::try_once(Some(TTL)))
        .await
        .expect("redis-py acquire");
    assert!(!refused.acquired, "redis-py refused");
    let mut rslock = rslock::LockManager::new(urls.clone());
    rslock.set_retry(1, Duration::from_millis(10));
    assert!(rslock.lock(key, TTL).await.is_err(), "rslock refused");
    ours.unlock().await.expect("unlock");
    for url in &urls[..2] {
        assert_eq!(
            support::redis_state::exists(&raw_client(url).await, key).await,
            0
        );
    }

    // The master returns: the next acquire uses it.
    servers[2].restart();
    connected(&clients[2]).await;
    let ours = red.lock_with_lease(TTL).await.expect("3 of 3 acquire");
    assert_eq!(ours.parts().len(), 3);
    let value: Option<String> = raw_client(&urls[2]).await.get(key).await.expect("GET");
    assert!(value.is_some(), "held on the returned master");
    ours.unlock().await.expect("unlock");
    node.quit().await;
    py.quit().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_masters_down_every_composite_lock_refuses_within_its_wait_and_leaves_nothing() {
    let (_servers, urls, clients) = masters(2).await;
    let raw = raw_client(&urls[0]).await;
    let wait = Duration::from_millis(500);
    let bound = wait + Duration::from_secs(5);

    let key = "outage:minority:token";
    let red = TokenRedLock::new(clients.iter().map(|c| c.token_lock(key))).expect("red");
    let started = Instant::now();
    let attempt = tokio::time::timeout(bound, red.try_lock_within_with_lease(wait, TTL))
        .await
        .expect("bounded");
    assert!(
        !matches!(attempt, Ok(ferrisson::Attempt::Acquired(_))),
        "a minority acquired"
    );
    assert!(started.elapsed() < bound);
    assert_eq!(
        support::redis_state::exists(&raw, key).await,
        0,
        "left nothing"
    );

    let key = "outage:minority:red";
    let red = RedLock::new(clients.iter().map(|c| c.lock(key))).expect("red");
    let attempt = tokio::time::timeout(bound, red.try_lock_within_with_lease(wait, TTL))
        .await
        .expect("bounded");
    assert!(!matches!(attempt, Ok(ferrisson::Attempt::Acquired(_))));
    assert_eq!(
        support::redis_state::exists(&raw, key).await,
        0,
        "left nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_red_lock_takes_two_of_three_and_a_multilock_refuses_with_one_master_down() {
    let (mut servers, urls, clients) = masters(1).await;
    let raw = raw_client(&urls[0]).await;

    let key = "outage:red";
    let red = RedLock::new(clients.iter().map(|c| c.lock(key))).expect("red");
    let ours = red.lock_with_lease(TTL).await.expect("2 of 3 acquire");
    // Another process's RedLock over the same masters is excluded.
    let other: Vec<Client> = {
        let mut other = Vec::new();
        for url in &urls {
            other.push(lazy(url).await);
        }
        other
    };
    connected(&other[0]).await;
    connected(&other[1]).await;
    let theirs = RedLock::new(other.iter().map(|c| c.lock(key))).expect("red");
    let attempt = theirs
        .try_lock_within_with_lease(Duration::from_millis(300), TTL)
        .await;
    assert!(!matches!(attempt, Ok(ferrisson::Attempt::Acquired(_))));
    ours.unlock().await.expect("unlock");
    assert_eq!(support::redis_state::exists(&raw, key).await, 0);

    // MultiLock takes every part or none.
    let key = "outage:multi";
    let multi = MultiLock::new(clients.iter().map(|c| c.lock(key))).expect("multi");
    let attempt = multi
        .try_lock_within_with_lease(Duration::from_millis(300), TTL)
        .await;
    assert!(!matches!(attempt, Ok(ferrisson::Attempt::Acquired(_))));
    assert_eq!(
        support::redis_state::exists(&raw, key).await,
        0,
        "left nothing"
    );

    servers[2].restart();
    connected(&clients[2]).await;
    let all = multi
        .lock_with_lease(TTL)
        .await
        .expect("all three once back");
    all.unlock().await.expect("unlock");
}
