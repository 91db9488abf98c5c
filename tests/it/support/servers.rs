//! Several independent `redis-server`s, one ferrisson [`Client`](ferrisson::Client) and one
//! resilient raw client each: the setting of MultiLock and RedLock tests (one lock per server).

use std::time::Duration;

use fred::prelude::*;

use super::fault::resilient_raw_client;
use super::RedisServer;

/// `n` servers, each with its own ferrisson client and raw client.
pub struct Servers {
    pub servers: Vec<RedisServer>,
    pub clients: Vec<ferrisson::Client>,
    /// Raw clients that reconnect after a fault and never wait longer than 1 s.
    pub raws: Vec<fred::clients::Client>,
}

impl Servers {
    /// Starts `n` servers and connects to each (default configuration).
    pub async fn start(n: usize) -> Servers {
        let servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
        let mut clients = Vec::with_capacity(n);
        let mut raws = Vec::with_capacity(n);
        for server in &servers {
            clients.push(super::connect(server).await);
            raws.push(resilient_raw_client(&server.url(), Duration::from_secs(1)).await);
        }
        Servers {
            servers,
            clients,
            raws,
        }
    }

    /// Lock `name` on every server, in server order.
    pub fn locks(&self, name: &str) -> Vec<ferrisson::Lock> {
        self.clients
            .iter()
            .map(|client| client.lock(name))
            .collect()
    }

    /// Whether key `name` exists on server `i` (`false` while the server is down).
    pub async fn exists(&self, i: usize, name: &str) -> bool {
        let found: Result<i64, _> = self.raws[i].exists(name).await;
        found.unwrap_or(0) == 1
    }

    /// The servers (of those in `which`) on which key `name` exists.
    pub async fn holding(&self, which: impl IntoIterator<Item = usize>, name: &str) -> Vec<usize> {
        let mut found = Vec::new();
        for i in which {
            if self.exists(i, name).await {
                found.push(i);
            }
        }
        found
    }

    /// Asserts that `PTTL name` is within `range` (ms) on each server of `which`.
    pub async fn assert_pttl_within(
        &self,
        which: impl IntoIterator<Item = usize>,
        name: &str,
        range: std::ops::RangeInclusive<i64>,
    ) {
        for i in which {
            let pttl: i64 = self.raws[i].pttl(name).await.expect("PTTL");
            assert!(
                range.contains(&pttl),
                "server {i}: PTTL {pttl}, not in {range:?}"
            );
        }
    }

    /// Starts `n` servers and connects a blocking client to each (call outside any runtime).
    pub fn start_blocking(n: usize) -> (Vec<RedisServer>, Vec<ferrisson::blocking::Client>) {
        let servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
        let clients = servers
            .iter()
            .map(|server| ferrisson::blocking::Client::connect(&server.url()).expect("connect"))
            .collect();
        (servers, clients)
    }

    /// Waits until key `name` is gone from server `i`; panics after `within`.
    pub async fn wait_gone(&self, i: usize, name: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.exists(i, name).await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} still exists on server {i} after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Servers {
    /// The servers' URLs, space-separated: what a contender process gets (see
    /// [`contender_locks`]).
    pub fn urls(&self) -> String {
        let urls: Vec<String> = self.servers.iter().map(RedisServer::url).collect();
        urls.join(" ")
    }
}

/// In a contender process: lock `name` through a client of its own on each server of `urls`
/// ([`Servers::urls`]), rotated left by the contender's number, so that each contender starts
/// from another server and two of them can each hold some of the servers at once.
pub async fn contender_locks(urls: &str, name: &str) -> Vec<ferrisson::Lock> {
    let mut locks = Vec::new();
    for url in urls.split(' ') {
        let client = ferrisson::Client::connect(url)
            .await
            .expect("the contender connects");
        locks.push(client.lock(name));
    }
    let first: usize = std::env::var(super::processes::CONTENDER_INDEX)
        .expect("the contender's number")
        .parse()
        .expect("a number");
    let shift = first % locks.len();
    locks.rotate_left(shift);
    locks
}
