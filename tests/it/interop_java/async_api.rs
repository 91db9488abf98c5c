//! Redisson's async API across Java and ferrisson: `lockAsync`, `tryLockAsync` and
//! `unlockAsync` with an explicit `threadId` (the peer's `"api":"async"`, on a shared pool, so
//! that no platform thread stands for the owner), as services built on futures call them. The
//! holder field is `<client id>:<threadId>`, re-entry goes by that id alone, and the waits and
//! the watchdog are the same as the synchronous API's.

use std::time::Duration;

use ferrisson::Owner;
use serde_json::{json, Value};
use tokio::time::sleep;

use super::{
    ferrisson_woken_by, java_woken_by_the_release, one, Room, LEASE, PAST_THE_LEASE, STEP,
};
use crate::support::java::{error_class, Unavailable, Version};
use crate::support::redis_state::{channel_of, exists, pttl, wait_numsub};

pub(super) async fn async_api(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    async_holds_count_by_thread_id_and_exclude_ferrisson(&room).await;
    async_waiters_of_each_side_are_woken_by_the_others_release(&room).await;
    an_async_watchdog_hold_is_renewed_until_its_unlock(&room).await;
    room.java.quit().await;
    Ok(())
}

/// The fields of an async lock op of `name` by thread id `thread`, with `more`.
fn by_thread(name: &str, thread: u64, more: Value) -> Value {
    let mut args = json!({ "kind": "lock", "name": name, "api": "async", "thread_id": thread });
    if let (Value::Object(args), Value::Object(more)) = (&mut args, more) {
        args.extend(more);
    }
    args
}

/// Thread ids that no platform thread of the peer has (they stand for async tasks).
const TASK: u64 = 7_000_001;
const OTHER_TASK: u64 = 7_000_002;

/// `lockAsync(lease, T)` twice holds `<client id>:T` with count 2; ferrisson stays out; an
/// `unlockAsync` by another id is refused with `IllegalMonitorStateException` and changes
/// nothing; two `unlockAsync(T)` free the lock, and ferrisson gets in.
async fn async_holds_count_by_thread_id_and_exclude_ferrisson(room: &Room) {
    let name = room.name("async:counts");
    let java = &room.java;
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    for _ in 0..2 {
        java.ok("lock", by_thread(&name, TASK, leased.clone()))
            .await;
    }
    let field = format!("{}:{TASK}", java.client_id());
    assert_eq!(room.holders(&name).await, one(&field, "2"));
    assert!(
        !room.ferrisson_gets_in(&name).await,
        "Java holds by its task"
    );
    let stranger = java
        .call("unlock", by_thread(&name, OTHER_TASK, json!({})))
        .await;
    assert_eq!(
        error_class(&stranger),
        Some("IllegalMonitorStateException"),
        "{:?}",
        stranger.fields
    );
    assert_eq!(room.holders(&name).await, one(&field, "2"));
    let tried = java
        .ok("try_lock", by_thread(&name, OTHER_TASK, json!({})))
        .await;
    assert!(!tried.bool("acquired"), "another task id is another owner");
    for _ in 0..2 {
        java.ok("unlock", by_thread(&name, TASK, json!({}))).await;
    }
    assert_eq!(exists(&room.raw, &name).await, 0);
    assert!(room.ferrisson_gets_in(&name).await);
}

/// `tryLockAsync(wait, lease, T)` behind a ferrisson hold leased 20 s acquires within a second
/// of ferrisson's release (its unlock message), and a ferrisson waiter behind `lockAsync`
/// likewise after `unlockAsync`.
async fn async_waiters_of_each_side_are_woken_by_the_others_release(room: &Room) {
    let name = room.name("async:wake-java");
    let guard = (room.client.lock(&name).with_owner(Owner::new()))
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson lock");
    let waits = json!({ "wait_ms": 25_000, "lease_ms": LEASE.as_millis() as u64 });
    let waiter = room
        .java
        .send("try_lock", by_thread(&name, TASK, waits))
        .await;
    wait_numsub(&room.raw, &channel_of(&name), 1, STEP).await;
    let what = format!("Java {}'s tryLockAsync", room.version);
    java_woken_by_the_release(waiter, guard, &what).await;
    let field = format!("{}:{TASK}", room.java.client_id());
    assert_eq!(room.holders(&name).await, one(&field, "1"));

    let lock = room.client.lock(&name).with_owner(Owner::new());
    let release = async {
        room.java
            .ok("unlock", by_thread(&name, TASK, json!({})))
            .await;
    };
    let guard = ferrisson_woken_by(&room.client, lock, release, "unlockAsync").await;
    guard.unlock().await.expect("ferrisson release");
}

/// `lockAsync(-1, T)` takes the watchdog lease (3 s here) and is renewed past it, keeping
/// ferrisson out; after `unlockAsync(T)` the renewals stop with the hold.
async fn an_async_watchdog_hold_is_renewed_until_its_unlock(room: &Room) {
    let name = room.name("async:watchdog");
    room.java
        .ok("lock", by_thread(&name, TASK, json!({})))
        .await;
    sleep(PAST_THE_LEASE).await;
    let field = format!("{}:{TASK}", room.java.client_id());
    assert_eq!(room.holders(&name).await, one(&field, "1"));
    assert!(pttl(&room.raw, &name).await > 0, "renewed by the watchdog");
    assert!(!room.ferrisson_gets_in(&name).await);
    room.java
        .ok("unlock", by_thread(&name, TASK, json!({})))
        .await;
    assert_eq!(exists(&room.raw, &name).await, 0);
    // A renewal after the unlock would find no field and write nothing: the key stays gone.
    sleep(Duration::from_millis(1_500)).await;
    assert_eq!(exists(&room.raw, &name).await, 0);
}
