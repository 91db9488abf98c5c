//! The crate's one error type.

use std::time::Duration;

/// Starts the message of the error an unacknowledged acquisition is reported with, so that
/// [`Error::from_redis`] can tell it apart from the server's own errors.
pub(crate) const NOT_REPLICATED: &str = "NOTREPLICATED";

/// A specialised `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in ferrisson.
///
/// Errors are grouped by what the caller can do about them: fix the call
/// ([`InvalidArgument`](Error::InvalidArgument)), fix the data ([`WrongType`](Error::WrongType)),
/// fix the program's locking logic ([`NotHeld`](Error::NotHeld)), notice that the protection
/// ended early or cannot be shown to have lasted ([`LeaseLost`](Error::LeaseLost),
/// [`ReleaseUnknown`](Error::ReleaseUnknown)), or retry later
/// ([`Unavailable`](Error::Unavailable), [`Timeout`](Error::Timeout)).
///
/// ```
/// use ferrisson::Error;
///
/// let err = Error::NotHeld { name: "orders:42".into() };
/// assert!(err.to_string().contains("orders:42"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller's owner does not hold the lock: Redisson's `IllegalMonitorStateException`.
    /// Nothing was changed on the server.
    #[error("lock `{name}` is not held by this owner")]
    NotHeld {
        /// The lock's name.
        name: String,
    },

    /// The owner that holds a non-reentrant lock ([`crate::NonReentrantLock`]) asked for it
    /// again: refused at once rather than taking a second hold or waiting for itself. Nothing
    /// was changed on the server; the first hold stays.
    #[error("lock `{name}` is already held by this owner and is not reentrant")]
    AlreadyHeld {
        /// The lock's name.
        name: String,
    },

    /// A guard's hold had been lost before its release: its lease ran out, or the lock was
    /// deleted, force-unlocked or taken over. The work the guard protected may have overlapped
    /// another holder's; [`LockGuard::lost`](crate::LockGuard::lost) tells it while the work
    /// runs.
    ///
    /// A guard's release also answers with it when
    /// [`LockGuard::is_lost`](crate::LockGuard::is_lost) was true as it began (the lease's proven
    /// end had passed), even if the server still kept the hold: it frees the hold but never
    /// reports `Ok`, so that `unlock` agrees with [`lost`](crate::LockGuard::lost). Except for a
    /// fixed-lease hold re-entered since (which reset the key's TTL): the server's reply decides.
    #[error(
        "lock `{name}` was lost before this release (its lease ran out or the key was deleted)"
    )]
    LeaseLost {
        /// The lock's name.
        name: String,
    },

    /// A release whose outcome is unknown: it failed after it may have reached Redis (the
    /// connection failed or the reply timed out: `cause`), or it was left to the client's
    /// settling of an earlier call of unknown outcome on the same holder field (`cause` is
    /// `None`). Whether the hold lasted until the release cannot be told, so this is never
    /// reported as `Ok`: treat the work the hold protected as unprotected.
    ///
    /// `may_remain` says whether the hold may still be on the server:
    /// * `true` for what `unlock` returns at once: the release may not have run. A lock's hold
    ///   then stays until its lease ends (no longer renewed) or the client settles the holder
    ///   field once Redis answers (see `docs/architecture.md`). A
    ///   [`Semaphore`](crate::Semaphore)'s permits have no lease and are not settled: they stay
    ///   taken until released again (twice, if the first release did run); a
    ///   [`Permit`](crate::Permit) comes back at its lease's end, if it has one.
    /// * `false` once the client settled the field and found nothing of the hold on the server
    ///   ([`LockGuard::unlock_settled`](crate::LockGuard::unlock_settled)): the lock is not held
    ///   by it any more, but the release may have run or the hold may have been lost before it.
    ///
    /// ```
    /// use ferrisson::Error;
    ///
    /// let err = Error::ReleaseUnknown { name: "orders:42".into(), may_remain: true, cause: None };
    /// assert!(!err.is_transient());
    /// assert!(err.to_string().contains("may stay on the server until its lease ends"));
    /// ```
    #[error("{}", release_unknown(name, *may_remain, cause.as_deref()))]
    ReleaseUnknown {
        /// The lock's (or semaphore's) name.
        name: String,
        /// Whether the hold may still be on the server (see above).
        may_remain: bool,
        /// What made the outcome unknown ([`Error::Unavailable`], [`Error::Timeout`]); `None`
        /// when the release was left to the settling of an earlier call of unknown outcome.
        #[source]
        cause: Option<Box<Error>>,
    },

    /// The key exists but is not a lock (e.g. a string or a list): the lock is left untouched.
    #[error("key `{name}` holds a value of another type, not a lock")]
    WrongType {
        /// The key's name.
        name: String,
    },

    /// A read-write lock's write side was asked to wait, without a bound, by an owner that holds
    /// only read holds of it: the write lock waits for every read hold to go, so the owner would
    /// wait for itself (Redisson's `lock()` hangs there). Release the read holds first.
    #[error(
        "the owner holds read holds of `{name}` and cannot wait for its write lock (no upgrade)"
    )]
    UpgradeRefused {
        /// The lock's name.
        name: String,
    },

    /// An argument was rejected before anything was sent to Redis.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Redis could not be reached (connection refused, closed, or not yet re-established).
    ///
    /// When this comes from an operation that changes a lock, its outcome on the server is
    /// unknown; ferrisson never re-sends such an operation, and once Redis answers again it
    /// takes back whatever the call may have taken (the hold is settled, never adopted). A
    /// release of unknown outcome is reported as [`Error::ReleaseUnknown`] instead, with this
    /// as its cause.
    #[error("redis is unavailable: {}", readable(.0))]
    Unavailable(#[source] fred::error::Error),

    /// Redis did not answer within the configured response timeout.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),

    /// Redis answered with an error that none of the other variants describes.
    #[error("redis error: {}", readable(.0))]
    Redis(#[source] fred::error::Error),

    /// Redis refused a command for the connection's ACL user (`NOPERM`): a command, key or
    /// channel the user may not use. Grant the least-privilege rule of ferrisson's
    /// `docs/reliability.md`. Not transient: retrying cannot help until the user's rights change.
    #[error("redis denied permission to this user (ACL): {}; see the least-privilege rule in ferrisson's docs/reliability.md", readable(.0))]
    PermissionDenied(#[source] fred::error::Error),

    /// Synced writes ([`crate::SyncedWrites`]): no replica of the master acknowledged the
    /// acquisition within [`crate::Config::replica_sync_timeout`], so a failover could lose it.
    /// The acquisition was rolled back (Redisson's `NoSyncedSlavesException`, after which it
    /// unlocks too). Transient: acquires under [`crate::WhenUnavailable::KeepWaiting`] retry it
    /// within their wait bound, as for an outage.
    #[error("no replica acknowledged the acquisition of lock `{name}` in time, so it was rolled back (replica_sync_timeout)")]
    NotReplicated {
        /// The lock's name.
        name: String,
    },

    /// Deadlock detection ([`DeadlockDetection::Detect`](crate::DeadlockDetection::Detect))
    /// found this acquire's wait for `name` on a cycle of waits that cannot end by itself
    /// (each owner waits for a lock the next one holds), and picked it to give way: it was the
    /// cycle's youngest wait of a detecting client ([`Deadlock::victim`](crate::Deadlock::victim)). The acquire took nothing; the other waits of the cycle go on.
    /// Release what the owner holds and retry, as after a database's deadlock error.
    #[error("deadlock: the wait for lock `{name}` gives way to break the cycle: {cycle}")]
    Deadlock {
        /// The lock this acquire waited for.
        name: String,
        /// The cycle, which names every owner, the lock each waits for and how long.
        cycle: Box<crate::wait_for::Deadlock>,
    },

    /// The client was shut down; no further operations are possible.
    #[error("the client has been shut down")]
    Shutdown,

    /// The tokio runtime that created the client has shut down, and with it the client's
    /// connections and background tasks (watchdog, pub/sub, releases of dropped guards): the
    /// client can no longer be used, from any runtime. Create the client on a runtime that
    /// outlives its use (for blocking code, see [`crate::blocking`]).
    #[error("the tokio runtime that created this client has shut down; the client cannot be used from another runtime")]
    RuntimeGone,
}

impl Error {
    /// Whether retrying the same call later may succeed (the server was unreachable or slow).
    ///
    /// ```
    /// assert!(!ferrisson::Error::Shutdown.is_transient());
    /// ```
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unavailable(_) | Error::Timeout(_) | Error::NotReplicated { .. }
        )
    }

    /// Classifies an error from fred for an operation on the key `name`.
    pub(crate) fn from_redis(err: fred::error::Error, name: &str, timeout: Duration) -> Error {
        use fred::error::ErrorKind;
        let details = err.details();
        match err.kind() {
            _ if details.contains("WRONGTYPE") => Error::WrongType {
                name: name.to_owned(),
            },
            _ if details.starts_with(NOT_REPLICATED) => Error::NotReplicated {
                name: name.to_owned(),
            },
            // A cluster slot is migrating and the call's keys are split between its nodes: it
            // did not run, and will once the migration ends.
            _ if details.starts_with("TRYAGAIN") => Error::Unavailable(err),
            // `NOPERM` for a command refused at the top level; a command a script calls is
            // refused with "ERR The user executing the script can't run this command" (Redis),
            // or "ERR ACL failure in script: User u has no permissions to run ..." (Valkey 8).
            _ if details.contains("NOPERM")
                || details.contains("user executing the script can't run this command")
                || details.contains("ACL failure in script") =>
            {
                Error::PermissionDenied(err)
            }
            ErrorKind::Timeout => Error::Timeout(timeout),
            ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Backpressure | ErrorKind::Routing => {
                Error::Unavailable(err)
            }
            // fred's own routing failure while its connection is down.
            _ if details.contains("Failed to route") => Error::Unavailable(err),
            _ => Error::Redis(err),
        }
    }
}

/// [`Error::ReleaseUnknown`]'s message.
fn release_unknown(name: &str, may_remain: bool, cause: Option<&Error>) -> String {
    let why = match cause {
        Some(cause) => format!("({cause})"),
        None => "(left to the settling of an earlier call of unknown outcome)".to_owned(),
    };
    let then = if may_remain {
        "it may not have run, so the hold may stay on the server until its lease ends"
    } else {
        "the hold is no longer on the server, but it cannot be shown to have lasted until the \
         release"
    };
    format!("the release of `{name}` has an unknown outcome {why}: {then}")
}

/// fred's error as one readable line: its details without fred's kind label (`IO Error: `), and
/// an I/O error's `Debug` text (`Os { code: 111, kind: ConnectionRefused, message: "Connection
/// refused" }`) replaced by its message.
fn readable(err: &fred::error::Error) -> String {
    let details = err.details();
    let io_message = || {
        let start = details.find("Os { ")?;
        let (_, rest) = details[start..].split_once("message: \"")?;
        let (message, _) = rest.split_once('"')?;
        Some(format!("{}{}", &details[..start], message.to_lowercase()))
    };
    io_message().unwrap_or_else(|| details.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_refusals_are_permission_denied_at_the_top_level_and_inside_scripts() {
        for details in [
            "NOPERM User u has no permissions to run the 'evalsha' command",
            "ERR The user executing the script can't run this command or subcommand script: f_1",
        ] {
            let err = fred::error::Error::new(fred::error::ErrorKind::Unknown, details);
            assert!(
                matches!(
                    Error::from_redis(err, "lock", Duration::ZERO),
                    Error::PermissionDenied(_)
                ),
                "{details}"
            );
        }
    }

    #[test]
    fn fred_errors_read_as_one_line_of_words() {
        let io = fred::error::Error::new(
            fred::error::ErrorKind::IO,
            r#"cannot connect to redis://h:1: Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#,
        );
        assert_eq!(
            Error::Unavailable(io).to_string(),
            "redis is unavailable: cannot connect to redis://h:1: connection refused"
        );
        let reply = fred::error::Error::new(fred::error::ErrorKind::Unknown, "ERR no such thing");
        assert_eq!(
            Error::Redis(reply).to_string(),
            "redis error: ERR no such thing"
        );
    }
}
