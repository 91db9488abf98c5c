//! The watchdog and leases against a real Redis: expiring fixed leases let waiters in, the
//! watchdog keeps held locks alive (in batches) and stops at the final release, and a lease
//! lost behind the holder's back is reported without ever touching a later hold.
//!
//! Every test uses a 300 ms watchdog timeout, so renewals happen about every 100 ms.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ferrisson::{Owner, WokenBy};
use fred::prelude::*;
use support::redis_state::{command_stats, hgetall, pttl, reset_stats};
use support::{connect_with, hold_with_lease, raw_client, RedisServer};

const WATCHDOG: Duration = Duration::from_millis(300);
const WATCHDOG_MS: i64 = 300;
/// A third of the watchdog timeout: how often a watchdog lease is renewed.
const RENEW_PERIOD: Duration = Duration::from_millis(100);

fn config(url: &str) -> ferrisson::Config {
    let mut config = ferrisson::Config::new(url);
    config.watchdog_timeout = WATCHDOG;
    config
}

async fn connect(server: &RedisServer) -> ferrisson::Client {
    connect_with(config(&server.url())).await
}

async fn connect_with_batch(server: &RedisServer, batch: usize) -> ferrisson::Client {
    let mut config = config(&server.url());
    config.renewal_batch_size = batch;
    connect_with(config).await
}

/// Script runs (EVALSHA plus the EVAL fallback) counted by the server.
fn script_calls(calls: &HashMap<String, u64>) -> u64 {
    calls.get("evalsha").copied().unwrap_or(0) + calls.get("eval").copied().unwrap_or(0)
}

/// After the final release of `name` by `field`: the key is absent, and the watchdog no longer
/// renews it. To make a forgotten renewal visible (the renewal script only touches a key whose
/// field is present), a stand-in hash with the same holder field and a 10 s TTL is planted at
/// once: a watchdog still tracking the hold would find it held and renew it every period. One
/// renewal that was already under way when the release happened is tolerated.
async fn assert_renewals_stopped(raw: &fred::clients::Client, name: &str, field: &str) {
    assert_eq!(
        pttl(raw, name).await,
        -2,
        "the key is gone after the final release"
    );
    let _: i64 = raw.hset(name, (field, 1)).await.expect("HSET");
    let _: bool = raw.pexpire(name, 10_000, None).await.expect("PEXPIRE");
    reset_stats(raw).await;
    tokio::time::sleep(RENEW_PERIOD * 5).await;
    let calls = command_stats(raw).await;
    let scripts = script_calls(&calls);
    assert!(
        scripts <= 1,
        "the watchdog still renews the hold after its final release: {calls:?}"
    );
    if scripts == 0 {
        let ttl = pttl(raw, name).await;
        assert!(
            ttl > 9_000,
            "something re-armed the planted key: PTTL {ttl}"
        );
    }
    let _: i64 = raw.del(name).await.expect("DEL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_fixed_lease_lets_a_waiter_in_woken_by_ttl() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let holder = connect(&server).await;
    let waiter = connect(&server).await;
    let name = "wd:expiry";

    // The holder never releases: only the 300 ms lease can end its hold.
    hold_with_lease(&holder, name, Duration::from_millis(300))
        .await
        .detach();
    let ttl = pttl(&raw, name).await;
    assert!(
        (1..=300).contains(&ttl),
        "fixed lease should be 300 ms, PTTL {ttl}"
    );

    let start = Instant::now();
    let guard = waiter
        .lock(name)
        .with_owner(Owner::new())
        .try_lock_for(Duration::from_secs(3), None)
        .await
        .expect("try_lock_for")
        .acquired()
        .expect("the waiter should get the lock once the lease expires");
    let waited = start.elapsed();

    assert_eq!(guard.acquisition().woken_by, WokenBy::Ttl);
    assert!(
        waited >= Duration::from_millis(150),
        "acquired after {waited:?}, before the holder's lease could have expired"
    );
    assert!(
        waited < Duration::from_millis(2500),
        "acquired only after {waited:?}: it should follow the 300 ms lease, not the 3 s bound"
    );
    let now = hgetall(&raw, name).await;
    assert_eq!(
        now.keys().collect::<Vec<_>>(),
        vec![guard.holder_field()],
        "the waiter alone holds the lock"
    );
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_a_held_lock_alive_and_stops_after_unlock() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let other = connect(&server).await;
    let name = "wd:kept";

    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    let contender = other.lock(name).with_owner(Owner::new());

    // 3 s is ten times the lease: without renewals the key would be gone long before.
    let start = Instant::now();
    let mut samples = 0;
    while start.elapsed() < Duration::from_secs(3) {
        let ttl = pttl(&raw, name).await;
        assert!(
            (1..=WATCHDOG_MS).contains(&ttl),
            "after {:?} the lock's PTTL is {ttl}: it should stay within (0, 300] ms",
            start.elapsed()
        );
        samples += 1;
        if samples % 5 == 0 {
            assert!(
                contender
                    .try_lock()
                    .await
                    .expect("contender try_lock")
                    .is_busy(),
                "another client got a lock that is held under the watchdog"
            );
        }
        tokio::time::sleep(RENEW_PERIOD).await;
    }
    assert!(samples >= 10, "only {samples} PTTL samples were taken");
    assert!(!guard.is_lost());

    let field = guard.holder_field().to_owned();
    guard.unlock().await.expect("unlock");
    assert_renewals_stopped(&raw, name, &field).await;
}

/// Takes `count` distinct watchdog locks with one client, measures one second of renewals and
/// returns (renewal script calls, individual key renewals) in that second.
async fn measure_renewals(server: &RedisServer, batch: usize, count: usize) -> (u64, u64) {
    let raw = raw_client(&server.url()).await;
    let client = connect_with_batch(server, batch).await;
    let owner = Owner::new();
    let names: Vec<String> = (0..count).map(|i| format!("wd:batch:{i}")).collect();
    let mut guards = Vec::with_capacity(count);
    for chunk in names.chunks(100) {
        let acquires = chunk
            .iter()
            .map(|name| async { client.lock(name.as_str()).with_owner(owner).lock().await });
        for guard in futures::future::join_all(acquires).await {
            guards.push(guard.expect("lock"));
        }
    }

    reset_stats(&raw).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = command_stats(&raw).await;
    let scripts = script_calls(&calls);
    // PEXPIRE runs only inside the renewal script (once per renewed key); acquires are over.
    let renewed = calls.get("pexpire").copied().unwrap_or(0);

    for name in &names {
        let ttl = pttl(&raw, name).await;
        assert!(
            (1..=WATCHDOG_MS).contains(&ttl),
            "{name} should still be held with PTTL in (0, 300], got {ttl}"
        );
    }
    assert!(guards.iter().all(|guard| !guard.is_lost()));
    for guard in guards {
        guard.unlock().await.expect("unlock");
    }
    (scripts, renewed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_a_thousand_locks_in_batches_of_a_hundred() {
    let server = RedisServer::start();
    let (scripts, renewed) = measure_renewals(&server, 100, 1000).await;
    let periods = renewed as f64 / 1000.0;
    let per_period = scripts as f64 / periods;
    eprintln!(
        "1000 locks, batch 100: {scripts} renewal calls, {renewed} key renewals \
         ({periods:.1} periods, {per_period:.1} calls per period)"
    );
    // 1 s is about ten periods of 100 ms; every lock must have been renewed several times.
    assert!(
        renewed >= 1000 * 5,
        "only {renewed} key renewals for 1000 locks in 1 s"
    );
    assert!(
        scripts * 100 >= renewed,
        "{scripts} calls renewed {renewed} keys: more than 100 keys per call"
    );
    // One call per lock would be 1000 per period; 100 per batch is 10, allow grid spreading.
    assert!(
        per_period <= 30.0,
        "{per_period:.1} renewal calls per period for 1000 locks (expected about 10)"
    );
    assert!(
        scripts <= 500,
        "{scripts} renewal calls in 1 s for 1000 locks: not batched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_honours_a_renewal_batch_size_of_ten() {
    let server = RedisServer::start();
    let (scripts, renewed) = measure_renewals(&server, 10, 100).await;
    let periods = renewed as f64 / 100.0;
    let per_period = scripts as f64 / periods;
    eprintln!(
        "100 locks, batch 10: {scripts} renewal calls, {renewed} key renewals \
         ({periods:.1} periods, {per_period:.1} calls per period)"
    );
    assert!(
        renewed >= 100 * 5,
        "only {renewed} key renewals for 100 locks in 1 s"
    );
    // At most 10 keys per call, i.e. at least 10 calls per period for 100 locks.
    assert!(
        scripts * 10 >= renewed,
        "{scripts} calls renewed {renewed} keys ({per_period:.1} calls per period): \
         more than 10 keys per call, batch size 10 not honoured"
    );
    assert!(
        per_period <= 30.0,
        "{per_period:.1} calls per period for 100 locks in batches of 10 (expected about 10)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_continues_after_a_partial_release_and_stops_at_the_final_one() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "wd:reentrant";
    let lock = client.lock(name).with_owner(Owner::new());

    let outer = lock.lock().await.expect("outer lock");
    let inner = lock.lock().await.expect("inner lock (re-entry)");
    let field = outer.holder_field().to_owned();
    assert_eq!(
        hgetall(&raw, name).await.get(&field).map(String::as_str),
        Some("2")
    );

    inner.unlock().await.expect("inner unlock");
    assert_eq!(
        hgetall(&raw, name).await.get(&field).map(String::as_str),
        Some("1")
    );

    // More than three leases later the remaining hold is still alive: still renewed.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ttl = pttl(&raw, name).await;
    assert!(
        (1..=WATCHDOG_MS).contains(&ttl),
        "after a partial release the lock should still be renewed, PTTL {ttl}"
    );
    assert_eq!(
        hgetall(&raw, name).await.get(&field).map(String::as_str),
        Some("1")
    );
    assert!(!outer.is_lost());

    outer.unlock().await.expect("outer unlock");
    assert_eq!(
        pttl(&raw, name).await,
        -2,
        "the final release deletes the key"
    );
    assert_renewals_stopped(&raw, name, &field).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_key_fires_lost_and_unlock_leaves_the_new_holder_alone() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let other = connect(&server).await;
    let name = "wd:lost:del";

    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    let token = guard.lost_token();
    assert!(!guard.is_lost());
    assert!(!token.is_cancelled());

    let deleted: i64 = raw.del(name).await.expect("DEL");
    assert_eq!(deleted, 1);
    tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("lost() should resolve within 1 s of the key being deleted");
    assert!(guard.is_lost());
    assert!(token.is_cancelled());
    assert!(guard.lost_token().is_cancelled());

    let theirs = other
        .lock(name)
        .with_owner(Owner::new())
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("the lock is free after the DEL");
    assert!(
        matches!(
            guard.unlock().await,
            Err(ferrisson::Error::LeaseLost { .. })
        ),
        "unlock of a lost guard"
    );
    let now = hgetall(&raw, name).await;
    assert_eq!(
        now.get(theirs.holder_field()).map(String::as_str),
        Some("1"),
        "the new holder keeps the lock: {now:?}"
    );
    assert_eq!(now.len(), 1, "{now:?}");
    theirs.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_by_another_client_fires_lost() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let other = connect(&server).await;
    let name = "wd:lost:force";

    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    assert!(other.lock(name).force_unlock().await.expect("force_unlock"));
    tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("lost() should resolve within 1 s of a force unlock");
    assert!(guard.is_lost());
    assert!(guard.lost_token().is_cancelled());

    let theirs = other
        .lock(name)
        .with_owner(Owner::new())
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("the lock is free after the force unlock");
    assert!(
        matches!(
            guard.unlock().await,
            Err(ferrisson::Error::LeaseLost { .. })
        ),
        "unlock of a lost guard"
    );
    assert_eq!(
        hgetall(&raw, name)
            .await
            .get(theirs.holder_field())
            .map(String::as_str),
        Some("1"),
        "the other client keeps the lock"
    );
    theirs.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_fires_lost_when_the_lease_runs_out() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "wd:lost:lease";

    let start = Instant::now();
    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock_with_lease(Duration::from_millis(200))
        .await
        .expect("lock_with_lease");
    assert!(!guard.is_lost(), "lost right after acquiring");
    tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("lost() should resolve when the 200 ms lease ends");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(150),
        "lost() resolved after {elapsed:?}, before the 200 ms lease ended"
    );
    assert!(guard.is_lost());

    // The server agrees: the key expires with the lease.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(pttl(&raw, name).await, -2);
    assert!(
        matches!(
            guard.unlock().await,
            Err(ferrisson::Error::LeaseLost { .. })
        ),
        "unlock of an expired lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reacquiring_after_a_loss_gives_a_fresh_hold_the_old_guard_cannot_touch() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "wd:lost:again";
    let lock = client.lock(name).with_owner(Owner::new());

    let old = lock.lock().await.expect("first lock");
    let field = old.holder_field().to_owned();
    let _: i64 = raw.del(name).await.expect("DEL");
    tokio::time::timeout(Duration::from_secs(1), old.lost())
        .await
        .expect("the old guard should see its loss");

    let new = lock.lock().await.expect("lock again after the loss");
    assert_eq!(new.holder_field(), field, "same owner, same holder field");
    assert!(!new.is_lost(), "the new hold starts un-lost");
    assert!(
        tokio::time::timeout(RENEW_PERIOD * 5, new.lost())
            .await
            .is_err(),
        "lost() fired for the new hold"
    );
    assert!(!new.lost_token().is_cancelled());
    assert_eq!(
        hgetall(&raw, name).await.get(&field).map(String::as_str),
        Some("1"),
        "one hold, not a continuation of the old count"
    );

    // Dropping the old (lost) guard must not release the new hold.
    drop(old);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        hgetall(&raw, name).await.get(&field).map(String::as_str),
        Some("1"),
        "the old guard's drop released the new hold"
    );
    let ttl = pttl(&raw, name).await;
    assert!(
        (1..=WATCHDOG_MS).contains(&ttl),
        "the new hold is still renewed, PTTL {ttl}"
    );
    assert!(!new.is_lost());

    new.unlock().await.expect("unlock the new hold");
    assert_eq!(pttl(&raw, name).await, -2);
}
