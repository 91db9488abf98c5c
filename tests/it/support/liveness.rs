//! The hang detector: an acquire that waits past a bound while its lock is free is a liveness
//! fault (a lost wake-up), reported with the key's state and the client's local state at that
//! moment, while the acquire still waits.
//!
//! A lock is free for an instant at every plain release, so one look proves nothing: the lock
//! must be seen free twice, [`RECHECK`] apart, with the acquire still waiting. Any honest wake-up
//! (a message, a hand-off) retries within a round trip, far less than that.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use fred::prelude::*;

/// How long the lock must stay free, the acquire still waiting, to count as a fault.
pub const RECHECK: Duration = Duration::from_millis(200);

/// An acquire that waited past its bound while the lock was free.
#[derive(Debug)]
pub struct LivenessFault {
    /// The lock.
    pub name: String,
    /// How long the acquire had waited when the fault was established.
    pub waited: Duration,
    /// The key's PTTL at both looks (−2: no key).
    pub pttl: [i64; 2],
    /// The client's local state at the second look, while the acquire still waited.
    pub local: ferrisson::inspect::LocalState,
}

impl fmt::Display for LivenessFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "liveness fault: an acquire of `{}` waited {:?} while the lock was free (PTTL {:?}); \
             the client's local state: {}",
            self.name, self.waited, self.pttl, self.local
        )
    }
}

/// Awaits `acquire` (an acquire of lock `name` by `client`). Each time it has waited another
/// `bound`, reads the lock's PTTL through `raw`: if the lock is free, and still free
/// [`RECHECK`] later with the acquire still waiting, returns the fault (the acquire is
/// dropped). A lock that is held means honest waiting: the watch goes on.
pub async fn watch_acquire<T>(
    acquire: impl Future<Output = T>,
    bound: Duration,
    client: &ferrisson::Client,
    raw: &fred::clients::Client,
    name: &str,
) -> Result<T, LivenessFault> {
    let start = tokio::time::Instant::now();
    tokio::pin!(acquire);
    let mut next_look = start + bound;
    loop {
        tokio::select! {
            done = &mut acquire => return Ok(done),
            () = tokio::time::sleep_until(next_look) => {}
        }
        next_look += bound;
        let first = pttl(raw, name).await;
        if first != -2 {
            continue;
        }
        tokio::select! {
            done = &mut acquire => return Ok(done),
            () = tokio::time::sleep(RECHECK) => {}
        }
        let second = pttl(raw, name).await;
        // Read while the acquire still waits (it is dropped only when this returns).
        let local = client.local_state(name);
        if second == -2 {
            return Err(LivenessFault {
                name: name.to_owned(),
                waited: start.elapsed(),
                pttl: [first, second],
                local,
            });
        }
    }
}

async fn pttl(raw: &fred::clients::Client, name: &str) -> i64 {
    // A failed read proves nothing either way: treat it as "held".
    raw.pttl(name).await.unwrap_or(0)
}
