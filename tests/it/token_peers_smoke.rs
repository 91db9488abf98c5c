//! The third-party token-lock peers (`support::token_peers`: redis-py's `Lock`, node `redlock`
//! 4.2.0) against real servers, each other and raw Redis: that the drivers work and that the
//! peers write what `/work/notes/peers-token-locks.md` says, before ferrisson's token lock is
//! checked against them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::prelude::*;

use crate::support::token_peers::{NodeRedlockPeer, PyAcquire, PyLockPeer, RedlockSettings};
use crate::support::{node::Unavailable, raw_client, RedisServer};

/// The TTL of the locks the tests take.
const TTL: Duration = Duration::from_secs(10);

/// 32 lowercase hex characters: a redis-py `uuid1().hex` token or a redlock value.
fn is_hex32(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

async fn get(raw: &fred::clients::Client, key: &str) -> Option<String> {
    raw.get(key).await.expect("GET")
}

async fn pttl(raw: &fred::clients::Client, key: &str) -> i64 {
    raw.pttl(key).await.expect("PTTL")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

#[tokio::test]
async fn py_acquire_writes_a_32_hex_token_with_the_expected_pttl() -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let py = PyLockPeer::start(&server.url()).await?;
    let key = "token-peers:py";

    let got = py
        .acquire(key, &PyAcquire::try_once(Some(TTL)))
        .await
        .expect("acquire");
    assert!(got.acquired, "{got:?}");
    let token = got.token.clone().expect("the token of an acquired lock");
    assert!(is_hex32(&token), "redis-py token {token:?}");
    assert_eq!(get(&raw, key).await.as_deref(), Some(token.as_str()));
    let ttl = pttl(&raw, key).await;
    assert!((9_000..=10_000).contains(&ttl), "PTTL {ttl} for timeout=10");
    assert_eq!(py.owned(got.handle).await, Ok(true));
    assert_eq!(py.locked(key).await, Ok(true));

    // extend adds to the remaining TTL; reacquire resets it to the timeout.
    py.extend(got.handle, Duration::from_secs(5), false)
        .await
        .expect("extend");
    let ttl = pttl(&raw, key).await;
    assert!(
        (14_000..=15_000).contains(&ttl),
        "PTTL {ttl} after extend(5)"
    );
    py.reacquire(got.handle).await.expect("reacquire");
    let ttl = pttl(&raw, key).await;
    assert!(
        (9_000..=10_000).contains(&ttl),
        "PTTL {ttl} after reacquire"
    );

    py.release(got.handle).await.expect("release");
    assert_eq!(get(&raw, key).await, None);
    assert_eq!(py.locked(key).await, Ok(false));

    // timeout=None, redis-py's default: a key without TTL, which extend refuses.
    let forever = py
        .acquire(key, &PyAcquire::try_once(None))
        .await
        .expect("acquire without timeout");
    assert!(forever.acquired);
    assert_eq!(pttl(&raw, key).await, -1);
    let refused = py
        .extend(forever.handle, Duration::from_secs(1), false)
        .await
        .expect_err("extend of a lock without timeout");
    assert_eq!(refused.class, "LockError", "{refused}");
    py.release(forever.handle).await.expect("release");
    py.quit().await;
    Ok(())
}

#[tokio::test]
async fn node_lock_on_three_servers_writes_the_same_value_on_all() -> Result<(), Unavailable> {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let node = NodeRedlockPeer::start(&urls).await?;
    assert_eq!((node.servers(), node.connected_at_start()), (3, 3));
    let key = "token-peers:node";

    let before = now_ms();
    let lock = node
        .lock(key, TTL, &RedlockSettings::default())
        .await
        .expect("lock");
    let after = now_ms();
    assert!(is_hex32(&lock.value), "redlock value {:?}", lock.value);
    assert_eq!(lock.attempts, 1);
    // start + ttl - (round(0.01 * ttl) + 2)
    let drift = 100 + 2;
    assert!(
        (before + 10_000 - drift..=after + 10_000 - drift).contains(&lock.expiration_ms),
        "expiration {} not within [{before}, {after}] + 10 s - {drift} ms",
        lock.expiration_ms
    );
    for (i, url) in urls.iter().enumerate() {
        let raw = raw_client(url).await;
        assert_eq!(get(&raw, key).await.as_deref(), Some(lock.value.as_str()));
        let ttl = pttl(&raw, key).await;
        assert!((9_000..=10_000).contains(&ttl), "server {i}: PTTL {ttl}");
        assert_eq!(node.get(key, i).await, Ok(Some(lock.value.clone())));
    }

    // extend replaces the TTL on every server, with the same value.
    let extended = node
        .extend(lock.handle, Duration::from_secs(20))
        .await
        .expect("extend");
    assert_eq!(extended.value, lock.value);
    assert!(extended.expiration_ms > lock.expiration_ms);
    for url in &urls {
        let raw = raw_client(url).await;
        let ttl = pttl(&raw, key).await;
        assert!(
            (19_000..=20_000).contains(&ttl),
            "PTTL {ttl} after extend(20 s)"
        );
    }

    node.unlock(lock.handle).await.expect("unlock");
    for url in &urls {
        assert_eq!(get(&raw_client(url).await, key).await, None);
    }
    // A second unlock finds nothing to delete: no quorum.
    let again = node.unlock(lock.handle).await.expect_err("second unlock");
    assert_eq!(again.class, "LockError", "{again}");
    node.quit().await;
    Ok(())
}

#[tokio::test]
async fn a_node_lock_excludes_a_py_acquire_and_back() -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let node = NodeRedlockPeer::start(&[server.url()]).await?;
    let py = PyLockPeer::start(&server.url()).await?;

    // node holds: redis-py's SET NX fails.
    let key = "token-peers:node-holds";
    let lock = node
        .lock(key, TTL, &RedlockSettings::once())
        .await
        .expect("node lock");
    let refused = py
        .acquire(key, &PyAcquire::try_once(Some(TTL)))
        .await
        .expect("py acquire");
    assert!(!refused.acquired, "{refused:?}");
    assert_eq!(refused.token, None);
    assert_eq!(get(&raw, key).await.as_deref(), Some(lock.value.as_str()));
    assert_eq!(py.locked(key).await, Ok(true));

    // A polling redis-py acquire gets it once node releases.
    let waiter = py.line_peer().send(
        "acquire",
        serde_json::json!({
            "name": key, "timeout_s": 10.0, "blocking": true,
            "blocking_timeout_s": 3.0, "sleep_s": 0.02,
        }),
    );
    let waiter = waiter.await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    node.unlock(lock.handle).await.expect("node unlock");
    let took = waiter.wait(Duration::from_secs(5)).await;
    assert!(took.ok() && took.bool("acquired"), "{took:?}");
    assert_eq!(get(&raw, key).await.as_deref(), took.str("token"));

    // redis-py holds: redlock's EXISTS check fails, and its clean-up leaves the key alone.
    let key = "token-peers:py-holds";
    let held = py
        .acquire(key, &PyAcquire::try_once(Some(TTL)))
        .await
        .expect("py acquire");
    assert!(held.acquired);
    let err = node
        .lock(key, TTL, &RedlockSettings::once())
        .await
        .expect_err("node lock of a key redis-py holds");
    assert_eq!(err.class, "LockError", "{err}");
    assert_eq!(get(&raw, key).await, held.token);
    assert_eq!(py.owned(held.handle).await, Ok(true));
    py.release(held.handle).await.expect("py release");
    node.quit().await;
    py.quit().await;
    Ok(())
}

#[tokio::test]
async fn py_release_of_an_overwritten_key_fails_with_lock_not_owned() -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let py = PyLockPeer::start(&server.url()).await?;
    let key = "token-peers:overwritten";

    let got = py
        .acquire(key, &PyAcquire::try_once(Some(TTL)))
        .await
        .expect("acquire");
    assert!(got.acquired);
    raw.set::<(), _, _>(key, "someone-else", None, None, false)
        .await
        .expect("SET");
    assert_eq!(py.owned(got.handle).await, Ok(false));
    let extend = py
        .extend(got.handle, Duration::from_secs(5), false)
        .await
        .expect_err("extend of an overwritten key");
    assert_eq!(extend.class, "LockNotOwnedError", "{extend}");
    let release = py
        .release(got.handle)
        .await
        .expect_err("release of an overwritten key");
    assert_eq!(release.class, "LockNotOwnedError", "{release}");
    assert_eq!(get(&raw, key).await.as_deref(), Some("someone-else"));
    // redis-py cleared its token before the failed release: a second one is refused locally.
    let again = py.release(got.handle).await.expect_err("second release");
    assert_eq!(again.class, "LockError", "{again}");
    py.quit().await;
    Ok(())
}

#[tokio::test]
async fn node_redlock_over_five_servers_acquires_with_one_stopped() -> Result<(), Unavailable> {
    let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let node = NodeRedlockPeer::start(&urls).await?;
    assert_eq!(node.connected_at_start(), 5);
    servers[4].stop();

    // 4 of 5 answer: quorum 3.
    let key = "token-peers:quorum";
    let lock = node
        .lock(key, TTL, &RedlockSettings::once())
        .await
        .expect("lock with one server stopped");
    for (i, url) in urls.iter().enumerate().take(4) {
        let raw = raw_client(url).await;
        assert_eq!(
            get(&raw, key).await.as_deref(),
            Some(lock.value.as_str()),
            "server {i}"
        );
    }
    assert!(
        node.get(key, 4).await.is_err(),
        "the stopped server answered"
    );

    // 2 of 5 answer: no quorum, and the failed attempt leaves nothing behind.
    servers[3].stop();
    servers[2].stop();
    let other = "token-peers:no-quorum";
    let err = node
        .lock(other, TTL, &RedlockSettings::once())
        .await
        .expect_err("lock with 3 of 5 servers stopped");
    assert_eq!(err.class, "LockError", "{err}");
    for url in &urls[..2] {
        assert_eq!(get(&raw_client(url).await, other).await, None);
    }
    // Nor can the first lock be released on a quorum.
    let err = node
        .unlock(lock.handle)
        .await
        .expect_err("unlock on 2 of 5");
    assert_eq!(err.class, "LockError", "{err}");
    node.quit().await;
    Ok(())
}
