//! Hostile and bad input (issue 13, section 3): property tests over lock names and durations,
//! and keys that someone else wrote (wrong type, a hold count overwritten with garbage, a lock
//! without expiry, junk on a lock's channel). Each gets correct behaviour or a clear typed
//! error; never a panic, never a leaked or lost lock.
//!
//! The property tests run their cases on one runtime against one server (a server per case
//! would be slow) and check after every case that the case left no key behind.

use crate::support;

use std::time::{Duration, Instant};

use ferrisson::{Error, Owner};
use fred::prelude::*;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use support::redis_state::{channel_of, exists, hgetall, pttl, reset_stats, script_runs};
use support::{connect, connect_with, raw_client, timed_config, RedisServer};
use tokio::time::{sleep, timeout};

/// One runtime, one server, one client and a raw client, shared by the cases of a property.
struct Bench {
    runtime: tokio::runtime::Runtime,
    _server: RedisServer,
    client: ferrisson::Client,
    raw: fred::clients::Client,
}

impl Bench {
    fn new() -> Bench {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let server = RedisServer::start();
        let (client, raw) =
            runtime.block_on(async { (connect(&server).await, raw_client(&server.url()).await) });
        Bench {
            runtime,
            _server: server,
            client,
            raw,
        }
    }

    /// Runs `cases` cases of `strategy` through `case`, then checks that nothing is left.
    fn check<S, F, Fut>(&self, cases: u32, strategy: S, case: F)
    where
        S: Strategy,
        S::Value: Clone + std::fmt::Debug,
        F: Fn(S::Value) -> Fut,
        Fut: std::future::Future<Output = Result<(), TestCaseError>>,
    {
        let mut runner = TestRunner::new(ProptestConfig {
            cases,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let outcome = runner.run(&strategy, |value| {
            self.runtime.block_on(async {
                let outcome = case(value).await;
                let keys: i64 = self.raw.dbsize().await.expect("DBSIZE");
                // Start every case (shrinking included) from an empty server.
                let _: () = self.raw.flushall(false).await.expect("FLUSHALL");
                outcome?;
                prop_assert_eq!(keys, 0, "a key was left behind");
                Ok(())
            })
        });
        if let Err(err) = outcome {
            panic!("{err}");
        }
    }
}

/// Lock names as users (and attackers) write them: empty, plain, any Unicode (control
/// characters and NUL included), braces anywhere, and long (up to 1 MiB).
fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z:0-9]{1,20}",
        any::<String>(),
        "[{}a-z]{1,12}",
        "\\PC{1,8}\\{[^{}]{0,8}\\}\\PC{0,8}",
        prop::collection::vec(any::<char>(), 1..64).prop_map(|chars| chars.into_iter().collect()),
        (1usize..=1 << 20).prop_map(|len| "x".repeat(len)),
    ]
}

#[test]
fn any_name_locks_and_releases_or_is_rejected_as_empty() {
    let bench = Bench::new();
    bench.check(64, names(), |name| {
        let (client, raw) = (&bench.client, &bench.raw);
        async move {
            let lock = client.lock(name.clone()).with_owner(Owner::new());
            if name.is_empty() {
                let err = lock.lock().await.expect_err("an empty name is rejected");
                prop_assert!(matches!(err, Error::InvalidArgument(_)), "{:?}", err);
                prop_assert!(matches!(
                    lock.try_lock().await,
                    Err(Error::InvalidArgument(_))
                ));
                return Ok(());
            }
            let guard = lock.lock().await.expect("lock");
            // The key is the name itself, byte for byte, with this owner's hold on it.
            let fields = hgetall(raw, &name).await;
            prop_assert_eq!(
                fields.get(guard.holder_field()).map(String::as_str),
                Some("1")
            );
            let again = lock.lock().await.expect("re-enter");
            prop_assert_eq!(lock.hold_count().await.expect("hold count"), 2);
            again.unlock().await.expect("partial release");
            prop_assert_eq!(lock.hold_count().await.expect("hold count"), 1);
            guard.unlock().await.expect("full release");
            prop_assert_eq!(exists(raw, &name).await, 0);
            Ok(())
        }
    });
}

/// Every name's unlock message goes out on the channel the protocol reference derives, so a
/// waiter on the same name anywhere (Redisson included) is woken by it.
#[test]
fn any_name_wakes_its_waiter_on_its_own_channel() {
    let bench = Bench::new();
    let short_names = names().prop_filter("not empty, not huge", |name| {
        !name.is_empty() && name.len() < 4096
    });
    bench.check(24, short_names, |name| {
        let client = &bench.client;
        async move {
            let lease = Duration::from_secs(20);
            let guard = support::hand_over(client, client, &name, lease, lease).await;
            guard.unlock().await.expect("waiter releases");
            Ok(())
        }
    });
}

/// Durations of every size: zero, below a millisecond, ordinary, beyond what Redis or a Java
/// `long` can represent, and `Duration::MAX`.
fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        (1u64..1_000_000).prop_map(Duration::from_nanos),
        (1u64..5_000).prop_map(Duration::from_millis),
        (1u64..u64::MAX).prop_map(Duration::from_secs),
        Just(Duration::MAX),
    ]
}

#[test]
fn any_lease_is_applied_or_rejected_before_anything_is_sent() {
    let bench = Bench::new();
    bench.check(64, durations(), |lease| {
        let (client, raw) = (&bench.client, &bench.raw);
        async move {
            let name = "hostile:lease";
            let lock = client.lock(name).with_owner(Owner::new());
            let ms = lease.as_millis();
            // Accepted: whole milliseconds from 1 ms to half a signed 64-bit count.
            let valid = ms >= 1 && ms <= (i64::MAX / 2) as u128;
            for take in 0..2 {
                // The lease runs from the acquire's send: a release after it may find it spent.
                let sent = std::time::Instant::now();
                let result = if take == 0 {
                    lock.lock_with_lease(lease)
                        .await
                        .map(ferrisson::Attempt::Acquired)
                } else {
                    lock.try_lock_within_with_lease(Duration::ZERO, lease).await
                };
                match result {
                    Ok(ferrisson::Attempt::Acquired(guard)) => {
                        prop_assert!(valid, "lease {:?} accepted", lease);
                        let ttl = pttl(raw, name).await;
                        // A lease shorter than a round trip may be gone already (-2).
                        prop_assert!(ttl == -2 || (ttl > 0 && ttl as u128 <= ms), "PTTL {}", ttl);
                        match guard.unlock().await {
                            Ok(()) => {}
                            // A lease of a few milliseconds can run out before the release: the
                            // release then reports it (never Ok), as documented.
                            Err(Error::LeaseLost { .. }) if sent.elapsed() >= lease => {}
                            Err(err) => prop_assert!(false, "release: {:?}", err),
                        }
                    }
                    Ok(ferrisson::Attempt::Busy) => prop_assert!(false, "the lock is free"),
                    Err(err) => {
                        prop_assert!(!valid, "lease {:?} rejected: {:?}", lease, err);
                        prop_assert!(matches!(err, Error::InvalidArgument(_)), "{:?}", err);
                        prop_assert_eq!(exists(raw, name).await, 0);
                    }
                }
            }
            Ok(())
        }
    });
}

#[test]
fn any_wait_is_honoured_or_rejected() {
    let bench = Bench::new();
    // Waits on a busy lock: a bounded wait ends with `None` within its bound (representable
    // waits are capped at 300 ms to keep the test short); an unrepresentable one is rejected.
    bench.check(32, durations(), |wait| {
        let client = &bench.client;
        async move {
            let name = "hostile:wait";
            let holder = client
                .lock(name)
                .with_owner(Owner::new())
                .lock_with_lease(Duration::from_secs(60))
                .await
                .expect("holder");
            let representable = wait.as_millis() <= i64::MAX as u128;
            let wait = if representable {
                wait.min(Duration::from_millis(300))
            } else {
                wait
            };
            let asked = Instant::now();
            let lock = client.lock(name).with_owner(Owner::new());
            let result = timeout(Duration::from_secs(2), lock.try_lock_within(wait))
                .await
                .expect("a wait exceeded its bound");
            match result {
                Ok(ferrisson::Attempt::Busy) => {
                    prop_assert!(asked.elapsed() < wait + Duration::from_millis(500))
                }
                Ok(ferrisson::Attempt::Acquired(_)) => prop_assert!(false, "acquired a held lock"),
                // A wait shorter than the server's answer ends without one: a timeout, not
                // "busy" (the unanswered attempt is settled by the client).
                Err(Error::Timeout(_)) if wait < Duration::from_millis(50) => {
                    prop_assert!(asked.elapsed() < wait + Duration::from_millis(500));
                }
                Err(err) => {
                    prop_assert!(!representable, "{:?}: {:?}", wait, err);
                    prop_assert!(matches!(err, Error::InvalidArgument(_)), "{:?}", err);
                }
            }
            holder.unlock().await.expect("release");
            Ok(())
        }
    });
}

// Keys someone else wrote ----------------------------------------------------------------------

/// A key of another type under a lock's name: every operation says so, and the key is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_a_wrong_type_error_and_stays_untouched() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "hostile:string";
    let _: () = raw
        .set(name, "not a lock", None, None, false)
        .await
        .expect("SET");
    let lock = client.lock(name).with_owner(Owner::new());

    let wrong = |result: Result<(), Error>| {
        assert!(
            matches!(result, Err(Error::WrongType { ref name }) if name == "hostile:string"),
            "{result:?}"
        );
    };
    wrong(lock.lock().await.map(drop));
    wrong(lock.try_lock().await.map(drop));
    wrong(
        lock.try_lock_within(Duration::from_millis(200))
            .await
            .map(drop),
    );
    wrong(lock.unlock().await);
    wrong(lock.hold_count().await.map(drop));
    wrong(lock.is_held_by_current_owner().await.map(drop));
    let value: String = raw.get(name).await.expect("GET");
    assert_eq!(value, "not a lock");
}

/// Someone overwrote this owner's hold count with garbage: re-entering and releasing fail with
/// a typed error and change nothing; the lock still expires with its lease, and is not renewed
/// for ever on the strength of a count nobody can read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_hold_count_is_an_error_and_the_lock_still_expires() {
    let server = RedisServer::start();
    let client = connect_with(timed_config(
        server.url(),
        Duration::from_millis(1500),
        Duration::from_secs(2),
    ))
    .await;
    let raw = raw_client(&server.url()).await;
    let name = "hostile:garbage";
    let lock = client.lock(name).with_owner(Owner::new());
    let guard = lock
        .lock_with_lease(Duration::from_secs(2))
        .await
        .expect("lock");
    let _: i64 = raw
        .hset(name, (guard.holder_field(), "garbage"))
        .await
        .expect("HSET garbage");

    let err = lock
        .lock()
        .await
        .expect_err("re-entry over a garbage count");
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
    let err = guard
        .unlock()
        .await
        .expect_err("release of a garbage count");
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
    assert_eq!(
        hgetall(&raw, name).await.values().collect::<Vec<_>>(),
        ["garbage"]
    );
    support::redis_state::wait_key_gone(&raw, name, Duration::from_secs(4)).await;
    let guard = lock.lock().await.expect("lock once the garbage expired");
    assert_eq!(lock.hold_count().await.expect("hold count"), 1);
    guard.unlock().await.expect("release");
}

/// A lock hash written without an expiry by a foreign holder: a bounded wait ends at its bound
/// without polling (there is no TTL to wake for), and a message still wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_without_expiry_bounds_the_wait_without_polling() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "hostile:no-expiry";
    let _: i64 = raw.hset(name, ("someone-else:1", "1")).await.expect("HSET");
    reset_stats(&raw).await;
    let lock = client.lock(name).with_owner(Owner::new());
    let wait = Duration::from_millis(800);
    let asked = Instant::now();
    assert!(lock.try_lock_within(wait).await.expect("wait").is_busy());
    let took = asked.elapsed();
    assert!(
        took >= wait && took < wait + Duration::from_millis(500),
        "{took:?}"
    );
    let scripts = script_runs(&raw).await;
    assert!(
        scripts <= 3,
        "{scripts} acquire attempts during one wait: polling"
    );

    let waiter = tokio::spawn(async move { lock.try_lock_within(Duration::from_secs(10)).await });
    support::redis_state::wait_numsub(&raw, &channel_of(name), 1, Duration::from_secs(5)).await;
    let _: i64 = raw.del(name).await.expect("DEL");
    let _: i64 = raw.publish(channel_of(name), "0").await.expect("PUBLISH");
    let guard = timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the message woke the waiter")
        .expect("waiter task")
        .expect("acquire")
        .acquired()
        .expect("acquired");
    guard.unlock().await.expect("release");
}

/// Junk on a lock's channel (empty, unknown numbers, text, binary, a large payload): waiters may
/// wake and retry but do not take a held lock, a holder listening for its loss is not told it
/// lost a lock it holds, and everything works afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_on_a_lock_channel_neither_steals_nor_loses_the_lock() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    let waiter_client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "hostile:junk";
    let channel = channel_of(name);

    let guard = holder_client
        .lock(name)
        .with_owner(Owner::new())
        .lock_with_lease(Duration::from_secs(20))
        .await
        .expect("holder");
    let lost = guard.lost_token();
    let waiter_lock = waiter_client.lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn({
        let lock = waiter_lock.clone();
        async move { lock.try_lock_within(Duration::from_secs(3)).await }
    });
    support::redis_state::wait_numsub(&raw, &channel, 2, Duration::from_secs(5)).await;
    let junk: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"0".to_vec(),
        b"1".to_vec(),
        b"7".to_vec(),
        b"-1".to_vec(),
        b"99999999999999999999999".to_vec(),
        b"hello".to_vec(),
        vec![0, 159, 146, 150, 255],
        vec![b'9'; 1 << 20],
    ];
    for message in junk {
        let _: i64 = raw.publish(&channel, message).await.expect("PUBLISH");
        sleep(Duration::from_millis(20)).await;
    }
    sleep(Duration::from_millis(300)).await;
    assert!(
        !lost.is_cancelled(),
        "junk made the holder give up its lock"
    );
    assert!(!guard.is_lost());
    assert!(
        !waiter.is_finished(),
        "the waiter took a held lock or gave up early"
    );
    guard.unlock().await.expect("release");
    let taken = waiter
        .await
        .expect("waiter task")
        .expect("acquire")
        .acquired()
        .expect("the waiter acquires after the release");
    taken.unlock().await.expect("release");
}
