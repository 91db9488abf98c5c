//! Interoperation with the real Java Redisson, every protocol era of the matrix
//! (`support::java::VERSIONS`), both directions: a JVM of `org.redisson:redisson` from Maven
//! Central (`tests/peers/java`) and a ferrisson client on the same `redis-server`.
//!
//! One test per group of scenarios and version, named `interop_java::v<version>::<group>`, so
//! that `cargo test --test it -- java` runs them all and `-- v4_7_0` one version. A group
//! starts one server and one JVM and runs its scenarios in turn on names of their own.
//!
//! Bounds: a wake-up by an unlock message must come within [`WAKE_BOUND`] of the release while
//! the holder's lease is [`LEASE`], so that only the message can explain it (Java re-checks
//! after the lock's TTL, ferrisson likewise).

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrisson::{Client, Error, Guard, Handle, Owner, PermitIdFormat, Protocol, WokenBy};
use fred::clients::Client as RawClient;
use fred::prelude::*;
use serde_json::json;
use support::java::{error_class, lock_args, JavaPeer, Options, Unavailable, Version};
use support::redis_state::{channel_of, exists, hgetall, poll_until, pttl, wait_numsub};
use support::{connect_with, raw_client, timed_config, wait_parked, RedisServer};
use tokio::time::{sleep, timeout, Instant};

/// The lease of a holder whose release must wake the other side by message.
const LEASE: Duration = Duration::from_secs(20);
/// How soon after the release a waiter woken by its message acquires.
const WAKE_BOUND: Duration = Duration::from_secs(1);
/// Both sides' watchdog lease where a group watches renewals: renewed every second.
const WATCHDOG: Duration = Duration::from_secs(3);
/// Past the watchdog lease and a renewal more: a hold still there was renewed.
const PAST_THE_LEASE: Duration = Duration::from_millis(4_500);
/// The bound on a step that should be quick (2 cores, JVMs beside the suite).
const STEP: Duration = Duration::from_secs(10);

/// One test per version for each group named: `v3_16_8::rlock`, ...
macro_rules! for_every_version {
    ($($group:ident),* $(,)?) => {
        for_every_version!(@module v3_16_8, V3_16; $($group),*);
        for_every_version!(@module v3_23_5, V3_23; $($group),*);
        for_every_version!(@module v3_43_0, V3_43; $($group),*);
        for_every_version!(@module v3_52_0, V3_52; $($group),*);
        for_every_version!(@module v4_7_0, V4_7; $($group),*);
    };
    (@module $module:ident, $version:ident; $($group:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $group() -> Result<(), super::Unavailable> {
                    super::$group(crate::support::java::$version).await
                }
            )*
        }
    };
}

for_every_version!(
    rlock,
    fair_lock,
    non_reentrant_fair_lock,
    read_write_lock,
    fenced_lock,
    semaphores_and_latch,
    faults,
);

/// What every group starts with: a server, a raw client, a JVM with the watchdog lease
/// [`WATCHDOG`], and a ferrisson client with the same.
struct Room {
    server: RedisServer,
    raw: RawClient,
    java: JavaPeer,
    client: Client,
    version: Version,
}

impl Room {
    async fn new(version: Version) -> Result<Room, Unavailable> {
        let server = RedisServer::start();
        let url = server.url();
        let raw = raw_client(&url).await;
        let java = JavaPeer::start_with(
            version,
            std::slice::from_ref(&url),
            Options::watchdog(WATCHDOG),
        )
        .await?;
        let client = connect_with(timed_config(url, WATCHDOG, Duration::from_secs(5))).await;
        Ok(Room {
            server,
            raw,
            java,
            client,
            version,
        })
    }

    /// A lock name of this group and version.
    fn name(&self, what: &str) -> String {
        format!("java:{}:{what}", self.version)
    }

    async fn holders(&self, name: &str) -> HashMap<String, String> {
        hgetall(&self.raw, name).await
    }

    /// Java's `try_lock` of `owner` without waiting: whether it acquired.
    async fn java_try_lock(&self, kind: &str, name: &str, owner: &str) -> bool {
        self.java
            .ok("try_lock", lock_args(kind, name, owner, json!({})))
            .await
            .bool("acquired")
    }

    async fn java_unlock(&self, kind: &str, name: &str, owner: &str) {
        self.java
            .ok("unlock", lock_args(kind, name, owner, json!({})))
            .await;
    }

    /// A JVM of its own (to be killed or stopped) whose owner `h` holds `name` in watchdog mode.
    async fn java_holder_of(&self, name: &str) -> Result<JavaPeer, Unavailable> {
        let peer = JavaPeer::start_with(
            self.version,
            &[self.server.url()],
            Options::watchdog(WATCHDOG),
        )
        .await?;
        peer.ok("lock", lock_args("lock", name, "h", json!({})))
            .await;
        Ok(peer)
    }

    /// A ferrisson `try_lock` by a new owner: whether it acquired (released at once if so).
    async fn ferrisson_gets_in(&self, name: &str) -> bool {
        gets_in(self.client.lock(name).with_owner(Owner::new())).await
    }
}

/// One `try_lock` of `lock`: whether it acquired (released at once if so).
async fn gets_in<P: Protocol>(lock: Handle<P>) -> bool {
    match lock
        .try_lock()
        .await
        .expect("ferrisson try_lock")
        .acquired()
    {
        Some(guard) => {
            guard.unlock().await.expect("ferrisson release");
            true
        }
        None => false,
    }
}

fn one(field: impl Into<String>, count: &str) -> HashMap<String, String> {
    HashMap::from([(field.into(), count.to_owned())])
}

// ---------------------------------------------------------------------------------------------
// RLock
// ---------------------------------------------------------------------------------------------

async fn rlock(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    rlock_holds_exclude_the_other_side_and_count_on_both(&room).await;
    rlock_java_waiter_is_woken_by_a_ferrisson_unlock(&room).await;
    rlock_ferrisson_waiter_is_woken_by_a_java_unlock(&room).await;
    rlock_force_unlock_works_across(&room).await;
    tokio::join!(
        rlock_each_watchdog_keeps_the_other_side_out(&room),
        rlock_java_watchdog_never_extends_a_hold_taken_after_a_force_unlock(&room),
    );
    rlock_local_hand_offs_leave_a_java_waiter_its_turn(&room).await;
    room.java.quit().await;
    Ok(())
}

/// Reentrant holds on either side keep the other out until the last release, and each side's
/// hold count is the field's value in Redis.
async fn rlock_holds_exclude_the_other_side_and_count_on_both(room: &Room) {
    let name = room.name("rlock:counts");
    let java = &room.java;
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    for _ in 0..2 {
        java.ok("lock", lock_args("lock", &name, "a", leased.clone()))
            .await;
    }
    let field = java.field("a").await;
    assert_eq!(room.holders(&name).await, one(&field, "2"));
    let count = java
        .ok("hold_count", lock_args("lock", &name, "a", json!({})))
        .await;
    assert_eq!(count.u64("count"), 2, "Java's hold count");
    assert!(!room.ferrisson_gets_in(&name).await, "Java holds twice");
    assert!(room
        .client
        .lock(&name)
        .is_locked()
        .await
        .expect("is_locked"));
    room.java_unlock("lock", &name, "a").await;
    assert_eq!(room.holders(&name).await, one(&field, "1"));
    assert!(!room.ferrisson_gets_in(&name).await, "Java holds once");
    room.java_unlock("lock", &name, "a").await;
    assert_eq!(exists(&room.raw, &name).await, 0, "Java's last release");

    let lock = room.client.lock(&name).with_owner(Owner::new());
    let first = lock.lock_with_lease(LEASE).await.expect("ferrisson lock");
    let second = lock
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson re-enters");
    assert_eq!(room.holders(&name).await, one(first.holder_field(), "2"));
    assert_eq!(lock.hold_count().await.expect("hold_count"), 2);
    assert!(!room.java_try_lock("lock", &name, "b").await);
    let locked = java
        .ok("is_locked", lock_args("lock", &name, "b", json!({})))
        .await;
    assert!(locked.bool("locked"));
    let count = java
        .ok("hold_count", lock_args("lock", &name, "b", json!({})))
        .await;
    assert_eq!(count.u64("count"), 0, "Java's owner holds nothing");
    second.unlock().await.expect("ferrisson release");
    assert_eq!(room.holders(&name).await, one(first.holder_field(), "1"));
    assert!(!room.java_try_lock("lock", &name, "b").await);
    first.unlock().await.expect("ferrisson last release");
    assert!(room.java_try_lock("lock", &name, "b").await);
    room.java_unlock("lock", &name, "b").await;
}

/// A Java `tryLock(wait, lease)` parked behind a ferrisson hold with a 20 s lease acquires
/// within a second of ferrisson's unlock: its unlock message woke it.
async fn rlock_java_waiter_is_woken_by_a_ferrisson_unlock(room: &Room) {
    let name = room.name("rlock:wake-java");
    let guard = (room.client.lock(&name).with_owner(Owner::new()))
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson lock");
    let waits = json!({ "wait_ms": 25_000, "lease_ms": LEASE.as_millis() as u64 });
    let mut waiter = room
        .java
        .send("try_lock", lock_args("lock", &name, "w", waits))
        .await;
    wait_numsub(&room.raw, &channel_of(&name), 1, STEP).await;
    // Past its attempt after subscribing, refused: parked on its semaphore.
    sleep(Duration::from_millis(300)).await;
    assert!(
        waiter.poll().is_none(),
        "Java acquired while ferrisson held"
    );
    let released = Instant::now();
    guard.unlock().await.expect("ferrisson release");
    let reply = waiter.wait(LEASE + STEP).await;
    assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
    let woke_after = reply.received.duration_since(released);
    assert!(
        woke_after < WAKE_BOUND,
        "Java {} acquired {woke_after:?} after ferrisson's release: not woken by its message",
        room.version
    );
    let field = room.java.field("w").await;
    assert_eq!(room.holders(&name).await, one(field, "1"));
    let ttl = pttl(&room.raw, &name).await;
    assert!(ttl > 15_000 && ttl <= 20_000, "Java's lease: PTTL {ttl}");
    room.java_unlock("lock", &name, "w").await;
}

/// The reverse: a parked ferrisson waiter acquires within a second of Java's unlock, woken by
/// its message.
async fn rlock_ferrisson_waiter_is_woken_by_a_java_unlock(room: &Room) {
    let name = room.name("rlock:wake-ferrisson");
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    room.java
        .ok("lock", lock_args("lock", &name, "h", leased))
        .await;
    let lock = room.client.lock(&name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move {
        let guard = lock.lock_with_lease(LEASE).await;
        (guard, Instant::now())
    });
    wait_parked(&room.client, &name, 1).await;
    let released = Instant::now();
    room.java_unlock("lock", &name, "h").await;
    let (guard, acquired) = timeout(STEP, waiter)
        .await
        .expect("ferrisson acquires after Java's release")
        .expect("waiter task");
    let guard = guard.expect("ferrisson lock");
    let woke_after = acquired.duration_since(released);
    assert!(
        woke_after < WAKE_BOUND,
        "ferrisson acquired {woke_after:?} after Java {}'s release",
        room.version
    );
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message);
    assert_eq!(room.holders(&name).await, one(guard.holder_field(), "1"));
    guard.unlock().await.expect("ferrisson release");
}

/// Each side's force unlock frees the other's hold and wakes the other's waiter; the evicted
/// holder's release then fails and leaves the new hold alone.
async fn rlock_force_unlock_works_across(room: &Room) {
    let name = room.name("rlock:force-by-ferrisson");
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    room.java
        .ok("lock", lock_args("lock", &name, "h", leased.clone()))
        .await;
    let lock = room.client.lock(&name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move { lock.lock_with_lease(LEASE).await });
    wait_parked(&room.client, &name, 1).await;
    let forced = room.client.lock(&name).force_unlock().await;
    assert!(
        forced.expect("ferrisson force unlock"),
        "it deleted Java's hold"
    );
    let guard = timeout(WAKE_BOUND + STEP, waiter)
        .await
        .expect("the ferrisson waiter acquires after the force unlock")
        .expect("waiter task")
        .expect("ferrisson lock");
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message);
    let stale = room
        .java
        .call("unlock", lock_args("lock", &name, "h", json!({})))
        .await;
    assert!(
        !stale.ok(),
        "Java's evicted holder released: {:?}",
        stale.fields
    );
    assert_eq!(error_class(&stale), Some("IllegalMonitorStateException"));
    assert_eq!(room.holders(&name).await, one(guard.holder_field(), "1"));
    guard.unlock().await.expect("ferrisson release");

    let name = room.name("rlock:force-by-java");
    let guard = (room.client.lock(&name).with_owner(Owner::new()))
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson lock");
    let waits = json!({ "wait_ms": 25_000, "lease_ms": LEASE.as_millis() as u64 });
    let waiter = room
        .java
        .send("try_lock", lock_args("lock", &name, "w", waits))
        .await;
    wait_numsub(&room.raw, &channel_of(&name), 1, STEP).await;
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    let forced = room
        .java
        .ok("force_unlock", lock_args("lock", &name, "f", json!({})))
        .await;
    assert!(
        forced.bool("result"),
        "Java's force unlock deleted the hold"
    );
    let reply = waiter.wait(STEP).await;
    assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
    assert!(reply.received.duration_since(released) < WAKE_BOUND);
    let field = room.java.field("w").await;
    assert!(
        matches!(guard.unlock().await, Err(Error::LeaseLost { .. })),
        "ferrisson's evicted release"
    );
    assert_eq!(room.holders(&name).await, one(field, "1"));
    room.java_unlock("lock", &name, "w").await;
}

/// A hold taken without a lease on either side outlives the watchdog lease, renewed, and
/// keeps the other side out all along.
async fn rlock_each_watchdog_keeps_the_other_side_out(room: &Room) {
    let by_java = room.name("rlock:watchdog-java");
    let by_ferrisson = room.name("rlock:watchdog-ferrisson");
    room.java
        .ok("lock", lock_args("lock", &by_java, "h", json!({})))
        .await;
    let guard = (room.client.lock(&by_ferrisson).with_owner(Owner::new()))
        .lock()
        .await
        .expect("ferrisson lock");
    sleep(PAST_THE_LEASE).await;
    let field = room.java.field("h").await;
    assert_eq!(room.holders(&by_java).await, one(&field, "1"));
    assert!(
        pttl(&room.raw, &by_java).await > 0,
        "Java's watchdog renews"
    );
    assert!(!room.ferrisson_gets_in(&by_java).await);
    assert_eq!(
        room.holders(&by_ferrisson).await,
        one(guard.holder_field(), "1")
    );
    assert!(
        pttl(&room.raw, &by_ferrisson).await > 0,
        "ferrisson's watchdog renews"
    );
    assert!(!room.java_try_lock("lock", &by_ferrisson, "b").await);
    room.java_unlock("lock", &by_java, "h").await;
    guard.unlock().await.expect("ferrisson release");
}

/// Java holds with the watchdog; ferrisson force-unlocks and takes the lock with a fixed
/// lease. Java's renewals (every second) must not extend ferrisson's hold, and Java's unlock
/// then fails with `IllegalMonitorStateException`, leaving the hold alone.
async fn rlock_java_watchdog_never_extends_a_hold_taken_after_a_force_unlock(room: &Room) {
    let name = room.name("rlock:retaken");
    room.java
        .ok("lock", lock_args("lock", &name, "h2", json!({})))
        .await;
    assert!(room
        .client
        .lock(&name)
        .force_unlock()
        .await
        .expect("force unlock"));
    let lease = Duration::from_secs(10);
    let guard = (room.client.lock(&name).with_owner(Owner::new()))
        .lock_with_lease(lease)
        .await
        .expect("ferrisson takes the freed lock");
    let taken = Instant::now();
    sleep(Duration::from_millis(2_500)).await;
    let ttl = pttl(&room.raw, &name).await;
    let left = lease.saturating_sub(taken.elapsed()).as_millis() as i64;
    assert!(
        ttl <= left + 50,
        "PTTL {ttl} ms, {left} ms left of ferrisson's lease: Java {}'s watchdog extended it",
        room.version
    );
    let stale = room
        .java
        .call("unlock", lock_args("lock", &name, "h2", json!({})))
        .await;
    assert_eq!(
        error_class(&stale),
        Some("IllegalMonitorStateException"),
        "{:?}",
        stale.fields
    );
    assert_eq!(room.holders(&name).await, one(guard.holder_field(), "1"));
    guard.unlock().await.expect("ferrisson release");
}

/// Three ferrisson owners keep the lock busy, handing it over locally; a Java waiter that
/// subscribes is not starved: it gets the lock within its 5 s wait.
async fn rlock_local_hand_offs_leave_a_java_waiter_its_turn(room: &Room) {
    let name = room.name("rlock:hand-offs");
    let stop = Arc::new(AtomicBool::new(false));
    let mut loops = Vec::new();
    for _ in 0..3 {
        let lock = room.client.lock(&name).with_owner(Owner::new());
        let stop = Arc::clone(&stop);
        loops.push(tokio::spawn(async move {
            let mut holds = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let guard = lock.lock_with_lease(LEASE).await.expect("ferrisson lock");
                sleep(Duration::from_millis(1)).await;
                guard.unlock().await.expect("ferrisson release");
                holds += 1;
            }
            holds
        }));
    }
    sleep(Duration::from_millis(200)).await;
    let asked = Instant::now();
    let waits = json!({ "wait_ms": 5_000, "lease_ms": 5_000 });
    let reply = room
        .java
        .call("try_lock", lock_args("lock", &name, "w", waits))
        .await;
    let waited = asked.elapsed();
    stop.store(true, Ordering::Relaxed);
    let acquired = reply.ok() && reply.bool("acquired");
    if acquired {
        room.java_unlock("lock", &name, "w").await;
    }
    let mut holds = 0;
    for each in loops {
        holds += each.await.expect("loop task");
    }
    eprintln!(
        "Java {}: in after {waited:?} beside {holds} ferrisson holds",
        room.version
    );
    assert!(
        acquired,
        "Java {} starved by local hand-offs: {:?}",
        room.version, reply.fields
    );
}

// ---------------------------------------------------------------------------------------------
// Fair lock and non-reentrant fair lock
// ---------------------------------------------------------------------------------------------

async fn fair_lock(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    let client = room.client.clone();
    fair_scenarios(&room, "fair", move |name| client.fair_lock(name)).await?;
    room.java.quit().await;
    Ok(())
}

async fn non_reentrant_fair_lock(version: Version) -> Result<(), Unavailable> {
    if support::skip(
        version.has_non_reentrant_locks(),
        &format!("Redisson {version} has no non-reentrant fair lock (4.4.0 and later)"),
    ) {
        return Ok(());
    }
    let room = Room::new(version).await?;
    let client = room.client.clone();
    fair_scenarios(&room, "nonreentrant_fair", move |name| {
        client.non_reentrant_fair_lock(name)
    })
    .await?;
    room.java.quit().await;
    Ok(())
}

async fn fair_scenarios<P: Protocol>(
    room: &Room,
    kind: &str,
    lock: impl Fn(&str) -> Handle<P> + Send + Sync + Clone + 'static,
) -> Result<(), Unavailable> {
    fair_waiters_of_both_sides_are_served_in_arrival_order(room, kind, &lock).await;
    fair_a_waiter_that_gives_up_does_not_delay_the_next(room, kind, &lock).await;
    fair_a_killed_java_waiter_delays_the_next_by_its_wait_not_forever(room, kind, &lock).await
}

fn queue_of(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn timeouts_of(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

/// The fair lock's queue once it holds `n` waiters (panics after [`STEP`]).
async fn queued(raw: &RawClient, name: &str, n: usize) -> Vec<String> {
    let queue = queue_of(name);
    let probe = || async {
        raw.lrange::<Vec<String>, _>(&queue, 0, -1)
            .await
            .expect("LRANGE")
    };
    poll_until(STEP, Duration::from_millis(5), probe, |q: &Vec<String>| {
        q.len() == n
    })
    .await
    .unwrap_or_else(|q| panic!("{name}: {n} waiters not queued within {STEP:?}: {q:?}"))
}

/// A ferrisson waiter of `lock` that acquires with [`LEASE`], says when, and releases when
/// told.
struct FerrissonWaiter {
    acquired: tokio::sync::oneshot::Receiver<(String, Instant)>,
    release: tokio::sync::oneshot::Sender<()>,
}

fn spawn_waiter<P: Protocol>(lock: Handle<P>) -> FerrissonWaiter {
    let (acquired_tx, acquired) = tokio::sync::oneshot::channel();
    let (release, release_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let guard: Guard<P> = lock
            .lock_with_lease(LEASE)
            .await
            .expect("ferrisson acquires");
        let _ = acquired_tx.send((guard.holder_field().to_owned(), Instant::now()));
        let _ = release_rx.await;
        guard.unlock().await.expect("ferrisson release");
    });
    FerrissonWaiter { acquired, release }
}

impl FerrissonWaiter {
    /// Its holder field and when it acquired, within `within` of now.
    async fn acquired(&mut self, within: Duration, what: &str) -> (String, Instant) {
        timeout(within, &mut self.acquired)
            .await
            .unwrap_or_else(|_| {
                panic!("{what}: the ferrisson waiter did not acquire in {within:?}")
            })
            .expect("waiter task")
    }

    fn has_acquired(&mut self) -> bool {
        !matches!(
            self.acquired.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty)
        )
    }

    async fn release(self) {
        let _ = self.release.send(());
    }
}

/// Java, ferrisson, Java, ferrisson queue up behind a ferrisson holder, in that order: each
/// release hands the lock to the next of them, whichever side it is on, within a second.
async fn fair_waiters_of_both_sides_are_served_in_arrival_order<P: Protocol>(
    room: &Room,
    kind: &str,
    lock: &(impl Fn(&str) -> Handle<P> + Send + Sync + Clone + 'static),
) {
    let name = room.name(&format!("{kind}:order"));
    let java = &room.java;
    let holder = lock(&name).with_owner(Owner::new());
    let held = holder
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson holds");
    // An owner's thread id is asked before it blocks in its wait (it answers on that thread).
    let (j1_field, j2_field) = (java.field("j1").await, java.field("j2").await);
    let waits = json!({ "wait_ms": 30_000, "lease_ms": LEASE.as_millis() as u64 });
    let j1 = java
        .send("try_lock", lock_args(kind, &name, "j1", waits.clone()))
        .await;
    queued(&room.raw, &name, 1).await;
    let mut f1 = spawn_waiter(lock(&name).with_owner(Owner::new()));
    queued(&room.raw, &name, 2).await;
    let mut j2 = java
        .send("try_lock", lock_args(kind, &name, "j2", waits))
        .await;
    queued(&room.raw, &name, 3).await;
    let mut f2 = spawn_waiter(lock(&name).with_owner(Owner::new()));
    let queue = queued(&room.raw, &name, 4).await;
    assert_eq!((&queue[0], &queue[2]), (&j1_field, &j2_field), "{queue:?}");
    let ours = format!("{}:", room.client.id());
    assert!(
        queue[1].starts_with(&ours) && queue[3].starts_with(&ours),
        "{queue:?}"
    );

    let released = Instant::now();
    held.unlock().await.expect("ferrisson release");
    let reply = j1.wait(STEP).await;
    assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
    assert!(
        reply.received.duration_since(released) < WAKE_BOUND,
        "Java's turn came late"
    );
    assert!(j2.poll().is_none() && !f1.has_acquired() && !f2.has_acquired());
    assert_eq!(room.holders(&name).await, one(&j1_field, "1"));

    let released = Instant::now();
    room.java_unlock(kind, &name, "j1").await;
    let (field, acquired) = f1.acquired(STEP, "second in line").await;
    assert_eq!(field, queue[1]);
    assert!(acquired.duration_since(released) < WAKE_BOUND);
    assert!(j2.poll().is_none() && !f2.has_acquired());

    let released = Instant::now();
    f1.release().await;
    let reply = j2.wait(STEP).await;
    assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
    assert!(reply.received.duration_since(released) < WAKE_BOUND + Duration::from_millis(100));
    assert!(!f2.has_acquired());

    let released = Instant::now();
    room.java_unlock(kind, &name, "j2").await;
    let (field, acquired) = f2.acquired(STEP, "fourth in line").await;
    assert_eq!(field, queue[3]);
    assert!(acquired.duration_since(released) < WAKE_BOUND);
    f2.release().await;
    let gone =
        || async { exists(&room.raw, &name).await + exists(&room.raw, &queue_of(&name)).await };
    poll_until(STEP, Duration::from_millis(5), gone, |n| *n == 0)
        .await
        .expect("lock and queue gone after the last release");
}

/// A waiter whose wait runs out leaves the line at once (its give-up), so the waiter behind it
/// is next: a Java `tryLock(1 s)` ahead of a ferrisson waiter, and the reverse.
async fn fair_a_waiter_that_gives_up_does_not_delay_the_next<P: Protocol>(
    room: &Room,
    kind: &str,
    lock: &(impl Fn(&str) -> Handle<P> + Send + Sync + Clone + 'static),
) {
    let name = room.name(&format!("{kind}:java-gives-up"));
    let held = (lock(&name).with_owner(Owner::new()))
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson holds");
    let short = json!({ "wait_ms": 1_000, "lease_ms": LEASE.as_millis() as u64 });
    let quitter = room
        .java
        .send("try_lock", lock_args(kind, &name, "q", short))
        .await;
    queued(&room.raw, &name, 1).await;
    let mut next = spawn_waiter(lock(&name).with_owner(Owner::new()));
    queued(&room.raw, &name, 2).await;
    let reply = quitter.wait(STEP).await;
    assert!(reply.ok() && !reply.bool("acquired"), "{:?}", reply.fields);
    let queue = queued(&room.raw, &name, 1).await;
    assert!(queue[0].starts_with(room.client.id()), "{queue:?}");
    let released = Instant::now();
    held.unlock().await.expect("ferrisson release");
    let (_, acquired) = next
        .acquired(STEP, "behind a Java waiter that gave up")
        .await;
    assert!(acquired.duration_since(released) < WAKE_BOUND);
    next.release().await;

    let name = room.name(&format!("{kind}:ferrisson-gives-up"));
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    room.java
        .ok("lock", lock_args(kind, &name, "h", leased))
        .await;
    let quitter = lock(&name).with_owner(Owner::new());
    let quitting = tokio::spawn(async move {
        quitter
            .try_lock_within_with_lease(Duration::from_secs(1), LEASE)
            .await
            .map(|attempt| attempt.acquired().is_some())
    });
    queued(&room.raw, &name, 1).await;
    let next_field = room.java.field("n").await;
    let waits = json!({ "wait_ms": 30_000, "lease_ms": LEASE.as_millis() as u64 });
    let next = room
        .java
        .send("try_lock", lock_args(kind, &name, "n", waits))
        .await;
    queued(&room.raw, &name, 2).await;
    let gave_up = timeout(STEP, quitting)
        .await
        .expect("the ferrisson wait ends");
    assert!(
        !gave_up.expect("task").expect("try_lock"),
        "it could not acquire"
    );
    let queue = queued(&room.raw, &name, 1).await;
    assert_eq!(queue[0], next_field);
    let released = Instant::now();
    room.java_unlock(kind, &name, "h").await;
    let reply = next.wait(STEP).await;
    assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
    assert!(reply.received.duration_since(released) < WAKE_BOUND);
    room.java_unlock(kind, &name, "n").await;
}

/// A Java waiter at the head of the line is killed (`kill -9`): it never gives up, so the
/// waiter behind it gets the lock when the dead one's deadline passes (its wait of 2 s after
/// the lock's TTL), and not before, nor much after.
async fn fair_a_killed_java_waiter_delays_the_next_by_its_wait_not_forever<P: Protocol>(
    room: &Room,
    kind: &str,
    lock: &(impl Fn(&str) -> Handle<P> + Send + Sync + Clone + 'static),
) -> Result<(), Unavailable> {
    let name = room.name(&format!("{kind}:killed"));
    let url = room.server.url();
    let doomed = JavaPeer::start_with(room.version, &[url], Options::default()).await?;
    let held = (lock(&name).with_owner(Owner::new()))
        .lock_with_lease(Duration::from_secs(3))
        .await
        .expect("ferrisson holds");
    let waits = json!({ "wait_ms": 2_000, "lease_ms": LEASE.as_millis() as u64 });
    let _never = doomed
        .send("try_lock", lock_args(kind, &name, "d", waits))
        .await;
    let queue = queued(&room.raw, &name, 1).await;
    let deadline: f64 = room
        .raw
        .zscore(timeouts_of(&name), &queue[0])
        .await
        .expect("ZSCORE");
    support::fault::signal_pid(doomed.pid(), nix::sys::signal::Signal::SIGKILL);
    let mut next = spawn_waiter(lock(&name).with_owner(Owner::new()));
    queued(&room.raw, &name, 2).await;
    held.unlock().await.expect("ferrisson release");
    let (_, _) = next
        .acquired(Duration::from_secs(15), "behind a killed Java waiter")
        .await;
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as f64;
    eprintln!(
        "Java {}: the next waiter got in {:.0} ms after the killed head's deadline",
        room.version,
        at - deadline
    );
    assert!(
        at >= deadline - 50.0 && at <= deadline + 2_000.0,
        "acquired at {at}, the dead head's deadline was {deadline}"
    );
    next.release().await;
    drop(doomed);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Read-write lock
// ---------------------------------------------------------------------------------------------

async fn read_write_lock(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    rw_a_ferrisson_write_release_wakes_every_java_reader_at_once(&room).await;
    rw_a_java_read_release_spares_a_ferrisson_read_hold(&room).await;
    rw_each_side_renews_its_own_reads(&room).await;
    rw_downgrades_are_seen_across(&room).await;
    room.java.quit().await;
    Ok(())
}

/// The timeout key of read hold `k` of `field`: T(N) + `:` + F + `:rwlock_timeout:` + k.
fn read_timeout_key(name: &str, field: &str, k: u32) -> String {
    format!("{{{name}}}:{field}:rwlock_timeout:{k}")
}

/// Three Java readers wait (one subscription) behind a ferrisson writer with a 20 s lease: its
/// release publishes `1`, which wakes all three at once.
async fn rw_a_ferrisson_write_release_wakes_every_java_reader_at_once(room: &Room) {
    let name = room.name("rw:wake-readers");
    let writer = (room.client.read_write_lock(&name).with_owner(Owner::new()))
        .write_lock()
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson writes");
    let waits = json!({ "wait_ms": 25_000, "lease_ms": LEASE.as_millis() as u64 });
    let mut readers = Vec::new();
    for owner in ["r1", "r2", "r3"] {
        let reader = room
            .java
            .send("try_lock", lock_args("read", &name, owner, waits.clone()));
        readers.push(reader.await);
    }
    wait_numsub(&room.raw, &format!("redisson_rwlock:{{{name}}}"), 1, STEP).await;
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    writer.unlock().await.expect("ferrisson write release");
    for reader in readers {
        let reply = reader.wait(STEP).await;
        assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
        let woke_after = reply.received.duration_since(released);
        assert!(
            woke_after < WAKE_BOUND,
            "a Java {} reader acquired {woke_after:?} after the write release",
            room.version
        );
    }
    let holders = room.holders(&name).await;
    assert_eq!(holders.get("mode").map(String::as_str), Some("read"));
    for owner in ["r1", "r2", "r3"] {
        let field = room.java.field(owner).await;
        assert_eq!(
            holders.get(&field).map(String::as_str),
            Some("1"),
            "{holders:?}"
        );
        room.java_unlock("read", &name, owner).await;
    }
    assert_eq!(exists(&room.raw, &name).await, 0);
}

/// Java and ferrisson both read; Java's release leaves ferrisson's hold (and its timeout key)
/// in place, a Java writer still cannot get in, and ferrisson's release then frees the lock.
async fn rw_a_java_read_release_spares_a_ferrisson_read_hold(room: &Room) {
    let name = room.name("rw:java-read-release");
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    room.java
        .ok("lock", lock_args("read", &name, "r", leased))
        .await;
    let ours = (room.client.read_write_lock(&name).with_owner(Owner::new()))
        .read_lock()
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson reads beside Java");
    room.java_unlock("read", &name, "r").await;
    let holders = room.holders(&name).await;
    assert_eq!(
        holders,
        HashMap::from([
            ("mode".to_owned(), "read".to_owned()),
            (ours.holder_field().to_owned(), "1".to_owned()),
        ])
    );
    let timeout_key = read_timeout_key(&name, ours.holder_field(), 1);
    assert!(
        pttl(&room.raw, &timeout_key).await > 15_000,
        "{timeout_key}"
    );
    assert!(pttl(&room.raw, &name).await > 15_000);
    assert!(
        !room.java_try_lock("write", &name, "w").await,
        "a reader is left"
    );
    ours.unlock().await.expect("ferrisson read release");
    assert_eq!(exists(&room.raw, &name).await, 0);
    assert!(room.java_try_lock("write", &name, "w").await);
    room.java_unlock("write", &name, "w").await;
}

/// Java and ferrisson read with the watchdog (3 s leases): both holds outlive the lease, and
/// after either side releases, the other's hold goes on being renewed by its own side.
async fn rw_each_side_renews_its_own_reads(room: &Room) {
    for java_leaves_first in [true, false] {
        let name = room.name(&format!("rw:renewals:{java_leaves_first}"));
        room.java
            .ok("lock", lock_args("read", &name, "r", json!({})))
            .await;
        let ours = (room.client.read_write_lock(&name).with_owner(Owner::new()))
            .read_lock()
            .lock()
            .await
            .expect("ferrisson reads beside Java");
        let (java_field, our_field) = (room.java.field("r").await, ours.holder_field().to_owned());
        sleep(PAST_THE_LEASE).await;
        for field in [&java_field, &our_field] {
            let key = read_timeout_key(&name, field, 1);
            assert!(pttl(&room.raw, &key).await > 0, "{key} renewed");
        }
        assert!(!room.java_try_lock("write", &name, "w").await);
        let mut ours = Some(ours);
        let left_alone = if java_leaves_first {
            room.java_unlock("read", &name, "r").await;
            &our_field
        } else {
            let guard = ours.take().expect("ferrisson's hold");
            guard.unlock().await.expect("ferrisson read release");
            &java_field
        };
        sleep(PAST_THE_LEASE).await;
        let key = read_timeout_key(&name, left_alone, 1);
        assert!(
            pttl(&room.raw, &key).await > 0 && pttl(&room.raw, &name).await > 0,
            "the hold left alone ({key}) is renewed by its own side"
        );
        assert!(!room.ferrisson_gets_in_to_write(&name).await);
        match ours {
            Some(guard) => guard.unlock().await.expect("ferrisson read release"),
            None => room.java_unlock("read", &name, "r").await,
        }
        assert_eq!(exists(&room.raw, &name).await, 0);
    }
}

/// A writer that takes a read hold and releases its write keeps reading: the other side's
/// readers get in at once, its writers do not. Each side downgrades in turn.
async fn rw_downgrades_are_seen_across(room: &Room) {
    let name = room.name("rw:downgrade-ferrisson");
    let rw = room.client.read_write_lock(&name).with_owner(Owner::new());
    let write = rw.write_lock().lock_with_lease(LEASE).await.expect("write");
    let read = rw
        .read_lock()
        .lock_with_lease(LEASE)
        .await
        .expect("read under the write");
    assert!(
        !room.java_try_lock("read", &name, "r").await,
        "a writer holds"
    );
    write.unlock().await.expect("write release");
    let holders = room.holders(&name).await;
    assert_eq!(
        holders.get("mode").map(String::as_str),
        Some("read"),
        "{holders:?}"
    );
    assert!(
        room.java_try_lock("read", &name, "r").await,
        "Java reads beside the downgraded"
    );
    assert!(!room.java_try_lock("write", &name, "w").await);
    room.java_unlock("read", &name, "r").await;
    read.unlock().await.expect("read release");
    assert_eq!(exists(&room.raw, &name).await, 0);

    let name = room.name("rw:downgrade-java");
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    room.java
        .ok("lock", lock_args("write", &name, "d", leased.clone()))
        .await;
    room.java
        .ok("lock", lock_args("read", &name, "d", leased))
        .await;
    assert!(
        !room.ferrisson_gets_in_to_read(&name).await,
        "a Java writer holds"
    );
    room.java_unlock("write", &name, "d").await;
    let holders = room.holders(&name).await;
    assert_eq!(
        holders.get("mode").map(String::as_str),
        Some("read"),
        "{holders:?}"
    );
    assert!(
        room.ferrisson_gets_in_to_read(&name).await,
        "ferrisson reads beside it"
    );
    assert!(!room.ferrisson_gets_in_to_write(&name).await);
    room.java_unlock("read", &name, "d").await;
    assert_eq!(exists(&room.raw, &name).await, 0);
}

impl Room {
    /// A ferrisson read `try_lock` by a new owner: whether it acquired (released at once).
    async fn ferrisson_gets_in_to_read(&self, name: &str) -> bool {
        let rw = self.client.read_write_lock(name).with_owner(Owner::new());
        gets_in(rw.read_lock()).await
    }

    /// A ferrisson write `try_lock` by a new owner: whether it acquired (released at once).
    async fn ferrisson_gets_in_to_write(&self, name: &str) -> bool {
        let rw = self.client.read_write_lock(name).with_owner(Owner::new());
        gets_in(rw.write_lock()).await
    }
}

// ---------------------------------------------------------------------------------------------
// Fenced lock
// ---------------------------------------------------------------------------------------------

async fn fenced_lock(version: Version) -> Result<(), Unavailable> {
    if support::skip(
        version.has_fenced_lock(),
        &format!("Redisson {version} has no fenced lock (3.19.0 and later)"),
    ) {
        return Ok(());
    }
    let room = Room::new(version).await?;
    let name = room.name("fenced:tokens");
    let lock = room.client.fenced_lock(&name);
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    let mut last = 0;
    for round in 0..3 {
        let java = room
            .java
            .ok(
                "lock_token",
                lock_args("fenced", &name, "j", leased.clone()),
            )
            .await
            .u64("token");
        assert!(
            java > last,
            "round {round}: Java's token {java} after {last}"
        );
        assert!(
            !room.ferrisson_gets_in(&name).await,
            "a fenced hold excludes a plain one"
        );
        room.java_unlock("fenced", &name, "j").await;
        let ours = lock
            .lock_with_lease(LEASE)
            .await
            .expect("ferrisson fenced lock");
        assert!(
            ours.token() > java,
            "ferrisson's {} after Java's {java}",
            ours.token()
        );
        let again = lock
            .lock_with_lease(LEASE)
            .await
            .expect("a re-entry takes a token too");
        assert!(again.token() > ours.token());
        let busy = room
            .java
            .ok(
                "try_lock_token",
                lock_args("fenced", &name, "j", json!({ "wait_ms": 0 })),
            )
            .await;
        assert!(
            busy.fields.get("token").is_some_and(|t| t.is_null()),
            "{:?}",
            busy.fields
        );
        let seen = room
            .java
            .ok("get_token", lock_args("fenced", &name, "j", json!({})))
            .await;
        assert_eq!(
            seen.u64("token"),
            again.token(),
            "Java reads ferrisson's last token"
        );
        last = again.token();
        again.unlock().await.expect("release");
        ours.unlock().await.expect("release");
    }
    assert_eq!(lock.token().await.expect("token"), Some(last));

    // A ferrisson waiter is woken by the Java release, and its token follows Java's.
    let java = room
        .java
        .ok("lock_token", lock_args("fenced", &name, "j", leased))
        .await
        .u64("token");
    let waiting = room.client.fenced_lock(&name).with_owner(Owner::new());
    let waiter = tokio::spawn(async move { waiting.lock_with_lease(LEASE).await });
    wait_parked(&room.client, &name, 1).await;
    let released = Instant::now();
    room.java_unlock("fenced", &name, "j").await;
    let guard = timeout(STEP, waiter)
        .await
        .expect("acquires")
        .expect("task")
        .expect("lock");
    assert!(released.elapsed() < WAKE_BOUND + STEP);
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message);
    assert!(guard.token() > java);
    guard.unlock().await.expect("release");
    room.java.quit().await;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Semaphore, permit-expirable semaphore, count-down latch
// ---------------------------------------------------------------------------------------------

async fn semaphores_and_latch(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    semaphore_permits_cross_and_wake_an_untimed_java_acquire(&room).await;
    permit_semaphore_ids_cross_and_releases_and_lapses_wake_java(&room).await;
    latch_count_downs_wake_an_untimed_java_await_and_the_reverse(&room).await;
    room.java.quit().await;
    Ok(())
}

/// The reply of `pending` within [`STEP`]: an untimed Java call fails the test on this bound
/// instead of hanging it.
async fn within_step(
    pending: support::json_lines::Pending,
    what: &str,
) -> support::json_lines::Reply {
    let reply = pending.wait(STEP).await;
    assert!(reply.ok(), "{what}: {:?}", reply.fields);
    reply
}

async fn semaphore_permits_cross_and_wake_an_untimed_java_acquire(room: &Room) {
    let name = room.name("semaphore");
    let semaphore = room.client.semaphore(&name);
    assert!(semaphore.try_set_permits(3).await.expect("try_set_permits"));
    let set = room
        .java
        .ok("sem_set", json!({ "name": name, "permits": 9 }))
        .await;
    assert!(!set.bool("result"), "Java sees the permits ferrisson set");
    room.java
        .ok(
            "sem_acquire",
            json!({ "name": name, "owner": "a", "permits": 2 }),
        )
        .await;
    assert_eq!(semaphore.available_permits().await.expect("available"), 1);
    semaphore
        .release(2)
        .await
        .expect("ferrisson gives back Java's permits");
    let available = room.java.ok("sem_available", json!({ "name": name })).await;
    assert_eq!(available.u64("permits"), 3);
    semaphore
        .acquire(3)
        .await
        .expect("ferrisson takes all")
        .forget();
    room.java
        .ok("sem_release", json!({ "name": name, "permits": 3 }))
        .await;
    assert_eq!(semaphore.available_permits().await.expect("available"), 3);

    // Java's untimed acquire(), woken by ferrisson's release.
    semaphore
        .acquire(3)
        .await
        .expect("ferrisson takes all")
        .forget();
    let waiter = room
        .java
        .send(
            "sem_acquire",
            json!({ "name": name, "owner": "w", "permits": 1 }),
        )
        .await;
    wait_numsub(&room.raw, &format!("redisson_sc:{{{name}}}"), 1, STEP).await;
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    semaphore.release(1).await.expect("release");
    let reply = within_step(waiter, "Java's untimed acquire").await;
    assert!(reply.received.duration_since(released) < WAKE_BOUND);
    assert_eq!(semaphore.available_permits().await.expect("available"), 0);

    // And a ferrisson waiter woken by Java's release.
    let waiting = room.client.semaphore(&name);
    let waiter = tokio::spawn(async move { waiting.acquire(1).await.map(|p| p.forget()) });
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    room.java
        .ok("sem_release", json!({ "name": name, "permits": 1 }))
        .await;
    timeout(STEP, waiter)
        .await
        .expect("acquires")
        .expect("task")
        .expect("acquire");
    assert!(released.elapsed() < WAKE_BOUND);
}

async fn permit_semaphore_ids_cross_and_releases_and_lapses_wake_java(room: &Room) {
    let name = room.name("permit-semaphore");
    let format = if room.version.hex_permit_ids() {
        PermitIdFormat::Hex
    } else {
        PermitIdFormat::Raw
    };
    let semaphore = room
        .client
        .permit_expirable_semaphore(&name)
        .with_id_format(format);
    assert!(semaphore.try_set_permits(2).await.expect("try_set_permits"));
    let java_id = room
        .java
        .ok("pes_acquire", json!({ "name": name, "owner": "a" }))
        .await
        .str("permit_id")
        .expect("a permit id")
        .to_owned();
    semaphore
        .release(&java_id)
        .await
        .expect("ferrisson releases Java's permit by its id");
    let ours = semaphore
        .acquire(None)
        .await
        .expect("ferrisson acquires")
        .forget();
    let released = room
        .java
        .ok("pes_release", json!({ "name": name, "permit_id": ours }))
        .await;
    assert!(
        released.bool("result"),
        "Java releases ferrisson's permit by its id"
    );
    let available = room.java.ok("pes_available", json!({ "name": name })).await;
    assert_eq!(available.u64("permits"), 2);

    // Java's untimed acquire(), woken by ferrisson's release of a permit.
    let first = semaphore.acquire(None).await.expect("acquire");
    let second = semaphore.acquire(None).await.expect("acquire");
    let waiter = room
        .java
        .send("pes_acquire", json!({ "name": name, "owner": "w" }))
        .await;
    wait_numsub(&room.raw, &format!("redisson_sc:{{{name}}}"), 1, STEP).await;
    sleep(Duration::from_millis(300)).await;
    let at = Instant::now();
    first.release().await.expect("release");
    let reply = within_step(waiter, "Java's untimed acquire after a release").await;
    assert!(reply.received.duration_since(at) < WAKE_BOUND);
    let woken = reply.str("permit_id").expect("an id").to_owned();

    // A permit whose lease lapses wakes Java's untimed acquire when it lapses.
    second.release().await.expect("release");
    let lease = Duration::from_secs(1);
    let _lapsing = semaphore
        .acquire(Some(lease))
        .await
        .expect("acquire with a lease");
    let taken = Instant::now();
    let waiter = room
        .java
        .send("pes_acquire", json!({ "name": name, "owner": "w" }))
        .await;
    let reply = within_step(waiter, "Java's untimed acquire after a lapse").await;
    let waited = reply.received.duration_since(taken);
    assert!(
        waited >= lease - Duration::from_millis(50) && waited < lease + WAKE_BOUND,
        "Java {} acquired {waited:?} after a {lease:?} permit was taken",
        room.version
    );
    for id in [woken, reply.str("permit_id").expect("an id").to_owned()] {
        semaphore.release(&id).await.expect("release Java's permit");
    }
}

async fn latch_count_downs_wake_an_untimed_java_await_and_the_reverse(room: &Room) {
    let name = room.name("latch");
    let latch = room.client.count_down_latch(&name);
    assert!(latch.try_set_count(2).await.expect("try_set_count"));
    let set = room
        .java
        .ok("latch_set", json!({ "name": name, "count": 5 }))
        .await;
    assert!(!set.bool("result"), "Java sees ferrisson's latch");
    let mut waiter = room
        .java
        .send("latch_await", json!({ "name": name, "owner": "w" }))
        .await;
    let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
    wait_numsub(&room.raw, &channel, 1, STEP).await;
    sleep(Duration::from_millis(300)).await;
    latch.count_down().await.expect("count down");
    sleep(Duration::from_millis(300)).await;
    assert!(waiter.poll().is_none(), "Java's await returned at count 1");
    let counted = Instant::now();
    latch.count_down().await.expect("count down");
    let reply = within_step(waiter, "Java's untimed await").await;
    assert!(reply.bool("done") && reply.received.duration_since(counted) < WAKE_BOUND);
    assert_eq!(
        exists(&room.raw, &name).await,
        0,
        "the latch is gone at zero"
    );

    room.java
        .ok("latch_set", json!({ "name": name, "count": 1 }))
        .await;
    assert_eq!(latch.count().await.expect("count"), 1);
    let waiting = room.client.count_down_latch(&name);
    let waiter = tokio::spawn(async move { waiting.wait().await });
    wait_numsub(&room.raw, &channel, 1, STEP).await;
    sleep(Duration::from_millis(300)).await;
    let counted = Instant::now();
    room.java
        .ok("latch_count_down", json!({ "name": name }))
        .await;
    timeout(STEP, waiter)
        .await
        .expect("ferrisson's wait ends")
        .expect("task")
        .expect("wait");
    assert!(counted.elapsed() < WAKE_BOUND);
}

/// `./dev test` resolves the versions of `tests/peers/java/versions` before the tests run: the
/// file lists exactly the matrix these tests run on.
#[test]
fn the_java_peers_versions_file_lists_the_matrix() {
    let path = support::java::project_dir().join("versions");
    let text = std::fs::read_to_string(&path).expect("tests/peers/java/versions");
    let listed: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let matrix: Vec<String> = support::java::VERSIONS
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(listed, matrix);
}

// ---------------------------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------------------------

async fn faults(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    let (killed, stopped, ()) = tokio::join!(
        faults_a_killed_java_holder_lets_ferrisson_in_after_its_lease(&room),
        faults_a_stopped_java_holder_loses_the_lock_for_good(&room),
        faults_a_killed_ferrisson_holder_lets_java_in_after_its_lease(&room),
    );
    killed?;
    stopped?;
    room.java.quit().await;
    Ok(())
}

/// A Java holder in watchdog mode (lease [`WATCHDOG`]) is killed with `kill -9`: a ferrisson
/// waiter gets in once the last renewal's lease ends, not before and not much later.
async fn faults_a_killed_java_holder_lets_ferrisson_in_after_its_lease(
    room: &Room,
) -> Result<(), Unavailable> {
    let name = room.name("faults:killed-java");
    let doomed = room.java_holder_of(&name).await?;
    // Past one renewal, so that the lease left at the kill is a renewed one.
    sleep(WATCHDOG / 2).await;
    let waiter = room.client.lock(&name).with_owner(Owner::new());
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .try_lock_within(STEP)
            .await
            .expect("ferrisson try_lock")
            .acquired();
        (guard, Instant::now())
    });
    let ttl = pttl(&room.raw, &name).await;
    let killed = Instant::now();
    support::fault::signal_pid(doomed.pid(), nix::sys::signal::Signal::SIGKILL);
    let (guard, at) = waiting.await.expect("the waiter's task");
    let guard = guard.expect("ferrisson gets in after the killed holder's lease");
    let after = at.duration_since(killed);
    got_in_as_the_lease_ended(room, "ferrisson, after a killed Java holder", after, ttl);
    assert_eq!(room.holders(&name).await, one(guard.holder_field(), "1"));
    guard.unlock().await.expect("ferrisson release");
    drop(doomed);
    Ok(())
}

/// A Java holder stopped with `SIGSTOP` past its lease loses the lock to ferrisson; resumed,
/// its watchdog does not extend ferrisson's hold and its `unlock` throws
/// `IllegalMonitorStateException`, leaving ferrisson's hold alone.
async fn faults_a_stopped_java_holder_loses_the_lock_for_good(
    room: &Room,
) -> Result<(), Unavailable> {
    let name = room.name("faults:stopped-java");
    let sleeper = room.java_holder_of(&name).await?;
    let java_field = sleeper.field("h").await;
    support::fault::signal_pid(sleeper.pid(), nix::sys::signal::Signal::SIGSTOP);
    let lease = Duration::from_secs(8);
    let guard = (room.client.lock(&name).with_owner(Owner::new()))
        .try_lock_within_with_lease(STEP, lease)
        .await
        .expect("ferrisson try_lock")
        .acquired();
    let resumed = || support::fault::signal_pid(sleeper.pid(), nix::sys::signal::Signal::SIGCONT);
    let Some(guard) = guard else {
        resumed();
        panic!("ferrisson did not get in past the stopped Java holder's lease");
    };
    let taken = Instant::now();
    resumed();
    // Two of Java's renewal periods after it resumed.
    sleep(WATCHDOG * 2 / 3 + Duration::from_millis(500)).await;
    let ttl = pttl(&room.raw, &name).await;
    let left = lease.saturating_sub(taken.elapsed()).as_millis() as i64;
    assert!(
        ttl <= left + 50,
        "PTTL {ttl} ms, {left} ms left of ferrisson's lease: the resumed Java {} holder's watchdog extended it",
        room.version
    );
    let stale = sleeper
        .call("unlock", lock_args("lock", &name, "h", json!({})))
        .await;
    assert_eq!(
        error_class(&stale),
        Some("IllegalMonitorStateException"),
        "{:?}",
        stale.fields
    );
    let holders = room.holders(&name).await;
    assert_eq!(holders, one(guard.holder_field(), "1"));
    assert!(!holders.contains_key(&java_field));
    guard.unlock().await.expect("ferrisson release");
    sleeper.quit().await;
    Ok(())
}

/// `ferrisson run` holds a lock with the watchdog (lease [`WATCHDOG`]) and is killed with
/// `kill -9` (its whole process group): a Java waiter gets in once that lease ends.
async fn faults_a_killed_ferrisson_holder_lets_java_in_after_its_lease(room: &Room) {
    use std::os::unix::process::CommandExt;
    let name = room.name("faults:killed-ferrisson");
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_ferrisson-cli"));
    holder
        .args([
            "--url",
            &room.server.url(),
            "run",
            &name,
            "--",
            "sleep",
            "30",
        ])
        .env(
            "FERRISSON_WATCHDOG_TIMEOUT",
            format!("{}ms", WATCHDOG.as_millis()),
        )
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0);
    let mut holder = holder.spawn().expect("ferrisson run starts");
    let held = poll_until(
        STEP,
        Duration::from_millis(20),
        || exists(&room.raw, &name),
        |n| *n == 1,
    )
    .await;
    let group = nix::unistd::Pid::from_raw(holder.id() as i32);
    let kill = || {
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    };
    if held.is_err() {
        kill();
        panic!("`ferrisson run` did not take {name}");
    }
    sleep(WATCHDOG / 2).await;
    let waits = json!({ "wait_ms": STEP.as_millis() as u64, "lease_ms": LEASE.as_millis() as u64 });
    let waiting = room
        .java
        .send("try_lock", lock_args("lock", &name, "w", waits))
        .await;
    let ttl = pttl(&room.raw, &name).await;
    let killed = Instant::now();
    kill();
    let _ = holder.wait();
    let reply = waiting.wait(STEP + Duration::from_secs(5)).await;
    let after = killed.elapsed();
    assert!(
        reply.bool("acquired"),
        "Java got in after the killed holder: {:?}",
        reply.fields
    );
    got_in_as_the_lease_ended(room, "Java, after a killed ferrisson holder", after, ttl);
    let field = room.java.field("w").await;
    assert_eq!(room.holders(&name).await, one(&field, "1"));
    room.java_unlock("lock", &name, "w").await;
}

/// `who` got in `after` the kill of a holder whose lease had `ttl_ms` left: not before that
/// lease ended, and within a renewal-free lease of the kill (prints the figure).
fn got_in_as_the_lease_ended(room: &Room, who: &str, after: Duration, ttl_ms: i64) {
    eprintln!(
        "Java {}: {who}: in {after:?} after the kill, {ttl_ms} ms of lease left",
        room.version
    );
    assert!(
        after.as_millis() as i64 >= ttl_ms - 100 && after <= WATCHDOG + Duration::from_secs(2),
        "{who}: in {after:?} after the kill; the lease had {ttl_ms} ms left"
    );
}
