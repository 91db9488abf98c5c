//! Concurrent acquire and release calls of one client share script runs (src/transport/dispatch.rs), and
//! each call still behaves as its own script: the same replies, the same Redis state, the same
//! unlock messages, a failing call failing alone, and contenders in one batch excluding each
//! other in call order; a conditional hand-off inside a batch frees only a lock that another
//! client listens to.
//!
//! These tests use the default current-thread test runtime: tasks spawned together all queue
//! their calls before the dispatcher task gets its turn, so they land in one batch.

use crate::support;

use std::time::Duration;

use ferrisson::{Attempt, Error, Owner};
use fred::prelude::*;
use support::redis_state::{command_stats, exists, holder_fields, reset_stats};
use support::{connect, raw_client, RedisServer};

/// Script runs (EVALSHA + EVAL) since the last `CONFIG RESETSTAT`.
async fn script_runs(raw: &fred::clients::Client) -> u64 {
    let stats = command_stats(raw).await;
    stats.get("evalsha").copied().unwrap_or(0) + stats.get("eval").copied().unwrap_or(0)
}

/// Takes lock `name` for a fresh owner of `client`, with a 30 s lease.
async fn hold_as_new_owner(client: &ferrisson::Client, name: &str) -> ferrisson::LockGuard {
    client
        .lock(name)
        .with_owner(Owner::new())
        .lock_with_lease(Duration::from_secs(30))
        .await
        .expect("lock")
}

/// Releases `guards` from tasks spawned together, so that the releases share a batch, and
/// checks that each was a full release.
async fn release_together(guards: Vec<ferrisson::LockGuard>) {
    let releases: Vec<_> = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.unlock()))
        .collect();
    for release in releases {
        release.await.expect("task").expect("unlock");
    }
}

#[tokio::test]
async fn concurrent_acquires_and_releases_share_script_runs() {
    const CALLS: usize = 32;
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    reset_stats(&raw).await;

    let acquires: Vec<_> = (0..CALLS)
        .map(|i| {
            let lock = client.lock(format!("batch:{i}"));
            tokio::spawn(async move { lock.lock_with_lease(Duration::from_secs(30)).await })
        })
        .collect();
    let mut guards = Vec::new();
    for acquire in acquires {
        guards.push(acquire.await.expect("task").expect("lock"));
    }
    for i in 0..CALLS {
        let fields = holder_fields(&raw, &format!("batch:{i}")).await;
        assert_eq!(fields.len(), 1, "batch:{i} has one holder: {fields:?}");
        assert!(fields[0].starts_with(client.id()), "held by this client");
    }
    let acquire_runs = script_runs(&raw).await;
    assert!(
        acquire_runs < CALLS as u64 / 4,
        "{CALLS} concurrent acquires took {acquire_runs} script runs"
    );

    reset_stats(&raw).await;
    let releases: Vec<_> = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.unlock()))
        .collect();
    for release in releases {
        release.await.expect("task").expect("unlock");
    }
    for i in 0..CALLS {
        assert_eq!(
            exists(&raw, &format!("batch:{i}")).await,
            0,
            "batch:{i} deleted"
        );
    }
    let stats = command_stats(&raw).await;
    assert_eq!(
        stats.get("publish").copied(),
        Some(CALLS as u64),
        "every full release inside the batch published its unlock message: {stats:?}"
    );
    let release_runs = script_runs(&raw).await;
    assert!(
        release_runs < CALLS as u64 / 4,
        "{CALLS} concurrent releases took {release_runs} script runs"
    );
}

#[tokio::test]
async fn a_failing_call_fails_alone_in_its_batch() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let _: () = raw.set("plain", "x", None, None, false).await.expect("SET");
    reset_stats(&raw).await;

    let names: Vec<String> = (0..9)
        .map(|i| format!("ok:{i}"))
        .chain(["plain".to_owned()])
        .chain((9..18).map(|i| format!("ok:{i}")))
        .collect();
    let attempts: Vec<_> = names
        .iter()
        .map(|name| {
            let lock = client.lock(name.clone());
            tokio::spawn(async move { lock.try_lock().await })
        })
        .collect();
    let mut guards = Vec::new();
    for (name, attempt) in names.iter().zip(attempts) {
        match attempt.await.expect("task") {
            Err(Error::WrongType { name: wrong }) => assert_eq!(wrong, "plain"),
            Ok(Attempt::Acquired(guard)) => {
                assert_ne!(name, "plain", "the string key cannot be locked");
                guards.push(guard);
            }
            other => panic!("{name}: unexpected {other:?}"),
        }
    }
    assert_eq!(guards.len(), 18, "every other call of the batch acquired");
    assert!(script_runs(&raw).await < 19, "the calls shared script runs");
    let value: String = raw.get("plain").await.expect("GET");
    assert_eq!(value, "x", "the string key is untouched");
}

#[tokio::test]
async fn contenders_in_one_batch_exclude_each_other_in_call_order() {
    const CONTENDERS: usize = 16;
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    reset_stats(&raw).await;

    let owners: Vec<Owner> = (0..CONTENDERS).map(|_| Owner::new()).collect();
    let attempts: Vec<_> = owners
        .iter()
        .map(|&owner| {
            let lock = client.lock("contended").with_owner(owner);
            tokio::spawn(async move { lock.try_lock().await })
        })
        .collect();
    let mut winners = Vec::new();
    for (i, attempt) in attempts.into_iter().enumerate() {
        if let Attempt::Acquired(guard) = attempt.await.expect("task").expect("try_lock") {
            winners.push((i, guard));
        }
    }
    assert_eq!(winners.len(), 1, "exactly one contender acquired");
    assert_eq!(winners[0].0, 0, "the first call of the batch acquired");
    let fields = holder_fields(&raw, "contended").await;
    assert_eq!(
        fields,
        vec![format!("{}:{}", client.id(), owners[0].id())],
        "the hash holds the winner only"
    );
    assert!(script_runs(&raw).await < CONTENDERS as u64);
}

#[tokio::test]
async fn a_batch_is_resent_in_full_after_the_script_cache_is_flushed() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    raw.script_flush(false).await.expect("SCRIPT FLUSH");
    reset_stats(&raw).await;

    let acquires: Vec<_> = (0..8)
        .map(|i| {
            let lock = client.lock(format!("flushed:{i}"));
            tokio::spawn(async move { lock.try_lock().await })
        })
        .collect();
    let mut guards = Vec::new();
    for acquire in acquires {
        let guard = acquire.await.expect("task").expect("try_lock");
        guards.push(guard.acquired().expect("acquired after NOSCRIPT"));
    }
    let stats = command_stats(&raw).await;
    assert!(
        stats.get("eval").copied().unwrap_or(0) >= 1,
        "the batch script was sent in full: {stats:?}"
    );
    for i in 0..8 {
        assert_eq!(holder_fields(&raw, &format!("flushed:{i}")).await.len(), 1);
    }
}

#[tokio::test]
async fn hand_offs_in_one_batch_each_reach_their_own_waiter() {
    const LOCKS: usize = 8;
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;

    let mut holders = Vec::new();
    let mut waiters = Vec::new();
    for i in 0..LOCKS {
        let name = format!("handoff-batch:{i}");
        holders.push(hold_as_new_owner(&client, &name).await);
        let waiter = client.lock(name.clone()).with_owner(Owner::new());
        let field = format!("{}:{}", client.id(), waiter.owner().id());
        waiters.push((
            name.clone(),
            field,
            tokio::spawn(async move { waiter.lock_with_lease(Duration::from_secs(30)).await }),
        ));
        support::wait_parked(&client, &name, 1).await;
    }
    reset_stats(&raw).await;

    release_together(holders).await;
    for (name, field, waiter) in waiters {
        let guard = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("handed over")
            .expect("task")
            .expect("lock");
        assert_eq!(guard.holder_field(), field);
        assert_eq!(
            holder_fields(&raw, &name).await,
            vec![field],
            "{name} now holds only its waiter"
        );
        std::mem::forget(guard); // keep the hold: the stats below count the hand-offs only
    }
    let stats = command_stats(&raw).await;
    assert_eq!(
        stats.get("publish"),
        None,
        "a hand-off announces nothing: {stats:?}"
    );
    let runs = script_runs(&raw).await;
    assert!(
        runs < LOCKS as u64,
        "{LOCKS} concurrent hand-offs took {runs} script runs"
    );
}

#[tokio::test]
async fn conditional_hand_offs_in_one_batch_free_only_the_listened_locks() {
    // A budget of 1: the first hand-off of each lock spends it, so the next release of each is a
    // conditional hand-off. Releasing them all at once puts them in one batch.
    const LOCKS: usize = 8;
    const LISTENED: usize = 4;
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let listener = raw_client(&server.url()).await;
    let mut config = ferrisson::Config::new(server.url());
    config.max_local_handoffs = 1;
    let client = support::connect_with(config).await;

    let mut holders = Vec::new();
    let mut firsts = Vec::new();
    let mut seconds = Vec::new();
    for i in 0..LOCKS {
        let name = format!("conditional-batch:{i}");
        let channel = format!("redisson_lock__channel:{{{name}}}");
        holders.push(hold_as_new_owner(&client, &name).await);
        for line in [&mut firsts, &mut seconds] {
            let waiter = client.lock(name.clone()).with_owner(Owner::new());
            line.push(tokio::spawn(async move {
                waiter.lock_with_lease(Duration::from_secs(30)).await
            }));
            // In line before the next one: the first waiter's refused attempt and subscription.
            support::redis_state::wait_numsub(&raw, &channel, 1, Duration::from_secs(5)).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for holder in holders {
        holder.unlock().await.expect("unlock");
    }
    let mut firsts_held = Vec::new();
    for first in firsts {
        firsts_held.push(first.await.expect("task").expect("first waiter"));
    }
    for i in 0..LISTENED {
        listener
            .subscribe(format!("redisson_lock__channel:{{conditional-batch:{i}}}"))
            .await
            .expect("raw SUBSCRIBE");
    }
    reset_stats(&raw).await;

    release_together(firsts_held).await;
    for second in seconds {
        let guard = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the second waiter gets the lock")
            .expect("task")
            .expect("lock");
        std::mem::forget(guard); // keep the hold: the stats below count the releases only
    }
    let stats = command_stats(&raw).await;
    assert_eq!(
        stats.get("publish").copied(),
        Some(LISTENED as u64),
        "only the locks with another listener were freed: {stats:?}"
    );
    let checks = stats.get("pubsub|numsub").copied().unwrap_or(0)
        + stats.get("pubsub").copied().unwrap_or(0);
    assert!(
        checks >= LOCKS as u64,
        "every release was conditional: {stats:?}"
    );
    // The first release goes out alone, the other 7 in one batch; then at most one run per
    // retry of a freed lock's waiter (4-5 measured). Each release alone would take 12.
    let runs = script_runs(&raw).await;
    assert!(
        runs <= 2 + LISTENED as u64,
        "{LOCKS} concurrent releases and {LISTENED} retries took {runs} script runs"
    );
}

/// The non-reentrant and spin locks' acquires are modes of the reentrant lock's and share its
/// batches; a non-reentrant acquire refused inside a batch (its field holds the lock already)
/// fails alone, as `AlreadyHeld`, and changes nothing.
#[tokio::test]
async fn non_reentrant_and_spin_acquires_share_script_runs() {
    const EACH: usize = 16;
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    // Held by an owner of this client as the server sees it, unknown to the client itself: only
    // the script can refuse the second acquire.
    let owner = Owner::new();
    let field = format!("{}:{}", client.id(), owner.id());
    let _: () = raw
        .hset("nr:held", (field.as_str(), 1))
        .await
        .expect("HSET");
    let _: () = raw.pexpire("nr:held", 30_000, None).await.expect("PEXPIRE");
    reset_stats(&raw).await;

    let refused = {
        let lock = client.non_reentrant_lock("nr:held").with_owner(owner);
        tokio::spawn(async move { lock.try_lock().await })
    };
    let non_reentrant: Vec<_> = (0..EACH)
        .map(|i| {
            let lock = client.non_reentrant_lock(format!("nr:{i}"));
            tokio::spawn(async move { lock.lock_with_lease(Duration::from_secs(30)).await })
        })
        .collect();
    let spin: Vec<_> = (0..EACH)
        .map(|i| {
            let lock = client.spin_lock(format!("spin:{i}"));
            tokio::spawn(async move { lock.lock_with_lease(Duration::from_secs(30)).await })
        })
        .collect();
    match refused.await.expect("task") {
        Err(Error::AlreadyHeld { name }) => assert_eq!(name, "nr:held"),
        other => panic!("a second non-reentrant acquire: {other:?}"),
    }
    let mut held = Vec::new();
    for acquire in non_reentrant {
        held.push(acquire.await.expect("task").expect("non-reentrant lock"));
    }
    let mut spun = Vec::new();
    for acquire in spin {
        spun.push(acquire.await.expect("task").expect("spin lock"));
    }
    let runs = script_runs(&raw).await;
    assert!(
        runs < (2 * EACH as u64 + 1) / 4,
        "{} concurrent acquires took {runs} script runs",
        2 * EACH + 1
    );
    for i in 0..EACH {
        for name in [format!("nr:{i}"), format!("spin:{i}")] {
            let fields = holder_fields(&raw, &name).await;
            assert_eq!(fields.len(), 1, "{name} has one holder: {fields:?}");
        }
    }
    let count: String = raw.hget("nr:held", field.as_str()).await.expect("HGET");
    assert_eq!(count, "1", "the refused acquire changed nothing");
}
