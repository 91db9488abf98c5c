//! MultiLock (Redisson's `RedissonMultiLock`, protocol §9) over 3 and 5 independent
//! redis-servers, one client each: every lock held or none, with servers stopped or paused, what
//! a failed or cancelled acquisition leaves (nothing), keys of the wrong type, the lease
//! recalculation, contenders in separate processes, and the blocking twin.

use crate::support;

use std::time::Duration;

use ferrisson::{Attempt, Error, MultiLock, Owner};
use fred::prelude::*;
use support::contenders;
use support::redis_state::{channel_of, pttl, reset_stats, script_runs, wait_numsub};
use support::servers::{contender_locks, Servers};

const LONG: Duration = Duration::from_secs(5);

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
    // The last one: a stopped server's part uses up the wait (it ends in `Timeout`), so that
    // only after the last part could a MultiLock that tolerated a failure stop acquired.
    s.servers[2].stop();
    let err = multi
        .try_lock_within(Duration::from_millis(500))
        .await
        .expect_err("a lock cannot be reached");
    assert!(err.is_transient(), "{err:?}");
    assert!(
        s.holding([0, 1], name).await.is_empty(),
        "locks 0 and 1 were released"
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
        .try_lock_within(Duration::from_millis(300))
        .await
        .expect("try_lock_within");
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
    let (attempt, ()) = tokio::join!(multi.try_lock_within(Duration::from_secs(2)), release);
    let guard = attempt
        .expect("try_lock_within")
        .acquired()
        .expect("acquired after the release");
    assert_eq!(s.holding(0..3, name).await, vec![0, 1, 2]);
    guard.unlock().await.expect("unlock");
}

/// Lock 1 is held by another owner, locks 0 and 2 are free. Once lock 0 is taken, locks 1 and 2
/// are swept at once: lock 2 is taken and given back before the MultiLock waits for lock 1, so
/// that while it waits it holds lock 0 alone (a prefix of its parts, as in Redisson's order).
/// Once lock 1 is released, it takes locks 1 and 2.
#[tokio::test]
async fn while_it_waits_for_a_busy_lock_it_holds_only_the_locks_before_it() {
    let s = Servers::start(3).await;
    let name = "multi:prefix";
    let holder = support::hold(&s.clients[1], name).await;
    reset_stats(&s.raws[2]).await;
    let multi = MultiLock::new(s.locks(name)).expect("locks");
    let waiting = tokio::spawn(async move { multi.try_lock_within(LONG).await });
    // Its subscription to lock 1's channel: it waits for lock 1, after the sweep.
    wait_numsub(&s.raws[1], &channel_of(name), 1, LONG).await;
    assert_eq!(
        s.holding([0, 2], name).await,
        vec![0],
        "lock 0 held, lock 2 given back"
    );
    assert_eq!(
        script_runs(&s.raws[2]).await,
        2,
        "lock 2 was taken by the sweep and released"
    );
    holder.unlock().await.expect("holder releases");
    let guard = waiting
        .await
        .expect("task")
        .expect("try_lock_within")
        .acquired()
        .expect("acquired once lock 1 was released");
    assert_eq!(s.holding(0..3, name).await, vec![0, 1, 2]);
    guard.unlock().await.expect("unlock");
    assert!(s.holding(0..3, name).await.is_empty());
}

/// Server 1 is paused (`CLIENT PAUSE`, 500 ms) when the MultiLock is taken: once lock 0 is
/// taken, locks 1 and 2 are asked for at once, so lock 2 is taken while server 1 is paused,
/// about 500 ms before lock 1 (its key's TTL is that much shorter). Taken one after the other,
/// lock 2 would be taken after lock 1.
#[tokio::test]
async fn the_locks_after_the_first_are_taken_at_once() {
    let s = Servers::start(3).await;
    let name = "multi:sweep";
    let multi = MultiLock::new(s.locks(name)).expect("locks");
    let _: Value = s.raws[1]
        .custom(fred::cmd!("CLIENT"), vec!["PAUSE", "500"])
        .await
        .expect("CLIENT PAUSE");
    let guard = multi.lock().await.expect("lock");
    let (ttl1, ttl2) = tokio::join!(pttl(&s.raws[1], name), pttl(&s.raws[2], name));
    assert!(
        ttl1 - ttl2 >= 250,
        "lock 2 was taken {} ms before lock 1 (PTTL {ttl1} and {ttl2} ms)",
        ttl1 - ttl2
    );
    guard.unlock().await.expect("unlock");
    assert!(s.holding(0..3, name).await.is_empty());
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
        .try_lock_within(Duration::from_secs(3))
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
        .try_lock_within_with_lease(Duration::from_secs(2), Duration::from_secs(10))
        .await
        .expect("try_lock_within")
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

#[tokio::test]
async fn five_servers_up_hold_the_multilock_on_every_one() {
    let s = Servers::start(5).await;
    let name = "multi:five";
    let multi = MultiLock::new(s.locks(name)).expect("five locks");
    let guard = multi
        .try_lock_within(Duration::from_secs(1))
        .await
        .expect("try_lock_within")
        .acquired()
        .expect("free on every server");
    assert_eq!(guard.parts().len(), 5);
    assert_eq!(s.holding(0..5, name).await, vec![0, 1, 2, 3, 4]);
    guard.unlock().await.expect("unlock");
    assert!(s.holding(0..5, name).await.is_empty());
}

/// The last one and then the last two of five servers are stopped (SIGKILL): the MultiLock needs
/// every part, so it is not acquired; the outage is the answer (no part was busy), and the parts
/// it took first (0 to 3, or 0 to 2) are released. The last ones, so that a MultiLock that
/// tolerated a failure would stop there acquired.
#[tokio::test]
async fn one_or_two_of_five_stopped_do_not_acquire_and_leave_nothing_held() {
    for down in [vec![4], vec![3, 4]] {
        let name = "multi:five-down";
        let mut s = Servers::start(5).await;
        let multi = MultiLock::new(s.locks(name)).expect("five locks");
        for &i in &down {
            s.servers[i].stop();
        }
        let started = std::time::Instant::now();
        let attempt = multi.try_lock_within(Duration::from_millis(500)).await;
        assert!(started.elapsed() < LONG, "{down:?} down: bounded");
        let err = match attempt {
            Ok(Attempt::Acquired(guard)) => {
                panic!("{down:?} down: acquired with {} parts", guard.parts().len())
            }
            Ok(Attempt::Busy) => panic!("{down:?} down: busy, not the outage"),
            Err(err) => err,
        };
        assert!(err.is_transient(), "{down:?} down: {err:?}");
        let up: Vec<usize> = (0..5).filter(|i| !down.contains(i)).collect();
        assert!(
            s.holding(up, name).await.is_empty(),
            "{down:?} down: the live ones were released"
        );
    }
}

/// The last of three servers is paused (SIGSTOP): its part waits all the wait that is left and
/// gets no answer, so the MultiLock (which needs every part) is not acquired, returns `Timeout`
/// at the end of its wait (not after the 10 s response timeout) and releases parts 0 and 1. The
/// acquire sent to the paused server runs once it resumes; the client's in-flight undo takes it
/// back, well before the 30 s watchdog lease it was given would expire.
#[tokio::test]
async fn a_paused_server_fails_the_multilock_within_the_wait_and_keeps_nothing_after_it_resumes() {
    let s = Servers::start(3).await;
    let name = "multi:paused";
    let multi = MultiLock::new(s.locks(name)).expect("locks");
    s.servers[2].pause();
    let started = std::time::Instant::now();
    let attempt = multi.try_lock_within(Duration::from_millis(600)).await;
    let took = started.elapsed();
    let held_while_paused = s.holding([0, 1], name).await;
    s.servers[2].resume();
    match attempt {
        Ok(Attempt::Acquired(guard)) => {
            panic!("acquired with {} of 3 parts", guard.parts().len())
        }
        Ok(Attempt::Busy) => panic!("busy: no server answered busy"),
        // The paused server's silence, reported as the part's wait ran out.
        Err(err) => assert!(matches!(err, Error::Timeout(_)), "{err:?}"),
    }
    assert!(took < LONG, "within the wait's budget: {took:?}");
    assert!(held_while_paused.is_empty(), "parts 0 and 1 were released");
    s.wait_gone(2, name, Duration::from_secs(3)).await;
    assert!(s.holding(0..3, name).await.is_empty());
    let guard = multi
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("free on every server at once");
    guard.unlock().await.expect("unlock");
}

const CROSS_PROCESS: &str = "contenders_in_separate_processes_never_hold_the_multilock_at_once";

/// Three processes, each with its own clients of the same three servers and each taking them
/// from another server on (so that each can hold some of the servers while another holds the
/// rest: only "every part or none" keeps them apart), take the MultiLock 20 times each. Sorted
/// by start, the holds never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_in_separate_processes_never_hold_the_multilock_at_once() {
    let name = "multi:processes";
    if let Some(urls) = contenders::child_url() {
        let multi = MultiLock::new(contender_locks(&urls, name).await).expect("locks");
        // Short rounds (waits in [100 ms, 200 ms)), so that two contenders each holding part
        // of the servers give up soon and try again, and a long lease for the hold.
        let acquire = || {
            contenders::take_in_short_rounds(100..200, |wait| {
                multi.try_lock_within_with_lease(wait, contenders::COMPOSITE_LEASE)
            })
        };
        contenders::hold_repeatedly(acquire, ferrisson::MultiGuard::unlock).await;
        return;
    }
    let s = Servers::start(3).await;
    contenders::assert_holds_never_overlap(
        &support::processes::test_name(module_path!(), CROSS_PROCESS),
        &s.urls(),
    )
    .await;
}
