//! What ferrisson reports through `tracing`: a subscriber that prints its events, then a
//! contended acquisition, a hand-off, a watchdog renewal and a lost lease to report.
//!
//! ```text
//! cargo run --example tracing                                # ferrisson=debug by default
//! RUST_LOG=ferrisson=warn cargo run --example tracing        # only what needs attention
//! cargo run --example tracing -- redis://host:6379/0         # or REDIS_URL=...
//! ```
//!
//! Levels: `warn` for what an operator should see (lost leases, failed renewals, unreplicated
//! writes, outages), `debug` for the life of each lock (acquire spans with the lock and owner,
//! hand-offs, renewals, subscriptions), `trace` for per-call details. Lock names appear as
//! fields (`lock=...`), so a filter such as `RUST_LOG=ferrisson=debug` plus your log pipeline's
//! field search finds one lock's story.

use std::time::Duration;

use ferrisson::{Client, Config, Owner};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("ferrisson=debug,fred=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("REDIS_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());

    // A short watchdog timeout, so that a renewal (every third of it) happens within the run.
    let watchdog = Duration::from_secs(3);
    let mut config = Config::new(url);
    config.watchdog_timeout = watchdog;
    let client = Client::new(config).await?;
    let lock = client.lock("example:tracing");

    // A contended acquisition: the second owner waits for the first one's release.
    let first = lock.with_owner(Owner::new()).lock().await?;
    let second = lock.with_owner(Owner::new());
    let waiter = tokio::spawn(async move { second.lock().await });
    // Held across a renewal (every second), while the second owner waits.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    first.unlock().await?;
    let guard = waiter.await??;
    println!(
        "the waiter waited {:?}, woken by {:?}",
        guard.acquisition().waited,
        guard.acquisition().woken_by
    );

    // A lost lease: the key is deleted under the holder; the guard's `lost()` fires (the next
    // renewal finds the key gone, if nothing told the client sooner), and the library logs it
    // at warn level.
    lock.force_unlock().await?;
    tokio::time::timeout(watchdog, guard.lost()).await?;
    println!("the holder noticed the loss; see the warning above");
    let _ = guard.unlock().await; // Err(LeaseLost): nothing left to release
    client.shutdown().await;
    Ok(())
}
