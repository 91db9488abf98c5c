//! Java and ferrisson in a local Redis 7 cluster (three masters): ferrisson with
//! [`PublishMode::Auto`] beside Redisson of both pub/sub eras at once, 3.16.8 (classic
//! `SUBSCRIBE`, as every version before 3.22) and 3.52.0 and 4.7.0 (sharded `SSUBSCRIBE` where
//! the server has it, `checkShardingSupport`). Each era's Java waiter subscribes its own way and
//! wakes on a ferrisson release by message; a ferrisson waiter wakes on either era's release.

use std::time::Duration;

use ferrisson::{Config, Owner, PublishMode};
use fred::prelude::*;
use serde_json::json;

use super::{ferrisson_woken_by, java_woken_by_the_release, one, LEASE, STEP};
use crate::support;
use crate::support::cluster::{keyslot, RedisCluster};
use crate::support::java::{lock_args, JavaPeer, Options, Unavailable, Version};
use crate::support::java::{V3_16, V3_52, V4_7};
use crate::support::redis_state::{channel_of, hgetall, poll_until};

/// The eras side by side: the last classic-only one and two sharded ones.
const ERAS: [Version; 3] = [V3_16, V3_52, V4_7];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_of_both_pubsub_eras_and_ferrisson_auto_wake_each_other_in_a_cluster(
) -> Result<(), Unavailable> {
    if support::skip(
        support::server_binary().has_7_0_features(),
        "sharded pub/sub needs Redis 7.0 or later",
    ) {
        return Ok(());
    }
    let cluster = RedisCluster::start(3, 0).await;
    let raw = cluster.raw().await;
    let urls: Vec<String> = cluster.masters.iter().map(|m| m.url()).collect();
    let options = Options {
        cluster: true,
        ..Options::default()
    };
    let mut peers = Vec::new();
    for version in ERAS {
        peers.push(JavaPeer::start_with(version, &urls, options.clone()).await?);
    }
    let mut config = Config::new(cluster.url());
    config.publish_mode = PublishMode::Auto;
    let client = ferrisson::Client::new(config)
        .await
        .expect("ferrisson connects to the cluster");

    for java in &peers {
        let version = java.version();
        let name = format!("java:{version}:cluster:wake-java");
        let slot = keyslot(&raw, &name).await;
        let node = cluster.master_of_slot(slot);
        let guard = (client.lock(&name).with_owner(Owner::new()))
            .lock_with_lease(LEASE)
            .await
            .expect("ferrisson lock");
        let waits = json!({ "wait_ms": 25_000, "lease_ms": LEASE.as_millis() as u64 });
        let waiter = java
            .send("try_lock", lock_args("lock", &name, "w", waits))
            .await;
        let (classic, sharded) = subscribed(&cluster, node, &name).await;
        assert_eq!(
            (classic, sharded),
            if version.shards_pubsub() {
                (0, 1)
            } else {
                (1, 0)
            },
            "Java {version}'s waiter (classic, sharded) subscriptions"
        );
        let what = format!("Java {version}'s tryLock in the cluster");
        java_woken_by_the_release(waiter, guard, &what).await;
        let field = java.field("w").await;
        let holders: std::collections::HashMap<String, String> =
            hgetall(&cluster.master_clients[node], &name).await;
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
        let guard = ferrisson_woken_by(&client, lock, release, &what).await;
        guard.unlock().await.expect("ferrisson release");
    }
    for java in peers {
        java.quit().await;
    }
    client.shutdown().await;
    Ok(())
}

/// Once one subscriber of `name`'s unlock channel is there (within [`STEP`]): how many classic
/// subscribers it has over every master (`PUBSUB NUMSUB`: a classic subscription lives on the
/// node the client chose) and how many sharded ones on `node`, the master of its slot
/// (`PUBSUB SHARDNUMSUB`).
async fn subscribed(cluster: &RedisCluster, node: usize, name: &str) -> (i64, i64) {
    let channel = channel_of(name);
    let probe = || async {
        let mut classic = 0;
        for master in &cluster.master_clients {
            classic += count(master, "NUMSUB", &channel).await;
        }
        let sharded = count(&cluster.master_clients[node], "SHARDNUMSUB", &channel).await;
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
