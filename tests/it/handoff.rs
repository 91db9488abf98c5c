//! Local hand-off: a full release by this client hands the lock to its longest-waiting local
//! waiter in the same script, bounded by `max_local_handoffs` so that other clients get turns.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrisson::{Config, Owner, WokenBy};
use fred::interfaces::PubsubInterface;
use support::redis_state::{command_calls, hgetall, pttl, reset_stats, script_runs, wait_key_gone};
use support::{connect_with, hold_with_lease, raw_client, RedisServer};
use tokio::time::timeout;

fn config(server: &RedisServer, max_local_handoffs: u32) -> Config {
    let mut config = Config::new(server.url());
    config.max_local_handoffs = max_local_handoffs;
    config
}

/// What [`round_robin`] saw.
struct RoundRobin {
    /// At the moment the first task finished, how many rounds the slowest task had done.
    slowest: usize,
    /// Acquisitions woken by a message or hand-off.
    woken: usize,
    /// Which task got the lock, in order, up to the first task's last round (after it, the
    /// others run without it).
    order: Vec<usize>,
}

/// `tasks` spawned tasks of one client each take and release `name` `rounds` times, back to
/// back (no work, no pause). They start together: a starter holds the lock until every task is
/// parked, since a task the machine starts late (30 ms is enough) is ten rounds behind from the
/// start, whatever the order of turns. With `in_line`, a holder releases only once another task
/// is parked in line (or every other task is done): every release then has a waiter to hand
/// over to, however slowly the machine runs the task that just released.
async fn round_robin(
    client: &ferrisson::Client,
    name: &str,
    tasks: usize,
    rounds: usize,
    in_line: bool,
) -> RoundRobin {
    let done: Arc<Vec<AtomicUsize>> = Arc::new((0..tasks).map(|_| AtomicUsize::new(0)).collect());
    let slowest_when_first_finished = Arc::new(AtomicUsize::new(usize::MAX));
    let woken = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let first_done_at = Arc::new(AtomicUsize::new(usize::MAX));
    let starter = support::hold(client, name).await;
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let lock = client.lock(name).with_owner(Owner::new());
            let client = client.clone();
            let (done, slowest, woken, order, first_done_at) = (
                done.clone(),
                slowest_when_first_finished.clone(),
                woken.clone(),
                order.clone(),
                first_done_at.clone(),
            );
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock
                        .lock_with_lease(Duration::from_secs(20))
                        .await
                        .expect("lock");
                    if guard.acquisition().woken_by == WokenBy::Message {
                        woken.fetch_add(1, Ordering::Relaxed);
                    }
                    order.lock().expect("order").push(i);
                    done[i].fetch_add(1, Ordering::SeqCst);
                    while in_line
                        && support::parked_waiters(&client, lock.name()) == 0
                        && done
                            .iter()
                            .enumerate()
                            .any(|(task, n)| task != i && n.load(Ordering::SeqCst) < rounds)
                    {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    guard.unlock().await.expect("unlock");
                }
                let _ = first_done_at.compare_exchange(
                    usize::MAX,
                    order.lock().expect("order").len(),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
                let min = done
                    .iter()
                    .map(|n| n.load(Ordering::SeqCst))
                    .min()
                    .unwrap_or(0);
                let _ =
                    slowest.compare_exchange(usize::MAX, min, Ordering::SeqCst, Ordering::SeqCst);
            })
        })
        .collect();
    support::wait_parked(client, name, tasks).await;
    starter.unlock().await.expect("the starter releases");
    for handle in handles {
        timeout(Duration::from_secs(30), handle)
            .await
            .expect("no stall")
            .expect("task");
    }
    let mut order = order.lock().expect("order").clone();
    order.truncate(first_done_at.load(Ordering::SeqCst));
    RoundRobin {
        slowest: slowest_when_first_finished.load(Ordering::SeqCst),
        woken: woken.load(Ordering::Relaxed),
        order,
    }
}

/// Spawns `acquire` as a waiter of `name` on `client`, waits until it is parked, releases
/// `holder` and returns the guard the waiter received (within 2 s).
async fn hand_over(
    client: &ferrisson::Client,
    name: &str,
    holder: ferrisson::LockGuard,
    acquire: impl std::future::Future<Output = ferrisson::Result<ferrisson::LockGuard>> + Send + 'static,
) -> ferrisson::LockGuard {
    let waiter = tokio::spawn(acquire);
    support::wait_parked(client, name, 1).await;
    holder.unlock().await.expect("unlock");
    timeout(Duration::from_secs(2), waiter)
        .await
        .expect("handed over")
        .expect("task")
        .expect("lock")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_take_turns_instead_of_the_releaser_barging_back_in() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(config(&server, 1_000_000)).await;
    reset_stats(&raw).await;
    let RoundRobin { slowest, woken, .. } =
        round_robin(&client, "handoff:turns", 6, 40, false).await;
    // FIFO hand-offs: when the first task is done, every other is only a few rounds behind (a plain
    // release still happens when no waiter is in line at that instant, e.g. while one retries).
    assert!(
        slowest >= 34,
        "a task lagged behind: {slowest} of 40 rounds when the first finished"
    );
    assert!(
        woken > 150,
        "most acquisitions were handed over, got {woken} of 240"
    );
    // A hand-off replaces a release + a successful acquire with one script, and there are no
    // lost races: far fewer acquire scripts than with barging.
    let scripts = script_runs(&raw).await;
    assert!(scripts < 240 * 4, "{scripts} scripts for 240 acquisitions");
    wait_key_gone(&raw, "handoff:turns", Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_handoffs_the_releaser_barges_back_in() {
    // The control for the test above: the same loop with hand-offs off is visibly unfair, so the
    // assertion above can fail.
    let server = RedisServer::start();
    let client = connect_with(config(&server, 0)).await;
    let slowest = round_robin(&client, "handoff:barging", 6, 40, false)
        .await
        .slowest;
    assert!(
        slowest < 38,
        "plain releases let the releaser re-acquire first (slowest {slowest})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_asks_again_at_once_queues_behind_the_other_local_waiter() {
    // The other task is always waiting: on its first attempt, retrying after an unlock message,
    // or parked in line. A release followed at once by a new acquire must not take the lock
    // back ahead of it, even while its attempt is still out (then the release is a plain one
    // and the releaser's new acquire lines up behind it instead of trying).
    let server = RedisServer::start();
    let client = connect_with(config(&server, 16)).await;
    let order = round_robin(&client, "handoff:again", 2, 300, false)
        .await
        .order;
    let repeats = order.windows(2).filter(|w| w[0] == w[1]).count();
    assert!(
        order.len() >= 400,
        "both tasks ran side by side: {} acquisitions",
        order.len()
    );
    assert!(
        repeats * 20 <= order.len(),
        "the releasing task took the lock again {repeats} times in {} acquisitions",
        order.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_re_enters_at_once_while_local_waiters_are_in_line() {
    // Acquires queue behind local waiters without trying first, but a re-entry by the holder
    // must not: it would wait for a hand-off from itself.
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(config(&server, 16)).await;
    let name = "handoff:reenter";
    let holder = client.lock(name).with_owner(Owner::new());
    let outer = holder
        .lock_with_lease(Duration::from_secs(20))
        .await
        .expect("lock");
    let waiter = client.lock(name).with_owner(Owner::new());
    let waiting =
        tokio::spawn(async move { waiter.lock_with_lease(Duration::from_secs(20)).await });
    support::wait_parked(&client, name, 1).await;
    let inner = timeout(
        Duration::from_secs(2),
        holder.lock_with_lease(Duration::from_secs(20)),
    )
    .await
    .expect("the holder re-entered without waiting")
    .expect("re-enter");
    assert_eq!(holder.hold_count().await.expect("HGET"), 2);
    assert!(!waiting.is_finished(), "the waiter still waits");
    inner.unlock().await.expect("unlock");
    outer.unlock().await.expect("unlock");
    let handed = timeout(Duration::from_secs(2), waiting)
        .await
        .expect("handed over")
        .expect("task")
        .expect("lock");
    handed.unlock().await.expect("unlock");
    wait_key_gone(&raw, name, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_lined_up_without_trying_waits_out_the_expiry_the_line_learned() {
    // The first waiter's refused attempt learns the holder's 4 s TTL; the second waiter lines up
    // behind it without an attempt of its own and must not retry before then (it used to retry
    // after the watchdog timeout, here 1 s: with many such waiters, a herd of retries).
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let mut config = config(&server, 16);
    config.watchdog_timeout = Duration::from_secs(1);
    let client = connect_with(config).await;
    let name = "handoff:expiry";
    let holder = hold_with_lease(&client, name, Duration::from_secs(4)).await;
    let first = client.lock(name).with_owner(Owner::new());
    let first = tokio::spawn(async move { first.lock_with_lease(Duration::from_secs(20)).await });
    support::wait_parked(&client, name, 1).await;
    reset_stats(&raw).await;
    let second = client.lock(name).with_owner(Owner::new());
    let second = tokio::spawn(async move { second.lock_with_lease(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    // Attempts are counted by the EXISTS that the acquire script runs first.
    assert_eq!(
        command_calls(&raw, "exists").await,
        0,
        "a waiter retried before the lock's expiry"
    );
    holder.unlock().await.expect("unlock");
    for waiter in [first, second] {
        let guard = timeout(Duration::from_secs(2), waiter)
            .await
            .expect("served in turn")
            .expect("task")
            .expect("lock");
        guard.unlock().await.expect("unlock");
    }
    wait_key_gone(&raw, name, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_handed_over_lock_carries_the_new_holders_field_and_lease() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(config(&server, 16)).await;
    let holder = hold_with_lease(&client, "handoff:layout", Duration::from_secs(30)).await;
    let waiter_lock = client.lock("handoff:layout").with_owner(Owner::new());
    let guard = hand_over(&client, "handoff:layout", holder, async move {
        waiter_lock.lock_with_lease(Duration::from_secs(7)).await
    })
    .await;
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message);
    let fields = hgetall(&raw, "handoff:layout").await;
    assert_eq!(fields.len(), 1, "exactly one holder: {fields:?}");
    assert_eq!(
        fields.get(guard.holder_field()).map(String::as_str),
        Some("1")
    );
    let ttl = pttl(&raw, "handoff:layout").await;
    assert!(
        (6_000..=7_000).contains(&ttl),
        "the new holder's 7 s lease, got {ttl} ms"
    );
    guard.unlock().await.expect("unlock");
    wait_key_gone(&raw, "handoff:layout", Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_handed_over_watchdog_lock_is_renewed() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // Renewals every second leave two seconds of slack for a loaded machine.
    let watchdog = Duration::from_secs(3);
    let mut cfg = config(&server, 16);
    cfg.watchdog_timeout = watchdog;
    let client = connect_with(cfg).await;
    let holder = hold_with_lease(&client, "handoff:watchdog", Duration::from_secs(30)).await;
    let waiter_lock = client.lock("handoff:watchdog").with_owner(Owner::new());
    let guard = hand_over(&client, "handoff:watchdog", holder, async move {
        waiter_lock.lock().await
    })
    .await;
    // Held past the watchdog lease the hand-off set, by a renewal interval: the new holder's
    // watchdog renews it.
    tokio::time::sleep(watchdog + watchdog / 3).await;
    let fields = hgetall(&raw, "handoff:watchdog").await;
    assert_eq!(
        fields.get(guard.holder_field()).map(String::as_str),
        Some("1"),
        "{fields:?}"
    );
    // Alive by a renewal to the watchdog lease, not by the holder's 30 s lease left over.
    let ttl = pttl(&raw, "handoff:watchdog").await;
    assert!(
        (1..=watchdog.as_millis() as i64).contains(&ttl),
        "renewed to the {watchdog:?} watchdog lease, PTTL {ttl}"
    );
    assert!(!guard.is_lost());
    guard.unlock().await.expect("unlock");
    wait_key_gone(&raw, "handoff:watchdog", Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_dropped_around_handoffs_leave_no_hold() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect_with(config(&server, 16)).await;
    for round in 0..40u64 {
        let holder = hold_with_lease(&client, "handoff:drop", Duration::from_secs(20)).await;
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let lock = client.lock("handoff:drop").with_owner(Owner::new());
                tokio::spawn(async move {
                    // Some waiters give up around the moment the lock is handed to them.
                    let _ = timeout(
                        Duration::from_millis(5 + round % 7),
                        lock.lock_with_lease(Duration::from_secs(20)),
                    )
                    .await;
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(2 + round % 5)).await;
        drop(holder); // released (or handed over) in the background
        for waiter in waiters {
            waiter.await.expect("waiter task");
        }
        // Whoever got the lock dropped its guard; a hold handed to a waiter that left is released.
        wait_key_gone(&raw, "handoff:drop", Duration::from_secs(3)).await;
    }
    let other = connect_with(config(&server, 16)).await;
    assert!(other
        .lock("handoff:drop")
        .try_lock()
        .await
        .expect("try_lock")
        .is_acquired());
}

/// The shortest pause of giving way (`MIN_GIVE_WAY` in `src/kit/give_way.rs`).
const MIN_GIVE_WAY: Duration = Duration::from_millis(2);

/// How long `client`'s acquire of `name` by a fresh owner took when started right after a
/// release of it by another owner (a hold taken here), timed from the start of that release.
async fn acquire_after_own_release(client: &ferrisson::Client, name: &str) -> Duration {
    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock");
    let released_at = std::time::Instant::now();
    guard.unlock().await.expect("unlock");
    let guard = timeout(
        Duration::from_secs(5),
        client.lock(name).with_owner(Owner::new()).lock(),
    )
    .await
    .expect("the lock is free")
    .expect("lock");
    let took = released_at.elapsed();
    guard.unlock().await.expect("unlock");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_client_gives_way_after_a_release_whose_message_reached_another_client() {
    // Giving way is a pause, so what a test can assert without timing the machine is its
    // lower bound: an attempt of this client on the lock starts no earlier than
    // `MIN_GIVE_WAY` after its release settled, itself after the release started. Whether
    // the other client's waiter wins the lock in that pause is a race the pause only tilts
    // (see `src/kit/give_way.rs`); on a loaded machine it can lose it several times in a row.
    // A raw subscriber stands for the other client's waiter: it takes nothing, so the
    // acquire below gets the lock once the pause is over.
    let server = RedisServer::start();
    let name = "handoff:give-way";
    let listener = raw_client(&server.url()).await;
    listener
        .subscribe(format!("redisson_lock__channel:{{{name}}}"))
        .await
        .expect("raw SUBSCRIBE");
    let client = connect_with(config(&server, 16)).await;
    for _ in 0..5 {
        let took = acquire_after_own_release(&client, name).await;
        assert!(
            took >= MIN_GIVE_WAY,
            "the next attempt came {took:?} after the release started"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_no_other_client_heard_gives_no_way() {
    // The control for the test above, without the listener: the unlock message reaches nobody,
    // so the client never gives way on the lock (its state says so at any moment, however
    // slowly the machine runs this task). That its own subscription does not count as another
    // client's is checked by the model checks (`src/model`).
    let server = RedisServer::start();
    let name = "handoff:unheard";
    let client = connect_with(config(&server, 16)).await;
    for _ in 0..5 {
        let guard = client.lock(name).lock().await.expect("lock");
        guard.unlock().await.expect("unlock");
        assert!(
            !client.local_state(name).giving_way,
            "gives way after a release nobody heard"
        );
    }
}

/// PUBLISH calls (unlock messages) and PUBSUB NUMSUB calls (conditional hand-offs) the server
/// ran while 2 tasks of a client with a budget of 2 hand-offs took `name` 100 times each.
async fn messages_and_checks(
    server: &RedisServer,
    raw: &fred::clients::Client,
    name: &str,
) -> (u64, u64) {
    let client = connect_with(config(server, 2)).await;
    reset_stats(raw).await;
    let RoundRobin { woken, .. } = round_robin(&client, name, 2, 100, true).await;
    assert!(
        woken > 150,
        "most acquisitions were handed over, got {woken} of 200"
    );
    let publishes = command_calls(raw, "publish").await;
    // Redis 7 counts subcommands on their own.
    let checks = command_calls(raw, "pubsub|numsub").await + command_calls(raw, "pubsub").await;
    eprintln!("{name}: {publishes} unlock messages, {checks} conditional hand-offs, {woken} woken");
    client.shutdown().await;
    (publishes, checks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_keeps_handing_off_while_no_other_client_listens() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let (publishes, checks) = messages_and_checks(&server, &raw, "handoff:alone").await;
    // Every budget of 2 ends in a conditional hand-off, which hands over since nobody else
    // listens. A holder releases only once the other task is in line, so every release has
    // a waiter. Plain releases remain: one every 16 budgets regardless, and the end (the last
    // task alone). Measured: 7 messages and 90 checks in each of 6 runs; 67-72 messages with a
    // listener (the test below), as every budget used to end. (Without the wait for the line,
    // a task slow to line up again made releases that found nobody, and plain: 8-35 messages
    // depending on the load.)
    assert!(checks >= 40, "{checks} conditional hand-offs");
    assert!(
        (5..=15).contains(&publishes),
        "{publishes} unlock messages for 200 releases"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_frees_the_lock_when_another_client_listens() {
    // The control for the test above: with a subscriber of the unlock channel besides this
    // client's, every budget ends in a plain release.
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let listener = raw_client(&server.url()).await;
    listener
        .subscribe("redisson_lock__channel:{handoff:listened}")
        .await
        .expect("raw SUBSCRIBE");
    let (publishes, _) = messages_and_checks(&server, &raw, "handoff:listened").await;
    assert!(
        publishes >= 50,
        "{publishes} unlock messages for 200 releases with a budget of 2"
    );
}
