//! `ferrisson status [--kind KIND] NAME...`

use ferrisson::inspect::{LockInfo, LockKind};
use ferrisson::{PermitIdFormat, RemainingTtl, WaitStep};

use crate::args::{Connection, Kind, StatusArgs};
use crate::error::not_a_lock;
use crate::output::{self, humane, LockJson, Recorded, RecordedWaiterJson};
use crate::{connect, exit, Failure, Outcome};

/// At most this many recorded waiters are listed per name, as the library lists of the other
/// sections (a fair lock's queue, permits out) hold at most 100.
const LISTED: usize = 100;

/// Reads `name`, as `kind` when given, in the tool's terms ([`output::classify`]).
pub async fn inspect(
    client: &ferrisson::Client,
    name: &str,
    kind: Option<Kind>,
) -> ferrisson::Result<LockInfo> {
    let info = match kind {
        Some(kind) => client.inspect_as(name, kind.primitive()).await?,
        None => client.inspect(name).await?,
    };
    Ok(output::classify(info))
}

/// "cannot read `x`", naming the `--kind` when one was given.
pub fn cannot_read(name: &str, kind: Option<Kind>) -> String {
    match kind {
        Some(kind) => format!("cannot read `{name}` as --kind {}", kind.name()),
        None => format!("cannot read `{name}`"),
    }
}

/// Prints the state of every named primitive: a table (and the lists behind it: queued
/// waiters, read holds, permits out), or a JSON array with `--json`. Exits 65 (after printing
/// every name) when a key is no primitive of the family.
pub async fn status(conn: &Connection, json: bool, args: StatusArgs) -> Outcome {
    let client = connect(conn, conn.config()?).await?;
    let mut infos = Vec::with_capacity(args.names.len());
    let mut failure = None;
    for name in &args.names {
        match inspect(&client, name, args.kind).await {
            Ok(info) => infos.push(info),
            Err(err) => {
                failure = Some(Failure::from_lib(&cannot_read(name, args.kind), &err, conn));
                break;
            }
        }
    }
    if let Some(failure) = failure {
        client.shutdown().await;
        return Err(failure);
    }
    // The waits ferrisson clients recorded (deadlock detection): a SCAN for every client's
    // edges. When they cannot be read (a user who may not SCAN) the status is still given,
    // with a warning saying why.
    let recorded = client.recorded_waits().await;
    client.shutdown().await;
    let recorded = recorded
        .map_err(|err| {
            let context = "cannot read the waits that ferrisson clients recorded";
            let failure = Failure::from_lib(context, &err, conn);
            output::stderr_line(&format!("ferrisson: warning: {}", failure.message));
        })
        .ok();
    let waiters_of = |name: &str| -> Option<Vec<&WaitStep>> {
        let recorded = recorded.as_ref()?;
        Some(recorded.iter().filter(|wait| wait.lock == name).collect())
    };

    if json {
        let objects: Vec<LockJson> = infos
            .iter()
            .map(|info| {
                let mut object = LockJson::new(info);
                object.recorded_waiters = match waiters_of(&info.name) {
                    None => Recorded::Unreadable(()),
                    Some(waits) => {
                        Recorded::Waiters(waits.into_iter().map(RecordedWaiterJson::new).collect())
                    }
                };
                object
            })
            .collect();
        output::stdout_line(&output::json(&objects));
    } else {
        let mut rows = vec![["NAME", "STATE", "KIND", "TTL", "HOLDERS"]
            .map(str::to_owned)
            .to_vec()];
        for info in &infos {
            rows.push(vec![
                info.name.clone(),
                match output::not_a_lock_type(info) {
                    Some(_) => "not-a-lock".to_owned(),
                    None => output::state(info).to_owned(),
                },
                match (output::not_a_lock_type(info), info.string_len) {
                    (Some(_), Some(len)) => format!("string, {len} bytes"),
                    (Some(redis_type), None) => redis_type.to_owned(),
                    (None, _) => output::kind_column(info),
                },
                output::ttl_text(&info.ttl),
                output::holders_text(info),
            ]);
        }
        output::stdout_line(output::table(&rows).trim_end());
        for info in &infos {
            for line in details(info) {
                output::stdout_line(&line);
            }
            if let Some(waits) = waiters_of(&info.name) {
                for line in recorded_section(&info.name, &waits) {
                    output::stdout_line(&line);
                }
            }
        }
    }
    let mut code = exit::OK;
    for info in &infos {
        if let Some(redis_type) = output::not_a_lock_type(info) {
            output::stderr_line(&format!(
                "ferrisson: error: {}",
                not_a_lock(&info.name, redis_type)
            ));
            code = exit::NOT_A_LOCK;
        } else if info.kind == LockKind::TimestampLock {
            output::stderr_line(&format!(
                "ferrisson: error: key `{}` is a {}",
                info.name,
                output::TIMESTAMP_LOCK
            ));
            code = exit::NOT_A_LOCK;
        }
    }
    Ok(code)
}

/// The lists behind a row, as text: a fair lock's queue, a read-write lock's read holds, a
/// permit-expirable semaphore's permits out. Each list is a blank line, a heading naming the
/// primitive, and an indented table.
fn details(info: &LockInfo) -> Vec<String> {
    let mut sections = Vec::new();
    if !info.waiters.is_empty() {
        let rows = info
            .waiters
            .iter()
            .enumerate()
            .map(|(i, waiter)| {
                let deadline = match (waiter.remaining, waiter.stale) {
                    (None, _) => "no deadline (inconsistent queue)".to_owned(),
                    (Some(_), true) => {
                        "deadline passed: stale, removed by the next fair-lock call".to_owned()
                    }
                    (Some(left), false) => format!("deadline in {}", humane(left)),
                };
                vec![format!("{}.", i + 1), waiter.field.clone(), deadline]
            })
            .collect();
        sections.push(section(
            format!("`{}` queue, in order ({} queued):", info.name, info.queued),
            rows,
            info.queued,
            info.waiters.len(),
        ));
    }
    if matches!(info.kind, LockKind::ReadWrite { .. }) {
        let rows: Vec<Vec<String>> = info
            .holders
            .iter()
            .filter(|holder| !holder.field.ends_with(":write"))
            .map(|holder| {
                let holds = holder
                    .read_holds
                    .iter()
                    .enumerate()
                    .map(|(i, ttl)| format!("hold {}: {}", i + 1, hold_ttl(ttl)))
                    .collect::<Vec<_>>()
                    .join(", ");
                vec![
                    holder.field.clone(),
                    format!("count {}", holder.count),
                    holds,
                ]
            })
            .collect();
        if !rows.is_empty() {
            let count = rows.len() as u64;
            sections.push(section(
                format!("`{}` read holds (timeout key TTLs):", info.name),
                rows,
                count,
                count as usize,
            ));
        }
    }
    if !info.permits.is_empty() {
        let rows = info
            .permits
            .iter()
            .map(|permit| {
                let format = match permit.id_format {
                    Some(PermitIdFormat::Raw) => "raw id (Redisson >= 3.17)",
                    Some(PermitIdFormat::Hex) => "hex-string id (Redisson 3.16)",
                    _ => "id of unknown format",
                };
                let expiry = match (permit.remaining, permit.expired) {
                    (None, _) => "never expires".to_owned(),
                    (Some(_), true) => "expired: reclaimed by the next call".to_owned(),
                    (Some(left), false) => format!("expires in {}", humane(left)),
                };
                vec![permit.id.clone(), format.to_owned(), expiry]
            })
            .collect();
        sections.push(section(
            format!("`{}` permits out ({}):", info.name, info.permits_out),
            rows,
            info.permits_out,
            info.permits.len(),
        ));
    }
    sections.into_iter().flatten().collect()
}

/// The waiters ferrisson clients recorded for `name`, oldest first: nothing when none did.
fn recorded_section(name: &str, waits: &[&WaitStep]) -> Vec<String> {
    if waits.is_empty() {
        return Vec::new();
    }
    let rows: Vec<Vec<String>> = waits
        .iter()
        .take(LISTED)
        .map(|wait| {
            vec![
                wait.owner.clone(),
                format!("waiting {}", humane(wait.waited)),
            ]
        })
        .collect();
    let listed = rows.len();
    section(
        format!("`{name}` waiters recorded by ferrisson clients (deadlock detection on):"),
        rows,
        waits.len() as u64,
        listed,
    )
}

fn section(heading: String, rows: Vec<Vec<String>>, total: u64, listed: usize) -> Vec<String> {
    let mut lines = vec![String::new(), heading];
    lines.extend(output::table(&rows).lines().map(|line| format!("  {line}")));
    let more = total.saturating_sub(listed as u64);
    if more > 0 {
        lines.push(format!("  ... and {more} more"));
    }
    lines
}

/// A read hold's timeout key: time left, `no expiry`, or `gone` (it no longer counts).
fn hold_ttl(ttl: &RemainingTtl) -> String {
    match ttl {
        RemainingTtl::NotLocked => "gone".to_owned(),
        other => output::ttl_text(other),
    }
}
