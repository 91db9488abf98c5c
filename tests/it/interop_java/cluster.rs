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

use super::family_wakeups::{family_waiters_wake_across, Deployment};
use super::{ferrisson_woken_by, java_woken_by_the_release, one, LEASE, STEP};
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

    async fn finish(self) {
        self.client.shutdown().await;
    }
}

impl Deployment for Fixture {
    fn place(&self) -> &'static str {
        "cluster"
    }

    fn client(&self) -> &Client {
        &self.client
    }

    async fn master_of(&self, key: &str) -> fred::clients::Client {
        let node = self.cluster.master_of_slot(keyslot(&self.raw, key).await);
        self.cluster.master_clients[node].clone()
    }

    /// One sharded subscription on the master of the slot from 3.22, else one classic one.
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
        let holders: HashMap<String, String> = hgetall(&f.master_of(&name).await, &name).await;
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
        family_waiters_wake_across(&f, &java).await;
        java.quit().await;
    }
    f.finish().await;
    Ok(())
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
