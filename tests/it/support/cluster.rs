//! A real local Redis Cluster: `redis-server --cluster-enabled yes` nodes on free loopback
//! ports, joined with `CLUSTER MEET`, slots spread evenly over the masters with
//! `CLUSTER ADDSLOTSRANGE`, each master given its replicas with `CLUSTER REPLICATE` (what
//! `redis-cli --cluster create` does, without depending on it). Every node is a
//! [`RedisServer`], so the processes are killed when the cluster is dropped.

use std::time::Duration;

use fred::prelude::*;

use super::{raw_client, RedisServer};

/// Number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// A running cluster of `masters` masters with `replicas` replicas each.
pub struct RedisCluster {
    /// Masters in slot order: master `i` serves `slot_range(i)`.
    pub masters: Vec<RedisServer>,
    /// Replicas, `replicas` per master, grouped by master.
    pub replicas: Vec<RedisServer>,
    /// Raw standalone clients of the masters, in the same order.
    pub master_clients: Vec<fred::clients::Client>,
    /// The masters' node ids, in the same order.
    pub master_ids: Vec<String>,
}

impl RedisCluster {
    /// Starts and joins the nodes, and waits until every node reports `cluster_state:ok` and
    /// every replica is in sync with its master.
    pub async fn start(masters: usize, replicas: usize) -> RedisCluster {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
            // Sharded pub/sub and DEBUG for the tests.
            "--enable-debug-command",
            "local",
        ];
        let start = || RedisServer::start_with_args(&args);
        let master_nodes: Vec<RedisServer> = (0..masters).map(|_| start()).collect();
        let replica_nodes: Vec<RedisServer> = (0..masters * replicas).map(|_| start()).collect();
        let mut clients = Vec::new();
        for node in master_nodes.iter().chain(&replica_nodes) {
            clients.push(raw_client(&node.url()).await);
        }
        let first = &clients[0];
        for node in master_nodes.iter().chain(&replica_nodes).skip(1) {
            let _: String = first
                .custom(
                    fred::cmd!("CLUSTER"),
                    vec![
                        "MEET".to_owned(),
                        "127.0.0.1".to_owned(),
                        node.port().to_string(),
                    ],
                )
                .await
                .expect("CLUSTER MEET");
        }
        for (index, client) in clients.iter().take(masters).enumerate() {
            let (from, to) = slot_range(index, masters);
            // Every slot named: `ADDSLOTSRANGE` came with Redis 7.0, and the matrix runs 6.2.
            let slots = (from..=to).map(|slot| slot.to_string());
            let _: String = client
                .custom(
                    fred::cmd!("CLUSTER"),
                    std::iter::once("ADDSLOTS".to_owned())
                        .chain(slots)
                        .collect::<Vec<_>>(),
                )
                .await
                .expect("CLUSTER ADDSLOTS");
        }
        let total = clients.len();
        for client in &clients {
            // Knowing a node is not enough: a node sends a classic PUBLISH (and every other bus
            // message) to another only over its own link to it, and drops it while that link is
            // down. A node can know every other, and even report `cluster_state:ok`, before all
            // its links are up; a release published then never reaches some subscribers.
            wait_for(
                client,
                "every node knows and links to every other",
                |c| async move {
                    let nodes: String = c
                        .custom(fred::cmd!("CLUSTER"), vec!["NODES"])
                        .await
                        .unwrap_or_default();
                    nodes.lines().count() == total && nodes.lines().all(linked)
                },
            )
            .await;
        }
        let mut master_ids = Vec::new();
        for client in clients.iter().take(masters) {
            let id: String = client
                .custom(fred::cmd!("CLUSTER"), vec!["MYID"])
                .await
                .expect("CLUSTER MYID");
            master_ids.push(id);
        }
        for (index, client) in clients.iter().skip(masters).enumerate() {
            let master = &master_ids[index / replicas.max(1)];
            let _: String = client
                .custom(
                    fred::cmd!("CLUSTER"),
                    vec!["REPLICATE".to_owned(), master.clone()],
                )
                .await
                .expect("CLUSTER REPLICATE");
        }
        for client in &clients {
            wait_for(client, "cluster_state:ok", |c| async move {
                let info: String = c
                    .custom(fred::cmd!("CLUSTER"), vec!["INFO"])
                    .await
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
            })
            .await;
        }
        for client in clients.iter().skip(masters) {
            super::redis_state::wait_replication(client, "master_link_status:up").await;
        }
        let master_clients = clients.drain(..masters).collect();
        RedisCluster {
            masters: master_nodes,
            replicas: replica_nodes,
            master_clients,
            master_ids,
        }
    }

    /// `redis-cluster://127.0.0.1:PORT?node=...` naming every master.
    pub fn url(&self) -> String {
        let mut url = format!("redis-cluster://127.0.0.1:{}", self.masters[0].port());
        for (index, node) in self.masters.iter().enumerate().skip(1) {
            url.push(if index == 1 { '?' } else { '&' });
            url.push_str(&format!("node=127.0.0.1:{}", node.port()));
        }
        url
    }

    /// A raw fred client of the whole cluster (routes by slot, follows MOVED/ASK).
    pub async fn raw(&self) -> fred::clients::Client {
        raw_client(&self.url()).await
    }

    /// Starts moving `slot` from master `from` to master `to`: `to` imports it, `from` migrates
    /// it. Until [`RedisCluster::finish_migration`], keys still on `from` are served there and
    /// others are redirected to `to` with ASK.
    pub async fn begin_migration(&self, slot: u16, from: usize, to: usize) {
        self.set_slot(to, slot, "IMPORTING", &self.master_ids[from])
            .await;
        self.set_slot(from, slot, "MIGRATING", &self.master_ids[to])
            .await;
    }

    /// Moves every key of `slot` from master `from` to master `to` (`MIGRATE`), keeping TTLs.
    pub async fn move_keys(&self, slot: u16, from: usize, to: usize) {
        let source = &self.master_clients[from];
        loop {
            let keys: Vec<String> = source
                .custom(
                    fred::cmd!("CLUSTER"),
                    vec![
                        "GETKEYSINSLOT".to_owned(),
                        slot.to_string(),
                        "100".to_owned(),
                    ],
                )
                .await
                .expect("CLUSTER GETKEYSINSLOT");
            if keys.is_empty() {
                return;
            }
            let mut args = vec![
                "127.0.0.1".to_owned(),
                self.masters[to].port().to_string(),
                String::new(),
                "0".to_owned(),
                "5000".to_owned(),
                "KEYS".to_owned(),
            ];
            args.extend(keys);
            let _: Value = source
                .custom(fred::cmd!("MIGRATE"), args)
                .await
                .expect("MIGRATE");
        }
    }

    /// Ends a migration: every master learns that `slot` is served by master `to`.
    pub async fn finish_migration(&self, slot: u16, to: usize) {
        for index in 0..self.masters.len() {
            self.set_slot(index, slot, "NODE", &self.master_ids[to])
                .await;
        }
    }

    async fn set_slot(&self, node: usize, slot: u16, state: &str, id: &str) {
        let _: Value = self.master_clients[node]
            .custom(
                fred::cmd!("CLUSTER"),
                vec![
                    "SETSLOT".to_owned(),
                    slot.to_string(),
                    state.to_owned(),
                    id.to_owned(),
                ],
            )
            .await
            .unwrap_or_else(|err| panic!("CLUSTER SETSLOT {slot} {state} on {node}: {err}"));
    }

    /// Index of the master that serves `slot` (as assigned at start).
    pub fn master_of_slot(&self, slot: u16) -> usize {
        (0..self.masters.len())
            .find(|&index| {
                let (from, to) = slot_range(index, self.masters.len());
                (from..=to).contains(&slot)
            })
            .expect("every slot has a master")
    }
}

/// The slots master `index` of `masters` serves: an even split, as `redis-cli` makes it.
pub fn slot_range(index: usize, masters: usize) -> (u16, u16) {
    let per = SLOTS as usize / masters;
    let from = index * per;
    let to = if index + 1 == masters {
        SLOTS as usize - 1
    } else {
        from + per - 1
    };
    (from as u16, to as u16)
}

/// `CLUSTER KEYSLOT key` as the server computes it.
pub async fn keyslot(client: &fred::clients::Client, key: &str) -> u16 {
    client
        .custom(fred::cmd!("CLUSTER"), vec!["KEYSLOT", key])
        .await
        .expect("CLUSTER KEYSLOT")
}

/// Whether a `CLUSTER NODES` line names a node out of handshake whose link is up (field 8,
/// `link-state`: `connected` for the node itself too).
fn linked(line: &str) -> bool {
    let fields: Vec<&str> = line.split_whitespace().collect();
    fields.get(7) == Some(&"connected")
        && fields
            .get(2)
            .is_some_and(|flags| !flags.contains("handshake") && !flags.contains("noaddr"))
}

/// Polls `check` on `client` every 50 ms until it holds, at most 20 s.
async fn wait_for<F, Fut>(client: &fred::clients::Client, what: &str, check: F)
where
    F: Fn(fred::clients::Client) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check(client.clone()).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "cluster fixture: {what} did not happen within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
