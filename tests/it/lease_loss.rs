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
use support::fault::{FaultProxy, ProxyMode};
use support::redis_state::{exists, hgetall, wait_key_gone, wait_ttl_reset};
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

/// A guard dropped unreleased leaves its release to the background. When its hold was deleted
/// behind its back meanwhile (a bare DEL, which tells the holder nothing), the owner's next
/// acquire takes the field afresh; the late release must not free that new hold, or the owner
/// would believe it holds a free lock. The acquire waits for the dropped guard's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guards_late_release_never_frees_the_owners_next_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(Config::new(server.url())).await; // 30 s watchdog
    for round in 0..20 {
        let name = format!("loss:dropped:{round}");
        let lock = client.lock(&name).with_owner(Owner::new());
        let guard = lock.lock().await.expect("lock");
        let _: i64 = fred::prelude::KeysInterface::del(&raw, &name)
            .await
            .expect("DEL");
        drop(guard);
        let again = lock
            .lock_with_lease(Duration::from_secs(30))
            .await
            .expect("lock again");
        // Time for a release still queued to arrive, were there one.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let fields = hgetall(&raw, &name).await;
        assert_eq!(
            fields.get(again.holder_field()).map(String::as_str),
            Some("1"),
            "round {round}: the new hold is gone: {fields:?}"
        );
        assert!(!again.is_lost(), "round {round}");
        again.unlock().await.expect("unlock");
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

/// A holder frozen past its watchdog lease (here the runtime's only thread is blocked, so the
/// watchdog cannot renew; in the wild a stopped process or a long pause): the server dropped
/// the hold meanwhile, unseen by the lease table. The owner's next acquire takes the lock
/// afresh (the script's reply cannot tell that from a re-entry), so it is one hold, not a
/// second one on top of a lease that can no longer be proven: the old guard stays lost and
/// cannot release the new hold, and the new hold is renewed, not given up with the old lease.
#[tokio::test(flavor = "current_thread")]
async fn a_reentry_after_the_lease_ran_out_unseen_is_a_fresh_hold() {
    let name = "loss:frozen";
    let (_server, raw, lock, guard) = frozen_past_the_lease(name).await;
    assert!(guard.is_lost(), "its lease ended while it was frozen");

    let again = guard.reenter().await.expect("lock again");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    assert!(
        guard.is_lost(),
        "the new hold does not revive the lost lease"
    );
    assert!(!again.is_lost());
    let err = guard
        .unlock()
        .await
        .expect_err("the lost hold has nothing to release");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1, "untouched");
    wait_ttl_reset(&raw, name, WATCHDOG).await;
    assert!(!again.is_lost(), "renewed");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    again.unlock().await.expect("unlock");
    assert_eq!(exists(&raw, name).await, 0, "released for good");
}

/// A watchdog hold of `name` whose holder was frozen past its lease: taken, then the calling
/// thread blocked for the lease and half a second more (on a current-thread runtime nothing of
/// the client runs meanwhile: no renewal, no reply read, as in a frozen process), until the
/// server dropped it. Returns the server, a raw client of it, the lock and the old guard.
async fn frozen_past_the_lease(
    name: &str,
) -> (
    RedisServer,
    fred::clients::Client,
    ferrisson::Lock,
    ferrisson::LockGuard,
) {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(timed_config(
        server.url(),
        WATCHDOG,
        Duration::from_secs(30),
    ))
    .await;
    let lock = client.lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    std::thread::sleep(WATCHDOG + Duration::from_millis(500));
    assert_eq!(exists(&raw, name).await, 0, "the server dropped the hold");
    (server, raw, lock, guard)
}

// Releases of unknown outcome (issue 24) -------------------------------------------------------

/// Whether `result` is `Error::ReleaseUnknown` with `may_remain` and a cause that `cause`
/// accepts.
fn release_unknown(
    result: &ferrisson::Result<()>,
    may_remain: bool,
    cause: impl Fn(Option<&Error>) -> bool,
) -> bool {
    matches!(result, Err(Error::ReleaseUnknown { may_remain: m, cause: c, .. })
        if *m == may_remain && cause(c.as_deref()))
}

/// A client whose connections go through `proxy`, with a `watchdog` lease and a short response
/// timeout, so that a blackholed call times out at once.
async fn behind(proxy: &FaultProxy, watchdog: Duration) -> ferrisson::Client {
    connect_with(timed_config(
        proxy.url(),
        watchdog,
        Duration::from_millis(300),
    ))
    .await
}

/// An unlock whose reply is lost (the proxy forwards nothing, the reply times out) may or may
/// not have run: it is `Error::ReleaseUnknown`, with the hold possibly still on the server,
/// not `Ok` (and not a bare `Timeout`, which reads as "retry"). Once Redis answers, the client
/// settles the field: the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_whose_reply_is_lost_is_release_unknown() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let proxy = FaultProxy::start(server.port()).await;
    // A lease far beyond the test, so that only the settling frees the lock in time.
    let client = behind(&proxy, Duration::from_secs(10)).await;
    let name = "loss:unknown:reply";
    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    proxy.set_mode(ProxyMode::Blackhole);
    let unlocked = guard.unlock().await;
    assert!(
        release_unknown(&unlocked, true, |cause| matches!(
            cause,
            Some(Error::Timeout(_))
        )),
        "got {unlocked:?}"
    );
    let text = unlocked.expect_err("unknown").to_string();
    assert!(
        text.contains(name) && text.contains("unknown outcome"),
        "{text}"
    );
    proxy.set_mode(ProxyMode::Pass);
    proxy.reset_all();
    wait_key_gone(&raw, name, Duration::from_secs(3)).await;
}

/// A release of a holder field that is in doubt (here: a re-entry whose reply was lost) is not
/// sent: the client's settling does its work. Its outcome is unknown until then, so it is
/// `Error::ReleaseUnknown` (without a cause of its own), never `Ok` (what it was before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_left_to_the_settling_of_its_field_is_release_unknown_not_ok() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let proxy = FaultProxy::start(server.port()).await;
    let client = behind(&proxy, Duration::from_secs(10)).await;
    let name = "loss:unknown:left";
    let lock = client.lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    proxy.set_mode(ProxyMode::Blackhole);
    let again = lock.try_lock().await.map(|attempt| attempt.is_acquired());
    assert!(matches!(again, Err(Error::Timeout(_))), "got {again:?}");
    // The field is in doubt now; Redis is still out of reach.
    let unlocked = guard.unlock().await;
    assert!(
        release_unknown(&unlocked, true, |cause| cause.is_none()),
        "got {unlocked:?}"
    );
    proxy.set_mode(ProxyMode::Pass);
    proxy.reset_all();
    // The settling brings the field down to what the client holds: nothing.
    wait_key_gone(&raw, name, Duration::from_secs(3)).await;
}

/// `unlock_settled` waits for the settling of a release whose reply was lost: the release
/// never reached Redis (the proxy dropped it), so the settling finds the hold still there,
/// which proves that it lasted, and takes it back: `Ok`, and the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_settled_proves_a_hold_the_server_still_had() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let proxy = FaultProxy::start(server.port()).await;
    let client = behind(&proxy, Duration::from_secs(5)).await;
    let name = "loss:settled:kept";
    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    proxy.set_mode(ProxyMode::Blackhole);
    let unlock = tokio::spawn(guard.unlock_settled());
    // The release times out (300 ms) and waits for the settling, which waits for Redis.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !unlock.is_finished(),
        "unlock_settled waits for the settling"
    );
    assert_eq!(
        hgetall(&raw, name).await.len(),
        1,
        "the hold is still there"
    );
    proxy.set_mode(ProxyMode::Pass);
    proxy.reset_all();
    let unlocked = tokio::time::timeout(Duration::from_secs(4), unlock)
        .await
        .expect("settled within the lease")
        .expect("the unlock task");
    assert!(unlocked.is_ok(), "got {unlocked:?}");
    assert_eq!(support::redis_state::exists(&raw, name).await, 0);
}

/// The scenario in the library: Redis is killed while a hold is held and comes back
/// empty; the holder's release fails at once ("Connection closed unexpectedly"), and another
/// owner takes the lock. Settling, the client finds nothing of the hold on the server: nothing
/// shows that it lasted, so `unlock_settled` says `ReleaseUnknown` with `may_remain: false`,
/// and the other owner's hold is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_settled_after_a_restart_without_persistence_is_release_unknown() {
    let mut server = RedisServer::start();
    let client = connect_with(timed_config(
        server.url(),
        Duration::from_secs(10),
        Duration::from_secs(2),
    ))
    .await;
    let name = "loss:settled:restarted";
    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    server.kill();
    // Long enough for the client to see its connections closed: the release fails at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let unlock = tokio::spawn(guard.unlock_settled());
    server.restart();
    let raw = raw_client(&server.url()).await;
    let other = connect_with(Config::new(server.url())).await;
    let taken = other
        .lock(name)
        .with_owner(Owner::new())
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("the restarted server is empty: another owner takes the lock");
    let unlocked = tokio::time::timeout(Duration::from_secs(8), unlock)
        .await
        .expect("settled within the lease")
        .expect("the unlock task");
    assert!(
        release_unknown(&unlocked, false, |cause| matches!(
            cause,
            Some(Error::Unavailable(_))
        )),
        "got {unlocked:?}"
    );
    assert_eq!(
        hgetall(&raw, name).await.keys().collect::<Vec<_>>(),
        [taken.holder_field()],
        "the other owner's hold is untouched"
    );
    taken.unlock().await.expect("the other owner releases");
}

/// `unlock_settled` is bounded by the hold's proven lease end: a release that gets no answer
/// (Redis out of reach, a response timeout far beyond the lease) is given up there, as
/// `ReleaseUnknown` with the hold possibly still on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_settled_gives_up_at_the_proven_lease_end() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let client = connect_with(timed_config(proxy.url(), WATCHDOG, Duration::from_secs(10))).await;
    let name = "loss:settled:bounded";
    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    proxy.set_mode(ProxyMode::Blackhole);
    let asked = Instant::now();
    let unlocked = guard.unlock_settled().await;
    let took = asked.elapsed();
    assert!(
        took <= WATCHDOG + Duration::from_millis(300),
        "unlock_settled took {took:?}, past the lease ({WATCHDOG:?})"
    );
    assert!(
        release_unknown(&unlocked, true, |cause| matches!(
            cause,
            Some(Error::Timeout(_))
        )),
        "got {unlocked:?}"
    );
}

/// A guard whose fixed lease has passed its proven end (measured from when the acquire was
/// sent) reports the loss at its release, also when the server still kept the hold a little
/// longer (its TTL started when the delayed acquire reached it): the release frees what the
/// server kept, but says `LeaseLost`, as `is_lost` and `lost` do, never `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_past_the_proven_lease_end_is_lease_lost_even_if_the_server_kept_the_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let proxy = FaultProxy::start(server.port()).await;
    let client = connect_with(timed_config(proxy.url(), WATCHDOG, Duration::from_secs(10))).await;
    let name = "loss:past-the-end";
    let lease = Duration::from_secs(6);
    // The acquire reaches Redis 2 s after it was sent (and its reply 2 s later, within the
    // lease): the server's TTL ends that much later than the lease the client can prove, a
    // window far longer than a stall between `lost()` and the PTTL read below.
    proxy.set_mode(ProxyMode::Delay(Duration::from_secs(2)));
    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock_with_lease(lease)
        .await
        .expect("lock");
    proxy.set_mode(ProxyMode::Pass);
    let lost = tokio::time::timeout(lease, guard.lost()).await;
    assert!(lost.is_ok(), "lost() fires at the proven end of the lease");
    assert!(guard.is_lost());
    let left = support::redis_state::pttl(&raw, name).await;
    assert!(
        left > 100,
        "the server still keeps the hold ({left} ms left)"
    );
    let unlocked = guard.unlock().await;
    assert!(
        matches!(unlocked, Err(Error::LeaseLost { .. })),
        "got {unlocked:?}"
    );
    assert_eq!(
        support::redis_state::exists(&raw, name).await,
        0,
        "what the server kept is released all the same"
    );
}

/// The other side of the rule above: a re-entry resets the key's TTL to its own lease, so the
/// first hold's own (shorter) lease end says nothing about the key any more (its `is_lost` may
/// turn true at it), and its release trusts the server: `Ok`, also through `unlock_settled`,
/// whose bound is then the latest end the field was given, not the first hold's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_whose_lease_a_re_entry_extended_releases_ok_after_its_own_end() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let proxy = FaultProxy::start(server.port()).await;
    let client = connect_with(Config::new(proxy.url())).await;
    let name = "loss:re-armed";
    let lock = client.lock(name).with_owner(Owner::new());
    // The re-entry must reach the server before the first lease ends (else it is a fresh
    // hold): short, but far longer than a stall.
    let first_lease = Duration::from_secs(2);
    let first = lock.lock_with_lease(first_lease).await.expect("lock");
    let again = lock
        .lock_with_lease(Duration::from_secs(60))
        .await
        .expect("re-enter with a longer lease");
    tokio::time::sleep(first_lease + Duration::from_millis(200)).await;
    assert!(
        support::redis_state::pttl(&raw, name).await > 50_000,
        "the re-entry set the key's TTL"
    );
    again.unlock().await.expect("partial release");
    // A reply that takes a moment: a bound at the first hold's own (past) end would give up.
    proxy.set_mode(ProxyMode::Delay(Duration::from_millis(50)));
    let unlocked = first.unlock_settled().await;
    assert!(unlocked.is_ok(), "got {unlocked:?}");
    assert_eq!(support::redis_state::exists(&raw, name).await, 0);
}

/// How the same owner takes the lock again in the tests below.
#[derive(Clone, Copy, Debug)]
enum Again {
    /// A fixed lease of 10 s.
    Fixed,
    /// The watchdog lease.
    Watchdog,
}

impl Again {
    async fn lock(self, lock: &ferrisson::Lock) -> ferrisson::LockGuard {
        match self {
            Again::Fixed => lock.lock_with_lease(Duration::from_secs(10)).await,
            Again::Watchdog => lock.lock().await,
        }
        .expect("lock again")
    }
}

/// After the old hold's lease ended on the server, the same owner's new acquisition is one
/// fresh hold: counted once, held and (under the watchdog) renewed; the old guard stays lost
/// and its unlock is `LeaseLost` and leaves the new hold alone.
async fn the_new_hold_is_fresh(
    raw: &fred::clients::Client,
    lock: &ferrisson::Lock,
    old: ferrisson::LockGuard,
    again: Again,
) {
    let name = lock.name().to_owned();
    let new = again.lock(lock).await;
    assert_eq!(
        lock.hold_count().await.expect("hold_count"),
        1,
        "{again:?}: the server counts one hold"
    );
    assert!(
        old.is_lost(),
        "{again:?}: the new hold does not revive the old one"
    );
    assert!(!new.is_lost(), "{again:?}: the new hold is held");
    let err = old
        .unlock()
        .await
        .expect_err("the old hold has nothing to release");
    assert!(matches!(err, Error::LeaseLost { .. }), "{again:?}: {err:?}");
    assert_eq!(
        lock.hold_count().await.expect("hold_count"),
        1,
        "{again:?}: the old guard's unlock left the new hold alone"
    );
    if let Again::Watchdog = again {
        wait_ttl_reset(raw, &name, WATCHDOG).await;
        assert_eq!(lock.hold_count().await.expect("hold_count"), 1, "renewed");
    }
    assert!(!new.is_lost(), "{again:?}: still held");
    // The old holds' field was put in doubt (their end was only read from the clock): while
    // the reconciler has not settled it, the release is left to it, and its outcome is
    // unknown (`ReleaseUnknown`, never `Ok`, issue 24); once settled, the release runs.
    match new.unlock().await {
        Ok(()) | Err(Error::ReleaseUnknown { .. }) => {}
        Err(err) => panic!("{again:?}: unlock the new hold: {err:?}"),
    }
    wait_key_gone(raw, &name, Duration::from_secs(2)).await;
}

/// A fixed lease ran out on the server, unseen by the lease table (no watchdog times fixed
/// leases); the same owner then locks again, with a fixed lease or the watchdog's. The
/// acquire's nil reply looks like a re-entry, but the server took the lock afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_that_ran_out_is_not_reentered() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(timed_config(server.url(), WATCHDOG, Duration::from_secs(5))).await;
    for again in [Again::Fixed, Again::Watchdog] {
        let name = format!("loss:fixed-ran-out:{again:?}");
        let lock = client.lock(&name).with_owner(Owner::new());
        let old = lock
            .lock_with_lease(Duration::from_millis(300))
            .await
            .expect("lock");
        wait_key_gone(&raw, &name, Duration::from_secs(2)).await;
        assert!(
            old.is_lost(),
            "{again:?}: a fixed lease's end is read from the clock"
        );
        the_new_hold_is_fresh(&raw, &lock, old, again).await;
    }
}

/// The reverse: a watchdog lease that ended unseen (its holder frozen past it, as in
/// `a_reentry_after_the_lease_ran_out_unseen_is_a_fresh_hold`), then the same owner locks
/// again with a fixed lease.
#[tokio::test(flavor = "current_thread")]
async fn a_watchdog_lease_that_ran_out_unseen_is_not_reentered_by_a_fixed_lease() {
    let (_server, raw, lock, old) = frozen_past_the_lease("loss:frozen:fixed").await;
    the_new_hold_is_fresh(&raw, &lock, old, Again::Fixed).await;
}

/// Redisson's re-entry resets the key's TTL to the new lease (protocol §2.2), and a partial
/// release re-arms the last fixed lease (§2.3): a short inner hold sets the lifetime of the
/// whole lock, whatever the outer guard's own lease said. The outer guard must not claim a
/// hold the server dropped, nor re-enter or release the owner's next, fresh hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_inner_lease_ends_the_outer_hold_too() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(timed_config(server.url(), WATCHDOG, Duration::from_secs(5))).await;
    let name = "loss:short-inner";
    let lock = client.lock(name).with_owner(Owner::new());
    let outer = lock
        .lock_with_lease(Duration::from_secs(10))
        .await
        .expect("lock");
    // Short, but the three calls below must fit in it however loaded the machine is.
    let short = Duration::from_secs(2);
    let inner = lock.lock_with_lease(short).await.expect("re-enter");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 2);
    inner.unlock().await.expect("partial release");
    assert!(
        !outer.is_lost(),
        "the key lives on for the re-armed short lease"
    );
    lost_within(&outer, short + Duration::from_secs(2)).await;
    wait_key_gone(&raw, name, Duration::from_secs(2)).await;
    assert!(
        outer.is_lost(),
        "the server dropped the lock with its last TTL"
    );
    the_new_hold_is_fresh(&raw, &lock, outer, Again::Fixed).await;
}

/// A watchdog hold re-entered with a fixed lease shorter than the renewal interval: the key's
/// TTL is now that lease (§2.2), and the watchdog renews before it ends, so the watchdog hold
/// (and with it the re-entry) stays held as long as it is not released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_fixed_reentry_of_a_watchdog_hold_is_renewed_in_time() {
    // Renewals every 3 s (a grid tick of 300 ms); the re-entry's lease ends well before the
    // first one was due. The watchdog renews at half of what is left of it, so the short
    // lease is the margin this test gives the renewal: at least 2 s and 20 round trips as
    // measured now, and below the renewal interval, which is what is tested.
    let watchdog = Duration::from_secs(9);
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(timed_config(server.url(), watchdog, Duration::from_secs(5))).await;
    let round_trip = support::round_trip(&client).await;
    let short = support::short_lease(round_trip, Duration::from_secs(2));
    assert!(
        short < watchdog / 3,
        "round trips of {round_trip:?} leave no room for a lease below the renewal interval"
    );
    let name = "loss:short-reentry";
    let lock = client.lock(name).with_owner(Owner::new());
    let outer = lock.lock().await.expect("lock");
    let inner = lock.lock_with_lease(short).await.expect("re-enter");
    // Past the short lease and the first renewal interval.
    tokio::time::sleep(watchdog / 3 + Duration::from_millis(300)).await;
    assert_eq!(
        lock.hold_count().await.expect("hold_count"),
        2,
        "the watchdog kept the lock (PTTL {})",
        support::redis_state::pttl(&raw, name).await
    );
    assert!(!outer.is_lost());
    // A fixed-lease guard reports the end of its own lease, even when the server keeps the
    // lock longer for another hold of its owner; its hold is still counted and released.
    assert!(inner.is_lost(), "its own lease is over");
    inner.unlock().await.expect("partial release");
    wait_ttl_reset(&raw, name, watchdog).await;
    assert!(!outer.is_lost());
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    outer.unlock().await.expect("unlock");
    assert_eq!(exists(&raw, name).await, 0);
}

/// An acquire whose reply comes only after the lease it took has ended (a slow reply here; a
/// frozen process does the same) is not handed out: the server may have let another owner in
/// meanwhile. Every reply through the proxy is slower than the lease, so no acquisition can be
/// proven and the bounded wait ends without one; what the server kept is released, and a
/// prompt client then takes the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_outlives_its_lease_is_not_handed_out() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let slow = connect_with(timed_config(proxy.url(), WATCHDOG, Duration::from_secs(5))).await;
    let name = "loss:late-reply";
    // 300 ms each way: every reply comes 600 ms after its call was sent, past a 400 ms lease.
    proxy.set_mode(ProxyMode::Delay(Duration::from_millis(300)));
    let lease = Duration::from_millis(400);
    let attempt = slow
        .lock(name)
        .with_owner(Owner::new())
        .try_lock_within_with_lease(Duration::from_millis(1500), lease)
        .await
        .expect("an answer");
    if let ferrisson::Attempt::Acquired(guard) = &attempt {
        panic!(
            "handed out a hold whose reply came after its lease (lost: {}, {:?})",
            guard.is_lost(),
            guard.acquisition()
        );
    }
    // The spin lock polls in its own loop: the same rule.
    let attempt = slow
        .spin_lock(name)
        .with_owner(Owner::new())
        .try_lock_within_with_lease(Duration::from_millis(1500), lease)
        .await
        .expect("an answer");
    if let ferrisson::Attempt::Acquired(guard) = &attempt {
        panic!(
            "spin: handed out a hold whose reply came after its lease (lost: {}, {:?})",
            guard.is_lost(),
            guard.acquisition()
        );
    }
    proxy.set_mode(ProxyMode::Pass);
    let prompt = connect_with(Config::new(server.url())).await;
    let guard = prompt
        .lock(name)
        .with_owner(Owner::new())
        .try_lock_within(Duration::from_secs(3))
        .await
        .expect("an answer");
    assert!(
        matches!(guard, ferrisson::Attempt::Acquired(_)),
        "the lapsed holds were released or ran out"
    );
}

/// A local hand-off read only after the handed lease has ended (the waiter's task could not run:
/// here the runtime's only thread is blocked) is not handed out either: the waiter lets it go
/// and takes the lock again, so the guard it returns holds a live lease.
#[tokio::test(flavor = "current_thread")]
async fn a_hand_off_read_after_its_lease_ended_is_taken_again() {
    let server = RedisServer::start();
    let client = connect_with(Config::new(server.url())).await;
    let name = "loss:late-hand-off";
    let holder = client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("holder acquires");
    let lease = Duration::from_millis(300);
    let waiter = {
        let lock = client.lock(name).with_owner(Owner::new());
        tokio::spawn(async move { lock.lock_with_lease(lease).await })
    };
    support::wait_parked(&client, name, 1).await;
    holder
        .unlock()
        .await
        .expect("release, handing the lock over");
    // The waiter's task cannot run until this task yields: the handed lease ends meanwhile.
    std::thread::sleep(lease + Duration::from_millis(200));
    let guard = waiter
        .await
        .expect("the waiter's task")
        .expect("the waiter acquires");
    assert!(
        !guard.is_lost(),
        "handed out a hold whose lease had ended ({:?})",
        guard.acquisition()
    );
    guard.unlock().await.expect("release of a live hold");
}

/// A guard dropped after its lease ran out sends no release behind the owner's back: its
/// owner's next acquire, sent at once, takes the lock afresh, and a late release of the old
/// hold would free that new one. The old hold is given up instead (the reconciler takes back
/// whatever the server kept), and the new hold stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_after_its_lease_ran_out_leaves_the_next_hold_alone() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(Config::new(server.url())).await;
    let name = "loss:dropped-late";
    let lock = client.lock(name).with_owner(Owner::new());
    for round in 0..20 {
        let old = lock
            .lock_with_lease(Duration::from_millis(100))
            .await
            .expect("lock");
        wait_key_gone(&raw, name, Duration::from_secs(2)).await;
        assert!(old.is_lost(), "round {round}: the lease ran out");
        drop(old);
        let new = lock
            .lock_with_lease(Duration::from_secs(10))
            .await
            .expect("lock again");
        // Time for a release the janitor had queued to land.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            lock.hold_count().await.expect("hold_count"),
            1,
            "round {round}: the new hold is on the server"
        );
        assert!(!new.is_lost(), "round {round}");
        new.unlock().await.expect("release of the new hold");
    }
}
