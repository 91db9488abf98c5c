//! The client's background task for work that must finish even though its caller is gone:
//! releases of dropped guards, and the undo of acquires whose future was dropped while their
//! script was in flight. Dropping a guard therefore never blocks the runtime.
//!
//! The task ends when the client is gone and every queued job is done, then closes the client's
//! connections.

use arcstr::ArcStr;
use std::sync::Arc;

use fred::interfaces::ClientLike;
use fred::prelude::Value;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};

use crate::kit::handoff::Handoffs;
use crate::kit::in_flight::Undo;
use crate::lease::doubt::{Call, Doubts, DroppedRelease};
use crate::transport::Redis;

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
    ) -> (Janitor, tokio::task::JoinHandle<()>) {
        let (jobs, receiver) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(releaser, subscriber, receiver));
        (Janitor { jobs }, task)
    }

    /// A janitor whose jobs the model checks (`crate::model`) run themselves.
    #[cfg(test)]
    pub(crate) fn detached() -> (Janitor, mpsc::UnboundedReceiver<Job>) {
        let (jobs, receiver) = mpsc::unbounded_channel();
        (Janitor { jobs }, receiver)
    }

    /// Queues a job; never blocks. If the task is gone (runtime shut down) the lock simply
    /// expires with its lease.
    pub(crate) fn submit(&self, job: Job) {
        if self.jobs.send(job).is_err() {
            tracing::debug!("background task is gone; the lock will expire with its lease");
        }
    }

    /// Waits until every job queued so far is done.
    pub(crate) async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        self.submit(Job::Flush(done));
        let _ = wait.await;
    }
}

async fn run(
    releaser: Releaser,
    subscriber: fred::clients::SubscriberClient,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    let mut running: FuturesUnordered<BoxFuture<'static, ()>> = FuturesUnordered::new();
    let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
    let mut open = true;
    while open || !running.is_empty() {
        tokio::select! {
            job = jobs.recv(), if open => match job {
                Some(Job::Release(release, call, dropped)) => {
                    let releaser = releaser.clone();
                    running.push(Box::pin(async move {
                        release_hold(releaser, release).await;
                        drop(call);
                        drop(dropped);
                    }));
                }
                Some(Job::Settle { reply, undo, call }) => {
                    let releaser = releaser.clone();
                    running.push(Box::pin(async move {
                        // A reply lost to the connection puts the field in doubt (the reply
                        // future does that itself); the reconciler then settles it.
                        let reply = reply.await;
                        match (&reply, undo) {
                            (Ok(reply), Some(Undo::Release { release, acquired })) if acquired(reply) => {
                                tracing::debug!(lock = %release.name, "releasing a lock whose acquire was cancelled");
                                release_hold(releaser, release).await;
                            }
                            (Ok(reply), Some(Undo::Run(undo))) => {
                                if let Some(give_back) = undo(reply) {
                                    give_back.await;
                                }
                            }
                            _ => {}
                        }
                        drop(call);
                    }));
                }
                Some(Job::GiveBack { name, permits, by }) => {
                    let redis = Arc::clone(&releaser.redis);
                    running.push(Box::pin(async move {
                        let encoded = (by.encode)(&name, permits, redis.publish_arg);
                        match redis.run_write(&name, by.script, &encoded).await {
                            Ok(_) => tracing::debug!(semaphore = %name, permits, "gave back permits whose waiter left"),
                            Err(err) => tracing::warn!(semaphore = %name, permits, error = %err, "could not give back permits whose waiter left; they stay taken until someone releases them"),
                        }
                    }));
                }
                Some(Job::Flush(done)) => flushes.push(done),
                None => open = false,
            },
            Some(()) = running.next(), if !running.is_empty() => {}
        }
        if running.is_empty() {
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
    }
    // The client is gone: close its connections.
    let _ = releaser.redis.pool.quit().await;
    let _ = subscriber.quit().await;
}

async fn release_hold(releaser: Releaser, release: Release) {
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
        Err(err) if crate::lease::doubt::outcome_unknown(&err) => {
            tracing::warn!(lock = %name, error = %err, "background release of unknown outcome; the holder field is settled once redis answers")
        }
        Err(err) => {
            tracing::warn!(lock = %name, error = %err, "background release failed; the lock expires with its lease")
        }
    }
}
