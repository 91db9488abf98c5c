//! `ferrisson status NAME...`

use crate::args::{Connection, StatusArgs};
use crate::output::{self, LockJson};
use crate::{connect, exit, Failure, Outcome};

/// Prints the state of every named lock: a table, or a JSON array with `--json`.
pub async fn status(conn: &Connection, json: bool, args: StatusArgs) -> Outcome {
    let client = connect(conn, conn.config()).await?;
    let mut infos = Vec::with_capacity(args.names.len());
    let mut failure = None;
    for name in &args.names {
        match client.inspect(name).await {
            Ok(info) => infos.push(info),
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
                if info.is_locked() { "locked" } else { "free" }.to_owned(),
                output::kind_text(&info.kind, info.queued),
                output::ttl_text(&info.ttl),
                output::holders_text(info),
            ]);
        }
        output::stdout_line(output::table(&rows).trim_end());
    }
    Ok(exit::OK)
}
