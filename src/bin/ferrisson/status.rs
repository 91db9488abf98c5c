//! `ferrisson status NAME...`

use crate::args::{Connection, StatusArgs};
use crate::error::not_a_lock;
use crate::output::{self, LockJson};
use crate::{connect, exit, Failure, Outcome};

/// Prints the state of every named lock: a table, or a JSON array with `--json`. Exits 65
/// (after printing every name) when a key is not a lock.
pub async fn status(conn: &Connection, json: bool, args: StatusArgs) -> Outcome {
    let client = connect(conn, conn.config()).await?;
    let mut infos = Vec::with_capacity(args.names.len());
    let mut failure = None;
    for name in &args.names {
        match client.inspect(name).await {
            Ok(info) => infos.push(output::classify(info)),
            Err(err) => {
                failure = Some(Failure::from_lib(
                    &format!("cannot read `{name}`"),
                    &err,
                    conn,
                ));
                break;
            }
        }
    }
    client.shutdown().await;
    if let Some(failure) = failure {
        return Err(failure);
    }

    if json {
        let objects: Vec<LockJson> = infos.iter().map(LockJson::new).collect();
        output::stdout_line(&output::json(&objects));
    } else {
        let mut rows = vec![["NAME", "STATE", "KIND", "TTL", "HOLDERS"]
            .map(str::to_owned)
            .to_vec()];
        for info in &infos {
            rows.push(vec![
                info.name.clone(),
                output::state(info).replace('_', "-"),
                match output::not_a_lock_type(info) {
                    Some(redis_type) => redis_type.to_owned(),
                    None => output::kind_text(&info.kind, info.queued),
                },
                output::ttl_text(&info.ttl),
                output::holders_text(info),
            ]);
        }
        output::stdout_line(output::table(&rows).trim_end());
    }
    let mut code = exit::OK;
    for info in &infos {
        if let Some(redis_type) = output::not_a_lock_type(info) {
            output::stderr_line(&format!(
                "ferrisson: {}",
                not_a_lock(&info.name, redis_type)
            ));
            code = exit::NOT_A_LOCK;
        }
    }
    Ok(code)
}
