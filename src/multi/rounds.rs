//! Redisson's acquisition algorithm for locks made of parts (`RedissonMultiLock.tryLock`,
//! protocol §9), shared by [`MultiLock`](super::MultiLock) and [`RedLock`](super::RedLock),
//! which differ only in the rules of [`Kind`].

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::guard::MultiGuard;
use crate::config::{lease_millis, WhenUnavailable};
use crate::error::{Error, Result};
use crate::kit::Attempt;
use crate::lock::{Lock, LockGuard};
use crate::owner::Owner;

/// Which composite lock: the rules in which MultiLock and RedLock differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// MultiLock: every part.
    All,
    /// RedLock: a majority of the parts.
    Majority,
}

impl Kind {
    /// How many of `n` parts must be held: all, or `n/2 + 1`.
    pub(super) fn quorum(self, n: usize) -> usize {
        match self {
            Kind::All => n,
            Kind::Majority => n / 2 + 1,
        }
    }

    /// Redisson's `failedLocksLimit`: how many parts may fail in one round.
    fn failed_locks_limit(self, n: usize) -> usize {
        n - self.quorum(n)
    }

    /// Redisson's `calcLockWaitTime`: each part's share of the wait.
    fn part_wait(self, wait: Duration, n: usize) -> Duration {
        match self {
            Kind::All => wait,
            Kind::Majority => {
                let share = wait / u32::try_from(n).unwrap_or(u32::MAX);
                share.max(Duration::from_millis(1))
            }
        }
    }
}

/// The parts of a composite lock, in the order they are taken.
#[derive(Clone)]
pub(super) struct Parts {
    locks: Arc<[Lock]>,
    kind: Kind,
}

impl Parts {
    /// Checks the parts: at least `min` of them (`what` names the kind in the error), each with a
    /// usable name.
    pub(super) fn new(
        locks: impl IntoIterator<Item = Lock>,
        kind: Kind,
        min: usize,
        what: &str,
    ) -> Result<Parts> {
        let locks: Arc<[Lock]> = locks.into_iter().collect();
        if locks.len() < min {
            return Err(Error::InvalidArgument(format!(
                "a {what} needs at least {min} lock(s), got {}",
                locks.len()
            )));
        }
        for lock in locks.iter() {
            lock.check_name()?;
        }
        Ok(Parts { locks, kind })
    }

    pub(super) fn locks(&self) -> &[Lock] {
        &self.locks
    }

    pub(super) fn with_owner(&self, owner: Owner) -> Parts {
        let locks = self.locks.iter().map(|lock| lock.with_owner(owner));
        Parts {
            locks: locks.collect(),
            kind: self.kind,
        }
    }

    /// Whether the owner of every part holds it (Redisson's `isHeldByThread`: an AND).
    pub(super) async fn held_by_owner(&self) -> Result<bool> {
        let held = join_all(self.locks.iter().map(Lock::is_held_by_current_owner)).await;
        held.into_iter()
            .try_fold(true, |all, held| held.map(|held| all && held))
    }

    /// Redisson's `lock()` / `lock(leaseTime)`: rounds of [`Parts::try_acquire`] until one
    /// acquires, each with Redisson's wait: `n × 1.5 s` without a lease; with one, a random wait
    /// in [lease/2, lease) when the lease is at most `n × 1.5 s`, else in [n × 1.5 s, lease)
    /// (at least 1 ms, so that a tiny lease does not spin). A round that fails for an outage
    /// ends the call, unless every part's client has [`WhenUnavailable::KeepWaiting`].
    ///
    /// Silence is an outage only once it has lasted a response timeout (the longest of the
    /// parts' clients'), as for a single lock: a round whose parts got no reply within their
    /// share of its wait (maybe shorter than a round trip) was short of time.
    pub(super) async fn acquire(&self, lease: Option<Duration>) -> Result<MultiGuard> {
        let base = Duration::from_millis(1500).saturating_mul(self.locks.len() as u32);
        let keep_waiting = self
            .locks
            .iter()
            .all(|lock| lock.client().config.when_unavailable == WhenUnavailable::KeepWaiting);
        let patience = self
            .locks
            .iter()
            .map(|lock| lock.client().config.response_timeout)
            .max()
            .unwrap_or_default();
        // When the rounds that failed on silence alone, up to now, began.
        let mut silent_since: Option<Instant> = None;
        loop {
            let wait = match lease {
                None => base,
                Some(lease) if lease <= base => random_between(lease / 2, lease),
                Some(lease) => random_between(base, lease),
            };
            let round = Instant::now();
            match self
                .try_acquire(wait.max(Duration::from_millis(1)), lease)
                .await
            {
                Ok(Some(guard)) => return Ok(guard),
                Ok(None) => silent_since = None,
                Err(Error::Timeout(_))
                    if silent_since.get_or_insert(round).elapsed() < patience =>
                {
                    tracing::debug!(
                        "no part answered within its share of the round's wait; next round"
                    );
                }
                Err(err) if err.is_transient() && keep_waiting => {}
                Err(err) => return Err(err),
            }
        }
    }

    /// Redisson's `tryLock(waitTime, leaseTime)` (protocol §9): `wait` zero is one attempt per
    /// part; `lease` `None` is the watchdog's.
    ///
    /// The parts are taken in order, each with its share of the wait (all that is left for a
    /// MultiLock, `max(wait / n, 1 ms)` for a RedLock) and, while a lease and a wait are both
    /// given, a lease of twice the wait (reset to `lease` at the end). A part that fails (busy,
    /// or an error) uses up one of the failures the kind tolerates; when the parts left to fail
    /// are exactly those tolerated, the round stops early: acquired. When a round fails, what it
    /// took is released and, with time left, the next round starts from the first part.
    ///
    /// Once a part is taken, the parts after it are swept: one attempt each, all at once (one
    /// round trip to every server instead of one after another). The sweep keeps what it took up
    /// to its first part that was busy, releases what it took after that one (so that, as in
    /// Redisson's order, what is held while waiting is always a prefix of the parts, and two
    /// composite locks over shared parts cannot hold each other's later parts), and that part
    /// is then waited for as above. The first part of a round is taken alone: under contention
    /// it is the one waited for, and an owner that just released must not race the heir for the
    /// later parts. Finally,
    /// with a lease, each part's key is set to expire after `lease` (`PEXPIRE`, the "lease
    /// recalculation"), and its guard told.
    ///
    /// Not acquired: `Ok(None)`, or an error when that says more than "busy": a MultiLock's part
    /// failed for another reason than an outage (its lock cannot be taken: `WrongType`, say), at
    /// once; a round of a RedLock failed with such an error among its failures; or no part
    /// answered "busy" in the last round, only errors (outages: the error is the last one). A part
    /// that got no reply within a bound the deadline cut below half its share counts as busy.
    ///
    /// Cancel safe: the guards of the parts taken are dropped (released in the background) and an
    /// acquire in flight is taken back by the part's client.
    pub(super) async fn try_acquire(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<MultiGuard>> {
        let (kind, n) = (self.kind, self.locks.len());
        if wait.as_millis() > i64::MAX as u128 {
            return Err(Error::InvalidArgument(format!(
                "wait is too large: {wait:?}"
            )));
        }
        // Whole milliseconds, as Redisson counts.
        let wait = Duration::from_millis(wait.as_millis() as u64);
        let lease_ms = lease
            .map(|lease| lease_millis(lease, "lease"))
            .transpose()?;
        // Redisson's `newLeaseTime`: twice the wait while waiting, so that no part expires
        // before the last one is taken.
        let part_lease = match lease {
            Some(_) if !wait.is_zero() => Some(wait.saturating_mul(2)),
            other => other,
        };
        if let Some(part_lease) = part_lease {
            lease_millis(
                part_lease,
                "twice the wait (the parts' lease while acquiring)",
            )?;
        }
        let started = Instant::now();
        // None: one attempt per part and no second round (Redisson's `waitTime <= 0`).
        let deadline =
            if wait.is_zero() {
                None
            } else {
                Some(started.checked_add(wait).ok_or_else(|| {
                    Error::InvalidArgument(format!("wait is too large: {wait:?}"))
                })?)
            };
        let part_wait = kind.part_wait(wait, n);
        let limit = kind.failed_locks_limit(n);
        let mut allowance = limit;
        let mut held: Vec<LockGuard> = Vec::with_capacity(n);
        let mut failures = Failures::default();
        let mut next = 0;
        // Whether the parts from `next` on are swept (the part before was just taken).
        let mut sweep = false;
        while next < n {
            let left = deadline.map_or(Duration::ZERO, |deadline| {
                deadline.saturating_duration_since(Instant::now())
            });
            let bound = part_wait.min(left);
            let outcome = if sweep && n - next >= 2 {
                sweep = false;
                let swept = sweep_parts(&self.locks[next..], bound, part_lease).await;
                held.extend(swept.taken);
                match swept.stop {
                    None => {
                        next = n;
                        None
                    }
                    Some((offset, outcome)) => {
                        release_all(swept.beyond).await;
                        next += offset;
                        match outcome {
                            // Busy with time to wait: waited for the usual way, next turn.
                            busy @ Ok(Attempt::Busy) if deadline.is_some() => {
                                failures.note(self.locks[next].name(), busy, false);
                                None
                            }
                            outcome => Some(outcome),
                        }
                    }
                }
            } else {
                Some(self.locks[next].try_lock_bounded(bound, part_lease).await)
            };
            if let Some(outcome) = outcome {
                let lock = &self.locks[next];
                next += 1;
                match outcome {
                    Ok(Attempt::Acquired(guard)) => {
                        held.push(guard);
                        sweep = true;
                    }
                    failed => {
                        failures.note(lock.name(), failed, bound < part_wait / 2);
                        if n - held.len() == limit {
                            break; // a RedLock's quorum: the rest may fail
                        }
                        if allowance == 0 {
                            release_all(std::mem::take(&mut held)).await;
                            if deadline.is_none() || failures.final_round() {
                                return failures.verdict();
                            }
                            allowance = limit;
                            next = 0;
                            failures.round_busy = false;
                        } else {
                            allowance -= 1;
                        }
                    }
                }
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                release_all(held).await;
                return failures.verdict();
            }
        }
        if let Some(lease_ms) = lease_ms {
            held = relet_all(held, lease_ms, kind.quorum(n)).await?;
        }
        tracing::debug!(
            parts = n,
            held = held.len(),
            waited_ms = started.elapsed().as_millis() as u64,
            "acquired the parts"
        );
        Ok(Some(MultiGuard {
            parts: held,
            quorum: kind.quorum(n),
            started,
            lease,
            drift: lease.map_or(Duration::ZERO, |lease| super::guard::drift(lease, 0.01)),
        }))
    }
}

/// What a sweep of the parts after a taken one got.
struct Swept {
    /// The parts taken before the first that was not: kept.
    taken: Vec<LockGuard>,
    /// The parts taken after that one: to be released.
    beyond: Vec<LockGuard>,
    /// The first part not taken (its offset in the sweep) and its attempt's outcome.
    stop: Option<(usize, Result<Attempt<LockGuard>>)>,
}

/// One attempt on each of `locks`, all at once, each bounded by `bound` as a waiting attempt
/// would be (an attempt without a reply by then is abandoned, as `try_lock_within` abandons it,
/// and is a `Timeout`); a zero `bound` is a single attempt (no deadline).
async fn sweep_parts(locks: &[Lock], bound: Duration, lease: Option<Duration>) -> Swept {
    let attempts = join_all(locks.iter().map(|lock| async move {
        let attempt = lock.try_lock_bounded(Duration::ZERO, lease);
        if bound.is_zero() {
            return attempt.await;
        }
        tokio::time::timeout(bound, attempt)
            .await
            .unwrap_or(Err(Error::Timeout(bound)))
    }))
    .await;
    let mut swept = Swept {
        taken: Vec::with_capacity(locks.len()),
        beyond: Vec::new(),
        stop: None,
    };
    for (offset, outcome) in attempts.into_iter().enumerate() {
        match (outcome, swept.stop.is_some()) {
            (Ok(Attempt::Acquired(guard)), false) => swept.taken.push(guard),
            (Ok(Attempt::Acquired(guard)), true) => swept.beyond.push(guard),
            (outcome, false) => swept.stop = Some((offset, outcome)),
            (_, true) => {}
        }
    }
    swept
}

/// Why parts were not taken, over the whole acquisition.
#[derive(Default)]
struct Failures {
    /// A part answered "busy" in the current round.
    round_busy: bool,
    /// The last outage (`Error::is_transient`).
    outage: Option<Error>,
    /// The last error that is not an outage (the part cannot be taken: `WrongType`, ...).
    permanent: Option<Error>,
}

impl Failures {
    /// Notes a part that failed; `cut`: the round's deadline had cut the part's bound below half
    /// its share of the wait.
    fn note(&mut self, name: &str, failed: Result<Attempt<LockGuard>>, cut: bool) {
        match failed {
            Ok(_) => self.round_busy = true,
            // No reply within a bound the deadline cut short (maybe below a round trip): a lack
            // of time, as busy, not an outage. (Java's first attempt runs to its reply.)
            Err(Error::Timeout(_)) if cut => {
                tracing::debug!(
                    lock = name,
                    "a part's wait, cut short by the deadline, ran out"
                );
                self.round_busy = true;
            }
            Err(err) => {
                tracing::debug!(lock = name, error = %err, "a part failed");
                if err.is_transient() {
                    self.outage = Some(err);
                } else {
                    self.permanent = Some(err);
                }
            }
        }
    }

    /// Whether a failed round must not be followed by another: it failed on errors only (a
    /// second round would fail at once the same way, spinning), or on a part that cannot be
    /// taken.
    fn final_round(&self) -> bool {
        self.permanent.is_some() || !self.round_busy
    }

    /// The outcome of an acquisition that took no lock (see `try_acquire`).
    fn verdict(self) -> Result<Option<MultiGuard>> {
        match (self.permanent, self.outage) {
            (Some(err), _) => Err(err),
            (None, Some(err)) if !self.round_busy => Err(err),
            _ => Ok(None),
        }
    }
}

/// Releases the parts taken by a failed round, in parallel, and waits for the releases (as
/// Redisson's `unlockInner`), so that nothing is left held when the acquisition reports.
/// Errors are the releases' own (a lost hold has nothing to release).
async fn release_all(held: Vec<LockGuard>) {
    for result in join_all(held.into_iter().map(LockGuard::unlock)).await {
        if let Err(err) = result {
            tracing::debug!(error = %err, "releasing a part of a failed acquisition");
        }
    }
}

/// The lease recalculation: `PEXPIRE` of every part's key to `lease_ms`, in parallel, as
/// Redisson's `expireAsync` (unconditional, as in Redisson). A part whose key is gone or whose
/// call failed is let go (its guard dropped); if fewer than `quorum` parts remain, everything is
/// released and the error returned.
async fn relet_all(held: Vec<LockGuard>, lease_ms: u64, quorum: usize) -> Result<Vec<LockGuard>> {
    let ms = lease_ms.to_string();
    let replies = join_all(held.iter().map(|guard| {
        let lock = guard.lock();
        let ms = ms.as_str();
        async move {
            let sent_at = Instant::now();
            let client = lock.client();
            let reply = client
                .redis
                .query::<i64>("PEXPIRE", lock.name(), &[ms])
                .await
                .map_err(|err| client.redis_error(lock.name(), err));
            (sent_at, reply)
        }
    }))
    .await;
    let mut kept = Vec::with_capacity(held.len());
    let mut error = None;
    for (mut guard, (sent_at, reply)) in held.into_iter().zip(replies) {
        match reply {
            Ok(1) => {
                guard.hold.relet(&guard.lock, lease_ms, sent_at);
                kept.push(guard);
            }
            Ok(_) => {
                error = Some(Error::LeaseLost {
                    name: guard.lock().name().to_owned(),
                });
            }
            Err(err) => error = Some(err),
        }
    }
    match error {
        Some(err) if kept.len() < quorum => {
            release_all(kept).await;
            Err(err)
        }
        _ => Ok(kept),
    }
}

/// A random duration in [`low`, `high`) at millisecond resolution (`low` when empty), as
/// Java's `ThreadLocalRandom.nextLong(low, high)`: spreads competing `lock()` calls' rounds.
fn random_between(low: Duration, high: Duration) -> Duration {
    let (low, high) = (low.as_millis() as u64, high.as_millis() as u64);
    if high <= low {
        return Duration::from_millis(low);
    }
    // A v4 uuid is 122 random bits; no other random source is needed for this.
    let random = uuid::Uuid::new_v4().as_u64_pair().0;
    Duration::from_millis(low + random % (high - low))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kinds_follow_redisson() {
        assert_eq!(Kind::All.quorum(3), 3);
        assert_eq!(Kind::All.failed_locks_limit(3), 0);
        assert_eq!(Kind::Majority.quorum(3), 2);
        assert_eq!(Kind::Majority.failed_locks_limit(3), 1);
        assert_eq!(Kind::Majority.quorum(4), 3);
        assert_eq!(Kind::Majority.failed_locks_limit(5), 2);
        let wait = Duration::from_millis(900);
        assert_eq!(Kind::All.part_wait(wait, 3), wait);
        assert_eq!(
            Kind::Majority.part_wait(wait, 3),
            Duration::from_millis(300)
        );
        assert_eq!(
            Kind::Majority.part_wait(Duration::from_millis(2), 5),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn random_waits_stay_in_their_range() {
        let (low, high) = (Duration::from_millis(10), Duration::from_millis(20));
        for _ in 0..200 {
            let wait = random_between(low, high);
            assert!(wait >= low && wait < high, "{wait:?}");
        }
        assert_eq!(random_between(high, low), high);
    }
}
