//! Releases that outlive their runtime. A guard dropped as its runtime shuts down (the end of
//! `main`, a `?` out of it, a panic that unwinds through it) leaves its release to the janitor,
//! whose task that shutdown drops too; so does a guard dropped after the janitor is gone (after
//! [`Client::shutdown`](crate::Client::shutdown), or outside any runtime). Left there, the lock
//! would stay held for its whole lease. Redisson leaves such locks to their lease: its
//! `unlock` in a `finally` is the user's job.
//!
//! What the janitor could not finish is handed here instead ([`ExitReleaser::hand_over`]). A
//! thread of its own, with a current-thread runtime and one connection of its own (the client's
//! went with its runtime), runs it, while the thread that handed it over waits: for at most the
//! client's response timeout from the first hand-over of a round, however many follow in it.
//! So a process that leaves `main` holding guards ends with their locks free, and one whose
//! server does not answer is held up by at most that bound.
//! The connection is opened for the first write; when it cannot be within its round's bound
//! (the server is down or does not answer), the round's writes are kept and the next round
//! connects again and runs them too. A hand-over within a bound of the end of a round that gave
//! up does not wait (its writes are kept for the next round), so that the burst of drops at the
//! end of `main` is held up by one bound in all, not one per drop.
//!
//! A release that was in flight when its task was dropped may or may not have run, and one
//! left to the reconciler (its field in doubt) never will be now. So a lock's release is not
//! replayed: its holder field is settled, by the reconciler's own idempotent script
//! (lua/reconcile.lua), down to the holds the lease table still counts (none, at the end of
//! `main`), whatever had already run. Other writes (a semaphore's give-back) run again only if
//! never sent, or if running them twice is harmless (a permit released by its id): a second
//! give-back of plain permits would add one.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::{Condvar, Mutex};
use tokio::sync::mpsc;

use crate::lease::doubt::{Doubts, Settle};
use crate::lease::watchdog::{HoldKey, LeaseTable};
use crate::transport::{Gone, Redis};

/// A write that can be run on any connection (again, for one that may have been sent): the
/// release of a hold, a semaphore's give-back. It logs its own outcome, and tells whether the
/// task that carried it was gone ([`Gone`]: then it logs nothing).
pub(crate) type Write = Arc<dyn Fn(Arc<Redis>) -> BoxFuture<'static, Option<Gone>> + Send + Sync>;

/// Opens the exit connection, on the runtime that awaits it.
pub(crate) type Connect =
    Box<dyn Fn() -> BoxFuture<'static, Result<Arc<Redis>, fred::error::Error>> + Send + Sync>;

/// What the janitor leaves unfinished.
pub(crate) enum Leftover {
    /// A hold whose release did not finish: its field is settled at exit.
    Hold(HoldKey),
    /// Any other write, to run at exit (never sent, or harmless twice).
    Write(Write),
}

/// The client's way out for releases that outlive its runtime (see the module's docs).
pub(crate) struct ExitReleaser {
    connect: Arc<Connect>,
    bound: Duration,
    /// The holds each field should keep.
    leases: Weak<LeaseTable>,
    /// The fields whose last change had an unknown outcome: settled at exit too.
    doubts: Arc<Doubts>,
    /// How a field is settled (the reconciler's script).
    how: &'static Settle,
    /// The exit thread's queue (each write with the end of its round), once it runs.
    queue: Mutex<Option<mpsc::UnboundedSender<(Write, Instant)>>>,
    progress: Arc<Progress>,
    /// Set by `Janitor::close` (the client's shutdown): from then on the janitor's jobs come
    /// here. A lock, not a flag: a job is queued to the janitor or not while it is held, so
    /// none slips in after the close's flush. Kept here, not in the janitor, whose handle
    /// every in-flight call future carries (see `a_task_parked_in_lock_fits_...`).
    pub(crate) janitor_closed: parking_lot::RwLock<bool>,
}

/// What the exit thread has done of what it was handed.
#[derive(Default)]
struct Progress {
    state: Mutex<Round>,
    finished: Condvar,
}

#[derive(Default)]
struct Round {
    /// Writes handed over and not yet finished.
    pending: usize,
    /// When those who hand writes over stop waiting for them: set by the first hand-over while
    /// no round is open (nothing pending, or the last round's end passed), joined by those that
    /// follow. Also the round's name: a write of a round that ended (timed out) no longer counts.
    waits_until: Option<Instant>,
    /// Whether the round ended with writes it could not finish.
    gave_up: bool,
}

impl Progress {
    /// Counts `writes` in round `of` (open: one of its writes is pending).
    fn adopt(&self, of: Instant, writes: usize) {
        let mut round = self.state.lock();
        if round.waits_until == Some(of) {
            round.pending += writes;
        }
    }

    /// `writes` of round `of` cannot be done in it (no connection): kept for a later round.
    fn kept(&self, of: Instant, writes: usize) {
        let mut round = self.state.lock();
        if round.waits_until == Some(of) {
            round.gave_up = true;
        }
        drop(round);
        self.finished(of, writes);
    }

    /// `writes` of round `of` are done (or cannot be done in it).
    fn finished(&self, of: Instant, writes: usize) {
        let mut round = self.state.lock();
        if round.waits_until != Some(of) {
            return;
        }
        round.pending = round.pending.saturating_sub(writes);
        if round.pending == 0 {
            self.finished.notify_all();
        }
    }
}

impl ExitReleaser {
    /// Releases at exit through connections `connect` opens, waited for at most `bound` per
    /// round; `leases` tells how many holds a field keeps.
    pub(crate) fn new(
        connect: Connect,
        bound: Duration,
        leases: Weak<LeaseTable>,
        doubts: Arc<Doubts>,
        how: &'static Settle,
    ) -> Arc<Self> {
        Arc::new(ExitReleaser {
            connect: Arc::new(connect),
            bound,
            leases,
            doubts,
            how,
            queue: Mutex::new(None),
            progress: Arc::default(),
            janitor_closed: parking_lot::RwLock::new(false),
        })
    }

    /// Runs what the janitor left (with `doubted`, the fields in doubt too), and waits for it
    /// (bounded, see the module's docs).
    pub(crate) fn hand_over(&self, leftovers: Vec<Leftover>, doubted: bool) {
        let mut holds: Vec<HoldKey> = if doubted {
            self.doubts.keys()
        } else {
            Vec::new()
        };
        let mut writes = Vec::new();
        for leftover in leftovers {
            match leftover {
                Leftover::Hold(key) => holds.push(key),
                Leftover::Write(write) => writes.push(write),
            }
        }
        holds.sort_unstable_by(|a, b| (&a.name, &a.field).cmp(&(&b.name, &b.field)));
        holds.dedup();
        writes.extend(holds.into_iter().map(|key| self.settle(key)));
        if writes.is_empty() {
            return;
        }
        let count = writes.len();
        let waits_until = {
            let mut round = self.progress.state.lock();
            let now = Instant::now();
            let waits_until = match round.waits_until {
                Some(until) if round.pending > 0 && until > now => until,
                // Within a bound of a round that gave up (no connection, or no answer): queued
                // for the next round that connects, without holding this thread up, so that
                // the drops that end a process are held up by one bound in all.
                Some(until) if round.gave_up && now < until + self.bound => until,
                _ => {
                    // A new round: what the last one left pending no longer holds anyone up.
                    round.pending = 0;
                    round.gave_up = false;
                    now + self.bound
                }
            };
            round.waits_until = Some(waits_until);
            round.pending += count;
            waits_until
        };
        let sent = self.send(writes, waits_until);
        if sent < count {
            self.progress.finished(waits_until, count - sent);
        }
        let mut round = self.progress.state.lock();
        while round.pending > 0 && round.waits_until == Some(waits_until) && !round.gave_up {
            if self
                .progress
                .finished
                .wait_until(&mut round, waits_until)
                .timed_out()
            {
                round.gave_up = true;
                tracing::warn!(
                    pending = round.pending,
                    bound = ?self.bound,
                    "releases at exit got no answer within the bound; their locks expire with their lease"
                );
                break;
            }
        }
    }

    /// Settles `key` down to the holds the lease table still counts when it runs.
    fn settle(&self, key: HoldKey) -> Write {
        let (leases, how) = (Weak::clone(&self.leases), self.how);
        Arc::new(move |redis| {
            let key = key.clone();
            let keep = leases.upgrade().map_or(0, |leases| leases.live_holds(&key));
            Box::pin(async move {
                let settled = crate::lease::doubt::settle_once(&redis, how, &key, keep).await;
                match settled {
                    Ok(_) => {
                        tracing::debug!(lock = %key.name, field = %key.field, keep, "settled a holder field at exit")
                    }
                    Err(err) => match Gone::of(&err) {
                        Some(gone) => return Some(gone),
                        None => {
                            tracing::warn!(lock = %key.name, error = %err, "could not release a lock at exit; it expires with its lease")
                        }
                    },
                }
                None
            })
        })
    }

    /// Settles the fields in doubt on `redis` (the client's own connections, at the janitor's
    /// end: the reconciler stopped with the client), within the bound.
    pub(crate) async fn settle_doubts(&self, redis: &Arc<Redis>) {
        let settles: FuturesUnordered<_> = self
            .doubts
            .keys()
            .into_iter()
            .map(|key| self.settle(key)(Arc::clone(redis)))
            .collect();
        let all = settles.collect::<Vec<_>>();
        if tokio::time::timeout(self.bound, all).await.is_err() {
            tracing::warn!(bound = ?self.bound, "holder fields in doubt were not settled within the bound; their locks expire with their lease");
        }
    }

    /// Queues `writes` on the exit thread (started on first use), for a round that ends at
    /// `waits_until`; returns how many were queued.
    fn send(&self, writes: Vec<Write>, waits_until: Instant) -> usize {
        let mut queue = self.queue.lock();
        if queue.is_none() {
            let (sender, receiver) = mpsc::unbounded_channel();
            let connect = Arc::clone(&self.connect);
            let progress = Arc::clone(&self.progress);
            let started = std::thread::Builder::new()
                .name("ferrisson-exit".into())
                .spawn(move || run(connect, progress, receiver));
            match started {
                Ok(_) => *queue = Some(sender),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot start the thread for releases at exit; their locks expire with their lease");
                    return 0;
                }
            }
        }
        let Some(sender) = queue.as_ref() else {
            return 0;
        };
        writes
            .into_iter()
            .filter(|write| sender.send((Arc::clone(write), waits_until)).is_ok())
            .count()
    }
}

/// The exit thread: runs every write it is handed until the client's [`ExitReleaser`] is
/// dropped, on a connection it opens for the first (by that write's round's end). A write that
/// finds no connection (it could not be opened in time: the server was down or did not answer)
/// is kept, and the next round tries to connect again and runs it then: a settle is idempotent,
/// and a kept give-back was never sent.
fn run(
    connect: Arc<Connect>,
    progress: Arc<Progress>,
    mut writes: mpsc::UnboundedReceiver<(Write, Instant)>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::warn!(error = %err, "cannot start the runtime for releases at exit; their locks expire with their lease");
            let mut round = progress.state.lock();
            round.pending = 0;
            progress.finished.notify_all();
            return;
        }
    };
    runtime.block_on(async move {
        let mut redis: Option<Arc<Redis>> = None;
        // The end of the last round whose connect failed: its later writes do not try again.
        let mut failed_round: Option<Instant> = None;
        let mut kept: Vec<Write> = Vec::new();
        let mut running = FuturesUnordered::new();
        // Each write in flight answers with its round.
        let run_on = |write: Write, redis: &Arc<Redis>, round: Instant| {
            let call = write(Arc::clone(redis));
            async move {
                call.await;
                round
            }
        };
        let mut open = true;
        while open || !running.is_empty() {
            tokio::select! {
                write = writes.recv(), if open => {
                    let Some((write, round_ends)) = write else {
                        open = false;
                        continue;
                    };
                    if redis.is_none() && failed_round.is_none_or(|failed| round_ends > failed) {
                        redis = connect_by(&connect, round_ends).await;
                        match &redis {
                            Some(redis) => {
                                // The kept writes join this round (still open: this write is
                                // pending in it), so that its hand-over waits for them too.
                                progress.adopt(round_ends, kept.len());
                                running.extend(
                                    kept.drain(..).map(|write| run_on(write, redis, round_ends)),
                                );
                            }
                            None => failed_round = Some(round_ends),
                        }
                    }
                    match &redis {
                        Some(redis) => running.push(run_on(write, redis, round_ends)),
                        None => {
                            kept.push(write);
                            progress.kept(round_ends, 1);
                        }
                    }
                },
                Some(round) = running.next(), if !running.is_empty() => progress.finished(round, 1),
            }
        }
        if !kept.is_empty() {
            tracing::warn!(
                writes = kept.len(),
                "releases at exit never found a connection; their locks expire with their lease"
            );
        }
        if let Some(redis) = redis {
            use fred::interfaces::ClientLike;
            let _ = redis.pool.quit().await;
        }
    });
}

/// Opens the exit connection by `by`, or says why not.
async fn connect_by(connect: &Connect, by: Instant) -> Option<Arc<Redis>> {
    match tokio::time::timeout_at(tokio::time::Instant::from_std(by), connect()).await {
        Ok(Ok(redis)) => Some(redis),
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "cannot connect for releases at exit; a later round tries again");
            None
        }
        Err(_) => {
            tracing::warn!(
                "cannot connect for releases at exit within the bound; a later round tries again"
            );
            None
        }
    }
}
