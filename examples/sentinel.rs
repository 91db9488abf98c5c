//! Locks behind Redis Sentinel: the client asks the sentinels for the master, follows their
//! `+switch-master` announcements at once, and by default waits for the master's replicas after
//! each acquire and release, so that a failover cannot give an acknowledged lock a second owner.
//!
//! ```text
//! cargo run --example sentinel -- 'redis-sentinel://127.0.0.1:26379?sentinelServiceName=mymaster&node=127.0.0.1:26380'
//! ```
//!
//! Credentials: `redis-sentinel://user:pass@...` goes to the data nodes, and
//! `sentinelUsername=`/`sentinelPassword=` query parameters to the sentinels, as in Redisson.

use std::time::Duration;

use ferrisson::{Client, Config, Error, SyncedWrites};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("REDIS_URL").ok())
        .ok_or("usage: sentinel redis-sentinel://HOST:PORT?sentinelServiceName=NAME[&node=HOST:PORT...]")?;
    let mut config = Config::new(url);
    config.synced_writes = SyncedWrites::Auto; // on behind Sentinel, as in Redisson ≥ 3.24
    config.replica_sync_timeout = Duration::from_secs(1);
    let client = Client::new(config).await?;

    let lock = client.lock("example:sentinel");
    match lock.lock().await {
        Ok(guard) => {
            println!(
                "locked {} on the master named by the sentinels",
                lock.name()
            );
            guard.unlock().await?;
        }
        // No replica acknowledged in time: the acquisition was rolled back. Transient.
        Err(err @ Error::NotReplicated { .. }) => println!("not replicated, retry later: {err}"),
        Err(err) => return Err(err.into()),
    }
    client.shutdown().await;
    Ok(())
}
