//! The token lock (`Client::token_lock`: the `SET NX PX` lock of redis-py, redsync, node
//! `redlock` and rslock) against a real redis-server: its layout (a string holding the owner's
//! token), no re-entry, exclusion with keys it does not own (a peer's, with or without a TTL, and
//! a Redisson hash) which it never deletes, waking by keyspace events where the server sends them
//! and polling where it does not, the watchdog's compare-and-PEXPIRE and `lost()`, force unlock,
//! dropped acquires, `Config::keyspace_events`, and the blocking twin. The real peers are in
//! `token_interop.rs`.

use crate::support;

use std::future::Future;
use std::time::Duration;

use ferrisson::{Config, Error, KeyspaceEvents, Owner, RemainingTtl, WokenBy};
use fred::prelude::*;
use support::redis_state::{exists, numsub, pttl, wait_key_gone, wait_numsub};
use support::{connect, connect_with, raw_client, timed_config, RedisServer};
use tokio::time::{timeout, Instant};

/// The keyspace channel of `name` in database 0.
fn keyspace(name: &str) -> String {
    format!("__keyspace@0__:{name}")
}

/// A server that sends the keyspace events of deletions and expiries.
fn server_with_keyspace_events() -> RedisServer {
    RedisServer::start_with_args(&["--notify-keyspace-events", "Kgx"])
}

async fn get(raw: &fred::clients::Client, key: &str) -> Option<String> {
    raw.get(key).await.expect("GET")
}

/// `SET key value NX` (with `PX ms` when given), as a peer takes its lock.
async fn peer_set(raw: &fred::clients::Client, key: &str, value: &str, px: Option<u64>) -> bool {
    let mut args = vec![key.to_owned(), value.to_owned(), "NX".to_owned()];
    if let Some(ms) = px {
        args.extend(["PX".to_owned(), ms.to_string()]);
    }
    let reply: Value = raw.custom(fred::cmd!("SET"), args).await.expect("SET NX");
    !reply.is_null()
}

/// The peers' release: `GET == token → DEL` in one script; whether it deleted.
async fn peer_release(raw: &fred::clients::Client, key: &str, token: &str) -> bool {
    let script = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
    let deleted: i64 = raw
        .eval(script, vec![key], vec![token])
        .await
        .expect("compare-and-delete");
    deleted == 1
}

/// Runs `acquire` and returns its outcome once it is done, within 10 s.
async fn within_10s<T>(acquire: impl Future<Output = T>) -> T {
    timeout(Duration::from_secs(10), acquire)
        .await
        .expect("the acquire ends (a liveness bound)")
}

#[tokio::test]
async fn a_token_lock_is_a_string_holding_the_owners_token_and_only_its_owner_deletes_it() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "token:layout";
    let lock = client.token_lock(name).with_owner(Owner::new());

    let guard = lock.lock().await.expect("lock");
    let token = lock.token();
    assert_eq!(guard.holder_field(), token);
    assert_eq!(
        token,
        format!("{}:{}", client.id(), lock.owner().id()),
        "the token is the owner's holder field"
    );
    let kind: String = raw
        .custom(fred::cmd!("TYPE"), vec![name])
        .await
        .expect("TYPE");
    assert_eq!(kind, "string");
    assert_eq!(get(&raw, name).await.as_deref(), Some(token.as_str()));
    let ttl = pttl(&raw, name).await;
    assert!(
        (20_000..=30_000).contains(&ttl),
        "the watchdog's lease: {ttl}"
    );
    assert!(lock.is_locked().await.expect("is_locked"));
    assert!(lock.is_held_by_current_owner().await.expect("held"));
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);

    // Not reentrant: a second acquire by the holder fails at once, bounded or not.
    assert!(matches!(lock.lock().await, Err(Error::AlreadyHeld { .. })));
    assert!(matches!(
        lock.try_lock().await,
        Err(Error::AlreadyHeld { .. })
    ));
    // Another owner is refused, and its refusal changes nothing.
    let other = client.token_lock(name).with_owner(Owner::new());
    assert!(other
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .is_none());
    assert!(!other.is_held_by_current_owner().await.expect("held"));
    assert_eq!(get(&raw, name).await.as_deref(), Some(token.as_str()));

    guard.unlock().await.expect("unlock");
    assert_eq!(exists(&raw, name).await, 0, "deleted by its owner");
    assert!(matches!(lock.unlock().await, Err(Error::NotHeld { .. })));
    assert!(!lock.is_locked().await.expect("is_locked"));
}

#[tokio::test]
async fn a_peers_key_with_or_without_ttl_keeps_the_lock_busy_and_is_never_touched() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.token_lock("token:peer").with_owner(Owner::new());
    let short = Duration::from_millis(300);

    // A peer's lock with a TTL (node redlock's, redsync's), then one without (redis-py's
    // default `timeout=None`): busy, and left exactly as it is.
    assert!(
        peer_set(
            &raw,
            "token:peer",
            "9f86d081884c7d659a2feaa0c55ad015",
            Some(60_000)
        )
        .await
    );
    assert!(lock
        .try_lock_within(short)
        .await
        .expect("try")
        .acquired()
        .is_none());
    assert_eq!(
        get(&raw, "token:peer").await.as_deref(),
        Some("9f86d081884c7d659a2feaa0c55ad015")
    );
    assert!(pttl(&raw, "token:peer").await > 50_000, "its TTL untouched");
    assert!(matches!(lock.unlock().await, Err(Error::NotHeld { .. })));
    assert!(
        exists(&raw, "token:peer").await == 1,
        "our release leaves a peer's key"
    );

    assert!(peer_set(&raw, "token:forever", "f".repeat(32).as_str(), None).await);
    let forever = client.token_lock("token:forever");
    assert!(forever
        .try_lock_within(short)
        .await
        .expect("try")
        .acquired()
        .is_none());
    assert_eq!(pttl(&raw, "token:forever").await, -1, "no TTL was added");
    assert_eq!(
        forever.remaining_ttl().await.expect("ttl"),
        RemainingTtl::NoExpiry
    );

    // And ours keeps a peer's SET NX out.
    let ours = client.token_lock("token:ours").lock().await.expect("lock");
    assert!(!peer_set(&raw, "token:ours", "peer", Some(1_000)).await);
    ours.unlock().await.expect("unlock");
    assert!(peer_set(&raw, "token:ours", "peer", Some(1_000)).await);
}

#[tokio::test]
async fn a_redisson_hash_lock_and_a_token_lock_on_one_name_exclude_each_other() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let hash = client.lock("token:mixed").lock().await.expect("hash lock");
    let token = client.token_lock("token:mixed").with_owner(Owner::new());
    assert!(token.try_lock().await.expect("try").acquired().is_none());
    hash.unlock().await.expect("unlock");

    let held = token.lock().await.expect("token lock");
    // The hash lock's acquire meets a string: a typed error, never a hold.
    let refused = client
        .lock("token:mixed")
        .with_owner(Owner::new())
        .try_lock()
        .await;
    assert!(
        matches!(refused, Err(Error::WrongType { .. })),
        "{refused:?}"
    );
    held.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_peers_release_wakes_a_waiter_by_its_keyspace_event() {
    let server = server_with_keyspace_events();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "token:keyspace";
    assert!(peer_set(&raw, name, "peer-token-1", Some(20_000)).await);

    let lock = client.token_lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move { lock.lock().await });
    wait_numsub(&raw, &keyspace(name), 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "it waits while the peer holds");

    let released = Instant::now();
    assert!(peer_release(&raw, name, "peer-token-1").await);
    let guard = within_10s(waiter).await.expect("join").expect("lock");
    let woke = released.elapsed();
    assert_eq!(guard.acquisition().woken_by, WokenBy::Keyspace);
    assert_eq!(
        guard.acquisition().attempts,
        3,
        "no poll: tried, subscribed, tried again, parked, tried"
    );
    assert!(
        woke < Duration::from_secs(5),
        "woken by the event, not the 20 s lease: {woke:?}"
    );
    assert_eq!(get(&raw, name).await.as_deref(), Some(guard.holder_field()));
    guard.unlock().await.expect("unlock");
    wait_numsub(&raw, &keyspace(name), 0, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_keyspace_waiter_is_woken_by_the_peers_key_expiring() {
    let server = server_with_keyspace_events();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "token:expiry";
    // No TTL first, so that the waiter parks with no bound but the event, then a short one.
    assert!(peer_set(&raw, name, "peer-token-2", None).await);
    let lock = client.token_lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move { lock.lock().await });
    wait_numsub(&raw, &keyspace(name), 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _: i64 = raw.pexpire(name, 200, None).await.expect("PEXPIRE");
    let guard = within_10s(waiter).await.expect("join").expect("lock");
    assert_eq!(
        guard.acquisition().woken_by,
        WokenBy::Keyspace,
        "the `expired` event woke it (the key had no TTL when it parked)"
    );
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn without_keyspace_events_a_waiter_polls_and_takes_the_lock_after_a_peers_release() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "token:poll";
    assert!(peer_set(&raw, name, "peer-token-3", Some(20_000)).await);

    let lock = client.token_lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move { lock.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "it waits while the peer holds");
    assert_eq!(
        numsub(&raw, &keyspace(name)).await,
        0,
        "nothing to listen to"
    );
    assert!(peer_release(&raw, name, "peer-token-3").await);
    let guard = within_10s(waiter).await.expect("join").expect("lock");
    assert_eq!(guard.acquisition().woken_by, WokenBy::BackOff);
    assert!(
        guard.acquisition().attempts > 2,
        "{:?}",
        guard.acquisition()
    );
    guard.unlock().await.expect("unlock");

    // `Ignore` polls even where the server sends the events.
    let events = server_with_keyspace_events();
    let raw = raw_client(&events.url()).await;
    let mut config = Config::new(events.url());
    config.keyspace_events = KeyspaceEvents::Ignore;
    let ignoring = connect_with(config).await;
    assert!(peer_set(&raw, name, "peer-token-4", Some(20_000)).await);
    let lock = ignoring.token_lock(name);
    let waiter = tokio::spawn(async move { lock.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        numsub(&raw, &keyspace(name)).await,
        0,
        "told to ignore them"
    );
    assert!(peer_release(&raw, name, "peer-token-4").await);
    let guard = within_10s(waiter).await.expect("join").expect("lock");
    assert_eq!(guard.acquisition().woken_by, WokenBy::BackOff);
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn keyspace_events_enable_turns_them_on_at_connect_and_detect_never_does() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let flags = || async {
        let pair: Vec<String> = raw
            .custom(fred::cmd!("CONFIG"), vec!["GET", "notify-keyspace-events"])
            .await
            .expect("CONFIG GET");
        pair[1].clone()
    };
    let _ = connect(&server).await;
    assert_eq!(flags().await, "", "Detect changes nothing");

    let _: Value = raw
        .custom(
            fred::cmd!("CONFIG"),
            vec!["SET", "notify-keyspace-events", "E$"],
        )
        .await
        .expect("CONFIG SET");
    let mut config = Config::new(server.url());
    config.keyspace_events = KeyspaceEvents::Enable;
    let client = connect_with(config).await;
    let now = flags().await;
    for class in ['K', 'g', 'x', 'E', '$'] {
        assert!(now.contains(class), "{class} in {now}");
    }
    // And its waiters use them.
    assert!(peer_set(&raw, "token:enabled", "peer", Some(20_000)).await);
    let lock = client.token_lock("token:enabled");
    let waiter = tokio::spawn(async move { lock.lock().await });
    wait_numsub(&raw, &keyspace("token:enabled"), 1, Duration::from_secs(5)).await;
    assert!(peer_release(&raw, "token:enabled", "peer").await);
    let guard = within_10s(waiter).await.expect("join").expect("lock");
    assert_eq!(guard.acquisition().woken_by, WokenBy::Keyspace);
    guard.unlock().await.expect("unlock");
}

/// A release with a waiter of the same client parked hands the key straight over: one `SET`
/// of the heir's token with the heir's lease, never a moment free, nothing published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_key_to_a_waiter_of_the_same_client() {
    for keyspace_events in [false, true] {
        let server = if keyspace_events {
            server_with_keyspace_events()
        } else {
            RedisServer::start()
        };
        let raw = raw_client(&server.url()).await;
        let client = connect(&server).await;
        let name = "token:handoff";
        let holder = client.token_lock(name).with_owner(Owner::new());
        let guard = holder.lock().await.expect("lock");
        let heir = client.token_lock(name).with_owner(Owner::new());
        let heir_token = heir.token();
        let waiter = tokio::spawn(async move { heir.lock().await });
        support::wait_parked(&client, name, 1).await;
        support::redis_state::reset_stats(&raw).await;
        guard.unlock().await.expect("unlock");
        let handed = within_10s(waiter).await.expect("join").expect("lock");
        assert_eq!(get(&raw, name).await.as_deref(), Some(heir_token.as_str()));
        assert_eq!(
            handed.acquisition().woken_by,
            WokenBy::Message,
            "handed over"
        );
        let calls = |command| support::redis_state::command_calls(&raw, command);
        assert_eq!(
            (calls("del").await, calls("publish").await),
            (0, 0),
            "never free, nothing published (keyspace events: {keyspace_events})"
        );
        assert!(pttl(&raw, name).await > 20_000, "the heir's lease");
        handed.unlock().await.expect("unlock");
    }
}

#[tokio::test]
async fn the_watchdog_renews_a_token_lock_and_reports_it_lost_when_another_value_replaces_it() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let watchdog = Duration::from_millis(900);
    let client = connect_with(timed_config(server.url(), watchdog, Duration::from_secs(5))).await;
    let name = "token:watchdog";
    let guard = client.token_lock(name).lock().await.expect("lock");
    let token = guard.holder_field().to_owned();

    // Three leases long: renewed (compare-and-PEXPIRE), never lost.
    tokio::time::sleep(watchdog * 3).await;
    assert_eq!(get(&raw, name).await.as_deref(), Some(token.as_str()));
    assert!(pttl(&raw, name).await > 0);
    assert!(!guard.is_lost());

    // Someone overwrites it (a peer that force-took it): the next renewal finds another value.
    let _: Value = raw
        .set(name, "usurper", None, None, false)
        .await
        .expect("SET");
    timeout(watchdog * 3, guard.lost())
        .await
        .expect("lost() fires at the next renewal");
    assert_eq!(
        get(&raw, name).await.as_deref(),
        Some("usurper"),
        "the renewal did not touch the other value"
    );
    assert!(pttl(&raw, name).await == -1, "nor gave it our TTL");
    assert!(guard.unlock().await.is_err(), "a lost hold's release fails");
    assert_eq!(
        get(&raw, name).await.as_deref(),
        Some("usurper"),
        "and deletes nothing"
    );
}

#[tokio::test]
async fn force_unlock_deletes_a_token_lock_and_refuses_a_key_of_another_type() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    assert!(peer_set(&raw, "token:forced", "peer", None).await);
    let lock = client.token_lock("token:forced");
    assert!(lock.force_unlock().await.expect("force"));
    assert_eq!(exists(&raw, "token:forced").await, 0);
    assert!(!lock.force_unlock().await.expect("force"), "none left");

    let hash = client.lock("token:hash").lock().await.expect("lock");
    let refused = client.token_lock("token:hash").force_unlock().await;
    assert!(
        matches!(refused, Err(Error::WrongType { .. })),
        "{refused:?}"
    );
    assert_eq!(exists(&raw, "token:hash").await, 1, "left alone");
    hash.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_at_any_point_never_leave_a_token_lock_held() {
    let server = server_with_keyspace_events();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "token:dropped";
    crate::cancellation::drop_acquires_of(&client.token_lock(name), true).await;
    wait_key_gone(&raw, name, Duration::from_secs(5)).await;
    wait_numsub(&raw, &keyspace(name), 0, Duration::from_secs(5)).await;
    let other = connect(&server).await;
    let guard = other
        .token_lock(name)
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("free at once");
    guard.unlock().await.expect("unlock");
}

#[test]
fn the_blocking_twin_takes_waits_for_and_releases_a_token_lock() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let lock = client.token_lock("token:blocking");
    let guard = lock.lock().expect("lock");
    assert!(lock.is_held_by_current_owner().expect("held"));
    assert!(lock.token().ends_with(&format!(":{}", lock.owner().id())));
    let other = client.token_lock("token:blocking").with_owner(Owner::new());
    assert!(other
        .try_lock_within(Duration::from_millis(100))
        .expect("try")
        .acquired()
        .is_none());
    let waiter = std::thread::spawn(move || other.lock().map(|guard| guard.unlock()));
    std::thread::sleep(Duration::from_millis(100));
    guard.unlock().expect("unlock");
    waiter
        .join()
        .expect("join")
        .expect("the waiter acquires")
        .expect("and releases");
}
