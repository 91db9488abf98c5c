//! The `metrics` feature against a real Redis: exact counts of acquisitions (by how), failed
//! attempts, local hand-offs, watchdog renewals (renewed, failed) and lost leases (found gone,
//! or given up unconfirmed), and a held-locks gauge that returns to 0 however the holds end
//! (unlock, drop, re-entry, detach, loss, shutdown, a dropped client).
//!
//! The metrics facade has one global recorder, and the client's background tasks (watchdog,
//! janitor) record from other threads than the test's: so each test runs in a process of its
//! own (`support::processes::in_own_process`: in a process shared with other tests, their
//! clients would record into the same recorder), installs one `DebuggingRecorder` there before
//! any client connects, and compares counters before and after.

use crate::support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use ferrisson::metrics::{
    ACQUIRE_FAILURES, ACQUIRE_WAIT_SECONDS, ACQUISITIONS, HANDOFFS, HELD_LOCKS, LEASES_LOST,
    RENEWALS,
};
use ferrisson::{Config, Owner};
use fred::interfaces::KeysInterface;
use metrics::Unit;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use support::redis_state::poll_until;
use support::{connect_with, raw_client, RedisServer};

/// Whether the calling test `function` of this module goes on in this process: in its own
/// process, with the recorder installed (before any client connects: the held-locks gauge counts
/// with increments, which a recorder installed later would miss), `true`; in the shared test
/// process `false`, after running it in its own and checking that it passed there.
async fn in_own_process(function: &str) -> bool {
    let test = support::processes::test_name(module_path!(), function);
    if !support::processes::in_own_process(&test).await {
        return false;
    }
    snapshotter();
    true
}

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this test's own process");
        snapshotter
    })
}

/// What the recorder counted since it was installed. (A snapshot resets counters and gauges
/// and drains histograms: `Metrics::now` adds each one to these running totals.)
#[derive(Clone, Default)]
struct Metrics {
    /// Counters by name and `label=value` (empty for none).
    counters: HashMap<(String, String), u64>,
    held: f64,
    /// Wait-time observations.
    waits: Vec<f64>,
    units: HashMap<String, Option<Unit>>,
}

impl Metrics {
    fn now() -> Metrics {
        static TOTALS: Mutex<Option<Metrics>> = Mutex::new(None);
        let mut totals = TOTALS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let metrics = totals.get_or_insert_with(Metrics::default);
        for (key, unit, _, value) in snapshotter().snapshot().into_vec() {
            let name = key.key().name().to_owned();
            metrics.units.insert(name.clone(), unit);
            match (key.kind(), value) {
                (MetricKind::Counter, DebugValue::Counter(count)) => {
                    let label = key
                        .key()
                        .labels()
                        .map(|label| format!("{}={}", label.key(), label.value()))
                        .collect::<Vec<_>>()
                        .join(",");
                    *metrics.counters.entry((name, label)).or_default() += count;
                }
                (MetricKind::Gauge, DebugValue::Gauge(value)) if name == HELD_LOCKS => {
                    metrics.held += value.into_inner();
                }
                (MetricKind::Histogram, DebugValue::Histogram(values))
                    if name == ACQUIRE_WAIT_SECONDS =>
                {
                    metrics
                        .waits
                        .extend(values.into_iter().map(|v| v.into_inner()));
                }
                _ => {}
            }
        }
        metrics.clone()
    }

    fn counter(&self, name: &str, label: &str) -> u64 {
        self.counters
            .get(&(name.to_owned(), label.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// How much counter `name{label}` grew since `before`.
    fn since(&self, before: &Metrics, name: &str, label: &str) -> u64 {
        self.counter(name, label) - before.counter(name, label)
    }
}

/// Every counter of the crate with its labels, for comparing whole sets of changes.
const ALL_COUNTERS: &[(&str, &str)] = &[
    (ACQUISITIONS, "how=immediate"),
    (ACQUISITIONS, "how=after_wait"),
    (ACQUISITIONS, "how=handoff"),
    (ACQUISITIONS, "how=reentrant"),
    (ACQUIRE_FAILURES, "reason=busy"),
    (ACQUIRE_FAILURES, "reason=error"),
    (HANDOFFS, ""),
    (RENEWALS, "outcome=renewed"),
    (RENEWALS, "outcome=lost"),
    (RENEWALS, "outcome=failed"),
    (LEASES_LOST, "reason=server"),
    (LEASES_LOST, "reason=unconfirmed"),
];

/// The counters that changed since `before`, as `name{label}` → growth.
fn changes(before: &Metrics, after: &Metrics) -> HashMap<String, u64> {
    ALL_COUNTERS
        .iter()
        .filter_map(|(name, label)| {
            let grown = after.since(before, name, label);
            (grown > 0).then(|| (format!("{name}{{{label}}}"), grown))
        })
        .collect()
}

fn expect(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// Waits (at most 5 s) until at least `holds` renewals succeeded since `before`.
async fn wait_renewals(before: &Metrics, holds: u64) {
    poll_until(
        Duration::from_secs(5),
        Duration::from_millis(20),
        || async { Metrics::now().since(before, RENEWALS, "outcome=renewed") },
        |renewed| *renewed >= holds,
    )
    .await
    .unwrap_or_else(|renewed| panic!("{renewed} of {holds} renewals within 5 s"));
}

/// A watchdog timeout for counting renewals: they come every second, which leaves two seconds
/// of slack for a loaded machine before a lease would lapse and be counted as lost.
const WATCHDOG: Duration = Duration::from_secs(3);

/// A client with a `watchdog` timeout (renewals every third of it).
async fn connect(server: &RedisServer, watchdog: Duration) -> ferrisson::Client {
    let mut config = Config::new(server.url());
    config.watchdog_timeout = watchdog;
    connect_with(config).await
}

/// Spawns `waiter.lock()` (a lock of `client`), waits until it is parked (subscribed, and its
/// retry after subscribing refused), runs `release` and returns the waiter's guard (within 5 s).
async fn released_to_waiter(
    client: &ferrisson::Client,
    waiter: ferrisson::Lock,
    release: impl std::future::Future<Output = ()>,
) -> ferrisson::LockGuard {
    let name = waiter.name().to_owned();
    let waiting = tokio::spawn(async move { waiter.lock().await });
    support::wait_parked(client, &name, 1).await;
    release.await;
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter gets the lock")
        .expect("task")
        .expect("lock")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_and_failed_attempts_are_counted_by_how() {
    if !in_own_process("acquisitions_and_failed_attempts_are_counted_by_how").await {
        return;
    }
    let server = RedisServer::start();
    let client = connect_with(Config::new(server.url())).await;
    let other_client = connect_with(Config::new(server.url())).await;
    let before = Metrics::now();

    // Five free-lock acquisitions.
    for i in 0..5 {
        let guard = client
            .lock(format!("metrics:free:{i}"))
            .lock()
            .await
            .expect("lock");
        guard.unlock().await.expect("unlock");
    }
    // A re-entry by the same owner.
    let lock = client.lock("metrics:reentrant");
    let outer = lock.lock().await.expect("lock");
    let inner = lock.lock().await.expect("re-enter");
    assert_eq!(
        Metrics::now().held,
        2.0,
        "a reentrant hold counts once more"
    );
    // Another owner is refused at once, and then waits on the other client for the release.
    let busy = lock.with_owner(Owner::new());
    assert!(busy.try_lock().await.expect("try_lock").is_busy());
    let raw = raw_client(&server.url()).await;
    let waited = released_to_waiter(
        &other_client,
        other_client.lock("metrics:reentrant"),
        async {
            inner.unlock().await.expect("unlock");
            outer.unlock().await.expect("unlock");
        },
    )
    .await;
    waited.unlock().await.expect("unlock");

    let after = Metrics::now();
    assert_eq!(
        changes(&before, &after),
        expect(&[
            ("ferrisson_acquisitions_total{how=immediate}", 6),
            ("ferrisson_acquisitions_total{how=reentrant}", 1),
            ("ferrisson_acquisitions_total{how=after_wait}", 1),
            ("ferrisson_acquire_failures_total{reason=busy}", 1),
        ])
    );
    let waits = &after.waits[before.waits.len()..];
    assert_eq!(waits.len(), 8, "one wait time per acquisition");
    assert!(waits.iter().all(|wait| *wait >= 0.0));
    assert_eq!(after.held, 0.0);
    // Described at connect, with units.
    assert_eq!(
        after.units.get(ACQUIRE_WAIT_SECONDS),
        Some(&Some(Unit::Seconds))
    );
    assert_eq!(after.units.get(HELD_LOCKS), Some(&Some(Unit::Count)));

    // A call that fails (the key is not a lock hash) counts as an error.
    raw.set::<(), _, _>("metrics:string", "x", None, None, false)
        .await
        .expect("SET");
    assert!(client.lock("metrics:string").lock().await.is_err());
    let failed = Metrics::now();
    assert_eq!(
        changes(&after, &failed),
        expect(&[("ferrisson_acquire_failures_total{reason=error}", 1)])
    );
    assert_eq!(failed.held, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_handoff_is_counted_once() {
    if !in_own_process("a_local_handoff_is_counted_once").await {
        return;
    }
    let server = RedisServer::start();
    let client = connect_with(Config::new(server.url())).await;
    let holder = support::hold(&client, "metrics:handoff").await;
    let before = Metrics::now();
    let waiter = client.lock("metrics:handoff").with_owner(Owner::new());
    let handed = released_to_waiter(&client, waiter, async {
        holder.unlock().await.expect("unlock");
    })
    .await;
    assert_eq!(Metrics::now().held, 1.0, "the hold moved to the waiter");
    handed.unlock().await.expect("unlock");

    let after = Metrics::now();
    assert_eq!(
        changes(&before, &after),
        expect(&[
            ("ferrisson_handoffs_total{}", 1),
            ("ferrisson_acquisitions_total{how=handoff}", 1),
        ])
    );
    assert_eq!(after.held, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renewals_are_counted_per_hold() {
    if !in_own_process("watchdog_renewals_are_counted_per_hold").await {
        return;
    }
    let server = RedisServer::start();
    let client = connect(&server, WATCHDOG).await;
    let before = Metrics::now();
    let first = client.lock("metrics:renew:1").lock().await.expect("lock");
    let second = client.lock("metrics:renew:2").lock().await.expect("lock");
    // Both holds are renewed a period (a second) after their acquire.
    wait_renewals(&before, 2).await;
    first.unlock().await.expect("unlock");
    second.unlock().await.expect("unlock");
    let after = Metrics::now();
    assert_eq!(after.since(&before, RENEWALS, "outcome=lost"), 0);
    assert_eq!(after.since(&before, RENEWALS, "outcome=failed"), 0);
    assert_eq!(after.since(&before, LEASES_LOST, "reason=server"), 0);
    assert_eq!(after.held, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_counted_once_and_leaves_the_gauge() {
    if !in_own_process("a_lost_lease_is_counted_once_and_leaves_the_gauge").await {
        return;
    }
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // A lapse before the DEL would count as `reason=unconfirmed`: the 3 s watchdog keeps it
    // from happening on a loaded machine.
    let client = connect(&server, WATCHDOG).await;
    let before = Metrics::now();
    let lock = client.lock("metrics:lost");
    let guard = lock.lock().await.expect("lock");
    let reentered = lock.lock().await.expect("re-enter");
    assert_eq!(Metrics::now().held, 2.0);
    let lost = guard.lost();
    raw.del::<(), _>("metrics:lost").await.expect("DEL");
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("lost() fires");
    // Two and a half more renewal periods: the lost hold is not renewed, nor counted again.
    let period = WATCHDOG / 3;
    tokio::time::sleep(period * 5 / 2).await;
    let lost_now = Metrics::now();
    assert_eq!(
        changes(&before, &lost_now),
        expect(&[
            ("ferrisson_acquisitions_total{how=immediate}", 1),
            ("ferrisson_acquisitions_total{how=reentrant}", 1),
            ("ferrisson_renewals_total{outcome=lost}", 1),
            ("ferrisson_leases_lost_total{reason=server}", 1),
        ])
    );
    assert_eq!(
        lost_now.held, 0.0,
        "both holds of the lost lease left the gauge"
    );
    // Releasing the lost holds does not subtract them again.
    assert!(matches!(
        reentered.unlock().await,
        Err(ferrisson::Error::LeaseLost { .. })
    ));
    drop(guard);
    assert_eq!(Metrics::now().held, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_held_gauge_returns_to_zero_however_holds_end() {
    if !in_own_process("the_held_gauge_returns_to_zero_however_holds_end").await {
        return;
    }
    let server = RedisServer::start();
    // The default configuration: no watchdog lease is under test, and a 30 s one cannot lapse
    // in a stall and drop the gauge early.
    let client = connect_with(Config::new(server.url())).await;
    let held = || Metrics::now().held;
    assert_eq!(held(), 0.0);

    // Re-entry, then a partial release by dropping the inner guard, then the final unlock.
    let lock = client.lock("metrics:gauge:a");
    let outer = lock.lock().await.expect("lock");
    let inner = lock.lock().await.expect("re-enter");
    assert_eq!(held(), 2.0);
    drop(inner);
    assert_eq!(held(), 1.0);
    outer.unlock().await.expect("unlock");
    assert_eq!(held(), 0.0);

    // A detached hold, released Redisson style by identity.
    let detached = client.lock("metrics:gauge:b");
    detached.lock().await.expect("lock").detach();
    assert_eq!(held(), 1.0);
    detached.unlock().await.expect("unlock by identity");
    assert_eq!(held(), 0.0);

    // Shutdown with a guard still held and a detached hold: both leave the gauge, and the
    // guard dropped afterwards is not subtracted twice.
    let kept = client.lock("metrics:gauge:c").lock().await.expect("lock");
    client
        .lock("metrics:gauge:d")
        .lock()
        .await
        .expect("lock")
        .detach();
    assert_eq!(held(), 2.0);
    client.shutdown().await;
    assert_eq!(held(), 0.0);
    drop(kept);
    assert_eq!(held(), 0.0);

    // A client dropped (not shut down) with a detached hold: its holds leave with it.
    let dropped = connect_with(Config::new(server.url())).await;
    dropped
        .lock("metrics:gauge:e")
        .lock()
        .await
        .expect("lock")
        .detach();
    assert_eq!(held(), 1.0);
    drop(dropped);
    assert_eq!(held(), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_given_up_when_the_server_is_gone_is_counted_as_unconfirmed() {
    if !in_own_process("a_lease_given_up_when_the_server_is_gone_is_counted_as_unconfirmed").await {
        return;
    }
    let mut server = RedisServer::start();
    // Short enough that the lease given up after the kill ends well within `lost_within`, long
    // enough that the first renewal (half a second in) is confirmed before it could lapse.
    let client = connect(&server, Duration::from_millis(1_500)).await;
    let before = Metrics::now();
    let guard = client
        .lock("metrics:unconfirmed")
        .lock()
        .await
        .expect("lock");
    wait_renewals(&before, 1).await;
    let given_up = guard.lost_token();
    server.kill();
    support::lost_within(&guard, Duration::from_secs(5)).await;
    // lost() resolves by the clock at the lease end; the watchdog gives the hold up (counts
    // the renewal that timed out then and the loss, takes it out of the gauge, and cancels
    // the token) on its own task, as the renewal's deadline passes: wait for that before
    // reading the counters.
    tokio::time::timeout(Duration::from_secs(5), given_up.cancelled())
        .await
        .expect("the watchdog gives the lease up");
    let after = Metrics::now();
    assert!(after.since(&before, RENEWALS, "outcome=failed") >= 1);
    assert_eq!(after.since(&before, RENEWALS, "outcome=lost"), 0);
    assert_eq!(after.since(&before, LEASES_LOST, "reason=unconfirmed"), 1);
    assert_eq!(after.since(&before, LEASES_LOST, "reason=server"), 0);
    assert_eq!(after.held, 0.0, "the hold given up left the gauge");
    drop(guard);
    assert_eq!(Metrics::now().held, 0.0);
}
