//! Local hand-off: this client's waiters of a lock form a FIFO queue, and a full release by this
//! client hands the lock straight to the queue's head in the same script (`lua/release.lua`
//! with a receiving field).
//!
//! Why: under contention inside one process, a plain release (DEL + PUBLISH) is followed by a
//! race between the woken waiter's retry and the releasing task's own next acquire, which the
//! releaser usually wins: throughput goes to failed retries and one task starves the others.
//! A hand-off costs one script call instead of two, never leaves the lock free, and serves
//! local waiters in arrival order.
//!
//! Fairness towards other clients: while local hand-offs chain, the lock never looks free to
//! them. After `max_local_handoffs` consecutive hand-offs the next release is a plain one, which
//! publishes the unlock message so that waiters of every client race for the lock again.
//!
//! A queue slot moves through these states, always under the queue's mutex. An acquire joins
//! before its first attempt as `Retrying`: it runs attempts of its own, so no hand-off may
//! overlap them (which could count one hold twice). Before parking it becomes `Queued`, and a
//! wake-up turns it back to `Retrying` for the next attempt. `Queued` → (a releaser takes it)
//! `Taken` → `Owned` (the script gave the lock to the slot's field) or back to `Queued` (it did
//! not). A releaser that finds no `Queued` slot but a `Retrying` one waits for that attempt to end
//! ([`Claimed::AttemptRunning`]) rather than free the lock under it. A waiter that goes away
//! leaves `Abandoned` behind if a hand-off is in flight, and whoever ends up with a hold nobody
//! owns releases it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::pin::Pin;

use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::janitor::Release;

/// The per-client registry of local wait queues, one per lock with local waiters.
#[derive(Default)]
pub(crate) struct Handoffs {
    queues: Mutex<HashMap<Arc<str>, Arc<Queue>>>,
    max_in_row: u32,
}

struct Queue {
    slots: Mutex<VecDeque<Arc<Slot>>>,
    /// Hand-offs in a row without a plain release (see the module docs).
    in_row: AtomicU32,
    /// Signalled (to the tasks waiting at that moment) whenever a waiter's own attempt is over:
    /// back in line, acquired or gone. See [`Claimed::AttemptRunning`].
    attempt_over: Arc<Notify>,
}

struct Slot {
    field: Arc<str>,
    lease_ms: u64,
    state: Mutex<SlotState>,
    notify: Notify,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Queued,
    Retrying,
    Taken,
    /// The lock was handed over; the instant is from before the transfer was sent.
    Owned(Instant),
    Abandoned,
}

/// A waiter's place in a lock's local queue. Dropping it leaves the queue (and releases a hold
/// that was handed over but never adopted).
pub(crate) struct Place {
    handoffs: Arc<Handoffs>,
    name: Arc<str>,
    queue: Arc<Queue>,
    slot: Arc<Slot>,
    janitor: crate::janitor::Janitor,
}

/// What a waiter finds when it looks at its place.
pub(crate) enum Turn {
    /// The lock was handed over: adopt the hold (the instant is from before it was sent).
    Owned(Instant),
    /// Free to run an attempt (the place is marked `Retrying` until [`Place::requeue`]).
    Retry,
}

/// What a releaser finds in the local queue of the lock it releases.
pub(crate) enum Claimed {
    /// Hand the lock to this waiter: the claim, the waiter's field and lease.
    Waiter(Claim, Arc<str>, u64),
    /// No local waiter can receive the lock: release it plainly.
    Nobody,
    /// No waiter is in line right now, but one is running an acquire attempt of its own (woken
    /// by an unlock message). Its attempt cannot succeed while the releaser still holds the lock,
    /// and it is back in line right after; a plain release now would instead free the lock for
    /// the releasing task's own next acquire, which then wins the race against that waiter's
    /// retry, and again on every round (barging). Waiting for the attempt keeps local waiters
    /// first in line at the cost of part of one round trip.
    AttemptRunning(AttemptOver),
}

/// Resolves when a local waiter's running attempt is over; see [`Claimed::AttemptRunning`].
/// Registered before the queue was last looked at, so no signal after that look is missed.
pub(crate) struct AttemptOver(Pin<Box<OwnedNotified>>);

impl AttemptOver {
    /// # Cancel safety
    /// Cancel safe (nothing is lost by dropping it: the releaser simply looks again).
    pub(crate) async fn wait(mut self) {
        self.0.as_mut().await;
    }
}

/// A releaser's claim on the head waiter, settled with [`Claim::settle`].
pub(crate) struct Claim {
    queue: Arc<Queue>,
    slot: Arc<Slot>,
    pub(crate) sent_at: Instant,
}

impl Handoffs {
    /// `max_in_row`: consecutive hand-offs before a plain release; 0 disables hand-offs.
    pub(crate) fn new(max_in_row: u32) -> Handoffs {
        Handoffs {
            queues: Mutex::new(HashMap::new()),
            max_in_row,
        }
    }

    /// Joins the local queue of lock `name` at the back, as a waiter that is still running
    /// attempts of its own (`Retrying`): a releaser waits for it rather than freeing the lock
    /// under it (see [`Claimed::AttemptRunning`]) until [`Place::requeue`] puts it in line.
    pub(crate) fn join(
        self: &Arc<Self>,
        name: &Arc<str>,
        field: &Arc<str>,
        lease_ms: u64,
        janitor: &crate::janitor::Janitor,
    ) -> Option<Place> {
        if self.max_in_row == 0 {
            return None;
        }
        let slot = Arc::new(Slot {
            field: Arc::clone(field),
            lease_ms,
            state: Mutex::new(SlotState::Retrying),
            notify: Notify::new(),
        });
        let queue = {
            let mut queues = self.queues.lock();
            let queue = queues.entry(Arc::clone(name)).or_insert_with(|| {
                Arc::new(Queue {
                    slots: Mutex::new(VecDeque::new()),
                    in_row: AtomicU32::new(0),
                    attempt_over: Arc::new(Notify::new()),
                })
            });
            queue.slots.lock().push_back(Arc::clone(&slot));
            Arc::clone(queue)
        };
        Some(Place {
            handoffs: Arc::clone(self),
            name: Arc::clone(name),
            queue,
            slot,
            janitor: janitor.clone(),
        })
    }

    /// Claims the first waiting slot of lock `name` for a hand-off, unless hand-offs are off or
    /// the fairness budget is spent (then the caller does a plain release). With
    /// `wait_for_attempts`, a queue whose waiters are all running attempts of their own answers
    /// [`Claimed::AttemptRunning`] instead of [`Claimed::Nobody`].
    pub(crate) fn claim(&self, name: &str, wait_for_attempts: bool) -> Claimed {
        let Some(queue) = self.queues.lock().get(name).cloned() else {
            return Claimed::Nobody;
        };
        if queue.in_row.load(Ordering::Relaxed) >= self.max_in_row {
            queue.in_row.store(0, Ordering::Relaxed);
            return Claimed::Nobody;
        }
        let (mut slot, retrying) = take_first_queued(&queue);
        if slot.is_none() && retrying && wait_for_attempts {
            // Register for the signal first, then look again: a waiter that went back in line
            // in between is claimed now, one that does so later signals the registration.
            let mut over = Box::pin(Arc::clone(&queue.attempt_over).notified_owned());
            over.as_mut().enable();
            let (again, still_retrying) = take_first_queued(&queue);
            if again.is_none() && still_retrying {
                return Claimed::AttemptRunning(AttemptOver(over));
            }
            slot = again;
        }
        let Some(slot) = slot else {
            return Claimed::Nobody;
        };
        let (field, lease_ms) = (Arc::clone(&slot.field), slot.lease_ms);
        Claimed::Waiter(
            Claim {
                queue,
                slot,
                sent_at: Instant::now(),
            },
            field,
            lease_ms,
        )
    }

    fn leave(&self, name: &Arc<str>, queue: &Arc<Queue>, slot: &Arc<Slot>) {
        let mut queues = self.queues.lock();
        let mut slots = queue.slots.lock();
        slots.retain(|other| !Arc::ptr_eq(other, slot));
        if slots.is_empty() && queues.get(name).is_some_and(|q| Arc::ptr_eq(q, queue)) {
            queues.remove(name);
        }
    }
}

/// Marks the first `Queued` slot of `queue` as `Taken` and returns it, and whether any slot is
/// `Retrying` (running an attempt of its own).
fn take_first_queued(queue: &Queue) -> (Option<Arc<Slot>>, bool) {
    let slots = queue.slots.lock();
    let mut retrying = false;
    let slot = slots.iter().find(|slot| {
        let mut state = slot.state.lock();
        retrying |= *state == SlotState::Retrying;
        let waiting = *state == SlotState::Queued;
        if waiting {
            *state = SlotState::Taken;
        }
        waiting
    });
    (slot.map(Arc::clone), retrying)
}

impl Claim {
    /// Settles the hand-off after the transfer script replied: `handed` when the lock now
    /// belongs to the claimed slot's field. Returns a hold that nobody owns (the waiter left
    /// meanwhile), which the caller must release.
    pub(crate) fn settle(self, handed: bool) -> Option<u64> {
        let mut state = self.slot.state.lock();
        match (*state, handed) {
            (SlotState::Taken, true) => {
                self.queue.in_row.fetch_add(1, Ordering::Relaxed);
                *state = SlotState::Owned(self.sent_at);
                drop(state);
                self.slot.notify.notify_one();
                None
            }
            (SlotState::Taken, false) => {
                *state = SlotState::Queued;
                drop(state);
                // The waiter may be waiting out the hand-off in `turn`.
                self.slot.notify.notify_one();
                None
            }
            (SlotState::Abandoned, true) => Some(self.slot.lease_ms),
            _ => None,
        }
    }
}

impl Place {
    /// Waits until a releaser may have handed the lock over.
    ///
    /// # Cancel safety
    /// Cancel safe: a notification is stored until the next call.
    pub(crate) async fn notified(&self) {
        self.slot.notify.notified().await;
    }

    /// Looks at the place after any wake-up. An in-flight hand-off is waited out first, so that
    /// the caller never runs an attempt while it may be receiving the lock.
    pub(crate) async fn turn(&self) -> Turn {
        loop {
            {
                let mut state = self.slot.state.lock();
                match *state {
                    SlotState::Owned(sent_at) => return Turn::Owned(sent_at),
                    SlotState::Queued | SlotState::Retrying => {
                        *state = SlotState::Retrying;
                        return Turn::Retry;
                    }
                    SlotState::Taken | SlotState::Abandoned => {}
                }
            }
            self.slot.notify.notified().await;
        }
    }

    /// Back in line (keeping the place) after an attempt that did not acquire.
    pub(crate) fn requeue(&self) {
        let mut state = self.slot.state.lock();
        if *state == SlotState::Retrying {
            *state = SlotState::Queued;
            drop(state);
            self.queue.attempt_over.notify_waiters();
        }
    }

    /// Leaves the queue after the hold was adopted (or acquired by an attempt).
    pub(crate) fn done(self) {
        *self.slot.state.lock() = SlotState::Retrying; // nothing for Drop to release
        drop(self);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let orphan = {
            let mut state = self.slot.state.lock();
            let orphan = match *state {
                // Handed over but never adopted: release it here.
                SlotState::Owned(_) => Some(self.slot.lease_ms),
                // `Taken`: a releaser is handing the lock over right now and, finding the slot
                // abandoned, releases it itself. `Queued`/`Retrying`: marked abandoned before
                // the slot leaves the queue, so that no releaser can claim it in between.
                _ => None,
            };
            *state = SlotState::Abandoned;
            orphan
        };
        self.handoffs.leave(&self.name, &self.queue, &self.slot);
        self.queue.attempt_over.notify_waiters();
        if let Some(lease_ms) = orphan {
            tracing::debug!(lock = %self.name, "releasing a handed-over lock whose waiter left");
            self.janitor.submit(crate::janitor::Job::Release(Release {
                name: Arc::clone(&self.name),
                field: Arc::clone(&self.slot.field),
                lease_ms,
            }));
        }
    }
}
