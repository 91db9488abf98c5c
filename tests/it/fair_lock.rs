//! The fair lock (Redisson's `RFairLock`) against a real redis-server: waiters in separate
//! processes served in arrival order, waiters that give up or are dropped leaving the queue,
//! a crashed waiter pruned at its deadline, a pruned live waiter queueing again, re-entry, the
//! unlock message sent only to the queue's head, the Redis layout Java reads, wrong-type keys,
//! dropped acquires and the blocking twin.

use crate::support;

use std::time::{Duration, SystemTime};

use ferrisson::{Error, FairGuard, FairLock, Owner};
use fred::{cmd, prelude::*};
use support::redis_state::{
    command_calls, exists, hgetall, poll_until, pttl, reset_stats, wait_key_gone, POLL_INTERVAL,
};
use support::{connect, raw_client, timed_config, RedisServer};
use tokio::task::JoinHandle;
use tokio::time::timeout;

pub(crate) fn queue_key(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

pub(crate) fn timeout_key(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

pub(crate) fn field_of(client: &ferrisson::Client, owner: Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as f64
}

pub(crate) async fn queue(raw: &fred::clients::Client, name: &str) -> Vec<String> {
    raw.lrange(queue_key(name), 0, -1).await.expect("LRANGE")
}

async fn score(raw: &fred::clients::Client, name: &str, field: &str) -> Option<f64> {
    raw.zscore(timeout_key(name), field).await.expect("ZSCORE")
}

async fn timeout_members(raw: &fred::clients::Client, name: &str) -> i64 {
    raw.zcard(timeout_key(name)).await.expect("ZCARD")
}

/// Waits until the queue is exactly `expected`.
async fn wait_queue(raw: &fred::clients::Client, name: &str, expected: &[&str]) {
    let reached = poll_until(
        Duration::from_secs(10),
        POLL_INTERVAL,
        || queue(raw, name),
        |found| {
            found
                .iter()
                .map(String::as_str)
                .eq(expected.iter().copied())
        },
    )
    .await;
    if let Err(found) = reached {
        panic!("queue of {name} is {found:?}, expected {expected:?}");
    }
}

/// A server, a raw client for assertions and a ferrisson client.
pub(crate) async fn start() -> (RedisServer, fred::clients::Client, ferrisson::Client) {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    (server, raw, client)
}

/// Takes `name` for a fresh owner of `client`.
async fn hold(client: &ferrisson::Client, name: &str) -> FairGuard {
    let lock = client.fair_lock(name).with_owner(Owner::new());
    lock.lock().await.expect("the holder locks")
}

/// `lock()` of `name` by `owner` in a task of its own, once its field stands last in the queue.
async fn lock_queued(
    raw: &fred::clients::Client,
    client: &ferrisson::Client,
    name: &str,
    owner: Owner,
) -> JoinHandle<ferrisson::Result<FairGuard>> {
    let task = spawn_lock(&client.fair_lock(name).with_owner(owner));
    let field = field_of(client, owner);
    let reached = poll_until(
        Duration::from_secs(10),
        POLL_INTERVAL,
        || queue(raw, name),
        |found| found.last() == Some(&field),
    )
    .await;
    if let Err(found) = reached {
        panic!("{field} not queued last in {name}: {found:?}");
    }
    // Queued is not yet parked: the retry after subscribing could queue it again.
    support::wait_parked_on(client, name, &format!(":{field}")).await;
    task
}

/// `lock.lock()` in a task of its own (the lock's owner is explicit, so the task may be anyone).
fn spawn_lock(lock: &FairLock) -> JoinHandle<ferrisson::Result<FairGuard>> {
    let lock = lock.clone();
    tokio::spawn(async move { lock.lock().await })
}

/// The guard `task` acquired within `within` (any lock's).
pub(crate) async fn joined<G>(
    task: JoinHandle<ferrisson::Result<G>>,
    within: Duration,
    what: &str,
) -> G {
    timeout(within, task)
        .await
        .unwrap_or_else(|_| panic!("{what}: not acquired within {within:?}"))
        .expect("task")
        .unwrap_or_else(|err| panic!("{what}: {err}"))
}

#[tokio::test]
async fn the_owner_re_enters_and_the_last_release_frees_the_lock() {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    let name = "fair:reentry";
    let lock = a.fair_lock(name).with_owner(Owner::new());

    let outer = lock.lock().await.expect("lock");
    let inner = lock
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("re-enters");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 2);
    assert!(lock.is_held_by_current_owner().await.expect("held"));
    let other = b.fair_lock(name);
    assert!(
        other.try_lock().await.expect("try").is_busy(),
        "another owner is refused"
    );
    let raw = raw_client(&server.url()).await;
    assert!(
        queue(&raw, name).await.is_empty(),
        "a lone try_lock never queues"
    );

    inner.unlock().await.expect("partial release");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    assert!(
        other.try_lock().await.expect("try").is_busy(),
        "still held once"
    );
    outer.unlock().await.expect("last release");
    assert!(!lock.is_locked().await.expect("is_locked"));
    let taken = other
        .try_lock()
        .await
        .expect("try")
        .acquired()
        .expect("free now");
    taken.unlock().await.expect("release");

    // Owner-based release of a detached hold; then nothing is held.
    lock.lock().await.expect("lock").detach();
    lock.unlock().await.expect("unlock by owner");
    assert!(matches!(lock.unlock().await, Err(Error::NotHeld { .. })));
    assert!(matches!(
        a.fair_lock(name).with_wait_timeout(Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.fair_lock("").lock().await,
        Err(Error::InvalidArgument(_))
    ));
}

/// Without a lease the watchdog renews the hold as the reentrant lock's (same hash, same
/// renewal), past two watchdog timeouts, until the release.
#[tokio::test]
async fn the_watchdog_renews_a_fair_hold_until_it_is_released() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // Renewals every second; one up to 2 s late still keeps the hold.
    let watchdog = Duration::from_secs(3);
    let config = timed_config(server.url(), watchdog, Duration::from_secs(2));
    let client = ferrisson::Client::new(config).await.expect("connect");
    let name = "fair:watchdog";
    let guard = client.fair_lock(name).lock().await.expect("lock");
    tokio::time::sleep(watchdog * 2 + Duration::from_millis(500)).await;
    let left = pttl(&raw, name).await;
    assert!(
        left > 0 && left <= watchdog.as_millis() as i64,
        "renewed to the 3 s watchdog timeout: {left}"
    );
    assert!(!guard.is_lost());
    assert!(
        client.lock(name).is_locked().await.expect("is_locked"),
        "the reentrant lock sees it"
    );
    guard.unlock().await.expect("release");
    assert_eq!(exists(&raw, name).await, 0);
}

#[tokio::test]
async fn the_redis_layout_is_redissons() {
    let (_server, raw, client) = start().await;
    let name = "fair:layout";
    let (h, w1, w2) = (Owner::new(), Owner::new(), Owner::new());
    let holder = client.fair_lock(name).with_owner(h);
    let guard = holder.lock().await.expect("lock");

    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.len(), 1);
    assert_eq!(
        fields.get(&field_of(&client, h)).map(String::as_str),
        Some("1")
    );
    let lease = pttl(&raw, name).await;
    assert!(
        lease > 25_000 && lease <= 30_000,
        "watchdog lease, got {lease}"
    );

    // W1 waits with the default wait time (300 s); W2 with try_lock_within(10 s).
    let before = now_ms();
    let first = lock_queued(&raw, &client, name, w1).await;
    let second = {
        let lock = client.fair_lock(name).with_owner(w2);
        tokio::spawn(async move { lock.try_lock_within(Duration::from_secs(10)).await })
    };
    wait_queue(
        &raw,
        name,
        &[&field_of(&client, w1), &field_of(&client, w2)],
    )
    .await;
    let after = now_ms();

    let type_of = |key: String| {
        let raw = raw.clone();
        async move {
            raw.custom::<String, _>(cmd!("TYPE"), vec![key])
                .await
                .expect("TYPE")
        }
    };
    assert_eq!(type_of(name.to_owned()).await, "hash");
    assert_eq!(type_of(queue_key(name)).await, "list");
    assert_eq!(type_of(timeout_key(name)).await, "zset");
    assert_eq!(
        pttl(&raw, &queue_key(name)).await,
        -1,
        "no TTL on the queue"
    );
    assert_eq!(
        pttl(&raw, &timeout_key(name)).await,
        -1,
        "no TTL on the timeout set"
    );
    // Scores are deadlines in epoch ms: the lock's TTL + W after the waiter queued, and the
    // next waiter's is the first one's + its own W.
    let s1 = score(&raw, name, &field_of(&client, w1))
        .await
        .expect("W1 scored");
    assert!(
        s1 >= before + 300_000.0 && s1 <= after + 330_000.0,
        "W1's deadline {s1} not in [{before} + 300 s, {after} + 330 s]"
    );
    let s2 = score(&raw, name, &field_of(&client, w2))
        .await
        .expect("W2 scored");
    assert!(
        (s2 - (s1 + 10_000.0)).abs() < 2_000.0,
        "W2's deadline {s2} is W1's {s1} + its 10 s"
    );

    guard.unlock().await.expect("release");
    let first = joined(first, Duration::from_secs(5), "W1").await;
    // W1 took its place at the head: everyone behind moves up by W1's wait time.
    assert_eq!(queue(&raw, name).await, [field_of(&client, w2)]);
    let moved = score(&raw, name, &field_of(&client, w2))
        .await
        .expect("W2 still scored");
    assert!(
        (moved - (s2 - 300_000.0)).abs() < 1.0,
        "W2's deadline {moved} = {s2} - 300 s"
    );
    first.unlock().await.expect("release");
    let second = timeout(Duration::from_secs(5), second)
        .await
        .expect("W2 acquires in time")
        .expect("task")
        .expect("try_lock_within")
        .acquired()
        .expect("W2 acquired");
    assert_eq!(
        exists(&raw, &queue_key(name)).await,
        0,
        "the queue is gone once empty"
    );
    assert_eq!(
        exists(&raw, &timeout_key(name)).await,
        0,
        "so is the timeout set"
    );
    second.unlock().await.expect("release");
    assert_eq!(exists(&raw, name).await, 0);

    // delete() removes all three keys.
    let _held = holder.lock().await.expect("lock");
    let waiter = lock_queued(&raw, &client, name, w1).await;
    assert!(holder.delete().await.expect("delete"));
    for key in [name.to_owned(), queue_key(name), timeout_key(name)] {
        assert_eq!(exists(&raw, &key).await, 0, "{key} deleted");
    }
    waiter.abort();
}

/// Collects the messages received within `within`, as (channel, payload).
async fn messages_within(
    rx: &mut tokio::sync::broadcast::Receiver<fred::types::Message>,
    within: Duration,
) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    let end = tokio::time::Instant::now() + within;
    while let Ok(Ok(message)) = tokio::time::timeout_at(end, rx.recv()).await {
        let payload: String = message.value.convert().expect("text payload");
        seen.push((message.channel.to_string(), payload));
    }
    seen
}

#[tokio::test]
async fn a_release_tells_only_the_queue_head_on_its_own_channel() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let subscriber = raw_client(&server.url()).await;
    let client = connect(&server).await;
    // The waiters are another client's: a waiter of the releasing client at the queue's head
    // is handed the lock in the release's script, and nobody is told.
    let waiters = connect(&server).await;
    let name = "fair:publish";
    let mut rx = subscriber.message_rx();
    subscriber
        .psubscribe(format!("redisson_lock__channel:{{{name}}}*"))
        .await
        .expect("PSUBSCRIBE");
    let (w1, w2) = (Owner::new(), Owner::new());
    let channel = |owner| {
        format!(
            "redisson_lock__channel:{{{name}}}:{}",
            field_of(&waiters, owner)
        )
    };

    let guard = hold(&client, name).await;
    let first = lock_queued(&raw, &waiters, name, w1).await;
    let second = lock_queued(&raw, &waiters, name, w2).await;
    assert!(messages_within(&mut rx, Duration::from_millis(100))
        .await
        .is_empty());

    guard.unlock().await.expect("release");
    let first = joined(first, Duration::from_secs(5), "W1").await;
    assert_eq!(
        messages_within(&mut rx, Duration::from_millis(300)).await,
        [(channel(w1), "0".to_owned())],
        "only the head's channel is told, once"
    );
    // A partial release tells nobody; the last one hands the lock to the new head, W2, a
    // waiter of the same client: nobody is told either.
    let again = first.lock().lock().await.expect("re-enter");
    again.unlock().await.expect("partial release");
    assert!(messages_within(&mut rx, Duration::from_millis(200))
        .await
        .is_empty());
    first.unlock().await.expect("release");
    let second = joined(second, Duration::from_secs(5), "W2").await;
    assert!(messages_within(&mut rx, Duration::from_millis(300))
        .await
        .is_empty());

    // force_unlock tells the head as well.
    let w3 = Owner::new();
    let third = lock_queued(&raw, &waiters, name, w3).await;
    assert!(client
        .fair_lock(name)
        .force_unlock()
        .await
        .expect("force_unlock"));
    let third = joined(third, Duration::from_secs(5), "W3").await;
    let told = messages_within(&mut rx, Duration::from_millis(300)).await;
    assert_eq!(told, [(channel(w3), "0".to_owned())]);
    assert!(matches!(
        second.unlock().await,
        Err(Error::LeaseLost { .. })
    ));
    third.unlock().await.expect("release");
}

#[tokio::test]
async fn a_waiter_whose_wait_runs_out_leaves_the_queue_and_does_not_block_the_next() {
    let (_server, raw, client) = start().await;
    let name = "fair:give-up";
    let (w1, w2) = (Owner::new(), Owner::new());
    let guard = hold(&client, name).await;

    let impatient = {
        let lock = client.fair_lock(name).with_owner(w1);
        tokio::spawn(async move { lock.try_lock_within(Duration::from_millis(700)).await })
    };
    wait_queue(&raw, name, &[&field_of(&client, w1)]).await;
    let patient = lock_queued(&raw, &client, name, w2).await;
    let queued = score(&raw, name, &field_of(&client, w2))
        .await
        .expect("W2 scored");

    let attempt = timeout(Duration::from_secs(5), impatient)
        .await
        .expect("try_lock_within returns")
        .expect("task")
        .expect("try_lock_within");
    assert!(attempt.is_busy());
    // Gone from both keys by the time try_lock_within returned; W2 moved up by W1's 700 ms.
    assert_eq!(queue(&raw, name).await, [field_of(&client, w2)]);
    assert_eq!(score(&raw, name, &field_of(&client, w1)).await, None);
    let moved = score(&raw, name, &field_of(&client, w2))
        .await
        .expect("W2 scored");
    assert!(
        (moved - (queued - 700.0)).abs() < 1.0,
        "{moved} = {queued} - 700"
    );

    guard.unlock().await.expect("release");
    let taken = joined(patient, Duration::from_secs(5), "W2").await;
    assert_eq!(timeout_members(&raw, name).await, 0);
    taken.unlock().await.expect("release");
}

#[tokio::test]
async fn a_dropped_waiter_leaves_the_queue_and_does_not_block_the_next() {
    let (_server, raw, client) = start().await;
    let name = "fair:dropped";
    let (w1, w2) = (Owner::new(), Owner::new());
    let guard = hold(&client, name).await;

    let dropped = lock_queued(&raw, &client, name, w1).await;
    let patient = lock_queued(&raw, &client, name, w2).await;

    dropped.abort();
    assert!(dropped.await.expect_err("aborted").is_cancelled());
    // The janitor runs the give-up in the background.
    wait_queue(&raw, name, &[&field_of(&client, w2)]).await;
    assert_eq!(score(&raw, name, &field_of(&client, w1)).await, None);

    guard.unlock().await.expect("release");
    let taken = joined(patient, Duration::from_secs(5), "W2").await;
    taken.unlock().await.expect("release");
    assert_eq!(exists(&raw, &timeout_key(name)).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_in_flight_leave_no_hold_and_no_queue_entry() {
    let (server, raw, client) = start().await;
    let name = "fair:cancel";
    let mut completed = 0;
    for k in 0..200u64 {
        let lock = client.fair_lock(name).with_owner(Owner::new());
        let acquire = timeout(Duration::from_micros(k * 10), lock.lock());
        if let Ok(guard) = acquire.await {
            completed += 1;
            drop(guard.expect("acquire"));
        }
    }
    eprintln!("{completed} of 200 acquires completed before being dropped");
    wait_key_gone(&raw, name, Duration::from_secs(5)).await;
    wait_key_gone(&raw, &queue_key(name), Duration::from_secs(5)).await;
    wait_key_gone(&raw, &timeout_key(name), Duration::from_secs(5)).await;
    let other = connect(&server).await;
    let guard = other
        .fair_lock(name)
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("another client gets the lock at once");
    guard.unlock().await.expect("release");
}

#[tokio::test]
async fn a_pruned_live_waiter_queues_again_on_its_next_attempt_and_gets_the_lock() {
    let (_server, raw, client) = start().await;
    let name = "fair:requeue";
    let w1 = Owner::new();
    // A short fixed lease: the waiter's next attempt comes when it would run out.
    let holder = client.fair_lock(name).with_owner(Owner::new());
    let guard = holder
        .lock_with_lease(Duration::from_secs(2))
        .await
        .expect("lock");
    let waiter = lock_queued(&raw, &client, name, w1).await;

    // The waiter's deadline passes (as if it had waited past its W): the next script prunes it.
    let _: i64 = raw
        .zadd(
            timeout_key(name),
            None,
            None,
            false,
            false,
            (1.0, field_of(&client, w1)),
        )
        .await
        .expect("ZADD");
    // A re-entry prunes it, and re-arms the lease long enough for the rest of the test.
    let reentry = holder
        .lock_with_lease(Duration::from_secs(60))
        .await
        .expect("re-enter");
    assert!(queue(&raw, name).await.is_empty(), "pruned as stale");
    assert_eq!(timeout_members(&raw, name).await, 0);

    // Its next attempt (when the lease it saw would end) queues it again, at a fresh deadline.
    wait_queue(&raw, name, &[&field_of(&client, w1)]).await;
    let deadline = score(&raw, name, &field_of(&client, w1))
        .await
        .expect("scored again");
    assert!(
        deadline > now_ms() + 290_000.0,
        "a fresh deadline: {deadline}"
    );
    reentry.unlock().await.expect("partial release");
    guard.unlock().await.expect("last release tells the head");
    let taken = joined(waiter, Duration::from_secs(5), "W1").await;
    taken.unlock().await.expect("release");
}

/// The lock is free but a silent waiter (a crashed one, say) is at the head until its deadline:
/// the waiter behind re-polls with a growing pause rather than at once (as Redisson does), and
/// gets the lock once the head is pruned.
#[tokio::test]
async fn a_waiter_behind_a_silent_head_polls_sparingly_until_the_head_is_pruned() {
    let (_server, raw, client) = start().await;
    let name = "fair:silent-head";
    let holder = client.fair_lock(name).with_owner(Owner::new());
    // Long enough that the waiter queues and the silent head is put before it, all before the
    // lease ends (if it ended first, the waiter would take the lock at once).
    let lease = Duration::from_secs(2);
    let guard = holder.lock_with_lease(lease).await.expect("lock");
    let waiter = lock_queued(&raw, &client, name, Owner::new()).await;
    // A silent head (a waiter of another client that stopped) with a deadline 3 s past the
    // lease's end.
    let silent = "00000000-0000-0000-0000-000000000000:1";
    let deadline = now_ms() + (lease + Duration::from_secs(3)).as_millis() as f64;
    let _: i64 = raw
        .zadd(
            timeout_key(name),
            None,
            None,
            false,
            false,
            (deadline, silent),
        )
        .await
        .expect("ZADD");
    let _: i64 = raw.lpush(queue_key(name), silent).await.expect("LPUSH");
    reset_stats(&raw).await;
    guard.detach(); // the lease runs out: nobody is told

    let taken = joined(waiter, Duration::from_secs(10), "the waiter behind").await;
    let attempts = command_calls(&raw, "evalsha").await;
    // Parked on the TTL until the lease ends, then polling about 3 s (re-polling at once
    // would take hundreds).
    assert!(
        attempts < 60,
        "{attempts} attempts while waiting about 3 s past the lease for the silent head's \
         deadline"
    );
    assert!(
        queue(&raw, name).await.is_empty(),
        "the silent head was pruned"
    );
    taken.unlock().await.expect("release");
}

/// A wait that runs out while its attempt is stalled on the server (`CLIENT PAUSE WRITE`)
/// returns at its bound, and leaves the queue only after that attempt ran: the give-up is not
/// even sent before (it would run first on another connection and the attempt would queue the
/// waiter again for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_during_a_stalled_attempt_leaves_the_queue_after_it() {
    let (server, raw, holder) = start().await;
    let name = "fair:stalled";
    let _guard = holder
        .fair_lock(name)
        .lock_with_lease(Duration::from_secs(60))
        .await
        .expect("lock");
    let config = ferrisson::Config::builder(server.url())
        .pool_size(4)
        .build()
        .expect("config");
    let client = ferrisson::Client::new(config).await.expect("connect");
    let _: Value = raw
        .custom(cmd!("CLIENT"), vec!["PAUSE", "3000", "WRITE"])
        .await
        .expect("CLIENT PAUSE");
    let lock = client.fair_lock(name);
    let waited = lock.try_lock_within(Duration::from_millis(300));
    let outcome = timeout(Duration::from_secs(2), waited)
        .await
        .expect("try_lock_within keeps its bound while the server stalls");
    assert!(matches!(outcome, Err(Error::Timeout(_))), "{outcome:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let info: String = raw
        .info(Some(fred::types::InfoKind::Clients))
        .await
        .expect("INFO clients");
    assert!(
        info.lines().any(|line| line.trim() == "blocked_clients:1"),
        "only the stalled attempt waits on the server, not yet the give-up:\n{info}"
    );
    // Once the pause ends the attempt queues the waiter, then the give-up removes it.
    let resumed = poll_until(
        Duration::from_secs(10),
        POLL_INTERVAL,
        || raw.info::<String>(Some(fred::types::InfoKind::Clients)),
        |info| {
            info.as_ref()
                .is_ok_and(|info| info.contains("blocked_clients:0"))
        },
    )
    .await;
    assert!(resumed.is_ok(), "the pause ends: {resumed:?}");
    let emptied = poll_until(
        Duration::from_secs(10),
        POLL_INTERVAL,
        || queue(&raw, name),
        Vec::is_empty,
    )
    .await;
    assert!(emptied.is_ok(), "still queued: {emptied:?}");
    assert_eq!(timeout_members(&raw, name).await, 0);
}

#[tokio::test]
async fn keys_of_another_type_are_wrong_type_naming_the_key() {
    let (_server, raw, client) = start().await;
    for (name, bad) in [
        ("fair:wt-name", "fair:wt-name".to_owned()),
        ("fair:wt-queue", queue_key("fair:wt-queue")),
        ("fair:wt-timeouts", timeout_key("fair:wt-timeouts")),
    ] {
        let _: () = raw.set(&bad, "text", None, None, false).await.expect("SET");
        let lock = client.fair_lock(name);
        for result in [
            lock.try_lock().await.map(drop),
            lock.try_lock_within(Duration::from_millis(200))
                .await
                .map(drop),
            lock.lock().await.map(drop),
        ] {
            match result {
                Err(Error::WrongType { name: key }) => assert_eq!(key, bad),
                other => panic!("{bad} of another type: {other:?}"),
            }
        }
        let value: String = raw.get(&bad).await.expect("GET");
        assert_eq!(value, "text", "{bad} untouched");
    }
    let lock = client.fair_lock("fair:wt-name");
    assert!(matches!(
        lock.force_unlock().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(lock.unlock().await, Err(Error::WrongType { .. })));
    assert_eq!(
        exists(&raw, "fair:wt-name").await,
        1,
        "force_unlock leaves it"
    );
}

/// Env variables that make this test binary a waiter process of the tests below.
const CHILD_URL: &str = "FERRISSON_FAIR_CHILD_URL";
const CHILD_INDEX: &str = "FERRISSON_FAIR_CHILD_INDEX";
const ORDER_TEST: &str = "waiters_in_separate_processes_acquire_in_arrival_order";
const CRASH_TEST: &str = "a_crashed_waiter_is_pruned_after_its_deadline_and_the_next_gets_the_lock";

/// Runs this binary's test `test` (a function of this module) as waiter number `index`.
fn spawn_child(test: &str, url: &str, index: usize) -> std::process::Child {
    let test = support::processes::test_name(module_path!(), test);
    std::process::Command::new(std::env::current_exe().expect("test binary path"))
        .args([&*test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, url)
        .env(CHILD_INDEX, index.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn a waiter process")
}

/// Waits until the queue holds `count` fields (a new waiter appended), and returns the last.
async fn wait_queued(raw: &fred::clients::Client, name: &str, count: usize) -> String {
    let found = poll_until(
        Duration::from_secs(20),
        POLL_INTERVAL,
        || queue(raw, name),
        |queue| queue.len() == count,
    )
    .await
    .unwrap_or_else(|queue| panic!("expected {count} queued, found {queue:?}"));
    found[count - 1].clone()
}

/// Five processes queue one after another while the lock is held (each starts once the one
/// before shows in the queue); once it is free they get it in exactly that order. Each appends
/// its index to a list while it holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_in_separate_processes_acquire_in_arrival_order() {
    let name = "fair:processes";
    if let Ok(url) = std::env::var(CHILD_URL) {
        let index = std::env::var(CHILD_INDEX).expect("index");
        let client = ferrisson::Client::connect(&url)
            .await
            .expect("child connects");
        let raw = raw_client(&url).await;
        let guard = client.fair_lock(name).lock().await.expect("child locks");
        let _: i64 = raw.rpush("fair:order", index).await.expect("RPUSH");
        tokio::time::sleep(Duration::from_millis(20)).await;
        guard.unlock().await.expect("child unlocks");
        client.shutdown().await;
        return;
    }
    let (server, raw, client) = start().await;
    let guard = client
        .fair_lock(name)
        .lock()
        .await
        .expect("the parent holds");
    let mut children = Vec::new();
    for index in 0..5 {
        children.push(spawn_child(ORDER_TEST, &server.url(), index));
        wait_queued(&raw, name, index + 1).await;
    }
    guard.unlock().await.expect("release");
    for child in children {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("the waiter's output");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "waiter failed: {}\n{stdout}\n{stderr}",
            output.status,
        );
        support::processes::assert_ran_one_test(ORDER_TEST, &stdout, &stderr);
    }
    let order: Vec<String> = raw.lrange("fair:order", 0, -1).await.expect("LRANGE");
    assert_eq!(
        order,
        ["0", "1", "2", "3", "4"],
        "acquired in arrival order"
    );
    assert_eq!(exists(&raw, &queue_key(name)).await, 0);
    assert_eq!(exists(&raw, &timeout_key(name)).await, 0);
}

/// A waiter process is killed while queued (its wait time 1 s); the waiter behind it gets the
/// lock once the dead one's deadline has passed and it was pruned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_waiter_is_pruned_after_its_deadline_and_the_next_gets_the_lock() {
    let name = "fair:crash";
    if let Ok(url) = std::env::var(CHILD_URL) {
        let client = ferrisson::Client::connect(&url)
            .await
            .expect("child connects");
        let lock = client
            .fair_lock(name)
            .with_wait_timeout(Duration::from_secs(1))
            .expect("W");
        let _never = lock.lock().await;
        unreachable!("the parent kills this waiter while the lock is held");
    }
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // A short watchdog lease, so that the waiter behind learns of the lock's TTL soon, with
    // 2 s of slack past its renewals while the child starts and is killed.
    let config = timed_config(server.url(), Duration::from_secs(3), Duration::from_secs(2));
    let client = ferrisson::Client::new(config).await.expect("connect");
    let guard = client
        .fair_lock(name)
        .lock()
        .await
        .expect("the parent holds");
    let mut crashed = spawn_child(CRASH_TEST, &server.url(), 0);
    let dead = wait_queued(&raw, name, 1).await;
    let next = Owner::new();
    let waiter = lock_queued(&raw, &client, name, next).await;
    crashed.kill().expect("kill the waiter");
    let _ = crashed.wait();

    // The release tells the dead head; the next one gets the lock after the head's deadline.
    guard.unlock().await.expect("release");
    let taken = joined(
        waiter,
        Duration::from_secs(15),
        "the waiter behind the dead one",
    )
    .await;
    assert!(
        queue(&raw, name).await.is_empty(),
        "the dead waiter was pruned"
    );
    assert_eq!(score(&raw, name, &dead).await, None);
    taken.unlock().await.expect("release");
}

#[test]
fn the_blocking_fair_lock_is_reentrant_per_thread_and_serves_waiters_in_order() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let name = "fair:blocking";
    let lock = client.fair_lock(name);

    let first = lock.lock().expect("lock");
    let again = lock.lock().expect("same thread re-enters");
    assert_eq!(lock.hold_count().expect("hold_count"), 2);
    let other = lock.clone();
    let busy = std::thread::spawn(move || other.try_lock().expect("try_lock").is_busy())
        .join()
        .expect("thread");
    assert!(busy, "another thread is another owner");

    let (sender, order) = std::sync::mpsc::channel();
    let waiters: Vec<_> = (0..2)
        .map(|index| {
            let (lock, sender) = (lock.clone(), sender.clone());
            let waiter = std::thread::spawn(move || {
                let guard = lock
                    .try_lock_within(Duration::from_secs(10))
                    .expect("try_lock_within")
                    .acquired()
                    .expect("acquired in turn");
                sender.send(index).expect("send");
                guard.unlock().expect("unlock");
            });
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            runtime.block_on(async {
                let raw = raw_client(&server.url()).await;
                wait_queued(&raw, name, index + 1).await;
            });
            waiter
        })
        .collect();
    again.unlock().expect("partial release");
    first.unlock().expect("release");
    for waiter in waiters {
        waiter.join().expect("waiter");
    }
    let order: Vec<usize> = order.try_iter().collect();
    assert_eq!(order, [0, 1]);
    assert!(!lock.is_locked().expect("is_locked"));
}

/// A release hands the lock to a waiter of the same client at the head of the queue in its own
/// script, as that waiter's acquire would have taken it: out of the queue and the timeout set,
/// everyone behind moved up by the heir's wait time, the heir's field with a count of 1 and its
/// lease. One script run, no message, and no attempt of the heir's.
#[tokio::test]
async fn a_release_hands_the_lock_to_a_local_waiter_at_the_queue_head_in_its_script() {
    let (_server, raw, client) = start().await;
    let name = "fair:handoff";
    hold(&client, name).await.unlock().await.expect("warm-up"); // loads the release script
    let guard = hold(&client, name).await;
    let (w1, w2) = (Owner::new(), Owner::new());
    let first = lock_queued(&raw, &client, name, w1).await;
    let second = lock_queued(&raw, &client, name, w2).await;
    let (f1, f2) = (field_of(&client, w1), field_of(&client, w2));
    let behind = score(&raw, name, &f2).await.expect("W2 has a deadline");

    reset_stats(&raw).await;
    guard.unlock().await.expect("release");
    let first = joined(first, Duration::from_secs(5), "W1").await;
    assert_eq!(support::redis_state::script_runs(&raw).await, 1);
    assert_eq!(command_calls(&raw, "publish").await, 0, "nobody is told");
    // Its attempt that queued it, and the retry after subscribing; none after the release.
    assert_eq!(first.acquisition().attempts, 2);
    assert_eq!(
        hgetall(&raw, name).await,
        [(f1.clone(), "1".to_owned())].into()
    );
    assert!(pttl(&raw, name).await > 0);
    assert_eq!(queue(&raw, name).await, std::slice::from_ref(&f2));
    assert_eq!(score(&raw, name, &f1).await, None);
    let moved_up = behind - score(&raw, name, &f2).await.expect("W2 still waits");
    assert_eq!(moved_up, 300_000.0, "W2 moved up by W1's wait time");

    first.unlock().await.expect("release");
    let second = joined(second, Duration::from_secs(5), "W2").await;
    assert_eq!(hgetall(&raw, name).await, [(f2, "1".to_owned())].into());
    // W2 came while W1 was in line: it subscribed before its one attempt, which queued it.
    assert_eq!(second.acquisition().attempts, 1);
    second.unlock().await.expect("release");
    assert_eq!(timeout_members(&raw, name).await, 0);
    assert_eq!(exists(&raw, &queue_key(name)).await, 0);
}

/// A local waiter behind another client's waiter at the queue's head is not handed the lock:
/// the release tells the head, which takes the lock; the local waiter gets it after.
#[tokio::test]
async fn a_local_waiter_behind_another_clients_head_waits_its_turn() {
    let (server, raw, client) = start().await;
    let other = connect(&server).await;
    let name = "fair:not-the-head";
    let guard = hold(&client, name).await;
    let (head, local) = (Owner::new(), Owner::new());
    let head_task = lock_queued(&raw, &other, name, head).await;
    let local_task = lock_queued(&raw, &client, name, local).await;

    guard.unlock().await.expect("release");
    let head_guard = joined(head_task, Duration::from_secs(5), "the head").await;
    assert_eq!(
        hgetall(&raw, name).await,
        [(field_of(&other, head), "1".to_owned())].into()
    );
    assert_eq!(queue(&raw, name).await, [field_of(&client, local)]);
    assert!(
        !local_task.is_finished(),
        "the local waiter jumped the queue"
    );
    head_guard.unlock().await.expect("release");
    let local_guard = joined(local_task, Duration::from_secs(5), "the local waiter").await;
    local_guard.unlock().await.expect("release");
}
