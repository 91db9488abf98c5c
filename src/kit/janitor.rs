//! The client's background task for work that must finish even though its caller is gone:
//! releases of dropped guards, and the undo of acquires whose future was dropped while their
//! script was in flight. Dropping a guard therefore never blocks the runtime.
//!
//! The task ends when the client is gone and every queued job is done, then closes the client's
//! connections. What it cannot finish because its runtime shut down (or is handed after it
//! ended) goes to the client's [`ExitReleaser`], which runs it on a connection of its own.

use arcstr::ArcStr;
use std::sync::Arc;

use fred::interfaces::ClientLike;
use fred::prelude::Value;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};

use crate::kit::exit::{ExitReleaser, Leftover, Write};
use crate::kit::handoff::Handoffs;
use crate::kit::in_flight::Undo;
use crate::lease::doubt::{Call, Doubts, DroppedRelease};
use crate::transport::{Gone, Redis};

pub(crate) use crate::transport::script::Release;

pub(crate) enum Job {
    /// Release one hold, registered as a lock-changing call since the lease table counted it
    /// released (`None` for a hold the table never counted: a hand-off whose waiter left), and
    /// as a dropped guard's release, which the field's next acquire waits for.
    Release(Release, Option<Call>, Option<DroppedRelease>),
    /// A script whose caller was dropped while it was in flight: wait for its reply, then, if it
    /// acquired the lock, release that hold (or run the primitive's own undo). Also any other
    /// future that must finish without its caller (a dropped semaphore guard's release), with
    /// no undo.
    Settle {
        reply: BoxFuture<'static, Result<Value, fred::error::Error>>,
        undo: Option<Undo>,
        /// The script's registration, kept until its reply (and the undo) are handled.
        call: Option<Call>,
    },
    /// A write that has not been sent yet (a dropped semaphore guard's give-back), run on the
    /// client's connections; `twice`: whether running it again after it may have been sent is
    /// harmless (a release by id), so that it is sent again when the runtime's shutdown cut it
    /// off.
    Write { write: Write, twice: bool },
    /// Give back `permits` of semaphore `name` that nobody holds (handed to a waiter that left)
    /// with `by`.
    GiveBack {
        name: ArcStr,
        permits: u64,
        by: &'static crate::transport::script::GiveBackScript,
    },
    /// Answer once every job queued before this one is done.
    Flush(oneshot::Sender<()>),
}

impl Release {
    /// The release of one hold of `key` with the lease `lease_ms`, by `script` (`None`: `RELEASE`).
    pub(crate) fn of(
        key: &crate::lease::watchdog::HoldKey,
        lease_ms: u64,
        script: Option<&'static crate::transport::script::ReleaseScript>,
    ) -> Release {
        Release {
            name: ArcStr::clone(&key.name),
            field: ArcStr::clone(&key.field),
            lease_ms,
            script,
        }
    }

    /// The lock and holder field this release is for.
    pub(crate) fn key(&self) -> crate::lease::watchdog::HoldKey {
        crate::lease::watchdog::HoldKey {
            name: ArcStr::clone(&self.name),
            field: ArcStr::clone(&self.field),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Janitor {
    jobs: mpsc::UnboundedSender<Job>,
    /// Where jobs go that the task can no longer take (`None` in the model checks).
    /// Its `janitor_closed` is set by [`Janitor::close`].
    exit: Option<Arc<ExitReleaser>>,
}

/// What the janitor's releases need: the connections, the local hand-off queues and the fields
/// in doubt.
#[derive(Clone)]
pub(crate) struct Releaser {
    pub(crate) redis: Arc<Redis>,
    pub(crate) handoffs: Arc<Handoffs>,
    pub(crate) doubts: Arc<Doubts>,
}

impl Janitor {
    pub(crate) fn start(
        releaser: Releaser,
        subscriber: fred::clients::SubscriberClient,
        exit: Arc<ExitReleaser>,
    ) -> (Janitor, tokio::task::JoinHandle<()>) {
        let (jobs, receiver) = mpsc::unbounded_channel();
        let shift = Shift {
            jobs: receiver,
            running: FuturesUnordered::new(),
            unfinished: Arc::default(),
            exit: Arc::clone(&exit),
            ended: false,
        };
        let task = tokio::spawn(run(releaser, subscriber, shift));
        let janitor = Janitor {
            jobs,
            exit: Some(exit),
        };
        (janitor, task)
    }

    /// A janitor whose jobs the model checks (`crate::model`) run themselves.
    #[cfg(test)]
    pub(crate) fn detached() -> (Janitor, mpsc::UnboundedReceiver<Job>) {
        let (jobs, receiver) = mpsc::unbounded_channel();
        (Janitor { jobs, exit: None }, receiver)
    }

    /// Queues a job; never blocks while the task runs. Once the task is gone (the runtime shut
    /// down) or the client is shut down, the job runs on the exit connection, and this call
    /// waits for it, for at most the client's response timeout (`kit/exit.rs`).
    pub(crate) fn submit(&self, job: Job) {
        let refused = {
            let closed = self.exit.as_ref().map(|exit| exit.janitor_closed.read());
            if closed.as_deref() == Some(&true) {
                Some(job)
            } else {
                self.jobs
                    .send(job)
                    .err()
                    .map(|mpsc::error::SendError(job)| job)
            }
        };
        if let Some(job) = refused {
            match &self.exit {
                Some(exit) => exit.hand_over(leftovers(job).into_iter().collect(), false),
                None => {
                    tracing::debug!("background task is gone; the lock will expire with its lease")
                }
            }
        }
    }

    /// For the client's shutdown, before it closes `redis`: finishes every job queued so far
    /// and settles the fields in doubt there, and sends every later job to the exit releaser.
    /// Left to the task, a job queued after the shutdown would run on closed connections and
    /// be lost (not even put in doubt for the exit), as the task's abort may come too late.
    pub(crate) async fn close(&self, redis: &Arc<Redis>) {
        let (done, wait) = oneshot::channel();
        let flushed = {
            let closed = self.exit.as_ref().map(|exit| exit.janitor_closed.write());
            if let Some(mut closed) = closed {
                *closed = true;
            }
            self.jobs.send(Job::Flush(done)).is_ok()
        };
        if flushed {
            let _ = wait.await;
        }
        if let Some(exit) = &self.exit {
            exit.settle_doubts(redis).await;
        }
    }
}

/// The janitor task's state: its queue and the jobs it runs. Dropped unfinished (the runtime
/// shut down under it), it hands what is left to the exit releaser.
struct Shift {
    jobs: mpsc::UnboundedReceiver<Job>,
    running: FuturesUnordered<BoxFuture<'static, ()>>,
    /// What the running jobs leave undone (see [`Unfinished`]).
    unfinished: Arc<parking_lot::Mutex<Vec<Leftover>>>,
    exit: Arc<ExitReleaser>,
    /// Set when the task ends by itself: the client is gone and every job done.
    ended: bool,
}

impl Shift {
    /// Tracks a running job that leaves `leftover` undone unless it ends normally; `if_cut_off`:
    /// also when it may have been sent (dropped mid-call, or its reply lost with its task),
    /// for work that is harmless twice.
    fn track(&self, leftover: Leftover, if_cut_off: bool) -> Unfinished {
        Unfinished {
            leftover: Some(leftover),
            if_cut_off,
            into: Arc::clone(&self.unfinished),
        }
    }
}

impl Drop for Shift {
    fn drop(&mut self) {
        // The running jobs first: their `Unfinished` record what they leave.
        drop(std::mem::take(&mut self.running));
        // Closed before it is drained: a job sent from now on goes to the exit releaser itself.
        self.jobs.close();
        let mut left = std::mem::take(&mut *self.unfinished.lock());
        while let Ok(job) = self.jobs.try_recv() {
            left.extend(leftovers(job));
        }
        if !left.is_empty() || !self.ended {
            tracing::debug!(
                jobs = left.len(),
                "the janitor cannot finish: its releases go out on a connection of their own"
            );
            // Cut off by its runtime's shutdown, the reconciler will not settle its fields.
            self.exit.hand_over(left, !self.ended);
        }
    }
}

/// What a running job leaves undone if its future is dropped, or if it finds the task that
/// carries its calls gone.
struct Unfinished {
    leftover: Option<Leftover>,
    if_cut_off: bool,
    into: Arc<parking_lot::Mutex<Vec<Leftover>>>,
}

impl Unfinished {
    /// The job ended; if the task that carried its call was `gone`, what it leaves runs at exit
    /// (if it may have been sent, only work that is harmless twice).
    fn ended(mut self, gone: Option<Gone>) {
        match gone {
            None => self.leftover = None,
            Some(Gone::Unsent) => self.if_cut_off = true,
            Some(Gone::CutOff) => {}
        }
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let (Some(leftover), true) = (self.leftover.take(), self.if_cut_off) {
            self.into.lock().push(leftover);
        }
    }
}

/// What `job`, never received by the task, leaves to do.
fn leftovers(job: Job) -> Option<Leftover> {
    match job {
        Job::Release(release, _, _) => Some(Leftover::Hold(release.key())),
        // The acquire's reply is lost with its connection: it may have taken the hold.
        Job::Settle {
            undo: Some(Undo::Release { release, .. }),
            ..
        } => Some(Leftover::Hold(release.key())),
        Job::Settle { .. } => None,
        Job::Write { write, .. } => Some(Leftover::Write(write)),
        Job::GiveBack { name, permits, by } => {
            Some(Leftover::Write(give_back_write(name, permits, by)))
        }
        Job::Flush(_) => None,
    }
}

/// Gives back `permits` of semaphore `name` that nobody holds, with `by`, on any connection.
fn give_back_write(
    name: ArcStr,
    permits: u64,
    by: &'static crate::transport::script::GiveBackScript,
) -> Write {
    Arc::new(move |redis| {
        let name = ArcStr::clone(&name);
        Box::pin(async move {
            let encoded = (by.encode)(&name, permits, redis.settings.publish_arg);
            match redis.run_write(&name, by.script, &encoded).await {
                Ok(_) => {
                    tracing::debug!(semaphore = %name, permits, "gave back permits whose waiter left")
                }
                Err(err) if Gone::of(&err).is_some() => return Gone::of(&err),
                Err(err) => {
                    tracing::warn!(semaphore = %name, permits, error = %err, "could not give back permits whose waiter left; they stay taken until someone releases them")
                }
            }
            None
        })
    })
}

async fn run(releaser: Releaser, subscriber: fred::clients::SubscriberClient, mut shift: Shift) {
    let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
    let mut open = true;
    while open || !shift.running.is_empty() {
        tokio::select! {
            job = shift.jobs.recv(), if open => match job {
                Some(Job::Release(release, call, dropped)) => {
                    let releaser = releaser.clone();
                    let unfinished = shift.track(Leftover::Hold(release.key()), true);
                    shift.running.push(Box::pin(async move {
                        let gone = release_hold(releaser, release).await;
                        unfinished.ended(gone);
                        drop(call);
                        drop(dropped);
                    }));
                }
                Some(Job::Settle { reply, undo, call }) => {
                    let releaser = releaser.clone();
                    let unfinished = match &undo {
                        Some(Undo::Release { release, .. }) => Some(shift.track(Leftover::Hold(release.key()), true)),
                        _ => None,
                    };
                    shift.running.push(Box::pin(async move {
                        // A reply lost to the connection puts the field in doubt (the reply
                        // future does that itself); the reconciler then settles it.
                        let reply = reply.await;
                        // An acquire that took nothing needs no undo.
                        let mut gone = None;
                        match (&reply, undo) {
                            (Ok(reply), Some(Undo::Release { release, acquired })) if acquired(reply) => {
                                tracing::debug!(lock = %release.name, "releasing a lock whose acquire was cancelled");
                                gone = release_hold(releaser, release).await;
                            }
                            (Ok(reply), Some(Undo::Run(undo))) => {
                                if let Some(give_back) = undo(reply) {
                                    give_back.await;
                                }
                            }
                            _ => {}
                        }
                        if let Some(unfinished) = unfinished {
                            // A reply cut off with its task: the acquire may have taken the
                            // hold (one never sent took nothing).
                            let cut_off = reply.as_ref().err().and_then(Gone::of).filter(|gone| *gone == Gone::CutOff);
                            unfinished.ended(gone.or(cut_off));
                        }
                        drop(call);
                    }));
                }
                Some(Job::Write { write, twice }) => {
                    let redis = Arc::clone(&releaser.redis);
                    let unfinished = shift.track(Leftover::Write(Arc::clone(&write)), twice);
                    shift.running.push(Box::pin(async move {
                        let gone = write(redis).await;
                        unfinished.ended(gone);
                    }));
                }
                Some(Job::GiveBack { name, permits, by }) => {
                    let redis = Arc::clone(&releaser.redis);
                    let write = give_back_write(name, permits, by);
                    let unfinished = shift.track(Leftover::Write(Arc::clone(&write)), false);
                    shift.running.push(Box::pin(async move {
                        let gone = write(redis).await;
                        unfinished.ended(gone);
                    }));
                }
                Some(Job::Flush(done)) => flushes.push(done),
                None => open = false,
            },
            Some(()) = shift.running.next(), if !shift.running.is_empty() => {}
        }
        if shift.running.is_empty() {
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
    }
    // The reconciler stopped with the client: what it had not settled is settled here (after a
    // shutdown, `Janitor::close` did that before the connections closed).
    if !*shift.exit.janitor_closed.read() {
        shift.exit.settle_doubts(&releaser.redis).await;
    }
    shift.ended = true;
    // The client is gone: close its connections.
    let _ = releaser.redis.pool.quit().await;
    let _ = subscriber.quit().await;
}

/// Tells whether the task that carried the release was gone (then it logs nothing).
async fn release_hold(releaser: Releaser, release: Release) -> Option<Gone> {
    use crate::kit::release::{release_or_hand_off, Released};
    let name = ArcStr::clone(&release.name);
    match release_or_hand_off(releaser, release, None).await {
        Ok(Released::Reply(Value::Null)) => {
            tracing::debug!(lock = %name, "dropped guard's lock was no longer held")
        }
        Ok(Released::Reply(_)) => tracing::debug!(lock = %name, "released dropped guard"),
        Ok(Released::Settling) => {
            tracing::debug!(lock = %name, "dropped guard's release left to the settling of its holder field")
        }
        Err(err) if Gone::of(&err).is_some() => return Gone::of(&err),
        Err(err) if crate::lease::doubt::outcome_unknown(&err) => {
            tracing::warn!(lock = %name, error = %err, "background release of unknown outcome; the holder field is settled once redis answers")
        }
        Err(err) => {
            tracing::warn!(lock = %name, error = %err, "background release failed; the lock expires with its lease")
        }
    }
    None
}
