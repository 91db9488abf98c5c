//! Wake-ups of waiting acquires: the unlock message on the lock channel, the shared per-client
//! subscription, TTL-bounded waits, force-unlock, hand-off under churn and re-subscription after
//! a server restart. Every test runs against its own real `redis-server`.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrisson::{Client, LockGuard, Owner, RemainingTtl, WokenBy};
use fred::prelude::*;
use support::fault::{FaultProxy, ProxyMode};
use support::redis_state::{
    channel_of, command_calls, hgetall, numsub, poll_until, reset_stats, wait_numsub, POLL_INTERVAL,
};
use support::{connect, hold_with_lease, raw_client, RedisServer};
use tokio::time::{sleep, timeout, Instant};

const HOLD: Duration = Duration::from_secs(20);

fn message_text(message: fred::types::Message) -> (String, String) {
    let value: String = message
        .value
        .convert()
        .expect("pub/sub payload is a string");
    (message.channel.to_string(), value)
}

// 1 -------------------------------------------------------------------------------------------

#[tokio::test]
async fn full_release_publishes_zero_and_partial_release_publishes_nothing() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let subscriber = raw_client(&server.url()).await;
    let name = "wake:partial";
    let channel = channel_of(name);
    let mut messages = subscriber.message_rx();
    subscriber
        .subscribe(channel.as_str())
        .await
        .expect("raw SUBSCRIBE");

    let lock = client.lock(name).with_owner(Owner::new());
    let outer = lock.lock().await.expect("first acquire");
    let inner = lock.lock().await.expect("reentrant acquire");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 2);

    inner.unlock().await.expect("partial release");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    if let Ok(message) = timeout(Duration::from_millis(300), messages.recv()).await {
        panic!("a partial (reentrant) release published {message:?}");
    }

    outer.unlock().await.expect("full release");
    let message = timeout(Duration::from_secs(2), messages.recv())
        .await
        .expect("no unlock message within 2 s of the full release")
        .expect("message receiver");
    assert_eq!(message_text(message), (channel.clone(), "0".to_string()));
    if let Ok(message) = timeout(Duration::from_millis(200), messages.recv()).await {
        panic!("one full release published a second message {message:?}");
    }
    assert!(!lock.is_locked().await.expect("is_locked"));
}

#[tokio::test]
async fn name_with_braces_publishes_on_channel_without_extra_braces() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let subscriber = raw_client(&server.url()).await;
    let name = "{order}:42";
    let right = "redisson_lock__channel:{order}:42";
    let wrong = "redisson_lock__channel:{{order}:42}";
    let mut messages = subscriber.message_rx();
    subscriber.subscribe(right).await.expect("raw SUBSCRIBE");
    subscriber.subscribe(wrong).await.expect("raw SUBSCRIBE");

    let lock = client.lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("acquire");
    guard.unlock().await.expect("release");

    let message = timeout(Duration::from_secs(2), messages.recv())
        .await
        .expect("no unlock message within 2 s")
        .expect("message receiver");
    assert_eq!(message_text(message), (right.to_string(), "0".to_string()));
    if let Ok(message) = timeout(Duration::from_millis(300), messages.recv()).await {
        panic!("unexpected second message {message:?}");
    }
}

// 2 -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_is_woken_by_the_unlock_message_not_by_the_lease() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    let waiter_client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "wake:message";

    let holder = holder_client.lock(name).with_owner(Owner::new());
    let guard = holder.lock_with_lease(HOLD).await.expect("holder acquires");

    let waiter_lock = waiter_client.lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move {
        let guard = waiter_lock.lock().await.expect("waiter acquires");
        (guard, Instant::now())
    });
    support::wait_parked(&waiter_client, name, 1).await;
    assert!(!waiter.is_finished(), "waiter got a lock that is held");

    let remaining = holder.remaining_ttl().await.expect("remaining_ttl");
    match remaining {
        RemainingTtl::Expires(left) => assert!(
            left > Duration::from_millis(18_500),
            "holder's lease should still be ~19 s, is {left:?}"
        ),
        other => panic!("holder's lock should expire in ~19 s, got {other:?}"),
    }
    guard.unlock().await.expect("holder releases");
    let released = Instant::now();

    let (waiter_guard, acquired_at) = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("waiter not woken within 5 s of the release")
        .expect("waiter task");
    let lag = acquired_at.saturating_duration_since(released);
    assert!(
        lag < Duration::from_millis(200),
        "waiter acquired {lag:?} after the release"
    );
    let acquisition = *waiter_guard.acquisition();
    assert_eq!(acquisition.woken_by, WokenBy::Message, "{acquisition:?}");
    assert!(
        acquisition.waited < Duration::from_secs(5),
        "waited {:?}, far less than the 20 s lease expected",
        acquisition.waited
    );
    let fields = hgetall(&raw, name).await;
    assert_eq!(
        fields.keys().collect::<Vec<_>>(),
        vec![waiter_guard.holder_field()]
    );
    waiter_guard.unlock().await.expect("waiter releases");
}

// 3 -------------------------------------------------------------------------------------------

/// A waiter that joins the subscription its client already holds to watch a holder's lease
/// (`lost()` listens on the lock channel) is woken by the release's message like any other: the
/// channel's wake rule is the waiter's, whoever subscribed first. A fenced lock's waiter is
/// never handed the lock locally, so only the message (or the 30 s lease) can wake it.
#[tokio::test]
async fn a_waiter_joining_a_watchers_subscription_is_woken_by_the_message() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "wake:watched";
    let channel = channel_of(name);
    let holder = client.fenced_lock(name).with_owner(Owner::new());
    let guard = holder.lock().await.expect("hold");
    let _lost = guard.lost(); // the client now watches the lock channel
    wait_numsub(&raw, &channel, 1, Duration::from_secs(3)).await;

    let waiter = client.fenced_lock(name).with_owner(Owner::new());
    let task = tokio::spawn(async move { waiter.lock().await });
    sleep(Duration::from_millis(300)).await; // refused, and parked on the shared subscription
    assert!(!task.is_finished());
    assert_eq!(numsub(&raw, &channel).await, 1, "one subscription, shared");
    guard.unlock().await.expect("release");
    let taken = timeout(Duration::from_secs(5), task)
        .await
        .expect("woken by the unlock message, not the 30 s lease")
        .expect("task")
        .expect("lock");
    assert_eq!(taken.acquisition().woken_by, WokenBy::Message);
    taken.unlock().await.expect("release");
}

/// A waiter retries after subscribing only once the server has its subscription. fred reports
/// a SUBSCRIBE done when it is written; a retry sent on the command connection at once can be
/// refused while the SUBSCRIBE is still on its way, and the release published meanwhile then
/// reaches nobody: the waiter parked on a free lock until its TTL (the family bench's fair-lock
/// hang). Here every SUBSCRIBE of the waiter's client takes 2 s to reach the server, and the
/// holder (another client) releases inside that window.
#[tokio::test]
async fn a_waiter_retries_only_after_the_server_has_its_subscription() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let (held, waiter) = hold_and_wait_via(&server, &proxy, "wake:slow-subscribe", || {
        proxy.set_mode(ProxyMode::DelaySubscribes(Duration::from_secs(2)));
    })
    .await;
    // Inside the window: the waiter's first attempt was refused and its SUBSCRIBE is held back.
    subscribe_held_back(&proxy, Duration::from_secs(5)).await;
    // Its retry, if it did not wait for the subscription, is refused by now.
    the_release_reaches_the_waiter(held, waiter, Duration::from_millis(100)).await;
}

/// The same after the subscriber reconnects: the waiters are woken to retry only once the
/// server has the restored subscriptions. Before, the restoring SUBSCRIBE counted as done once
/// written, the woken waiter retried and parked while it was still on its way, and a release
/// published meanwhile reached nobody.
#[tokio::test]
async fn after_a_reconnect_waiters_retry_only_once_the_server_has_their_subscriptions() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let proxy = FaultProxy::start(server.port()).await;
    let name = "wake:slow-resubscribe";
    let (held, waiter) = hold_and_wait_via(&server, &proxy, name, || {}).await;
    wait_numsub(&raw, &channel_of(name), 1, Duration::from_secs(5)).await;
    // Every connection drops; the restoring SUBSCRIBE is held back 2 s on its way.
    proxy.set_mode(ProxyMode::DelaySubscribes(Duration::from_secs(2)));
    proxy.reset_all();
    subscribe_held_back(&proxy, Duration::from_secs(10)).await;
    // A retry that did not wait for the subscription has been refused by now.
    the_release_reaches_the_waiter(held, waiter, Duration::from_millis(500)).await;
}

/// A waiter's task and the client it waits on.
type WaiterTask = tokio::task::JoinHandle<(ferrisson::Result<LockGuard>, Client)>;

/// A client of `server` holds lock `name` for [`HOLD`]; then, after `before_waiting`, a client
/// behind `proxy` starts waiting for it.
async fn hold_and_wait_via(
    server: &RedisServer,
    proxy: &FaultProxy,
    name: &'static str,
    before_waiting: impl FnOnce(),
) -> (LockGuard, WaiterTask) {
    let waiting_client = Client::connect(&proxy.url())
        .await
        .expect("connect via proxy");
    let holder = connect(server).await;
    let held = holder
        .lock(name)
        .lock_with_lease(HOLD)
        .await
        .expect("holder acquires");
    before_waiting();
    let waiter = tokio::spawn(async move {
        let guard = waiting_client.lock(name).lock().await;
        (guard, waiting_client)
    });
    (held, waiter)
}

/// Waits (at most `within`) until `proxy` holds back a SUBSCRIBE.
async fn subscribe_held_back(proxy: &FaultProxy, within: Duration) {
    poll_until(
        within,
        POLL_INTERVAL,
        || async { proxy.delayed() },
        |delayed| *delayed > 0,
    )
    .await
    .expect("a SUBSCRIBE is held back");
}

/// After `pause`, the holder releases inside the window; the waiter must get the lock by that
/// release, not by the holder's lease running out.
async fn the_release_reaches_the_waiter(held: LockGuard, waiter: WaiterTask, pause: Duration) {
    sleep(pause).await;
    held.unlock().await.expect("holder releases");
    let (guard, _client) = timeout(HOLD / 2, waiter)
        .await
        .expect("the waiter missed the release and waited for the holder's lease")
        .expect("waiter task");
    let guard = guard.expect("waiter acquires");
    assert_ne!(guard.acquisition().woken_by, WokenBy::Ttl);
    guard.unlock().await.expect("release");
}

#[tokio::test]
async fn try_lock_within_gives_up_after_its_wait_bound() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    let waiter_client = connect(&server).await;
    let name = "wake:bounded";
    let guard = hold_with_lease(&holder_client, name, HOLD).await;

    let waiter = waiter_client.lock(name).with_owner(Owner::new());
    let wait = Duration::from_millis(300);
    let start = Instant::now();
    let got = waiter.try_lock_within(wait).await.expect("try_lock_within");
    let took = start.elapsed();
    assert!(got.is_busy(), "got a lock that is held: {got:?}");
    assert!(
        took >= wait && took <= wait + Duration::from_millis(500),
        "try_lock_within({wait:?}) returned after {took:?}"
    );
    // Same client, other owner: the same bound applies.
    let same_client = holder_client.lock(name).with_owner(Owner::new());
    let start = Instant::now();
    let got = same_client
        .try_lock_within(wait)
        .await
        .expect("try_lock_within");
    let took = start.elapsed();
    assert!(got.is_busy(), "got a lock that is held: {got:?}");
    assert!(
        took >= wait && took <= wait + Duration::from_millis(500),
        "try_lock_within({wait:?}) returned after {took:?}"
    );
    guard.unlock().await.expect("holder releases");
}

/// Waiters that wait without a bound of their own (`lock()`) keep no timer: their line's one
/// timer wakes them at the lock's TTL (`Place::wake_at`, src/kit/handoff.rs). A holder of
/// another client whose lease runs out without a release (so no message) lets every one of
/// them in: the first woken by the TTL, the others handed the lock in turn.
#[tokio::test]
async fn unbounded_local_waiters_are_woken_at_the_ttl_by_their_lines_timer() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    let waiter_client = connect(&server).await;
    let name = "wake:line-timer";
    // Long enough that every waiter is in line before it ends, on a loaded machine too.
    let lease = Duration::from_millis(1500);
    let held_at = Instant::now();
    hold_with_lease(&holder_client, name, lease).await.detach();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let lock = waiter_client.lock(name).with_owner(Owner::new());
            tokio::spawn(async move {
                let guard = lock.lock().await?;
                let got = (*guard.acquisition(), held_at.elapsed());
                guard.unlock().await?;
                Ok::<_, ferrisson::Error>(got)
            })
        })
        .collect();
    let mut got = Vec::new();
    for waiter in waiters {
        let joined = timeout(lease + Duration::from_secs(10), waiter)
            .await
            .expect("a waiter without a bound still gets the lock after the lease ended");
        got.push(joined.expect("the waiter's task").expect("lock and unlock"));
    }
    got.sort_by_key(|(_, at)| *at);
    let (first, first_at) = got[0];
    assert_eq!(first.woken_by, WokenBy::Ttl, "{got:?}");
    assert!(first_at >= lease, "in before the lease ended: {got:?}");
    // Not at a later bound (the watchdog's 30 s): the timer fired at the lease's end.
    let (_, last_at) = got[got.len() - 1];
    assert!(last_at < lease + Duration::from_secs(5), "{got:?}");
}

#[tokio::test]
async fn waiter_acquires_when_a_short_lease_expires_woken_by_ttl() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    let waiter_client = connect(&server).await;
    let name = "wake:ttl";
    // Short, but long enough that the waiter's first attempt always comes before its end, on a
    // loaded machine too (the waiter must park on the TTL it learns).
    let lease = Duration::from_millis(1500);
    let held_at = Instant::now();
    let holder_guard = hold_with_lease(&holder_client, name, lease).await;

    let waiter = waiter_client.lock(name).with_owner(Owner::new());
    let guard = waiter
        .try_lock_within_with_lease(lease + Duration::from_secs(2), HOLD)
        .await
        .expect("try_lock_within")
        .acquired()
        .expect("waiter gets the lock once the short lease expired");
    let took = held_at.elapsed();
    let acquisition = *guard.acquisition();
    assert_eq!(acquisition.woken_by, WokenBy::Ttl, "{acquisition:?}");
    // The lease's TTL began on the server after `held_at`.
    assert!(
        took >= lease && took < lease + Duration::from_secs(2),
        "acquired {took:?} after the hold was asked for, expected right after its {lease:?} lease"
    );
    assert!(waiter.is_held_by_current_owner().await.expect("hexists"));
    // The expired holder's release must not touch the waiter's hold.
    assert!(
        matches!(
            holder_guard.unlock().await,
            Err(ferrisson::Error::LeaseLost { .. })
        ),
        "stale release"
    );
    assert_eq!(waiter.hold_count().await.expect("hold_count"), 1);
    guard.unlock().await.expect("waiter releases");
}

// 4 -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_a_waiter_and_reports_whether_a_lock_existed() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    let waiter_client = connect(&server).await;
    let admin_client = connect(&server).await;
    let name = "wake:force";

    let holder_guard = hold_with_lease(&holder_client, name, HOLD).await;
    let waiter_lock = waiter_client.lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move {
        let guard = waiter_lock.lock().await.expect("waiter acquires");
        (guard, Instant::now())
    });
    support::wait_parked(&waiter_client, name, 1).await;
    assert!(!waiter.is_finished(), "waiter got a lock that is held");

    let admin = admin_client.lock(name);
    assert!(admin.force_unlock().await.expect("force_unlock"));
    let forced = Instant::now();
    let (guard, acquired_at) = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("waiter not woken within 5 s of force_unlock")
        .expect("waiter task");
    let lag = acquired_at.saturating_duration_since(forced);
    assert!(
        lag < Duration::from_secs(1),
        "waiter acquired {lag:?} after force_unlock"
    );
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message);

    // The force-unlocked holder's release changes nothing.
    assert!(
        matches!(
            holder_guard.unlock().await,
            Err(ferrisson::Error::LeaseLost { .. })
        ),
        "stale release"
    );
    assert!(admin.is_locked().await.expect("is_locked"));
    guard.unlock().await.expect("waiter releases");
    assert!(!admin
        .force_unlock()
        .await
        .expect("force_unlock on a free lock"));
}

// 5 -------------------------------------------------------------------------------------------

/// Spawns `n` waiters on `client`'s lock `name`, each with its own owner; each returns its
/// acquisition after taking and releasing the lock.
fn spawn_waiters(
    client: &Client,
    name: &str,
    n: usize,
) -> Vec<tokio::task::JoinHandle<ferrisson::Acquisition>> {
    (0..n)
        .map(|_| {
            let lock = client.lock(name).with_owner(Owner::new());
            tokio::spawn(async move {
                let guard = lock.lock().await.expect("waiter acquires");
                let acquisition = *guard.acquisition();
                guard.unlock().await.expect("waiter releases");
                acquisition
            })
        })
        .collect()
}

async fn join_all(
    waiters: Vec<tokio::task::JoinHandle<ferrisson::Acquisition>>,
    within: Duration,
) -> Vec<ferrisson::Acquisition> {
    timeout(within, futures::future::join_all(waiters))
        .await
        .expect("waiters did not all finish in time")
        .into_iter()
        .map(|r| r.expect("waiter task"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_waiters_of_one_client_share_one_subscription() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    let waiter_client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "wake:shared";
    let channel = channel_of(name);
    reset_stats(&raw).await;

    let holder_guard = hold_with_lease(&holder_client, name, HOLD).await;
    let waiters = spawn_waiters(&waiter_client, name, 20);
    support::wait_parked(&waiter_client, name, 20).await;
    assert!(waiters.iter().all(|w| !w.is_finished()));
    assert_eq!(numsub(&raw, &channel).await, 1);
    assert_eq!(
        command_calls(&raw, "subscribe").await,
        1,
        "20 waiters of one client must share one SUBSCRIBE"
    );

    holder_guard.unlock().await.expect("holder releases");
    let acquisitions = join_all(waiters, Duration::from_secs(10)).await;
    assert_eq!(acquisitions.len(), 20);
    assert!(
        acquisitions.iter().all(|a| a.woken_by != WokenBy::Ttl),
        "{acquisitions:?}"
    );
    wait_numsub(&raw, &channel, 0, Duration::from_secs(3)).await;
    assert_eq!(command_calls(&raw, "subscribe").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_hold_one_subscription_each() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    let client_b = connect(&server).await;
    let client_c = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "wake:two-clients";
    let channel = channel_of(name);
    reset_stats(&raw).await;

    let holder_guard = hold_with_lease(&holder_client, name, HOLD).await;
    let mut waiters = spawn_waiters(&client_b, name, 10);
    waiters.extend(spawn_waiters(&client_c, name, 10));
    support::wait_parked(&client_b, name, 10).await;
    support::wait_parked(&client_c, name, 10).await;
    assert_eq!(numsub(&raw, &channel).await, 2);
    assert_eq!(command_calls(&raw, "subscribe").await, 2);

    holder_guard.unlock().await.expect("holder releases");
    let acquisitions = join_all(waiters, Duration::from_secs(10)).await;
    assert_eq!(acquisitions.len(), 20);
    assert!(
        acquisitions.iter().all(|a| a.woken_by != WokenBy::Ttl),
        "{acquisitions:?}"
    );
    wait_numsub(&raw, &channel, 0, Duration::from_secs(3)).await;
}

// 6 -------------------------------------------------------------------------------------------

/// `tasks` waiters (spread round-robin over `clients`) each take and release the lock `rounds`
/// times with a 20 s lease, checking mutual exclusion; returns every acquisition.
async fn churn(
    clients: &[Client],
    name: &str,
    tasks: usize,
    rounds: usize,
) -> Vec<ferrisson::Acquisition> {
    let inside = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let lock = clients[i % clients.len()]
                .lock(name)
                .with_owner(Owner::new());
            let inside = Arc::clone(&inside);
            tokio::spawn(async move {
                let mut seen = Vec::with_capacity(rounds);
                for _ in 0..rounds {
                    let guard: LockGuard = lock.lock_with_lease(HOLD).await.expect("acquire");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    seen.push(*guard.acquisition());
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await.expect("release");
                }
                seen
            })
        })
        .collect();
    timeout(Duration::from_secs(15), futures::future::join_all(handles))
        .await
        .expect("churn stalled: a wake-up was lost (a 20 s lease would have to expire)")
        .into_iter()
        .flat_map(|r| r.expect("churn task"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_on_one_client_never_loses_a_wake_up() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "wake:churn-one";
    let acquisitions = churn(std::slice::from_ref(&client), name, 10, 10).await;
    assert_eq!(acquisitions.len(), 100);
    for a in &acquisitions {
        assert!(
            matches!(a.woken_by, WokenBy::Immediate | WokenBy::Message),
            "woken by the lease, i.e. a lost wake-up: {a:?}"
        );
    }
    assert!(!client.lock(name).is_locked().await.expect("is_locked"));
    wait_numsub(&raw, &channel_of(name), 0, Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_across_two_clients_never_loses_a_wake_up() {
    let server = RedisServer::start();
    let clients = [connect(&server).await, connect(&server).await];
    let raw = raw_client(&server.url()).await;
    let name = "wake:churn-two";
    let acquisitions = churn(&clients, name, 10, 10).await;
    assert_eq!(acquisitions.len(), 100);
    for a in &acquisitions {
        assert!(
            matches!(a.woken_by, WokenBy::Immediate | WokenBy::Message),
            "woken by the lease, i.e. a lost wake-up: {a:?}"
        );
    }
    assert!(!clients[0].lock(name).is_locked().await.expect("is_locked"));
    wait_numsub(&raw, &channel_of(name), 0, Duration::from_secs(3)).await;
}

// 7 -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_resubscribe_and_acquire_promptly_after_a_server_restart() {
    let mut server = RedisServer::start();
    let holder_client = connect(&server).await;
    let waiter_client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "wake:restart";
    let channel = channel_of(name);

    let holder_guard = hold_with_lease(&holder_client, name, HOLD).await;
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let lock = waiter_client.lock(name).with_owner(Owner::new());
            tokio::spawn(async move {
                let guard = lock
                    .lock_with_lease(HOLD)
                    .await
                    .expect("waiter acquires after the restart");
                let acquisition = *guard.acquisition();
                sleep(Duration::from_millis(20)).await;
                guard.unlock().await.expect("waiter releases");
                (acquisition, Instant::now())
            })
        })
        .collect();
    wait_numsub(&raw, &channel, 1, Duration::from_secs(5)).await;
    support::wait_parked(&waiter_client, name, 3).await;
    assert!(waiters.iter().all(|w| !w.is_finished()));
    drop(raw);

    tokio::task::block_in_place(|| server.restart());
    let restarted = Instant::now();
    let results: Vec<_> = timeout(Duration::from_secs(8), futures::future::join_all(waiters))
        .await
        .expect("waiters parked across the restart were not woken (20 s lease still pending?)")
        .into_iter()
        .map(|r| r.expect("waiter task"))
        .collect();
    let last_done = results.iter().map(|(_, at)| *at).max().expect("3 waiters");
    let took = last_done.saturating_duration_since(restarted);
    assert!(
        took < Duration::from_secs(5),
        "waiters needed {took:?} after the restart"
    );
    // Only one waiter can win the wake-everyone retry; the others were then woken by the
    // winners' unlock messages, which needs the re-established subscription.
    for (acquisition, _) in &results {
        assert_ne!(acquisition.woken_by, WokenBy::Ttl, "{acquisition:?}");
    }

    // Afterwards a fresh waiter is woken by an unlock message again.
    let raw = raw_client(&server.url()).await;
    let holder = holder_client.lock(name).with_owner(Owner::new());
    let guard = holder
        .lock_with_lease(HOLD)
        .await
        .expect("holder re-acquires");
    let waiter_lock = waiter_client.lock(name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move {
        let guard = waiter_lock.lock().await.expect("waiter acquires");
        (guard, Instant::now())
    });
    wait_numsub(&raw, &channel, 1, Duration::from_secs(5)).await;
    support::wait_parked(&waiter_client, name, 1).await;
    guard.unlock().await.expect("holder releases");
    let released = Instant::now();
    let (waiter_guard, at) = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("waiter not woken after the restart")
        .expect("waiter task");
    assert!(at.saturating_duration_since(released) < Duration::from_secs(1));
    assert_eq!(waiter_guard.acquisition().woken_by, WokenBy::Message);
    waiter_guard.unlock().await.expect("waiter releases");
    drop(holder_guard);
}
