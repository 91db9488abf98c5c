//! Go's redsync (`support::redsync`, redsync v4.17.0 over go-redis v9) against ferrisson's
//! token lock and `TokenRedLock`, both directions: the same keys, the same token discipline
//! (`SET NX PX` with a random value; release and extend compare the value first).
//!
//! Every test's name contains `redsync` (the module's name), so `cargo test --test it --
//! redsync` runs them.

use crate::support;

use std::time::Duration;

use ferrisson::inspect::LockKind;
use ferrisson::{Client, Config, Error, Owner, TokenRedLock};
use fred::prelude::*;
use support::redis_state::{exists, pttl};
use support::redsync::{MutexOptions, RedsyncPeer, Unavailable};
use support::{connect, raw_client, RedisServer};

const EXPIRY: Duration = Duration::from_secs(10);

/// redsync's value: 16 random bytes in standard base64, 24 characters ending `==`.
fn is_redsync_value(value: &str) -> bool {
    value.len() == 24 && value.ends_with("==")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redsync_and_ferrissons_token_lock_exclude_each_other_both_ways() -> Result<(), Unavailable>
{
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let redsync = RedsyncPeer::start(&[server.url()]).await?;
    let name = "redsync:exclusion";

    let theirs = redsync.try_lock(name, EXPIRY).await.expect("redsync locks");
    assert!(is_redsync_value(&theirs.value), "{}", theirs.value);
    let stored: Option<String> = raw.get(name).await.expect("GET");
    assert_eq!(stored.as_deref(), Some(theirs.value.as_str()));
    let ttl = pttl(&raw, name).await;
    assert!(ttl > 8_000 && ttl <= 10_000, "redsync's expiry: PTTL {ttl}");
    let info = client.inspect(name).await.expect("inspect");
    assert_eq!(info.kind, LockKind::TokenLock, "{info:?}");
    let lock = client.token_lock(name).with_owner(Owner::new());
    let attempt = lock
        .try_lock_within(Duration::from_millis(300))
        .await
        .expect("try_lock");
    assert!(
        attempt.acquired().is_none(),
        "ferrisson got in over redsync"
    );
    assert!(redsync.unlock(&theirs).await.expect("redsync unlock"));
    assert_eq!(exists(&raw, name).await, 0);

    let ours = lock.lock_with_lease(EXPIRY).await.expect("ferrisson locks");
    let refused = redsync
        .try_lock(name, EXPIRY)
        .await
        .expect_err("redsync refused");
    assert_eq!(refused.class, "ErrTaken", "{refused}");
    let stored: Option<String> = raw.get(name).await.expect("GET");
    assert_eq!(stored.as_deref(), Some(ours.holder_field()), "left alone");
    ours.unlock().await.expect("ferrisson unlock");
    let again = redsync
        .try_lock(name, EXPIRY)
        .await
        .expect("redsync locks again");
    assert!(redsync.unlock(&again).await.expect("redsync unlock"));
    redsync.quit().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redsync_and_ferrisson_refuse_to_release_or_extend_a_lock_by_another_value(
) -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let redsync = RedsyncPeer::start(&[server.url()]).await?;
    let name = "redsync:non-owner";

    // redsync with a value that is not ferrisson's token: neither release nor extend.
    let ours = (client.token_lock(name).with_owner(Owner::new()))
        .lock_with_lease(Duration::from_secs(5))
        .await
        .expect("ferrisson locks");
    let stranger = redsync
        .mutex_for(name, "bm90IHRoZSBvd25lciEhIQ==", Duration::from_secs(60))
        .await;
    let released = redsync.unlock(&stranger).await;
    assert!(
        !matches!(released, Ok(true)),
        "redsync released: {released:?}"
    );
    let extended = redsync.extend(&stranger).await;
    assert!(
        !matches!(extended, Ok(true)),
        "redsync extended: {extended:?}"
    );
    let stored: Option<String> = raw.get(name).await.expect("GET");
    assert_eq!(stored.as_deref(), Some(ours.holder_field()));
    assert!(pttl(&raw, name).await <= 5_000, "not extended to 60 s");
    ours.unlock().await.expect("ferrisson unlock");

    // ferrisson with a value that is not redsync's.
    let theirs = redsync.try_lock(name, EXPIRY).await.expect("redsync locks");
    let wrong = client
        .token_lock(name)
        .release_token("bm90IHRoZSBvd25lciEhIQ==")
        .await
        .expect("release_token");
    assert!(!wrong, "released by another value");
    let stored: Option<String> = raw.get(name).await.expect("GET");
    assert_eq!(stored.as_deref(), Some(theirs.value.as_str()));
    assert!(redsync.unlock(&theirs).await.expect("redsync unlock"));
    redsync.quit().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redsync_and_ferrisson_release_and_extend_each_others_locks_by_token(
) -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let redsync = RedsyncPeer::start(&[server.url()]).await?;
    let name = "redsync:by-token";

    // ferrisson releases redsync's lock by its value.
    let theirs = redsync.try_lock(name, EXPIRY).await.expect("redsync locks");
    let lock = client.token_lock(name);
    assert!(lock
        .release_token(&theirs.value)
        .await
        .expect("release_token"));
    assert_eq!(exists(&raw, name).await, 0);
    let gone = redsync.unlock(&theirs).await;
    assert!(
        !matches!(gone, Ok(true)),
        "redsync released twice: {gone:?}"
    );

    // redsync extends, then releases, ferrisson's lock by its token.
    let ours = (lock.with_owner(Owner::new()))
        .lock_with_lease(Duration::from_secs(5))
        .await
        .expect("ferrisson locks");
    let by_token = redsync
        .mutex_for(name, ours.holder_field(), Duration::from_secs(60))
        .await;
    assert!(redsync.extend(&by_token).await.expect("redsync extends"));
    let ttl = pttl(&raw, name).await;
    assert!(ttl > 50_000, "extended to redsync's 60 s: PTTL {ttl}");
    assert!(redsync.unlock(&by_token).await.expect("redsync releases"));
    assert_eq!(exists(&raw, name).await, 0);
    assert!(
        matches!(ours.unlock().await, Err(Error::LeaseLost { .. })),
        "ferrisson's lock was released by redsync"
    );
    redsync.quit().await;
    Ok(())
}

/// Three servers, one stopped before either side starts: redsync's Redlock and ferrisson's
/// `TokenRedLock` each win 2 of 3 and exclude each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redsync_redlock_and_token_red_lock_exclude_each_other_with_one_server_stopped(
) -> Result<(), Unavailable> {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    servers[2].stop();
    let mut clients = Vec::new();
    for url in &urls {
        let mut config = Config::new(url);
        config.lazy_initialization = true;
        clients.push(Client::new(config).await.expect("a lazy client"));
    }
    for client in &clients[..2] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while client.lock("redsync:probe").is_locked().await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "not connected");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let redsync = RedsyncPeer::start(&urls).await?;
    let name = "redsync:redlock";
    let red = TokenRedLock::new(clients.iter().map(|c| c.token_lock(name))).expect("red");

    let theirs = redsync
        .lock(name, MutexOptions::once(EXPIRY))
        .await
        .expect("redsync wins 2 of 3");
    for url in &urls[..2] {
        let stored: Option<String> = raw_client(url).await.get(name).await.expect("GET");
        assert_eq!(stored.as_deref(), Some(theirs.value.as_str()));
    }
    let attempt = red
        .try_lock_within_with_lease(Duration::from_millis(300), EXPIRY)
        .await;
    assert!(
        !matches!(attempt, Ok(ferrisson::Attempt::Acquired(_))),
        "ferrisson won over redsync's majority"
    );
    assert!(redsync.unlock(&theirs).await.expect("redsync unlock"));

    let ours = red
        .lock_with_lease(EXPIRY)
        .await
        .expect("ferrisson wins 2 of 3");
    assert_eq!(ours.parts().len(), 2);
    let refused = redsync
        .lock(name, MutexOptions::once(EXPIRY))
        .await
        .expect_err("redsync refused");
    assert!(
        ["ErrTaken", "ErrFailed", "ErrNodeTaken"].contains(&refused.class.as_str()),
        "{refused}"
    );
    ours.unlock().await.expect("ferrisson unlock");
    for url in &urls[..2] {
        assert_eq!(
            exists(&raw_client(url).await, name).await,
            0,
            "left nothing"
        );
    }
    let again = redsync
        .lock(name, MutexOptions::once(EXPIRY))
        .await
        .expect("redsync wins once ferrisson is gone");
    assert!(redsync.unlock(&again).await.expect("redsync unlock"));
    redsync.quit().await;
    Ok(())
}
