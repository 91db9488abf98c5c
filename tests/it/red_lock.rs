//! RedLock (Redisson's `RedissonRedLock`, protocol §9) over 3 and 5 independent redis-servers,
//! one client each: the majority rule with servers stopped or paused, nothing left held when it
//! fails, the lease recalculation and validity, keys of the wrong type, contenders in separate
//! processes, and the blocking twin.

use crate::support;

use std::time::Duration;

use ferrisson::{Error, Owner, RedLock};
use fred::prelude::*;
use support::contenders::{self, micros_since_epoch};
use support::processes::CONTENDER_INDEX;
use support::redis_state::{command_calls, reset_stats};
use support::servers::Servers;

const LONG: Duration = Duration::from_secs(5);

#[tokio::test]
async fn all_servers_up_the_redlock_is_held_on_every_one_and_released_from_all() {
    let s = Servers::start(3).await;
    let name = "red:all";
    let red = RedLock::new(s.locks(name)).expect("three locks");
    let guard = red
        .try_lock_within(Duration::from_secs(1))
        .await
        .expect("try_lock_within")
        .acquired()
        .expect("free on every server");
    assert_eq!(guard.parts().len(), 3);
    assert_eq!(s.holding(0..3, name).await, vec![0, 1, 2]);
    assert!(red.is_held_by_current_owner().await.expect("held by"));
    assert!(!guard.is_lost());
    assert_eq!(guard.validity(), None, "the watchdog lease has no validity");

    // Another owner finds it busy (one attempt per lock, no wait).
    let other = red.with_owner(Owner::new());
    assert!(other.try_lock().await.expect("try_lock").is_busy());
    assert_eq!(s.holding(0..3, name).await, vec![0, 1, 2]);

    guard.unlock().await.expect("unlock");
    assert!(s.holding(0..3, name).await.is_empty());
    let again = other.try_lock().await.expect("try_lock");
    assert!(again.is_acquired(), "free again after the unlock");
}

#[tokio::test]
async fn fewer_than_three_locks_are_refused() {
    let s = Servers::start(2).await;
    let err = RedLock::new(s.locks("red:few")).expect_err("two locks");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let err = RedLock::new([]).expect_err("no locks");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let empty_name = RedLock::new([
        s.clients[0].lock(""),
        s.clients[1].lock("x"),
        s.clients[0].lock("x"),
    ]);
    assert!(matches!(empty_name, Err(Error::InvalidArgument(_))));
}

/// Stops the servers `down` (SIGKILL), then tries the RedLock with a 1 s wait.
async fn try_with_down(
    n: usize,
    down: &[usize],
    name: &str,
) -> (
    Servers,
    ferrisson::Result<ferrisson::Attempt<ferrisson::MultiGuard>>,
) {
    let mut s = Servers::start(n).await;
    let red = RedLock::new(s.locks(name)).expect("locks");
    for &i in down {
        s.servers[i].stop();
    }
    let attempt = red.try_lock_within(Duration::from_secs(1)).await;
    (s, attempt)
}

#[tokio::test]
async fn a_majority_up_acquires_one_of_three_or_two_of_five_down() {
    for (n, down) in [(3, vec![1]), (5, vec![0, 3])] {
        let name = "red:quorum";
        let (s, attempt) = try_with_down(n, &down, name).await;
        let guard = attempt
            .expect("a majority answers")
            .acquired()
            .unwrap_or_else(|| panic!("{n} servers, {down:?} down: acquired"));
        let up: Vec<usize> = (0..n).filter(|i| !down.contains(i)).collect();
        assert_eq!(guard.parts().len(), up.len(), "held on every live server");
        assert_eq!(s.holding(up.clone(), name).await, up);
        assert!(!guard.is_lost(), "a majority is held");
        guard.unlock().await.expect("a majority released");
        assert!(s.holding(up, name).await.is_empty());
    }
}

#[tokio::test]
async fn a_minority_up_does_not_acquire_and_leaves_nothing_held() {
    for (n, down) in [(3, vec![0, 2]), (5, vec![1, 2, 4])] {
        let name = "red:minority";
        let (s, attempt) = try_with_down(n, &down, name).await;
        // No server answered "busy": the outage is the answer, not `Busy`.
        let err = attempt.expect_err("no majority");
        assert!(err.is_transient(), "{n} servers, {down:?} down: {err:?}");
        let up: Vec<usize> = (0..n).filter(|i| !down.contains(i)).collect();
        assert!(
            s.holding(up, name).await.is_empty(),
            "{n} servers, {down:?} down: the live ones were released"
        );
    }
}

/// A paused server (SIGSTOP) does not answer within its share of the wait: the RedLock goes on
/// with the others and is held by the majority. The acquire sent to the paused server is dropped
/// at its share's end; the client's in-flight undo (`kit::in_flight`) takes back what it took
/// once the server runs again. With the watchdog lease, the key would otherwise live 30 s.
#[tokio::test]
async fn a_paused_server_is_outvoted_within_the_wait_and_keeps_nothing_after_it_resumes() {
    let s = Servers::start(3).await;
    let name = "red:paused";
    let red = RedLock::new(s.locks(name)).expect("locks");
    s.servers[0].pause();
    let started = std::time::Instant::now();
    let attempt = red.try_lock_within(Duration::from_millis(900)).await;
    let took = started.elapsed();
    s.servers[0].resume();
    let guard = attempt
        .expect("the others answer")
        .acquired()
        .expect("held by the majority");
    assert!(
        took < LONG,
        "within the wait's budget, not the 10 s response timeout: {took:?}"
    );
    assert_eq!(guard.parts().len(), 2);
    assert_eq!(s.holding([1, 2], name).await, vec![1, 2]);
    // The script ran on the paused server once it resumed; its hold is taken back.
    s.wait_gone(0, name, Duration::from_secs(3)).await;
    guard.unlock().await.expect("unlock");
    assert!(s.holding(0..3, name).await.is_empty());
}

#[tokio::test]
async fn a_wrong_type_key_counts_as_a_failed_server_and_is_reported_without_a_majority() {
    let s = Servers::start(3).await;
    let name = "red:wrongtype";
    let red = RedLock::new(s.locks(name)).expect("locks");
    let _: () = s.raws[1]
        .set(name, "not a lock", None, None, false)
        .await
        .expect("SET");
    let guard = red
        .try_lock_within(Duration::from_millis(600))
        .await
        .expect("two of three servers are fine")
        .acquired()
        .expect("held by the majority");
    assert_eq!(guard.parts().len(), 2);
    guard.unlock().await.expect("unlock");

    let _: () = s.raws[2]
        .set(name, "not a lock", None, None, false)
        .await
        .expect("SET");
    let err = red
        .try_lock_within(Duration::from_millis(600))
        .await
        .expect_err("no majority");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert!(!s.exists(0, name).await, "the one lock taken was released");

    // A round that fails on a wrong type is the last, even when another lock was only busy
    // (which alone would start another round): lock 0 is taken and released once.
    let _: i64 = s.raws[2].del(name).await.expect("DEL");
    let _holder = support::hold_with_lease(&s.clients[2], name, LONG).await;
    reset_stats(&s.raws[0]).await;
    let err = red
        .try_lock_within(Duration::from_millis(900))
        .await
        .expect_err("no majority");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let scripts =
        command_calls(&s.raws[0], "evalsha").await + command_calls(&s.raws[0], "eval").await;
    assert_eq!(
        scripts, 2,
        "one acquire and one release of lock 0: a single round"
    );
}

/// Locks 1 and 2 are held by another owner for 4 s; with a 4.8 s wait each lock gets a third
/// of it (1.6 s), so the first round fails on both (at about 1.6 s and 3.2 s), releases lock 0,
/// and the second round, from lock 0, takes all three once the holds expire: not before 4 s
/// after the holds were asked for (their TTLs start later on the servers).
#[tokio::test]
async fn a_failed_round_is_released_and_the_next_starts_from_the_first_lock() {
    let s = Servers::start(3).await;
    let name = "red:rounds";
    let lease = Duration::from_secs(4);
    let before_holds = std::time::Instant::now();
    let _held: Vec<_> = futures::future::join_all(
        [1, 2].map(|i| support::hold_with_lease(&s.clients[i], name, lease)),
    )
    .await;
    let red = RedLock::new(s.locks(name)).expect("locks");
    let guard = red
        .try_lock_within(Duration::from_millis(4800))
        .await
        .expect("try_lock_within")
        .acquired()
        .expect("the second round acquires");
    assert!(
        before_holds.elapsed() >= lease,
        "acquired {:?} after the holds were asked for, before their lease could end",
        before_holds.elapsed()
    );
    assert_eq!(guard.parts().len(), 3, "the second round took every lock");
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn the_lease_recalculation_sets_every_key_to_the_lease_and_tells_the_guards() {
    let s = Servers::start(3).await;
    let name = "red:relet";
    let red = RedLock::new(s.locks(name)).expect("locks");
    let red = &red;
    let acquire = |lease| async move {
        red.try_lock_within_with_lease(Duration::from_secs(5), lease)
            .await
            .expect("try_lock_within")
            .acquired()
            .expect("free")
    };
    // While acquiring, the parts hold twice the wait (10 s); at the end, the lease (20 s).
    let guard = acquire(Duration::from_secs(20)).await;
    s.assert_pttl_within(0..3, name, 19_000..=20_000).await;
    guard.unlock().await.expect("unlock");

    // A lease shorter than twice the wait: the keys and the parts' guards end with the lease
    // (2 s, not the 10 s the parts held while acquiring).
    let lease = Duration::from_secs(2);
    let guard = acquire(lease).await;
    s.assert_pttl_within(0..3, name, 1..=2_000).await;
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    assert!(
        guard.parts().iter().all(|part| part.is_lost()),
        "each part's guard knows its lease ended"
    );
    assert!(guard.is_lost());
    tokio::time::timeout(Duration::from_millis(100), guard.lost())
        .await
        .expect("lost() has fired");
}

#[tokio::test]
async fn validity_is_below_the_lease_and_decreases_with_time() {
    let s = Servers::start(3).await;
    let red = RedLock::new(s.locks("red:validity")).expect("locks");
    let lease = Duration::from_secs(2);
    let started = std::time::Instant::now();
    let guard = red
        .try_lock_within_with_lease(Duration::from_millis(500), lease)
        .await
        .expect("try_lock_within")
        .acquired()
        .expect("free");
    let first = guard.validity().expect("a fixed lease");
    // The drift allowance: 1 % of the lease plus 2 ms. The validity counts from when the
    // acquisition began, which was after `started`: it is at least what is left of the lease
    // since then.
    let drift = Duration::from_millis(22);
    assert!(first <= lease - drift, "{first:?}");
    let at_least = lease
        .saturating_sub(started.elapsed())
        .saturating_sub(drift);
    assert!(first >= at_least, "{first:?}, less than {at_least:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = guard.validity().expect("a fixed lease");
    assert!(
        first - second >= Duration::from_millis(200),
        "{first:?} then {second:?}"
    );
    guard.unlock().await.expect("unlock");
}

#[test]
fn the_blocking_redlock_is_held_per_thread() {
    let (_servers, clients) = Servers::start_blocking(3);
    let red = ferrisson::blocking::RedLock::new(clients.iter().map(|c| c.lock("red:blocking")))
        .expect("locks");
    let guard = red
        .try_lock_within_with_lease(Duration::from_secs(1), Duration::from_secs(5))
        .expect("try_lock_within")
        .acquired()
        .expect("free");
    assert_eq!(guard.parts(), 3);
    assert!(guard.validity().expect("fixed lease") < Duration::from_secs(5));
    let other = red.clone();
    let busy = std::thread::spawn(move || other.try_lock().expect("try_lock").is_busy())
        .join()
        .expect("thread");
    assert!(busy, "another thread is another owner");
    guard.unlock().expect("unlock");
    let other = red.clone();
    let acquired = std::thread::spawn(move || {
        let guard = other.lock().expect("lock");
        guard.unlock().expect("unlock");
    })
    .join();
    assert!(acquired.is_ok());
    assert!(
        ferrisson::blocking::RedLock::new(clients.iter().take(2).map(|c| c.lock("x"))).is_err()
    );
}

/// The env variable that makes this test binary a contender process of the test below.
const CHILD_URLS: &str = "FERRISSON_REDLOCK_CHILD_URLS";
const CROSS_PROCESS: &str = "contenders_in_separate_processes_never_hold_the_redlock_at_once";

/// Three processes, each with its own clients of the same three servers and each taking them in
/// another order, take the RedLock 10 times each. Sorted by start, the holds never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_in_separate_processes_never_hold_the_redlock_at_once() {
    let name = "red:processes";
    if let Ok(urls) = std::env::var(CHILD_URLS) {
        // A contender: one line per hold, `HOLD <start µs> <end µs>`.
        let mut locks = Vec::new();
        for url in urls.split(' ') {
            let client = ferrisson::Client::connect(url)
                .await
                .expect("child connects");
            locks.push(client.lock(name));
        }
        // Each contender starts from another server, so that two of them can each hold some
        // of the servers at once: only the majority rule keeps them apart.
        let first: usize = std::env::var(CONTENDER_INDEX)
            .expect("the contender's number")
            .parse()
            .expect("a number");
        let shift = first % locks.len();
        locks.rotate_left(shift);
        let red = RedLock::new(locks).expect("locks");
        for _ in 0..10 {
            // Short rounds (waits in [250 ms, 500 ms)), and a long lease for the hold.
            let guard = contenders::take_in_short_rounds(250..500, |wait| {
                red.try_lock_within_with_lease(wait, contenders::COMPOSITE_LEASE)
            })
            .await;
            let start = micros_since_epoch();
            tokio::time::sleep(Duration::from_millis(5)).await;
            let end = micros_since_epoch();
            println!("HOLD {start} {end}");
            guard.unlock().await.expect("child unlocks");
        }
        return;
    }
    let s = Servers::start(3).await;
    let urls: Vec<String> = s.servers.iter().map(|server| server.url()).collect();
    let mut holds: Vec<(u128, u128)> = contenders::run(
        &support::processes::test_name(module_path!(), CROSS_PROCESS),
        CHILD_URLS,
        &urls.join(" "),
        3,
    )
    .await
    .into_iter()
    .map(|numbers| (numbers[0], numbers[1]))
    .collect();
    assert_eq!(holds.len(), 30, "every contender reported its 10 holds");
    holds.sort_unstable();
    for pair in holds.windows(2) {
        let ((_, end_a), (start_b, _)) = (pair[0], pair[1]);
        assert!(start_b >= end_a, "two holds overlap: {holds:?}");
    }
}

/// A RedLock guard survives the loss of a minority of its locks and is lost with the majority.
#[tokio::test]
async fn the_guard_is_lost_once_fewer_than_a_majority_remain() {
    let s = Servers::start(3).await;
    let name = "red:lost";
    let red = RedLock::new(s.locks(name)).expect("locks");
    let guard = red.lock().await.expect("lock");
    let lost = guard.lost();
    let force = |i: usize| {
        let lock = s.clients[i].lock(name);
        async move { lock.force_unlock().await }
    };
    assert!(force(0).await.expect("force"));
    let part_lost = async {
        while !guard.parts()[0].is_lost() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(LONG, part_lost)
        .await
        .expect("lock 0 is lost");
    assert!(!guard.is_lost(), "two of three remain");
    assert!(force(1).await.expect("force"));
    tokio::time::timeout(LONG, lost)
        .await
        .expect("lost() fires once two of three are lost");
    assert!(guard.is_lost());
    let err = guard
        .unlock()
        .await
        .expect_err("only one lock was released");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert!(s.holding(0..3, name).await.is_empty());
}

/// Servers that answer, but slower than a part's share of a round's wait (a loaded machine): a
/// part that got no reply within its share is short of time, not facing an outage, so `lock()`
/// goes on with another round instead of failing with `Timeout` (as a single lock's `lock()`
/// fails only when Redis stays silent for the response timeout). Here every reply takes 1.2 s
/// until the first round is over, longer than any part's share (a 3 s lease: waits in
/// [1.5 s, 3 s), shares a third of that), and then the servers answer at once: the lock is
/// taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_goes_on_while_replies_are_slower_than_a_parts_share() {
    use support::fault::{FaultProxy, ProxyMode};
    let servers: Vec<_> = (0..3).map(|_| support::RedisServer::start()).collect();
    let mut proxies = Vec::new();
    let mut locks = Vec::new();
    for server in &servers {
        let proxy = FaultProxy::start(server.port()).await;
        let client = support::connect_with(ferrisson::Config::new(proxy.url())).await;
        locks.push(client.lock("red:slow"));
        proxies.push(proxy);
    }
    let red = RedLock::new(locks).expect("locks");
    for proxy in &proxies {
        proxy.set_mode(ProxyMode::Delay(Duration::from_millis(600)));
    }
    let lease = Duration::from_secs(3);
    let locking = tokio::spawn(async move {
        let guard = red.lock_with_lease(lease).await?;
        guard.unlock().await
    });
    // Past the first round's wait (under the lease): its three parts got no reply in time.
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    for proxy in &proxies {
        proxy.set_mode(ProxyMode::Pass);
    }
    tokio::time::timeout(LONG, locking)
        .await
        .expect("locked once the servers answer in time")
        .expect("task")
        .expect("lock() goes on through slow rounds, and the unlock");
}

/// A guard whose validity is spent cannot show that the lock lasted, even while its parts'
/// keys, set later than the acquisition began, live on: its unlock releases them and says
/// `LeaseLost`, never `Ok`. Lock 0 is held by another owner for 1.5 s, so the acquisition takes
/// that long and the parts' 3 s leases end about 1.5 s after the validity does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_after_the_validity_is_spent_is_lease_lost() {
    let s = Servers::start(3).await;
    let name = "red:spent";
    let _held = support::hold_with_lease(&s.clients[0], name, Duration::from_millis(1500)).await;
    let red = RedLock::new(s.locks(name)).expect("locks");
    let guard = red
        .try_lock_within_with_lease(Duration::from_secs(6), Duration::from_secs(3))
        .await
        .expect("try_lock_within")
        .acquired()
        .expect("acquired once lock 0 is free");
    while guard.validity() != Some(Duration::ZERO) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(guard.is_lost(), "a spent validity is a lost lock");
    let unlocked = guard.unlock().await;
    assert!(
        matches!(unlocked, Err(Error::LeaseLost { .. })),
        "got {unlocked:?}"
    );
    assert!(
        s.holding(0..3, name).await.is_empty(),
        "every part released all the same"
    );
}
