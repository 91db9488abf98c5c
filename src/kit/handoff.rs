//! Local hand-off: this client's waiters of a lock form a FIFO queue, and a full release by this
//! client hands the lock straight to the queue's head in the same script (`lua/release.lua`
//! with a receiving field; the write lock's `write_release` and the fair lock's release
//! likewise, the latter only to the head of the lock's queue in Redis), or, for a semaphore's
//! permits, with no script at all ([`Handoffs::hand_permits`]). A release hands over only what
//! the waiter's own acquire would have written ([`Receives`]).
//!
//! Why: under contention inside one process, a plain release (DEL + PUBLISH) is followed by a
//! race between the woken waiter's retry and the releasing task's own next acquire, which the
//! releaser usually wins: throughput goes to failed retries and one task starves the others.
//! A hand-off costs one script call instead of two, never leaves the lock free, and serves
//! local waiters in arrival order.
//!
//! Fairness towards other clients: while local hand-offs chain, the lock never looks free to
//! them. After `max_local_handoffs` consecutive hand-offs the next release is a plain one, which
//! publishes the unlock message so that waiters of every client race for the lock again, and
//! this client gives way in that race when its message reached them (`give_way.rs`).
//!
//! Unless nobody else listens: with `PUBLISH` on a single server or sentinel, that release is
//! sent as a conditional hand-off instead (`lua/release.lua`'s `own`), which frees the lock only
//! if the unlock channel has a subscriber besides this client's own (another client's waiter,
//! or any pattern subscriber), and otherwise hands over and starts a new budget. A plain release
//! with nobody else to hear it would only make the local heir retry: two round trips instead
//! of one (at 2 tasks the slowest 6 % of acquisitions, the whole p99). Waiters of other clients
//! that do not subscribe on this server (pollers, such as a Java spin lock, or subscribers on a
//! replica) cannot be seen, so every `BUDGETS_PER_PLAIN_RELEASE` budgets the release is plain
//! regardless. In a cluster, or with `SPUBLISH`, a subscriber can sit on another node, and every
//! budget ends with a plain release as before.
//!
//! Queueing behind local waiters: an acquire that starts while other owners of this client are
//! in line for the lock takes its place at the back without a first attempt (`lock/wait.rs`,
//! step 0); a waiter whose first attempt was refused takes its place at once, marked
//! `Retrying`. So a task that releases and asks again at once lines up behind the local
//! waiters instead of racing them, also behind one whose own attempt is still out (then its
//! release was a plain one, and that attempt or its retry after the unlock message wins).
//!
//! A queue slot moves through these states, always under the queue's mutex:
//! `Queued` → (a releaser takes it) `Taken` → `Owned` (the script gave the lock to the slot's
//! field) or back to `Queued` (it did not). The waiter marks its slot `Retrying` while it runs
//! an acquire attempt of its own, so that a hand-off and an attempt never overlap (which could
//! count one hold twice). A waiter that goes away leaves `Abandoned` behind if a hand-off is in
//! flight, and whoever ends up with a hold nobody owns releases it. The line's timer marks the
//! `Queued` slots it wakes `Expired` (queued still, for releasers), which the waiter reads and
//! turns back into `Queued` when it wakes ([`Place::wake_at`]).
//!
//! A waiter with no bound of its own (`lock()`) keeps no timer for the lock's TTL: its line's
//! timer fires at the earliest TTL bound the line's waiters asked for and wakes them all, so a
//! parked waiter's task is 112 bytes smaller (tokio's `Sleep`), which saves a step of its task
//! cell. One task per client fires every line's timer (`run_timers`): a line costs no task of
//! its own, which a line that empties and fills again at every hand-off (two tasks taking
//! turns) would spawn each time.

use arcstr::ArcStr;
use std::collections::{BTreeMap, VecDeque};

use foldhash::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::kit::janitor::Release;
use crate::transport::pubsub::PubSub;
use crate::transport::script::{GiveBackScript, Heir, ReleaseScript};

use super::give_way::{GiveWay, PlainRelease};
use super::local_state::LocalWaiterState;

/// Budgets of hand-offs (of `max_local_handoffs` each) that conditional hand-offs may chain
/// before a plain release regardless (see the module docs): at the default budget, one plain
/// release every 256 hand-offs.
const BUDGETS_PER_PLAIN_RELEASE: u32 = 16;

/// The per-client registry of local wait queues, one per lock with local waiters.
pub(crate) struct Handoffs {
    queues: Mutex<HashMap<ArcStr, Arc<Queue>>>,
    max_in_row: u32,
    /// Whether a spent budget may end in a conditional hand-off: only where this server sees
    /// every subscriber of the unlock channel (`PUBLISH` mode, no cluster).
    conditional: bool,
    /// Giving way to other clients' waiters after a plain release (`give_way.rs`).
    pub(crate) give_way: GiveWay,
    /// The lines' TTL timers ([`Place::wake_at`]), fired by [`run_timers`].
    pub(crate) timers: Arc<LineTimers>,
}

/// When each line's timer fires, for the one task that fires them all ([`run_timers`]): a line
/// with a pending instant has one entry, keyed by the instant and the line's id.
#[derive(Default)]
pub(crate) struct LineTimers {
    due: Mutex<BTreeMap<(Instant, u64), Weak<Queue>>>,
    /// An instant earlier than every other was asked for.
    changed: Notify,
    /// The next line's id.
    ids: AtomicU64,
}

struct Queue {
    slots: Mutex<VecDeque<Arc<Slot>>>,
    /// Hand-offs in a row without a plain release (see the module docs), conditional ones
    /// included.
    in_row: AtomicU32,
    /// When the lock expires, as last learned by a waiter's refused attempt: a waiter that lines
    /// up without an attempt of its own bounds its wait by it.
    expires: Mutex<Option<Instant>>,
    /// When the line's timer fires for its waiters' TTL bounds ([`Place::wake_at`]).
    timer: Mutex<Option<Instant>>,
    /// The line's key in `timers`.
    id: u64,
    timers: Arc<LineTimers>,
}

impl Drop for Queue {
    fn drop(&mut self) {
        if let Some(at) = *self.timer.get_mut() {
            self.timers.due.lock().remove(&(at, self.id));
        }
    }
}

struct Slot {
    field: ArcStr,
    lease_ms: u64,
    /// The waiter's wait time in its lock's queue in Redis (the fair lock's; 0 for others).
    wait_ms: u64,
    /// A reference rather than the value: 8 bytes of every parked waiter's slot, not 16.
    receives: &'static Receives,
    state: Mutex<SlotState>,
    notify: Notify,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Queued,
    /// Queued, and woken by the line's timer since (see [`Place::wake_at`]): a releaser may
    /// take it as a queued one.
    Expired,
    Retrying,
    Taken,
    /// The lock was handed over; the instant is from before the transfer was sent, and the
    /// number is the fencing token the transfer took (0 for a waiter that takes none).
    Owned(Instant, u64),
    Abandoned,
}

/// A waiter's place in a lock's local queue. Dropping it leaves the queue (and releases a hold
/// that was handed over but never adopted).
pub(crate) struct Place {
    handoffs: Arc<Handoffs>,
    name: ArcStr,
    queue: Arc<Queue>,
    slot: Arc<Slot>,
    janitor: crate::kit::janitor::Janitor,
}

/// What a waiter's own acquire would write, and so what a hand-off to it must write: a release
/// hands the lock only to a waiter whose primitive it can serve (the lock's name is the same for
/// every primitive of a client, so a queue may mix them).
#[derive(Clone, Copy, Debug)]
pub enum Receives {
    /// A hold on the reentrant lock's hash (the reentrant and non-reentrant locks), which a
    /// release by `RELEASE` of any primitive on that hash hands over.
    Hold,
    /// A hold on that hash and the lock's next fencing token (the fenced lock), which
    /// `RELEASE` takes in the same script.
    FencedHold,
    /// A hold that only the primitive's own release script hands over, and releases (the write
    /// lock's: `mode` = write and the writer's field).
    HoldOf(&'static ReleaseScript),
    /// A hold that only the primitive's own release script hands over, and only to the waiter
    /// at the head of the lock's queue in Redis (the fair locks'): the script runs the heir's
    /// acquire there, or, with another head, releases plainly. Such waiters always try first,
    /// which queues them in Redis.
    HeadOfQueue(&'static ReleaseScript),
    /// A semaphore's permits, the number its waiter asks for, which a guard of this client
    /// gives straight to it instead of back to Redis ([`Handoffs::hand_permits`]); a waiter
    /// that left before taking them gives them back with this script.
    Permits(&'static GiveBackScript),
}

impl Receives {
    /// Whether a release by `script` (`None`: `RELEASE`) can hand the lock to such a waiter.
    fn from(self, script: Option<&'static ReleaseScript>) -> bool {
        match (self, script) {
            (Receives::Hold | Receives::FencedHold, None) => true,
            (Receives::HoldOf(own) | Receives::HeadOfQueue(own), Some(script)) => {
                std::ptr::eq(own, script)
            }
            _ => false,
        }
    }

    /// Whether such a waiter always runs an attempt before it lines up (no step 0 in
    /// `wait.rs`): a semaphore's permits may be free while the waiters in line ask for more, and
    /// only an attempt queues a fair lock's waiter in Redis.
    pub(crate) fn tries_first(self) -> bool {
        matches!(self, Receives::Permits(_) | Receives::HeadOfQueue(_))
    }

    /// Whether such a waiter listens on a channel of its own (the fair locks'), which no
    /// earlier waiter left subscribed.
    pub(crate) fn own_channel(self) -> bool {
        matches!(self, Receives::HeadOfQueue(_))
    }

    /// The release script of such a hold (`None`: `RELEASE`).
    fn release_script(self) -> Option<&'static ReleaseScript> {
        match self {
            Receives::HoldOf(script) | Receives::HeadOfQueue(script) => Some(script),
            _ => None,
        }
    }
}

/// What a waiter finds when it looks at its place.
pub(crate) enum Turn {
    /// The lock was handed over: adopt the hold (the instant is from before it was sent; the
    /// number is the fencing token the hand-off took, 0 for a waiter that takes none).
    Owned(Instant, u64),
    /// Free to run an attempt (the place is marked `Retrying` until [`Place::requeue`]).
    Retry,
}

/// A releaser's claim on the head waiter, settled with [`Claim::settle`].
pub(crate) struct Claim {
    queue: Arc<Queue>,
    slot: Arc<Slot>,
    pub(crate) sent_at: Instant,
    /// A conditional hand-off, which frees the lock when other clients listen.
    pub(crate) conditional: bool,
}

impl Handoffs {
    /// `max_in_row`: consecutive hand-offs before a plain release; 0 disables hand-offs and
    /// giving way (every release then frees the lock for a race, as Redisson's do).
    /// `conditional`: whether a spent budget may end in a conditional hand-off instead (only
    /// when the server sees every subscriber of a lock's channel: `PUBLISH`, no cluster).
    pub(crate) fn new(max_in_row: u32, conditional: bool, pubsub: PubSub) -> Handoffs {
        Handoffs {
            queues: Mutex::new(HashMap::default()),
            max_in_row,
            conditional,
            give_way: GiveWay::new(pubsub),
            timers: Arc::new(LineTimers::default()),
        }
    }

    /// Call before a plain release of lock `name` announced on `channel` (`local_waiters`: as
    /// [`Handoffs::claim`] reported): settle the result with the release's reply (see
    /// `give_way.rs`). `None` when giving way is off.
    pub(crate) fn plain_release(
        &self,
        name: &ArcStr,
        channel: impl FnOnce() -> String,
        local_waiters: bool,
    ) -> Option<PlainRelease<'_>> {
        (self.max_in_row > 0).then(|| self.give_way.releasing(name, channel(), local_waiters))
    }

    /// Whether this client has waiters of lock `name` in line (waiting, retrying, or being
    /// handed the lock).
    pub(crate) fn contended(&self, name: &str) -> bool {
        self.queues
            .lock()
            .get(name)
            .is_some_and(|queue| !queue.slots.lock().is_empty())
    }

    /// How many waiters of lock `name` this client has in line.
    pub(crate) fn in_line(&self, name: &str) -> usize {
        self.queues
            .lock()
            .get(name)
            .map_or(0, |queue| queue.slots.lock().len())
    }

    /// This client's line for lock `name`, head first, with each slot's state, and the
    /// hand-offs in a row (for [`Client::local_state`](crate::Client::local_state)).
    pub(crate) fn snapshot(&self, name: &str) -> (Vec<(ArcStr, LocalWaiterState)>, u32) {
        let Some(queue) = self.queues.lock().get(name).cloned() else {
            return (Vec::new(), 0);
        };
        let line = queue
            .slots
            .lock()
            .iter()
            .map(|slot| {
                let state = match *slot.state.lock() {
                    SlotState::Queued | SlotState::Expired => LocalWaiterState::Parked,
                    SlotState::Retrying => LocalWaiterState::Trying,
                    SlotState::Taken => LocalWaiterState::BeingHandedOver,
                    SlotState::Owned(..) => LocalWaiterState::HandedOver,
                    SlotState::Abandoned => LocalWaiterState::Left,
                };
                (ArcStr::clone(&slot.field), state)
            })
            .collect();
        (line, queue.in_row.load(Ordering::Relaxed))
    }

    /// Joins the local queue of lock `name` at the back, as `holder`: `retrying` while the
    /// caller still has an attempt of its own to run (no hand-off may reach it before
    /// [`Place::requeue`]); `receives`: what a hand-off to it writes.
    pub(crate) fn join(
        self: &Arc<Self>,
        name: &ArcStr,
        holder: &super::wait::Holder<'_>,
        receives: &'static Receives,
        retrying: bool,
        janitor: &crate::kit::janitor::Janitor,
    ) -> Option<Place> {
        if self.max_in_row == 0 {
            return None;
        }
        let state = if retrying {
            SlotState::Retrying
        } else {
            SlotState::Queued
        };
        let slot = Arc::new(Slot {
            field: ArcStr::clone(holder.field),
            lease_ms: holder.lease_ms,
            wait_ms: holder.wait_ms,
            receives,
            state: Mutex::new(state),
            notify: Notify::new(),
        });
        let queue = {
            let mut queues = self.queues.lock();
            let queue = queues.entry(ArcStr::clone(name)).or_insert_with(|| {
                Arc::new(Queue {
                    slots: Mutex::new(VecDeque::new()),
                    in_row: AtomicU32::new(0),
                    expires: Mutex::new(None),
                    timer: Mutex::new(None),
                    id: self.timers.ids.fetch_add(1, Ordering::Relaxed),
                    timers: Arc::clone(&self.timers),
                })
            });
            queue.slots.lock().push_back(Arc::clone(&slot));
            Arc::clone(queue)
        };
        Some(Place {
            handoffs: Arc::clone(self),
            name: ArcStr::clone(name),
            queue,
            slot,
            janitor: janitor.clone(),
        })
    }

    /// Claims the first waiting slot of lock `name` that a release by `script` can serve for a
    /// hand-off, unless hand-offs are off or the fairness budget is spent (then, where allowed,
    /// the hand-off is a conditional one, which needs the lock's unlock `channel`). Returns
    /// the claim and the heir to name in the release, or (the caller does a plain release)
    /// whether this client has waiters of the lock.
    pub(crate) fn claim(
        &self,
        name: &str,
        script: Option<&'static ReleaseScript>,
        channel: impl FnOnce() -> String,
    ) -> Result<(Claim, Heir), bool> {
        let Some(queue) = self.queues.lock().get(name).cloned() else {
            return Err(false);
        };
        let in_row = queue.in_row.load(Ordering::Relaxed);
        let spent = in_row >= self.max_in_row;
        if spent
            && (!self.conditional
                || in_row >= self.max_in_row.saturating_mul(BUDGETS_PER_PLAIN_RELEASE))
        {
            queue.in_row.store(0, Ordering::Relaxed);
            return Err(true);
        }
        // Once per budget: at the end of each one that ended in a conditional hand-off.
        let conditional = spent && in_row % self.max_in_row.max(1) == 0;
        let slot = {
            let slots = queue.slots.lock();
            let slot = slots.iter().find(|slot| {
                if !slot.receives.from(script) {
                    return false;
                }
                let mut state = slot.state.lock();
                let waiting = matches!(*state, SlotState::Queued | SlotState::Expired);
                if waiting {
                    *state = SlotState::Taken;
                }
                waiting
            });
            match slot {
                Some(slot) => Arc::clone(slot),
                // Every waiter is running an attempt of its own (they race for the lock), or
                // takes no hand-off from this release.
                None => return Err(true),
            }
        };
        let own_listeners = if conditional {
            self.give_way.own_listeners(&channel())
        } else {
            0
        };
        let heir = Heir {
            field: ArcStr::clone(&slot.field),
            lease_ms: slot.lease_ms,
            conditional,
            own_listeners,
            fenced: matches!(*slot.receives, Receives::FencedHold),
            wait_ms: slot.wait_ms,
        };
        let claim = Claim {
            queue,
            slot,
            sent_at: Instant::now(),
            conditional,
        };
        Ok((claim, heir))
    }

    /// Hands up to `permits` permits of semaphore `name` (given back by a guard of this
    /// client) to this client's waiters in line for them, head first, each taking the number it
    /// asks for, while the hand-off budget lasts (the same budget as a lock's: a spent one gives
    /// every permit back, so that other clients' waiters get their turn). No call to Redis: the
    /// permits stay taken there, and change hands here. Returns how many were handed over; the
    /// caller gives back the rest.
    pub(crate) fn hand_permits(&self, name: &str, permits: u64) -> u64 {
        let Some(queue) = self.queues.lock().get(name).cloned() else {
            return 0;
        };
        let mut handed = 0;
        let slots = queue.slots.lock();
        for slot in slots.iter() {
            if !matches!(*slot.receives, Receives::Permits(_)) {
                continue;
            }
            let mut state = slot.state.lock();
            // A waiter running an attempt of its own takes nothing now.
            if !matches!(*state, SlotState::Queued | SlotState::Expired) {
                continue;
            }
            // In line order: a later waiter never takes what an earlier one is owed.
            if slot.lease_ms > permits - handed {
                break;
            }
            if queue.in_row.load(Ordering::Relaxed) >= self.max_in_row {
                queue.in_row.store(0, Ordering::Relaxed);
                break;
            }
            queue.in_row.fetch_add(1, Ordering::Relaxed);
            *state = SlotState::Owned(Instant::now(), 0);
            drop(state);
            handed += slot.lease_ms;
            slot.notify.notify_one();
            crate::metrics::handed_off();
        }
        handed
    }

    fn leave(&self, name: &ArcStr, queue: &Arc<Queue>, slot: &Arc<Slot>) {
        let mut queues = self.queues.lock();
        let mut slots = queue.slots.lock();
        // Mostly the head leaves (FIFO service): O(1) then, not a scan of every waiter.
        if slots.front().is_some_and(|head| Arc::ptr_eq(head, slot)) {
            slots.pop_front();
        } else {
            slots.retain(|other| !Arc::ptr_eq(other, slot));
        }
        if slots.is_empty() && queues.get(name).is_some_and(|q| Arc::ptr_eq(q, queue)) {
            queues.remove(name);
        }
    }
}

impl Claim {
    /// Settles the hand-off after the transfer script replied: `handed` with the fencing token
    /// it took (0 for none) when the lock now belongs to the claimed slot's field. Returns a
    /// hold that nobody owns (the waiter left meanwhile), which the caller must release.
    pub(crate) fn settle(self, handed: Option<u64>) -> Option<u64> {
        if self.conditional && handed.is_none() {
            // Freed for other clients' waiters: a new budget starts.
            self.queue.in_row.store(0, Ordering::Relaxed);
        }
        let mut state = self.slot.state.lock();
        match *state {
            SlotState::Taken => {
                *state = if let Some(token) = handed {
                    self.queue.in_row.fetch_add(1, Ordering::Relaxed);
                    SlotState::Owned(self.sent_at, token)
                } else {
                    SlotState::Queued
                };
                drop(state);
                // The waiter adopts the hold, or may be waiting out the hand-off in `turn`.
                self.slot.notify.notify_one();
                None
            }
            SlotState::Abandoned if handed.is_some() => Some(self.slot.lease_ms),
            _ => None,
        }
    }
}

impl Place {
    /// Resolves when a releaser may have handed the lock over.
    ///
    /// # Cancel safety
    /// Cancel safe: a notification is stored until the next call.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.slot.notify.notified()
    }

    /// Looks at the place after any wake-up. An in-flight hand-off is waited out first, so that
    /// the caller never runs an attempt while it may be receiving the lock.
    pub(crate) async fn turn(&self) -> Turn {
        loop {
            {
                let mut state = self.slot.state.lock();
                match *state {
                    SlotState::Owned(sent_at, token) => return Turn::Owned(sent_at, token),
                    SlotState::Queued | SlotState::Expired | SlotState::Retrying => {
                        *state = SlotState::Retrying;
                        return Turn::Retry;
                    }
                    SlotState::Taken | SlotState::Abandoned => {}
                }
            }
            self.slot.notify.notified().await;
        }
    }

    /// Records when the lock expires, as a refused attempt of this waiter just learned.
    pub(crate) fn note_expiry(&self, at: Instant) {
        *self.queue.expires.lock() = Some(at);
    }

    /// When the lock expires, as the last refused attempt of a waiter in this line learned.
    pub(crate) fn known_expiry(&self) -> Option<Instant> {
        *self.queue.expires.lock()
    }

    /// Wakes this waiter at `at` at the latest, as a TTL bound would, by the line's one timer
    /// rather than a timer of its own: a parked waiter's future then keeps no timer (112 bytes
    /// of every parked task). The timer fires at the earliest instant its waiters asked for and
    /// wakes every waiter then in line and not running an attempt ([`Place::take_expired`]
    /// tells it so); a waiter woken before its own bound retries early, which is harmless.
    /// One task per client fires every line's timer ([`run_timers`]).
    pub(crate) fn wake_at(&self, at: Instant) {
        let queue = &self.queue;
        let mut pending = queue.timer.lock();
        if pending.is_some_and(|pending| pending <= at) {
            return;
        }
        let timers = &queue.timers;
        let mut due = timers.due.lock();
        if let Some(earlier) = pending.replace(at) {
            due.remove(&(earlier, queue.id));
        }
        let first = due.keys().next().is_none_or(|&(next, _)| at < next);
        due.insert((at, queue.id), Arc::downgrade(queue));
        drop((due, pending));
        if first {
            timers.changed.notify_one();
        }
    }

    /// Whether the line's timer woke this waiter since it last asked (see [`Place::wake_at`]).
    pub(crate) fn take_expired(&self) -> bool {
        let mut state = self.slot.state.lock();
        let expired = *state == SlotState::Expired;
        if expired {
            *state = SlotState::Queued;
        }
        expired
    }

    /// Back in line (keeping the place) after an attempt that did not acquire.
    pub(crate) fn requeue(&self) {
        let mut state = self.slot.state.lock();
        if *state == SlotState::Retrying {
            *state = SlotState::Queued;
        }
    }

    /// Leaves the queue after the hold was adopted (or acquired by an attempt).
    pub(crate) fn done(self) {
        *self.slot.state.lock() = SlotState::Retrying; // nothing for Drop to release
        drop(self);
    }
}

/// Fires the lines' timers (see [`Place::wake_at`]): sleeps until the earliest instant asked
/// for, then wakes the waiters of each line that is due and not running an attempt. One task
/// per client, until `stop`; lines are held weakly, and a dropped line takes its entry along.
pub(crate) async fn run_timers(timers: Arc<LineTimers>, stop: tokio_util::sync::CancellationToken) {
    loop {
        let next = timers.due.lock().keys().next().map(|&(at, _)| at);
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            // An earlier instant: look again.
            () = timers.changed.notified() => continue,
            () = sleep => {}
        }
        let now = Instant::now();
        let fired = {
            let mut due = timers.due.lock();
            let later = due.split_off(&(now, u64::MAX));
            std::mem::replace(&mut *due, later)
        };
        for queue in fired.into_values().filter_map(|queue| queue.upgrade()) {
            queue.fire(now);
        }
    }
}

impl Queue {
    /// Wakes the line's waiters if its timer is due at `now` (an entry may be stale: the line
    /// asked for an earlier instant since, which fired already).
    fn fire(&self, now: Instant) {
        {
            let mut pending = self.timer.lock();
            if pending.is_none_or(|at| at > now) {
                return;
            }
            *pending = None;
        }
        for slot in self.slots.lock().iter() {
            let mut state = slot.state.lock();
            if *state == SlotState::Queued {
                *state = SlotState::Expired;
                drop(state);
                slot.notify.notify_one();
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let orphan = {
            let mut state = self.slot.state.lock();
            let orphan = match *state {
                // Handed over but never adopted: release it here.
                SlotState::Owned(..) => Some(self.slot.lease_ms),
                // `Taken`: a releaser is handing the lock over right now and, finding the slot
                // abandoned, releases it itself. `Queued`/`Retrying`: marked abandoned before
                // the slot leaves the queue, so that no releaser can claim it in between.
                _ => None,
            };
            *state = SlotState::Abandoned;
            orphan
        };
        self.handoffs.leave(&self.name, &self.queue, &self.slot);
        let Some(lease_ms) = orphan else {
            return;
        };
        if let Receives::Permits(by) = *self.slot.receives {
            tracing::debug!(semaphore = %self.name, "giving back permits handed to a waiter that left");
            self.janitor.submit(crate::kit::janitor::Job::GiveBack {
                name: ArcStr::clone(&self.name),
                permits: lease_ms,
                by,
            });
            return;
        }
        tracing::debug!(lock = %self.name, "releasing a handed-over lock whose waiter left");
        let release = Release {
            name: ArcStr::clone(&self.name),
            field: ArcStr::clone(&self.slot.field),
            lease_ms,
            script: self.slot.receives.release_script(),
        };
        self.janitor
            .submit(crate::kit::janitor::Job::Release(release, None, None));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arcstr::ArcStr;
    use std::time::Duration;

    use tokio::time::{timeout, Instant};

    use super::{Handoffs, Receives};
    use crate::config::{PublishMode, WhenUnavailable};
    use crate::kit::janitor::Janitor;
    use crate::kit::wait::Holder;
    use crate::transport::pubsub::PubSub;

    /// The lines' timer task fires a line at the earliest instant its waiters asked for and
    /// wakes each of them once (and says so); a dropped line takes its pending entry along, and
    /// the task ends when the client stops.
    #[tokio::test]
    async fn the_lines_timer_wakes_waiters_and_forgets_dropped_lines() {
        // Clients that never connect: nothing here talks to Redis.
        let builder = fred::types::Builder::default_centralized();
        let (Ok(subscriber), Ok(commands)) =
            (builder.build_subscriber_client(), builder.build_pool(1))
        else {
            panic!("fred builds unconnected clients from its default config");
        };
        let (watched, _watched) = tokio::sync::mpsc::unbounded_channel();
        let stop = tokio_util::sync::CancellationToken::new();
        let (pubsub, _tasks) = PubSub::start(
            subscriber,
            commands,
            PublishMode::Classic,
            WhenUnavailable::KeepWaiting,
            Duration::from_secs(5),
            watched,
            stop.clone(),
        );
        let handoffs = Arc::new(Handoffs::new(8, false, pubsub));
        let timers = tokio::spawn(super::run_timers(
            Arc::clone(&handoffs.timers),
            stop.clone(),
        ));
        let (janitor, _jobs) = Janitor::detached();
        let fields: [ArcStr; 3] = ["client:1".into(), "client:2".into(), "client:3".into()];
        let place = |name: &ArcStr, field| {
            let holder = Holder {
                field,
                lease_ms: 1_000,
                wait_ms: 0,
            };
            handoffs.join(name, &holder, &Receives::Hold, false, &janitor)
        };
        let (a, b): (ArcStr, ArcStr) = ("a".into(), "b".into());
        let (Some(first), Some(second), Some(other)) = (
            place(&a, &fields[0]),
            place(&a, &fields[1]),
            place(&b, &fields[2]),
        ) else {
            panic!("hand-offs are on: every waiter gets a place");
        };
        let asked_at = Instant::now();
        second.wake_at(asked_at + Duration::from_secs(60));
        first.wake_at(asked_at + Duration::from_millis(50));
        other.wake_at(asked_at + Duration::from_secs(60));
        let pending = || handoffs.timers.due.lock().len();
        assert_eq!(pending(), 2, "one entry per line, at its earliest instant");
        for place in [&first, &second] {
            timeout(Duration::from_secs(5), place.notified())
                .await
                .expect("woken by the line's timer at the earliest instant asked for");
            assert!(place.take_expired(), "the wake-up says it was the timer's");
            assert!(!place.take_expired(), "and says so once");
        }
        assert!(asked_at.elapsed() >= Duration::from_millis(50));
        assert!(!other.take_expired(), "another line's timer is not due");
        assert_eq!(pending(), 1);

        drop(other);
        assert_eq!(pending(), 0, "a dropped line takes its entry along");
        stop.cancel();
        timeout(Duration::from_secs(5), timers)
            .await
            .expect("the timers' task ends when the client stops")
            .expect("the task ran to its end");
    }
}
