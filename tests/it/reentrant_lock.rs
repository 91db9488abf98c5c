//! The reentrant lock (Redisson's `RLock`) against a real redis-server: mutual exclusion, the
//! Redis layout it writes, reentrancy per owner, release by identity, argument validation,
//! wrong-type keys, script-cache loss, the query methods, and shutdown.

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrisson::{Error, Lock, Owner, RemainingTtl, WokenBy};
use fred::{cmd, prelude::*};
use support::redis_state::{exists, hgetall, poll_until, pttl};
use support::{connect, raw_client, RedisServer};

const COUNTER: &str = "counter";
const TASKS: usize = 50;
const ROUNDS: usize = 20;

// ---------------------------------------------------------------------------------------------
// helpers

async fn dbsize(raw: &fred::clients::Client) -> i64 {
    raw.custom(cmd!("DBSIZE"), Vec::<String>::new())
        .await
        .expect("DBSIZE")
}

async fn script_flush(raw: &fred::clients::Client) {
    raw.script_flush(false).await.expect("SCRIPT FLUSH");
}

/// Asserts that the lock hash has exactly one field, `<client id>:<owner id>`, with `count`.
fn assert_single_holder(
    fields: &HashMap<String, String>,
    client_id: &str,
    owner: Owner,
    count: &str,
) {
    assert_eq!(fields.len(), 1, "exactly one holder field, got {fields:?}");
    let (field, value) = fields.iter().next().expect("one field");
    let id = field
        .strip_prefix(client_id)
        .and_then(|rest| rest.strip_prefix(':'))
        .unwrap_or_else(|| panic!("field {field:?} does not start with `{client_id}:`"));
    assert!(
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
        "owner part {id:?} of {field:?} is not decimal digits"
    );
    assert_eq!(id, owner.id().to_string(), "owner id in the field");
    assert_eq!(value, count, "hold count of {field:?}");
}

/// Reads the lock hash `key` and checks it as [`assert_single_holder`] does.
async fn assert_single_holder_at(
    raw: &fred::clients::Client,
    key: &str,
    client_id: &str,
    owner: Owner,
    count: &str,
) {
    assert_single_holder(&hgetall(raw, key).await, client_id, owner, count);
}

/// Runs `TASKS` tasks doing `ROUNDS` non-atomic GET + SET increments of `COUNTER`, each under
/// `locks[i % len]` when given. Returns (final counter, max tasks seen inside the section).
async fn run_increments(raw: &fred::clients::Client, locks: Vec<Option<Lock>>) -> (i64, usize) {
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let lock = locks[i % locks.len()].clone();
        let raw = raw.clone();
        let inside = Arc::clone(&inside);
        let max_inside = Arc::clone(&max_inside);
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = match &lock {
                    Some(lock) => Some(lock.lock().await.expect("lock()")),
                    None => None,
                };
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                max_inside.fetch_max(now, Ordering::SeqCst);
                let value: Option<i64> = raw.get(COUNTER).await.expect("GET");
                // Widen the race between the read and the write.
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                raw.set::<(), _, _>(COUNTER, value.unwrap_or(0) + 1, None, None, false)
                    .await
                    .expect("SET");
                inside.fetch_sub(1, Ordering::SeqCst);
                if let Some(guard) = guard {
                    guard.unlock().await.expect("unlock");
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("increment task panicked");
    }
    let total: Option<i64> = raw.get(COUNTER).await.expect("GET");
    (total.unwrap_or(0), max_inside.load(Ordering::SeqCst))
}

// ---------------------------------------------------------------------------------------------
// 1. mutual exclusion

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lock_makes_non_atomic_increments_from_two_clients_exact() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let a = connect(&server).await;
    let b = connect(&server).await;
    assert_ne!(a.id(), b.id());
    let locks = vec![Some(a.lock("counter-lock")), Some(b.lock("counter-lock"))];

    let started = Instant::now();
    let (total, max_inside) = run_increments(&raw, locks).await;
    eprintln!("1000 locked increments took {:?}", started.elapsed());

    assert_eq!(
        max_inside, 1,
        "two tasks were inside the critical section at once"
    );
    assert_eq!(
        total,
        (TASKS * ROUNDS) as i64,
        "increments were lost under the lock"
    );
    assert_eq!(exists(&raw, "counter-lock").await, 0, "lock left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_lock_the_same_increments_lose_updates() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let (total, max_inside) = run_increments(&raw, vec![None]).await;
    eprintln!(
        "unlocked control: {total} of {} increments survived",
        TASKS * ROUNDS
    );
    assert!(max_inside > 1, "control race never overlapped");
    assert!(
        total < (TASKS * ROUNDS) as i64,
        "the unlocked control lost no increment ({total}); the race is too narrow to prove anything"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. layout

#[tokio::test]
async fn watchdog_lock_writes_redisson_hash_with_30s_ttl_and_counts_reentries() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("layout");

    let outer = lock.lock().await.expect("lock");
    assert_eq!(outer.owner(), Owner::current());
    assert_eq!(
        outer.holder_field(),
        format!("{}:{}", client.id(), outer.owner().id())
    );
    assert_single_holder_at(&raw, "layout", client.id(), outer.owner(), "1").await;
    let ttl = pttl(&raw, "layout").await;
    assert!((29_000..=30_000).contains(&ttl), "PTTL {ttl}");

    let inner = lock.lock().await.expect("reentrant lock");
    assert_eq!(inner.owner(), outer.owner());
    assert_eq!(inner.acquisition().woken_by, WokenBy::Immediate);
    assert_single_holder_at(&raw, "layout", client.id(), outer.owner(), "2").await;
    let ttl = pttl(&raw, "layout").await;
    assert!(
        (29_000..=30_000).contains(&ttl),
        "PTTL after re-entry {ttl}"
    );

    inner.unlock().await.expect("inner unlock");
    assert_single_holder_at(&raw, "layout", client.id(), outer.owner(), "1").await;
    let ttl = pttl(&raw, "layout").await;
    assert!(
        (29_000..=30_000).contains(&ttl),
        "PTTL after partial release {ttl}"
    );

    outer.unlock().await.expect("outer unlock");
    assert_eq!(
        exists(&raw, "layout").await,
        0,
        "full release deletes the key"
    );
}

#[tokio::test]
async fn lease_lock_writes_redisson_hash_with_the_lease_as_ttl() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("leased");
    let lease = Duration::from_secs(10);

    let outer = lock.lock_with_lease(lease).await.expect("lock_with_lease");
    assert_single_holder_at(&raw, "leased", client.id(), outer.owner(), "1").await;
    let ttl = pttl(&raw, "leased").await;
    assert!((9_000..=10_000).contains(&ttl), "PTTL {ttl}");

    let inner = lock
        .lock_with_lease(lease)
        .await
        .expect("reentrant lease lock");
    assert_single_holder_at(&raw, "leased", client.id(), outer.owner(), "2").await;
    let ttl = pttl(&raw, "leased").await;
    assert!((9_000..=10_000).contains(&ttl), "PTTL after re-entry {ttl}");

    inner.unlock().await.expect("inner unlock");
    assert_single_holder_at(&raw, "leased", client.id(), outer.owner(), "1").await;
    let ttl = pttl(&raw, "leased").await;
    assert!(
        (9_000..=10_000).contains(&ttl),
        "PTTL after partial release {ttl}"
    );

    outer.unlock().await.expect("outer unlock");
    assert_eq!(exists(&raw, "leased").await, 0);
}

// ---------------------------------------------------------------------------------------------
// 3. unlock by a non-owner

#[tokio::test]
async fn unlock_by_another_owner_or_client_is_not_held_and_changes_nothing() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let other_client = connect(&server).await;
    let lock = client.lock("guarded");

    let guard = lock.lock().await.expect("lock");
    let before = hgetall(&raw, "guarded").await;
    assert_single_holder(&before, client.id(), guard.owner(), "1");

    let stranger = lock.with_owner(Owner::new());
    assert!(matches!(
        stranger.unlock().await,
        Err(Error::NotHeld { ref name }) if name == "guarded"
    ));
    // Same thread owner id, but another client uuid: still not the holder.
    let foreign = other_client.lock("guarded");
    assert_eq!(foreign.owner(), guard.owner());
    assert!(matches!(foreign.unlock().await, Err(Error::NotHeld { .. })));

    assert_eq!(
        hgetall(&raw, "guarded").await,
        before,
        "hash changed by a failed unlock"
    );
    let ttl = pttl(&raw, "guarded").await;
    assert!((29_000..=30_000).contains(&ttl), "PTTL changed: {ttl}");

    guard.unlock().await.expect("owner unlock");
    assert_eq!(exists(&raw, "guarded").await, 0);
}

#[tokio::test]
async fn guard_unlock_after_force_unlock_reports_false() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("forced");
    let guard = lock.lock().await.expect("lock");
    assert!(lock
        .with_owner(Owner::new())
        .force_unlock()
        .await
        .expect("force_unlock"));
    assert_eq!(exists(&raw, "forced").await, 0);
    assert!(
        matches!(
            guard.unlock().await,
            Err(ferrisson::Error::LeaseLost { .. })
        ),
        "unlock"
    );
    assert!(!lock.force_unlock().await.expect("second force_unlock"));
}

// ---------------------------------------------------------------------------------------------
// 4. wrong type

#[tokio::test]
async fn operations_on_a_string_key_fail_with_wrong_type_and_leave_it_alone() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    raw.set::<(), _, _>("plain", "hello", None, None, false)
        .await
        .expect("SET");
    let lock = client.lock("plain");

    let wrong = |what: &str, err: Error| match err {
        Error::WrongType { name } => assert_eq!(name, "plain", "{what}"),
        other => panic!("{what}: expected WrongType, got {other:?}"),
    };
    wrong("lock", lock.lock().await.expect_err("lock on a string"));
    wrong(
        "try_lock",
        lock.try_lock().await.expect_err("try_lock on a string"),
    );
    wrong(
        "force_unlock",
        lock.force_unlock()
            .await
            .expect_err("force_unlock on a string"),
    );
    wrong(
        "hold_count",
        lock.hold_count().await.expect_err("hold_count on a string"),
    );

    // Not demanded by the brief, but the same rule: nothing reads a string as a lock.
    wrong(
        "unlock",
        lock.unlock().await.expect_err("unlock on a string"),
    );
    wrong(
        "is_held_by_current_owner",
        lock.is_held_by_current_owner()
            .await
            .expect_err("is_held_by_current_owner on a string"),
    );
    // Redisson's `isLocked` (EXISTS) would say `true` here: a string is not a held lock.
    wrong(
        "is_locked",
        lock.is_locked().await.expect_err("is_locked on a string"),
    );

    let value: String = raw.get("plain").await.expect("GET");
    assert_eq!(value, "hello");
    assert_eq!(pttl(&raw, "plain").await, -1, "TTL was added to the string");
}

#[tokio::test]
async fn is_locked_tells_a_lock_from_a_key_of_another_type() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let _: i64 = raw.rpush("queue", "job").await.expect("RPUSH");
    let err = client.lock("queue").is_locked().await.expect_err("a list");
    assert!(
        matches!(err, Error::WrongType { ref name } if name == "queue"),
        "{err:?}"
    );

    let lock = client.lock("held");
    assert!(!lock.is_locked().await.expect("absent key"));
    let guard = lock.lock().await.expect("lock");
    assert!(lock.is_locked().await.expect("held"));
    guard.unlock().await.expect("unlock");
    assert!(!lock.is_locked().await.expect("released"));
}

// ---------------------------------------------------------------------------------------------
// 5. SCRIPT FLUSH

#[tokio::test]
async fn lock_operations_survive_script_flush_between_them() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("flushed");

    script_flush(&raw).await;
    let outer = lock.lock().await.expect("lock after flush");
    assert_single_holder_at(&raw, "flushed", client.id(), outer.owner(), "1").await;
    script_flush(&raw).await;
    let inner = lock.lock().await.expect("re-entry after flush");
    assert_single_holder_at(&raw, "flushed", client.id(), outer.owner(), "2").await;
    script_flush(&raw).await;
    inner.unlock().await.expect("inner unlock after flush");
    assert_single_holder_at(&raw, "flushed", client.id(), outer.owner(), "1").await;
    script_flush(&raw).await;
    outer.unlock().await.expect("outer unlock after flush");
    assert_eq!(exists(&raw, "flushed").await, 0);
    script_flush(&raw).await;
    let again = lock.lock().await.expect("lock again after flush");
    assert_single_holder_at(&raw, "flushed", client.id(), again.owner(), "1").await;
    script_flush(&raw).await;
    again.unlock().await.expect("unlock after flush");
    assert_eq!(exists(&raw, "flushed").await, 0);
}

// ---------------------------------------------------------------------------------------------
// 6. invalid arguments

fn assert_invalid<T: std::fmt::Debug>(what: &str, result: ferrisson::Result<T>) {
    match result {
        Err(Error::InvalidArgument(msg)) => assert!(!msg.is_empty(), "{what}: empty message"),
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

#[tokio::test]
async fn invalid_arguments_are_rejected_before_anything_reaches_redis() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;

    let unnamed = client.lock("");
    assert_invalid("lock(\"\")", unnamed.lock().await);
    assert_invalid("try_lock(\"\")", unnamed.try_lock().await);
    assert_invalid("unlock(\"\")", unnamed.unlock().await);
    assert_invalid("is_locked(\"\")", unnamed.is_locked().await);

    let lock = client.lock("valid");
    assert_invalid("zero lease", lock.lock_with_lease(Duration::ZERO).await);
    assert_invalid(
        "sub-ms lease",
        lock.lock_with_lease(Duration::from_micros(500)).await,
    );
    assert_invalid(
        "zero lease in try_lock_within_with_lease",
        lock.try_lock_within_with_lease(Duration::from_millis(10), Duration::ZERO)
            .await,
    );
    assert_invalid(
        "sub-ms lease in try_lock_within_with_lease",
        lock.try_lock_within_with_lease(Duration::from_millis(10), Duration::from_micros(999))
            .await,
    );

    let mut config = ferrisson::Config::new(server.url());
    config.watchdog_timeout = Duration::ZERO;
    assert_invalid(
        "zero watchdog_timeout",
        ferrisson::Client::new(config).await,
    );

    for url in ["not a url", "redis://127.0.0.1:notaport", "://nothing"] {
        assert_invalid(url, ferrisson::Client::connect(url).await);
    }

    assert_eq!(dbsize(&raw).await, 0, "a rejected call wrote to Redis");
}

// ---------------------------------------------------------------------------------------------
// 7. owners

#[tokio::test]
async fn implicit_owner_reenters_within_a_task_and_excludes_other_tasks() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("tasks");

    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = {
        let lock = lock.clone();
        let client_id = client.id().to_owned();
        let raw = raw.clone();
        tokio::spawn(async move {
            let outer = lock.lock().await.expect("outer lock in task");
            let inner = lock.lock().await.expect("nested lock in the same task");
            assert_eq!(outer.owner(), inner.owner());
            assert_eq!(lock.hold_count().await.expect("hold_count"), 2);
            assert_single_holder_at(&raw, "tasks", &client_id, outer.owner(), "2").await;
            held_tx.send(outer.owner()).expect("signal");
            done_rx.await.expect("release signal");
            inner.unlock().await.expect("inner unlock");
            outer.unlock().await.expect("outer unlock");
        })
    };
    let holder_owner = held_rx.await.expect("holder took the lock");

    let other = {
        let lock = lock.clone();
        tokio::spawn(async move {
            assert_ne!(Owner::current(), holder_owner);
            let got = lock.try_lock().await.expect("try_lock from another task");
            let count = lock.hold_count().await.expect("hold_count");
            (got.is_acquired(), count)
        })
    };
    let (acquired, count) = other.await.expect("other task");
    assert!(
        !acquired,
        "another task acquired a lock held by a different task"
    );
    assert_eq!(count, 0);

    done_tx.send(()).expect("release");
    holder.await.expect("holder task");
    assert_eq!(exists(&raw, "tasks").await, 0);
}

/// Two branches of one `join!`, each taking `lock` and staying inside for a while. Returns the
/// maximum number of branches inside at once and each branch's `woken_by`.
async fn two_branches(a: Lock, b: Lock) -> (usize, [WokenBy; 2]) {
    let inside = AtomicUsize::new(0);
    let max_inside = AtomicUsize::new(0);
    let branch = |lock: Lock| {
        let (inside, max_inside) = (&inside, &max_inside);
        async move {
            let guard = lock.lock().await.expect("lock in branch");
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            max_inside.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(150)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            let woken_by = guard.acquisition().woken_by;
            guard.unlock().await.expect("unlock in branch");
            woken_by
        }
    };
    let (wa, wb) = tokio::join!(branch(a), branch(b));
    (max_inside.load(Ordering::SeqCst), [wa, wb])
}

#[tokio::test]
async fn join_branches_with_the_implicit_owner_both_enter_at_once() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("joined");
    // Run inside one spawned task, so the implicit owner is that task.
    let (max_inside, woken) = tokio::spawn(async move {
        let lock2 = lock.clone();
        two_branches(lock, lock2).await
    })
    .await
    .expect("task");
    assert_eq!(
        max_inside, 2,
        "the documented hazard: both branches re-enter the task's hold"
    );
    assert_eq!(woken, [WokenBy::Immediate, WokenBy::Immediate]);
    assert_eq!(exists(&raw, "joined").await, 0);
}

#[tokio::test]
async fn join_branches_with_explicit_owners_serialise() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("joined-explicit");
    let (max_inside, woken) = tokio::spawn(async move {
        two_branches(lock.with_owner(Owner::new()), lock.with_owner(Owner::new())).await
    })
    .await
    .expect("task");
    assert_eq!(max_inside, 1, "explicit owners must exclude each other");
    let mut sorted = woken;
    sorted.sort_by_key(|w| *w != WokenBy::Immediate);
    assert_eq!(
        sorted,
        [WokenBy::Immediate, WokenBy::Message],
        "the second branch must be woken by the unlock message (got {woken:?})"
    );
    assert_eq!(exists(&raw, "joined-explicit").await, 0);
}

#[tokio::test]
async fn guard_reenter_from_a_spawned_task_counts_for_the_original_owner() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("handoff");

    let outer = lock.lock().await.expect("lock");
    let owner = outer.owner();
    let client_id = client.id().to_owned();
    let raw2 = raw.clone();
    let lock2 = lock.clone();
    tokio::spawn(async move {
        assert_ne!(
            Owner::current(),
            owner,
            "spawned task is another implicit owner"
        );
        let inner = outer.reenter().await.expect("reenter from spawned task");
        assert_eq!(inner.owner(), owner);
        assert_eq!(
            lock2
                .with_owner(owner)
                .hold_count()
                .await
                .expect("hold_count"),
            2
        );
        assert_eq!(lock2.hold_count().await.expect("task's own hold_count"), 0);
        assert_single_holder_at(&raw2, "handoff", &client_id, owner, "2").await;
        inner.unlock().await.expect("inner unlock");
        assert_single_holder_at(&raw2, "handoff", &client_id, owner, "1").await;
        outer.unlock().await.expect("outer unlock");
    })
    .await
    .expect("spawned task");
    assert_eq!(exists(&raw, "handoff").await, 0);
}

/// Redisson's `*Async(threadId)` and `isHeldByThread(threadId)`: an owner named by its id acts
/// on the hold of that id from any task, and the field on the wire is `<uuid>:<id>`.
#[tokio::test]
async fn an_owner_given_by_id_acts_on_that_ids_hold_from_any_task() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("by-id");
    let worker = Owner::from_id(42).expect("a positive long");

    lock.with_owner(worker)
        .lock()
        .await
        .expect("lock as worker 42")
        .detach();
    assert_single_holder_at(&raw, "by-id", client.id(), worker, "1").await;
    let fields = hgetall(&raw, "by-id").await;
    assert!(
        fields.contains_key(&format!("{}:42", client.id())),
        "{fields:?}"
    );
    assert!(lock.is_held_by(worker).await.expect("is_held_by 42"));
    assert!(!lock.is_held_by_current_owner().await.expect("this task"));
    assert!(!lock
        .is_held_by(Owner::from_id(43).expect("id"))
        .await
        .expect("is_held_by 43"));

    // Another task, with only the id in hand, re-enters and releases both holds.
    let again = lock.clone();
    tokio::spawn(async move {
        let owner = Owner::from_id(42).expect("id");
        let bound = again.with_owner(owner);
        let guard = bound.lock().await.expect("re-enter by id");
        assert_eq!(bound.hold_count().await.expect("hold count"), 2);
        guard.unlock().await.expect("release the re-entry");
        bound
            .unlock()
            .await
            .expect("release the detached hold by id");
    })
    .await
    .expect("task");
    assert_eq!(exists(&raw, "by-id").await, 0);
    assert!(!lock.is_held_by(worker).await.expect("released"));

    for bad in [0, 1 << 63, u64::MAX] {
        assert!(
            matches!(Owner::from_id(bad), Err(Error::InvalidArgument(_))),
            "{bad}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 8. detach

#[tokio::test]
async fn detached_hold_is_kept_until_lock_unlock_by_the_same_owner() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("detached");

    let guard = lock.lock().await.expect("lock");
    let owner = guard.owner();
    guard.detach();
    // A dropped (non-detached) guard would be released in the background; give it a moment.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_single_holder_at(&raw, "detached", client.id(), owner, "1").await;

    lock.unlock().await.expect("unlock by identity");
    assert_eq!(exists(&raw, "detached").await, 0);
    assert!(matches!(lock.unlock().await, Err(Error::NotHeld { .. })));
}

// ---------------------------------------------------------------------------------------------
// 9. queries

#[tokio::test]
async fn queries_report_the_lock_state_before_during_and_after_a_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("queried");
    let stranger = lock.with_owner(Owner::new());

    assert!(!lock.is_locked().await.expect("is_locked"));
    assert!(!lock.is_held_by_current_owner().await.expect("held"));
    assert_eq!(lock.hold_count().await.expect("hold_count"), 0);
    assert_eq!(
        lock.remaining_ttl().await.expect("ttl"),
        RemainingTtl::NotLocked
    );

    let guard = lock.lock().await.expect("lock");
    assert!(lock.is_locked().await.expect("is_locked"));
    assert!(lock.is_held_by_current_owner().await.expect("held"));
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    match lock.remaining_ttl().await.expect("ttl") {
        RemainingTtl::Expires(left) => assert!(
            left >= Duration::from_secs(29) && left <= Duration::from_secs(30),
            "remaining ttl {left:?}"
        ),
        other => panic!("expected Expires(~30s), got {other:?}"),
    }
    assert!(stranger.is_locked().await.expect("is_locked"));
    assert!(!stranger.is_held_by_current_owner().await.expect("held"));
    assert_eq!(stranger.hold_count().await.expect("hold_count"), 0);

    let again = lock.lock().await.expect("reenter");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 2);
    again.unlock().await.expect("unlock");

    let persisted: i64 = raw.persist("queried").await.expect("PERSIST");
    assert_eq!(persisted, 1);
    assert_eq!(
        lock.remaining_ttl().await.expect("ttl"),
        RemainingTtl::NoExpiry
    );

    guard.unlock().await.expect("unlock");
    assert!(!lock.is_locked().await.expect("is_locked"));
    assert!(!lock.is_held_by_current_owner().await.expect("held"));
    assert_eq!(lock.hold_count().await.expect("hold_count"), 0);
    assert_eq!(
        lock.remaining_ttl().await.expect("ttl"),
        RemainingTtl::NotLocked
    );
}

// ---------------------------------------------------------------------------------------------
// 10. a Java-side holder

#[tokio::test]
async fn a_foreign_redisson_holder_blocks_try_lock_and_bounded_wait() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let java_field = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f:1";
    raw.hset::<i64, _, _>("java-held", (java_field, 1))
        .await
        .expect("HSET");
    let set: bool = raw
        .pexpire("java-held", 5_000, None)
        .await
        .expect("PEXPIRE");
    assert!(set);
    let lock = client.lock("java-held");

    assert!(lock.try_lock().await.expect("try_lock").is_busy());
    assert!(lock.is_locked().await.expect("is_locked"));
    assert!(!lock.is_held_by_current_owner().await.expect("held"));

    let started = Instant::now();
    let got = lock
        .try_lock_within(Duration::from_millis(200))
        .await
        .expect("try_lock_within");
    let waited = started.elapsed();
    assert!(got.is_busy(), "acquired a lock held by a Java client");
    assert!(
        waited >= Duration::from_millis(190) && waited < Duration::from_millis(2_000),
        "try_lock_within(200ms) returned after {waited:?}"
    );

    let fields = hgetall(&raw, "java-held").await;
    assert_eq!(
        fields,
        HashMap::from([(java_field.to_owned(), "1".to_owned())]),
        "the Java holder's hash was changed"
    );
    let ttl = pttl(&raw, "java-held").await;
    assert!((4_000..=5_000).contains(&ttl), "PTTL {ttl}");
}

// ---------------------------------------------------------------------------------------------
// 11. shutdown

#[tokio::test]
async fn operations_after_shutdown_fail_with_shutdown() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let lock = client.lock("closing");
    client.shutdown().await;

    let shut = |what: &str, err: Option<Error>| match err {
        Some(Error::Shutdown) => {}
        other => panic!("{what}: expected Shutdown, got {other:?}"),
    };
    shut("lock", lock.lock().await.err());
    shut(
        "lock_with_lease",
        lock.lock_with_lease(Duration::from_secs(1)).await.err(),
    );
    shut("try_lock", lock.try_lock().await.err());
    shut(
        "try_lock_within",
        lock.try_lock_within(Duration::from_millis(50)).await.err(),
    );
    shut("unlock", lock.unlock().await.err());
    shut("force_unlock", lock.force_unlock().await.err());
    shut("is_locked", lock.is_locked().await.err());
    shut(
        "is_held_by_current_owner",
        lock.is_held_by_current_owner().await.err(),
    );
    shut("hold_count", lock.hold_count().await.err());
    shut("remaining_ttl", lock.remaining_ttl().await.err());
    shut("new lock handle", client.lock("fresh").lock().await.err());
}

// ---------------------------------------------------------------------------------------------
// 12. background work stops with the client

async fn connections(raw: &fred::clients::Client) -> usize {
    let list: String = raw
        .custom(cmd!("CLIENT"), vec!["LIST"])
        .await
        .expect("CLIENT LIST");
    list.lines().filter(|line| !line.trim().is_empty()).count()
}

/// Polls the connection count until it equals `expected` (or 3 s passed); returns the last count.
async fn until_connections(raw: &fred::clients::Client, expected: usize) -> usize {
    poll_until(
        Duration::from_secs(3),
        Duration::from_millis(20),
        || connections(raw),
        |now| *now == expected,
    )
    .await
    .unwrap_or_else(|last| last)
}

#[tokio::test]
async fn shutdown_closes_the_clients_connections() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let guard = client.lock("closing").lock().await.expect("lock");
    assert_eq!(
        connections(&raw).await,
        3,
        "raw + command + subscriber connections"
    );
    drop(guard);
    client.shutdown().await;
    // The dropped guard's release was finished before the connections closed.
    assert_eq!(exists(&raw, "closing").await, 0);
    assert_eq!(
        until_connections(&raw, 1).await,
        1,
        "only the raw client is left"
    );
}

#[tokio::test]
async fn dropping_every_handle_releases_and_closes_connections() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.lock("dropped");
    let guard = lock.lock().await.expect("lock");
    assert_eq!(exists(&raw, "dropped").await, 1);
    drop(client);
    drop(lock);
    drop(guard); // the last handle: the background task releases, then closes the connections
    assert_eq!(
        until_connections(&raw, 1).await,
        1,
        "only the raw client is left"
    );
    assert_eq!(
        exists(&raw, "dropped").await,
        0,
        "the guard's release ran before closing"
    );
}
