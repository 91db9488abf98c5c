//! `ferrisson unlock --force NAME...`

use ferrisson::inspect::{LockKind, ReadWriteMode};
use serde::Serialize;

use crate::args::{Connection, Kind, UnlockArgs};
use crate::{connect, exit, output, status, Failure, Outcome};

#[derive(Serialize)]
struct Unlocked<'a> {
    name: &'a str,
    released: bool,
}

/// Force-releases every named lock as its kind's own force unlock does (publishing that kind's
/// unlock message so that its waiters wake), in order, stopping at the first failure. A key
/// that is not a lock is left alone.
pub async fn unlock(conn: &Connection, json: bool, args: UnlockArgs) -> Outcome {
    debug_assert!(args.force, "clap requires --force");
    let client = connect(conn, conn.config()?).await?;
    let mut results = Vec::with_capacity(args.names.len());
    let mut failure = None;
    let kind = match args.token {
        Some(_) => Some(Kind::Token),
        None => args.kind,
    };
    for name in &args.names {
        match unlock_one(conn, &client, name, kind, args.token.as_deref()).await {
            Ok((released, holders, token)) => {
                if !json {
                    if released {
                        output::stdout_line(&format!(
                            "unlocked `{name}` (was held by {holders}); {}",
                            if token {
                                "its waiters learn of it by keyspace event or by polling"
                            } else {
                                "waiters notified"
                            }
                        ));
                    } else if args.token.is_some() {
                        output::stdout_line(&format!("`{name}` was not locked with that token"));
                    } else {
                        output::stdout_line(&format!("`{name}` was not locked"));
                    }
                }
                results.push(Unlocked { name, released });
            }
            Err(err) => {
                failure = Some(err);
                break;
            }
        }
    }
    client.shutdown().await;
    match failure {
        Some(mut failure) => {
            // With --json the error object carries what was done before it.
            failure.results = serde_json::to_value(&results).ok();
            Err(failure)
        }
        None => {
            if json {
                output::stdout_line(&output::json(&results));
            }
            Ok(exit::OK)
        }
    }
}

/// Force-releases `name` (read as `kind` when given; a token lock only while it holds `token`,
/// when given): whether it was held, by whom (for the message), and whether it was a token lock
/// (whose waiters no message tells).
async fn unlock_one(
    conn: &Connection,
    client: &ferrisson::Client,
    name: &str,
    kind: Option<Kind>,
    token: Option<&str>,
) -> Result<(bool, String, bool), Failure> {
    let cannot =
        |err: ferrisson::Error| Failure::from_lib(&format!("cannot unlock `{name}`"), &err, conn);
    // Who holds it, for the message, and whether it is a lock at all: `force_unlock` would
    // delete any hash, and any string is no token lock (a cached value is one too). The release
    // itself is one atomic script.
    let info = status::inspect(client, name, kind)
        .await
        .map_err(|err| Failure::from_lib(&status::cannot_read(name, kind), &err, conn))?;
    if let Some(what) = output::not_lockable(&info) {
        return Err(Failure::not_a_lock(name, &what, "left alone"));
    }
    // Each kind as its own primitive force-releases it, so that its waiters hear Redisson's
    // message where they listen: a fair lock's queue head on its own channel, a read-write
    // lock's waiters on `redisson_rwlock:{name}` with the side's message (0 read, 1 write).
    // Each script checks the kind again atomically: a lock that changed since `inspect` read it
    // is reported as not locked rather than released as the wrong kind.
    let released = match &info.kind {
        LockKind::Fair => client.fair_lock(name).force_unlock().await,
        LockKind::ReadWrite {
            mode: ReadWriteMode::Read,
        } => {
            client
                .read_write_lock(name)
                .read_lock()
                .force_unlock()
                .await
        }
        LockKind::ReadWrite {
            mode: ReadWriteMode::Write,
        } => {
            client
                .read_write_lock(name)
                .write_lock()
                .force_unlock()
                .await
        }
        LockKind::ReadWrite { mode } => {
            let what = format!("hash whose read-write mode is `{mode}`");
            return Err(Failure::not_a_lock(name, &what, "left alone"));
        }
        // The peers' single-key lock: a `DEL` of the string while it holds the token it was
        // read with (or the one given), announced to nobody (its waiters hear the deletion as a
        // keyspace event, or poll). A key that changed since it was read is left alone.
        LockKind::TokenLock => {
            let shown = match token {
                Some(token) => token,
                None => info
                    .holders
                    .first()
                    .map_or("", |holder| holder.field.as_str()),
            };
            client.token_lock(name).release_token(unescape(shown)).await
        }
        // Reentrant, spin, non-reentrant and fenced locks: one hash, released and announced
        // on `redisson_lock__channel:{name}` (a spin lock's waiters poll, and find it free).
        _ => client.lock(name).force_unlock().await,
    }
    .map_err(cannot)?;
    let token = info.kind == LockKind::TokenLock;
    Ok((released, output::holders_text(&info), token))
}

/// The bytes of a token as `status` shows it: as it is, but for `\\` (a backslash) and `\xNN`
/// (a byte that is not printable), which the library writes only in a token it escapes whole
/// (one with such a byte, or a backslash).
fn unescape(shown: &str) -> Vec<u8> {
    let bytes = shown.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'\\', Some(b'\\')) => {
                out.push(b'\\');
                i += 2;
            }
            (b'\\', Some(b'x')) => match shown
                .get(i + 2..i + 4)
                .map(|hex| u8::from_str_radix(hex, 16))
            {
                Some(Ok(byte)) => {
                    out.push(byte);
                    i += 4;
                }
                _ => {
                    out.push(b'\\');
                    i += 1;
                }
            },
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn a_shown_token_reads_back_as_its_bytes() {
        assert_eq!(unescape("6fd1c9a2"), b"6fd1c9a2");
        assert_eq!(unescape("\\x00a\\xff\\\\"), vec![0x00, b'a', 0xff, b'\\']);
        assert_eq!(unescape("\\xz1"), b"\\xz1");
    }
}
