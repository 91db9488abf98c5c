//! Text and JSON rendering shared by the subcommands.

use std::io::Write;
use std::time::{Duration, SystemTime};

use ferrisson::inspect::{LockInfo, LockKind};
use ferrisson::{PermitIdFormat, RemainingTtl, WokenBy};
use serde::Serialize;

/// Writes `line` and a newline to stderr in one `write` call, so that it does not interleave
/// with output of the command `run` runs, which shares the stream.
pub fn stderr_line(line: &str) {
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    let _ = std::io::stderr().lock().write_all(buf.as_bytes());
}

/// Writes `line` and a newline to stdout and flushes (stdout may be a pipe read live). Errors
/// (a closed pipe: `ferrisson status x | head -1`) are ignored rather than panicking.
pub fn stdout_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// `value` as one line of JSON.
pub fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|err| format!("{{\"error\":\"{err}\"}}"))
}

/// A duration for people: `812ms`, `29.8s`, `2m 05s`, `1h 02m`, `3d 04h`.
pub fn humane(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let tenths = ms / 100;
        format!("{}.{}s", tenths / 10, tenths % 10)
    } else if ms < 3_600_000 {
        let s = ms / 1_000;
        format!("{}m {:02}s", s / 60, s % 60)
    } else if ms < 86_400_000 {
        let m = ms / 60_000;
        format!("{}h {:02}m", m / 60, m % 60)
    } else {
        let h = ms / 3_600_000;
        format!("{}d {:02}h", h / 24, h % 24)
    }
}

/// The TTL column: humane time left, `no expiry`, or `-` for a free lock.
pub fn ttl_text(ttl: &RemainingTtl) -> String {
    match ttl {
        RemainingTtl::Expires(left) => humane(*left),
        RemainingTtl::NoExpiry => "no expiry".to_owned(),
        _ => "-".to_owned(),
    }
}

/// Milliseconds left, or `None` for a free lock or a key without expiry.
pub fn ttl_ms(ttl: &RemainingTtl) -> Option<u64> {
    match ttl {
        RemainingTtl::Expires(left) => Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
        _ => None,
    }
}

/// Milliseconds of a duration, saturating.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The kind in words: `-` (free), `reentrant`, `fair, 3 queued`, `read-write (read)`,
/// `fenced`, `semaphore`, `permit-semaphore`, `latch`, `semaphore or latch`,
/// `timestamp lock (SETNX/GETSET, unsupported)`, `token lock (SET NX PX)`, `not a lock (string)`.
pub fn kind_text(kind: &LockKind, queued: u64) -> String {
    match kind {
        LockKind::Free => "-".to_owned(),
        LockKind::Reentrant => "reentrant".to_owned(),
        LockKind::Fair => format!("fair, {queued} queued"),
        LockKind::ReadWrite { mode } => format!("read-write ({mode})"),
        LockKind::Other { redis_type } => format!("not a lock ({redis_type})"),
        LockKind::Fenced => "fenced".to_owned(),
        LockKind::Semaphore => "semaphore".to_owned(),
        LockKind::PermitSemaphore => "permit-semaphore".to_owned(),
        LockKind::CountDownLatch => "latch".to_owned(),
        LockKind::SemaphoreOrLatch => "semaphore or latch".to_owned(),
        LockKind::TimestampLock => "timestamp lock (SETNX/GETSET, unsupported)".to_owned(),
        LockKind::TokenLock => "token lock (SET NX PX)".to_owned(),
        _ => "unknown".to_owned(),
    }
}

/// The KIND column: [`kind_text`] with the value that matters for the kind: `fenced, token
/// 17`, `semaphore, 3 permits`, `permit-semaphore, 2 available, 3 out`, `latch, count 2`,
/// `semaphore or latch, value 3` (a missing counter reads as 0, as Redisson reads it).
pub fn kind_column(info: &LockInfo) -> String {
    let kind = kind_text(&info.kind, info.queued);
    let count = info.count.unwrap_or(0);
    match info.kind {
        LockKind::Fenced => match info.token {
            Some(token) => format!("{kind}, token {token}"),
            None => format!("{kind}, no token yet"),
        },
        LockKind::Semaphore => format!("{kind}, {count} {}", plural(count, "permit")),
        LockKind::PermitSemaphore => {
            format!("{kind}, {count} available, {} out", info.permits_out)
        }
        LockKind::CountDownLatch => format!("{kind}, count {count}"),
        LockKind::SemaphoreOrLatch => format!("{kind}, value {count}"),
        LockKind::TimestampLock => format!("{kind}, expiry {count} (epoch ms)"),
        _ => kind,
    }
}

fn plural(n: i64, word: &str) -> String {
    if n == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}

/// A kind as JSON fields: (`kind`, `mode`, `redis_type`). `kind` is null for a key that does
/// not exist (free or absent is its `state`), else one of the stable names that `status --help`
/// and the README list (checked by `tests::the_json_names_are_the_documented_ones`).
pub fn kind_parts(kind: &LockKind) -> (Option<&'static str>, Option<String>, Option<String>) {
    let hash = || Some("hash".to_owned());
    let string = || Some("string".to_owned());
    let (kind, mode, redis_type) = match kind {
        LockKind::Free => return (None, None, None),
        LockKind::Reentrant => ("reentrant", None, hash()),
        LockKind::Fair => ("fair", None, hash()),
        LockKind::ReadWrite { mode } => ("read_write", Some(mode.to_string()), hash()),
        LockKind::Other { redis_type } => ("not_a_lock", None, Some(redis_type.clone())),
        LockKind::Fenced => ("fenced", None, hash()),
        LockKind::Semaphore => ("semaphore", None, string()),
        LockKind::PermitSemaphore => ("permit_semaphore", None, string()),
        LockKind::CountDownLatch => ("latch", None, string()),
        LockKind::SemaphoreOrLatch => ("semaphore_or_latch", None, string()),
        LockKind::TimestampLock => ("timestamp_lock", None, string()),
        LockKind::TokenLock => ("token_lock", None, string()),
        _ => ("unknown", None, None),
    };
    (Some(kind), mode, redis_type)
}

/// `info` as this tool reports it: a hash whose fields are not holders (`<client>:<owner>`
/// with a positive hold count, besides a read-write lock's `mode`) is not a lock either, and
/// is reported as `LockKind::Other { redis_type: "hash" }` without holders.
pub fn classify(mut info: LockInfo) -> LockInfo {
    // `Client::inspect` reads a value that is not a number as hold count 0. A token lock's one
    // holder is its token, which is a peer's own format (no `:` but ferrisson's).
    let holders_ok = info.kind == LockKind::TokenLock
        || info
            .holders
            .iter()
            .all(|holder| holder.count > 0 && holder.field.contains(':'));
    if info.kind.is_lock() && !holders_ok {
        info.kind = LockKind::Other {
            redis_type: "hash".to_owned(),
        };
        info.holders.clear();
    }
    info
}

/// The Redis type of a key that is no primitive of the lock family, if it is not.
pub fn not_a_lock_type(info: &LockInfo) -> Option<&str> {
    match &info.kind {
        LockKind::Other { redis_type } => Some(redis_type),
        _ => None,
    }
}

/// A timestamp lock, in words: what it is and why ferrisson does not take it.
pub const TIMESTAMP_LOCK: &str = "timestamp lock of the SETNX/GETSET recipe (a string holding \
    an expiry in epoch ms by its writer's clock), which ferrisson does not support as it is \
    unsafe (docs/compatibility.md)";

/// What a key that `run` or `unlock` must not touch holds, if it is not a lock: its Redis
/// type, or the counter primitive it is.
pub fn not_lockable(info: &LockInfo) -> Option<String> {
    if let Some(redis_type) = not_a_lock_type(info) {
        // A string that is no counter and not positively a token lock (a cached value, say).
        return Some(match info.string_len {
            Some(len) => format!(
                "string of {len} {} without a lock token's shape and TTL (if it is a token lock, \
                 say so with --kind token)",
                plural(len as i64, "byte")
            ),
            None => redis_type.to_owned(),
        });
    }
    match info.kind {
        LockKind::SemaphoreOrLatch => Some("semaphore or count-down latch".to_owned()),
        LockKind::PermitSemaphore => Some("permit-expirable semaphore".to_owned()),
        LockKind::TimestampLock => Some(
            "SETNX/GETSET timestamp lock (not supported as unsafe: docs/compatibility.md)"
                .to_owned(),
        ),
        _ => None,
    }
}

/// `locked` or `free` for locks (and a key that does not exist), `present`
/// or `absent` for counters (semaphores, latches), `present` for a key that is no primitive of
/// the family (its `kind` says so).
pub fn state(info: &LockInfo) -> &'static str {
    match (&info.kind, info.is_locked()) {
        (LockKind::Other { .. } | LockKind::TimestampLock, _) => "present",
        (kind, true) if kind.is_counter() => "present",
        (kind, false) if kind.is_counter() => "absent",
        (_, true) => "locked",
        (_, false) => "free",
    }
}

/// `field=count, field=count`, or `-`.
pub fn holders_text(info: &LockInfo) -> String {
    if info.holders.is_empty() {
        return "-".to_owned();
    }
    info.holders
        .iter()
        .map(|holder| format!("{}={}", holder.field, holder.count))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `immediate`, `message`, `ttl`, `backoff` (a polling waiter's retry after its back-off
/// pause) or `keyspace` (a token lock's waiter woken by its key's deletion or expiry event).
pub fn woken_by(woken_by: WokenBy) -> &'static str {
    match woken_by {
        WokenBy::Immediate => "immediate",
        WokenBy::Message => "message",
        WokenBy::Ttl => "ttl",
        WokenBy::BackOff => "backoff",
        WokenBy::Keyspace => "keyspace",
        // `WokenBy` is non-exhaustive: a later library's reason is named as such, not guessed.
        _ => "unknown",
    }
}

/// Now, as RFC 3339 with milliseconds, UTC: `2024-05-01T12:00:00.123Z`.
pub fn timestamp() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// The time of day part of a [`timestamp`]: `12:00:00.123`.
pub fn time_of_day(timestamp: &str) -> &str {
    timestamp.get(11..23).unwrap_or(timestamp)
}

/// One holder in JSON.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct HolderJson {
    /// `<client uuid>:<owner id>`
    pub field: String,
    /// Hold count.
    pub count: i64,
    /// A read-write lock's read holder: each hold's timeout key, in hold order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_holds: Option<Vec<ReadHoldJson>>,
}

/// One read hold's timeout key `{name}:<field>:rwlock_timeout:<hold>` in JSON.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct ReadHoldJson {
    /// The hold number k (1-based).
    pub hold: usize,
    /// Whether its timeout key exists (a hold without one no longer keeps the lock).
    pub exists: bool,
    /// Time left, null when the key is gone or has no expiry.
    pub ttl_ms: Option<u64>,
}

/// A fair-lock waiter in JSON.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct WaiterJson {
    /// Its holder field.
    pub field: String,
    /// Deadline, epoch ms (null when the queue entry has none).
    pub deadline_ms: Option<i64>,
    /// Time left until the deadline (0 once passed), null without a deadline.
    pub remaining_ms: Option<u64>,
    /// The deadline has passed: the next fair-lock call removes it.
    pub stale: bool,
}

/// A permit out of a permit-expirable semaphore in JSON.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct PermitJson {
    /// The id in lowercase hex.
    pub id: String,
    /// `raw` (16 bytes, Redisson ≥ 3.17), `hex` (a hex string, 3.16) or `unknown`.
    pub id_format: &'static str,
    /// Expiry, epoch ms, null when it never expires.
    pub expires_ms: Option<i64>,
    /// Time left (0 once expired), null when it never expires.
    pub remaining_ms: Option<u64>,
    /// The expiry has passed: the next call on the semaphore reclaims it.
    pub expired: bool,
}

/// `raw`, `hex` or `unknown`.
pub fn id_format(format: Option<PermitIdFormat>) -> &'static str {
    match format {
        Some(PermitIdFormat::Raw) => "raw",
        Some(PermitIdFormat::Hex) => "hex",
        _ => "unknown",
    }
}

/// A primitive's state in JSON (`status --json`, `watch --json`).
#[derive(Serialize, Debug)]
pub struct LockJson {
    /// Name.
    pub name: String,
    /// `locked`, `free`, `present`, `absent`.
    pub state: &'static str,
    /// Whether the key is a lock that someone holds.
    pub locked: bool,
    /// `reentrant`, `fair`, `read_write`, `fenced`, `semaphore`, `permit_semaphore`, `latch`,
    /// `semaphore_or_latch`, `not_a_lock`; null for a key that does not exist.
    pub kind: Option<&'static str>,
    /// `read` / `write` for a read-write lock.
    pub mode: Option<String>,
    /// The Redis type of the key (`hash` for locks), null when free.
    pub redis_type: Option<String>,
    /// Time left, null when free or without expiry.
    pub ttl_ms: Option<u64>,
    /// Holder fields and counts.
    pub holders: Vec<HolderJson>,
    /// Waiters in a fair lock's queue.
    pub queued: u64,
    /// The first waiters of a fair lock's queue, in order.
    pub waiters: Vec<WaiterJson>,
    /// A fenced lock's last token, null when there is none.
    pub token: Option<i64>,
    /// A counter's value (available permits, latch count), null when absent or not a counter.
    pub count: Option<i64>,
    /// Permits out of a permit-expirable semaphore.
    pub permits_out: u64,
    /// The first permits out, soonest expiry first.
    pub permits: Vec<PermitJson>,
    /// The length in bytes of a string value; left out for other types.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub string_len: Option<u64>,
    /// `status`: the waiters that ferrisson clients with deadlock detection on recorded for
    /// this name, oldest first; null when they could not be read (an ACL user without `SCAN`).
    #[serde(skip_serializing_if = "Recorded::is_absent")]
    pub recorded_waiters: Recorded,
}

/// [`LockJson::recorded_waiters`]: absent (not asked, `watch`), unreadable (null), or the list.
#[derive(Serialize, Debug, Default)]
#[serde(untagged)]
pub enum Recorded {
    /// Not asked for: the field is left out.
    #[default]
    Absent,
    /// Asked for but not readable: null.
    Unreadable(()),
    /// The recorded waiters.
    Waiters(Vec<RecordedWaiterJson>),
}

impl Recorded {
    fn is_absent(&self) -> bool {
        matches!(self, Recorded::Absent)
    }
}

/// A wait recorded by a ferrisson client with deadlock detection on, in JSON.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct RecordedWaiterJson {
    /// The waiting owner, `<client uuid>:<owner id>`.
    pub owner: String,
    /// How long it has waited (by its clock's start and this machine's clock).
    pub waited_ms: u64,
    /// When the wait started, epoch ms of the waiting client's clock.
    pub since_ms: u64,
    /// The wait's id within its client.
    pub wait_id: u64,
}

impl RecordedWaiterJson {
    /// The JSON view of `step`.
    pub fn new(step: &ferrisson::WaitStep) -> RecordedWaiterJson {
        RecordedWaiterJson {
            owner: step.owner.clone(),
            waited_ms: millis(step.waited),
            since_ms: step.since_ms,
            wait_id: step.wait_id,
        }
    }
}

impl LockJson {
    /// The JSON view of `info`.
    pub fn new(info: &LockInfo) -> LockJson {
        let (kind, mode, mut redis_type) = kind_parts(&info.kind);
        if !info.is_locked() {
            // Missing, known only by its auxiliary keys or --kind: no type to tell.
            redis_type = None;
        }
        let read_write = matches!(info.kind, LockKind::ReadWrite { .. });
        let holders = info
            .holders
            .iter()
            .map(|holder| HolderJson {
                field: holder.field.clone(),
                count: holder.count,
                read_holds: (read_write && !holder.field.ends_with(":write")).then(|| {
                    holder
                        .read_holds
                        .iter()
                        .enumerate()
                        .map(|(i, ttl)| ReadHoldJson {
                            hold: i + 1,
                            exists: *ttl != RemainingTtl::NotLocked,
                            ttl_ms: ttl_ms(ttl),
                        })
                        .collect()
                }),
            })
            .collect();
        LockJson {
            name: info.name.clone(),
            state: state(info),
            locked: state(info) == "locked",
            kind,
            mode,
            redis_type,
            ttl_ms: ttl_ms(&info.ttl),
            holders,
            queued: info.queued,
            waiters: info
                .waiters
                .iter()
                .map(|waiter| WaiterJson {
                    field: waiter.field.clone(),
                    deadline_ms: waiter.deadline_ms,
                    remaining_ms: waiter.remaining.map(millis),
                    stale: waiter.stale,
                })
                .collect(),
            token: info.token,
            count: info.count.filter(|_| info.kind.is_counter()),
            permits_out: info.permits_out,
            permits: info
                .permits
                .iter()
                .map(|permit| PermitJson {
                    id: permit.id.clone(),
                    id_format: id_format(permit.id_format),
                    expires_ms: permit.expires_ms,
                    remaining_ms: permit.remaining.map(millis),
                    expired: permit.expired,
                })
                .collect(),
            string_len: info.string_len,
            recorded_waiters: Recorded::Absent,
        }
    }
}

/// Renders rows as left-aligned columns separated by two spaces (the last column unpadded).
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                let pad = widths[i] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `kind` of the JSON output, a stable interface (README, "JSON output"): snake_case, as
    /// the error kinds are.
    const KINDS: [&str; 12] = [
        "reentrant",
        "fair",
        "read_write",
        "fenced",
        "semaphore",
        "permit_semaphore",
        "latch",
        "semaphore_or_latch",
        "timestamp_lock",
        "token_lock",
        "not_a_lock",
        "unknown",
    ];

    /// Every `state` of the JSON output, stable as `KINDS`.
    const STATES: [&str; 4] = ["locked", "free", "present", "absent"];

    #[test]
    fn the_json_names_are_the_documented_ones() {
        use ferrisson::inspect::LockKind;
        let kinds = [
            LockKind::Reentrant,
            LockKind::Fair,
            LockKind::ReadWrite {
                mode: ferrisson::inspect::ReadWriteMode::Read,
            },
            LockKind::Fenced,
            LockKind::Semaphore,
            LockKind::PermitSemaphore,
            LockKind::CountDownLatch,
            LockKind::SemaphoreOrLatch,
            LockKind::TimestampLock,
            LockKind::TokenLock,
            LockKind::Other {
                redis_type: "list".to_owned(),
            },
        ];
        assert_eq!(
            kind_parts(&LockKind::Free).0,
            None,
            "a missing key has no kind"
        );
        for kind in &kinds {
            let name = kind_parts(kind).0.expect("a kind");
            assert!(KINDS.contains(&name), "{name} is not documented");
        }
        let help = crate::args::STATUS_HELP;
        let readme = include_str!("../../../README.md");
        for name in KINDS.iter().chain(STATES.iter()) {
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name} is not snake_case"
            );
            let quoted = format!("\"{name}\"");
            assert!(help.contains(&quoted), "status --help lacks {quoted}");
            assert!(
                readme.contains(&format!("`{name}`")),
                "the README lacks `{name}`"
            );
        }
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(humane(Duration::from_millis(812)), "812ms");
        assert_eq!(humane(Duration::from_millis(29_849)), "29.8s");
        assert_eq!(humane(Duration::from_millis(59_999)), "59.9s");
        assert_eq!(humane(Duration::from_secs(125)), "2m 05s");
        assert_eq!(humane(Duration::from_secs(3_720)), "1h 02m");
        assert_eq!(
            humane(Duration::from_secs(3 * 86_400 + 4 * 3_600)),
            "3d 04h"
        );
    }

    #[test]
    fn every_wake_reason_has_its_name() {
        assert_eq!(woken_by(WokenBy::Immediate), "immediate");
        assert_eq!(woken_by(WokenBy::Message), "message");
        assert_eq!(woken_by(WokenBy::Ttl), "ttl");
        assert_eq!(woken_by(WokenBy::BackOff), "backoff");
        assert_eq!(woken_by(WokenBy::Keyspace), "keyspace");
    }

    #[test]
    fn tables_align_columns() {
        let rows = vec![
            vec!["NAME".to_owned(), "STATE".to_owned(), "X".to_owned()],
            vec!["a-long-name".to_owned(), "free".to_owned(), "-".to_owned()],
        ];
        assert_eq!(
            table(&rows),
            "NAME         STATE  X\na-long-name  free   -\n"
        );
    }

    #[test]
    fn timestamps_have_a_time_of_day() {
        let ts = "2024-05-01T12:00:00.123Z";
        assert_eq!(time_of_day(ts), "12:00:00.123");
        assert_eq!(timestamp().len(), ts.len());
    }
}
