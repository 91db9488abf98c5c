//! Semaphore, permit-expirable semaphore and count-down latch across Java and ferrisson:
//! Java's untimed calls woken by ferrisson, permits released by the other side.

use std::time::Duration;

use ferrisson::PermitIdFormat;
use serde_json::json;
use tokio::time::{sleep, timeout, Instant};

use super::{Room, STEP, WAKE_BOUND};
use crate::support;
use crate::support::java::{Unavailable, Version};
use crate::support::redis_state::{exists, wait_numsub};

pub(super) async fn semaphores_and_latch(version: Version) -> Result<(), Unavailable> {
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
