//! Keyspace notifications, for the waiters of a lock whose other holders publish nothing on
//! release (the token lock's peers: redis-py, redsync, node `redlock`, rslock). Where the server
//! sends a key's `del` and `expired` events, such a waiter parks on the key's keyspace channel
//! `__keyspace@<db>__:<name>` (through [`PubSub`](super::pubsub::PubSub), which reads fred's
//! keyspace event stream); elsewhere it polls.
//!
//! Whether the server sends them is its `notify-keyspace-events` setting, read with
//! `CONFIG GET` at most every [`RECHECK`]; ferrisson changes it only when
//! [`KeyspaceEvents::Enable`] asks it to. In a cluster a key's events come only from the node
//! that holds it, while the subscriber listens on one node: waiters poll there.

use std::time::Duration;

use fred::interfaces::ClientLike;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::config::KeyspaceEvents;

/// How long a reading of `notify-keyspace-events` is trusted.
pub(crate) const RECHECK: Duration = Duration::from_secs(10);

/// The prefix of every keyspace channel, which is never subscribed to sharded.
pub(crate) const CHANNEL_PREFIX: &str = "__keyspace@";

/// A client's view of the server's keyspace notifications.
pub(crate) struct Keyspace {
    db: u8,
    /// Never usable: [`KeyspaceEvents::Ignore`], or a cluster.
    off: bool,
    /// The last reading, and when it was taken.
    reading: Mutex<Option<(Instant, bool)>>,
}

impl Keyspace {
    pub(crate) fn new(setting: KeyspaceEvents, db: u8, clustered: bool) -> Keyspace {
        Keyspace {
            db,
            off: clustered || setting == KeyspaceEvents::Ignore,
            reading: Mutex::new(None),
        }
    }

    /// The database whose keyspace channels the waiters listen on.
    pub(crate) fn db(&self) -> u8 {
        self.db
    }

    /// Whether waiters may count on a key's `del` and `expired` events: the last reading of
    /// `notify-keyspace-events` when it is fresh, else a new one. A refused or failed reading
    /// counts as "no" (the waiters poll) until the next one.
    pub(crate) async fn usable(&self, pool: &fred::clients::Pool) -> bool {
        if self.off {
            return false;
        }
        if let Some((at, usable)) = *self.reading.lock() {
            if at.elapsed() < RECHECK {
                return usable;
            }
        }
        let usable = match read_flags(pool).await {
            Ok(flags) => sends_releases(&flags),
            Err(err) => {
                tracing::debug!(error = %err, "CONFIG GET notify-keyspace-events failed; polling");
                false
            }
        };
        *self.reading.lock() = Some((Instant::now(), usable));
        usable
    }
}

/// The keyspace channel of the key `name` in database `db`.
pub(crate) fn channel(db: u8, name: &str) -> String {
    format!("{CHANNEL_PREFIX}{db}__:{name}")
}

/// Whether `flags` (a `notify-keyspace-events` value) make the server send the keyspace events
/// of a key's deletion and expiry: `K` with `A` (every class) or with both `g` and `x`.
pub(crate) fn sends_releases(flags: &str) -> bool {
    flags.contains('K') && (flags.contains('A') || (flags.contains('g') && flags.contains('x')))
}

/// `flags` with what [`sends_releases`] needs added, keeping every class already on; `None` when
/// nothing is missing.
pub(crate) fn with_releases(flags: &str) -> Option<String> {
    if sends_releases(flags) {
        return None;
    }
    let mut wanted = flags.to_owned();
    for class in ['K', 'g', 'x'] {
        // `A` stands for every class but `K` and `E`.
        let covered = wanted.contains(class) || (class != 'K' && wanted.contains('A'));
        if !covered {
            wanted.push(class);
        }
    }
    Some(wanted)
}

/// The server's `notify-keyspace-events`.
async fn read_flags(pool: &fred::clients::Pool) -> Result<String, fred::error::Error> {
    let pair: Vec<String> = pool
        .next()
        .custom(fred::cmd!("CONFIG"), vec!["GET", "notify-keyspace-events"])
        .await?;
    match pair.as_slice() {
        [_, flags] => Ok(flags.clone()),
        _ => Err(fred::error::Error::new(
            fred::error::ErrorKind::Protocol,
            "CONFIG GET notify-keyspace-events: no value",
        )),
    }
}

/// For [`KeyspaceEvents::Enable`], at connect: adds what is missing to the server's
/// `notify-keyspace-events`. A refusal is logged; the waiters then poll.
pub(crate) async fn enable(pool: &fred::clients::Pool) {
    let flags = match read_flags(pool).await {
        Ok(flags) => flags,
        Err(err) => {
            tracing::warn!(error = %err, "cannot read notify-keyspace-events; token-lock waiters will poll");
            return;
        }
    };
    let Some(wanted) = with_releases(&flags) else {
        return;
    };
    let set: Result<fred::types::Value, _> = pool
        .next()
        .custom(
            fred::cmd!("CONFIG"),
            vec!["SET", "notify-keyspace-events", wanted.as_str()],
        )
        .await;
    match set {
        Ok(_) => {
            tracing::info!(from = %flags, to = %wanted, "notify-keyspace-events changed, as Config::keyspace_events asks")
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot turn keyspace events on; token-lock waiters will poll")
        }
    }
}

/// A keyspace event as a message for the waiters' wake rule: `0` for the events that free a
/// key (`del`, `expired`, `evicted`, and `unlink`'s `del`), `-1` for any other.
pub(crate) fn message_of(operation: &str) -> i64 {
    match operation {
        "del" | "expired" | "evicted" => 0,
        _ => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_sent_with_k_and_a_or_g_and_x() {
        assert!(sends_releases("KA"));
        assert!(sends_releases("AK"));
        assert!(sends_releases("Kgx"));
        assert!(sends_releases("Kgxe$"));
        assert!(!sends_releases(""));
        assert!(!sends_releases("EA"), "keyevent only");
        assert!(!sends_releases("Kg"), "no expiries");
        assert!(!sends_releases("Kx"), "no deletions");
    }

    #[test]
    fn enabling_adds_only_what_is_missing() {
        assert_eq!(with_releases(""), Some("Kgx".into()));
        assert_eq!(with_releases("Ex"), Some("ExKg".into()));
        assert_eq!(with_releases("A"), Some("AK".into()));
        assert_eq!(with_releases("KA"), None);
        assert_eq!(with_releases("Kgx"), None);
        for flags in ["", "Ex", "A", "E$", "Kg"] {
            let wanted = with_releases(flags).expect("something was missing");
            assert!(sends_releases(&wanted), "{flags} -> {wanted}");
            assert!(
                flags.chars().all(|c| wanted.contains(c)),
                "{flags} kept in {wanted}"
            );
        }
    }

    #[test]
    fn channels_and_messages() {
        assert_eq!(channel(0, "orders:42"), "__keyspace@0__:orders:42");
        assert_eq!(channel(3, "{a}b"), "__keyspace@3__:{a}b");
        assert_eq!(message_of("del"), 0);
        assert_eq!(message_of("expired"), 0);
        assert_eq!(message_of("set"), -1);
        assert_eq!(message_of("pexpire"), -1);
    }
}
