//! Locks on a Redis Cluster: each lock lives in its name's hash slot, waiters are woken on the
//! slot's node, and slot moves and failovers are followed.
//!
//! ```text
//! cargo run --example cluster -- 'redis-cluster://127.0.0.1:7000?node=127.0.0.1:7001&node=127.0.0.1:7002'
//! ```
//!
//! With the default `PublishMode::Auto`, releases in a cluster publish both classic and sharded
//! unlock messages, so Java waiters on Redisson before and after 3.22 wake up; choose
//! `PublishMode::Sharded` when every Java peer is 3.22 or newer. `SyncedWrites::Auto` makes
//! every acquire and release wait for the master's replicas (`WAIT`), as Redisson does.
//! Names with a hash tag (`{orders}:1`, `{orders}:2`) share a slot, and so a node.

use std::time::Duration;

use ferrisson::{Client, Config, Owner, PublishMode, SyncedWrites};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("REDIS_URL").ok())
        .ok_or("usage: cluster redis-cluster://HOST:PORT[?node=HOST:PORT&...]")?;
    let mut config = Config::new(url);
    config.publish_mode = PublishMode::Auto;
    config.synced_writes = SyncedWrites::Auto;
    let client = Client::new(config).await?;

    // Locks spread over the slots, taken concurrently: each call goes to its slot's master.
    let locks: Vec<_> = (0..8)
        .map(|i| client.lock(format!("example:cluster:{i}")))
        .collect();
    let guards = futures::future::try_join_all(locks.iter().map(|lock| lock.lock())).await?;
    println!("holding {} locks across the cluster's slots", guards.len());
    for guard in guards {
        guard.unlock().await?;
    }

    // A waiter on another owner is woken by the release's unlock message on the slot's node.
    let lock = client.lock("{orders}:42");
    let holder = lock.with_owner(Owner::new()).lock().await?;
    let waiter = lock.with_owner(Owner::new());
    let waiting = tokio::spawn(async move { waiter.lock().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder.unlock().await?;
    let guard = waiting.await??;
    println!(
        "{{orders}}:42: the waiter was woken by {:?} after {:?}",
        guard.acquisition().woken_by,
        guard.acquisition().waited
    );
    guard.unlock().await?;
    client.shutdown().await;
    Ok(())
}
