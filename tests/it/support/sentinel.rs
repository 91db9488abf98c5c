//! A real local Redis Sentinel deployment: one master and two replicas (`--replicaof`), watched
//! by three sentinels (`redis-server <config> --sentinel`, each with its own config file, which
//! it rewrites), all on free loopback ports. Every process is a [`RedisServer`], so all of them
//! are killed and reaped when the fixture is dropped, also when the test panics.
//!
//! The sentinels judge a master down after [`DOWN_AFTER_MS`] and a failover finishes within a few
//! seconds ([`FAILOVER_TIMEOUT_MS`] also bounds a failed election's retry).

use std::time::Duration;

use fred::prelude::*;

use super::redis_state::poll_until;
use super::{raw_client, RedisServer};

/// The name under which the sentinels monitor the master (`sentinelServiceName`).
pub const SERVICE: &str = "ferrisson-master";
/// `sentinel down-after-milliseconds`: how long a silent master takes to be judged down.
///
/// Well above a sentinel's pause between reconnections (1 s, `SENTINEL_PING_PERIOD`): when a
/// sentinel switches to a new master it opens its link to it at its next reconnection, up to
/// 1 s later (it kept retrying the dead old master every second), and judges the new master down
/// unless a PONG came within this time of the switch. With 1000 ms that failed now and then under
/// load, and since the other sentinels' votes that the old master was down still counted (for
/// 5 s), the new master was at once objectively down and replaced by a second failover, about 2 s
/// after the sentinels had agreed on it: the tests' handle of "the new master" was stale.
pub const DOWN_AFTER_MS: u64 = 2000;
/// `sentinel failover-timeout`: also the pause before a sentinel retries a failed election.
pub const FAILOVER_TIMEOUT_MS: u64 = 3000;
/// How many data nodes (a master and its replicas) and sentinels the fixture runs.
const NODES: usize = 3;
const SENTINELS: usize = 3;
/// How long the fixture waits for the deployment to settle (start, failover) before panicking.
const SETTLE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

/// A running master with two replicas and three sentinels monitoring it as [`SERVICE`].
pub struct RedisSentinel {
    /// The data nodes: node 0 starts as the master, the others as its replicas.
    pub nodes: Vec<RedisServer>,
    /// The sentinels.
    pub sentinels: Vec<RedisServer>,
    /// Raw clients of the sentinels, in the same order.
    sentinel_clients: Vec<fred::clients::Client>,
}

impl RedisSentinel {
    /// Starts the master and its replicas and waits until both replicas are in sync, then
    /// starts the sentinels and waits until every sentinel knows the master, both replicas (with
    /// a working link) and the two other sentinels.
    pub async fn start() -> RedisSentinel {
        // Sync at once: the default diskless-sync delay would hold every full sync back by 5 s.
        let no_delay = ["--repl-diskless-sync-delay", "0"];
        let master = RedisServer::start_with_args(&no_delay);
        let master_port = master.port().to_string();
        let mut nodes = vec![master];
        for _ in 1..NODES {
            let mut args = vec!["--replicaof", "127.0.0.1", &master_port];
            args.extend(no_delay);
            nodes.push(RedisServer::start_with_args(&args));
        }
        for node in &nodes[1..] {
            let client = raw_client(&node.url()).await;
            super::redis_state::wait_replication(&client, "master_link_status:up").await;
        }
        // Replicas connected before the sentinels start: a sentinel learns of them from the
        // master's INFO, which it asks right away and then only every 10 s.
        let config = format!(
            "sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs {SERVICE} {NODES}\n"
        );
        let sentinels: Vec<RedisServer> = (0..SENTINELS)
            .map(|_| RedisServer::start_with_config(Some(&config), &["--sentinel"]))
            .collect();
        let mut sentinel_clients = Vec::new();
        for sentinel in &sentinels {
            sentinel_clients.push(raw_client(&sentinel.url()).await);
        }
        let fixture = RedisSentinel {
            nodes,
            sentinels,
            sentinel_clients,
        };
        for sentinel in &fixture.sentinel_clients {
            settle(
                "every sentinel knows both replicas and the other sentinels",
                || fixture.sentinel_sees_everyone(sentinel),
            )
            .await;
        }
        fixture
    }

    /// fred's URL of the deployment: `redis-sentinel://` the first sentinel, the others as
    /// `node`s, and the service name.
    pub fn url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName={SERVICE}",
            self.sentinels[0].port()
        );
        for sentinel in &self.sentinels[1..] {
            url.push_str(&format!("&node=127.0.0.1:{}", sentinel.port()));
        }
        url
    }

    /// The master's port as sentinel `index` announces it (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    pub async fn master_port_by(&self, index: usize) -> u16 {
        let addr: Vec<String> = self.sentinel_clients[index]
            .custom(
                fred::cmd!("SENTINEL"),
                vec!["GET-MASTER-ADDR-BY-NAME", SERVICE],
            )
            .await
            .expect("SENTINEL GET-MASTER-ADDR-BY-NAME");
        match addr.as_slice() {
            [host, port] if host == "127.0.0.1" => port.parse().expect("a port"),
            other => panic!("unexpected master address {other:?}"),
        }
    }

    /// The master port every sentinel announces, if they all agree.
    pub async fn agreed_master_port(&self) -> Option<u16> {
        let first = self.master_port_by(0).await;
        for index in 1..self.sentinels.len() {
            if self.master_port_by(index).await != first {
                return None;
            }
        }
        Some(first)
    }

    /// What each sentinel says of the master now, for failure messages: the node it names and
    /// its configuration epoch (1 after one failover).
    pub async fn announcement(&self) -> String {
        let mut said = Vec::new();
        for (index, sentinel) in self.sentinel_clients.iter().enumerate() {
            let master: Vec<String> = sentinel
                .custom(fred::cmd!("SENTINEL"), vec!["MASTER", SERVICE])
                .await
                .unwrap_or_default();
            let field = |name: &str| {
                master
                    .chunks(2)
                    .find(|pair| pair[0] == name)
                    .map_or("?", |pair| pair[1].as_str())
            };
            let node = field("port")
                .parse()
                .ok()
                .and_then(|port: u16| self.nodes.iter().position(|node| node.port() == port));
            said.push(format!(
                "sentinel {index}: node {node:?} (port {}), config epoch {}",
                field("port"),
                field("config-epoch")
            ));
        }
        said.join("; ")
    }

    /// The index in [`RedisSentinel::nodes`] of the current master, as the sentinels announce
    /// it (they must agree).
    pub async fn master(&self) -> usize {
        let port = self
            .agreed_master_port()
            .await
            .expect("the sentinels agree on the master");
        self.node_of_port(port)
    }

    /// A raw client of data node `index`.
    pub async fn node_client(&self, index: usize) -> fred::clients::Client {
        raw_client(&self.nodes[index].url()).await
    }

    /// A raw client of the current master.
    pub async fn master_client(&self) -> fred::clients::Client {
        self.node_client(self.master().await).await
    }

    /// A raw client of sentinel `index`.
    pub fn sentinel_client(&self, index: usize) -> &fred::clients::Client {
        &self.sentinel_clients[index]
    }

    /// A planned failover: `SENTINEL FAILOVER` on the first sentinel, then waits until every
    /// sentinel announces the same new master and that node says it is a master. Returns its
    /// index. The old master is reconfigured as a replica by the sentinels later (about 10 s).
    pub async fn failover(&self) -> usize {
        let old = self.master().await;
        // Refused while a sentinel has no fresh view of a replica to promote yet: retry.
        let asked = poll_until(SETTLE, POLL, || self.ask_failover(), Result::is_ok).await;
        if let Err(Err(err)) = asked {
            panic!("SENTINEL FAILOVER kept failing: {err}");
        }
        self.wait_for_promotion(old).await
    }

    /// Kills the current master (SIGKILL) and waits until the sentinels agree on a promoted
    /// replica that says it is a master. Returns its index.
    pub async fn kill_master(&mut self) -> usize {
        let old = self.master().await;
        self.nodes[old].kill();
        self.wait_for_promotion(old).await
    }

    async fn ask_failover(&self) -> Result<(), fred::error::Error> {
        self.sentinel_clients[0]
            .custom::<String, _>(fred::cmd!("SENTINEL"), vec!["FAILOVER", SERVICE])
            .await
            .map(drop)
    }

    /// Waits until the sentinels agree on a master other than node `old` and that node says it
    /// is a master (after `old` was killed, say). Returns its index.
    pub async fn wait_for_promotion(&self, old: usize) -> usize {
        let old_port = self.nodes[old].port();
        let port = settle_on("the sentinels agree on a new master", move || async move {
            self.agreed_master_port()
                .await
                .filter(|port| *port != old_port)
        })
        .await;
        let new = self.node_of_port(port);
        let client = &self.node_client(new).await;
        settle("the promoted replica is a master", move || async move {
            replication_info(client).await.contains("role:master")
        })
        .await;
        // Closed here, not whenever it is dropped: a test may watch the new master's clients.
        let _ = client.quit().await;
        new
    }

    fn node_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|node| node.port() == port)
            .unwrap_or_else(|| panic!("the sentinels name an unknown master port {port}"))
    }

    async fn sentinel_sees_everyone(&self, sentinel: &fred::clients::Client) -> bool {
        let master: Vec<String> = sentinel
            .custom(fred::cmd!("SENTINEL"), vec!["MASTER", SERVICE])
            .await
            .unwrap_or_default();
        let field = |name: &str| {
            master
                .chunks(2)
                .find(|pair| pair[0] == name)
                .map(|pair| pair[1].clone())
        };
        let replicas: Vec<Vec<String>> = sentinel
            .custom(fred::cmd!("SENTINEL"), vec!["REPLICAS", SERVICE])
            .await
            .unwrap_or_default();
        let replica_ok = |replica: &Vec<String>| {
            replica
                .chunks(2)
                .any(|pair| pair[0] == "master-link-status" && pair[1] == "ok")
                && replica
                    .chunks(2)
                    .any(|pair| pair[0] == "flags" && pair[1] == "slave")
        };
        field("flags").as_deref() == Some("master")
            && field("num-other-sentinels") == Some((SENTINELS - 1).to_string())
            && replicas.len() == NODES - 1
            && replicas.iter().all(replica_ok)
    }
}

/// `INFO replication` of a data node (empty if it did not answer).
async fn replication_info(client: &fred::clients::Client) -> String {
    client
        .info(Some(fred::types::InfoKind::Replication))
        .await
        .unwrap_or_default()
}

/// Polls `check` until it holds, panicking after [`SETTLE`].
async fn settle<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    if poll_until(SETTLE, POLL, check, |done| *done).await.is_err() {
        panic!("sentinel fixture: {what} did not happen within {SETTLE:?}");
    }
}

/// Polls `probe` until it gives a value, panicking after [`SETTLE`].
async fn settle_on<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match poll_until(SETTLE, POLL, probe, Option::is_some).await {
        Ok(Some(value)) => value,
        _ => panic!("sentinel fixture: {what} did not happen within {SETTLE:?}"),
    }
}
