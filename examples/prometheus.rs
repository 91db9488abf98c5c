//! ferrisson's lock metrics in Prometheus' text format.
//!
//! ```sh
//! cargo run --example prometheus --features metrics            # print /metrics once
//! cargo run --example prometheus --features metrics -- --serve # serve it on 127.0.0.1:9000
//! ```
//!
//! Connects to `REDIS_URL` (default `redis://127.0.0.1:6379`), installs the Prometheus recorder
//! (before connecting: the held-locks gauge counts with increments), takes some locks so that
//! immediate, reentrant and handed-over acquisitions, a busy `try_lock` and a watchdog renewal
//! happen, and renders the text a Prometheus server would scrape while one lock is still held.
//! See docs/observability.md for what each metric means.

use std::time::Duration;

use ferrisson::metrics::ACQUIRE_WAIT_SECONDS;
use ferrisson::{Client, Config, LockGuard, Owner};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Where `--serve` listens.
const LISTEN: &str = "127.0.0.1:9000";

#[tokio::main]
async fn main() -> Result<(), Error> {
    let serve = std::env::args().skip(1).any(|arg| arg == "--serve");
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());

    // Buckets make the wait time a Prometheus histogram (without them, a summary).
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(ACQUIRE_WAIT_SECONDS.into()),
            &[0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10.0],
        )?
        .install_recorder()?;

    let mut config = Config::new(url);
    // A short watchdog timeout, so that a renewal (every third of it) happens within the run.
    config.watchdog_timeout = Duration::from_secs(3);
    let client = Client::new(config).await?;
    let held = take_some_locks(&client).await?;

    if serve {
        println!("serving the metrics on http://{LISTEN}/metrics (Ctrl-C to stop)");
        tokio::select! {
            served = serve_metrics(prometheus) => served?,
            _ = tokio::signal::ctrl_c() => {}
        }
    } else {
        prometheus.run_upkeep();
        print!("{}", prometheus.render());
    }
    held.unlock().await?;
    client.shutdown().await;
    Ok(())
}

/// Immediate and reentrant acquisitions, a busy `try_lock`, a local hand-off between two tasks
/// and a watchdog renewal. Returns a hold that is still held when the metrics are rendered.
async fn take_some_locks(client: &Client) -> Result<LockGuard, Error> {
    let lock = client.lock("example:orders:42");
    let outer = lock.lock().await?;
    let inner = lock.lock().await?; // re-entry by the same task
    inner.unlock().await?;
    // Another owner waits; the release hands the lock straight to it.
    let other = lock.with_owner(Owner::new());
    if other.try_lock().await?.is_acquired() {
        return Err("another owner got a lock that is held".into());
    }
    let waiter = tokio::spawn(async move {
        let guard = other.lock().await?;
        guard.unlock().await.map(drop)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    outer.unlock().await?;
    waiter.await??;

    // Held across a renewal (every second with the 3 s watchdog).
    let held = client.lock("example:nightly-report").lock().await?;
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    Ok(held)
}

/// Answers every HTTP request on [`LISTEN`] with the rendered metrics.
async fn serve_metrics(prometheus: PrometheusHandle) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(LISTEN).await?;
    loop {
        let (mut socket, _) = listener.accept().await?;
        let mut request = [0u8; 1024];
        // The request itself does not matter: every path gets the metrics.
        let _ = socket.read(&mut request).await;
        prometheus.run_upkeep();
        let body = prometheus.render();
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = socket.write_all(response.as_bytes()).await;
    }
}
