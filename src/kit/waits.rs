//! This client's waits, for deadlock detection ([`DeadlockDetection`](crate::DeadlockDetection)):
//! an acquire that Redis refuses records its wait here, in memory, and removes it when it ends
//! however it ends (acquired, out of time, failed, dropped). The keeper (`deadlock.rs`) writes
//! the waits that last to Redis as wait-for edges, removes them again, and names a wait that
//! must give way; the acquire then fails with [`Error::Deadlock`].
//!
//! Nothing here costs an acquire that is not refused: the table is touched only after a
//! refusal, and only when detection is on.

use arcstr::ArcStr;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::wait_for::Deadlock;

/// The waits of one client.
#[derive(Default)]
pub(crate) struct WaitTable {
    next_id: AtomicU64,
    entries: Mutex<HashMap<u64, Arc<Wait>, foldhash::fast::RandomState>>,
    /// Recorded waits whose edges the keeper wrote and that ended since: the fields to remove.
    ended: Mutex<Vec<Arc<Wait>>>,
    /// Wakes the keeper: the first wait began, or a written wait ended.
    pub(crate) changed: Notify,
}

/// One wait: `owner_id` of this client waits for `lock`, asking for `field`.
pub(crate) struct Wait {
    pub(crate) id: u64,
    pub(crate) owner_id: u64,
    /// The hash field the acquire asks for.
    pub(crate) field: ArcStr,
    pub(crate) lock: ArcStr,
    pub(crate) since: Instant,
    /// `since` by the epoch clock, as recorded (what other clients compare).
    pub(crate) since_ms: u64,
    /// [`FRESH`], [`WRITTEN`] or [`ENDED`].
    state: AtomicU8,
    /// The cycle this wait gives way to, once the keeper found it.
    verdict: Mutex<Option<Box<Deadlock>>>,
    waker: AtomicWaker,
}

/// Not (yet) written to Redis.
const FRESH: u8 = 0;
/// Its edge is written (or being written).
const WRITTEN: u8 = 1;
/// The wait is over.
const ENDED: u8 = 2;

impl WaitTable {
    /// Records a wait that begins now.
    pub(crate) fn record(
        self: &Arc<Self>,
        owner_id: u64,
        field: &ArcStr,
        lock: &ArcStr,
    ) -> Recorded {
        let wait = Arc::new(Wait {
            id: self.next_id.fetch_add(1, Ordering::Relaxed) + 1,
            owner_id,
            field: ArcStr::clone(field),
            lock: ArcStr::clone(lock),
            since: Instant::now(),
            since_ms: crate::clock::epoch_ms(),
            state: AtomicU8::new(FRESH),
            verdict: Mutex::new(None),
            waker: AtomicWaker::new(),
        });
        let first = {
            let mut entries = self.entries.lock();
            entries.insert(wait.id, Arc::clone(&wait));
            entries.len() == 1
        };
        if first {
            self.changed.notify_one();
        }
        Recorded {
            wait,
            table: Arc::downgrade(self),
        }
    }

    /// The waits going on now.
    pub(crate) fn waits(&self) -> Vec<Arc<Wait>> {
        self.entries.lock().values().cloned().collect()
    }

    /// The written waits that ended since the last call.
    pub(crate) fn take_ended(&self) -> Vec<Arc<Wait>> {
        std::mem::take(&mut *self.ended.lock())
    }
}

impl Wait {
    /// Marks the wait as written, unless it ended already: whether the keeper should write it.
    /// A wait that ends afterwards is handed to the keeper for removal.
    pub(crate) fn mark_written(&self) -> bool {
        self.state
            .compare_exchange(FRESH, WRITTEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether the wait still goes on.
    pub(crate) fn is_live(&self) -> bool {
        self.state.load(Ordering::Acquire) != ENDED
    }

    /// Ends the acquire of this wait with [`Error::Deadlock`] on `deadlock`.
    pub(crate) fn give_way(&self, deadlock: Deadlock) {
        *self.verdict.lock() = Some(Box::new(deadlock));
        self.waker.wake();
    }
}

/// A wait in its client's table, removed when dropped.
pub(crate) struct Recorded {
    wait: Arc<Wait>,
    table: Weak<WaitTable>,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        let was = self.wait.state.swap(ENDED, Ordering::AcqRel);
        let Some(table) = self.table.upgrade() else {
            return;
        };
        table.entries.lock().remove(&self.wait.id);
        if was == WRITTEN {
            table.ended.lock().push(Arc::clone(&self.wait));
            table.changed.notify_one();
        }
    }
}

/// Where an acquire keeps its recorded wait, from its first refusal on.
pub(crate) type WaitSlot = OnceLock<Recorded>;

/// An acquire that records its wait: where it keeps it, and how it records it.
pub(crate) trait RecordsWait {
    /// Where the acquire keeps its recorded wait.
    fn slot(&self) -> &WaitSlot;

    /// Records the wait of an acquire that waits without having been refused: one that queued
    /// behind waiters of its own client without trying (`wait.rs`, step 0). A refusal records
    /// the others.
    fn record_if_queued(&self);
}

pin_project_lite::pin_project! {
    /// An acquire's wait (`wait`) that ends with [`Error::Deadlock`] as soon as the keeper
    /// names the wait recorded by `acquire` to give way. The wait is then dropped, which is
    /// cancel safe: it leaves nothing held.
    pub(crate) struct OrGiveWay<'a, F, R> {
        #[pin]
        wait: F,
        acquire: &'a R,
    }
}

/// `wait`, ended by a verdict on the wait `acquire` records (see [`OrGiveWay`]).
pub(crate) fn or_give_way<F, R: RecordsWait>(acquire: &R, wait: F) -> OrGiveWay<'_, F, R> {
    OrGiveWay { wait, acquire }
}

impl<T, F, R> Future for OrGiveWay<'_, F, R>
where
    F: Future<Output = Result<Option<T>>>,
    R: RecordsWait,
{
    type Output = Result<Option<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // Before the wait's poll, too: an acquire that queues behind its client's waiters
        // without trying (`wait.rs`, step 0) is in the line, and seen there, from inside that
        // poll on. Recorded only after it, its wait would begin later than it did (as late as
        // the thread is preempted between the two), and a wait that another owner began after
        // it, seeing it queued, could be recorded first: the queued wait would then be the
        // cycle's youngest and give way, while the wait that closed the cycle goes on.
        if this.acquire.slot().get().is_none() {
            this.acquire.record_if_queued();
        }
        if let Poll::Ready(outcome) = this.wait.poll(cx) {
            return Poll::Ready(outcome);
        }
        let slot = this.acquire.slot();
        if slot.get().is_none() {
            this.acquire.record_if_queued();
        }
        // A wait is recorded during a poll of `wait` (at its first refusal) or just above, so
        // this sees it in that same poll and registers the task's waker before any verdict.
        let Some(recorded) = slot.get() else {
            return Poll::Pending;
        };
        let wait = &recorded.wait;
        wait.waker.register(cx.waker());
        match wait.verdict.lock().take() {
            Some(cycle) => Poll::Ready(Err(Error::Deadlock {
                name: wait.lock.to_string(),
                cycle,
            })),
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a parked waiter costs this process with detection on, besides its future: its
    /// entry (`Arc<Wait>`: the counts and the wait) and its slot in the table's map (key,
    /// pointer and a control byte, at the map's load factor). Redis holds the edge only for a
    /// wait that lasts (docs/benchmarks.md measures it).
    #[test]
    fn a_recorded_wait_takes_under_200_bytes() {
        let entry = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Wait>();
        let slot = (std::mem::size_of::<(u64, Arc<Wait>)>() + 1) * 8 / 7;
        assert!(entry + slot < 200, "entry {entry} B + slot {slot} B");
        println!("a recorded wait: entry {entry} B + slot {slot} B");
    }

    /// An acquire queued behind waiters of its own client (`record_if_queued` records).
    struct Queued {
        table: Arc<WaitTable>,
        owner_id: u64,
        slot: WaitSlot,
    }

    impl RecordsWait for Queued {
        fn slot(&self) -> &WaitSlot {
            &self.slot
        }

        fn record_if_queued(&self) {
            let (field, lock) = (ArcStr::from("c:1"), ArcStr::from("x"));
            let _ = self
                .slot
                .set(self.table.record(self.owner_id, &field, &lock));
        }
    }

    /// The cause of a flake of `deadlock::a_waiter_queued_behind_its_own_clients_waiters_is_
    /// recorded_too`: a queued acquire enters the line inside its wait's first poll, where
    /// another owner can see it queued and begin a wait of its own. The queued wait must be
    /// recorded before that poll, so that it is the older of the two whatever the scheduler
    /// does between them; recorded after it, it was the younger and gave way in the cycle's
    /// stead.
    #[test]
    fn a_queued_wait_is_recorded_before_its_first_poll_puts_it_in_the_line() {
        let table = Arc::new(WaitTable::default());
        let queued = Queued {
            table: Arc::clone(&table),
            owner_id: 1,
            slot: WaitSlot::new(),
        };
        let seen_in_line = Mutex::new(None);
        // The first poll of the wait: the acquire is in the line from here on, and another
        // owner of the client, seeing it there, begins its wait.
        let wait = std::future::poll_fn(|_| {
            let recorded_then = queued.slot().get().map(|r| r.wait.id);
            let later = table.record(2, &ArcStr::from("c:2"), &ArcStr::from("y"));
            *seen_in_line.lock() = Some((recorded_then, later));
            Poll::<Result<Option<()>>>::Pending
        });
        let mut future = std::pin::pin!(or_give_way(&queued, wait));
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        assert!(future.as_mut().poll(&mut cx).is_pending());
        let (recorded_then, later) = seen_in_line.lock().take().expect("the wait was polled");
        let queued_id = recorded_then.expect("the queued wait was recorded before its poll");
        assert!(
            queued_id < later.wait.id,
            "the queued wait ({queued_id}) is older than the one begun after it ({})",
            later.wait.id
        );
        let first = queued.slot().get().expect("recorded");
        assert_eq!(first.wait.id, queued_id, "recorded once");
        assert!(first.wait.since <= later.wait.since && first.wait.since_ms <= later.wait.since_ms);
    }

    #[test]
    fn a_wait_is_recorded_until_its_record_drops_and_only_a_written_one_is_handed_back() {
        let table = Arc::new(WaitTable::default());
        let (field, lock) = (ArcStr::from("c:1"), ArcStr::from("a"));
        let fresh = table.record(1, &field, &lock);
        let written = table.record(2, &field, &lock);
        assert_eq!(table.waits().len(), 2);
        assert!(written.wait.mark_written());
        drop(fresh);
        drop(written);
        assert!(table.waits().is_empty());
        let ended = table.take_ended();
        assert_eq!(
            ended.len(),
            1,
            "only the written wait needs its field removed"
        );
        assert_eq!(ended[0].owner_id, 2);
        assert!(!ended[0].mark_written(), "an ended wait is never written");
    }
}
