//! The checks: scenarios of tasks on one model client (and a holder of another client, which
//! only the server sees), each run under many schedules. See the module docs of `crate::model`
//! for what each property means and how a failure shows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use shuttle::future::{self, JoinHandle};

use super::client::{ModelClient, Setup};
use crate::transport::model_server::Server;

const LOCK: &str = "orders:42";

/// Schedules per check: `FERRISSON_MODEL_ITERATIONS`, or a count that keeps every check within
/// a few seconds in a debug build.
pub(super) fn iterations() -> usize {
    std::env::var("FERRISSON_MODEL_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000)
}

/// Runs `scenario` under `iterations` schedules, half of them PCT's (random task priorities
/// with 3 change points, which finds orderings that need one task to lag far behind, such as a
/// loop that starts late) and half uniformly random ones, all seeded: the same schedules every
/// run. Inside a never-driven tokio runtime: timers can be made and never fire, so a waiter
/// that is parked with no wake-up on its way stays parked, and the scheduler reports the
/// deadlock.
pub(super) fn check<F, Fut>(seed: u64, iterations: usize, scenario: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let scenario = Arc::new(scenario);
    let half = iterations.div_ceil(2);
    let pct = shuttle::scheduler::PctScheduler::new_from_seed(seed, 3, half);
    run_under(pct, Arc::clone(&scenario));
    let random = shuttle::scheduler::RandomScheduler::new_from_seed(seed, half);
    run_under(random, scenario);
}

fn run_under<S, F, Fut>(scheduler: S, scenario: Arc<F>)
where
    S: shuttle::scheduler::Scheduler + 'static,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let mut config = shuttle::Config::new();
    // The default 60 KiB is too small for the crate's futures in a debug build.
    config.stack_size = 1 << 20;
    shuttle::Runner::new(scheduler, config).run(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime for timers");
        let _timers = runtime.enter();
        future::block_on(scenario());
    });
}

/// Runs `checks`, which must fail (a check run on a defect put in on purpose, to show that the
/// check can find it): returns the failure's message; panics with `none_failed` if no schedule
/// failed.
pub(super) fn failure_of(
    checks: impl FnOnce() + std::panic::UnwindSafe,
    none_failed: &str,
) -> String {
    match std::panic::catch_unwind(checks) {
        Ok(()) => panic!("{none_failed}"),
        Err(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    }
}

/// Mutual exclusion as the tasks see it, checked against the server.
#[derive(Default)]
struct Critical(AtomicUsize);

impl Critical {
    /// In the critical section with `held`: nobody else is, and the server agrees the lock is
    /// `held`'s (a hand-off reached exactly this waiter).
    async fn enter(&self, server: &Server, field: &str) {
        assert_eq!(
            self.0.fetch_add(1, Ordering::SeqCst),
            0,
            "two holders at once"
        );
        let holder = server.holder(LOCK).map(|(holder, _)| holder);
        assert_eq!(
            holder.as_deref(),
            Some(field),
            "held by the server's record"
        );
        future::yield_now().await;
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `tasks` tasks of one client take and release the lock `pairs` times each (re-entering it
/// once when `reenter`), while another client holds it at the start and releases it at a
/// point the schedule picks; `cancelled` tasks more wait for it and are aborted at another.
async fn contention(setup: Setup, tasks: usize, pairs: usize, reenter: bool, cancelled: usize) {
    let server = Server::new();
    let channel = crate::name::lock_channel(LOCK);
    // Another client's hold, which only the server sees.
    assert_eq!(server.acquire(LOCK, "other:1").await, Ok(false));
    let (client, janitor) = ModelClient::start(&server, setup);
    let _report = Report(Arc::downgrade(&client));
    let critical = Arc::new(Critical::default());
    let mut workers: Vec<JoinHandle<()>> = (0..tasks)
        .map(|task| {
            let (client, critical) = (Arc::clone(&client), Arc::clone(&critical));
            future::spawn(async move {
                let field = format!("client:{task}");
                for _ in 0..pairs {
                    let held = client.lock(LOCK, &field).await;
                    assert_eq!(held.field(), field);
                    if reenter {
                        let again = client.lock(LOCK, &field).await;
                        let count = client.server.holder(LOCK).map(|(_, count)| count);
                        assert_eq!(count, Some(2), "a re-entry counted once");
                        again.unlock().await;
                    }
                    critical.enter(&client.server, &field).await;
                    held.unlock().await;
                }
            })
        })
        .collect();
    let doomed: Vec<JoinHandle<()>> = (0..cancelled)
        .map(|task| {
            let client = Arc::clone(&client);
            future::spawn(async move {
                let held = client.lock(LOCK, &format!("client:doomed:{task}")).await;
                // Aborted while holding, or before: the janitor releases what it got.
                future::yield_now().await;
                held.unlock().await;
            })
        })
        .collect();
    let other = {
        let server = Arc::clone(&server);
        future::spawn(async move {
            // Released once the first waiter was refused a second time, after subscribing (a
            // later one may line up behind it without trying): its wake-up then hangs on the
            // unlock message. Waiting blocks rather than yields, so that PCT keeps this task's
            // priority.
            server.refused(2).await;
            server.release(LOCK, &channel, "other:1", None, None).await;
        })
    };
    for handle in &doomed {
        future::yield_now().await;
        handle.abort();
    }
    for worker in workers.drain(..) {
        worker.await.expect("a worker");
    }
    for handle in doomed {
        let _ = handle.await;
    }
    other.await.expect("the other client");
    drop(client);
    janitor.await.expect("the janitor");
    assert_eq!(server.holder(LOCK), None, "the lock is free at the end");
}

/// Prints what the client and the server know of the lock when a check fails (a deadlock
/// drops the scenario while panicking).
struct Report(std::sync::Weak<ModelClient>);

impl Drop for Report {
    fn drop(&mut self) {
        if let (true, Some(client)) = (std::thread::panicking(), self.0.upgrade()) {
            eprintln!("{LOCK}: {}", client.describe(LOCK));
        }
    }
}

const LINE: Setup = Setup {
    max_in_row: 1_000,
    conditional: true,
    late_receiver: false,
    wake_parked_only: false,
    unconfirmed_subscribe: false,
};

/// Two tasks of a fresh client wait for a lock another client holds: its release wakes one
/// of them (issue 24's T = 2 hang was this, with the unlock message lost).
#[test]
fn a_fresh_clients_waiters_hear_the_release_of_another_client() {
    check(24, iterations(), || contention(LINE, 2, 1, false, 0));
}

/// The model finds the fresh-start hang on the code before its fix: with the message loop's
/// receiver made when the loop first runs, some schedule loses the unlock message, and the
/// two waiters stay parked on a free lock.
#[test]
fn the_model_finds_the_fresh_start_hang_before_its_fix() {
    let plant = |setup: &mut Setup| setup.late_receiver = true;
    let message = two_waiters_fail(plant, 24, "no schedule lost the wake-up");
    assert!(message.contains("deadlock"), "{message}");
}

/// The model finds the hang of a SUBSCRIBE taken as confirmed once written (fred reports it so):
/// a waiter's retry runs before the server has the subscription, the release in between is
/// published to nobody, and the waiter parks on the free lock (the family bench's fair-lock
/// hang). Either check may fire first: the deadlock, or the invariant that a confirmed share
/// with waiters has the server's subscription.
#[test]
fn the_model_finds_the_unconfirmed_subscription_hang_before_its_fix() {
    let plant = |setup: &mut Setup| setup.unconfirmed_subscribe = true;
    let message = two_waiters_fail(plant, 25, "no schedule lost the release");
    assert!(
        message.contains("deadlock") || message.contains("no longer sends them"),
        "{message}"
    );
}

/// The failure of two tasks contending once each on the code before a fix (`plant` puts the
/// defect back into [`LINE`]); `none_failed` if every schedule passed.
fn two_waiters_fail(plant: impl FnOnce(&mut Setup), seed: u64, none_failed: &str) -> String {
    let mut before_fix = LINE;
    plant(&mut before_fix);
    let contend = move || contention(before_fix, 2, 1, false, 0);
    failure_of(|| check(seed, iterations(), contend), none_failed)
}

/// [`LINE`] with at most `max_in_row` local hand-offs in a row.
fn in_row(max_in_row: u32) -> Setup {
    Setup { max_in_row, ..LINE }
}

/// Local hand-offs chain between three tasks; every budget of 2 ends in a plain release
/// (or a conditional hand-off), which the waiters race for.
#[test]
fn hand_offs_and_plain_releases_between_three_tasks() {
    let budget = in_row(2);
    check(3, iterations(), move || contention(budget, 3, 2, false, 0));
}

/// As above with hand-offs off: every release is plain, every wake-up a message.
#[test]
fn plain_releases_only() {
    let off = in_row(0);
    check(0, iterations(), move || contention(off, 3, 2, false, 0));
}

/// A re-entry inside a chain of hand-offs is counted once on the server and locally.
#[test]
fn re_entries_among_hand_offs() {
    check(2, iterations(), || contention(LINE, 2, 2, true, 0));
}

/// A waiter aborted at any point (queued, being handed the lock, holding it) never leaves the
/// lock held, and the others still get it.
#[test]
fn an_aborted_waiter_never_strands_the_lock_or_the_others() {
    let budget = in_row(2);
    check(1, iterations(), move || contention(budget, 2, 2, false, 1));
}

/// `waiters` tasks wait for a latch at 1 while another task counts it down at a point the
/// schedule picks: every waiter returns, also one whose attempt (a `GET`) was still out when
/// the `0` came (the family bench's latch hang: the message woke only the parked waiters).
async fn latch(setup: Setup, waiters: usize) {
    const LATCH: &str = "latch:7";
    let server = Server::new();
    server.set_count(LATCH, 1);
    let (client, janitor) = ModelClient::start(&server, setup);
    let _report = Report(Arc::downgrade(&client));
    let waiting: Vec<JoinHandle<()>> = (0..waiters)
        .map(|_| {
            let client = Arc::clone(&client);
            future::spawn(async move { client.wait_latch(LATCH).await })
        })
        .collect();
    let opener = {
        let server = Arc::clone(&server);
        future::spawn(async move {
            // Once one waiter is parked or about to park, so that the others may be anywhere.
            server.refused(1).await;
            server
                .count_down(LATCH, &crate::name::latch_channel(LATCH))
                .await;
        })
    };
    for waiter in waiting {
        waiter.await.expect("a waiter");
    }
    opener.await.expect("the opener");
    assert_eq!(server.count(LATCH).await, 0, "the latch is open");
    drop(client);
    janitor.await.expect("the janitor");
}

/// Every waiter of a latch returns once it opens.
#[test]
fn every_latch_waiter_returns_when_the_count_reaches_zero() {
    check(8, iterations(), || latch(LINE, 3));
}

/// The model finds the latch hang on the reading before its fix: some schedule has a waiter
/// between its attempt and its parking when the `0` comes, and it stays parked on an open latch.
#[test]
fn the_model_finds_the_latch_hang_before_its_fix() {
    let before_fix = Setup {
        wake_parked_only: true,
        ..LINE
    };
    let message = failure_of(
        || check(8, iterations(), move || latch(before_fix, 3)),
        "no schedule stranded a latch waiter",
    );
    assert!(message.contains("deadlock"), "{message}");
}
