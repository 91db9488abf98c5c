//! ferrisson's token lock and TokenRedLock against the real third-party peers on the same
//! servers and keys (`support::token_peers`): redis-py's `Lock` (PyPI `redis` 6.4.0, in a
//! Python process) and node `redlock` 4.2.0 (in a Node.js process). Both directions: exclusion,
//! a peer's release waking a ferrisson waiter (by keyspace event where the server sends them,
//! by polling where it does not), neither side releasing or extending the other's lock (also
//! after its own lease ran out and the other took the key), extending, and Redlock on 3 and 5
//! servers with one down.

use std::time::Duration;

use ferrisson::{Attempt, Client, Config, KeyspaceEvents, Owner, TokenRedLock, WokenBy};
use fred::prelude::*;
use tokio::time::{sleep, timeout};

use crate::support::node::Unavailable;
use crate::support::redis_state::{pttl, wait_numsub};
use crate::support::token_peers::{NodeRedlockPeer, PyAcquire, PyLockPeer, RedlockSettings};
use crate::support::{connect, connect_with, raw_client, timed_config, RedisServer};

/// The peers' locks' TTL where a wake-up must not come from their expiry.
const TTL: Duration = Duration::from_secs(20);
/// A liveness bound for a wake-up that should be prompt.
const PROMPT: Duration = Duration::from_secs(5);

async fn get(raw: &fred::clients::Client, key: &str) -> Option<String> {
    raw.get(key).await.expect("GET")
}

/// Spawns a ferrisson acquire of `name` by a fresh owner of `client`; the task returns its guard.
fn spawn_waiter(
    client: &Client,
    name: &str,
) -> tokio::task::JoinHandle<ferrisson::Result<ferrisson::TokenGuard>> {
    let lock = client.token_lock(name).with_owner(Owner::new());
    tokio::spawn(async move { lock.lock().await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_and_ferrisson_exclude_each_other_and_neither_releases_the_others_lock(
) -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let py = PyLockPeer::start(&server.url()).await?;
    let key = "interop:py";

    // ferrisson holds: redis-py's SET NX fails.
    let lock = client.token_lock(key).with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    let refused = py
        .acquire(key, &PyAcquire::try_once(Some(TTL)))
        .await
        .expect("py acquire");
    assert!(!refused.acquired);
    assert_eq!(py.locked(key).await, Ok(true));
    guard.unlock().await.expect("unlock");

    // redis-py holds: ferrisson waits, and its unlock deletes nothing.
    let held = py
        .acquire(key, &PyAcquire::try_once(Some(TTL)))
        .await
        .expect("py acquire");
    assert!(held.acquired);
    let attempt = lock
        .try_lock_within(Duration::from_millis(300))
        .await
        .expect("try");
    assert!(matches!(attempt, Attempt::Busy));
    assert!(matches!(
        lock.unlock().await,
        Err(ferrisson::Error::NotHeld { .. })
    ));
    assert_eq!(get(&raw, key).await, held.token, "redis-py's key intact");
    assert_eq!(py.owned(held.handle).await, Ok(true));
    py.release(held.handle).await.expect("py release");

    // redis-py's lease runs out and ferrisson takes the key: redis-py can neither extend nor
    // release it (its compare fails), and ours is intact.
    let short = py
        .acquire(key, &PyAcquire::try_once(Some(Duration::from_millis(300))))
        .await
        .expect("py acquire");
    assert!(short.acquired);
    let ours = lock
        .try_lock_within(Duration::from_secs(5))
        .await
        .expect("try")
        .acquired()
        .expect("taken once redis-py's lease ran out");
    let extend = py
        .extend(short.handle, Duration::from_secs(5), false)
        .await
        .expect_err("redis-py extends a key it no longer holds");
    assert_eq!(extend.class, "LockNotOwnedError", "{extend}");
    let release = py
        .release(short.handle)
        .await
        .expect_err("redis-py releases a key it no longer holds");
    assert_eq!(release.class, "LockNotOwnedError", "{release}");
    assert_eq!(get(&raw, key).await.as_deref(), Some(ours.holder_field()));
    ours.unlock().await.expect("unlock");

    // And the other way: our fixed lease runs out, redis-py takes the key, our release fails
    // and leaves its key.
    let ours = lock
        .lock_with_lease(Duration::from_millis(300))
        .await
        .expect("lock");
    let theirs = py
        .acquire(
            key,
            &PyAcquire::blocking(Some(TTL), Duration::from_secs(5))
                .with_sleep(Duration::from_millis(20)),
        )
        .await
        .expect("py acquire");
    assert!(theirs.acquired);
    assert!(ours.unlock().await.is_err(), "our lease ran out");
    assert_eq!(get(&raw, key).await, theirs.token);
    assert_eq!(py.owned(theirs.handle).await, Ok(true));
    py.release(theirs.handle).await.expect("py release");
    py.quit().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_py_release_wakes_a_ferrisson_waiter_by_keyspace_event_or_by_poll(
) -> Result<(), Unavailable> {
    for keyspace_events in [true, false] {
        let server = if keyspace_events {
            RedisServer::start_with_args(&["--notify-keyspace-events", "Kgx"])
        } else {
            RedisServer::start()
        };
        let raw = raw_client(&server.url()).await;
        let client = connect(&server).await;
        let py = PyLockPeer::start(&server.url()).await?;
        let key = "interop:py-wakes";
        let held = py
            .acquire(key, &PyAcquire::try_once(Some(TTL)))
            .await
            .expect("py acquire");
        assert!(held.acquired);
        let waiter = spawn_waiter(&client, key);
        if keyspace_events {
            wait_numsub(&raw, &format!("__keyspace@0__:{key}"), 1, PROMPT).await;
        }
        sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "it waits while redis-py holds");
        py.release(held.handle).await.expect("py release");
        let guard = timeout(PROMPT, waiter)
            .await
            .expect("woken by redis-py's release, not its 20 s TTL")
            .expect("join")
            .expect("lock");
        let expected = if keyspace_events {
            WokenBy::Keyspace
        } else {
            WokenBy::BackOff
        };
        assert_eq!(guard.acquisition().woken_by, expected);
        guard.unlock().await.expect("unlock");
        py.quit().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_extends_ours_while_redis_py_polls_and_redis_py_extends_its_own(
) -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let watchdog = Duration::from_millis(900);
    let client = connect_with(timed_config(server.url(), watchdog, Duration::from_secs(5))).await;
    let py = PyLockPeer::start(&server.url()).await?;
    let key = "interop:extend";

    // Ours, renewed past three leases while redis-py polls for it.
    let guard = client.token_lock(key).lock().await.expect("lock");
    let polled = py
        .acquire(
            key,
            &PyAcquire::blocking(Some(TTL), watchdog * 3).with_sleep(Duration::from_millis(50)),
        )
        .await
        .expect("py acquire");
    assert!(!polled.acquired, "still ours after three watchdog leases");
    assert_eq!(get(&raw, key).await.as_deref(), Some(guard.holder_field()));
    assert!(!guard.is_lost());
    guard.unlock().await.expect("unlock");

    // Theirs, extended by redis-py (it adds to the TTL) while ferrisson waits.
    let held = py
        .acquire(key, &PyAcquire::try_once(Some(Duration::from_secs(2))))
        .await
        .expect("py acquire");
    assert!(held.acquired);
    py.extend(held.handle, Duration::from_secs(10), false)
        .await
        .expect("py extend");
    assert!(pttl(&raw, key).await > 10_000, "2 s + 10 s");
    let attempt = client
        .token_lock(key)
        .try_lock_within(Duration::from_millis(300))
        .await
        .expect("try");
    assert!(matches!(attempt, Attempt::Busy));
    py.release(held.handle).await.expect("py release");
    py.quit().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_redlock_and_token_red_lock_on_three_servers_exclude_each_other(
) -> Result<(), Unavailable> {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut clients = Vec::new();
    let mut raws = Vec::new();
    for server in &servers {
        clients.push(connect(server).await);
        raws.push(raw_client(&server.url()).await);
    }
    let node = NodeRedlockPeer::start(&urls).await?;
    let key = "interop:redlock";
    let red = TokenRedLock::new(clients.iter().map(|c| c.token_lock(key))).expect("red");
    let values = || async {
        let mut values = Vec::new();
        for raw in &raws {
            values.push(get(raw, key).await);
        }
        values
    };

    // node holds: ours is busy and leaves nothing.
    let theirs = node
        .lock(key, TTL, &RedlockSettings::once())
        .await
        .expect("node lock");
    assert!(matches!(red.try_lock().await.expect("try"), Attempt::Busy));
    assert_eq!(values().await, vec![Some(theirs.value.clone()); 3]);
    node.unlock(theirs.handle).await.expect("node unlock");

    // ours holds: node's lock fails, and its clean-up (compare-and-delete) leaves ours.
    let ours = red.lock_with_lease(TTL).await.expect("lock");
    let value = values().await[0].clone().expect("held");
    let err = node
        .lock(key, TTL, &RedlockSettings::once())
        .await
        .expect_err("node lock of a key we hold");
    assert_eq!(err.class, "LockError", "{err}");
    assert_eq!(values().await, vec![Some(value.clone()); 3]);
    ours.unlock().await.expect("unlock");
    assert_eq!(values().await, vec![None; 3]);

    // node's lease runs out and ours takes the keys: node's unlock deletes nothing of ours.
    let short = node
        .lock(key, Duration::from_millis(300), &RedlockSettings::once())
        .await
        .expect("node lock");
    let ours = red
        .try_lock_within_with_lease(Duration::from_secs(5), TTL)
        .await
        .expect("try")
        .acquired()
        .expect("taken once node's lease ran out");
    // A majority holds ours: node's keys expire on each server a moment apart, so the round
    // that took the quorum may have found node's key still on one of them (a Redlock
    // acquisition promises a majority, not every master).
    let taken = values().await;
    let value = taken.iter().flatten().next().cloned().expect("held");
    assert_ne!(value, short.value);
    let ours_on =
        |values: &[Option<String>]| values.iter().filter(|v| v.as_ref() == Some(&value)).count();
    assert!(ours_on(&taken) >= 2, "a majority: {taken:?}");
    assert!(
        node.unlock(short.handle).await.is_err(),
        "no quorum to delete"
    );
    let after = values().await;
    assert_eq!(ours_on(&after), ours_on(&taken), "ours intact: {after:?}");
    ours.unlock().await.expect("unlock");
    node.quit().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_redlock_and_token_red_lock_on_five_servers_with_one_down() -> Result<(), Unavailable>
{
    let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(connect(server).await);
    }
    servers[2].stop();
    let node = NodeRedlockPeer::start(&urls).await?;
    let key = "interop:redlock5";
    let red = TokenRedLock::new(clients.iter().map(|c| c.token_lock(key))).expect("red");

    let theirs = node
        .lock(key, TTL, &RedlockSettings::once())
        .await
        .expect("node acquires on 4 of 5");
    let attempt = red.try_lock().await.expect("busy, not an outage");
    assert!(matches!(attempt, Attempt::Busy));
    node.unlock(theirs.handle).await.expect("node unlock");

    let ours = red
        .try_lock_within_with_lease(Duration::from_secs(2), TTL)
        .await
        .expect("try")
        .acquired()
        .expect("ours on 4 of 5");
    assert_eq!(ours.parts().len(), 4);
    let err = node
        .lock(key, TTL, &RedlockSettings::once())
        .await
        .expect_err("node refused");
    assert_eq!(err.class, "LockError", "{err}");
    ours.unlock().await.expect("unlock");
    let again = node
        .lock(key, TTL, &RedlockSettings::once())
        .await
        .expect("node acquires after our release");
    node.unlock(again.handle).await.expect("node unlock");
    node.quit().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_redlock_release_wakes_a_token_lock_waiter_by_keyspace_event(
) -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // Asked for: the client turns the events on at connect.
    let mut config = Config::new(server.url());
    config.keyspace_events = KeyspaceEvents::Enable;
    let client = connect_with(config).await;
    let node = NodeRedlockPeer::start(&[server.url()]).await?;
    let key = "interop:node-wakes";
    let theirs = node
        .lock(key, TTL, &RedlockSettings::once())
        .await
        .expect("node lock");
    let waiter = spawn_waiter(&client, key);
    wait_numsub(&raw, &format!("__keyspace@0__:{key}"), 1, PROMPT).await;
    node.unlock(theirs.handle).await.expect("node unlock");
    let guard = timeout(PROMPT, waiter)
        .await
        .expect("woken by node's release")
        .expect("join")
        .expect("lock");
    assert_eq!(guard.acquisition().woken_by, WokenBy::Keyspace);
    guard.unlock().await.expect("unlock");
    node.quit().await;
    Ok(())
}

/// rslock (the Rust peer, 0.10, the version the family benchmark runs) on the same key: it
/// writes 20 raw bytes. One server: exclusion both ways, its release leaves ours, its value
/// shown escaped; three servers: its Redlock and ours exclude each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rslock_and_ferrisson_exclude_each_other_on_one_server_and_on_three() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(connect(server).await);
    }
    let raw = raw_client(&urls[0]).await;
    let mut one = rslock::LockManager::new(vec![urls[0].clone()]);
    one.set_retry(1, Duration::from_millis(10));
    let key = "interop:rslock";

    // rslock holds: busy for us, its binary value shown escaped, never deleted by our release.
    let theirs = one.lock(key, TTL).await.expect("rslock lock");
    assert_eq!(theirs.val.len(), 20);
    let lock = clients[0].token_lock(key);
    assert!(matches!(lock.try_lock().await.expect("try"), Attempt::Busy));
    assert!(lock.unlock().await.is_err());
    let stored: Vec<u8> = raw.get(key).await.expect("GET");
    assert_eq!(stored, theirs.val, "its value intact");
    let info = clients[0].inspect(key).await.expect("inspect");
    assert_eq!(info.kind, ferrisson::inspect::LockKind::TokenLock);
    assert_eq!(info.holders.len(), 1);
    one.unlock(&theirs).await;

    // We hold: rslock's SET NX fails, and its unlock of a value it never wrote deletes nothing.
    let ours = lock.lock().await.expect("lock");
    assert!(one.lock(key, TTL).await.is_err(), "rslock refused");
    one.unlock(&theirs).await;
    assert_eq!(get(&raw, key).await.as_deref(), Some(ours.holder_field()));
    ours.unlock().await.expect("unlock");

    // Redlock on three servers, both ways.
    let mut three = rslock::LockManager::new(urls.clone());
    three.set_retry(1, Duration::from_millis(10));
    let red = TokenRedLock::new(clients.iter().map(|c| c.token_lock(key))).expect("red");
    let theirs = three.lock(key, TTL).await.expect("rslock Redlock");
    assert!(matches!(red.try_lock().await.expect("try"), Attempt::Busy));
    three.unlock(&theirs).await;
    let ours = red.lock_with_lease(TTL).await.expect("lock");
    assert!(
        three.lock(key, TTL).await.is_err(),
        "rslock Redlock refused"
    );
    ours.unlock().await.expect("unlock");
    assert!(three.lock(key, TTL).await.is_ok(), "free again");
}
