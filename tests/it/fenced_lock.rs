//! The fenced lock (Redisson's `RFencedLock`) against a real redis-server: tokens that strictly
//! increase across acquisitions, re-entries, clients, processes and local contention (a local
//! hand-off takes the heir's token in its script), `token()` and `delete()`, wrong-type keys, a
//! storage write guarded by the token that rejects a stale holder, and the Redis layout Java
//! reads.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrisson::{Error, FencedGuard, Owner};
use fred::prelude::*;
use support::contenders::{self, micros_since_epoch};
use support::redis_state::{
    command_calls, exists, hgetall, pttl, reset_stats, script_runs, wait_key_gone,
};
use support::{connect, raw_client, wait_parked, RedisServer};

fn token_key(name: &str) -> String {
    format!("redisson_lock_token:{{{name}}}")
}

async fn get(raw: &fred::clients::Client, key: &str) -> Option<String> {
    raw.get(key).await.expect("GET")
}

#[tokio::test]
async fn tokens_strictly_increase_across_acquisitions_reentries_and_clients() {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    let lock_a = a.fenced_lock("fenced:seq");
    let lock_b = b.fenced_lock("fenced:seq");

    let first = lock_a.lock().await.expect("a locks");
    let reentry = lock_a.lock().await.expect("a re-enters");
    assert!(
        reentry.token() > first.token(),
        "a re-entry takes a new token: {} then {}",
        first.token(),
        reentry.token()
    );
    assert_eq!(lock_a.hold_count().await.expect("hold_count"), 2);
    assert!(
        lock_b.try_lock().await.expect("b tries").is_busy(),
        "another client's owner is refused"
    );

    // b waits (pub/sub) while a holds; a's full release wakes it.
    let waiter = tokio::spawn(async move { lock_b.lock().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (t1, t2) = (first.token(), reentry.token());
    reentry.unlock().await.expect("a releases the re-entry");
    first.unlock().await.expect("a releases");
    let taken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("b is woken by a's release")
        .expect("task")
        .expect("b locks");
    assert!(
        taken.token() > t2,
        "b's token {} after {t1}, {t2}",
        taken.token()
    );
    assert_eq!(
        lock_a.token().await.expect("token"),
        Some(taken.token()),
        "token() is the last one handed out"
    );
    taken.unlock().await.expect("b releases");
    let again = lock_a
        .try_lock_within_with_lease(Duration::from_secs(1), Duration::from_secs(5))
        .await
        .expect("a tries")
        .acquired()
        .expect("free again");
    assert_eq!(again.token(), t2 + 2, "one token per acquisition, no more");
    again.unlock().await.expect("release");
}

#[tokio::test]
async fn token_reads_the_counter_and_delete_resets_it() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lock = client.fenced_lock("fenced:delete");

    assert_eq!(lock.token().await.expect("token"), None, "no token yet");
    assert!(!lock.delete().await.expect("delete"), "nothing to delete");
    let guard = lock.lock().await.expect("lock");
    assert_eq!(guard.token(), 1, "the sequence starts at 1");
    assert_eq!(lock.token().await.expect("token"), Some(1));
    guard.detach();
    let second = lock.lock().await.expect("re-enter");
    assert_eq!(second.token(), 2);
    second.detach();

    assert!(
        lock.delete().await.expect("delete"),
        "lock and token deleted"
    );
    assert_eq!(exists(&raw, "fenced:delete").await, 0, "lock hash gone");
    assert_eq!(
        exists(&raw, &token_key("fenced:delete")).await,
        0,
        "token key gone"
    );
    assert_eq!(lock.token().await.expect("token"), None);
    assert!(!lock.is_locked().await.expect("is_locked"));
    let fresh = lock.lock().await.expect("lock after delete");
    assert_eq!(fresh.token(), 1, "delete() resets the token sequence");
    fresh.unlock().await.expect("release");
}

#[tokio::test]
async fn a_lock_name_of_another_type_is_wrong_type_and_takes_no_token() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    raw.set::<(), _, _>("fenced:plain", "hello", None, None, false)
        .await
        .expect("SET");
    let lock = client.fenced_lock("fenced:plain");

    for (what, err) in [
        ("lock", lock.lock().await.expect_err("lock on a string")),
        (
            "try_lock",
            lock.try_lock().await.expect_err("try_lock on a string"),
        ),
        ("is_locked", lock.is_locked().await.expect_err("is_locked")),
    ] {
        match err {
            Error::WrongType { name } => assert_eq!(name, "fenced:plain", "{what}"),
            other => panic!("{what}: expected WrongType, got {other:?}"),
        }
    }
    assert_eq!(get(&raw, "fenced:plain").await.as_deref(), Some("hello"));
    assert_eq!(
        exists(&raw, &token_key("fenced:plain")).await,
        0,
        "no token taken"
    );
}

#[tokio::test]
async fn a_token_key_that_is_not_an_integer_is_wrong_type_naming_it() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let tk = token_key("fenced:badtoken");
    raw.set::<(), _, _>(&tk, "not a number", None, None, false)
        .await
        .expect("SET");
    let lock = client.fenced_lock("fenced:badtoken");

    for (what, err) in [
        ("lock", lock.lock().await.expect_err("lock")),
        ("try_lock", lock.try_lock().await.expect_err("try_lock")),
        ("token", lock.token().await.expect_err("token")),
    ] {
        match err {
            Error::WrongType { name } => assert_eq!(name, tk, "{what} names the token key"),
            other => panic!("{what}: expected WrongType, got {other:?}"),
        }
    }
    assert_eq!(
        exists(&raw, "fenced:badtoken").await,
        0,
        "the failed acquire wrote nothing"
    );
    assert_eq!(get(&raw, &tk).await.as_deref(), Some("not a number"));
}

/// A tiny storage on Redis that accepts a write only with a token at least the highest it saw.
const GUARDED_WRITE: &str = r#"
local highest = tonumber(redis.call('get', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if token < highest then return 0 end
redis.call('set', KEYS[1], ARGV[1])
redis.call('set', KEYS[2], ARGV[2])
return 1
"#;

async fn guarded_write(raw: &fred::clients::Client, guard: &FencedGuard, value: &str) -> bool {
    let accepted: i64 = raw
        .eval(
            GUARDED_WRITE,
            vec!["storage:highest", "storage:value"],
            vec![guard.token().to_string(), value.to_owned()],
        )
        .await
        .expect("EVAL");
    accepted == 1
}

#[tokio::test]
async fn a_storage_write_guarded_by_the_token_rejects_a_stale_holder() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let a = connect(&server).await;
    let b = connect(&server).await;
    let name = "fenced:storage";

    // A takes the lock with a short lease and is then "paused" past it.
    let stale = a
        .fenced_lock(name)
        .lock_with_lease(Duration::from_millis(300))
        .await
        .expect("a locks");
    wait_key_gone(&raw, name, Duration::from_secs(5)).await;

    // Meanwhile B takes the lock and writes.
    let current = b.fenced_lock(name).lock().await.expect("b locks");
    assert!(current.token() > stale.token());
    assert!(
        guarded_write(&raw, &current, "from b").await,
        "b's write is accepted"
    );

    // A resumes and writes with its old token: refused.
    assert!(stale.is_lost(), "a's fixed lease is past its end");
    assert!(
        !guarded_write(&raw, &stale, "from a").await,
        "a's stale write is rejected"
    );
    assert_eq!(get(&raw, "storage:value").await.as_deref(), Some("from b"));
    assert!(matches!(stale.unlock().await, Err(Error::LeaseLost { .. })));
    current.unlock().await.expect("b releases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_handed_the_lock_each_take_a_token() {
    const TASKS: usize = 4;
    const ROUNDS: usize = 25;
    let server = RedisServer::start();
    let client = connect(&server).await;
    let taken = Arc::new(Mutex::new(Vec::new()));
    let inside = Arc::new(AtomicBool::new(false));

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let lock = client.fenced_lock("fenced:local");
        let (taken, inside) = (Arc::clone(&taken), Arc::clone(&inside));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock.lock().await.expect("lock");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                // Recorded under the lock: the vector's order is the acquisition order.
                taken.lock().expect("mutex").push(guard.token());
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                guard.unlock().await.expect("unlock");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let taken = taken.lock().expect("mutex").clone();
    assert_eq!(taken.len(), TASKS * ROUNDS);
    assert!(
        taken.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens strictly increase in acquisition order: {taken:?}"
    );
    // One INCR per acquisition, hand-offs included.
    assert_eq!(
        client
            .fenced_lock("fenced:local")
            .token()
            .await
            .expect("token"),
        Some((TASKS * ROUNDS) as u64)
    );
}

#[tokio::test]
async fn a_release_hands_the_lock_to_a_local_waiter_with_the_next_token_in_one_script() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "fenced:handoff";
    let holder = client.fenced_lock(name).with_owner(Owner::new());
    let held = holder
        .lock_with_lease(Duration::from_secs(30))
        .await
        .expect("holder locks");
    let waiter = client.fenced_lock(name).with_owner(Owner::new());
    let waiting = tokio::spawn(async move { waiter.lock_with_lease(Duration::from_secs(7)).await });
    wait_parked(&client, name, 1).await;
    reset_stats(&raw).await;
    let before = held.token();
    held.unlock().await.expect("holder releases");
    let handed = support::acquired_within(waiting, Duration::from_secs(2)).await;

    assert_eq!(
        handed.token(),
        before + 1,
        "the next token, taken for the heir"
    );
    assert_eq!(
        get(&raw, &token_key(name)).await,
        Some((before + 1).to_string())
    );
    assert_eq!(
        script_runs(&raw).await,
        1,
        "one script: the release that handed over (no acquire of the waiter's own)"
    );
    assert_eq!(
        command_calls(&raw, "publish").await,
        0,
        "the lock was never free"
    );
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.len(), 1, "only the heir holds: {fields:?}");
    assert_eq!(
        fields.get(handed.holder_field()).map(String::as_str),
        Some("1")
    );
    let ttl = pttl(&raw, name).await;
    assert!(
        (6_000..=7_000).contains(&ttl),
        "the heir's 7 s lease, got {ttl} ms"
    );
    handed.unlock().await.expect("heir releases");
    wait_key_gone(&raw, name, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn hand_offs_between_fenced_and_reentrant_owners_of_one_name_take_a_token_only_for_the_fenced(
) {
    // The fenced lock and the reentrant lock share the hash (protocol §7): one client may hold
    // a name as either, and its releases hand over to waiters of both.
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "fenced:mixed";
    let lease = Duration::from_secs(30);

    let plain = client.lock(name).with_owner(Owner::new());
    let held = plain
        .lock_with_lease(lease)
        .await
        .expect("reentrant holder");
    let fenced = client.fenced_lock(name).with_owner(Owner::new());
    let waiting = tokio::spawn(async move { fenced.lock_with_lease(lease).await });
    wait_parked(&client, name, 1).await;
    reset_stats(&raw).await;
    held.unlock().await.expect("reentrant holder releases");
    let fenced_held = support::acquired_within(waiting, Duration::from_secs(2)).await;
    assert_eq!(
        script_runs(&raw).await,
        1,
        "handed over in the release's script"
    );
    assert_eq!(
        fenced_held.token(),
        1,
        "a reentrant releaser takes the fenced heir's token"
    );

    let reentrant = client.lock(name).with_owner(Owner::new());
    let waiting = tokio::spawn(async move { reentrant.lock_with_lease(lease).await });
    wait_parked(&client, name, 1).await;
    reset_stats(&raw).await;
    fenced_held.unlock().await.expect("fenced holder releases");
    let plain_held = support::acquired_within(waiting, Duration::from_secs(2)).await;
    assert_eq!(
        script_runs(&raw).await,
        1,
        "handed over in the release's script"
    );
    assert_eq!(
        get(&raw, &token_key(name)).await.as_deref(),
        Some("1"),
        "no token for a reentrant heir"
    );
    plain_held.unlock().await.expect("release");
    wait_key_gone(&raw, name, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_token_key_spoiled_while_waiting_fails_the_heir_with_wrong_type_and_leaves_no_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "fenced:spoiled";
    let tk = token_key(name);
    let held = client
        .fenced_lock(name)
        .with_owner(Owner::new())
        .lock_with_lease(Duration::from_secs(30))
        .await
        .expect("holder locks");
    let waiter = client.fenced_lock(name).with_owner(Owner::new());
    let waiting = tokio::spawn(async move { waiter.lock().await });
    wait_parked(&client, name, 1).await;
    raw.set::<(), _, _>(&tk, "not a number", None, None, false)
        .await
        .expect("SET");
    // The hand-off's INCR fails first: the release is a plain one, and the waiter's own
    // acquire reports the token key.
    held.unlock().await.expect("holder releases");
    let err = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("the waiter ends")
        .expect("task")
        .expect_err("the token key is not an integer");
    match err {
        Error::WrongType { name } => assert_eq!(name, tk),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert_eq!(exists(&raw, name).await, 0, "nobody holds the lock");
    assert_eq!(get(&raw, &tk).await.as_deref(), Some("not a number"));
}

#[tokio::test]
async fn the_redis_layout_is_redissons() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let owner = Owner::new();
    let lock = client.fenced_lock("fenced:layout").with_owner(owner);

    let guard = lock
        .lock_with_lease(Duration::from_secs(30))
        .await
        .expect("lock");
    let fields = hgetall(&raw, "fenced:layout").await;
    let expected_field = format!("{}:{}", client.id(), owner.id());
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(fields.get(&expected_field).map(String::as_str), Some("1"));
    assert_eq!(guard.holder_field(), expected_field);
    let ttl = pttl(&raw, "fenced:layout").await;
    assert!(
        ttl > 0 && ttl <= 30_000,
        "the hash has the lease as TTL: {ttl}"
    );

    let tk = token_key("fenced:layout");
    let kind: String = raw
        .custom(fred::cmd!("TYPE"), vec![tk.as_str()])
        .await
        .expect("TYPE");
    assert_eq!(kind, "string");
    assert_eq!(
        get(&raw, &tk).await.as_deref(),
        Some("1"),
        "a plain integer string"
    );
    assert_eq!(pttl(&raw, &tk).await, -1, "the token key has no TTL");

    // The reentrant lock of the same name sees the same hold.
    let plain = client.lock("fenced:layout").with_owner(owner);
    assert_eq!(plain.hold_count().await.expect("hold_count"), 1);
    guard.unlock().await.expect("release");
    assert_eq!(
        exists(&raw, "fenced:layout").await,
        0,
        "released like an RLock"
    );
    assert_eq!(
        get(&raw, &tk).await.as_deref(),
        Some("1"),
        "release keeps the token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_acquires_dropped_in_flight_leave_no_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "fenced:cancel";
    let mut completed = 0;
    for k in 0..200u64 {
        // Fresh owners: an acquire whose reply was lost to the drop must be taken back, or the
        // next owner waits for it; a completed one hands back its guard, dropped at once.
        let lock = client.fenced_lock(name).with_owner(Owner::new());
        let acquire = tokio::time::timeout(Duration::from_micros(k * 10), lock.lock());
        if let Ok(guard) = acquire.await {
            completed += 1;
            drop(guard.expect("acquire"));
        }
    }
    eprintln!("{completed} of 200 acquires completed before being dropped");
    wait_key_gone(&raw, name, Duration::from_secs(3)).await;
    let other = connect(&server).await;
    let guard = other
        .fenced_lock(name)
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("another client gets the lock at once");
    guard.unlock().await.expect("release");
}

#[test]
fn the_blocking_fenced_lock_is_reentrant_per_thread_and_takes_tokens() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let lock = client.fenced_lock("fenced:blocking");

    let first = lock.lock().expect("lock");
    let again = lock.lock().expect("same thread re-enters");
    assert_eq!(again.token(), first.token() + 1);
    assert_eq!(lock.as_lock().hold_count().expect("hold_count"), 2);
    let other = lock.clone();
    let busy = std::thread::spawn(move || other.try_lock().expect("try_lock").is_busy())
        .join()
        .expect("thread");
    assert!(busy, "another thread is another owner");
    again.unlock().expect("unlock");
    first.unlock().expect("unlock");

    let other = lock.clone();
    let token = std::thread::spawn(move || {
        let guard = other
            .try_lock_within_with_lease(Duration::from_secs(1), Duration::from_secs(5))
            .expect("try_lock_within")
            .acquired()
            .expect("free");
        let token = guard.token();
        guard.unlock().expect("unlock");
        token
    })
    .join()
    .expect("thread");
    assert_eq!(token, 3);
    assert_eq!(lock.token().expect("token"), Some(3));
    assert!(lock.delete().expect("delete"));
    assert_eq!(lock.token().expect("token"), None);
}

/// The env variable that makes this test binary a contender process of the test below.
const CHILD_URL: &str = "FERRISSON_FENCED_CHILD_URL";
const CROSS_PROCESS: &str =
    "contenders_in_separate_processes_take_increasing_tokens_and_never_overlap";

/// Three processes take one fenced lock 20 times each. Sorted by token, the holds follow each
/// other without overlap (each starts after the previous one's release was sent): the token
/// order is the acquisition order, across processes, and no two tokens are equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_in_separate_processes_take_increasing_tokens_and_never_overlap() {
    let name = "fenced:processes";
    if let Ok(url) = std::env::var(CHILD_URL) {
        // A contender: one line per hold, `HOLD <start µs> <end µs> <token>`.
        let client = ferrisson::Client::connect(&url)
            .await
            .expect("child connects");
        let lock = client.fenced_lock(name);
        for _ in 0..20 {
            let guard = lock.lock().await.expect("child locks");
            let start = micros_since_epoch();
            tokio::time::sleep(Duration::from_millis(1)).await;
            let end = micros_since_epoch();
            println!("HOLD {start} {end} {}", guard.token());
            guard.unlock().await.expect("child unlocks");
        }
        client.shutdown().await;
        return;
    }
    let server = RedisServer::start();
    let mut holds: Vec<(u128, u128, u128)> = contenders::run(
        &support::processes::test_name(module_path!(), CROSS_PROCESS),
        CHILD_URL,
        &server.url(),
        3,
    )
    .await
    .into_iter()
    .map(|numbers| (numbers[2], numbers[0], numbers[1]))
    .collect();
    assert_eq!(holds.len(), 60, "every contender reported its 20 holds");
    holds.sort_unstable();
    for pair in holds.windows(2) {
        let ((token_a, _, end_a), (token_b, start_b, _)) = (pair[0], pair[1]);
        assert!(token_a < token_b, "tokens are distinct: {holds:?}");
        assert!(
            start_b >= end_a,
            "token {token_b} started before token {token_a}'s hold ended: {holds:?}"
        );
    }
}
