//! Java and ferrisson in a local Redis 7 cluster (three masters): ferrisson with
//! [`PublishMode::Auto`] beside every Redisson version of the matrix, of both pub/sub eras:
//! 3.16.8 (classic `SUBSCRIBE`, as every version before 3.22) and 3.23.5, 3.43.0, 3.52.0 and
//! 4.7.0 (sharded `SSUBSCRIBE` where the server has it, `checkShardingSupport`). Each version's
//! Java waiter subscribes its era's way (asserted on the servers) and wakes on a ferrisson
//! release by message; a ferrisson waiter wakes on every version's release. The RLock test runs
//! every version's JVM at once beside one ferrisson client; the family test does the same, one
//! JVM at a time, for the fair lock, the read-write lock, the semaphore and the latch.

use std::collections::HashMap;
use std::time::Duration;

use ferrisson::{Client, Config, Owner, PublishMode};
use fred::prelude::*;
use serde_json::json;
use tokio::time::{sleep, timeout, Instant};

use super::{ferrisson_woken_by, java_returns_on, java_woken_by_the_release, one};
use super::{LEASE, STEP, WAKE_BOUND};
use crate::support;
use crate::support::cluster::{keyslot, RedisCluster};
use crate::support::java::VERSIONS;
use crate::support::java::{lock_args, JavaPeer, Options, Topology, Unavailable, Version};
use crate::support::redis_state::{channel_of, hgetall, poll_until};

/// A cluster, a raw cluster client, and ferrisson on it with [`PublishMode::Auto`].
struct Fixture {
    cluster: RedisCluster,
    raw: fred::clients::Client,
    client: Client,
}

impl Fixture {
    /// `None` (the test skipped) where the server has no sharded pub/sub.
    async fn start() -> Option<Fixture> {
        if support::skip(
            support::server_binary().has_7_0_features(),
            "sharded pub/sub needs Redis 7.0 or later",
        ) {
            return None;
        }
        let cluster = RedisCluster::start(3, 0).await;
        let raw = cluster.raw().await;
        let mut config = Config::new(cluster.url());
        config.publish_mode = PublishMode::Auto;
        let client = Client::new(config)
            .await
            .expect("ferrisson connects to the cluster");
        Some(Fixture {
            cluster,
            raw,
            client,
        })
    }

    /// A JVM of `version` with one Redisson cluster client over the masters.
    async fn java(&self, version: Version) -> Result<JavaPeer, Unavailable> {
        let urls: Vec<String> = self.cluster.masters.iter().map(|m| m.url()).collect();
        let options = Options {
            topology: Topology::Cluster,
            ..Options::default()
        };
        JavaPeer::start_with(version, &urls, options).await
    }

    /// The master holding the slot of `key`.
    async fn master_of(&self, key: &str) -> &fred::clients::Client {
        let node = self.cluster.master_of_slot(keyslot(&self.raw, key).await);
        &self.cluster.master_clients[node]
    }

    /// Asserts that Java `version`'s waiter subscribed to `channel` (whose hash tag is `name`)
    /// its era's way: one sharded subscription on the master of the slot from 3.22, else one
    /// classic one.
    async fn assert_subscribed_its_way(&self, version: Version, name: &str, channel: &str) {
        let node = self.cluster.master_of_slot(keyslot(&self.raw, name).await);
        let expected = if version.shards_pubsub() {
            (0, 1)
        } else {
            (1, 0)
        };
        assert_eq!(
            subscribed(&self.cluster, node, channel).await,
            expected,
            "Java {version}'s waiter (classic, sharded) subscriptions to {channel}"
        );
    }

    async fn finish(self) {
        self.client.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_of_both_pubsub_eras_and_ferrisson_auto_wake_each_other_in_a_cluster(
) -> Result<(), Unavailable> {
    let Some(f) = Fixture::start().await else {
        return Ok(());
    };
    let mut peers = Vec::new();
    for version in VERSIONS {
        peers.push(f.java(version).await?);
    }
    let client = &f.client;
    for java in &peers {
        let version = java.version();
        let name = format!("java:{version}:cluster:wake-java");
        let guard = (client.lock(&name).with_owner(Owner::new()))
            .lock_with_lease(LEASE)
            .await
            .expect("ferrisson lock");
        let waits = json!({ "wait_ms": 25_000, "lease_ms": LEASE.as_millis() as u64 });
        let waiter = java
            .send("try_lock", lock_args("lock", &name, "w", waits))
            .await;
        f.assert_subscribed_its_way(version, &name, &channel_of(&name))
            .await;
        let what = format!("Java {version}'s tryLock in the cluster");
        java_woken_by_the_release(waiter, guard, &what).await;
        let field = java.field("w").await;
        let holders: HashMap<String, String> = hgetall(f.master_of(&name).await, &name).await;
        assert_eq!(holders, one(field, "1"));
        java.ok("unlock", lock_args("lock", &name, "w", json!({})))
            .await;

        let name = format!("java:{version}:cluster:wake-ferrisson");
        let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
        java.ok("lock", lock_args("lock", &name, "h", leased)).await;
        let lock = client.lock(&name).with_owner(Owner::new());
        let release = async {
            java.ok("unlock", lock_args("lock", &name, "h", json!({})))
                .await;
        };
        let what = format!("Java {version}'s release in the cluster");
        let guard = ferrisson_woken_by(client, lock, release, &what).await;
        guard.unlock().await.expect("ferrisson release");
    }
    for java in peers {
        java.quit().await;
    }
    f.finish().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_ferrisson_wake_each_others_fair_rw_semaphore_and_latch_waiters_in_a_cluster(
) -> Result<(), Unavailable> {
    let Some(f) = Fixture::start().await else {
        return Ok(());
    };
    for version in VERSIONS {
        let java = f.java(version).await?;
        fair_waiters_wake_across(&f, &java).await;
        read_write_waiters_wake_across(&f, &java).await;
        semaphore_waiters_wake_across(&f, &java).await;
        latch_waiters_wake_across(&f, &java).await;
        java.quit().await;
    }
    f.finish().await;
    Ok(())
}

/// A Java fair waiter, on a channel of its own, woken by ferrisson's release; then a ferrisson
/// fair waiter woken by Java's. The queue is left empty.
async fn fair_waiters_wake_across(f: &Fixture, java: &JavaPeer) {
    let version = java.version();
    let name = format!("java:{version}:cluster:fair");
    let guard = (f.client.fair_lock(&name).with_owner(Owner::new()))
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
    f.assert_subscribed_its_way(version, &name, &own_channel)
        .await;
    let what = format!("Java {version}'s fair tryLock in the cluster");
    java_woken_by_the_release(waiter, guard, &what).await;
    let master = f.master_of(&name).await;
    let holders: HashMap<String, String> = hgetall(master, &name).await;
    assert_eq!(holders, one(field, "1"));

    let lock = f.client.fair_lock(&name).with_owner(Owner::new());
    let release = async {
        java.ok("unlock", lock_args("fair", &name, "w", json!({})))
            .await;
    };
    let what = format!("Java {version}'s fair release in the cluster");
    let guard = ferrisson_woken_by(&f.client, lock, release, &what).await;
    guard.unlock().await.expect("ferrisson fair release");
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let left: i64 = master.exists((&name, &queue)).await.expect("EXISTS");
    assert_eq!(left, 0, "the fair lock and its queue are gone");
}

/// Java readers woken by ferrisson's write release (message `1`); a ferrisson reader woken by
/// Java's.
async fn read_write_waiters_wake_across(f: &Fixture, java: &JavaPeer) {
    let version = java.version();
    let name = format!("java:{version}:cluster:rw");
    let writer = (f.client.read_write_lock(&name).with_owner(Owner::new()))
        .write_lock()
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson writes");
    let waits = json!({ "wait_ms": 25_000, "lease_ms": LEASE.as_millis() as u64 });
    let waiter = java
        .send("try_lock", lock_args("read", &name, "r", waits))
        .await;
    let channel = format!("redisson_rwlock:{{{name}}}");
    f.assert_subscribed_its_way(version, &name, &channel).await;
    let what = format!("Java {version}'s reader in the cluster");
    java_woken_by_the_release(waiter, writer, &what).await;
    let holders: HashMap<String, String> = hgetall(f.master_of(&name).await, &name).await;
    assert_eq!(holders.get("mode").map(String::as_str), Some("read"));
    java.ok("unlock", lock_args("read", &name, "r", json!({})))
        .await;

    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    java.ok("lock", lock_args("write", &name, "w", leased))
        .await;
    let reader = (f.client.read_write_lock(&name).with_owner(Owner::new())).read_lock();
    let release = async {
        java.ok("unlock", lock_args("write", &name, "w", json!({})))
            .await;
    };
    let what = format!("Java {version}'s write release in the cluster");
    let guard = ferrisson_woken_by(&f.client, reader, release, &what).await;
    guard.unlock().await.expect("ferrisson read release");
}

/// Java's untimed `acquire()` woken by ferrisson's release, and the reverse.
async fn semaphore_waiters_wake_across(f: &Fixture, java: &JavaPeer) {
    let version = java.version();
    let name = format!("java:{version}:cluster:semaphore");
    let semaphore = f.client.semaphore(&name);
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
    f.assert_subscribed_its_way(version, &name, &channel).await;
    let release = async { semaphore.release(1).await.expect("ferrisson release") };
    let what = format!("Java {version}'s untimed acquire after ferrisson's release");
    java_returns_on(waiter, release, &what).await;
    assert_eq!(semaphore.available_permits().await.expect("available"), 0);

    let waiting = f.client.semaphore(&name);
    let release = async {
        java.ok("sem_release", json!({ "name": name, "permits": 1 }))
            .await;
    };
    let what = format!("ferrisson's acquire after Java {version}'s release");
    ferrisson_returns_on(
        async move { waiting.acquire(1).await.map(|p| p.forget()) },
        release,
        &what,
    )
    .await;
}

/// Java's untimed `await()` woken by ferrisson's last count-down, and the reverse.
async fn latch_waiters_wake_across(f: &Fixture, java: &JavaPeer) {
    let version = java.version();
    let name = format!("java:{version}:cluster:latch");
    let latch = f.client.count_down_latch(&name);
    assert!(latch.try_set_count(1).await.expect("try_set_count"));
    let waiter = java
        .send("latch_await", json!({ "name": name, "owner": "w" }))
        .await;
    let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
    f.assert_subscribed_its_way(version, &name, &channel).await;
    let count_down = async { latch.count_down().await.expect("count down") };
    let what = format!("Java {version}'s untimed await after ferrisson's count-down");
    let reply = java_returns_on(waiter, count_down, &what).await;
    assert!(reply.bool("done"), "{what}: {:?}", reply.fields);

    java.ok("latch_set", json!({ "name": name, "count": 1 }))
        .await;
    let waiting = f.client.count_down_latch(&name);
    let count_down = async {
        java.ok("latch_count_down", json!({ "name": name })).await;
    };
    let what = format!("ferrisson's wait after Java {version}'s count-down");
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

/// Once one subscriber of `channel` is there (within [`STEP`]): how many classic subscribers it
/// has over every master (`PUBSUB NUMSUB`: a classic subscription lives on the node the client
/// chose) and how many sharded ones on `node`, the master of its slot (`PUBSUB SHARDNUMSUB`).
async fn subscribed(cluster: &RedisCluster, node: usize, channel: &str) -> (i64, i64) {
    let probe = || async {
        let mut classic = 0;
        for master in &cluster.master_clients {
            classic += count(master, "NUMSUB", channel).await;
        }
        let sharded = count(&cluster.master_clients[node], "SHARDNUMSUB", channel).await;
        (classic, sharded)
    };
    poll_until(STEP, Duration::from_millis(10), probe, |(c, s)| c + s >= 1)
        .await
        .unwrap_or_else(|seen| panic!("no subscriber of {channel} within {STEP:?}: {seen:?}"))
}

async fn count(master: &fred::clients::Client, which: &str, channel: &str) -> i64 {
    let reply: Vec<Value> = master
        .custom(fred::cmd!("PUBSUB"), vec![which, channel])
        .await
        .expect("PUBSUB");
    reply.get(1).and_then(|count| count.as_i64()).unwrap_or(0)
}
