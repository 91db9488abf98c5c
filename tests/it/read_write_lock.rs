//! The read-write lock (Redisson's `RReadWriteLock`, protocol §5) against a real redis-server:
//! readers share and a writer excludes (also across processes), reentrancy on both sides, the
//! downgrade and the refused upgrade, the per-hold timeout keys that keep our read holds alive
//! through a Java reader's release (with Redisson's own scripts, from the protocol reference),
//! the watchdog's renewal of read holds, wake-ups (a write release wakes every parked reader, a
//! read release a writer), local hand-offs between writers (never to a reader, never on a
//! downgrade, and giving way to other clients), lease expiry, wrong types, cancelled acquires
//! and the blocking twin.

use crate::support;

use std::time::Duration;

use ferrisson::{Attempt, Error, Owner, ReadWriteLock};
use fred::prelude::*;
use support::redis_state::{
    command_calls, exists, hgetall, pttl, reset_stats, script_runs, wait_key_gone,
};
use support::{connect, connect_with, raw_client, timed_config, RedisServer};

/// T(N) + `:` + F + `:rwlock_timeout:` + k, the timeout key of read hold k (protocol §5.1).
fn timeout_key(name: &str, field: &str, k: u64) -> String {
    format!("{{{name}}}:{field}:rwlock_timeout:{k}")
}

fn read_field(client: &ferrisson::Client, owner: Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

fn rw(client: &ferrisson::Client, name: &str, owner: Owner) -> ReadWriteLock {
    client.read_write_lock(name).with_owner(owner)
}

#[tokio::test]
async fn readers_share_the_lock_and_a_writer_excludes_readers_and_writers() {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    let name = "rw:share";
    let (ra, rb) = (rw(&a, name, Owner::new()), rw(&b, name, Owner::new()));

    let read_a = ra.read_lock().try_lock().await.expect("a reads");
    let read_b = rb.read_lock().try_lock().await.expect("b reads");
    assert!(
        read_a.is_acquired() && read_b.is_acquired(),
        "readers share"
    );
    assert!(ra.read_lock().is_locked().await.expect("is_locked"));
    assert!(!ra.write_lock().is_locked().await.expect("is_locked"));
    let other_writer = rw(&b, name, Owner::new()).write_lock();
    assert!(
        other_writer.try_lock().await.expect("try").is_busy(),
        "a writer waits for the readers"
    );
    read_a.acquired().expect("held").unlock().await.expect("a");
    assert!(
        other_writer.try_lock().await.expect("try").is_busy(),
        "and for the last of them"
    );
    read_b.acquired().expect("held").unlock().await.expect("b");

    let write = other_writer.try_lock().await.expect("try").acquired();
    let write = write.expect("free: the writer gets it");
    assert!(other_writer.is_locked().await.expect("is_locked"));
    assert!(
        ra.read_lock().try_lock().await.expect("try").is_busy(),
        "a writer excludes readers"
    );
    assert!(
        ra.write_lock().try_lock().await.expect("try").is_busy(),
        "and other writers"
    );
    write.unlock().await.expect("release");
    assert!(!ra.write_lock().is_locked().await.expect("is_locked"));
}

#[tokio::test]
async fn the_redis_layout_is_redissons() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let owner = Owner::new();
    let name = "rw:layout";
    let lock = rw(&client, name, owner);
    let field = read_field(&client, owner);

    let short = lock
        .read_lock()
        .lock_with_lease(Duration::from_secs(10))
        .await
        .expect("read");
    let long = lock
        .read_lock()
        .lock_with_lease(Duration::from_secs(60))
        .await
        .expect("re-enter");
    assert_eq!(short.holder_field(), field);
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.get("mode").map(String::as_str), Some("read"));
    assert_eq!(fields.get(&field).map(String::as_str), Some("2"));
    assert_eq!(fields.len(), 2, "{fields:?}");
    let (k1, k2) = (timeout_key(name, &field, 1), timeout_key(name, &field, 2));
    let value: Option<String> = raw.get(&k1).await.expect("GET");
    assert_eq!(value.as_deref(), Some("1"));
    assert!(
        (1..=10_000).contains(&pttl(&raw, &k1).await),
        "hold 1's lease"
    );
    assert!(pttl(&raw, &k2).await > 50_000, "hold 2's lease");
    assert!(
        pttl(&raw, name).await > 50_000,
        "the hash lives as long as the longest hold"
    );

    // Releasing hold 2 deletes its key and brings the hash's TTL down to hold 1's.
    long.unlock().await.expect("release hold 2");
    assert_eq!(exists(&raw, &k2).await, 0);
    let ttl = pttl(&raw, name).await;
    assert!((1..=10_000).contains(&ttl), "recomputed from hold 1: {ttl}");
    short.unlock().await.expect("release hold 1");
    assert_eq!(exists(&raw, name).await, 0, "the last read release deletes");
    assert_eq!(exists(&raw, &k1).await, 0);

    // The write side: field F:write, and a re-entry adds its lease to the remaining TTL.
    let write = lock
        .write_lock()
        .lock_with_lease(Duration::from_secs(20))
        .await
        .expect("write");
    assert_eq!(write.holder_field(), format!("{field}:write"));
    let again = lock
        .write_lock()
        .lock_with_lease(Duration::from_secs(20))
        .await
        .expect("write again");
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.get("mode").map(String::as_str), Some("write"));
    assert_eq!(
        fields.get(&format!("{field}:write")).map(String::as_str),
        Some("2")
    );
    assert!(
        pttl(&raw, name).await > 30_000,
        "a write re-entry adds its lease to the TTL"
    );
    assert_eq!(lock.write_lock().hold_count().await.expect("count"), 2);
    assert!(lock
        .write_lock()
        .is_held_by_current_owner()
        .await
        .expect("held"));
    assert!(!lock
        .read_lock()
        .is_held_by_current_owner()
        .await
        .expect("held"));
    again.unlock().await.expect("partial");
    write.unlock().await.expect("last");
    assert_eq!(exists(&raw, name).await, 0);
}

#[tokio::test]
async fn both_sides_are_reentrant_and_unlock_by_owner() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let lock = rw(&client, "rw:reentry", Owner::new());
    let other = rw(&client, "rw:reentry", Owner::new());

    for _ in 0..3 {
        lock.read_lock().lock().await.expect("read").detach();
    }
    assert_eq!(lock.read_lock().hold_count().await.expect("count"), 3);
    assert!(matches!(
        other.read_lock().unlock().await,
        Err(Error::NotHeld { .. })
    ));
    for left in (0..3).rev() {
        lock.read_lock().unlock().await.expect("unlock");
        assert_eq!(lock.read_lock().hold_count().await.expect("count"), left);
    }
    assert!(matches!(
        lock.read_lock().unlock().await,
        Err(Error::NotHeld { .. })
    ));

    let first = lock.write_lock().lock().await.expect("write");
    let second = lock.write_lock().lock().await.expect("re-enter");
    assert!(other.write_lock().try_lock().await.expect("try").is_busy());
    second.unlock().await.expect("partial");
    assert!(
        other.write_lock().try_lock().await.expect("try").is_busy(),
        "held until the last write release"
    );
    first.unlock().await.expect("last");
    let taken = other.write_lock().try_lock().await.expect("try").acquired();
    taken.expect("free").unlock().await.expect("release");
}

#[tokio::test]
async fn a_writer_may_read_and_its_reads_remain_after_the_write_release() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let owner = Owner::new();
    let name = "rw:downgrade";
    let lock = rw(&client, name, owner);
    let other = rw(&client, name, Owner::new());

    let write = lock.write_lock().lock().await.expect("write");
    let read = lock.read_lock().lock().await.expect("the writer reads");
    assert!(
        lock.read_lock().is_locked().await.expect("is_locked"),
        "3.24+: write mode with a writer's reads counts as read-locked"
    );
    assert!(other.read_lock().try_lock().await.expect("try").is_busy());
    write.unlock().await.expect("write release");

    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.get("mode").map(String::as_str), Some("read"));
    assert_eq!(
        fields.get(&read_field(&client, owner)).map(String::as_str),
        Some("1")
    );
    assert!(!lock.write_lock().is_locked().await.expect("is_locked"));
    let joined = other.read_lock().try_lock().await.expect("try").acquired();
    let joined = joined.expect("another reader joins the downgraded lock");
    assert!(other.write_lock().try_lock().await.expect("try").is_busy());
    joined.unlock().await.expect("release");
    read.unlock().await.expect("release");
    assert_eq!(exists(&raw, name).await, 0);
}

#[tokio::test]
async fn a_reader_cannot_upgrade() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "rw:upgrade";
    let lock = rw(&client, name, Owner::new());

    let read = lock.read_lock().lock().await.expect("read");
    assert!(
        lock.write_lock().try_lock().await.expect("try").is_busy(),
        "try_lock just reports busy"
    );
    let bounded = lock
        .write_lock()
        .try_lock_within(Duration::from_millis(200))
        .await
        .expect("try_lock_within");
    assert!(bounded.is_busy(), "a bounded wait runs out");
    let refused = tokio::time::timeout(Duration::from_secs(5), lock.write_lock().lock())
        .await
        .expect("lock() answers at once instead of waiting for itself");
    match refused {
        Err(Error::UpgradeRefused { name: refused }) => assert_eq!(refused, name),
        other => panic!("expected UpgradeRefused, got {other:?}"),
    }
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.get("mode").map(String::as_str), Some("read"));
    assert_eq!(fields.len(), 2, "nothing written: {fields:?}");

    // Another owner's unbounded write wait is no upgrade: it waits for the reader.
    let other = rw(&client, name, Owner::new());
    let waiter = tokio::spawn(async move { other.write_lock().lock().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the other owner waits");
    read.unlock().await.expect("release");
    let write = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the read release")
        .expect("task")
        .expect("the other owner writes");
    write.unlock().await.expect("release");
}

/// Redisson's read acquire (protocol §5.2), as Java sends it.
const JAVA_READ_ACQUIRE: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call('hset', KEYS[1], 'mode', 'read');
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('set', KEYS[2] .. ':1', 1);
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1);
  local key = KEYS[2] .. ':' .. ind;
  redis.call('set', key, 1);
  redis.call('pexpire', key, ARGV[1]);
  local remainTime = redis.call('pttl', KEYS[1]);
  redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1]));
  return nil;
end;
return redis.call('pttl', KEYS[1]);
"#;

/// Redisson's read release, 3.44+ with the unlock latch (protocol §5.3).
const JAVA_READ_RELEASE: &str = r#"
local val = redis.call('get', KEYS[5]);
if val ~= false then return tonumber(val); end;
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call(ARGV[3], KEYS[2], ARGV[1]);
  redis.call('set', KEYS[5], 1, 'px', ARGV[4]);
  return nil;
end;
local lockExists = redis.call('hexists', KEYS[1], ARGV[2]);
if (lockExists == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);
if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end;
redis.call('del', KEYS[3] .. ':' .. (counter+1));
if (redis.call('hlen', KEYS[1]) > 1) then
  local maxRemainTime = -3;
  local keys = redis.call('hkeys', KEYS[1]);
  for n, key in ipairs(keys) do
    counter = tonumber(redis.call('hget', KEYS[1], key));
    if type(counter) == 'number' then
      for i=counter, 1, -1 do
        local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i);
        maxRemainTime = math.max(remainTime, maxRemainTime);
      end;
    end;
  end;
  if maxRemainTime > 0 then
    redis.call('pexpire', KEYS[1], maxRemainTime);
    redis.call('set', KEYS[5], 0, 'px', ARGV[4]);
    return 0;
  end;
  if mode == 'write' then
    redis.call('set', KEYS[5], 0, 'px', ARGV[4]);
    return 0;
  end;
end;
redis.call('del', KEYS[1]);
redis.call(ARGV[3], KEYS[2], ARGV[1]);
redis.call('set', KEYS[5], 1, 'px', ARGV[4]);
return 1;
"#;

const JAVA_FIELD: &str = "0b6c4a3e-1d2f-4a5b-8c9d-0e1f2a3b4c5d:57";

async fn java_read(raw: &fred::clients::Client, name: &str, lease_ms: u64) {
    let prefix = format!("{{{name}}}:{JAVA_FIELD}:rwlock_timeout");
    let reply: Value = raw
        .eval(
            JAVA_READ_ACQUIRE,
            vec![name.to_owned(), prefix],
            vec![
                lease_ms.to_string(),
                JAVA_FIELD.to_owned(),
                format!("{JAVA_FIELD}:write"),
            ],
        )
        .await
        .expect("Java's read acquire");
    assert!(reply.is_null(), "the Java reader joins: {reply:?}");
}

async fn java_read_release(raw: &fred::clients::Client, name: &str, request: &str) -> Value {
    let keys = vec![
        name.to_owned(),
        format!("redisson_rwlock:{{{name}}}"),
        format!("{{{name}}}:{JAVA_FIELD}:rwlock_timeout"),
        format!("{{{name}}}"),
        format!("redisson_unlock_latch:{{{name}}}:{request}"),
    ];
    let args = vec!["0", JAVA_FIELD, "PUBLISH", "16000"];
    raw.eval(JAVA_READ_RELEASE, keys, args)
        .await
        .expect("Java's read release")
}

#[tokio::test]
async fn a_redisson_readers_release_keeps_our_read_hold_because_of_its_timeout_key() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let owner = Owner::new();
    let name = "rw:java";
    let ours = read_field(&client, owner);
    let lock = rw(&client, name, owner);

    let guard = lock.read_lock().lock().await.expect("we read");
    java_read(&raw, name, 30_000).await;
    let released = java_read_release(&raw, name, "00000000000000000000000000000001").await;
    assert_eq!(released.as_i64(), Some(0), "Java sees another reader left");
    let fields = hgetall(&raw, name).await;
    assert_eq!(
        fields.get(&ours).map(String::as_str),
        Some("1"),
        "our read hold survives the Java release: {fields:?}"
    );
    assert!(pttl(&raw, name).await > 0);
    assert!(
        rw(&client, name, Owner::new())
            .write_lock()
            .try_lock()
            .await
            .expect("try")
            .is_busy(),
        "and still keeps writers out"
    );

    // Without our timeout key, the same Java release drops the whole hash, our hold with it:
    // the reason the keys exist.
    let _: i64 = raw
        .del(timeout_key(name, &ours, 1))
        .await
        .expect("DEL our timeout key");
    java_read(&raw, name, 30_000).await;
    let released = java_read_release(&raw, name, "00000000000000000000000000000002").await;
    assert_eq!(released.as_i64(), Some(1), "Java deleted the lock");
    assert_eq!(exists(&raw, name).await, 0, "our read hold is gone");
    assert!(matches!(guard.unlock().await, Err(Error::LeaseLost { .. })));
}

#[tokio::test]
async fn the_watchdog_renews_read_holds_and_their_timeout_keys() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // Renewed every second; a renewal up to 2 s late still keeps the keys up.
    let watchdog = Duration::from_secs(3);
    let config = timed_config(server.url(), watchdog, Duration::from_secs(2));
    let client = connect_with(config).await;
    let owner = Owner::new();
    let name = "rw:watchdog";
    let field = read_field(&client, owner);
    let lock = rw(&client, name, owner);

    let first = lock.read_lock().lock().await.expect("read");
    let second = lock.read_lock().lock().await.expect("re-enter");
    let keys = [timeout_key(name, &field, 1), timeout_key(name, &field, 2)];
    // Past two watchdog timeouts: without renewal the timeout keys (and so the hash) would
    // expire after one.
    let until = tokio::time::Instant::now() + watchdog * 2 + Duration::from_secs(1);
    while tokio::time::Instant::now() < until {
        for key in std::iter::once(name).chain(keys.iter().map(String::as_str)) {
            let ttl = pttl(&raw, key).await;
            assert!(
                ttl > 0 && ttl <= watchdog.as_millis() as i64,
                "{key} stays up: pttl {ttl}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A Java reader's release finds our keys alive, so our holds survive it.
    java_read(&raw, name, 30_000).await;
    java_read_release(&raw, name, "00000000000000000000000000000003").await;
    assert_eq!(lock.read_lock().hold_count().await.expect("count"), 2);
    assert!(!first.is_lost() && !second.is_lost());
    second.unlock().await.expect("release");
    first.unlock().await.expect("release");
    assert_eq!(exists(&raw, name).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_release_wakes_every_parked_reader() {
    let server = RedisServer::start();
    let writer = connect(&server).await;
    let readers = connect(&server).await;
    let name = "rw:wake-all";
    // A long lease: readers that were not woken would wait for it.
    let write = rw(&writer, name, Owner::new())
        .write_lock()
        .lock_with_lease(Duration::from_secs(30))
        .await
        .expect("write");
    let mut parked = Vec::new();
    // Every reader keeps its hold until all three have one, so that no read release (whose
    // message 0 wakes one waiter) can wake the next: only the write release's 1 wakes them all.
    let all_hold = std::sync::Arc::new(tokio::sync::Barrier::new(3));
    for _ in 0..3 {
        let read = rw(&readers, name, Owner::new()).read_lock();
        let all_hold = std::sync::Arc::clone(&all_hold);
        parked.push(tokio::spawn(async move {
            let guard = read.lock().await.expect("read");
            all_hold.wait().await;
            guard.unlock().await.expect("release");
        }));
    }
    support::wait_parked(&readers, name, 3).await;
    assert!(parked.iter().all(|task| !task.is_finished()), "all parked");
    write.unlock().await.expect("write release");
    for task in parked {
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("every parked reader is woken by the one message 1")
            .expect("task");
    }
}

#[tokio::test]
async fn a_read_release_wakes_a_waiting_writer() {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    let name = "rw:wake-writer";
    let read = rw(&a, name, Owner::new())
        .read_lock()
        .lock_with_lease(Duration::from_secs(30))
        .await
        .expect("read");
    let write = rw(&b, name, Owner::new()).write_lock();
    let waiter = tokio::spawn(async move { write.lock().await });
    support::wait_parked(&b, name, 1).await;
    assert!(!waiter.is_finished(), "the writer waits");
    read.unlock().await.expect("read release");
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the read release's message 0")
        .expect("task")
        .expect("write");
    assert_eq!(
        guard.acquisition().woken_by,
        ferrisson::WokenBy::Message,
        "by the message, not the lease"
    );
    guard.unlock().await.expect("release");
}

/// The write lock `name`, taken by a new owner of `client` for `lease`.
async fn hold_write(
    client: &ferrisson::Client,
    name: &str,
    lease: Duration,
) -> ferrisson::WriteGuard {
    let write = rw(client, name, Owner::new()).write_lock();
    write.lock_with_lease(lease).await.expect("write")
}

/// Runs each side's scripts once, so that the server has them cached and a script counted
/// later is one run (not a refused `EVALSHA` and its `EVAL`).
async fn warm_up(client: &ferrisson::Client, name: &str) {
    let lock = rw(client, name, Owner::new());
    let read = lock.read_lock().lock().await.expect("read");
    read.unlock().await.expect("read release");
    let write = lock.write_lock().lock().await.expect("write");
    write.unlock().await.expect("write release");
}

#[tokio::test]
async fn a_write_release_hands_the_lock_to_a_local_writer_in_one_script() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "rw:handoff";
    warm_up(&client, name).await;
    let held = hold_write(&client, name, Duration::from_secs(30)).await;
    let heir = Owner::new();
    let write = rw(&client, name, heir).write_lock();
    let waiter = tokio::spawn(async move { write.lock_with_lease(Duration::from_secs(7)).await });
    support::wait_parked(&client, name, 1).await;
    reset_stats(&raw).await;
    held.unlock().await.expect("write release");
    let handed = support::acquired_within(waiter, Duration::from_secs(2)).await;

    assert_eq!(
        script_runs(&raw).await,
        1,
        "one script: the release that handed over"
    );
    assert_eq!(
        command_calls(&raw, "publish").await,
        0,
        "the lock was never free"
    );
    let fields = hgetall(&raw, name).await;
    let heir_field = format!("{}:write", read_field(&client, heir));
    assert_eq!(fields.len(), 2, "the mode and the heir: {fields:?}");
    assert_eq!(fields.get("mode").map(String::as_str), Some("write"));
    assert_eq!(fields.get(&heir_field).map(String::as_str), Some("1"));
    let ttl = pttl(&raw, name).await;
    assert!(
        (6_000..=7_000).contains(&ttl),
        "the heir's 7 s lease, got {ttl} ms"
    );
    handed.unlock().await.expect("release");
    wait_key_gone(&raw, name, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_write_release_hands_nothing_to_a_local_reader_nor_on_a_downgrade() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "rw:no-handoff";
    let lease = Duration::from_secs(30);
    warm_up(&client, name).await;

    // A read hold needs its timeout key, which no release writes: the reader takes the lock
    // itself after the unlock message.
    let held = hold_write(&client, name, lease).await;
    let read = rw(&client, name, Owner::new()).read_lock();
    let reader = tokio::spawn(async move { read.lock_with_lease(lease).await });
    support::wait_parked(&client, name, 1).await;
    reset_stats(&raw).await;
    held.unlock().await.expect("write release");
    let reading = support::acquired_within(reader, Duration::from_secs(2)).await;
    assert_eq!(
        command_calls(&raw, "publish").await,
        1,
        "the lock was freed"
    );
    assert_eq!(
        script_runs(&raw).await,
        2,
        "the release, then the reader's own acquire"
    );
    reading.unlock().await.expect("read release");
    wait_key_gone(&raw, name, Duration::from_secs(2)).await;

    // A writer that also reads keeps the lock (in read mode) when its write hold goes: a local
    // writer is not handed it, and waits for the read release.
    let downgrading = rw(&client, name, Owner::new());
    let writing = downgrading
        .write_lock()
        .lock_with_lease(lease)
        .await
        .expect("write");
    let reading = downgrading
        .read_lock()
        .lock_with_lease(lease)
        .await
        .expect("read");
    let write = rw(&client, name, Owner::new()).write_lock();
    let writer = tokio::spawn(async move { write.lock_with_lease(lease).await });
    support::wait_parked(&client, name, 1).await;
    writing.unlock().await.expect("downgrade");
    assert_eq!(
        hgetall(&raw, name).await.get("mode").map(String::as_str),
        Some("read"),
        "downgraded, not handed over"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "the writer waits for the read hold");
    reading.unlock().await.expect("read release");
    let written = support::acquired_within(writer, Duration::from_secs(2)).await;
    written.unlock().await.expect("release");
}

#[tokio::test]
async fn a_write_hold_handed_to_a_writer_that_left_is_released_by_the_write_release() {
    // On this one-thread runtime the writer cannot run between the release, which hands it the
    // lock, and the abort: it never takes the hold, and its place releases it, as a write hold
    // (message 1 on the read-write channel, which Java's readers and writers wait on).
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "rw:handoff-orphan";
    let lease = Duration::from_secs(30);
    warm_up(&client, name).await;
    let held = hold_write(&client, name, lease).await;
    let write = rw(&client, name, Owner::new()).write_lock();
    let waiter = tokio::spawn(async move { write.lock_with_lease(lease).await });
    support::wait_parked(&client, name, 1).await;
    let sent = messages_of(&server, name, async {
        held.unlock().await.expect("release");
        waiter.abort();
        assert!(waiter.await.is_err_and(|err| err.is_cancelled()));
        wait_key_gone(&raw, name, Duration::from_secs(2)).await;
    })
    .await;
    assert_eq!(sent, ["1"], "released as a write hold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_writers_handing_over_give_another_clients_writer_its_turns() {
    // Four writers of one client take the lock back to back, mostly by hand-off (a budget of 4);
    // every fifth release frees the lock, and the client gives way to the other client's
    // writer, whose message it reached.
    let server = RedisServer::start();
    let name = "rw:give-way";
    let mut config = ferrisson::Config::new(server.url());
    config.max_local_handoffs = 4;
    let local = connect_with(config.clone()).await;
    let remote = connect_with(config).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let write = rw(&local, name, Owner::new()).write_lock();
            let (stop, taken) = (stop.clone(), taken.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let guard = write
                        .lock_with_lease(Duration::from_secs(20))
                        .await
                        .expect("write");
                    taken.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    guard.unlock().await.expect("release");
                }
            })
        })
        .collect();
    while taken.load(std::sync::atomic::Ordering::SeqCst) < 50 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let write = rw(&remote, name, Owner::new()).write_lock();
    let mut overtaken = Vec::new();
    for _ in 0..20 {
        let before = taken.load(std::sync::atomic::Ordering::SeqCst);
        let guard = tokio::time::timeout(
            Duration::from_secs(10),
            write.lock_with_lease(Duration::from_secs(20)),
        )
        .await
        .expect("the other client got a turn")
        .expect("write");
        overtaken.push(taken.load(std::sync::atomic::Ordering::SeqCst) - before);
        guard.unlock().await.expect("release");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in loops {
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("loop ends")
            .expect("task");
    }
    overtaken.sort_unstable();
    let median = overtaken[overtaken.len() / 2];
    // As the reentrant lock's (tests/it/handoff.rs): a plain release every 5 local
    // acquisitions; one more cycle to subscribe, and a rare lost race.
    assert!(
        median <= 10,
        "median {median} local acquisitions: {overtaken:?}"
    );
}

/// The messages on `redisson_rwlock:{name}` that `action` publishes, in order, as a raw
/// subscriber sees them within 300 ms.
async fn messages_of<F: std::future::Future<Output = ()>>(
    server: &RedisServer,
    name: &str,
    action: F,
) -> Vec<String> {
    let subscriber = raw_client(&server.url()).await;
    let mut received = subscriber.message_rx();
    let channel = format!("redisson_rwlock:{{{name}}}");
    subscriber
        .subscribe(channel.as_str())
        .await
        .expect("SUBSCRIBE");
    action.await;
    let mut messages = Vec::new();
    while let Ok(Ok(message)) =
        tokio::time::timeout(Duration::from_millis(300), received.recv()).await
    {
        assert_eq!(&*message.channel, channel.as_str());
        messages.push(message.value.as_string().expect("a text message"));
    }
    messages
}

#[tokio::test]
async fn each_release_publishes_what_redisson_publishes() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let name = "rw:messages";
    let lock = rw(&client, name, Owner::new());

    let (read, write) = (lock.read_lock(), lock.write_lock());
    let sent = messages_of(&server, name, async {
        let outer = read.lock().await.expect("read");
        read.lock().await.expect("re-enter").detach();
        read.unlock().await.expect("partial");
        outer.unlock().await.expect("last");
        let outer = write.lock().await.expect("write");
        write
            .lock()
            .await
            .expect("re-enter")
            .unlock()
            .await
            .expect("partial");
        outer.unlock().await.expect("last");
    })
    .await;
    assert_eq!(
        sent,
        ["0", "1"],
        "only the last release of a side publishes: 0 for read, 1 for write"
    );

    let sent = messages_of(&server, name, async {
        let writing = write.lock().await.expect("write");
        let reading = read.lock().await.expect("read");
        writing.unlock().await.expect("downgrade");
        reading.unlock().await.expect("read release");
    })
    .await;
    assert_eq!(
        sent,
        ["0"],
        "the downgrade is silent; the last read release is not"
    );

    // Redisson >= 3.44: releasing a missing lock is refused, and still publishes.
    let sent = messages_of(&server, name, async {
        assert!(matches!(read.unlock().await, Err(Error::NotHeld { .. })));
        assert!(matches!(write.unlock().await, Err(Error::NotHeld { .. })));
    })
    .await;
    assert_eq!(sent, ["0", "1"]);

    let sent = messages_of(&server, name, async {
        read.lock().await.expect("read").detach();
        assert!(read.force_unlock().await.expect("force"));
        write.lock().await.expect("write").detach();
        assert!(write.force_unlock().await.expect("force"));
    })
    .await;
    assert_eq!(
        sent,
        ["0", "1"],
        "force unlocks publish their side's message"
    );
}

#[tokio::test]
async fn holds_expire_with_their_lease() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let a = connect(&server).await;
    let b = connect(&server).await;
    let name = "rw:lease";
    let read = rw(&a, name, Owner::new())
        .read_lock()
        .lock_with_lease(Duration::from_millis(300))
        .await
        .expect("read");
    let write = rw(&b, name, Owner::new())
        .write_lock()
        .try_lock_within_with_lease(Duration::from_secs(5), Duration::from_millis(300))
        .await
        .expect("try_lock_within")
        .acquired()
        .expect("the read lease ran out");
    assert!(read.is_lost());
    assert!(matches!(read.unlock().await, Err(Error::LeaseLost { .. })));
    wait_key_gone(&raw, name, Duration::from_secs(5)).await;
    assert!(write.is_lost(), "so did the write lease");
    let again = rw(&a, name, Owner::new()).read_lock().try_lock().await;
    again.expect("try").acquired().expect("free").detach();
}

#[tokio::test]
async fn force_unlock_deletes_only_its_own_side() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "rw:force";
    let lock = rw(&client, name, Owner::new());
    let read = lock.read_lock().lock().await.expect("read");
    assert!(!lock.write_lock().force_unlock().await.expect("force"));
    assert_eq!(
        exists(&raw, name).await,
        1,
        "a write force-unlock spares readers"
    );
    assert!(lock.read_lock().force_unlock().await.expect("force"));
    assert_eq!(exists(&raw, name).await, 0);
    assert!(matches!(read.unlock().await, Err(Error::LeaseLost { .. })));
    let write = lock.write_lock().lock().await.expect("write");
    assert!(!lock.read_lock().force_unlock().await.expect("force"));
    assert!(lock.write_lock().force_unlock().await.expect("force"));
    assert!(matches!(write.unlock().await, Err(Error::LeaseLost { .. })));
}

#[tokio::test]
async fn a_key_of_another_type_is_wrong_type_and_left_alone() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "rw:plain";
    raw.set::<(), _, _>(name, "hello", None, None, false)
        .await
        .expect("SET");
    let lock = client.read_write_lock(name);
    let (read, write) = (lock.read_lock(), lock.write_lock());
    let errors = [
        ("read lock", read.lock().await.err()),
        ("read try_lock", read.try_lock().await.err()),
        ("read is_locked", read.is_locked().await.err()),
        ("read hold_count", read.hold_count().await.err()),
        ("read unlock", read.unlock().await.err()),
        ("read force_unlock", read.force_unlock().await.err()),
        ("write lock", write.lock().await.err()),
        ("write try_lock", write.try_lock().await.err()),
        ("write is_locked", write.is_locked().await.err()),
        ("write unlock", write.unlock().await.err()),
    ];
    for (what, err) in errors {
        match err {
            Some(Error::WrongType { name: key }) => assert_eq!(key, name, "{what}"),
            other => panic!("{what}: expected WrongType, got {other:?}"),
        }
    }
    let value: Option<String> = raw.get(name).await.expect("GET");
    assert_eq!(value.as_deref(), Some("hello"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_in_flight_leave_no_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "rw:cancel";
    let mut completed = 0;
    for k in 0..200u64 {
        // Fresh owners, alternating sides: a dropped acquire whose script ran must be undone
        // with that side's release, or the next writer waits for it.
        let lock = rw(&client, name, Owner::new());
        let acquired = if k % 2 == 0 {
            let acquire = lock.read_lock();
            tokio::time::timeout(Duration::from_micros(k * 10), acquire.lock())
                .await
                .map(|guard| drop(guard.expect("read")))
        } else {
            let acquire = lock.write_lock();
            tokio::time::timeout(Duration::from_micros(k * 10), acquire.lock())
                .await
                .map(|guard| drop(guard.expect("write")))
        };
        completed += usize::from(acquired.is_ok());
    }
    eprintln!("{completed} of 200 acquires completed before being dropped");
    wait_key_gone(&raw, name, Duration::from_secs(3)).await;
    let keys: Vec<String> = raw
        .custom(fred::cmd!("KEYS"), vec!["*rwlock_timeout*"])
        .await
        .expect("KEYS");
    assert!(keys.is_empty(), "no timeout key left: {keys:?}");
    let other = connect(&server).await;
    let guard = rw(&other, name, Owner::new()).write_lock().try_lock().await;
    guard
        .expect("try")
        .acquired()
        .expect("free at once")
        .detach();
}

#[test]
fn the_blocking_read_write_lock_is_reentrant_per_thread() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let lock = client.read_write_lock("rw:blocking");

    let write = lock.write_lock().lock().expect("write");
    let read = lock.read_lock().lock().expect("the same thread reads too");
    assert_eq!(lock.write_lock().hold_count().expect("count"), 1);
    assert_eq!(lock.read_lock().hold_count().expect("count"), 1);
    let other = lock.clone();
    let busy = std::thread::spawn(move || other.read_lock().try_lock().expect("try").is_busy())
        .join()
        .expect("thread");
    assert!(busy, "another thread is another owner");
    write.unlock().expect("write release");
    let other = lock.clone();
    let shared = std::thread::spawn(move || {
        let attempt = other
            .read_lock()
            .try_lock_within(Duration::from_secs(1))
            .expect("try");
        match attempt {
            Attempt::Acquired(guard) => guard.unlock().is_ok(),
            Attempt::Busy => false,
        }
    })
    .join()
    .expect("thread");
    assert!(shared, "after the downgrade another thread reads");
    // The upgrade is refused rather than waited for (on a thread bound to this one's owner, so
    // that a regression fails this test instead of hanging it).
    let (owner, upgrade) = (lock.read_lock().owner(), lock.clone());
    let (sent, refused) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sent.send(upgrade.with_owner(owner).write_lock().lock().err());
    });
    let refused = refused.recv_timeout(Duration::from_secs(5));
    assert!(
        matches!(refused, Ok(Some(Error::UpgradeRefused { .. }))),
        "{refused:?}"
    );
    read.unlock().expect("read release");
    assert!(!lock.read_lock().is_locked().expect("is_locked"));
}

/// The env variable that makes this test binary a contender process of the test below.
const CHILD_URL: &str = "FERRISSON_RW_CHILD_URL";
const CROSS_PROCESS: &str = "readers_share_and_writers_exclude_across_processes";
const PROCESSES: i64 = 3;

fn micros_since_epoch() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_micros()
}

/// The contender process: first all of them read at once (each waits, holding its read lock,
/// until the others have joined), then each takes the write lock and the read lock 10 times
/// each, reporting every hold as `REPORT HOLD <side> <start µs> <end µs>`.
async fn contender(url: &str, name: &str) {
    let client = ferrisson::Client::connect(url)
        .await
        .expect("child connects");
    let raw = raw_client(url).await;
    let lock = client.read_write_lock(name);
    let guard = lock.read_lock().lock().await.expect("child reads");
    let _: i64 = raw.incr("rw:joined").await.expect("INCR");
    let all = support::redis_state::poll_until(
        Duration::from_secs(20),
        Duration::from_millis(10),
        || async { raw.get::<i64, _>("rw:joined").await.expect("GET") },
        |joined| *joined == PROCESSES,
    )
    .await;
    assert!(all.is_ok(), "every process holds the read lock at once");
    println!("REPORT SHARED");
    guard.unlock().await.expect("child releases");
    for round in 0..20 {
        let (side, start, end) = if round % 2 == 0 {
            let guard = lock.write_lock().lock().await.expect("child writes");
            let start = micros_since_epoch();
            tokio::time::sleep(Duration::from_millis(2)).await;
            let end = micros_since_epoch();
            guard.unlock().await.expect("release");
            ("W", start, end)
        } else {
            let guard = lock.read_lock().lock().await.expect("child reads");
            let start = micros_since_epoch();
            tokio::time::sleep(Duration::from_millis(2)).await;
            let end = micros_since_epoch();
            guard.unlock().await.expect("release");
            ("R", start, end)
        };
        // Both ends are taken while the hold is held: holds that exclude each other on the
        // server give intervals that cannot overlap.
        println!("REPORT HOLD {side} {start} {end}");
    }
    client.shutdown().await;
}

/// Three processes share the read lock at once, then write 10 times each between reads: no
/// write hold overlaps any other hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_writers_exclude_across_processes() {
    let name = "rw:processes";
    if let Ok(url) = std::env::var(CHILD_URL) {
        contender(&url, name).await;
        return;
    }
    let server = RedisServer::start();
    let reports = support::processes::contenders(
        &support::processes::test_name(module_path!(), CROSS_PROCESS),
        CHILD_URL,
        &server.url(),
        PROCESSES as usize,
        "REPORT ",
    )
    .await;
    let mut holds = Vec::new();
    for lines in reports {
        assert!(lines.iter().any(|line| line == "SHARED"), "{lines:?}");
        for parts in lines.iter().map(|line| line.split(' ').collect::<Vec<_>>()) {
            if let ["HOLD", side, start, end] = parts[..] {
                let start: u128 = start.parse().expect("start");
                let end: u128 = end.parse().expect("end");
                holds.push((side == "W", start, end));
            }
        }
    }
    assert_eq!(holds.len(), 60, "every contender reported its 20 holds");
    for (i, &(write_a, start_a, end_a)) in holds.iter().enumerate() {
        for &(write_b, start_b, end_b) in &holds[i + 1..] {
            let overlap = start_a < end_b && start_b < end_a;
            assert!(
                !(overlap && (write_a || write_b)),
                "a write hold overlaps another hold: {:?} {:?}",
                (write_a, start_a, end_a),
                (write_b, start_b, end_b)
            );
        }
    }
}

/// In a Redis Cluster (keys of every shape, over the masters): the per-hold timeout keys share
/// the lock's slot, so the acquire, release and renewal scripts (which reach them without
/// naming them in KEYS) run on the slot's node; a read release wakes a writer over the cluster's
/// pub/sub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_read_holds_are_renewed_and_wake_writers() {
    let cluster = support::cluster::RedisCluster::start(3, 0).await;
    let raw = cluster.raw().await;
    // Renewed every second; a renewal up to 2 s late still keeps the holds.
    let watchdog = Duration::from_secs(3);
    let mut config = ferrisson::Config::new(cluster.url());
    config.watchdog_timeout = watchdog;
    let readers = connect_with(config).await;
    let writers = connect_with(ferrisson::Config::new(cluster.url())).await;
    let names = [
        "rw:c:1",
        "rw:c:2",
        "rw:c:3",
        "rw:c:4",
        "{order}:rw",
        "user:{7}:rw",
    ];
    let owner = Owner::new();
    let mut held = Vec::new();
    for name in names {
        let lock = rw(&readers, name, owner).read_lock();
        let first = lock.lock().await.expect("read");
        let second = lock.lock().await.expect("re-enter");
        held.push((name, first, second));
    }
    // Two watchdog timeouts: without renewal the timeout keys would be gone after one.
    tokio::time::sleep(watchdog * 2).await;
    let field = read_field(&readers, owner);
    for (name, ..) in &held {
        let tag = if name.contains('{') {
            (*name).to_owned()
        } else {
            format!("{{{name}}}")
        };
        for k in 1..=2 {
            let key = format!("{tag}:{field}:rwlock_timeout:{k}");
            let ttl = pttl(&raw, &key).await;
            assert!(
                ttl > 0 && ttl <= watchdog.as_millis() as i64,
                "{key} is renewed: pttl {ttl}"
            );
        }
    }
    for (name, first, second) in held {
        let write = rw(&writers, name, Owner::new()).write_lock();
        let waiter = tokio::spawn(async move { write.lock().await });
        support::wait_parked(&writers, name, 1).await;
        assert!(!waiter.is_finished(), "{name}: the writer waits");
        second.unlock().await.expect("partial");
        first.unlock().await.expect("last");
        let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the writer is woken")
            .expect("task")
            .expect("write");
        guard.unlock().await.expect("release");
    }
}
