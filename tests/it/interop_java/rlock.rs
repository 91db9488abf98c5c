//! RLock across Java and ferrisson: exclusion, hold counts, wake-ups by message, force
//! unlocks, both watchdogs, and local hand-offs beside a Java waiter.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrisson::{Error, Owner, WokenBy};
use serde_json::json;
use tokio::time::{sleep, timeout, Instant};

use super::{
    assert_unlock_refused, ferrisson_woken_by, java_woken_by_the_release, one, Room, LEASE,
    PAST_THE_LEASE, STEP, WAKE_BOUND,
};
use crate::support::java::{error_class, lock_args, Unavailable, Version};
use crate::support::redis_state::{channel_of, exists, pttl, wait_numsub};
use crate::support::wait_parked;

pub(super) async fn rlock(version: Version) -> Result<(), Unavailable> {
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
    let waiter = room
        .java
        .send("try_lock", lock_args("lock", &name, "w", waits))
        .await;
    wait_numsub(&room.raw, &channel_of(&name), 1, STEP).await;
    let what = format!("Java {}'s tryLock", room.version);
    java_woken_by_the_release(waiter, guard, &what).await;
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
    let release = room.java_unlock("lock", &name, "h");
    let what = format!("Java {}'s release", room.version);
    let guard = ferrisson_woken_by(&room.client, lock, release, &what).await;
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
    room.assert_not_extended(&name, lease, taken, "Java's watchdog")
        .await;
    assert_unlock_refused(&room.java, &name, "h2").await;
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
