//! `ferrisson unlock --force NAME...`

use serde::Serialize;

use crate::args::{Connection, UnlockArgs};
use crate::{connect, exit, output, Failure, Outcome};

#[derive(Serialize)]
struct Unlocked<'a> {
    name: &'a str,
    released: bool,
}

/// Force-releases every named lock (publishing the unlock message so that waiters wake).
pub async fn unlock(conn: &Connection, json: bool, args: UnlockArgs) -> Outcome {
    debug_assert!(args.force, "clap requires --force");
    let client = connect(conn, conn.config()).await?;
    let mut results = Vec::with_capacity(args.names.len());
    let mut failure = None;
    for name in &args.names {
        // Who held it, for the message only: the release itself is one atomic script.
        let holders = match client.inspect(name).await {
            Ok(info) => output::holders_text(&info),
            Err(_) => String::new(),
        };
        match client.lock(name.as_str()).force_unlock().await {
            Ok(released) => {
                if !json {
                    if released {
                        output::stdout_line(&format!(
                            "unlocked `{name}` (was held by {holders}); waiters notified"
                        ));
                    } else {
                        output::stdout_line(&format!("`{name}` was not locked"));
                    }
                }
                results.push(Unlocked { name, released });
            }
            Err(err) => {
                failure = Some(Failure::from_lib(
                    &format!("cannot unlock `{name}`"),
                    &err,
                    conn,
                ));
                break;
            }
        }
    }
    client.shutdown().await;
    if json {
        output::stdout_line(&output::json(&results));
    }
    match failure {
        Some(failure) => Err(failure),
        None => Ok(exit::OK),
    }
}
