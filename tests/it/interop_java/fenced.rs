//! Fenced locks across Java and ferrisson: tokens strictly increase on both sides.

use ferrisson::{Owner, WokenBy};
use serde_json::json;
use tokio::time::{timeout, Instant};

use super::{Room, LEASE, STEP, WAKE_BOUND};
use crate::support;
use crate::support::java::{lock_args, Unavailable, Version};
use crate::support::wait_parked;

pub(super) async fn fenced_lock(version: Version) -> Result<(), Unavailable> {
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
