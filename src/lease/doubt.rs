//! Holder fields in doubt, and how the client settles them.
//!
//! Lock-changing scripts are sent at most once (`write_options`). When one fails after it may
//! have been sent (the connection dropped, the reply timed out), its outcome is unknown: an
//! acquire may have added a hold that no guard owns, a release may not have run. The same holds
//! for a watchdog lease given up as lost because its renewal could not be confirmed in time:
//! the server may still keep it. Such a holder field is *in doubt*. Adopting the server's count
//! as it is would be wrong both ways (a half-counted re-entry that outlives its release, or a
//! resurrected lease), so the client settles the field first:
//!
//! 1. The reconciler (one background task per client) waits until every lock-changing call that
//!    started before the doubt was visible has ended. Every acquire and release registers a
//!    [`Call`] in the current epoch *before* it looks for a doubt on its field (a release: before
//!    the lease table counts its hold released), and keeps it until its reply is handled; the
//!    reconciler moves to the next epoch and waits for the previous one to drain. A call
//!    registered later saw the doubt.
//! 2. It reads how many holds of the field the client knows of (0 when none, or when they were
//!    given up as lost) and runs the reconcile script, which brings the field down to that count
//!    and never adds a hold (freeing and announcing the lock when the count is 0). A server
//!    count below the client's means the holds were lost: their guards are told. The script
//!    and the keys of the layouts it reads are the lock family's ([`Settle`], given at connect
//!    by the client: `src/lock/upkeep.rs`); this layer knows holds, not layouts.
//!
//! Until the field is settled, acquires by it wait (within their own bounds, or fail at once
//! with `FailFast` while Redis is unreachable), and releases of it are not sent: the reconcile
//! does their work, and a release that arrives meanwhile makes the reconciler run once more with
//! the new count. Hand-offs pause while any field is in doubt. The reconcile is idempotent, so
//! unlike the lock scripts it is retried until Redis answers (or the client shuts down).
//!
//! A release in doubt (sent without a reply, or left to the reconcile) is reported to its caller
//! as `Error::ReleaseUnknown`, never as done. A caller that wants to know more waits for the
//! settling ([`Settlement`]): it tells whether the holds whose releases were in doubt were still
//! on the server when the reconcile took them back, which proves that they lasted until then.
//! The proof is the server's count against the client's: when the field's doubts came from
//! releases only (no acquire in doubt, no lease given up), every hold the server has of the
//! field is one the client knows of or one whose release is in doubt, and a hold lost on the
//! server (a restart without persistence, say) cannot come back, since only its owner writes
//! its field and acquires by a field in doubt wait. So when the server's count is at least the
//! client's plus the releases in doubt, none of those releases ran and each of their holds was
//! still there. Anything less (a release that did run, a hold lost before it) proves nothing.
//!
//! A guard dropped unreleased leaves its release to the janitor, which sends it later. Until it
//! has been answered, acquires by the same field wait too ([`Doubts::dropped_release`]): sent
//! after them, it would free the owner's next hold when the dropped one had been lost
//! meanwhile (force-unlocked, and the loss not heard yet), so that the owner would believe it
//! holds a free lock. Waiting keeps the program's order: a drop, then an acquire.
//!
//! Outside doubts the cost is a registration per call (two atomic operations) and two atomic
//! loads per acquire and one per release.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use foldhash::HashMap;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::clock::epoch_ms;
use crate::error::Error;
use crate::lease::watchdog::{HoldKey, LeaseTable};
use crate::transport::script::Script;
use crate::transport::Redis;

/// How holder fields in doubt are settled: a script that brings a field down to a count and
/// never adds a hold, with what it needs of a lock's name. Called with KEYS `keys(name)` and
/// ARGV [the field, the count to keep, the publish mode, the client's clock in epoch ms,
/// `layout_args(name)`...]; replies the count the field had (0: absent; -1: not a count).
pub(crate) struct Settle {
    pub(crate) script: &'static Script,
    pub(crate) keys: fn(&str) -> Vec<String>,
    pub(crate) layout_args: fn(&str) -> Vec<String>,
}

/// Whether a lock-changing script that failed with `err` may have run all the same: the
/// connection failed or the reply timed out after it may have been sent. (A script that ran and
/// raised an error, such as `WRONGTYPE`, changed nothing.)
pub(crate) fn outcome_unknown(err: &fred::error::Error) -> bool {
    // An acquisition no replica acknowledged was rolled back: its outcome is known.
    match Error::from_redis(err.clone(), "", Duration::ZERO) {
        Error::NotReplicated { .. } => false,
        err => err.is_transient(),
    }
}

/// A field in doubt.
#[derive(Default)]
struct Field {
    /// Bumped whenever the field's count changes while in doubt (a release left to the
    /// reconcile, a new failure), so that the reconciler runs again.
    round: u64,
    /// Releases of the field whose outcome is unknown (sent without a reply, or left to the
    /// reconcile) since the field was put in doubt.
    releases: u64,
    /// Whether anything else put the field in doubt: an acquire of unknown outcome, or a lease
    /// given up without the server's word. The server may then keep holds the client does not
    /// count, and its count proves nothing about the releases.
    other: bool,
    /// Callers waiting to learn whether the releases' holds were still on the server.
    watchers: Vec<oneshot::Sender<bool>>,
}

/// What the reconcile found of a field on the server: its count, and the count the client
/// knows of, to which it brought the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// The field's count on the server (0 when absent, -1 when not a count).
    pub(crate) held: i64,
    /// The holds the client knows of.
    pub(crate) kept: u64,
}

/// The end of a release in doubt, for the caller that wants to wait for it (see the module's
/// docs): `Some(true)` when the reconcile found the holds of every release in doubt on the
/// server (they lasted until it took them back), `Some(false)` when it did not or could not
/// settle the field, `None` when the client closed first.
pub(crate) struct Settlement {
    settled: oneshot::Receiver<bool>,
    closed: CancellationToken,
}

impl Settlement {
    /// A settlement and the sender the field's entry keeps until the reconcile.
    pub(crate) fn new(doubts: &Doubts) -> (Settlement, oneshot::Sender<bool>) {
        let (sender, settled) = oneshot::channel();
        let closed = doubts.closed.clone();
        (Settlement { settled, closed }, sender)
    }

    /// Waits for the reconcile of the field (cancel safe).
    pub(crate) async fn wait(self) -> Option<bool> {
        tokio::select! {
            settled = self.settled => settled.ok(),
            () = self.closed.cancelled() => None,
        }
    }
}

/// The holder fields in doubt and the epochs of lock-changing calls.
#[derive(Default)]
pub(crate) struct Doubts {
    /// The fields in doubt.
    fields: Mutex<HashMap<HoldKey, Field>>,
    /// `fields.len()`, readable without the lock: the fast path when nothing is in doubt.
    count: AtomicUsize,
    /// The current epoch; calls register in slot `epoch % 2`.
    epoch: AtomicUsize,
    active: [AtomicUsize; 2],
    /// Notified when a slot drains.
    drained: Notify,
    /// Notified when a field is marked (wakes the reconciler) or settled (wakes waiters), and
    /// when a dropped guard's release has been answered.
    changed: Notify,
    /// Releases of dropped guards not answered yet, per field.
    dropped: Mutex<HashMap<HoldKey, usize>>,
    /// The sum of `dropped`, readable without the lock.
    dropped_count: AtomicUsize,
    closed: CancellationToken,
    /// Model checks only (`crate::model`): a point where the scheduler may run another task,
    /// between the steps of the epoch protocol, which are atomic operations the scheduler
    /// does not see.
    #[cfg(test)]
    switch: Option<Box<dyn Fn() + Send + Sync>>,
}

/// A dropped guard's release on its way (see [`Doubts::dropped_release`]).
pub(crate) struct DroppedRelease {
    doubts: Weak<Doubts>,
    key: HoldKey,
}

impl Drop for DroppedRelease {
    fn drop(&mut self) {
        let Some(doubts) = self.doubts.upgrade() else {
            return;
        };
        {
            let mut dropped = doubts.dropped.lock();
            if let Some(left) = dropped.get_mut(&self.key) {
                *left -= 1;
                if *left == 0 {
                    dropped.remove(&self.key);
                }
            }
        }
        doubts.dropped_count.fetch_sub(1, Ordering::SeqCst);
        doubts.changed.notify_waiters();
    }
}

/// A lock-changing call in progress: while any call registered before a doubt was visible is
/// alive, the reconciler does not read the client's count.
pub(crate) struct Call {
    doubts: Arc<Doubts>,
    slot: usize,
}

impl Drop for Call {
    fn drop(&mut self) {
        self.doubts.leave(self.slot);
    }
}

impl Field {
    fn add_release(&mut self, watcher: Option<oneshot::Sender<bool>>) {
        self.releases += 1;
        self.watchers.extend(watcher);
    }

    /// Whether `found` proves that the holds of this field's releases in doubt were still on
    /// the server when the reconcile took them back (see the module's docs).
    fn releases_lasted(&self, found: Found) -> bool {
        !self.other
            && self.releases > 0
            && u64::try_from(found.held)
                .is_ok_and(|held| held >= found.kept.saturating_add(self.releases))
    }
}

impl Doubts {
    pub(crate) fn new(closed: CancellationToken) -> Arc<Doubts> {
        Arc::new(Doubts {
            closed,
            ..Doubts::default()
        })
    }

    /// Doubts whose epoch protocol lets a model check's scheduler switch tasks between its
    /// steps (`switch` is called at each such point).
    #[cfg(test)]
    pub(crate) fn with_switch(
        closed: CancellationToken,
        switch: Box<dyn Fn() + Send + Sync>,
    ) -> Arc<Doubts> {
        let mut doubts = Doubts::new(closed);
        if let Some(doubts) = Arc::get_mut(&mut doubts) {
            doubts.switch = Some(switch);
        }
        doubts
    }

    /// A point where a model check may run another task; nothing otherwise.
    #[inline]
    fn switch(&self) {
        #[cfg(test)]
        if let Some(switch) = &self.switch {
            switch();
        }
    }

    /// Registers a lock-changing call; keep the `Call` until its reply is handled.
    pub(crate) fn enter(self: &Arc<Self>) -> Call {
        loop {
            let epoch = self.epoch.load(Ordering::SeqCst);
            let slot = epoch % 2;
            self.switch();
            self.active[slot].fetch_add(1, Ordering::SeqCst);
            self.switch();
            if self.epoch.load(Ordering::SeqCst) == epoch {
                return Call {
                    doubts: Arc::clone(self),
                    slot,
                };
            }
            // The reconciler moved on meanwhile: register in the new epoch instead.
            self.leave(slot);
        }
    }

    /// Ends a call registered in `slot`, waking the reconciler if it was the slot's last.
    fn leave(&self, slot: usize) {
        if self.active[slot].fetch_sub(1, Ordering::SeqCst) == 1 {
            self.drained.notify_waiters();
        }
    }

    /// Whether any field is in doubt.
    /// The fields in doubt now.
    pub(crate) fn keys(&self) -> Vec<HoldKey> {
        if !self.any() {
            return Vec::new();
        }
        self.fields.lock().keys().cloned().collect()
    }

    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }

    /// Whether `key` is in doubt.
    pub(crate) fn contains(&self, key: &HoldKey) -> bool {
        self.any() && self.fields.lock().contains_key(key)
    }

    /// Puts `key` in doubt for an acquire of unknown outcome or a lease given up without the
    /// server's word (or, if it is in doubt already, makes the reconciler settle it once more).
    pub(crate) fn mark(&self, key: &HoldKey) {
        self.change(key, true, |field| field.other = true);
    }

    /// Puts `key` in doubt for a release of unknown outcome; `watcher` (if any) learns how the
    /// field was settled.
    pub(crate) fn mark_release(&self, key: &HoldKey, watcher: Option<oneshot::Sender<bool>>) {
        self.change(key, true, |field| field.add_release(watcher));
    }

    /// Applies `change` to the field of `key` if it is in doubt (bumping its round), or else,
    /// with `put`, puts it in doubt; returns whether it changed a field.
    fn change(&self, key: &HoldKey, put: bool, change: impl FnOnce(&mut Field)) -> bool {
        let mut fields = self.fields.lock();
        if let Some(field) = fields.get_mut(key) {
            field.round += 1;
            change(field);
        } else if put {
            tracing::debug!(lock = %key.name, field = %key.field, "outcome unknown; settling the holder field");
            let mut field = Field::default();
            change(&mut field);
            fields.insert(key.clone(), field);
            self.count.store(fields.len(), Ordering::SeqCst);
        } else {
            return false;
        }
        drop(fields);
        self.changed.notify_waiters();
        true
    }

    /// Leaves a release of `key` to the reconcile if `key` is in doubt; returns whether it did.
    /// `watcher` (if any) then learns how the field was settled.
    pub(crate) fn take_release(
        &self,
        key: &HoldKey,
        watcher: &mut Option<oneshot::Sender<bool>>,
    ) -> bool {
        self.any() && self.change(key, false, |field| field.add_release(watcher.take()))
    }

    /// Registers the release of a guard of `key` dropped unreleased, until the returned token
    /// is dropped (once its reply is handled, or the job abandoned): acquires by the field wait
    /// for it (see the module's docs).
    pub(crate) fn dropped_release(self: &Arc<Self>, key: &HoldKey) -> DroppedRelease {
        *self.dropped.lock().entry(key.clone()).or_default() += 1;
        self.dropped_count.fetch_add(1, Ordering::SeqCst);
        DroppedRelease {
            doubts: Arc::downgrade(self),
            key: key.clone(),
        }
    }

    /// Whether an acquire by `key` must wait: the field is in doubt, or a dropped guard's
    /// release of it has not been answered yet.
    pub(crate) fn holds_back(&self, key: &HoldKey) -> bool {
        self.contains(key)
            || (self.dropped_count.load(Ordering::SeqCst) > 0
                && self.dropped.lock().contains_key(key))
    }

    /// Waits until an acquire by `key` need not wait ([`Doubts::holds_back`]), or the client
    /// closes.
    pub(crate) async fn settled(&self, key: &HoldKey) {
        loop {
            let mut changed = std::pin::pin!(self.changed.notified());
            changed.as_mut().enable();
            if !self.holds_back(key) || self.closed.is_cancelled() {
                return;
            }
            tokio::select! {
                _ = changed => {}
                _ = self.closed.cancelled() => return,
            }
        }
    }

    /// Clears `key` if its round is still `round`, telling its watchers what the reconcile
    /// `found` (`None`: it could not settle the field); returns whether it did.
    fn clear(&self, key: &HoldKey, round: u64, found: Option<Found>) -> bool {
        let mut fields = self.fields.lock();
        if fields.get(key).map(|field| field.round) != Some(round) {
            return false;
        }
        let Some(field) = fields.remove(key) else {
            return false;
        };
        self.count.store(fields.len(), Ordering::SeqCst);
        drop(fields);
        let lasted = found.is_some_and(|found| field.releases_lasted(found));
        for watcher in field.watchers {
            let _ = watcher.send(lasted);
        }
        self.changed.notify_waiters();
        true
    }

    /// Moves to the next epoch and waits until every call of the previous one has ended.
    pub(crate) async fn drain(&self) {
        let previous = self.epoch.fetch_add(1, Ordering::SeqCst) % 2;
        self.switch();
        loop {
            let mut drained = std::pin::pin!(self.drained.notified());
            drained.as_mut().enable();
            if self.active[previous].load(Ordering::SeqCst) == 0 {
                return;
            }
            drained.await;
        }
    }
}

/// The reconciler task: settles fields in doubt, one round at a time, until the client closes.
pub(crate) async fn run(
    doubts: Arc<Doubts>,
    leases: Weak<LeaseTable>,
    redis: Arc<Redis>,
    how: &'static Settle,
) {
    loop {
        let mut changed = std::pin::pin!(doubts.changed.notified());
        changed.as_mut().enable();
        let due: Vec<(HoldKey, u64)> = doubts
            .fields
            .lock()
            .iter()
            .map(|(key, field)| (key.clone(), field.round))
            .collect();
        if due.is_empty() {
            tokio::select! {
                _ = changed => continue,
                _ = doubts.closed.cancelled() => return,
            }
        }
        tokio::select! {
            _ = doubts.drain() => {}
            _ = doubts.closed.cancelled() => return,
        }
        for (key, round) in due {
            let settle = settle(&leases, &redis, how, &key);
            let found = tokio::select! {
                settled = settle => match settled {
                    Settled::Found(found) => Some(found),
                    Settled::Unsettled => None,
                    Settled::Gone => return,
                },
                _ = doubts.closed.cancelled() => return,
            };
            doubts.clear(&key, round, found);
        }
    }
}

/// How [`settle`] ended.
enum Settled {
    /// The field was brought down to the client's count.
    Found(Found),
    /// Redis refused the reconcile (a key of another type, say): nothing of ours to settle.
    Unsettled,
    /// The client is gone.
    Gone,
}

/// Brings `key` on the server down to the holds the client knows of, retrying (with back-off)
/// until Redis answers.
async fn settle(leases: &Weak<LeaseTable>, redis: &Redis, how: &Settle, key: &HoldKey) -> Settled {
    let mut backoff = Duration::from_millis(50);
    loop {
        let Some(table) = leases.upgrade() else {
            return Settled::Gone;
        };
        let known = table.live_holds(key);
        match settle_once(redis, how, key, known).await {
            Ok(reply) => {
                let held = reply.as_i64().unwrap_or(0);
                if held > 0 && held as u64 > known || held < 0 {
                    tracing::info!(lock = %key.name, field = %key.field, held, kept = known, "settled holds of unknown outcome");
                } else if (held as u64) < known {
                    // The server kept fewer holds than this client has: the lease was lost.
                    table.lost_on_server(key);
                }
                return Settled::Found(Found { held, kept: known });
            }
            Err(err) => {
                let err = Error::from_redis(err, &key.name, redis.settings.response_timeout);
                if !err.is_transient() {
                    // A key of another type, say: there is no hold of ours to settle.
                    tracing::warn!(lock = %key.name, error = %err, "cannot settle a holder field of unknown outcome");
                    return Settled::Unsettled;
                }
                drop(table);
                tracing::debug!(lock = %key.name, error = %err, "settling waits for redis");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// One run of `how`'s script: brings `key` on the server down to `keep` holds (idempotent; see
/// lua/reconcile.lua). Replies the count the field had.
pub(crate) async fn settle_once(
    redis: &Redis,
    how: &Settle,
    key: &HoldKey,
    keep: u64,
) -> Result<fred::prelude::Value, fred::error::Error> {
    let keys = (how.keys)(&key.name);
    let layout_args = (how.layout_args)(&key.name);
    let keep = keep.to_string();
    // Some layouts keep deadlines in the clients' clocks (the fair queue's).
    let now = epoch_ms().to_string();
    let mut args = vec![&*key.field, &keep, redis.settings.publish_arg, &now];
    args.extend(layout_args.iter().map(String::as_str));
    how.script
        .run(&redis.pool, &redis.settings.write_options, &keys, &args)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(field: &str) -> HoldKey {
        HoldKey {
            name: "lock".into(),
            field: field.into(),
        }
    }

    #[tokio::test]
    async fn drain_waits_for_calls_of_the_previous_epoch_only() {
        let doubts = Doubts::new(CancellationToken::new());
        let before = doubts.enter();
        let drain = tokio::spawn({
            let doubts = Arc::clone(&doubts);
            async move { doubts.drain().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // A call registered after the epoch moved on does not hold the drain up.
        let after = doubts.enter();
        assert!(
            !drain.is_finished(),
            "a call of the previous epoch is alive"
        );
        drop(before);
        tokio::time::timeout(Duration::from_secs(1), drain)
            .await
            .expect("the drain ends once the earlier call ended")
            .expect("the drain task");
        drop(after);
    }

    #[tokio::test]
    async fn a_release_left_to_the_reconcile_makes_it_run_again() {
        let doubts = Doubts::new(CancellationToken::new());
        let (a, b) = (key("a"), key("b"));
        assert!(
            !doubts.take_release(&a, &mut None),
            "nothing in doubt: the release is sent"
        );
        doubts.mark(&a);
        assert!(doubts.contains(&a) && !doubts.contains(&b));
        assert!(doubts.take_release(&a, &mut None));
        assert!(!doubts.take_release(&b, &mut None));
        // The reconciler read round 0; the release bumped it, so it must settle again.
        assert!(!doubts.clear(&a, 0, None));
        assert!(doubts.clear(&a, 1, None));
        assert!(!doubts.any());
        tokio::time::timeout(Duration::from_millis(100), doubts.settled(&a))
            .await
            .expect("a settled field does not wait");
    }

    /// What a release's caller learns of the settling: proof only when the server still had
    /// every hold whose release was in doubt, and nothing else put the field in doubt.
    #[tokio::test]
    async fn a_settlement_proves_a_hold_only_when_the_server_still_had_it() {
        let doubts = Doubts::new(CancellationToken::new());
        let found = |held, kept| Some(Found { held, kept });
        // (releases in doubt, acquire in doubt too, what the reconcile found, proven)
        let cases = [
            (1, false, found(1, 0), true), // the release did not run: the hold was there
            (1, false, found(0, 0), false), // it ran, or the hold was lost before it
            (1, false, found(2, 1), true), // a partial release that did not run
            (1, false, found(1, 1), false), // a partial release that ran: not attributable
            (2, false, found(2, 0), true), // neither of two releases ran
            (2, false, found(1, 0), false), // one of them ran: which one is unknown
            (1, true, found(1, 0), false), // the extra hold may be the acquire's
            (1, false, found(-1, 0), false), // not a count
            (1, false, None, false),       // not settled (a key of another type)
        ];
        for (i, (releases, acquire, found, proven)) in cases.into_iter().enumerate() {
            let field = key(&format!("f{i}"));
            let mut settlements = Vec::new();
            if acquire {
                doubts.mark(&field);
            }
            for _ in 0..releases {
                let (settlement, watcher) = Settlement::new(&doubts);
                let mut watcher = Some(watcher);
                if !doubts.take_release(&field, &mut watcher) {
                    doubts.mark_release(&field, watcher);
                }
                settlements.push(settlement);
            }
            let round = doubts.fields.lock().get(&field).map(|f| f.round);
            assert!(doubts.clear(&field, round.expect("in doubt"), found));
            for settlement in settlements {
                assert_eq!(settlement.wait().await, Some(proven), "case {i}");
            }
        }
    }

    #[tokio::test]
    async fn a_settlement_ends_when_the_client_closes() {
        let closed = CancellationToken::new();
        let doubts = Doubts::new(closed.clone());
        let (settlement, watcher) = Settlement::new(&doubts);
        doubts.mark_release(&key("a"), Some(watcher));
        closed.cancel();
        assert_eq!(settlement.wait().await, None);
    }
}
