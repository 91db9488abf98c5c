//! `ferrisson watch NAME`: a live view of one lock: `Client::inspect` at every message heard
//! on the lock (`listen.rs`: keyspace events, else the release channels) and at a fixed
//! interval, each read compared with the last.

use std::collections::BTreeMap;
use std::time::Duration;

use ferrisson::inspect::{LockInfo, LockKind};
use ferrisson::RemainingTtl;
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::{Instant, MissedTickBehavior};

use crate::args::{Connection, WatchArgs};
use crate::error::not_a_lock;
use crate::listen::{Heard, Listener, Source};
use crate::output::{self, humane, LockJson};
use crate::{connect, exit, Failure, Outcome};

/// One observed change of the lock.
#[derive(Serialize, Debug)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Change {
    /// The state when watching starts.
    State {
        #[serde(flatten)]
        lock: LockJson,
    },
    Acquired {
        name: String,
        field: String,
        count: i64,
        ttl_ms: Option<u64>,
    },
    Reentered {
        name: String,
        field: String,
        count: i64,
    },
    PartiallyReleased {
        name: String,
        field: String,
        count: i64,
    },
    HolderChanged {
        name: String,
        from: String,
        to: String,
        count: i64,
    },
    Released {
        name: String,
        field: String,
    },
    /// Gone, and its last seen TTL had run out by the time it was found gone (or the server
    /// said it expired).
    Expired {
        name: String,
        field: String,
    },
    /// Deleted by a force unlock (or a plain `DEL`) while held: told by keyspace events only.
    ForceUnlocked {
        name: String,
        field: String,
    },
    /// A release was heard that no read saw: a hold began and ended between two reads.
    HeldBetweenReads {
        name: String,
        /// Whether the lock was held at both reads (released and taken again meanwhile).
        locked: bool,
    },
    Renewed {
        name: String,
        ttl_ms: u64,
        previous_ttl_ms: u64,
    },
    KindChanged {
        name: String,
        #[serde(skip)]
        text: String,
        kind: Option<&'static str>,
        mode: Option<String>,
        redis_type: Option<String>,
    },
    Queued {
        name: String,
        queued: u64,
    },
    /// A counter's value (permits available, latch count) changed.
    CountChanged {
        name: String,
        count: Option<i64>,
        previous: Option<i64>,
    },
    /// A fenced lock's token advanced (an acquisition or re-entry).
    TokenChanged {
        name: String,
        token: Option<i64>,
    },
    /// Permits out of a permit-expirable semaphore.
    PermitsOut {
        name: String,
        permits_out: u64,
    },
    Unavailable {
        name: String,
        error: String,
    },
    Reconnected {
        name: String,
    },
}

impl Change {
    /// The human line (without the timestamp).
    fn text(&self) -> String {
        match self {
            Change::State { lock } => state_text(lock),
            Change::Acquired {
                field,
                count,
                ttl_ms,
                ..
            } => {
                let ttl = match ttl_ms {
                    Some(ms) => format!("TTL {}", humane(Duration::from_millis(*ms))),
                    None => "no expiry".to_owned(),
                };
                format!("acquired by {field} (hold count {count}), {ttl}")
            }
            Change::Reentered { field, count, .. } => {
                format!("re-entered by {field} (hold count {count})")
            }
            Change::PartiallyReleased { field, count, .. } => {
                format!("partially released by {field} (hold count {count})")
            }
            Change::HolderChanged {
                from, to, count, ..
            } => format!("holder changed: {from} → {to} (hold count {count})"),
            Change::Released { field, .. } => format!("released by {field}"),
            Change::Expired { field, .. } => format!("expired: the lease of {field} ran out"),
            Change::ForceUnlocked { field, .. } => {
                format!("force-unlocked (deleted while {field} held it)")
            }
            Change::HeldBetweenReads { locked: false, .. } => {
                "acquired and released between two reads (holder not seen)".to_owned()
            }
            Change::HeldBetweenReads { locked: true, .. } => {
                "released and acquired again between two reads".to_owned()
            }
            Change::Renewed {
                ttl_ms,
                previous_ttl_ms,
                ..
            } => format!(
                "TTL renewed: {} → {}",
                humane(Duration::from_millis(*previous_ttl_ms)),
                humane(Duration::from_millis(*ttl_ms))
            ),
            Change::KindChanged { text, .. } => text.clone(),
            Change::Queued { queued, .. } => match queued {
                0 => "no waiters queued".to_owned(),
                1 => "1 waiter queued".to_owned(),
                n => format!("{n} waiters queued"),
            },
            Change::CountChanged {
                count, previous, ..
            } => {
                let shown = |count: &Option<i64>| match count {
                    Some(count) => count.to_string(),
                    None => "absent".to_owned(),
                };
                format!("count {} → {}", shown(previous), shown(count))
            }
            Change::TokenChanged { token, .. } => match token {
                Some(token) => format!("token now {token}"),
                None => "token deleted".to_owned(),
            },
            Change::PermitsOut { permits_out, .. } => format!("{permits_out} permits out"),
            Change::Unavailable { error, .. } => format!("Redis unavailable ({error}); retrying"),
            Change::Reconnected { .. } => "Redis reachable again".to_owned(),
        }
    }
}

fn state_text(lock: &LockJson) -> String {
    let Some(kind) = lock.kind else {
        return "free".to_owned();
    };
    // The JSON's snake_case kind, in the words of the text output (`read-write`).
    let word = kind.replace('_', "-");
    if lock.redis_type.as_deref() == Some("string") && kind != "not_a_lock" {
        let ttl = match lock.ttl_ms {
            Some(ms) => format!("TTL {}", humane(Duration::from_millis(ms))),
            None if lock.state == "absent" => "absent".to_owned(),
            None => "no expiry".to_owned(),
        };
        let count = lock.count.unwrap_or(0);
        let permits = match kind {
            "permit_semaphore" => format!(", {} permits out", lock.permits_out),
            _ => String::new(),
        };
        return format!("{word}, count {count}{permits} ({ttl})");
    }
    let ttl = match lock.ttl_ms {
        Some(ms) => format!("TTL {}", humane(Duration::from_millis(ms))),
        None => "no expiry".to_owned(),
    };
    let kind = match (kind, &lock.mode, &lock.redis_type) {
        ("read_write", Some(mode), _) => format!("read-write lock in {mode} mode"),
        ("not_a_lock", _, Some(redis_type)) => {
            return format!("{}, {ttl}", not_a_lock(&lock.name, redis_type))
        }
        _ => format!("{word} lock"),
    };
    let holders = lock
        .holders
        .iter()
        .map(|h| format!("{} (hold count {})", h.field, h.count))
        .collect::<Vec<_>>()
        .join(", ");
    let mut queued = if lock.queued > 0 {
        format!(", {} queued", lock.queued)
    } else {
        String::new()
    };
    if let Some(token) = lock.token {
        queued.push_str(&format!(", token {token}"));
    }
    if lock.state == "free" {
        return format!("free ({word}{queued})");
    }
    if holders.is_empty() {
        format!("locked ({kind}, {ttl}{queued})")
    } else {
        format!("locked by {holders} ({kind}, {ttl}{queued})")
    }
}

/// What `diff` compares: the parts of a [`LockInfo`] that changes are read from.
#[derive(Clone, Debug)]
struct Snapshot {
    name: String,
    kind: LockKind,
    holders: Vec<(String, i64)>,
    ttl: RemainingTtl,
    queued: u64,
    count: Option<i64>,
    token: Option<i64>,
    permits_out: u64,
}

impl From<&LockInfo> for Snapshot {
    fn from(info: &LockInfo) -> Snapshot {
        Snapshot {
            name: info.name.clone(),
            kind: info.kind.clone(),
            holders: info
                .holders
                .iter()
                .map(|h| (h.field.clone(), h.count))
                .collect(),
            ttl: info.ttl,
            queued: info.queued,
            count: info.count,
            token: info.token,
            permits_out: info.permits_out,
        }
    }
}

impl Snapshot {
    fn is_locked(&self) -> bool {
        self.ttl != RemainingTtl::NotLocked
    }

    /// A lock kind ferrisson or Redisson writes holders into.
    fn is_lock(&self) -> bool {
        self.kind.is_lock()
    }
}

fn kind_changed(cur: &Snapshot) -> Change {
    let (kind, mode, redis_type) = output::kind_parts(&cur.kind);
    let text = match &cur.kind {
        LockKind::Free => "deleted: now free".to_owned(),
        other => format!("now {}", output::kind_text(other, cur.queued)),
    };
    Change::KindChanged {
        name: cur.name.clone(),
        text,
        kind,
        mode,
        redis_type,
    }
}

/// The changes between two snapshots; `elapsed` is the time between them, `heard` what the
/// listener heard since the first was read (`last_event`: the keyspace event heard before).
fn diff(
    prev: &Snapshot,
    cur: &Snapshot,
    elapsed: Duration,
    heard: &Heard,
    last_event: Option<&str>,
) -> Vec<Change> {
    let name = || cur.name.clone();
    let mut changes = Vec::new();
    let is_locked = cur.is_locked();

    // Kind changes that holder events do not tell: a read-write lock switching mode, a key of
    // another type appearing or going away. (A lock becoming fair shows as waiters queued.)
    let acquired_or_released =
        (prev.is_lock() && !is_locked) || (!prev.is_locked() && cur.is_lock());
    let plain_or_fair = |s: &Snapshot| matches!(s.kind, LockKind::Reentrant | LockKind::Fair);
    if prev.kind != cur.kind
        && !acquired_or_released
        && !(plain_or_fair(prev) && plain_or_fair(cur))
    {
        changes.push(kind_changed(cur));
    }

    let before: BTreeMap<&str, i64> = prev.holders.iter().map(|(f, c)| (f.as_str(), *c)).collect();
    let after: BTreeMap<&str, i64> = cur.holders.iter().map(|(f, c)| (f.as_str(), *c)).collect();
    let removed: Vec<&str> = before
        .keys()
        .filter(|f| !after.contains_key(*f))
        .copied()
        .collect();
    let added: Vec<(&str, i64)> = after
        .iter()
        .filter(|(f, _)| !before.contains_key(*f))
        .map(|(f, c)| (*f, *c))
        .collect();
    let holders_changed = !removed.is_empty() || !added.is_empty();

    if let ([from], [(to, count)]) = (removed.as_slice(), added.as_slice()) {
        changes.push(Change::HolderChanged {
            name: name(),
            from: (*from).to_owned(),
            to: (*to).to_owned(),
            count: *count,
        });
    } else {
        let ran_out = heard.expired()
            || match prev.ttl {
                RemainingTtl::Expires(left) => elapsed >= left,
                _ => false,
            };
        // A token lock's release is a bare `DEL` too: only a hash lock tells the two apart.
        let forced =
            !is_locked && prev.kind != LockKind::TokenLock && heard.deleted_by_force(last_event);
        for field in &removed {
            let field = (*field).to_owned();
            changes.push(if forced {
                Change::ForceUnlocked {
                    name: name(),
                    field,
                }
            } else if !is_locked && ran_out {
                Change::Expired {
                    name: name(),
                    field,
                }
            } else {
                Change::Released {
                    name: name(),
                    field,
                }
            });
        }
        for (field, count) in &added {
            changes.push(Change::Acquired {
                name: name(),
                field: (*field).to_owned(),
                count: *count,
                ttl_ms: output::ttl_ms(&cur.ttl),
            });
        }
    }

    let mut counts_changed = false;
    for (field, count) in &after {
        let Some(old) = before.get(field) else {
            continue;
        };
        let (field, count) = ((*field).to_owned(), *count);
        if count > *old {
            counts_changed = true;
            changes.push(Change::Reentered {
                name: name(),
                field,
                count,
            });
        } else if count < *old {
            counts_changed = true;
            changes.push(Change::PartiallyReleased {
                name: name(),
                field,
                count,
            });
        }
    }

    // Without a write the TTL only goes down; a higher one was set again (a renewal).
    if !holders_changed && !counts_changed {
        if let (RemainingTtl::Expires(old), RemainingTtl::Expires(new)) = (&prev.ttl, &cur.ttl) {
            if new > old {
                changes.push(Change::Renewed {
                    name: name(),
                    ttl_ms: output::millis(*new),
                    previous_ttl_ms: output::millis(*old),
                });
            }
        }
    }

    if prev.queued != cur.queued {
        changes.push(Change::Queued {
            name: name(),
            queued: cur.queued,
        });
    }
    if prev.count != cur.count {
        changes.push(Change::CountChanged {
            name: name(),
            count: cur.count,
            previous: prev.count,
        });
    }
    if prev.token != cur.token {
        changes.push(Change::TokenChanged {
            name: name(),
            token: cur.token,
        });
    }
    if prev.permits_out != cur.permits_out {
        changes.push(Change::PermitsOut {
            name: name(),
            permits_out: cur.permits_out,
        });
    }
    changes
}

#[derive(Serialize)]
struct Line<'a> {
    ts: &'a str,
    #[serde(flatten)]
    change: &'a Change,
}

fn print(json: bool, change: &Change) {
    let ts = output::timestamp();
    if json {
        output::stdout_line(&output::json(&Line { ts: &ts, change }));
    } else {
        output::stdout_line(&format!("{}  {}", output::time_of_day(&ts), change.text()));
    }
}

/// How long a read that found the key gone waits for the keyspace event telling how: it was
/// sent before the read was answered, so it is normally in already or within a round trip.
const END_EVENT_WAIT: Duration = Duration::from_millis(200);

/// Releases heard against releases seen: a release heard that no read showed was a hold that
/// began and ended between two reads. A message may arrive after the read that showed its
/// release already (it travels on another connection), so a release seen first is owed one.
#[derive(Default)]
struct Unseen {
    balance: i64,
}

impl Unseen {
    /// `heard` releases since the last read (`None`: messages were lost, so nothing is
    /// claimed), `seen` in this read's changes. Whether one was heard that no read showed.
    fn settle(&mut self, heard: Option<u32>, seen: u32) -> bool {
        let Some(heard) = heard else {
            self.balance = 0;
            return false;
        };
        // Owed at most two: a release whose message never comes (the subscription was being
        // made again) must not hide later ones for long.
        self.balance = (self.balance + i64::from(heard) - i64::from(seen)).max(-2);
        let unseen = self.balance > 0;
        if unseen {
            self.balance = 0;
        }
        unseen
    }
}

/// The releases a read's changes show: the lock went from held to gone, or changed holders.
fn releases_seen(changes: &[Change]) -> u32 {
    let gone = changes.iter().any(|c| {
        matches!(
            c,
            Change::Released { .. } | Change::Expired { .. } | Change::ForceUnlocked { .. }
        )
    });
    let handed = changes
        .iter()
        .any(|c| matches!(c, Change::HolderChanged { .. }));
    u32::from(gone || handed)
}

/// Reads the lock at every message heard and every `--interval`, and prints its changes
/// until interrupted or `--for` elapses.
pub async fn watch(conn: &Connection, json: bool, args: WatchArgs) -> Outcome {
    let mut interrupt = signal(SignalKind::interrupt()).map_err(Failure::signals)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(Failure::signals)?;
    let config = conn.config()?;
    let client = connect(conn, config.clone()).await?;
    let name = args.name.as_str();
    let mut listener = match Listener::start(&config, name).await {
        Ok(listener) => Some(listener),
        Err(err) => {
            output::stderr_line(&format!(
                "ferrisson: warning: cannot subscribe for `{name}` ({}); reading it every {} \
                 only: a hold shorter than that may go unseen",
                conn.redact(&err),
                humane(args.interval)
            ));
            None
        }
    };
    if !json {
        let until = match args.duration {
            Some(d) => format!("for {}", humane(d)),
            None => "until interrupted".to_owned(),
        };
        let hearing = match &listener {
            Some(listener) if listener.source == Source::Keyspace => "at each keyspace event and ",
            Some(_) => "at each release message and ",
            None => "",
        };
        output::stderr_line(&format!(
            "ferrisson: watching `{name}` on {}, reading it {hearing}every {}, {until} (times \
             are UTC)",
            conn.redacted_url(),
            humane(args.interval)
        ));
        if let Some(why) = listener
            .as_ref()
            .and_then(|l| l.why_not_keyspace.as_deref())
        {
            output::stderr_line(&format!(
                "ferrisson: note: without keyspace events ({why}), a force unlock reads as a \
                 release, and a hold between two reads shows by its release only"
            ));
        }
    }

    let deadline = args.duration.map(|d| Instant::now() + d);
    let until_deadline = async {
        match deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(until_deadline);
    let mut ticker = tokio::time::interval(args.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last: Option<(Snapshot, Instant)> = None;
    let mut last_event: Option<String> = None;
    let mut unseen = Unseen::default();
    let mut unavailable = false;

    let outcome = loop {
        let heard_something = async {
            match listener.as_mut() {
                Some(listener) => listener.recv().await,
                None => std::future::pending().await,
            }
        };
        let woken = tokio::select! {
            _ = ticker.tick() => false,
            () = heard_something => true,
            _ = interrupt.recv() => break Ok(exit::OK),
            _ = terminate.recv() => break Ok(exit::OK),
            () = &mut until_deadline => break Ok(exit::OK),
        };
        if woken {
            // The rest of a step's burst (a release's decrement and delete are two events) is
            // usually in by then; what is not is read with the next message.
            tokio::task::yield_now().await;
        }
        let mut heard = listener.as_mut().map(Listener::drain).unwrap_or_default();
        let polled = tokio::select! {
            polled = crate::status::inspect(&client, name, args.kind) => polled,
            _ = interrupt.recv() => break Ok(exit::OK),
            _ = terminate.recv() => break Ok(exit::OK),
            () = &mut until_deadline => break Ok(exit::OK),
        };
        match polled {
            Ok(info) => {
                let cur = Snapshot::from(&info);
                if let (Some(listener), Some((prev, _))) = (listener.as_mut(), &last) {
                    if !prev.holders.is_empty() && !cur.is_locked() {
                        listener.await_end(&mut heard, END_EVENT_WAIT).await;
                    }
                }
                let now = Instant::now();
                if unavailable {
                    unavailable = false;
                    print(
                        json,
                        &Change::Reconnected {
                            name: name.to_owned(),
                        },
                    );
                }
                let changes = match &last {
                    None => vec![Change::State {
                        lock: LockJson::new(&info),
                    }],
                    Some((prev, at)) => {
                        let mut changes =
                            diff(prev, &cur, now - *at, &heard, last_event.as_deref());
                        // Releases are counted for the lock kinds (a semaphore's channel
                        // carries every release of a permit).
                        let lockish = |s: &Snapshot| s.is_lock() || s.kind == LockKind::Free;
                        if lockish(prev)
                            && lockish(&cur)
                            && unseen.settle(heard.releases(), releases_seen(&changes))
                        {
                            changes.push(Change::HeldBetweenReads {
                                name: name.to_owned(),
                                locked: cur.is_locked(),
                            });
                        }
                        changes
                    }
                };
                for change in &changes {
                    print(json, change);
                }
                if let Some(event) = heard.events.last() {
                    last_event = Some(event.clone());
                }
                last = Some((cur, now));
            }
            Err(err) if err.is_transient() => {
                if !unavailable {
                    unavailable = true;
                    print(
                        json,
                        &Change::Unavailable {
                            name: name.to_owned(),
                            error: crate::error::describe(&err, conn),
                        },
                    );
                }
            }
            Err(err) => {
                break Err(Failure::from_lib(
                    &crate::status::cannot_read(name, args.kind),
                    &err,
                    conn,
                ))
            }
        }
    };
    if let Some(listener) = listener {
        listener.stop().await;
    }
    client.shutdown().await;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(kind: LockKind, holders: &[(&str, i64)], ttl_ms: Option<u64>) -> Snapshot {
        Snapshot {
            name: "x".to_owned(),
            ttl: match (&kind, ttl_ms) {
                (LockKind::Free, _) => RemainingTtl::NotLocked,
                (_, Some(ms)) => RemainingTtl::Expires(Duration::from_millis(ms)),
                (_, None) => RemainingTtl::NoExpiry,
            },
            kind,
            holders: holders.iter().map(|(f, c)| ((*f).to_owned(), *c)).collect(),
            queued: 0,
            count: None,
            token: None,
            permits_out: 0,
        }
    }

    fn texts(prev: &Snapshot, cur: &Snapshot, elapsed_ms: u64) -> Vec<String> {
        diff(
            prev,
            cur,
            Duration::from_millis(elapsed_ms),
            &Heard::default(),
            None,
        )
        .iter()
        .map(Change::text)
        .collect()
    }

    #[test]
    fn acquisitions_reentries_and_releases_are_told_apart() {
        let free = snap(LockKind::Free, &[], None);
        let once = snap(LockKind::Reentrant, &[("a:1", 1)], Some(30_000));
        let twice = snap(LockKind::Reentrant, &[("a:1", 2)], Some(30_000));
        assert_eq!(
            texts(&free, &once, 100),
            ["acquired by a:1 (hold count 1), TTL 30.0s"]
        );
        assert_eq!(
            texts(&once, &twice, 100),
            ["re-entered by a:1 (hold count 2)"]
        );
        assert_eq!(
            texts(&twice, &once, 100),
            ["partially released by a:1 (hold count 1)"]
        );
        assert_eq!(texts(&once, &free, 100), ["released by a:1"]);
        assert_eq!(
            texts(&once, &free, 30_000),
            ["expired: the lease of a:1 ran out"]
        );
        assert!(texts(&once, &once, 100).is_empty());
    }

    #[test]
    fn a_new_holder_between_polls_is_a_holder_change() {
        let a = snap(LockKind::Reentrant, &[("a:1", 1)], Some(1_000));
        let b = snap(LockKind::Reentrant, &[("b:7", 1)], Some(30_000));
        assert_eq!(
            texts(&a, &b, 100),
            ["holder changed: a:1 → b:7 (hold count 1)"]
        );
    }

    #[test]
    fn a_longer_ttl_is_a_renewal() {
        let before = snap(LockKind::Reentrant, &[("a:1", 1)], Some(20_000));
        let after = snap(LockKind::Reentrant, &[("a:1", 1)], Some(30_000));
        assert_eq!(texts(&before, &after, 100), ["TTL renewed: 20.0s → 30.0s"]);
        assert!(texts(&after, &before, 100).is_empty());
    }

    #[test]
    fn kind_changes_and_queues_are_reported() {
        let read = snap(
            LockKind::ReadWrite {
                mode: ferrisson::inspect::ReadWriteMode::Read,
            },
            &[("a:1", 1)],
            Some(1_000),
        );
        let write = snap(
            LockKind::ReadWrite {
                mode: ferrisson::inspect::ReadWriteMode::Write,
            },
            &[("a:1", 1)],
            Some(1_000),
        );
        assert_eq!(texts(&read, &write, 10), ["now read-write (write)"]);
        let string = snap(
            LockKind::Other {
                redis_type: "string".into(),
            },
            &[],
            None,
        );
        let free = snap(LockKind::Free, &[], None);
        assert_eq!(texts(&free, &string, 10), ["now not a lock (string)"]);
        assert_eq!(texts(&string, &free, 10), ["deleted: now free"]);
        let mut fair = snap(LockKind::Fair, &[("a:1", 1)], Some(800));
        fair.queued = 2;
        let plain = snap(LockKind::Reentrant, &[("a:1", 1)], Some(900));
        assert_eq!(texts(&plain, &fair, 10), ["2 waiters queued"]);
    }
}
