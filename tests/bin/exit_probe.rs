//! `exit-probe URL PREFIX HOW FLAVOR`: takes locks of every kind under `PREFIX:*`, prints `held`,
//! and leaves `main` with its guards still alive, as `HOW` says: `return` (`Ok(())`), `error` (a
//! `?` out of `main`), `panic` (a panic that unwinds out of it), `shutdown` (`Client::shutdown`
//! first, then `Ok(())`) or `stalled` (`return`, after waiting for a line on stdin, so that the
//! test can stop the server first) or `retry` (`Client::shutdown`, then one guard dropped
//! while the test has the server stopped and one after it resumed it, each after a line on
//! stdin, printing `first` and `second` after each; then `return`). `FLAVOR` is the runtime:
//! `multi` or `current`.
//!
//! `tests/it/exit_release.rs` runs it and checks that every key is free once the process has
//! ended: the guards' releases are not lost with the runtime.

use std::time::Duration;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> Result<()> {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, prefix, how, flavor] = args.as_slice() else {
        return Err(
            "usage: exit-probe URL PREFIX return|error|panic|shutdown|stalled|retry multi|current"
                .into(),
        );
    };
    let runtime = match flavor.as_str() {
        "multi" => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?,
        "current" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        other => return Err(format!("unknown runtime flavor `{other}`").into()),
    };
    // As `#[tokio::main]` does: the runtime is dropped when `main` ends, however it ends.
    runtime.block_on(probe(url, prefix, how))
}

async fn probe(url: &str, prefix: &str, how: &str) -> Result<()> {
    let mut config = ferrisson::Config::new(url);
    // The bound on what a release at exit may hold the process up (see docs/reliability.md).
    config.response_timeout = Duration::from_secs(2);
    let client = ferrisson::Client::new(config).await?;
    let name = |kind: &str| format!("{prefix}:{kind}");

    let reentrant = client.lock(name("reentrant"));
    let _outer = reentrant.lock().await?;
    let _inner = reentrant.lock().await?; // a re-entry: hold count 2
    let leased = client
        .lock(name("leased"))
        .lock_with_lease(Duration::from_secs(60))
        .await?;
    let fair = client.fair_lock(name("fair")).lock().await?;
    let _spin = client.spin_lock(name("spin")).lock().await?;
    let _fenced = client.fenced_lock(name("fenced")).lock().await?;
    let _non_reentrant = client
        .non_reentrant_lock(name("non-reentrant"))
        .lock()
        .await?;
    let _write = client
        .read_write_lock(name("rw-write"))
        .write_lock()
        .lock()
        .await?;
    let _read = client
        .read_write_lock(name("rw-read"))
        .read_lock()
        .lock()
        .await?;
    let _token = client.token_lock(name("token")).lock().await?;
    let permits = client.permit_expirable_semaphore(name("permits"));
    permits.try_set_permits(1).await?;
    let _permit = permits.acquire(Some(Duration::from_secs(60))).await?;
    // A guard held by a task that the runtime's shutdown drops.
    let task_lock = client.lock(name("task"));
    let (held, in_task) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let guard = task_lock.lock().await;
        let _ = held.send(());
        std::future::pending::<()>().await;
        drop(guard);
    });
    in_task.await?;

    println!("held");
    match how {
        "return" => Ok(()),
        "error" => {
            let number: u32 = "not a number".parse()?;
            println!("{number}");
            Ok(())
        }
        "panic" => panic!("the probe panics with its guards held"),
        "shutdown" => {
            client.shutdown().await;
            Ok(())
        }
        "stalled" => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            Ok(())
        }
        "retry" => {
            let go = || -> std::io::Result<()> {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).map(drop)
            };
            client.shutdown().await;
            println!("shut");
            go()?; // the server is stopped now
            drop(leased);
            println!("first");
            go()?; // and running again
            drop(fair);
            println!("second");
            Ok(())
        }
        other => Err(format!("unknown way out `{other}`").into()),
    }
}
