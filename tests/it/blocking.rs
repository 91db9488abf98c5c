//! The blocking API: the owner is the OS thread, exactly Java's model.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrisson::blocking::Client;
use ferrisson::Error;
use support::RedisServer;

fn connect(server: &RedisServer) -> Client {
    Client::connect(&server.url()).expect("blocking client connects")
}

#[test]
fn threads_contending_for_one_lock_never_overlap() {
    let server = RedisServer::start();
    let client = connect(&server);
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let entries = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let lock = client.lock("blocking:shared");
            let (inside, max_inside, entries) =
                (inside.clone(), max_inside.clone(), entries.clone());
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let guard = lock.lock().expect("lock");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(1));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    entries.fetch_add(1, Ordering::SeqCst);
                    guard.unlock().expect("unlock");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("worker thread");
    }
    assert_eq!(entries.load(Ordering::SeqCst), 80);
    assert_eq!(
        max_inside.load(Ordering::SeqCst),
        1,
        "two threads were inside at once"
    );
    assert!(!client
        .lock("blocking:shared")
        .is_locked()
        .expect("is_locked"));
}

#[test]
fn a_thread_reenters_its_own_hold_and_other_threads_wait() {
    let server = RedisServer::start();
    let client = connect(&server);
    let lock = client.lock("blocking:reentrant");
    let outer = lock.lock().expect("outer");
    let inner = lock.lock().expect("same thread re-enters");
    assert_eq!(lock.hold_count().expect("hold_count"), 2);
    assert!(lock.is_held_by_current_owner().expect("held"));

    let other = lock.clone();
    let (busy, held_there) = std::thread::spawn(move || {
        let busy = other
            .try_lock_within(Duration::from_millis(100))
            .expect("try_lock_within")
            .is_busy();
        (busy, other.is_held_by_current_owner().expect("held"))
    })
    .join()
    .expect("thread");
    assert!(busy, "another thread must not enter");
    assert!(!held_there, "another thread is another owner");

    inner.unlock().expect("inner unlock");
    assert_eq!(lock.hold_count().expect("hold_count"), 1);
    outer.unlock().expect("outer unlock");
    assert!(!lock.is_locked().expect("is_locked"));
}

#[test]
fn unlock_by_identity_from_another_thread_is_not_held() {
    let server = RedisServer::start();
    let client = connect(&server);
    let lock = client.lock("blocking:identity");
    lock.lock().expect("lock").detach();
    let other = lock.clone();
    let result = std::thread::spawn(move || other.unlock())
        .join()
        .expect("thread");
    assert!(
        matches!(result, Err(Error::NotHeld { .. })),
        "got {result:?}"
    );
    assert_eq!(
        lock.hold_count().expect("hold_count"),
        1,
        "the lock is intact"
    );
    lock.unlock().expect("the owning thread releases");
    assert!(!lock.is_locked().expect("is_locked"));
}

#[test]
fn a_guard_moved_to_another_thread_releases_its_owners_hold() {
    let server = RedisServer::start();
    let client = connect(&server);
    let lock = client.lock("blocking:moved");
    let guard = lock.lock().expect("lock");
    let released = std::thread::spawn(move || guard.unlock())
        .join()
        .expect("thread");
    released.expect("unlock");
    assert!(!lock.is_locked().expect("is_locked"));
}

#[test]
fn a_waiting_thread_is_woken_by_the_release() {
    let server = RedisServer::start();
    let client = connect(&server);
    let lock = client.lock("blocking:wake");
    let guard = lock.lock_with_lease(Duration::from_secs(20)).expect("lock");
    let waiter = lock.clone();
    let handle = std::thread::spawn(move || {
        let guard = waiter.lock().expect("waiter lock");
        let woken_by = guard.acquisition().map(|a| a.woken_by);
        (Instant::now(), woken_by, guard.unlock().expect("unlock"))
    });
    std::thread::sleep(Duration::from_millis(200));
    let released_at = Instant::now();
    guard.unlock().expect("unlock");
    let (acquired_at, woken_by, _) = handle.join().expect("waiter thread");
    assert_eq!(woken_by, Some(ferrisson::WokenBy::Message));
    assert!(
        acquired_at.duration_since(released_at) < Duration::from_secs(2),
        "woken by the message, not the 20 s lease"
    );
}

#[test]
fn dropping_a_guard_releases_without_blocking() {
    let server = RedisServer::start();
    let client = connect(&server);
    let lock = client.lock("blocking:drop");
    drop(lock.lock().expect("lock"));
    let deadline = Instant::now() + Duration::from_secs(2);
    while lock.is_locked().expect("is_locked") {
        assert!(
            Instant::now() < deadline,
            "the dropped guard was not released"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn dropping_the_client_finishes_releases_and_closes() {
    let server = RedisServer::start();
    let client = connect(&server);
    let lock = client.lock("blocking:last");
    let guard = lock.lock().expect("lock");
    drop(client);
    drop(lock);
    drop(guard); // the last handle: shuts the client down after the release
    let check = connect(&server);
    assert!(!check.lock("blocking:last").is_locked().expect("is_locked"));
}

#[tokio::test]
async fn calling_the_blocking_api_inside_a_runtime_is_a_typed_error() {
    let server = RedisServer::start();
    let url = server.url();
    let created = Client::connect(&url);
    assert!(
        matches!(created, Err(Error::InvalidArgument(_))),
        "got {created:?}"
    );
    // A client made outside the runtime refuses to block inside it.
    let client = std::thread::spawn(move || Client::connect(&url))
        .join()
        .expect("thread")
        .expect("connect");
    let result = client.lock("blocking:async").try_lock();
    assert!(
        matches!(result, Err(Error::InvalidArgument(_))),
        "got {result:?}"
    );
    std::thread::spawn(move || drop(client))
        .join()
        .expect("drop outside the runtime");
}

/// The blocking API has the async API's shapes: `is_held_by(owner)` for an owner given by id,
/// and a guard whose lock was taken away fails its release with `LeaseLost`, as
/// `Lock::unlock` fails with `NotHeld`.
#[test]
fn owners_by_id_and_a_lost_guards_release_match_the_async_api() {
    let server = RedisServer::start();
    let client = connect(&server);
    let lock = client.lock("blocking:shapes");
    let worker = ferrisson::Owner::from_id(7).expect("id");
    let guard = lock.with_owner(worker).lock().expect("lock as 7");
    assert!(lock.is_held_by(worker).expect("is_held_by 7"));
    assert!(!lock.is_held_by_current_owner().expect("this thread"));

    assert!(lock.force_unlock().expect("force_unlock"));
    let err = guard.unlock().expect_err("the hold was taken away");
    assert!(
        matches!(err, Error::LeaseLost { ref name } if name == "blocking:shapes"),
        "{err:?}"
    );
    let err = lock.with_owner(worker).unlock().expect_err("nothing held");
    assert!(matches!(err, Error::NotHeld { .. }), "{err:?}");
}

/// A blocking client from the application's own fred `Builder` locks in the builder's database.
#[test]
fn a_blocking_client_from_a_fred_builder_uses_its_server_and_database() {
    use ferrisson::fred::types::{config::Config as FredConfig, Builder};

    let server = RedisServer::start();
    let fred_config =
        FredConfig::from_url(&format!("{}/2", server.url())).expect("a valid fred URL");
    let builder = Builder::from_config(fred_config);
    let config = ferrisson::Config::new(ferrisson::Config::DEFAULT_URL);
    let client = Client::from_fred_builder(&builder, config).expect("connects");
    let guard = client.lock("blocking:db").lock().expect("lock");

    let db2 = Client::connect(&format!("{}/2", server.url())).expect("db 2");
    let db0 = connect(&server);
    assert!(db2
        .lock("blocking:db")
        .is_locked()
        .expect("is_locked in db 2"));
    assert!(!db0
        .lock("blocking:db")
        .is_locked()
        .expect("is_locked in db 0"));
    guard.unlock().expect("unlock");
}

/// `unlock_settled` on every blocking guard that has it: `Ok` for a hold that lasted (the key is
/// gone), `LeaseLost` for one deleted under it (never `Ok`), as the async guards answer.
#[test]
fn unlock_settled_answers_as_the_async_guards_do() {
    let server = RedisServer::start();
    let client = connect(&server);
    let admin = connect(&server);
    let gone = |name: &str| !admin.lock(name).is_locked().expect("is_locked");
    let force = |name: &str| assert!(admin.lock(name).force_unlock().expect("force_unlock"));
    let lost = |result: ferrisson::Result<()>| {
        assert!(
            matches!(result, Err(Error::LeaseLost { .. })),
            "got {result:?}"
        );
    };

    let lock = client.lock("blocking:settled:lock");
    lock.lock()
        .expect("lock")
        .unlock_settled()
        .expect("settled");
    assert!(gone(lock.name()));
    let guard = lock.lock().expect("lock");
    force(lock.name());
    lost(guard.unlock_settled());

    let spin = client.spin_lock("blocking:settled:spin");
    spin.lock()
        .expect("lock")
        .unlock_settled()
        .expect("settled");
    assert!(gone("blocking:settled:spin"));
    let guard = spin.lock().expect("lock");
    force("blocking:settled:spin");
    lost(guard.unlock_settled());

    let fenced = client.fenced_lock("blocking:settled:fenced");
    fenced
        .lock()
        .expect("lock")
        .unlock_settled()
        .expect("settled");
    let guard = fenced.lock().expect("lock");
    force("blocking:settled:fenced");
    lost(guard.unlock_settled());

    let rw = client.read_write_lock("blocking:settled:rw");
    rw.read_lock()
        .lock()
        .expect("read")
        .unlock_settled()
        .expect("settled");
    rw.write_lock()
        .lock()
        .expect("write")
        .unlock_settled()
        .expect("settled");
    assert!(gone("blocking:settled:rw"));
    let guard = rw.write_lock().lock().expect("write");
    assert!(admin
        .read_write_lock("blocking:settled:rw")
        .write_lock()
        .force_unlock()
        .expect("force_unlock"));
    lost(guard.unlock_settled());
}

/// Two threads (two owners) take two locks in opposite orders with deadlock detection on: one
/// gives way with `Error::Deadlock`, the other proceeds; afterwards the twins of
/// `find_deadlocks` and `recorded_waits` find nothing left.
#[test]
fn threads_in_opposite_orders_one_gives_way() {
    let server = RedisServer::start();
    let mut config = ferrisson::Config::new(server.url());
    config.deadlock_detection = ferrisson::DeadlockDetection::Detect {
        threshold: Duration::from_millis(300),
    };
    let client = Client::new(config).expect("connect");
    let ready = Arc::new(std::sync::Barrier::new(2));
    let threads: Vec<_> = [("bl:a", "bl:b"), ("bl:b", "bl:a")]
        .into_iter()
        .map(|(first, second)| {
            let (client, ready) = (client.clone(), ready.clone());
            std::thread::spawn(move || {
                let held = client.lock(first).lock().expect("first");
                ready.wait();
                let outcome = client.lock(second).lock().map(|guard| {
                    guard.unlock().expect("unlock second");
                });
                held.unlock().expect("unlock first");
                outcome
            })
        })
        .collect();
    let outcomes: Vec<_> = threads
        .into_iter()
        .map(|thread| thread.join().expect("thread"))
        .collect();
    let gave_way = outcomes
        .iter()
        .filter(|outcome| matches!(outcome, Err(Error::Deadlock { .. })))
        .count();
    assert_eq!(gave_way, 1, "{outcomes:?}");
    assert!(outcomes.iter().any(Result::is_ok), "{outcomes:?}");
    assert!(client.find_deadlocks().expect("find").is_empty());
    assert!(client.recorded_waits().expect("waits").is_empty());
}
