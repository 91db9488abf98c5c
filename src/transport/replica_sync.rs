//! Synced writes: `WAIT` for the master's replicas after lock scripts (Redisson's
//! `checkLockSyncedSlaves`, protocol §1.11, §14.5 item 16, §16 item 1).
//!
//! A script that changes a lock is followed on the *same* connection by `WAIT <replicas>
//! <timeout>`: `WAIT` waits for the replication offset of the connection's own last write, so
//! on another connection it could answer before the lock write reached anyone. The two are
//! written back to back (pipelined), so a synced write costs the replicas' acknowledgement, not
//! an extra round trip; one `WAIT` covers a whole batch of calls (`src/transport/dispatch.rs`).
//!
//! `<replicas>` is the node's `connected_slaves` from `INFO replication`, cached per node for
//! [`REFRESH`] (Redisson reads the same field). A node without replicas is not waited for. A
//! `WAIT` that fewer replicas acknowledged than expected drops the cached count (a replica may
//! have gone, or a failover moved the master), and one that none acknowledged re-reads it: no
//! replicas left counts as nothing to wait for, as in Redisson. What each caller does with an
//! unacknowledged write is decided in [`crate::transport::Redis::run_lock_call`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::ClusterInterface;
use fred::prelude::Value;
use fred::types::CustomCommand;
use parking_lot::Mutex;

use crate::transport::script::Route;

/// How long a node's replica count is trusted before `INFO replication` is read again.
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

pub(crate) use crate::error::NOT_REPLICATED;

/// Whether the replicas have a script's writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Replicated {
    /// Not asked: synced writes are off, or the master has no replicas.
    NotAsked,
    /// This many replicas acknowledged (at least one).
    Acked(u32),
    /// No replica acknowledged within the timeout, or the `WAIT` itself failed.
    NotAcked,
}

impl Replicated {
    /// Whether the write may count as replicated.
    pub(crate) fn is_synced(self) -> bool {
        self != Replicated::NotAcked
    }
}

/// The synced-writes setting of one client, with its per-node replica counts.
pub(crate) struct ReplicaSync {
    timeout_ms: u64,
    /// Node → (`connected_slaves`, when read). The node is `""` outside a cluster and Sentinel.
    replicas: Mutex<HashMap<String, (u32, Instant)>>,
}

impl ReplicaSync {
    pub(crate) fn new(timeout: Duration) -> ReplicaSync {
        ReplicaSync {
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            replicas: Mutex::new(HashMap::new()),
        }
    }

    /// The node that a command sent by `route` reaches on `client`: the cache key.
    fn node(client: &Client, route: &Route) -> String {
        use fred::interfaces::ServerInterface;
        let slot_owner = |slot| client.cached_cluster_state()?.get_server(slot).cloned();
        let node = route
            .asking
            .clone()
            .or_else(|| route.slot.and_then(slot_owner))
            .or_else(|| client.sentinel_primary());
        node.map(|server| server.to_string()).unwrap_or_default()
    }

    /// How many replicas the node `route` reaches has: the cached count, or `INFO replication`
    /// when it is older than [`REFRESH`]. An error reads as 1, so that the write is waited for
    /// (and counts as not replicated if nobody answers) rather than assumed safe.
    pub(crate) async fn replicas(&self, client: &Client, route: &Route) -> u32 {
        let node = Self::node(client, route);
        if let Some(&(count, read)) = self.replicas.lock().get(&node) {
            if read.elapsed() < REFRESH {
                return count;
            }
        }
        self.read_replicas(client, route, node).await
    }

    async fn read_replicas(&self, client: &Client, route: &Route, node: String) -> u32 {
        use fred::interfaces::ClientLike;
        let info = CustomCommand::new_static("INFO", route.hash(), false);
        let count = match client
            .with_options(&route.options(&Default::default()))
            .custom::<String, _>(info, vec![Value::from_static_str("replication")])
            .await
        {
            Ok(text) => connected_replicas(&text).unwrap_or(1),
            Err(err) => {
                tracing::debug!(error = %err, "could not read the replica count");
                1
            }
        };
        self.replicas.lock().insert(node, (count, Instant::now()));
        count
    }

    /// `WAIT replicas timeout`, routed like the script it follows.
    pub(crate) fn wait_command(&self, replicas: u32, route: &Route) -> (CustomCommand, Vec<Value>) {
        (
            CustomCommand::new_static("WAIT", route.hash(), false),
            vec![
                Value::from(replicas as i64),
                Value::from(self.timeout_ms as i64),
            ],
        )
    }

    /// Judges the reply of a `WAIT` for `expected` replicas.
    pub(crate) async fn judge(
        &self,
        client: &Client,
        route: &Route,
        expected: u32,
        reply: Result<Value, fred::error::Error>,
    ) -> Replicated {
        let acked = match reply {
            Ok(Value::Integer(acked)) => u32::try_from(acked).unwrap_or(0),
            Ok(other) => {
                tracing::warn!(reply = %crate::shown::Reply(&other), "unexpected reply to WAIT");
                0
            }
            Err(err) => {
                tracing::warn!(error = %err, "WAIT after a lock write failed");
                return Replicated::NotAcked;
            }
        };
        if acked >= expected {
            return Replicated::Acked(acked);
        }
        let node = Self::node(client, route);
        if acked > 0 {
            // Enough for Redisson's check; the count is re-read on the next write.
            self.replicas.lock().remove(&node);
            return Replicated::Acked(acked);
        }
        // None acknowledged: were there still replicas to acknowledge?
        match self.read_replicas(client, route, node).await {
            0 => Replicated::NotAsked,
            _ => Replicated::NotAcked,
        }
    }
}

/// `connected_slaves` of an `INFO replication` reply.
fn connected_replicas(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("connected_slaves:"))
        .and_then(|count| count.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replica_count_is_read_from_info_replication() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=127.0.0.1\r\n";
        assert_eq!(connected_replicas(info), Some(2));
        assert_eq!(
            connected_replicas("role:master\r\nconnected_slaves:0\r\n"),
            Some(0)
        );
        assert_eq!(connected_replicas("role:slave\r\n"), None);
        assert_eq!(connected_replicas("connected_slaves:x"), None);
    }

    #[test]
    fn only_an_unacknowledged_write_is_unsynced() {
        assert!(Replicated::NotAsked.is_synced());
        assert!(Replicated::Acked(1).is_synced());
        assert!(!Replicated::NotAcked.is_synced());
    }
}
