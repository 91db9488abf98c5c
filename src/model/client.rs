//! A client of the model server that runs the crate's own in-process machinery: the wait loop
//! (`kit/wait.rs`), the local lines and hand-off slots (`kit/handoff.rs`), giving way
//! (`kit/give_way.rs`) and the subscription shares and message loop (`transport/pubsub.rs`).
//! What it adds is what talks to Redis: the attempt, and a release that takes the steps of
//! `kit/release.rs::release_or_hand_off` in its order (claim, transfer, settle, release an
//! orphaned hand-off) against the model server. A map of live holds stands in for the lease
//! table, and a janitor task for the client's.

use arcstr::ArcStr;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::config::WhenUnavailable;
use crate::error::Error;
use crate::kit::handoff::Handoffs;
use crate::kit::janitor::{Janitor, Job, Release};
use crate::kit::wait::{
    acquire_with_wait, lock_channel, lock_wake, no_hand_off, Holder, TryOutcome, WaitChannel,
    Waiter, Waiting,
};
use crate::lease::watchdog::HoldKey;
use crate::transport::model_server::{Connection, Released, Server};
use crate::transport::pubsub::PubSub;

pub(crate) struct ModelClient {
    pub(crate) server: Arc<Server>,
    pub(crate) connection: Connection,
    pub(crate) pubsub: PubSub,
    handoffs: Arc<Handoffs>,
    janitor: Janitor,
    /// The lease table's part: live holds per field.
    holds: Mutex<HashMap<HoldKey, u32>>,
}

/// How a model client is made.
#[derive(Clone, Copy)]
pub(crate) struct Setup {
    /// Hand-offs in a row before a plain release (`Config::max_local_handoffs`); 0: none.
    pub(crate) max_in_row: u32,
    /// Whether a spent budget may end in a conditional hand-off.
    pub(crate) conditional: bool,
    /// The message loop makes its receiver when it first runs (the order before issue 24's fix).
    pub(crate) late_receiver: bool,
    /// A message that wakes every waiter wakes only the parked ones (the reading before the
    /// latch hang's fix, `transport::pubsub::Wakes::Everyone`).
    pub(crate) wake_parked_only: bool,
    /// A SUBSCRIBE counts as confirmed once written, with no round trip after it (the order
    /// before the unconfirmed-subscription fix, `transport::pubsub::Shared::round_trip`).
    pub(crate) unconfirmed_subscribe: bool,
}

impl ModelClient {
    /// Starts a client: its message loop and janitor run as tasks of the scheduler. The janitor
    /// task ends once the client and every place of its lines are gone; await it before
    /// judging the server's final state.
    pub(crate) fn start(
        server: &Arc<Server>,
        setup: Setup,
    ) -> (Arc<ModelClient>, shuttle::future::JoinHandle<()>) {
        let connection = server.connect();
        let (pubsub, message_loop) = PubSub::model(
            connection.clone(),
            setup.late_receiver,
            setup.wake_parked_only,
            setup.unconfirmed_subscribe,
        );
        drop(shuttle::future::spawn(message_loop)); // detached: it never ends
        let handoffs = Arc::new(Handoffs::new(
            setup.max_in_row,
            setup.conditional,
            pubsub.clone(),
        ));
        let (janitor, jobs) = Janitor::detached();
        let client = Arc::new(ModelClient {
            server: Arc::clone(server),
            connection,
            pubsub,
            handoffs,
            janitor,
            holds: Mutex::new(HashMap::new()),
        });
        // A subscription is never dropped while a waiter relies on it: whenever a share is
        // confirmed with waiters on it, the server has this client subscribed.
        let (pubsub, id) = (client.pubsub.clone(), client.connection.id);
        let watched = Arc::downgrade(server);
        server.check_always(move || {
            let Some(server) = watched.upgrade() else {
                return;
            };
            for share in pubsub.snapshot(|_| true) {
                if share.confirmed && share.waiters > 0 {
                    assert!(
                        server.subscribed(id, &share.channel),
                        "{} waiters rely on {}, which the server no longer sends them",
                        share.waiters,
                        share.channel
                    );
                }
            }
        });
        let janitor_task = shuttle::future::spawn(run_janitor(
            Arc::downgrade(&client),
            Arc::clone(server),
            Arc::clone(&client.handoffs),
            jobs,
        ));
        (client, janitor_task)
    }

    /// `Lock::lock` for owner `field`: the crate's wait loop with a model attempt.
    pub(crate) async fn lock(self: &Arc<Self>, name: &str, field: &str) -> Held {
        let name: ArcStr = name.into();
        let field: ArcStr = field.into();
        let waiter = Waiter {
            name: &name,
            holder: Some(Holder {
                field: &field,
                lease_ms: crate::transport::model_server::LEASE_MS as u64,
                wait_ms: 0,
            }),
            channel: WaitChannel::Of(lock_channel),
            wake: lock_wake,
        };
        let attempt = || {
            let (client, name, field) = (
                Arc::clone(self),
                ArcStr::clone(&name),
                ArcStr::clone(&field),
            );
            async move {
                match client.server.acquire(&name, &field).await {
                    Ok(reentered) => Ok(TryOutcome::Acquired(
                        Held::taken(&client, &name, &field),
                        reentered,
                    )),
                    Err(ttl) => Ok(TryOutcome::Busy(ttl)),
                }
            }
        };
        let adopt = Some(|_sent_at, _token| Held::taken(self, &name, &field));
        match acquire_with_wait(&**self, &waiter, None, attempt, adopt).await {
            Ok(Some((held, _acquisition))) => held,
            Ok(None) => unreachable!("an unbounded wait ends acquired"),
            Err(err) => panic!("the model server never fails: {err}"),
        }
    }

    /// `CountDownLatch::wait`: the crate's wait loop with the latch's attempt (a `GET`) and wake
    /// rule.
    pub(crate) async fn wait_latch(self: &Arc<Self>, name: &str) {
        let name_arc: ArcStr = name.into();
        let waiter = Waiter {
            name: &name_arc,
            holder: None,
            channel: WaitChannel::Of(|name, _| crate::name::latch_channel(name)),
            wake: crate::sync::latch::opened_wake,
        };
        let attempt = || async move {
            match self.server.count(name).await {
                0 => Ok(TryOutcome::Acquired((), false)),
                _ => Ok(TryOutcome::Busy(-1)),
            }
        };
        match acquire_with_wait(&**self, &waiter, None, attempt, no_hand_off()).await {
            Ok(Some(((), _acquisition))) => {}
            Ok(None) => unreachable!("an unbounded wait ends acquired"),
            Err(err) => panic!("the model server never fails: {err}"),
        }
    }

    /// What the client and the server know of `name`, for a failing check's report.
    pub(crate) fn describe(&self, name: &str) -> String {
        let (line, in_row) = self.handoffs.snapshot(name);
        let shares: Vec<String> = self
            .pubsub
            .snapshot(|_| true)
            .iter()
            .map(|share| {
                format!(
                    "{} confirmed={} server-subscribed={} waiters={} parked={} banked={}",
                    share.channel,
                    share.confirmed,
                    self.server.subscribed(self.connection.id, &share.channel),
                    share.waiters,
                    share.parked,
                    share.banked
                )
            })
            .collect();
        format!(
            "server holder: {:?}; local holds: {:?}; line: {line:?} ({in_row} hand-offs in a row); shares: {shares:?}",
            self.server.holder(name),
            self.holds.lock().iter().map(|(key, count)| (key.field.to_string(), *count)).collect::<Vec<_>>(),
        )
    }

    fn count(&self, key: &HoldKey, up: bool) {
        let mut holds = self.holds.lock();
        let count = holds.entry(key.clone()).or_default();
        if up {
            *count += 1;
        } else {
            *count = count
                .checked_sub(1)
                .unwrap_or_else(|| panic!("{} released a hold it did not count", key.field));
        }
        if *count == 0 {
            holds.remove(key);
        }
    }
}

impl Waiting for ModelClient {
    fn pubsub(&self) -> &PubSub {
        &self.pubsub
    }
    fn handoffs(&self) -> &Arc<Handoffs> {
        &self.handoffs
    }
    fn janitor(&self) -> &Janitor {
        &self.janitor
    }
    fn holds(&self, key: &HoldKey) -> bool {
        self.holds.lock().contains_key(key)
    }
    fn watchdog_timeout(&self) -> Duration {
        Duration::from_millis(crate::transport::model_server::LEASE_MS as u64)
    }
    fn when_unavailable(&self) -> WhenUnavailable {
        WhenUnavailable::KeepWaiting
    }
    fn explain(&self, err: Error) -> Error {
        err
    }
}

/// One hold taken through the model client. Dropped without [`Held::unlock`] (its task was
/// cancelled, say), it is released by the janitor, as a guard's is.
pub(crate) struct Held {
    client: Arc<ModelClient>,
    key: HoldKey,
    armed: bool,
}

/// The model server's holds have no clock: they never lapse.
impl crate::kit::wait::Lapse for Held {
    fn lapsed(&self) -> bool {
        false
    }
}

impl Held {
    /// A hold the server just gave `field`, counted at once (the lease table's `acquired`).
    fn taken(client: &Arc<ModelClient>, name: &ArcStr, field: &ArcStr) -> Held {
        let key = HoldKey {
            name: ArcStr::clone(name),
            field: ArcStr::clone(field),
        };
        client.count(&key, true);
        Held {
            client: Arc::clone(client),
            key,
            armed: true,
        }
    }

    pub(crate) fn field(&self) -> &str {
        &self.key.field
    }

    /// `LockGuard::unlock`: counted released, then released on the server (or handed over).
    pub(crate) async fn unlock(mut self) {
        self.armed = false;
        self.client.count(&self.key, false);
        release_or_hand_off(
            &self.client.server,
            &self.client.handoffs,
            release_of(&self.key),
        )
        .await;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.armed {
            self.client.count(&self.key, false);
            self.client
                .janitor
                .submit(Job::Release(release_of(&self.key), None, None));
        }
    }
}

fn release_of(key: &HoldKey) -> Release {
    Release {
        name: ArcStr::clone(&key.name),
        field: ArcStr::clone(&key.field),
        lease_ms: crate::transport::model_server::LEASE_MS as u64,
        script: None,
    }
}

/// `kit/release.rs::release_or_hand_off` for a script-less release with no field in doubt, step
/// for step, against the model server.
async fn release_or_hand_off(server: &Server, handoffs: &Handoffs, mut release: Release) {
    let channel = crate::name::lock_channel(&release.name);
    loop {
        let (claim, heir) = match handoffs.claim(&release.name, None, || channel.clone()) {
            Ok(claimed) => claimed,
            Err(local_waiters) => {
                let plain =
                    handoffs.plain_release(&release.name, || channel.clone(), local_waiters);
                let released = server
                    .release(&release.name, &channel, &release.field, None, None)
                    .await;
                if let (Some(plain), Released::Freed { receivers }) = (plain, released) {
                    plain.settle(receivers);
                }
                return;
            }
        };
        let plain = handoffs.plain_release(&release.name, || channel.clone(), claim.conditional);
        let released = server
            .release(
                &release.name,
                &channel,
                &release.field,
                Some(&heir.field),
                heir.unless_listeners_above().map(u64::from),
            )
            .await;
        let handed = (released == Released::HandedOver).then_some(0);
        match claim.settle(handed) {
            // The waiter left while the lock was handed to it: release its hold too.
            Some(lease_ms) => {
                release = Release {
                    field: ArcStr::clone(&heir.field),
                    lease_ms,
                    ..release
                };
            }
            None => {
                if let (Some(plain), Released::Freed { receivers }) = (plain, released) {
                    plain.settle(receivers);
                }
                return;
            }
        }
    }
}

/// The client's janitor: releases of dropped holds and of hand-offs whose waiter left.
async fn run_janitor(
    client: std::sync::Weak<ModelClient>,
    server: Arc<Server>,
    handoffs: Arc<Handoffs>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    drop(client);
    while let Some(job) = jobs.recv().await {
        match job {
            Job::Release(release, _, _) => release_or_hand_off(&server, &handoffs, release).await,
            Job::Settle { .. } | Job::Write { .. } | Job::GiveBack { .. } | Job::Flush(_) => {
                unreachable!("the model sends only releases")
            }
        }
    }
}
