//! MultiLock (Redisson's `RedissonMultiLock`, protocol §9) over 3 independent redis-servers, one
//! client each: every lock held or none, what a failed or cancelled acquisition leaves (nothing),
//! keys of the wrong type, the lease recalculation, and the blocking twin.

mod support;

use std::time::Duration;

use ferrisson::{Error, MultiLock, Owner};
use fred::prelude::*;
use support::servers::Servers;

#[tokio::test]
async fn every_lock_is_held_and_released_together() {
    let s = Servers::start(3).await;
    let name = "multi:all";
    let multi = MultiLock::new(s.locks(name)).expect("locks");
    let guard = multi.lock().await.expect("lock");
    assert_eq!(guard.parts().len(), 3);
    assert_eq!(s.holding(0..3, name).await, vec![0, 1, 2]);
    assert!(multi.is_held_by_current_owner().await.expect("held by"));
    // Re-entrant per owner, as its parts.
    let again = multi
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("re-enters");
    assert_eq!(multi.locks()[1].hold_count().await.expect("count"), 2);
    again.unlock().await.expect("unlock");

    let other = multi.with_owner(Owner::new());
    assert!(!other.is_held_by_current_owner().await.expect("held by"));
    assert!(other.try_lock().await.expect("try_lock").is_busy());
    assert_eq!(
        s.holding(0..3, name).await,
        vec![0, 1, 2],
        "a busy try took nothing"
    );
    guard.unlock().await.expect("unlock");
    assert!(s.holding(0..3, name).await.is_empty());
    drop(
        other
            .try_lock()
            .await
            .expect("try_lock")
            .acquired()
            .expect("free again"),
    );
}

#[tokio::test]
async fn an_empty_list_is_refused() {
    let err = MultiLock::new([]).expect_err("no locks");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

#[tokio::test]
async fn one_server_down_fails_the_multilock_and_releases_what_it_took() {
    let mut s = Servers::start(3).await;
    let name = "multi:down";
    let multi = MultiLock::new(s.locks(name)).expect("locks");
    s.servers[1].stop();
    let err = multi
        .try_lock_for(Duration::from_millis(500), None)
        .await
        .expect_err("a lock cannot be reached");
    assert!(err.is_transient(), "{err:?}");
    assert!(
        s.holding([0, 2], name).await.is_empty(),
        "lock 0 was released"
    );
}

/// Lock 2 is held by another owner: the MultiLock takes locks 0 and 1, waits for lock 2 the rest
/// of its wait, then releases 0 and 1 and reports `Busy`.
#[tokio::test]
async fn a_busy_lock_makes_it_busy_and_the_locks_taken_are_released() {
    let s = Servers::start(3).await;
    let name = "multi:busy";
    let holder = support::hold(&s.clients[2], name).await;
    let multi = MultiLock::new(s.locks(name)).expect("locks");
    let started = std::time::Instant::now();
    let attempt = multi
        .try_lock_for(Duration::from_millis(300), None)
        .await
        .expect("try_lock_for");
    assert!(attempt.is_busy());
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "waited for lock 2"
    );
    assert!(
        s.holding([0, 1], name).await.is_empty(),
        "locks 0 and 1 were released"
    );

    // Released meanwhile: the MultiLock gets lock 2 within its wait.
    let release = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        holder.unlock().await.expect("holder releases");
    };
    let (attempt, ()) = tokio::join!(multi.try_lock_for(Duration::from_secs(2), None), release);
    let guard = attempt
        .expect("try_lock_for")
        .acquired()
        .expect("acquired after the release");
    assert_eq!(s.holding(0..3, name).await, vec![0, 1, 2]);
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_wrong_type_key_is_a_typed_error_at_once_and_nothing_is_held() {
    let s = Servers::start(3).await;
    let name = "multi:wrongtype";
    let _: () = s.raws[2]
        .set(name, "not a lock", None, None, false)
        .await
        .expect("SET");
    let multi = MultiLock::new(s.locks(name)).expect("locks");
    let started = std::time::Instant::now();
    let err = multi
        .try_lock_for(Duration::from_secs(3), None)
        .await
        .expect_err("lock 2 cannot be taken");
    assert!(
        matches!(err, Error::WrongType { ref name } if name == "multi:wrongtype"),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no round after a wrong type"
    );
    assert!(s.holding([0, 1], name).await.is_empty());
}

#[tokio::test]
async fn the_lease_recalculation_sets_every_key_to_the_lease() {
    let s = Servers::start(3).await;
    let name = "multi:relet";
    let multi = MultiLock::new(s.locks(name)).expect("locks");
    // Twice the wait (4 s) while acquiring, then the 10 s lease.
    let guard = multi
        .try_lock_for(Duration::from_secs(2), Some(Duration::from_secs(10)))
        .await
        .expect("try_lock_for")
        .acquired()
        .expect("free");
    s.assert_pttl_within(0..3, name, 9_000..=10_000).await;
    assert!(guard.validity().expect("fixed lease") <= Duration::from_secs(10));
    guard.unlock().await.expect("unlock");
    // lock_with_lease: a round with a random wait in [1.5 s, 3 s), so parts of 3 s to 6 s,
    // then reset to the lease.
    let guard = multi
        .lock_with_lease(Duration::from_secs(3))
        .await
        .expect("lock_with_lease");
    s.assert_pttl_within(0..3, name, 2_000..=3_000).await;
    guard.unlock().await.expect("unlock");
}

/// A MultiLock guard is lost as soon as one part is: here one lock is force-unlocked.
#[tokio::test]
async fn losing_one_part_loses_the_multilock() {
    let s = Servers::start(3).await;
    let name = "multi:lost";
    let multi = MultiLock::new(s.locks(name)).expect("locks");
    let guard = multi.lock().await.expect("lock");
    let lost = guard.lost();
    assert!(!guard.is_lost());
    assert!(s.clients[1].lock(name).force_unlock().await.expect("force"));
    tokio::time::timeout(Duration::from_secs(3), lost)
        .await
        .expect("lost() fires once a part is lost");
    assert!(guard.is_lost());
    let err = guard.unlock().await.expect_err("a part was lost");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert!(
        s.holding(0..3, name).await.is_empty(),
        "the other parts were released"
    );
}

/// Acquires dropped at every stage (before, during and after each part's script) leave no lock
/// held on any server: the parts taken are released by their dropped guards, the part in flight
/// by its client's undo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_midway_leave_nothing_held() {
    let s = Servers::start(3).await;
    let name = "multi:cancel";
    let mut completed = 0;
    for k in 0..150u64 {
        let multi = MultiLock::new(s.locks(name))
            .expect("locks")
            .with_owner(Owner::new());
        let acquire = tokio::time::timeout(Duration::from_micros(k * 20), multi.lock());
        if let Ok(guard) = acquire.await {
            completed += 1;
            drop(guard.expect("acquire"));
        }
    }
    eprintln!("{completed} of 150 acquires completed before being dropped");
    for i in 0..3 {
        s.wait_gone(i, name, Duration::from_secs(3)).await;
    }
    let multi = MultiLock::new(s.locks(name)).expect("locks");
    let guard = multi
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("free at once");
    guard.unlock().await.expect("unlock");
}

#[test]
fn the_blocking_multilock_is_held_per_thread() {
    let (_servers, clients) = Servers::start_blocking(3);
    let multi =
        ferrisson::blocking::MultiLock::new(clients.iter().map(|c| c.lock("multi:blocking")))
            .expect("locks");
    let guard = multi.lock().expect("lock");
    assert_eq!(guard.parts(), 3);
    assert_eq!(
        clients[2]
            .lock("multi:blocking")
            .hold_count()
            .expect("count"),
        1
    );
    let other = multi.clone();
    let busy = std::thread::spawn(move || other.try_lock().expect("try_lock").is_busy())
        .join()
        .expect("thread");
    assert!(busy, "another thread is another owner");
    guard.unlock().expect("unlock");
    assert_eq!(
        clients[2]
            .lock("multi:blocking")
            .hold_count()
            .expect("count"),
        0
    );
    assert!(ferrisson::blocking::MultiLock::new([]).is_err());
}
