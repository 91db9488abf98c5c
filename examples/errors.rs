//! ferrisson's typed errors, each provoked on purpose, and what a caller does about it.
//!
//! ```text
//! cargo run --example errors                          # redis://127.0.0.1:6379
//! cargo run --example errors -- redis://host:6379/0   # or REDIS_URL=...
//! ```
//!
//! It writes the keys `example:errors:*` and deletes them at the end.

use std::time::Duration;

use ferrisson::{Attempt, Client, Error, Owner};
use fred::prelude::{ClientLike, KeysInterface, ListInterface};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("REDIS_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let lock = client.lock("example:errors:lock");

    // Busy is not an error: `try_lock` says `Attempt::Busy`.
    let held = lock.with_owner(Owner::new()).lock().await?;
    match lock.try_lock().await? {
        Attempt::Busy => println!("try_lock: Busy (another owner holds it)"),
        Attempt::Acquired(_) => return Err("a held lock was acquired twice".into()),
    }

    // NotHeld: releasing what this owner does not hold (Redisson's IllegalMonitorStateException).
    // Fix the program's locking logic; nothing was changed on the server.
    report("unlock by a non-owner", lock.unlock().await);

    // LeaseLost: the hold was taken away (here by force_unlock) before its guard's release.
    // The protected work may have overlapped another holder's; `guard.lost()` tells it early.
    lock.force_unlock().await?;
    report("release of a lost hold", held.unlock().await);

    // WrongType: the key holds something else than a lock; it is left untouched.
    let other_type = client.lock("example:errors:list");
    let raw = raw_client(&url).await?;
    let _: i64 = raw.rpush("example:errors:list", "job").await?;
    report("is_locked on a list", other_type.is_locked().await);
    report("lock on a list", other_type.lock().await.map(drop));

    // InvalidArgument: rejected before anything is sent.
    report(
        "a 500 µs lease",
        lock.lock_with_lease(Duration::from_micros(500))
            .await
            .map(drop),
    );
    report("an empty name", client.lock("").is_locked().await);
    report("owner id 0", Owner::from_id(0));

    // Unavailable (transient): nothing listens on port 1. Transient errors may be retried.
    match Client::connect("redis://127.0.0.1:1").await {
        Err(err) => println!(
            "connect to a closed port: {err} (transient: {})",
            err.is_transient()
        ),
        Ok(_) => return Err("connected to a closed port".into()),
    }

    let _: i64 = raw.del("example:errors:list").await?;
    client.shutdown().await;
    Ok(())
}

/// Prints what an operation returned: its error's variant and message.
fn report<T: std::fmt::Debug>(what: &str, result: ferrisson::Result<T>) {
    match result {
        Ok(value) => println!("{what}: unexpectedly Ok({value:?})"),
        Err(err) => {
            let kind = match &err {
                Error::NotHeld { .. } => "NotHeld",
                Error::LeaseLost { .. } => "LeaseLost",
                Error::WrongType { .. } => "WrongType",
                Error::InvalidArgument(_) => "InvalidArgument",
                Error::Unavailable(_) | Error::Timeout(_) => "transient",
                _ => "other",
            };
            println!("{what}: {kind}: {err}");
        }
    }
}

/// A plain fred client, to write a key that is not a lock.
async fn raw_client(url: &str) -> Result<fred::clients::Client, fred::error::Error> {
    let client =
        fred::types::Builder::from_config(fred::types::config::Config::from_url(url)?).build()?;
    client.init().await?;
    Ok(client)
}
