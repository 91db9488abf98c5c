//! A holder learns within its own lease when it can no longer prove the lease, and a lock-changing
//! call of unknown outcome is settled by the client, never adopted.
//!
//! * The watchdog gives a lease up at its end, timed locally, when its renewal is not confirmed
//!   by then (server killed, or paused with the renewal in flight).
//! * A lease given up that way, and an acquire whose reply timed out, put the holder field in
//!   doubt: once Redis answers again the client takes back whatever the server kept of it, so
//!   the lock is free for others, and the same owner's next acquire counts from one.

use crate::support;

use std::time::{Duration, Instant};

use ferrisson::{Config, Error, Owner};
use support::redis_state::{hgetall, wait_key_gone};
use support::{connect_with, lost_within, raw_client, timed_config, RedisServer};

const WATCHDOG: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_at_the_lease_end_when_the_server_is_gone() {
    let mut server = RedisServer::start();
    let client = connect_with(timed_config(
        server.url(),
        WATCHDOG,
        Duration::from_secs(10),
    ))
    .await;
    let guard = client
        .lock("loss:killed")
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    // Two renewal periods pass, then the server dies and stays dead.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!guard.is_lost());
    let killed = Instant::now();
    server.kill();
    let lost = lost_within(&guard, Duration::from_secs(5)).await;
    // The last confirmed renewal was at most a third of the lease (plus a grid tick) before
    // the kill, so the lease ends at most a lease after it.
    let after = lost - killed;
    eprintln!("lost() fired {after:?} after the kill (watchdog {WATCHDOG:?})");
    assert!(
        after <= WATCHDOG + Duration::from_millis(300),
        "lost() fired {after:?} after the kill"
    );
    assert!(guard.is_lost());
    assert!(
        matches!(
            guard.unlock().await,
            Err(ferrisson::Error::LeaseLost { .. })
        ),
        "unlock of a lost hold"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_loses_the_lease_at_its_end_and_the_hold_is_taken_back() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(timed_config(
        server.url(),
        WATCHDOG,
        Duration::from_secs(10),
    ))
    .await;
    let guard = client
        .lock("loss:paused")
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.pause();
    let paused = Instant::now();
    // The renewal goes out and hangs (the response timeout is 10 s): the lease is given up at
    // its end all the same.
    let lost = lost_within(&guard, Duration::from_secs(5)).await;
    server.resume();
    assert!(
        lost - paused <= WATCHDOG + Duration::from_millis(300),
        "lost() fired {:?} after the pause",
        lost - paused
    );
    // The late renewal reached the server after all; the client takes the hold back instead
    // of leaving the lock held by nobody for another lease.
    wait_key_gone(&raw, "loss:paused", Duration::from_secs(1)).await;
    let other = client.lock("loss:paused").with_owner(Owner::new());
    let taken = other.try_lock().await.expect("try_lock");
    assert!(taken.is_acquired(), "another owner takes the lock at once");
    drop(guard);
}

/// The scenario: the server pauses during `lock()`, which times out; the script ran
/// when it resumed. The hold is taken back, and the same owner's next `lock()` holds once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_acquire_is_settled_not_adopted() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(timed_config(
        server.url(),
        Duration::from_secs(30),
        Duration::from_millis(300),
    ))
    .await;
    let name = "loss:phantom";
    let lock = client.lock(name).with_owner(Owner::new());

    server.pause();
    let err = lock
        .lock()
        .await
        .expect_err("lock() against a paused server");
    assert!(matches!(err, Error::Timeout(_)), "got {err:?}");
    server.resume();

    let guard = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .expect("lock() after the resume does not hang")
        .expect("lock() after the resume");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    let fields = hgetall(&raw, name).await;
    assert_eq!(
        fields.get(guard.holder_field()).map(String::as_str),
        Some("1"),
        "{fields:?}"
    );
    guard.unlock().await.expect("unlock");
    wait_key_gone(&raw, name, Duration::from_millis(500)).await;
}

/// Without any further call by the owner, the client frees what its timed-out acquire took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_acquire_frees_the_lock_for_others() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(timed_config(
        server.url(),
        Duration::from_secs(30),
        Duration::from_millis(300),
    ))
    .await;
    let name = "loss:phantom:others";
    server.pause();
    let err = client
        .lock(name)
        .with_owner(Owner::new())
        .try_lock()
        .await
        .expect_err("try_lock against a paused server");
    assert!(err.is_transient(), "got {err:?}");
    server.resume();
    wait_key_gone(&raw, name, Duration::from_secs(2)).await;

    let other = connect_with(Config::new(server.url())).await;
    let guard = other
        .lock(name)
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("another client takes the lock");
    guard.unlock().await.expect("unlock");
}

/// A holder listening for its loss hears its lock's unlock message (a force unlock by another
/// client) and checks its hold at once, instead of at the next renewal a third of the watchdog
/// timeout later, or never for a fixed lease. It stops listening once the hold is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_is_noticed_at_once() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(Config::new(server.url())).await; // 30 s watchdog
    let other = connect_with(Config::new(server.url())).await;
    for (name, lease) in [
        ("loss:forced:watchdog", None),
        ("loss:forced:fixed", Some(Duration::from_secs(60))),
    ] {
        let lock = client.lock(name).with_owner(Owner::new());
        let guard = match lease {
            None => lock.lock().await,
            Some(lease) => lock.lock_with_lease(lease).await,
        }
        .expect("lock");
        let lost = guard.lost();
        let channel = support::redis_state::channel_of(name);
        support::redis_state::wait_numsub(&raw, &channel, 1, Duration::from_secs(3)).await;
        assert!(other.lock(name).force_unlock().await.expect("force_unlock"));
        let forced = Instant::now();
        tokio::time::timeout(Duration::from_secs(2), lost)
            .await
            .unwrap_or_else(|_| {
                panic!("{name}: lost() did not fire within 2 s of the force unlock")
            });
        let noticed = forced.elapsed();
        assert!(noticed < Duration::from_millis(500), "{name}: {noticed:?}");
        eprintln!("{name}: lost() fired {noticed:?} after the force unlock");
        assert!(guard.is_lost());
        assert!(
            matches!(
                guard.unlock().await,
                Err(ferrisson::Error::LeaseLost { .. })
            ),
            "unlock"
        );
        support::redis_state::wait_numsub(&raw, &channel, 0, Duration::from_secs(3)).await;
    }
}

/// A force unlock right after the holder started listening, before its subscription is
/// confirmed, is caught by the check that follows the subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_before_the_subscription_is_caught() {
    let server = RedisServer::start();
    let client = connect_with(Config::new(server.url())).await;
    let other = connect_with(Config::new(server.url())).await;
    let name = "loss:forced:early";
    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    let lost = guard.lost();
    assert!(other.lock(name).force_unlock().await.expect("force_unlock"));
    // The watch starts within a grid tick (a thirtieth of the 30 s watchdog timeout).
    tokio::time::timeout(Duration::from_secs(3), lost)
        .await
        .expect("lost() fires within a grid tick and a round trip");
}
