//! Synced writes (`Config::synced_writes`, Redisson's `checkLockSyncedSlaves`, protocol §1.11)
//! and the failover race they close, on a real master and replica.
//!
//! The replica follows the master through a [`FaultProxy`], so a test can cut the replication
//! link (a partition between the two) while the client still reaches the master. A failover is
//! then what a sentinel would do: the master dies and the replica is promoted
//! (`REPLICAOF NO ONE`). Whoever asks the promoted replica for the lock gets the data it had.

use crate::support;

use std::time::Duration;

use ferrisson::{Config, Error, Owner, SyncedWrites};
use fred::prelude::*;
use support::fault::{FaultProxy, ProxyMode};
use support::redis_state::{command_calls, exists, holder_fields, reset_stats};
use support::{raw_client, RedisServer};

/// A master and a replica that follows it through a proxy, in sync.
struct Replicated {
    master: RedisServer,
    replica: RedisServer,
    link: FaultProxy,
}

impl Replicated {
    async fn start() -> Replicated {
        let master = RedisServer::start();
        let link = FaultProxy::start(master.port()).await;
        let port = link.port().to_string();
        let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
        // Acknowledging writes, not merely linked up: see `wait_replicas_streaming`.
        let raw = raw_client(&master.url()).await;
        support::redis_state::wait_replicas_streaming(&raw, 1).await;
        Replicated {
            master,
            replica,
            link,
        }
    }

    /// A client of the master with `synced_writes`.
    async fn client(&self, synced_writes: SyncedWrites) -> ferrisson::Client {
        let mut config = Config::new(self.master.url());
        config.synced_writes = synced_writes;
        // The acquisitions these tests expect acknowledged must be acknowledged within it on a
        // loaded machine too (a stalled replica process, not a slow link); a blackholed one
        // waits it out before its rollback, so it is no longer than that needs.
        config.replica_sync_timeout = Duration::from_millis(1500);
        support::connect_with(config).await
    }

    /// The failover: the master dies, the replica becomes the master with the data it has.
    async fn fail_over(&mut self) -> ferrisson::Client {
        self.master.kill();
        let raw = raw_client(&self.replica.url()).await;
        let _: String = raw
            .custom(fred::cmd!("REPLICAOF"), vec!["NO", "ONE"])
            .await
            .expect("REPLICAOF NO ONE");
        support::connect(&self.replica).await
    }
}

/// The race without synced writes: an acquisition the replica never received is gone after the
/// failover, and a second owner takes the lock there while the first still holds its guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_synced_writes_a_failover_can_give_the_lock_a_second_owner() {
    let mut pair = Replicated::start().await;
    // A single-server URL: `Auto` is off there, as in Redisson.
    let first = pair.client(SyncedWrites::Auto).await;
    pair.link.set_mode(ProxyMode::Blackhole);
    let held = support::hold(&first, "orders:race").await;

    let promoted = pair.fail_over().await;
    let second = promoted
        .lock("orders:race")
        .with_owner(Owner::new())
        .try_lock()
        .await
        .expect("the promoted replica answers")
        .acquired()
        .expect("the lock was lost with the failover: a second owner takes it");
    assert!(
        !held.is_lost(),
        "the first owner has not learned of the loss yet: two owners at once"
    );
    drop(second);
}

/// With synced writes the same partition makes the acquisition fail with `NotReplicated`, and
/// it is rolled back on the master: nobody believes they hold what a failover would lose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_no_replica_acknowledged_is_rolled_back() {
    let pair = Replicated::start().await;
    let client = pair.client(SyncedWrites::Always).await;
    let master = raw_client(&pair.master.url()).await;
    pair.link.set_mode(ProxyMode::Blackhole);

    let lock = client.lock("orders:partitioned").with_owner(Owner::new());
    let err = lock
        .try_lock()
        .await
        .expect_err("no replica acknowledges the acquisition");
    assert!(
        matches!(&err, Error::NotReplicated { name } if name == "orders:partitioned"),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert_eq!(
        exists(&master, "orders:partitioned").await,
        0,
        "the acquisition was rolled back on the master"
    );
    assert!(!lock.is_held_by_current_owner().await.expect("HEXISTS"));
}

/// The fenced lock's own acquire script gets the same `WAIT` and rollback: the hold goes, the
/// token it took stays spent (tokens only have to increase).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_acquisition_no_replica_acknowledged_is_rolled_back() {
    let pair = Replicated::start().await;
    let client = pair.client(SyncedWrites::Always).await;
    let master = raw_client(&pair.master.url()).await;
    let lock = client.fenced_lock("fenced:partitioned");
    let first = lock
        .lock()
        .await
        .expect("acknowledged while the link is up");
    first.unlock().await.expect("release");
    pair.link.set_mode(ProxyMode::Blackhole);

    let err = lock
        .try_lock()
        .await
        .expect_err("no replica acknowledges the acquisition");
    assert!(
        matches!(&err, Error::NotReplicated { name } if name == "fenced:partitioned"),
        "{err:?}"
    );
    assert_eq!(
        exists(&master, "fenced:partitioned").await,
        0,
        "the acquisition was rolled back on the master"
    );
    assert_eq!(
        lock.token().await.expect("GET"),
        Some(2),
        "the token stays spent"
    );
}

/// With synced writes and a healthy replica, the acknowledged lock survives the failover: the
/// promoted replica refuses a second owner, and the holder still holds it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_synced_writes_a_failover_does_not_lose_the_lock() {
    let mut pair = Replicated::start().await;
    let client = pair.client(SyncedWrites::Always).await;
    let master = raw_client(&pair.master.url()).await;
    reset_stats(&master).await;

    let held = support::hold(&client, "orders:synced").await;
    assert!(
        command_calls(&master, "wait").await >= 1,
        "the acquisition was followed by WAIT"
    );
    // Only now is the link cut: the acknowledged write is on the replica already.
    pair.link.set_mode(ProxyMode::Blackhole);
    let promoted = pair.fail_over().await;
    let rival = promoted.lock("orders:synced").with_owner(Owner::new());
    assert!(
        rival
            .try_lock()
            .await
            .expect("ask the new master")
            .is_busy(),
        "the promoted replica has the lock"
    );
    let holders = holder_fields(&raw_client(&pair.replica.url()).await, "orders:synced").await;
    assert_eq!(
        holders,
        [format!("{}:{}", client.id(), held.owner().id())],
        "still held by the first owner on the new master"
    );
}

/// Synced writes on a master without replicas wait for nobody (`connected_slaves: 0`), and
/// `Auto` on a single-server URL sends no `WAIT` at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wait_without_replicas_or_on_a_single_server_by_default() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    for synced_writes in [SyncedWrites::Always, SyncedWrites::Auto] {
        let mut config = Config::new(server.url());
        config.synced_writes = synced_writes;
        let client = support::connect_with(config).await;
        reset_stats(&raw).await;
        let guard = support::hold(&client, "orders:alone").await;
        guard.unlock().await.expect("release");
        assert_eq!(command_calls(&raw, "wait").await, 0, "{synced_writes:?}");
    }
}

/// Concurrent acquisitions of one client go out in batches (`src/transport/dispatch.rs`), and one `WAIT`
/// follows each batch, not each call. Under a partition every acquisition of a batch is rolled
/// back on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_shares_one_wait_and_rolls_back_call_by_call() {
    let pair = Replicated::start().await;
    let client = pair.client(SyncedWrites::Always).await;
    let master = raw_client(&pair.master.url()).await;
    let names: Vec<String> = (0..64).map(|i| format!("orders:batch:{i}")).collect();
    let acquire_all = || {
        futures::future::join_all(names.iter().map(|name| {
            let lock = client.lock(name.clone()).with_owner(Owner::new());
            async move { lock.try_lock().await }
        }))
    };

    reset_stats(&master).await;
    let guards: Vec<_> = acquire_all()
        .await
        .into_iter()
        .map(|taken| taken.expect("acquire").acquired().expect("free"))
        .collect();
    let waits = command_calls(&master, "wait").await;
    assert!(
        (1..names.len() as u64).contains(&waits),
        "{waits} WAITs for {} acquisitions",
        names.len()
    );
    for guard in guards {
        guard.unlock().await.expect("release");
    }

    pair.link.set_mode(ProxyMode::Blackhole);
    for taken in acquire_all().await {
        assert!(
            matches!(taken, Err(Error::NotReplicated { .. })),
            "{taken:?}"
        );
    }
    for name in &names {
        assert_eq!(exists(&master, name).await, 0, "{name} was rolled back");
    }
}

/// The read-write lock's acquisitions are rolled back with their own side's release script: an
/// unacknowledged read hold leaves neither the hash nor its timeout key, and an unacknowledged
/// write hold leaves no hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_acquisitions_no_replica_acknowledged_are_rolled_back() {
    let pair = Replicated::start().await;
    let client = pair.client(SyncedWrites::Always).await;
    let master = raw_client(&pair.master.url()).await;
    let name = "rw:partitioned";
    let lock = client.read_write_lock(name).with_owner(Owner::new());
    pair.link.set_mode(ProxyMode::Blackhole);

    let read = lock.read_lock().try_lock().await;
    let write = lock.write_lock().try_lock().await;
    for (side, outcome) in [("read", read.map(|_| ())), ("write", write.map(|_| ()))] {
        let err = outcome.expect_err("no replica acknowledges the acquisition");
        assert!(
            matches!(&err, Error::NotReplicated { name: n } if n == name),
            "{side}: {err:?}"
        );
        assert_eq!(exists(&master, name).await, 0, "{side} rolled back");
    }
    let keys: Vec<String> = master
        .custom(fred::cmd!("KEYS"), vec!["*rwlock_timeout*"])
        .await
        .expect("KEYS");
    assert!(
        keys.is_empty(),
        "the read hold's timeout key is gone: {keys:?}"
    );
}

/// A semaphore's acquire is synced as Redisson 3.21+'s: permits taken without a replica's
/// acknowledgement are given back on the master (a release) and the acquire fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_acquisition_no_replica_acknowledged_gives_its_permits_back() {
    let pair = Replicated::start().await;
    let client = pair.client(SyncedWrites::Always).await;
    let master = raw_client(&pair.master.url()).await;
    let semaphore = client.semaphore("sem:partitioned");
    semaphore.try_set_permits(2).await.expect("set");
    let permits = semaphore
        .acquire(1)
        .await
        .expect("acknowledged while the link is up");
    permits.release().await.expect("release");
    pair.link.set_mode(ProxyMode::Blackhole);

    let err = semaphore
        .try_acquire(1)
        .await
        .expect_err("no replica acknowledges the acquisition");
    assert!(
        matches!(&err, Error::NotReplicated { name } if name == "sem:partitioned"),
        "{err:?}"
    );
    let available: Option<String> = master.get("sem:partitioned").await.expect("GET");
    assert_eq!(
        available.as_deref(),
        Some("2"),
        "the permits were given back on the master"
    );
}
