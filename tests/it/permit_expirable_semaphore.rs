//! The permit-expirable semaphore (Redisson's `RPermitExpirableSemaphore`) against a real
//! redis-server: never more permits out than set (tasks and processes), leases that run out
//! and are reclaimed for a waiter, releases by id from another client, unknown and expired ids,
//! lease updates, the two permit-id formats byte for byte, cancelled acquires, wrong-type keys
//! and the blocking twin.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrisson::{Error, PermitExpirableSemaphore, PermitIdFormat, WokenBy};
use fred::prelude::*;
use support::contenders::{self, micros_since_epoch};
use support::redis_state::poll_until;
use support::{connect, raw_client, RedisServer};

fn timeout_key(name: &str) -> String {
    format!("{{{name}}}:timeout")
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64
}

/// The members of the semaphore's sorted set, as raw bytes, with their scores.
async fn members(raw: &fred::clients::Client, name: &str) -> Vec<(Vec<u8>, f64)> {
    let reply: Vec<Value> = raw
        .zrange(timeout_key(name), 0, -1, None, false, None, true)
        .await
        .expect("ZRANGE");
    reply
        .chunks(2)
        .map(|pair| {
            let member = pair[0].as_bytes().expect("a member").to_vec();
            let score = pair[1].as_f64().expect("a score");
            (member, score)
        })
        .collect()
}

fn hex_to_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).expect("hex"))
        .collect()
}

async fn available_within(semaphore: &PermitExpirableSemaphore, expected: i64, within: Duration) {
    let seen = poll_until(
        within,
        Duration::from_millis(10),
        || async { semaphore.available_permits().await.expect("available") },
        |n| *n == expected,
    )
    .await;
    assert_eq!(seen, Ok(expected), "available permits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_never_hold_more_permits_than_set() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let semaphore = client.permit_expirable_semaphore("pes:tasks");
    assert!(semaphore.try_set_permits(3).await.expect("set"));
    assert!(!semaphore.try_set_permits(9).await.expect("set again"));
    let out = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (semaphore, out, most) = (semaphore.clone(), out.clone(), most.clone());
            tokio::spawn(async move {
                for _ in 0..8 {
                    let permit = semaphore
                        .acquire(Some(Duration::from_secs(30)))
                        .await
                        .expect("acquire");
                    let now = out.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    out.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.expect("release");
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("the tasks finish")
            .expect("task");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} permits were out at once, of 3");
    assert!(
        most >= 2,
        "the tasks did share the permits ({most} at most)"
    );
    assert_eq!(semaphore.available_permits().await.expect("available"), 3);
}

/// The env variable that makes this test binary a contender process of the test below.
const CHILD_URL: &str = "FERRISSON_PERMIT_CHILD_URL";
const CROSS_PROCESS: &str = "processes_never_hold_more_permits_than_set";

/// Three processes take permits of one semaphore of 2, 15 times each. Their holds, as
/// intervals between the acquire's return and the release's call, never overlap three deep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_never_hold_more_permits_than_set() {
    let name = "pes:processes";
    if let Ok(url) = std::env::var(CHILD_URL) {
        // A contender: one line per hold, `HOLD <start µs> <end µs>`.
        let client = ferrisson::Client::connect(&url).await.expect("connects");
        let semaphore = client.permit_expirable_semaphore(name);
        for _ in 0..15 {
            let permit = semaphore
                .acquire(Some(Duration::from_secs(30)))
                .await
                .expect("child acquires");
            let start = micros_since_epoch();
            tokio::time::sleep(Duration::from_millis(2)).await;
            let end = micros_since_epoch();
            println!("HOLD {start} {end}");
            permit.release().await.expect("child releases");
        }
        client.shutdown().await;
        return;
    }
    let server = RedisServer::start();
    let client = connect(&server).await;
    let semaphore = client.permit_expirable_semaphore(name);
    assert!(semaphore.try_set_permits(2).await.expect("set"));
    let holds = contenders::run(
        &support::processes::test_name(module_path!(), CROSS_PROCESS),
        CHILD_URL,
        &server.url(),
        3,
    )
    .await;
    // (instant, +1 start / -1 end); ends sort before starts at the same instant.
    let mut events: Vec<(u128, i32)> = Vec::new();
    for numbers in holds {
        events.push((numbers[0], 1));
        events.push((numbers[1], -1));
    }
    assert_eq!(events.len(), 90, "every contender reported its 15 holds");
    events.sort_unstable();
    let (mut out, mut most) = (0, 0);
    for (_, change) in &events {
        out += change;
        most = most.max(out);
    }
    assert!(most <= 2, "{most} permits were out at once, of 2");
    assert_eq!(semaphore.available_permits().await.expect("available"), 2);
}

#[tokio::test]
async fn an_expired_permit_is_reclaimed_and_a_waiter_gets_it() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    // Connected before the lease starts: everything up to the waiter's first attempt must fit
    // in the lease, which is short but far longer than a stall of a loaded machine.
    let other = connect(&server).await;
    let semaphore = client.permit_expirable_semaphore("pes:expiry");
    assert!(semaphore.try_set_permits(1).await.expect("set"));
    let lease = Duration::from_millis(1500);
    let leased_at = std::time::Instant::now();
    let lapsed = semaphore.acquire(Some(lease)).await.expect("acquire");
    assert!(!lapsed.is_expired());
    let lapsed_id = lapsed.forget(); // kept until its lease ends
    assert!(semaphore.try_acquire(None).await.expect("try").is_busy());

    // Another client waits; nobody releases: the lease's end (from the script's `:score`
    // reply) bounds its wait, and its retry reclaims the permit.
    let waiting = other.permit_expirable_semaphore("pes:expiry");
    let permit = tokio::time::timeout(lease + Duration::from_secs(5), waiting.acquire(None))
        .await
        .expect("the waiter gets the reclaimed permit")
        .expect("acquire");
    assert_eq!(permit.acquisition().woken_by, WokenBy::Ttl);
    // The lease was counted on the server from after `leased_at`.
    assert!(
        leased_at.elapsed() >= lease,
        "reclaimed {:?} after the lease was asked for",
        leased_at.elapsed()
    );
    assert_ne!(permit.id(), lapsed_id);
    assert!(
        !semaphore
            .try_release(&lapsed_id)
            .await
            .expect("try_release"),
        "the reclaimed permit is gone"
    );
    assert_eq!(semaphore.available_permits().await.expect("available"), 0);
    permit.release().await.expect("release");
    assert_eq!(semaphore.available_permits().await.expect("available"), 1);
}

#[tokio::test]
async fn a_release_by_id_from_another_client_wakes_a_waiter() {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    let on_a = a.permit_expirable_semaphore("pes:by-id");
    let on_b = b.permit_expirable_semaphore("pes:by-id");
    assert!(on_a.try_set_permits(1).await.expect("set"));
    let id = on_a.acquire(None).await.expect("acquire").forget();
    assert_eq!(id.len(), 32);

    let waiter = tokio::spawn({
        let on_a = on_a.clone();
        async move { on_a.acquire(None).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "no permit is free");
    on_b.release(&id)
        .await
        .expect("b releases a's permit by its id");
    let permit = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the release message wakes the waiter")
        .expect("task")
        .expect("acquire");
    assert_eq!(permit.acquisition().woken_by, WokenBy::Message);
    permit.release().await.expect("release");
}

#[tokio::test]
async fn unknown_expired_and_malformed_ids_are_typed_results() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let semaphore = client.permit_expirable_semaphore("pes:ids");
    assert!(semaphore.try_set_permits(2).await.expect("set"));
    let unknown = "00112233445566778899aabbccddeeff";
    assert!(!semaphore.try_release(unknown).await.expect("try_release"));
    assert!(matches!(
        semaphore.release(unknown).await,
        Err(Error::NotHeld { .. })
    ));
    for bad in ["", "xyz", "abc"] {
        assert!(matches!(
            semaphore.release(bad).await,
            Err(Error::InvalidArgument(_))
        ));
    }

    // Released twice: the second finds nothing.
    let id = semaphore.acquire(None).await.expect("acquire").forget();
    semaphore.release(&id).await.expect("release");
    assert!(matches!(
        semaphore.release(&id).await,
        Err(Error::NotHeld { .. })
    ));

    // Lapsed, not reclaimed yet (no operation ran the reclaim step): given back, but reported.
    let short = Some(Duration::from_millis(50));
    let lapsed = semaphore.acquire(short).await.expect("acquire").forget();
    let guard = semaphore.acquire(short).await.expect("acquire");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(guard.is_expired());
    assert!(!semaphore.try_release(&lapsed).await.expect("try_release"));
    assert!(matches!(
        guard.release().await,
        Err(Error::LeaseLost { .. })
    ));
    assert_eq!(semaphore.available_permits().await.expect("available"), 2);
}

#[tokio::test]
async fn update_lease_time_moves_the_lease_end() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let semaphore = client.permit_expirable_semaphore("pes:update");
    assert!(semaphore.try_set_permits(1).await.expect("set"));
    // The update must come before the first lease ends: short, but far longer than a stall.
    let first_lease = Duration::from_millis(1500);
    let mut permit = semaphore.acquire(Some(first_lease)).await.expect("acquire");
    let before = epoch_ms();
    assert!(permit
        .update_lease(Some(Duration::from_secs(60)))
        .await
        .expect("update"));
    let score = members(&raw, "pes:update").await[0].1 as u64;
    assert!(
        score >= before + 59_000 && score <= epoch_ms() + 60_000,
        "the lease now ends in 60 s: {score} vs now {before}"
    );
    tokio::time::sleep(first_lease + Duration::from_millis(200)).await;
    assert!(!permit.is_expired());
    assert!(
        semaphore.try_acquire(None).await.expect("try").is_busy(),
        "the first lease's end passed, but the permit is still out"
    );
    // No lease: never expires.
    assert!(semaphore
        .update_lease_time(permit.id(), None)
        .await
        .expect("update"));
    assert_eq!(
        members(&raw, "pes:update").await[0].1,
        922_337_203_685_477.0
    );
    let id = permit.forget();
    semaphore.release(&id).await.expect("release");
    assert!(!semaphore
        .update_lease_time(&id, Some(Duration::from_secs(1)))
        .await
        .expect("update"),);
}

/// Both id formats, written exactly as the two Redisson generations write them (checked with a
/// raw client): the raw 16 bytes (3.17.0+) and the 32-character hex string (≤ 3.16.x), with the
/// lease end as score, the timeout set's TTL following the permit count's, and the channel's
/// message; the formats do not release each other's permits.
#[tokio::test]
async fn both_id_formats_are_written_as_redisson_writes_them() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "pes:format";
    let modern = client.permit_expirable_semaphore(name);
    let legacy = modern.with_id_format(PermitIdFormat::Hex);
    assert_eq!(modern.id_format(), PermitIdFormat::Raw);
    assert!(modern.try_set_permits(3).await.expect("set"));
    let _: () = raw.pexpire(name, 60_000, None).await.expect("PEXPIRE");

    let before = epoch_ms();
    let permit = modern
        .acquire(Some(Duration::from_secs(10)))
        .await
        .expect("acquire");
    let old = legacy.acquire(None).await.expect("acquire");
    let mut stored = members(&raw, name).await;
    stored.sort_by(|a, b| a.1.total_cmp(&b.1));
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[0].0, hex_to_bytes(permit.id()), "raw 16 bytes");
    assert_eq!(stored[0].0.len(), 16);
    let score = stored[0].1 as u64;
    assert!(score >= before + 10_000 && score <= epoch_ms() + 10_000);
    assert_eq!(stored[1].0, old.id().as_bytes(), "the hex string itself");
    assert_eq!(stored[1].1, 922_337_203_685_477.0, "no lease: never");
    let count: String = raw.get(name).await.expect("GET");
    assert_eq!(count, "1");
    let ttl: i64 = raw.pttl(timeout_key(name)).await.expect("PTTL");
    assert!(ttl > 50_000, "the set takes the count's TTL: {ttl}");

    // Not interchangeable: each format finds only its own permits.
    assert!(!legacy.try_release(permit.id()).await.expect("try"));
    assert!(!modern.try_release(old.id()).await.expect("try"));

    // A release announces the permits now available on redisson_sc:{N}.
    let subscriber = fred::clients::SubscriberClient::new(
        fred::types::config::Config::from_url(&server.url()).expect("url"),
        None,
        None,
        None,
    );
    subscriber.init().await.expect("subscriber connects");
    let mut messages = subscriber.message_rx();
    subscriber
        .subscribe("redisson_sc:{pes:format}")
        .await
        .expect("SUBSCRIBE");
    permit.release().await.expect("release");
    let message = tokio::time::timeout(Duration::from_secs(5), messages.recv())
        .await
        .expect("a message")
        .expect("message");
    assert_eq!(message.value.as_string().as_deref(), Some("2"));
    // Ids are hex in either case, as Redisson decodes them; the hex member is lowercase.
    let old = old.forget().to_uppercase();
    legacy
        .release(&old)
        .await
        .expect("release by the id in capitals");
    assert!(members(&raw, name).await.is_empty());
}

/// Permits that Java peers took, written at the Redis level as each generation writes them
/// (a 3.17+ peer: the raw 16 bytes; a 3.16 peer: the hex string), are released by id, and one
/// whose lease ended is reclaimed for a ferrisson acquire.
#[tokio::test]
async fn permits_taken_by_either_redisson_generation_are_released_by_id() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let id = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
    let never = 922_337_203_685_477.0;
    for (name, member, format) in [
        ("pes:java", hex_to_bytes(id), PermitIdFormat::Raw),
        ("pes:java316", id.as_bytes().to_vec(), PermitIdFormat::Hex),
    ] {
        let _: () = raw.set(name, "0", None, None, false).await.expect("SET");
        let member = fred::bytes::Bytes::from(member);
        let _: () = raw
            .zadd(timeout_key(name), None, None, false, false, (never, member))
            .await
            .expect("ZADD");
        let semaphore = client
            .permit_expirable_semaphore(name)
            .with_id_format(format);
        assert!(semaphore.try_acquire(None).await.expect("try").is_busy());
        semaphore
            .release(id)
            .await
            .expect("the peer's permit, by its id");
        assert_eq!(semaphore.available_permits().await.expect("available"), 1);
    }
    // A peer's permit whose lease ended: the next acquire's reclaim step takes it back.
    let _: () = raw
        .set("pes:lapsed", "0", None, None, false)
        .await
        .expect("SET");
    let ended = (epoch_ms() - 1_000) as f64;
    let member = fred::bytes::Bytes::from(hex_to_bytes(id));
    let _: () = raw
        .zadd(
            timeout_key("pes:lapsed"),
            None,
            None,
            false,
            false,
            (ended, member),
        )
        .await
        .expect("ZADD");
    let semaphore = client.permit_expirable_semaphore("pes:lapsed");
    let permit = semaphore
        .try_acquire(None)
        .await
        .expect("try")
        .acquired()
        .expect("the lapsed permit is reclaimed");
    assert_ne!(permit.id(), id);
    permit.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_and_permits_leak_no_permit() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let semaphore = client.permit_expirable_semaphore("pes:cancel");
    assert!(semaphore.try_set_permits(1).await.expect("set"));
    let mut completed = 0;
    for k in 0..200u64 {
        // An acquire whose reply was lost to the drop must give its permit back; a completed
        // one hands back its permit, dropped at once (released in the background).
        let acquire = tokio::time::timeout(
            Duration::from_micros(k * 10),
            semaphore.acquire(Some(Duration::from_secs(60))),
        );
        if let Ok(permit) = acquire.await {
            completed += 1;
            drop(permit.expect("acquire"));
        }
    }
    eprintln!("{completed} of 200 acquires completed before being dropped");
    available_within(&semaphore, 1, Duration::from_secs(3)).await;
    let other = connect(&server).await;
    let permit = other
        .permit_expirable_semaphore("pes:cancel")
        .try_acquire(None)
        .await
        .expect("try")
        .acquired()
        .expect("another client gets the permit at once");
    permit.release().await.expect("release");
}

#[tokio::test]
async fn keys_of_another_type_are_wrong_type() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;

    let _: () = raw.hset("pes:hash", ("f", "1")).await.expect("HSET");
    let hash = client.permit_expirable_semaphore("pes:hash");
    assert!(matches!(
        hash.acquire(None).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        hash.try_set_permits(1).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        hash.add_permits(1).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        hash.available_permits().await,
        Err(Error::WrongType { .. })
    ));

    let _: () = raw
        .set("pes:text", "many", None, None, false)
        .await
        .expect("SET");
    let text = client.permit_expirable_semaphore("pes:text");
    assert!(matches!(
        text.try_acquire(None).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        text.add_permits(1).await,
        Err(Error::WrongType { .. })
    ));

    // The permit set of another type.
    let sorted = client.permit_expirable_semaphore("pes:set");
    assert!(sorted.try_set_permits(1).await.expect("set"));
    let _: () = raw
        .set(timeout_key("pes:set"), "x", None, None, false)
        .await
        .expect("SET");
    assert!(matches!(
        sorted.acquire(None).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        sorted.release("00112233445566778899aabbccddeeff").await,
        Err(Error::WrongType { .. })
    ));
    let unchanged: String = raw.get("pes:set").await.expect("GET");
    assert_eq!(unchanged, "1", "nothing was taken");
}

#[tokio::test]
async fn add_permits_and_delete() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let semaphore = client.permit_expirable_semaphore("pes:add");
    assert_eq!(semaphore.available_permits().await.expect("available"), 0);
    assert!(semaphore.try_acquire(None).await.expect("try").is_busy());
    semaphore.add_permits(2).await.expect("add");
    semaphore.add_permits(-1).await.expect("remove");
    assert_eq!(semaphore.available_permits().await.expect("available"), 1);
    let permit = semaphore.acquire(None).await.expect("acquire");
    assert!(semaphore.delete().await.expect("delete"));
    assert!(!semaphore.delete().await.expect("delete again"));
    assert_eq!(semaphore.available_permits().await.expect("available"), 0);
    assert!(matches!(
        permit.release().await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(
        client
            .permit_expirable_semaphore("")
            .try_set_permits(1)
            .await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        semaphore.acquire(Some(Duration::ZERO)).await,
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn the_blocking_semaphore_takes_and_gives_back_permits() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let semaphore = client.permit_expirable_semaphore("pes:blocking");
    assert!(semaphore.try_set_permits(1).expect("set"));
    let permit = semaphore
        .acquire(Some(Duration::from_secs(10)))
        .expect("acquire");
    assert_eq!(permit.id().len(), 32);
    assert!(semaphore.try_acquire(None).expect("try").is_busy());
    let id = permit.id().to_owned();
    let waiter = std::thread::spawn({
        let semaphore = semaphore.clone();
        move || semaphore.try_acquire_for(Duration::from_secs(5), None)
    });
    std::thread::sleep(Duration::from_millis(100));
    semaphore
        .release(&id)
        .expect("release by id from another thread");
    let taken = waiter
        .join()
        .expect("thread")
        .expect("try_acquire_for")
        .acquired()
        .expect("woken by the release");
    assert!(matches!(permit.release(), Err(Error::LeaseLost { .. })));
    drop(taken); // released in the background
    let seen = (0..300).find_map(|_| {
        std::thread::sleep(Duration::from_millis(10));
        (semaphore.available_permits().expect("available") == 1).then_some(())
    });
    assert!(seen.is_some(), "the dropped permit came back");
}

/// Synced writes (protocol §1.11; Redisson ≥ 3.21 syncs semaphore acquires): with the link to
/// the replica cut, an acquisition no replica acknowledged fails with `NotReplicated` and its
/// permit is given back on the master, in the semaphore's id format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_no_replica_acknowledged_gives_its_permit_back() {
    use support::fault::{FaultProxy, ProxyMode};
    let master = RedisServer::start();
    let link = FaultProxy::start(master.port()).await;
    let port = link.port().to_string();
    let _replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    let raw = raw_client(&master.url()).await;
    support::redis_state::wait_replicas_streaming(&raw, 1).await;
    let mut config = ferrisson::Config::new(master.url());
    config.synced_writes = ferrisson::SyncedWrites::Always;
    // Long enough for an online replica to acknowledge on a loaded machine; the paused one
    // makes the second acquire wait it out.
    config.replica_sync_timeout = Duration::from_millis(1500);
    let client = support::connect_with(config).await;
    let formats = [PermitIdFormat::Raw, PermitIdFormat::Hex];
    let semaphores: Vec<_> = formats
        .iter()
        .map(|format| {
            client
                .permit_expirable_semaphore(format!("pes:synced:{format:?}"))
                .with_id_format(*format)
        })
        .collect();
    for semaphore in &semaphores {
        assert!(semaphore.try_set_permits(1).await.expect("set"));
    }
    link.set_mode(ProxyMode::Blackhole);
    for semaphore in &semaphores {
        let err = semaphore
            .try_acquire(None)
            .await
            .expect_err("no replica acknowledges the acquisition");
        assert!(matches!(&err, Error::NotReplicated { .. }), "{err:?}");
        let count: String = raw.get(semaphore.name()).await.expect("GET");
        assert_eq!(
            count, "1",
            "the permit is back on the master: {semaphore:?}"
        );
        assert!(members(&raw, semaphore.name()).await.is_empty());
    }
}
