//! The watchdog and leases against a real Redis: expiring fixed leases let waiters in, the
//! watchdog keeps held locks alive (in batches) and stops at the final release, and a lease
//! lost behind the holder's back is reported without ever touching a later hold.
//!
//! The watchdog tests use a 3 s watchdog timeout: renewals every second leave two seconds of
//! slack for a loaded machine, and every window below is counted in renewal periods. The fixed
//! lease a waiter must park within lasts 2 s; only the one whose end is all its test checks is
//! short, sized from a measured round trip.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ferrisson::{Owner, WokenBy};
use fred::prelude::*;
use support::redis_state::{command_stats, hgetall, pttl, reset_stats, wait_ttl_reset};
use support::{connect_with, hold_with_lease, raw_client, RedisServer};

const WATCHDOG: Duration = Duration::from_secs(3);
const WATCHDOG_MS: i64 = 3_000;
/// A third of the watchdog timeout: how often a watchdog lease is renewed.
const RENEW_PERIOD: Duration = Duration::from_secs(1);
/// How long a loss the server shows (the key deleted, the lock force-released) may take to be
/// found: the check made when `lost()` starts listening may find it at once, the next renewal
/// (due a renewal period after the acquire) does at the latest. Below the watchdog timeout, so
/// that a lease that merely ran out unrenewed does not pass for a loss found.
const FOUND_WITHIN: Duration = Duration::from_millis(2_500);

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
/// field is present), a stand-in hash with the same holder field and a 60 s TTL is planted at
/// once: a watchdog still tracking the hold would find it held and renew it (down to the
/// watchdog lease) every period, more than once in the three periods watched. One renewal that
/// was already under way when the release happened is tolerated.
async fn assert_renewals_stopped(raw: &fred::clients::Client, name: &str, field: &str) {
    assert_eq!(
        pttl(raw, name).await,
        -2,
        "the key is gone after the final release"
    );
    // Counted from before the planting. The watchdog takes releases in at its grid ticks
    // (100 ms here), so one renewal may still be sent after the release; when it ran between
    // the planting and a reset of the counts, it re-armed the key to the 3 s lease uncounted,
    // and the key was gone after the 3 s below (a fresh-clone run failed so). Counted, it is
    // the one renewal tolerated.
    reset_stats(raw).await;
    let created: i64 = raw.hset(name, (field, 1)).await.expect("HSET");
    let armed: bool = raw.pexpire(name, 60_000, None).await.expect("PEXPIRE");
    assert!(
        created == 1 && armed,
        "the stand-in key was not planted afresh (HSET {created}, PEXPIRE {armed}): {:?}",
        command_stats(raw).await
    );
    tokio::time::sleep(RENEW_PERIOD * 3).await;
    let calls = command_stats(raw).await;
    let scripts = script_calls(&calls);
    assert!(
        scripts <= 1,
        "the watchdog still renews the hold after its final release: {calls:?}"
    );
    if scripts == 0 {
        let ttl = pttl(raw, name).await;
        assert!(
            ttl > WATCHDOG_MS,
            "something re-armed or removed the planted key: PTTL {ttl}; {calls:?}"
        );
    }
    let _: i64 = raw.del(name).await.expect("DEL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_fixed_lease_lets_a_waiter_in_woken_by_ttl() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // Default configurations: no watchdog lease is under test here.
    let holder = support::connect(&server).await;
    let waiter = support::connect(&server).await;
    let name = "wd:expiry";
    // Long enough that the waiter is parked before it ends (so the lease's end wakes it),
    // however loaded the machine.
    let lease = Duration::from_secs(2);
    // The waiter waits three leases: woken at the lease's end, it gets in long before its
    // own wait runs out.
    let wait = lease * 3;

    // The holder never releases: only the lease can end its hold. The server's TTL starts
    // after `held_at`, so the lock cannot be free before `held_at + lease`.
    let held_at = Instant::now();
    hold_with_lease(&holder, name, lease).await.detach();
    let ttl = pttl(&raw, name).await;
    assert!(
        (1..=lease.as_millis() as i64).contains(&ttl),
        "fixed lease should be {lease:?}, PTTL {ttl}"
    );

    let guard = waiter
        .lock(name)
        .with_owner(Owner::new())
        .try_lock_within(wait)
        .await
        .expect("try_lock_within")
        .acquired()
        .expect("the waiter should get the lock once the lease expires");
    let waited = held_at.elapsed();

    assert_eq!(guard.acquisition().woken_by, WokenBy::Ttl);
    assert!(
        waited >= lease,
        "acquired {waited:?} after the hold, before the holder's {lease:?} lease ended"
    );
    assert!(
        waited < lease * 2,
        "acquired only {waited:?} after the hold: it should follow the {lease:?} lease, not \
         the {wait:?} wait bound"
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

    // Watched past two leases: without renewals the key would be gone after the first. An
    // expired key stays gone (a renewal only touches a key whose field is present), so a
    // sample every quarter period is enough to see it.
    let start = Instant::now();
    let mut samples = 0;
    while start.elapsed() < WATCHDOG * 2 + RENEW_PERIOD {
        let ttl = pttl(&raw, name).await;
        assert!(
            (1..=WATCHDOG_MS).contains(&ttl),
            "after {:?} the lock's PTTL is {ttl}: it should stay within (0, {WATCHDOG_MS}] ms",
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
        tokio::time::sleep(RENEW_PERIOD / 4).await;
    }
    assert!(samples >= 10, "only {samples} PTTL samples were taken");
    assert!(!guard.is_lost());

    let field = guard.holder_field().to_owned();
    guard.unlock().await.expect("unlock");
    assert_renewals_stopped(&raw, name, &field).await;
}

/// How long renewals are counted, from just after the last acquire: three and a half renewal
/// periods.
const WINDOW: Duration = Duration::from_millis(3_500);

/// The fewest renewals of each lock in [`WINDOW`]. It holds three (a lock's first renewal
/// comes a period and up to a grid tick after its acquire); one fewer leaves a period of slack
/// for renewals delayed by a loaded machine.
const MIN_RENEWALS_PER_LOCK: u64 = 2;

/// What [`measure_renewals`] counted.
struct Renewals {
    /// Renewal script calls.
    scripts: u64,
    /// Individual key renewals.
    renewed: u64,
    /// How many renewal periods the counting took at most (the window as measured, plus one
    /// for a renewal under way at either end).
    periods: f64,
}

/// Takes `count` distinct watchdog locks with one client and counts their renewals for at
/// least [`WINDOW`].
async fn measure_renewals(server: &RedisServer, batch: usize, count: usize) -> Renewals {
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
    let counting = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let calls = command_stats(&raw).await;
    let periods = counting.elapsed().as_secs_f64() / RENEW_PERIOD.as_secs_f64() + 1.0;
    let scripts = script_calls(&calls);
    // PEXPIRE runs only inside the renewal script (once per renewed key); acquires are over.
    let renewed = calls.get("pexpire").copied().unwrap_or(0);

    for name in &names {
        let ttl = pttl(&raw, name).await;
        assert!(
            (1..=WATCHDOG_MS).contains(&ttl),
            "{name} should still be held with PTTL in (0, {WATCHDOG_MS}], got {ttl}"
        );
    }
    assert!(guards.iter().all(|guard| !guard.is_lost()));
    for guard in guards {
        guard.unlock().await.expect("unlock");
    }
    Renewals {
        scripts,
        renewed,
        periods,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_a_thousand_locks_in_batches_of_a_hundred() {
    let server = RedisServer::start();
    let Renewals {
        scripts,
        renewed,
        periods: window_periods,
    } = measure_renewals(&server, 100, 1000).await;
    let periods = renewed as f64 / 1000.0;
    let per_period = scripts as f64 / periods;
    eprintln!(
        "1000 locks, batch 100: {scripts} renewal calls, {renewed} key renewals \
         ({periods:.1} periods, {per_period:.1} calls per period)"
    );
    // Every lock must have been renewed about once per period of the window.
    assert!(
        renewed >= 1000 * MIN_RENEWALS_PER_LOCK,
        "only {renewed} key renewals for 1000 locks in {WINDOW:?}"
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
    // Unbatched would be 1000 calls per period.
    assert!(
        scripts as f64 <= 50.0 * window_periods,
        "{scripts} renewal calls in {window_periods:.1} periods for 1000 locks: not batched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_honours_a_renewal_batch_size_of_ten() {
    let server = RedisServer::start();
    let Renewals {
        scripts, renewed, ..
    } = measure_renewals(&server, 10, 100).await;
    let periods = renewed as f64 / 100.0;
    let per_period = scripts as f64 / periods;
    eprintln!(
        "100 locks, batch 10: {scripts} renewal calls, {renewed} key renewals \
         ({periods:.1} periods, {per_period:.1} calls per period)"
    );
    assert!(
        renewed >= 100 * MIN_RENEWALS_PER_LOCK,
        "only {renewed} key renewals for 100 locks in {WINDOW:?}"
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

    // Past the lease the partial release re-armed, the remaining hold is still alive: renewed.
    tokio::time::sleep(WATCHDOG + RENEW_PERIOD).await;
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
    tokio::time::timeout(FOUND_WITHIN, guard.lost())
        .await
        .expect("lost() should resolve by the next renewal after the key was deleted");
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
    tokio::time::timeout(FOUND_WITHIN, guard.lost())
        .await
        .expect("lost() should resolve by the next renewal after a force unlock");
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
    // The lease's end is the subject, so it stays short: 200 ms, or 20 round trips as measured
    // now if that is longer, for the acquire's reply and the check after it.
    let lease = support::short_lease(
        support::round_trip(&client).await,
        Duration::from_millis(200),
    );

    // The lease is proven from when the acquire was sent, which is after `start`.
    let start = Instant::now();
    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock_with_lease(lease)
        .await
        .expect("lock_with_lease");
    let replied = Instant::now();
    let lost = guard.is_lost();
    let checked = start.elapsed();
    // Only a stall longer than the lease between `start` and the check may have ended it.
    assert!(
        !lost || checked >= lease,
        "lost {checked:?} after `start`, within its {lease:?} lease"
    );
    tokio::time::timeout(lease + Duration::from_secs(2), guard.lost())
        .await
        .expect("lost() should resolve when the lease ends");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= lease,
        "lost() resolved after {elapsed:?}, before the {lease:?} lease ended"
    );
    assert!(guard.is_lost());

    // The server agrees: the key expires with the lease. Its TTL was set before the reply,
    // so it has run out a lease after `replied` (and a little: Redis counts whole milliseconds).
    tokio::time::sleep_until((replied + lease + Duration::from_millis(2)).into()).await;
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
    tokio::time::timeout(FOUND_WITHIN, old.lost())
        .await
        .expect("the old guard should see its loss");

    let new = lock.lock().await.expect("lock again after the loss");
    assert_eq!(new.holder_field(), field, "same owner, same holder field");
    assert!(!new.is_lost(), "the new hold starts un-lost");
    // Watched across the new hold's first renewal, where a loss carried over would show.
    assert!(
        tokio::time::timeout(RENEW_PERIOD * 3 / 2, new.lost())
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

    // Dropping the old (lost) guard must not release the new hold, nor stop its renewals:
    // a renewal comes after the drop, before the lease it renews would end.
    drop(old);
    tokio::time::sleep(Duration::from_millis(300)).await;
    wait_ttl_reset(&raw, name, WATCHDOG).await;
    assert_eq!(
        hgetall(&raw, name).await.get(&field).map(String::as_str),
        Some("1"),
        "the old guard's drop released the new hold"
    );
    assert!(!new.is_lost());

    new.unlock().await.expect("unlock the new hold");
    assert_eq!(pttl(&raw, name).await, -2);
}
