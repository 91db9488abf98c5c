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
//!    given up as lost) and runs `lua/reconcile.lua`, which brings the field down to that count
//!    and never adds a hold (freeing and announcing the lock when the count is 0). A server
//!    count below the client's means the holds were lost: their guards are told.
//!    One script serves every hash layout that shares this machinery, told apart by what it
//!    finds on the server (a [`HoldKey`] is only a name and a field, and the layout is what the
//!    lock's waiters listen by): a hash with `mode` is a read-write lock (its read holds'
//!    timeout keys go with them, a hash without live holders is deleted, the rwlock channel is
//!    told), a reentrant hash with a fair queue is a fair lock (the queue's head is told on its
//!    own channel), any other is the reentrant lock's.
//!
//! Until the field is settled, acquires by it wait (within their own bounds, or fail at once
//! with `FailFast` while Redis is unreachable), and releases of it are not sent: the reconcile
//! does their work, and a release that arrives meanwhile makes the reconciler run once more with
//! the new count. Hand-offs pause while any field is in doubt. The reconcile is idempotent, so
//! unlike the lock scripts it is retried until Redis answers (or the client shuts down).
//!
//! Outside doubts the cost is a registration per call (two atomic operations) and one atomic
//! load per acquire and release.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use foldhash::HashMap;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::lease::watchdog::{HoldKey, LeaseTable};
use crate::name;
use crate::transport::script;
use crate::transport::Redis;

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

/// The holder fields in doubt and the epochs of lock-changing calls.
pub(crate) struct Doubts {
    /// Field in doubt → its round, bumped whenever the field's count changes while in doubt (a
    /// release left to the reconcile, a new failure), so that the reconciler runs again.
    fields: Mutex<HashMap<HoldKey, u64>>,
    /// `fields.len()`, readable without the lock: the fast path when nothing is in doubt.
    count: AtomicUsize,
    /// The current epoch; calls register in slot `epoch % 2`.
    epoch: AtomicUsize,
    active: [AtomicUsize; 2],
    /// Notified when a slot drains.
    drained: Notify,
    /// Notified when a field is marked (wakes the reconciler) or settled (wakes waiters).
    changed: Notify,
    closed: CancellationToken,
}

/// A lock-changing call in progress: while any call registered before a doubt was visible is
/// alive, the reconciler does not read the client's count.
pub(crate) struct Call {
    doubts: Arc<Doubts>,
    slot: usize,
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.doubts.active[self.slot].fetch_sub(1, Ordering::SeqCst) == 1 {
            self.doubts.drained.notify_waiters();
        }
    }
}

impl Doubts {
    pub(crate) fn new(closed: CancellationToken) -> Arc<Doubts> {
        Arc::new(Doubts {
            fields: Mutex::new(HashMap::default()),
            count: AtomicUsize::new(0),
            epoch: AtomicUsize::new(0),
            active: [AtomicUsize::new(0), AtomicUsize::new(0)],
            drained: Notify::new(),
            changed: Notify::new(),
            closed,
        })
    }

    /// Registers a lock-changing call; keep the `Call` until its reply is handled.
    pub(crate) fn enter(self: &Arc<Self>) -> Call {
        loop {
            let epoch = self.epoch.load(Ordering::SeqCst);
            let slot = epoch % 2;
            self.active[slot].fetch_add(1, Ordering::SeqCst);
            if self.epoch.load(Ordering::SeqCst) == epoch {
                return Call {
                    doubts: Arc::clone(self),
                    slot,
                };
            }
            // The reconciler moved on meanwhile: register in the new epoch instead.
            if self.active[slot].fetch_sub(1, Ordering::SeqCst) == 1 {
                self.drained.notify_waiters();
            }
        }
    }

    /// Whether any field is in doubt.
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }

    /// Whether `key` is in doubt.
    pub(crate) fn contains(&self, key: &HoldKey) -> bool {
        self.any() && self.fields.lock().contains_key(key)
    }

    /// Puts `key` in doubt (or, if it is already, makes the reconciler settle it once more).
    pub(crate) fn mark(&self, key: &HoldKey) {
        let mut fields = self.fields.lock();
        match fields.get_mut(key) {
            Some(round) => *round += 1,
            None => {
                tracing::debug!(lock = %key.name, field = %key.field, "outcome unknown; settling the holder field");
                fields.insert(key.clone(), 0);
                self.count.store(fields.len(), Ordering::SeqCst);
            }
        }
        drop(fields);
        self.changed.notify_waiters();
    }

    /// Leaves a release of `key` to the reconcile if `key` is in doubt; returns whether it did.
    pub(crate) fn take_release(&self, key: &HoldKey) -> bool {
        if !self.any() {
            return false;
        }
        let mut fields = self.fields.lock();
        match fields.get_mut(key) {
            Some(round) => {
                *round += 1;
                drop(fields);
                self.changed.notify_waiters();
                true
            }
            None => false,
        }
    }

    /// Waits until `key` is no longer in doubt, or the client closes.
    pub(crate) async fn settled(&self, key: &HoldKey) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !self.contains(key) || self.closed.is_cancelled() {
                return;
            }
            tokio::select! {
                _ = changed => {}
                _ = self.closed.cancelled() => return,
            }
        }
    }

    /// Clears `key` if its round is still `round`; returns whether it did.
    fn clear(&self, key: &HoldKey, round: u64) -> bool {
        let mut fields = self.fields.lock();
        if fields.get(key) != Some(&round) {
            return false;
        }
        fields.remove(key);
        self.count.store(fields.len(), Ordering::SeqCst);
        drop(fields);
        self.changed.notify_waiters();
        true
    }

    /// Moves to the next epoch and waits until every call of the previous one has ended.
    async fn drain(&self) {
        let previous = self.epoch.fetch_add(1, Ordering::SeqCst) % 2;
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.active[previous].load(Ordering::SeqCst) == 0 {
                return;
            }
            drained.await;
        }
    }
}

/// The reconciler task: settles fields in doubt, one round at a time, until the client closes.
pub(crate) async fn run(doubts: Arc<Doubts>, leases: Weak<LeaseTable>, redis: Arc<Redis>) {
    loop {
        let changed = doubts.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let due: Vec<(HoldKey, u64)> = doubts
            .fields
            .lock()
            .iter()
            .map(|(key, round)| (key.clone(), *round))
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
            let settle = settle(&leases, &redis, &key);
            tokio::select! {
                settled = settle => if !settled { return },
                _ = doubts.closed.cancelled() => return,
            }
            doubts.clear(&key, round);
        }
    }
}

/// Brings `key` on the server down to the holds the client knows of, retrying (with back-off)
/// until Redis answers. Returns false when the client is gone.
async fn settle(leases: &Weak<LeaseTable>, redis: &Redis, key: &HoldKey) -> bool {
    let name = &*key.name;
    let keys = [name.to_owned(), name::lock_channel(name)];
    // The other layouts' names go as arguments: see the script's header on ACLs.
    let layouts = [
        name::rwlock_channel(name),
        name::fair_queue_key(name),
        name::fair_timeout_key(name),
        name::tagged(name),
    ];
    let mut backoff = Duration::from_millis(50);
    loop {
        let Some(table) = leases.upgrade() else {
            return false;
        };
        let known = table.live_holds(key);
        let keep = known.to_string();
        // The fair queue's deadlines are the clients' clocks (see `lock/fair.rs`).
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis())
            .to_string();
        let mut args = vec![&*key.field, &keep, redis.publish_arg, &now];
        args.extend(layouts.iter().map(String::as_str));
        let reply = script::RECONCILE
            .run(&redis.pool, &redis.write_options, &keys, &args)
            .await;
        match reply {
            Ok(reply) => {
                let held = reply.as_i64().unwrap_or(0);
                if held > 0 && held as u64 > known || held < 0 {
                    tracing::info!(lock = %key.name, field = %key.field, held, kept = known, "settled holds of unknown outcome");
                } else if (held as u64) < known {
                    // The server kept fewer holds than this client has: the lease was lost.
                    table.lost_on_server(key);
                }
                return true;
            }
            Err(err) => {
                let err = Error::from_redis(err, &key.name, redis.response_timeout);
                if !err.is_transient() {
                    // A key of another type, say: there is no hold of ours to settle.
                    tracing::warn!(lock = %key.name, error = %err, "cannot settle a holder field of unknown outcome");
                    return true;
                }
                drop(table);
                tracing::debug!(lock = %key.name, error = %err, "settling waits for redis");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
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
            !doubts.take_release(&a),
            "nothing in doubt: the release is sent"
        );
        doubts.mark(&a);
        assert!(doubts.contains(&a) && !doubts.contains(&b));
        assert!(doubts.take_release(&a));
        assert!(!doubts.take_release(&b));
        // The reconciler read round 0; the release bumped it, so it must settle again.
        assert!(!doubts.clear(&a, 0));
        assert!(doubts.clear(&a, 1));
        assert!(!doubts.any());
        tokio::time::timeout(Duration::from_millis(100), doubts.settled(&a))
            .await
            .expect("a settled field does not wait");
    }
}
