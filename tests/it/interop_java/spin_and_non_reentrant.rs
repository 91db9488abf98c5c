//! The spin lock (every version) and the non-reentrant lock (4.4.0 and later) across Java and
//! ferrisson: each side's hold keeps the other out, a spin release publishes nothing yet a
//! waiter of the other side gets in by polling, and a non-reentrant re-acquire is refused on
//! both sides while the first hold stays at one.

use std::time::Duration;

use ferrisson::{Error, Owner};
use fred::prelude::*;
use serde_json::json;
use tokio::time::{sleep, timeout, Instant};

use super::{gets_in, one, Room, LEASE, STEP};
use crate::support::java::{lock_args, Unavailable, Version};
use crate::support::redis_state::exists;

pub(super) async fn spin_and_non_reentrant_lock(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    spin_holds_exclude_and_waiters_poll_their_way_in(&room).await;
    if version.has_non_reentrant_locks() {
        non_reentrant_re_acquires_are_refused_on_both_sides(&room).await;
    } else {
        eprintln!("Redisson {version} has no non-reentrant lock (4.4.0 and later): spin only");
    }
    room.java.quit().await;
    Ok(())
}

/// A Java spin hold keeps ferrisson's spin lock out and the reverse; neither release publishes
/// (no subscriber, no message), and a waiter of the other side polls its way in soon after.
async fn spin_holds_exclude_and_waiters_poll_their_way_in(room: &Room) {
    let name = room.name("spin");
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    room.java
        .ok("lock", lock_args("spin", &name, "h", leased.clone()))
        .await;
    let field = room.java.field("h").await;
    assert_eq!(room.holders(&name).await, one(&field, "1"));
    let spin = room.client.spin_lock(&name);
    assert!(
        !gets_in(spin.with_owner(Owner::new())).await,
        "Java's spin hold"
    );
    let waiting = spin.with_owner(Owner::new());
    let waiter = tokio::spawn(async move {
        let guard = waiting.lock_with_lease(LEASE).await;
        (guard, Instant::now())
    });
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    room.java
        .ok("unlock", lock_args("spin", &name, "h", json!({})))
        .await;
    let (guard, acquired) = timeout(STEP, waiter)
        .await
        .expect("ferrisson's spin waiter gets in")
        .expect("task");
    let guard = guard.expect("ferrisson spin lock");
    eprintln!(
        "Java {}: ferrisson's spin waiter in {:?} after Java's release",
        room.version,
        acquired.duration_since(released)
    );
    assert!(acquired.duration_since(released) < Duration::from_secs(1));

    let waits = json!({ "wait_ms": STEP.as_millis() as u64, "lease_ms": LEASE.as_millis() as u64 });
    let mut java_waiter = room
        .java
        .send("try_lock", lock_args("spin", &name, "w", waits))
        .await;
    sleep(Duration::from_millis(300)).await;
    assert!(
        java_waiter.poll().is_none(),
        "Java's spin got in beside ferrisson's"
    );
    let numsub: Vec<Value> = room
        .raw
        .custom(
            fred::cmd!("PUBSUB"),
            vec![
                "NUMSUB".to_owned(),
                format!("redisson_lock__channel:{{{name}}}"),
            ],
        )
        .await
        .expect("PUBSUB NUMSUB");
    assert_eq!(
        numsub.get(1).and_then(Value::as_i64),
        Some(0),
        "a spin waiter subscribes to nothing"
    );
    let released = Instant::now();
    guard.unlock().await.expect("ferrisson spin release");
    let reply = java_waiter.wait(STEP).await;
    assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
    assert!(reply.received.duration_since(released) < Duration::from_secs(1));
    room.java
        .ok("unlock", lock_args("spin", &name, "w", json!({})))
        .await;
    assert_eq!(exists(&room.raw, &name).await, 0);
}

/// Java's non-reentrant re-acquire by the holding thread fails and leaves the count at one;
/// ferrisson's is `Error::AlreadyHeld`, likewise; each hold keeps the other side out.
async fn non_reentrant_re_acquires_are_refused_on_both_sides(room: &Room) {
    let name = room.name("non-reentrant");
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64, "wait_ms": 0 });
    let first = room
        .java
        .ok(
            "try_lock",
            lock_args("nonreentrant", &name, "h", leased.clone()),
        )
        .await;
    assert!(first.bool("acquired"));
    let again = room
        .java
        .call(
            "try_lock",
            lock_args("nonreentrant", &name, "h", leased.clone()),
        )
        .await;
    assert!(
        !(again.ok() && again.bool("acquired")),
        "Java re-entered a non-reentrant lock: {:?}",
        again.fields
    );
    let field = room.java.field("h").await;
    assert_eq!(room.holders(&name).await, one(&field, "1"));
    let lock = room.client.non_reentrant_lock(&name);
    assert!(!gets_in(lock.with_owner(Owner::new())).await, "Java's hold");
    room.java
        .ok("unlock", lock_args("nonreentrant", &name, "h", json!({})))
        .await;
    assert_eq!(exists(&room.raw, &name).await, 0, "one release frees it");

    let owner = lock.with_owner(Owner::new());
    let guard = owner.lock_with_lease(LEASE).await.expect("ferrisson holds");
    let refused = owner.try_lock().await;
    assert!(
        matches!(refused, Err(Error::AlreadyHeld { .. })),
        "ferrisson's re-acquire: {refused:?}"
    );
    assert_eq!(room.holders(&name).await, one(guard.holder_field(), "1"));
    let java = room
        .java
        .ok("try_lock", lock_args("nonreentrant", &name, "j", leased))
        .await;
    assert!(
        !java.bool("acquired"),
        "Java got in beside ferrisson's hold"
    );
    guard.unlock().await.expect("ferrisson release");
    assert_eq!(exists(&room.raw, &name).await, 0);
}
