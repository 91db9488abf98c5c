//! Replica sync across Java and ferrisson (Redisson's `checkLockSyncedSlaves`, protocol §1.11)
//! in a local cluster whose masters have a replica each: with the replica of the lock's master
//! paused (`SIGSTOP`: its link stays open, it acknowledges nothing), every Redisson version's
//! acquisition fails; 3.23.5, 3.52.0 and 4.7.0 roll it back first and leave nothing behind,
//! while 3.16.8 (no rollback before 3.20; the protocol reference has 3.16 not checking the
//! `WAIT` at all: the real client does, through its batch's `syncSlaves`) and 3.43.0 (its
//! rollback never matches its own error text, 3.25.0 to 3.46.x:
//! `Version::rolls_back_unsynced_acquisitions`) leave their hold on the master until the
//! lease ends.
//! Ferrisson beside them (`SyncedWrites::Auto`, which waits in a cluster) refuses with
//! `Error::NotReplicated` and leaves nothing either. Resumed, the replica acknowledges again and
//! both sides acquire.

use ferrisson::{Config, Error, Owner};
use fred::prelude::*;
use serde_json::json;

use super::{LEASE, STEP};
use crate::support::cluster::{keyslot, RedisCluster};
use crate::support::java::VERSIONS;
use crate::support::java::{lock_args, JavaPeer, Options, Topology, Unavailable};
use crate::support::redis_state::wait_replicas_streaming_at;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_ferrisson_refuse_an_acquisition_a_paused_replica_never_acknowledged(
) -> Result<(), Unavailable> {
    let cluster = RedisCluster::start(3, 1).await;
    let raw = cluster.raw().await;
    let urls: Vec<String> = cluster.masters.iter().map(|m| m.url()).collect();
    // One attempt, so that a refused acquisition fails after one `WAIT` and one retry delay.
    let options = Options {
        topology: Topology::Cluster,
        settings: vec![("retryAttempts", "1".to_owned())],
        ..Options::default()
    };
    let client = ferrisson::Client::new(Config::new(cluster.url()))
        .await
        .expect("ferrisson connects to the cluster");
    for version in VERSIONS {
        let java = JavaPeer::start_with(version, &urls, options.clone()).await?;
        let name = format!("java:{version}:replica-sync");
        let node = cluster.master_of_slot(keyslot(&raw, &name).await);
        let (master, replica) = (&cluster.master_clients[node], &cluster.replicas[node]);
        let leased = json!({ "wait_ms": 0, "lease_ms": LEASE.as_millis() as u64 });

        replica.pause();
        let reply = java
            .call("try_lock", lock_args("lock", &name, "j", leased.clone()))
            .await;
        let java_left = master.exists::<i64, _>(&name).await.expect("EXISTS");
        let ours = (client.lock(&name).with_owner(Owner::new()))
            .try_lock_within_with_lease(std::time::Duration::ZERO, LEASE)
            .await;
        let ferrisson_left = master.exists::<i64, _>(&name).await.expect("EXISTS");
        replica.resume();
        // Every version checks the `WAIT` of its lock script and throws; the real 3.16.8 too
        // (from its batch's `syncSlaves`, "Only 0 of 1 slaves were synced").
        assert!(!reply.ok(), "Java {version} acquired: {:?}", reply.fields);
        let causes = reply.fields.get("causes").map(ToString::to_string);
        assert!(
            causes
                .as_deref()
                .is_some_and(|c| c.contains("slaves were synced")),
            "Java {version}: {:?}",
            reply.fields
        );
        if !version.rolls_back_unsynced_acquisitions() {
            // No rollback (before 3.20.0, and 3.25.0-3.46.x): the failed acquisition's hold
            // stays on the master until its lease ends, and ferrisson finds the lock busy.
            assert_eq!(java_left, 1, "Java {version} leaves its hold");
            assert!(
                matches!(&ours, Ok(attempt) if attempt.is_busy()),
                "ferrisson beside Java {version}'s stranded hold: {ours:?}"
            );
            java.ok("unlock", lock_args("lock", &name, "j", json!({})))
                .await;
        } else {
            assert_eq!(java_left, 0, "Java {version} rolled its acquisition back");
            assert!(
                matches!(&ours, Err(Error::NotReplicated { .. })),
                "ferrisson: {ours:?}"
            );
            assert_eq!(ferrisson_left, 0, "ferrisson rolled its acquisition back");
        }

        // Resumed and caught up, the replica acknowledges: both sides acquire.
        wait_replicas_streaming_at(master, 1, &format!("{{{name}}}:probe")).await;
        let reply = java
            .call("try_lock", lock_args("lock", &name, "j", leased))
            .await;
        assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
        java.ok("unlock", lock_args("lock", &name, "j", json!({})))
            .await;
        let guard = tokio::time::timeout(
            STEP,
            (client.lock(&name).with_owner(Owner::new())).lock_with_lease(LEASE),
        )
        .await
        .expect("ferrisson acquires once the replica is back")
        .expect("ferrisson lock");
        guard.unlock().await.expect("ferrisson release");
        java.quit().await;
    }
    client.shutdown().await;
    Ok(())
}
