//! The family's waiters woken across Java and ferrisson in a deployment of several nodes (a
//! cluster, Sentinel), for one Java peer: a Java fair waiter (on its own channel), a Java reader
//! behind ferrisson's writer, Java's untimed semaphore `acquire()` and latch `await()`, each
//! subscribed its version's way (the [`Deployment`] asserts how) and returning within
//! [`WAKE_BOUND`] of ferrisson's release or count-down; and a ferrisson waiter of each woken by
//! Java's. The single-server groups (`fair.rs`, `read_write.rs`, `semaphores.rs`) go further on
//! one server; this is what a topology can change: where the subscriptions go.

use std::collections::HashMap;
use std::time::Duration;

use ferrisson::{Client, Owner};
use fred::prelude::*;
use serde_json::json;
use tokio::time::{sleep, timeout, Instant};

use super::{ferrisson_woken_by, java_returns_on, java_woken_by_the_release, one};
use super::{LEASE, STEP, WAKE_BOUND};
use crate::support::java::{lock_args, JavaPeer, Version};
use crate::support::redis_state::{channel_of, hgetall};

/// Where the family runs.
pub(super) trait Deployment {
    /// A word for names and failure messages: `cluster`, `sentinel`.
    fn place(&self) -> &'static str;
    /// The ferrisson client on it.
    fn client(&self) -> &Client;
    /// A raw client of the master that holds `key`.
    async fn master_of(&self, key: &str) -> fred::clients::Client;
    /// Asserts that Java `version`'s waiter subscribed to `channel` (whose hash tag is `name`)
    /// as that version does in this deployment.
    async fn assert_subscribed_its_way(&self, version: Version, name: &str, channel: &str);
}

/// Every primitive of the family with a waiter, both ways, for `java`.
pub(super) async fn family_waiters_wake_across(d: &impl Deployment, java: &JavaPeer) {
    fair_waiters_wake_across(d, java).await;
    read_write_waiters_wake_across(d, java).await;
    semaphore_waiters_wake_across(d, java).await;
    latch_waiters_wake_across(d, java).await;
}

/// A Java fair waiter, on a channel of its own, woken by ferrisson's release; then a ferrisson
/// fair waiter woken by Java's. The queue is left empty.
async fn fair_waiters_wake_across(d: &impl Deployment, java: &JavaPeer) {
    let version = java.version();
    let name = format!("java:{version}:{}:fair", d.place());
    let guard = (d.client().fair_lock(&name).with_owner(Owner::new()))
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson fair lock");
    // Asked before the owner's thread blocks in tryLock.
    let field = java.field("w").await;
    let waits = json!({ "wait_ms": 25_000, "lease_ms": LEASE.as_millis() as u64 });
    let waiter = java
        .send("try_lock", lock_args("fair", &name, "w", waits))
        .await;
    let own_channel = format!("{}:{field}", channel_of(&name));
    d.assert_subscribed_its_way(version, &name, &own_channel)
        .await;
    let what = format!("Java {version}'s fair tryLock ({})", d.place());
    java_woken_by_the_release(waiter, guard, &what).await;
    let master = &d.master_of(&name).await;
    let holders: HashMap<String, String> = hgetall(master, &name).await;
    assert_eq!(holders, one(field, "1"));

    let lock = d.client().fair_lock(&name).with_owner(Owner::new());
    let release = async {
        java.ok("unlock", lock_args("fair", &name, "w", json!({})))
            .await;
    };
    let what = format!("Java {version}'s fair release ({})", d.place());
    let guard = ferrisson_woken_by(d.client(), lock, release, &what).await;
    guard.unlock().await.expect("ferrisson fair release");
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let left: i64 = master.exists((&name, &queue)).await.expect("EXISTS");
    assert_eq!(left, 0, "the fair lock and its queue are gone");
}

/// Java readers woken by ferrisson's write release (message `1`); a ferrisson reader woken by
/// Java's.
async fn read_write_waiters_wake_across(d: &impl Deployment, java: &JavaPeer) {
    let version = java.version();
    let name = format!("java:{version}:{}:rw", d.place());
    let writer = (d.client().read_write_lock(&name).with_owner(Owner::new()))
        .write_lock()
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson writes");
    let waits = json!({ "wait_ms": 25_000, "lease_ms": LEASE.as_millis() as u64 });
    let waiter = java
        .send("try_lock", lock_args("read", &name, "r", waits))
        .await;
    let channel = format!("redisson_rwlock:{{{name}}}");
    d.assert_subscribed_its_way(version, &name, &channel).await;
    let what = format!("Java {version}'s reader ({})", d.place());
    java_woken_by_the_release(waiter, writer, &what).await;
    let holders: HashMap<String, String> = hgetall(&d.master_of(&name).await, &name).await;
    assert_eq!(holders.get("mode").map(String::as_str), Some("read"));
    java.ok("unlock", lock_args("read", &name, "r", json!({})))
        .await;

    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    java.ok("lock", lock_args("write", &name, "w", leased))
        .await;
    let reader = (d.client().read_write_lock(&name).with_owner(Owner::new())).read_lock();
    let release = async {
        java.ok("unlock", lock_args("write", &name, "w", json!({})))
            .await;
    };
    let what = format!("Java {version}'s write release ({})", d.place());
    let guard = ferrisson_woken_by(d.client(), reader, release, &what).await;
    guard.unlock().await.expect("ferrisson read release");
}

/// Java's untimed `acquire()` woken by ferrisson's release, and the reverse.
async fn semaphore_waiters_wake_across(d: &impl Deployment, java: &JavaPeer) {
    let version = java.version();
    let name = format!("java:{version}:{}:semaphore", d.place());
    let semaphore = d.client().semaphore(&name);
    assert!(semaphore.try_set_permits(1).await.expect("try_set_permits"));
    semaphore
        .acquire(1)
        .await
        .expect("ferrisson takes the permit")
        .forget();
    let waiter = java
        .send(
            "sem_acquire",
            json!({ "name": name, "owner": "w", "permits": 1 }),
        )
        .await;
    let channel = format!("redisson_sc:{{{name}}}");
    d.assert_subscribed_its_way(version, &name, &channel).await;
    let release = async { semaphore.release(1).await.expect("ferrisson release") };
    let what = format!(
        "Java {version}'s untimed acquire after ferrisson's release ({})",
        d.place()
    );
    java_returns_on(waiter, release, &what).await;
    assert_eq!(semaphore.available_permits().await.expect("available"), 0);

    let waiting = d.client().semaphore(&name);
    let release = async {
        java.ok("sem_release", json!({ "name": name, "permits": 1 }))
            .await;
    };
    let what = format!(
        "ferrisson's acquire after Java {version}'s release ({})",
        d.place()
    );
    ferrisson_returns_on(
        async move { waiting.acquire(1).await.map(|p| p.forget()) },
        release,
        &what,
    )
    .await;
}

/// Java's untimed `await()` woken by ferrisson's last count-down, and the reverse.
async fn latch_waiters_wake_across(d: &impl Deployment, java: &JavaPeer) {
    let version = java.version();
    let name = format!("java:{version}:{}:latch", d.place());
    let latch = d.client().count_down_latch(&name);
    assert!(latch.try_set_count(1).await.expect("try_set_count"));
    let waiter = java
        .send("latch_await", json!({ "name": name, "owner": "w" }))
        .await;
    let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
    d.assert_subscribed_its_way(version, &name, &channel).await;
    let count_down = async { latch.count_down().await.expect("count down") };
    let what = format!(
        "Java {version}'s untimed await after ferrisson's count-down ({})",
        d.place()
    );
    let reply = java_returns_on(waiter, count_down, &what).await;
    assert!(reply.bool("done"), "{what}: {:?}", reply.fields);

    java.ok("latch_set", json!({ "name": name, "count": 1 }))
        .await;
    let waiting = d.client().count_down_latch(&name);
    let count_down = async {
        java.ok("latch_count_down", json!({ "name": name })).await;
    };
    let what = format!(
        "ferrisson's wait after Java {version}'s count-down ({})",
        d.place()
    );
    ferrisson_returns_on(async move { waiting.wait().await }, count_down, &what).await;
}

/// ferrisson's `wait`, spawned and given 300 ms to park, ends (ok) within [`WAKE_BOUND`] of
/// `act` (Java's release).
async fn ferrisson_returns_on<T: Send + 'static>(
    wait: impl std::future::Future<Output = ferrisson::Result<T>> + Send + 'static,
    act: impl std::future::Future<Output = ()>,
    what: &str,
) {
    let waiter = tokio::spawn(wait);
    sleep(Duration::from_millis(300)).await;
    let acted = Instant::now();
    act.await;
    timeout(STEP, waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: still waiting after {STEP:?}"))
        .expect("waiter task")
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    let after = acted.elapsed();
    assert!(after < WAKE_BOUND, "{what}: ended {after:?} after it");
}
