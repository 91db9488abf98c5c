//! Wake-ups: one shared, reference-counted subscription per channel per client (protocol §1.5).
//!
//! Every waiter of a lock on this client shares one entry: the first one subscribes, later ones
//! only take a reference, the last one to leave unsubscribes. An entry owns a semaphore that
//! starts empty: a message adds as many permits as the waiters' [`WakeRule`] says (the
//! primitive's reading of its channel: for a lock, `0` one waiter, `1` every one). A permit
//! added while nobody is parked stays banked, so a message that arrives between a waiter's
//! failed attempt and its parking is not lost; "every waiter" therefore counts every waiting
//! share, parked or not. SUBSCRIBE and UNSUBSCRIBE of one channel are serialised by the entry,
//! so a quick leave-and-return can never end unsubscribed.

use arcstr::ArcStr;
use foldhash::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use futures::stream::{BoxStream, StreamExt};
use futures::TryFutureExt;
use parking_lot::Mutex;
use tokio::sync::{broadcast, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::{PublishMode, WhenUnavailable};
use crate::error::{Error, Result};

/// How a parked waiter ([`Subscription::park`]) was woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parked {
    /// A message (or a reconnect) released a permit.
    Message,
    /// The waiter's place in its line was notified: a local releaser handed it the lock (or
    /// tried to), or the line's timer fired.
    Handed,
    /// The wait's time bound (the lock's TTL or the caller's budget) ran out.
    Timeout,
}

pin_project_lite::pin_project! {
    /// [`Subscription::park`]'s future.
    struct Park<'a, A> {
        #[pin]
        handed: Option<tokio::sync::futures::Notified<'a>>,
        #[pin]
        acquire: A,
        // Boxed: most parked waiters have no bound of their own (their line's timer wakes
        // them: `Place::wake_at`), and inline it would size every parked waiter's future.
        bound: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
        // Counts the waiter as parked on the entry while the future lives.
        _parked: super::Counted<'a>,
    }
}

impl<'a, A, E> std::future::Future for Park<'a, A>
where
    A: std::future::Future<Output = std::result::Result<tokio::sync::SemaphorePermit<'a>, E>>,
{
    type Output = Parked;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Parked> {
        use std::task::Poll;
        let this = self.project();
        if let Some(handed) = this.handed.as_pin_mut() {
            if handed.poll(cx).is_ready() {
                return Poll::Ready(Parked::Handed);
            }
        }
        if let Poll::Ready(permit) = this.acquire.poll(cx) {
            // The semaphore is never closed; were it, this would read as a spurious wake-up.
            if let Ok(permit) = permit {
                permit.forget();
            }
            return Poll::Ready(Parked::Message);
        }
        match this.bound.as_mut().map(|bound| bound.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Parked::Timeout),
            _ => Poll::Pending,
        }
    }
}

#[derive(Clone)]
pub(crate) struct PubSub {
    shared: Arc<Shared>,
}

struct Shared {
    subscriber: SubscriberClient,
    /// Channels with watchers that received a message (or may have missed one during a
    /// reconnect): the watchdog checks the holds that watch them.
    watched: tokio::sync::mpsc::UnboundedSender<ArcStr>,
    /// The command connections, which waiters retry on after a reconnect.
    commands: fred::clients::Pool,
    mode: PublishMode,
    when_unavailable: WhenUnavailable,
    response_timeout: Duration,
    entries: Mutex<HashMap<ArcStr, Arc<Entry>>>,
    /// Entries removed so far (their UNSUBSCRIBE answered): see [`PubSub::teardowns`].
    teardowns: AtomicUsize,
    /// The model checks' reproduction of the reading before the latch hang's fix: "every
    /// waiter" counted only the parked ones.
    #[cfg(test)]
    wake_parked_only: bool,
    /// The model checks' reproduction of the subscribe before the unconfirmed-subscription
    /// fix: no round trip after SUBSCRIBE (see [`Shared::round_trip`]).
    #[cfg(test)]
    unconfirmed_subscribe: bool,
    /// The model checks' stand-in for the server (`crate::model`): subscriptions go to it
    /// instead of `subscriber`, and background work runs as a task of their scheduler.
    #[cfg(test)]
    model: Option<crate::transport::model_server::Connection>,
}

struct Entry {
    channel: ArcStr,
    /// How many waiters a message lets retry: the rule of the primitive whose waiters share the
    /// channel (set by the waiters' `subscribe` and `join_active`; `None` while only watchers
    /// listen, whom a message never wakes).
    wake: Mutex<Option<WakeRule>>,
    /// Subscriptions alive for this channel; changed only under the `entries` lock.
    refs: AtomicUsize,
    /// Waiters currently parked on the semaphore.
    parked: AtomicUsize,
    /// Shares held by watchers (holders listening for their own lock's unlock messages), part
    /// of `refs` but never parked: they take no permits, and permits are not banked for them.
    watchers: AtomicUsize,
    permits: Semaphore,
    /// Mirrors `ServerState::confirmed` for [`PubSub::join_active`]; written under the `entries`
    /// lock so that a join and the last share's unsubscribe cannot cross.
    confirmed: std::sync::atomic::AtomicBool,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE of this channel and records where the server stands.
    state: tokio::sync::Mutex<ServerState>,
}

#[derive(Default)]
struct ServerState {
    /// A SUBSCRIBE was sent (maybe cancelled before its reply): an UNSUBSCRIBE is owed.
    maybe_subscribed: bool,
    /// The server confirmed the subscription.
    confirmed: bool,
}

/// One channel subscription as [`PubSub::snapshot`] saw it.
pub(crate) struct ChannelSnapshot {
    pub(crate) channel: String,
    pub(crate) confirmed: bool,
    pub(crate) waiters: usize,
    pub(crate) watchers: usize,
    pub(crate) parked: usize,
    pub(crate) banked: usize,
}

/// One waiter's share of a channel subscription. Dropping it releases the share; the last one
/// unsubscribes in the background.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    entry: Arc<Entry>,
    watcher: bool,
}

impl PubSub {
    /// Starts the message and reconnect loops on `subscriber`, which must be connected.
    pub(crate) fn start(
        subscriber: SubscriberClient,
        commands: fred::clients::Pool,
        mode: PublishMode,
        when_unavailable: WhenUnavailable,
        response_timeout: Duration,
        watched: tokio::sync::mpsc::UnboundedSender<ArcStr>,
        shutdown: CancellationToken,
    ) -> (PubSub, Vec<tokio::task::JoinHandle<()>>) {
        let shared = Arc::new(Shared {
            subscriber,
            watched,
            commands,
            mode,
            when_unavailable,
            response_timeout,
            entries: Mutex::new(HashMap::default()),
            teardowns: AtomicUsize::new(0),
            #[cfg(test)]
            wake_parked_only: false,
            #[cfg(test)]
            unconfirmed_subscribe: false,
            #[cfg(test)]
            model: None,
        });
        // fred's notifications are broadcasts: a receiver hears only what is sent after it was
        // made. Every receiver is therefore made here, before `start` returns and any waiter can
        // subscribe, not when its loop first runs: a spawned task may first run milliseconds
        // later on a busy runtime, and an unlock message sent meanwhile would be lost, leaving
        // its waiters parked on a free lock until their bound (the fresh-start hang of issue 24).
        let messages = shared.subscriber.message_rx();
        // fred delivers keyspace notifications on a stream of their own.
        let keyspace_events = shared.subscriber.keyspace_event_rx();
        let reconnects = shared.subscriber.reconnect_rx();
        let slot_changes = shared
            .subscriber
            .is_clustered()
            .then(|| slot_change_stream(&shared.commands));
        let mut tasks = vec![
            tokio::spawn(message_loop(
                Arc::clone(&shared),
                messages,
                shutdown.clone(),
            )),
            tokio::spawn(keyspace_loop(
                Arc::clone(&shared),
                keyspace_events,
                shutdown.clone(),
            )),
            tokio::spawn(reconnect_loop(
                Arc::clone(&shared),
                reconnects,
                shutdown.clone(),
            )),
        ];
        if let Some(changes) = slot_changes {
            tasks.push(tokio::spawn(slot_move_loop(
                Arc::clone(&shared),
                changes,
                shutdown,
            )));
        }
        (PubSub { shared }, tasks)
    }

    /// A `PubSub` on a connection to the model checks' in-memory server, and its message loop
    /// for the checks' scheduler to run. `late_receiver` reproduces the order before the fix of
    /// issue 24's fresh-start hang: the loop makes its receiver when it first runs.
    /// `wake_parked_only` reproduces the reading before the latch hang's fix (see [`Wakes`]),
    /// `unconfirmed_subscribe` the subscribe before the round trip that confirms it.
    #[cfg(test)]
    pub(crate) fn model(
        connection: crate::transport::model_server::Connection,
        late_receiver: bool,
        wake_parked_only: bool,
        unconfirmed_subscribe: bool,
    ) -> (PubSub, futures::future::BoxFuture<'static, ()>) {
        let builder = fred::types::Builder::default_centralized();
        let (subscriber, commands) =
            match (builder.build_subscriber_client(), builder.build_pool(1)) {
                (Ok(subscriber), Ok(commands)) => (subscriber, commands),
                _ => unreachable!("fred builds unconnected clients from its default config"),
            };
        let (watched, _) = tokio::sync::mpsc::unbounded_channel();
        let early = (!late_receiver).then(|| connection.message_rx());
        let late = connection.clone();
        let shared = Arc::new(Shared {
            subscriber,
            watched,
            commands,
            mode: PublishMode::Classic,
            when_unavailable: WhenUnavailable::KeepWaiting,
            response_timeout: Duration::from_secs(5),
            entries: Mutex::new(HashMap::default()),
            teardowns: AtomicUsize::new(0),
            wake_parked_only,
            unconfirmed_subscribe,
            model: Some(connection),
        });
        let looping = Arc::clone(&shared);
        let messages = Box::pin(async move {
            let messages = early.unwrap_or_else(|| late.message_rx());
            message_loop(looping, messages, CancellationToken::new()).await;
        });
        (PubSub { shared }, messages)
    }

    /// Whether no channel has a subscription entry (a cheap check before deriving a channel).
    pub(crate) fn is_idle(&self) -> bool {
        self.shared.entries.lock().is_empty()
    }

    /// Whether this client's subscriber may be subscribed to `channel` on the server (an entry
    /// lives from its SUBSCRIBE until its UNSUBSCRIBE is answered): whether an unlock message
    /// on it counts this client among its receivers.
    pub(crate) fn may_receive(&self, channel: &str) -> bool {
        self.shared.entries.lock().contains_key(channel)
    }

    /// How many subscription entries this client has removed so far, each after its
    /// UNSUBSCRIBE was answered. A count that moved between two [`may_receive`] reads means a
    /// subscription may have come and gone between them, unseen by either.
    ///
    /// [`may_receive`]: PubSub::may_receive
    pub(crate) fn teardowns(&self) -> usize {
        self.shared.teardowns.load(Ordering::Acquire)
    }

    /// The state of every channel subscription whose name `belongs` accepts (for
    /// [`Client::local_state`](crate::Client::local_state)).
    pub(crate) fn snapshot(&self, belongs: impl Fn(&str) -> bool) -> Vec<ChannelSnapshot> {
        let entries = self.shared.entries.lock();
        let mut channels: Vec<_> = entries
            .values()
            .filter(|entry| belongs(&entry.channel))
            .map(|entry| ChannelSnapshot {
                channel: entry.channel.to_string(),
                confirmed: entry.confirmed.load(Ordering::Acquire),
                waiters: entry.waiters(),
                watchers: entry.watchers.load(Ordering::Relaxed),
                parked: entry.parked.load(Ordering::Relaxed),
                banked: entry.permits.available_permits(),
            })
            .collect();
        channels.sort_by(|a, b| a.channel.cmp(&b.channel));
        channels
    }

    /// Takes a share of `channel`'s subscription for a waiter woken by `wake` if this client
    /// already has one confirmed by the server (a watcher's, say); never waits.
    pub(crate) fn join_active(&self, channel: &ArcStr, wake: WakeRule) -> Option<Subscription> {
        let entries = self.shared.entries.lock();
        let entry = entries.get(channel)?;
        if !entry.confirmed.load(Ordering::Acquire) {
            return None;
        }
        Some(self.take_share(entry, Some(wake)))
    }

    /// Takes a share of `channel`'s subscription and returns once the server has confirmed it.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call releases its share, and a SUBSCRIBE that was already sent is
    /// undone by the last share's UNSUBSCRIBE.
    pub(crate) async fn subscribe(&self, channel: &ArcStr, wake: WakeRule) -> Result<Subscription> {
        self.share(channel, Some(wake)).await
    }

    /// Like [`subscribe`](PubSub::subscribe), for a holder that listens for its own lock's
    /// unlock messages instead of waiting for the lock: messages on `channel` are reported to
    /// the watchdog, and the share never takes a permit from the lock's waiters.
    ///
    /// # Cancel safety
    /// As [`subscribe`](PubSub::subscribe).
    pub(crate) async fn watch(&self, channel: &ArcStr) -> Result<Subscription> {
        self.share(channel, None).await
    }

    /// A share of `channel` for a waiter woken by `wake`, or for a watcher (`None`).
    async fn share(&self, channel: &ArcStr, wake: Option<WakeRule>) -> Result<Subscription> {
        let subscription = {
            let mut entries = self.shared.entries.lock();
            let entry = entries.entry(ArcStr::clone(channel)).or_insert_with(|| {
                Arc::new(Entry {
                    channel: ArcStr::clone(channel),
                    wake: Mutex::new(None),
                    refs: AtomicUsize::new(0),
                    parked: AtomicUsize::new(0),
                    watchers: AtomicUsize::new(0),
                    permits: Semaphore::new(0),
                    confirmed: std::sync::atomic::AtomicBool::new(false),
                    state: tokio::sync::Mutex::new(ServerState::default()),
                })
            });
            self.take_share(entry, wake)
        };
        let mut state = subscription.entry.state.lock().await;
        if !state.confirmed {
            state.maybe_subscribed = true;
            self.shared.send_subscribe(channel).await?;
            state.confirmed = true;
            let _entries = self.shared.entries.lock();
            subscription.entry.confirmed.store(true, Ordering::Release);
        }
        drop(state);
        Ok(subscription)
    }

    /// A share of `entry` for a waiter woken by `wake`, or for a watcher (`None`); under `entries`.
    fn take_share(&self, entry: &Arc<Entry>, wake: Option<WakeRule>) -> Subscription {
        entry.refs.fetch_add(1, Ordering::Relaxed);
        match wake {
            Some(wake) => *entry.wake.lock() = Some(wake),
            None => {
                entry.watchers.fetch_add(1, Ordering::Relaxed);
            }
        }
        Subscription {
            shared: Arc::clone(&self.shared),
            entry: Arc::clone(entry),
            watcher: wake.is_none(),
        }
    }
}

impl Shared {
    async fn send_subscribe(&self, channel: &ArcStr) -> Result<()> {
        #[cfg(test)]
        if let Some(model) = &self.model {
            model.subscribe(channel).await;
            if !self.unconfirmed_subscribe {
                model.ping().await;
            }
            return Ok(());
        }
        if self.when_unavailable == WhenUnavailable::FailFast && !self.subscriber.is_connected() {
            return Err(Error::Unavailable(fred::error::Error::new(
                fred::error::ErrorKind::IO,
                "the subscriber connection is down",
            )));
        }
        let channel_name: &str = channel;
        // The server sends keyspace notifications to classic subscribers only.
        let classic = self.mode.classic() || is_keyspace(channel_name);
        let subscribe = async {
            if !classic {
                return self.subscriber.ssubscribe(channel_name).await;
            }
            self.subscriber.subscribe(channel_name).await?;
            self.round_trip().await?;
            // Servers without sharded pub/sub still get the classic subscription.
            if self.mode.sharded() && !is_keyspace(channel_name) {
                if let Err(err) = self.subscriber.ssubscribe(channel_name).await {
                    tracing::debug!(channel = %channel_name, error = %err, "SSUBSCRIBE failed");
                }
            }
            Ok(())
        };
        match tokio::time::timeout(self.response_timeout, subscribe).await {
            Ok(result) => {
                result.map_err(|err| Error::from_redis(err, channel, self.response_timeout))
            }
            Err(_) => Err(Error::Timeout(self.response_timeout)),
        }
    }

    /// A `PING` on the connection that carries this client's classic subscriptions, answered:
    /// every SUBSCRIBE and UNSUBSCRIBE sent before it has been processed by the server.
    ///
    /// fred completes a classic SUBSCRIBE or UNSUBSCRIBE once written (it drops their
    /// out-of-band replies). A waiter retrying right after such a "confirmed" SUBSCRIBE could be
    /// refused while the SUBSCRIBE was still on its way, miss the release published meanwhile and
    /// park on a free lock until its TTL (the family bench's fair-lock hang: its releases tell
    /// only the queue's head). Redis answers one connection's commands in order, so the PING's
    /// reply proves the subscription. In a cluster the PING goes where fred sends classic
    /// subscriptions: the node of the subscriber's id's slot (fred answers a sharded SSUBSCRIBE
    /// itself). Any answer will do, a refusal too: a least-privilege ACL user may not be allowed
    /// `PING` (docs/reliability.md), and its `NOPERM` comes back in order all the same.
    async fn round_trip(&self) -> std::result::Result<(), fred::error::Error> {
        let slot = fred::util::redis_keyslot(self.subscriber.id().as_bytes());
        let ping = fred::types::CustomCommand::new_static("PING", slot, false);
        match self
            .subscriber
            .custom::<fred::types::Value, fred::types::Value>(ping, Vec::new())
            .await
        {
            Err(err)
                if Error::from_redis(err.clone(), "", self.response_timeout).is_transient() =>
            {
                Err(err)
            }
            _ => Ok(()), // the server answered
        }
    }

    async fn send_unsubscribe(&self, channel: &str) {
        #[cfg(test)]
        if let Some(model) = &self.model {
            model.unsubscribe(channel).await;
            model.ping().await;
            return;
        }
        let keyspace = is_keyspace(channel);
        let unsubscribe = async {
            if self.mode.classic() || keyspace {
                self.subscriber.unsubscribe(channel).await?;
                self.round_trip().await?;
            }
            if self.mode.sharded() && !keyspace {
                self.subscriber.sunsubscribe(channel).await?;
            }
            Ok::<_, fred::error::Error>(())
        };
        match tokio::time::timeout(self.response_timeout, unsubscribe).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::debug!(%channel, error = %err, "UNSUBSCRIBE failed"),
            Err(_) => tracing::debug!(%channel, "UNSUBSCRIBE timed out"),
        }
    }

    /// A message on `channel`: wakes its waiters as their primitive's [`WakeRule`] reads it;
    /// its watchers are reported.
    fn on_message(&self, channel: &str, message: i64) {
        let Some(entry) = self.entries.lock().get(channel).cloned() else {
            return;
        };
        let wakes = entry
            .wake
            .lock()
            .map_or(Wakes::Nobody, |wake| wake(message));
        let retries = match wakes {
            Wakes::Nobody => 0,
            Wakes::Up(n) => n,
            #[cfg(test)]
            Wakes::Everyone if self.wake_parked_only => entry.parked.load(Ordering::Relaxed).max(1),
            // Not only the parked ones: a waiter between its attempt and its parking must
            // find a permit banked, or it parks on an open latch (a free lock) for good.
            Wakes::Everyone => entry.waiters(),
        };
        self.wake(&entry, retries);
    }

    /// Lets up to `retries` of `entry`'s waiters retry, and reports its channel if watchers
    /// listen: a watcher checks its hold on any message (a spurious check costs one query).
    fn wake(&self, entry: &Entry, retries: usize) {
        entry.add_permits(retries);
        if entry.watchers.load(Ordering::Relaxed) > 0 {
            let _ = self.watched.send(ArcStr::clone(&entry.channel));
        }
    }

    /// Lets every waiter of every channel retry once, and reports every watched channel (after
    /// a reconnect or lost messages).
    fn wake_everyone(&self) {
        let entries: Vec<_> = self.entries.lock().values().cloned().collect();
        for entry in entries {
            self.wake(&entry, entry.waiters());
        }
    }

    /// Called when a share is dropped: the last one unsubscribes in the background.
    fn release(self: &Arc<Self>, entry: &Arc<Entry>) {
        {
            let _entries = self.entries.lock();
            if entry.refs.fetch_sub(1, Ordering::Relaxed) != 1 {
                return;
            }
        }
        let shared = Arc::clone(self);
        let entry = Arc::clone(entry);
        let unsubscribe = async move {
            let mut state = entry.state.lock().await;
            {
                let _entries = shared.entries.lock();
                if entry.refs.load(Ordering::Relaxed) > 0 {
                    return; // a waiter came back; it keeps the subscription
                }
                entry.confirmed.store(false, Ordering::Release);
            }
            if state.maybe_subscribed {
                shared.send_unsubscribe(&entry.channel).await;
                *state = ServerState::default();
            }
            drop(state);
            let mut entries = shared.entries.lock();
            if entry.refs.load(Ordering::Relaxed) == 0
                && entries
                    .get(&entry.channel)
                    .is_some_and(|e| Arc::ptr_eq(e, &entry))
            {
                entries.remove(&entry.channel);
                shared.teardowns.fetch_add(1, Ordering::Release);
            }
        };
        #[cfg(test)]
        if self.model.is_some() {
            // Not while the scheduler tears a finished (or failed) schedule down.
            if shuttle::current::try_get_current_task().is_some() && !std::thread::panicking() {
                drop(shuttle::future::spawn(unsubscribe));
            }
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime (the process is shutting down): the connection goes away with it.
            return;
        };
        runtime.spawn(unsubscribe);
    }
}

/// How many of a channel's waiters a message lets retry: the primitive's reading of its
/// channel (protocol §1.4), as Java receivers read it (`LockPubSub`, `SemaphorePubSub`,
/// `CountDownLatchPubSub`). Transport knows channels and who waits on them; each primitive
/// brings its rule.
pub(crate) type WakeRule = fn(message: i64) -> Wakes;

/// What a message means to a channel's waiters (see [`WakeRule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakes {
    /// Nobody retries (a message of another meaning).
    Nobody,
    /// Up to this many waiters retry (a lock's release: one; a semaphore's permits: that many).
    Up(usize),
    /// Every waiter retries, parked or about to park (a read-write lock's write release, a
    /// latch at zero): each waiting share gets one permit, so that one whose attempt was still
    /// out when the message came finds it banked (a count of the parked ones alone stranded
    /// such waiters: the family bench's latch hang).
    Everyone,
}

impl Entry {
    /// The shares held by waiters (watchers never take permits).
    fn waiters(&self) -> usize {
        self.refs
            .load(Ordering::Relaxed)
            .saturating_sub(self.watchers.load(Ordering::Relaxed))
    }

    /// Adds up to `n` permits without banking more than one per waiting share: extra permits
    /// would only cause spurious retries.
    fn add_permits(&self, n: usize) {
        let cap = self.waiters();
        let room = cap.saturating_sub(self.permits.available_permits());
        let n = n.min(room);
        if n > 0 {
            self.permits.add_permits(n);
        }
    }
}

impl Subscription {
    /// Parks until `handed` (a local hand-off's notification, or the line's timer) fires, until
    /// a message lets this waiter retry, or until `bound` passes (`None`: no bound), in that
    /// order of precedence when several are ready: a waiter handed the lock leaves a message's
    /// wake-up to the next waiter.
    ///
    /// One hand-written future rather than a `select!` over async blocks: this future is most
    /// of what a parked waiter's task keeps, and the macro's branch wrappers and the timeout's
    /// own future doubled its size.
    ///
    /// # Cancel safety
    /// Cancel safe: a permit handed to a dropped wait goes back to the entry for the next waiter,
    /// and a notification stored for a dropped `handed` stays stored (tokio's `Notified`).
    pub(crate) fn park<'a>(
        &'a self,
        bound: Option<Duration>,
        handed: Option<tokio::sync::futures::Notified<'a>>,
    ) -> impl std::future::Future<Output = Parked> + 'a {
        self.entry.parked.fetch_add(1, Ordering::Relaxed);
        Park {
            handed,
            acquire: self.entry.permits.acquire(),
            bound: bound.map(|bound| Box::pin(tokio::time::sleep(bound))),
            _parked: super::Counted(&self.entry.parked),
        }
    }

    /// Marks a wake-up this waiter just took ([`Parked::Message`]) as not yet answered by an
    /// attempt of its own. Dropped before [`Unanswered::answered`] (the waiter went away:
    /// cancelled, or out of time), it goes back to the channel for the next waiter: a waiter
    /// that takes the one wake-up of a release and leaves must not strand the others on a free
    /// lock until their TTL (found by the model checks, `crate::model`).
    pub(crate) fn unanswered(&self) -> Unanswered {
        Unanswered {
            entry: Some(Arc::clone(&self.entry)),
        }
    }
}

/// A wake-up taken and not yet answered (see [`Subscription::unanswered`]).
pub(crate) struct Unanswered {
    entry: Option<Arc<Entry>>,
}

impl Unanswered {
    /// The waiter answered the wake-up (its attempt is on its way, or it was handed the lock).
    pub(crate) fn answered(mut self) {
        self.entry = None;
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            entry.add_permits(1);
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.watcher {
            self.entry.watchers.fetch_sub(1, Ordering::Relaxed);
        }
        self.shared.release(&self.entry);
    }
}

/// The loop that reads `messages` (the subscriber's, made before any subscription) and wakes
/// waiters.
async fn message_loop(
    shared: Arc<Shared>,
    messages: broadcast::Receiver<fred::types::Message>,
    shutdown: CancellationToken,
) {
    let mut messages = std::pin::pin!(events(messages).take_until(shutdown.cancelled_owned()));
    while let Some(message) = messages.next().await {
        match message {
            Ok(message) => {
                // Every family's messages are integers (§1.4); anything else means nothing.
                if let Some(value) = message.value.as_i64() {
                    shared.on_message(&message.channel, value);
                }
            }
            Err(missed) => {
                tracing::warn!(missed, "pub/sub messages were dropped; waking every waiter");
                shared.wake_everyone();
            }
        }
    }
}

/// The loop that reads the subscriber's keyspace notifications (made before any subscription)
/// and wakes the waiters of their channels: a key's deletion or expiry is the message `0`.
async fn keyspace_loop(
    shared: Arc<Shared>,
    events: broadcast::Receiver<fred::types::KeyspaceEvent>,
    shutdown: CancellationToken,
) {
    let mut events = std::pin::pin!(self::events(events).take_until(shutdown.cancelled_owned()));
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                let Some(key) = event.key.as_str() else {
                    continue; // a name that is not UTF-8 is no lock of ours
                };
                let channel = super::keyspace::channel(event.db, key);
                shared.on_message(&channel, super::keyspace::message_of(&event.operation));
            }
            Err(missed) => {
                tracing::warn!(missed, "keyspace events were dropped; waking every waiter");
                shared.wake_everyone();
            }
        }
    }
}

/// Whether `channel` is a keyspace channel, which is only ever subscribed to classic.
fn is_keyspace(channel: &str) -> bool {
    channel.starts_with(super::keyspace::CHANNEL_PREFIX)
}

/// The events of a broadcast receiver as a stream: each event, or `Err(missed)` when the
/// receiver lagged behind; it ends once the sender is gone.
pub(crate) fn events<T: Clone + Send + 'static>(
    rx: broadcast::Receiver<T>,
) -> BoxStream<'static, Result<T, u64>> {
    use tokio::sync::broadcast::error::RecvError;
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(event) => Some((Ok(event), rx)),
            Err(RecvError::Lagged(missed)) => Some((Err(missed), rx)),
            Err(RecvError::Closed) => None,
        }
    }))
}

/// [`events`] as bare notifications: a lagging receiver counts as one (something changed).
pub(crate) fn notifications<T: Clone + Send + 'static>(
    rx: broadcast::Receiver<T>,
) -> BoxStream<'static, ()> {
    events(rx).map(drop).boxed()
}

/// How often a clustered client with subscriptions refreshes its slot map.
const TOPOLOGY_SCAN: Duration = Duration::from_secs(1);

/// Every change of the slot map that one of the command connections learns, as one stream.
fn slot_change_stream(commands: &fred::clients::Pool) -> BoxStream<'static, ()> {
    futures::stream::select_all(
        commands
            .clients()
            .iter()
            .map(|client| notifications(client.cluster_change_rx())),
    )
    .boxed()
}

/// In a cluster, a node giving up a slot drops its sharded subscriptions (fred discards the
/// `sunsubscribe` push), and a master that fails over takes all its subscriptions with it: their
/// waiters would hear nothing until their TTL. So every change of the slot map the command
/// connections learn (a `MOVED`, or the scan below) refreshes the subscriber's map, re-subscribes
/// every channel on its slot's current node and lets every waiter retry once (a release may have
/// been announced on the new node meanwhile).
async fn slot_move_loop(
    shared: Arc<Shared>,
    mut changes: BoxStream<'static, ()>,
    shutdown: CancellationToken,
) {
    use fred::interfaces::ClusterInterface;
    // fred announces every refresh of its map, changed or not: compare the slot ranges.
    let slot_map = |shared: &Shared| -> Vec<(u16, u16, String)> {
        let mut ranges: Vec<_> = shared
            .commands
            .clients()
            .iter()
            .filter_map(|client| client.cached_cluster_state())
            .flat_map(|state| {
                state
                    .slots()
                    .iter()
                    .map(|range| (range.start, range.end, range.primary.to_string()))
                    .collect::<Vec<_>>()
            })
            .collect();
        ranges.sort_unstable();
        ranges.dedup();
        ranges
    };
    // While anything is subscribed, the slot map is also refreshed every second (Redisson's
    // default cluster `scanInterval`): a client whose own commands never touch a moved slot
    // would otherwise learn of the move only when its waiters' TTLs end.
    let mut scan = tokio::time::interval(TOPOLOGY_SCAN);
    scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut known = slot_map(&shared);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            change = changes.next() => if change.is_none() { return },
            _ = scan.tick() => {
                if shared.entries.lock().is_empty() {
                    continue;
                }
                let _ = shared.commands.next().sync_cluster().await;
            }
        }
        let now = slot_map(&shared);
        if now == known {
            continue;
        }
        known = now;
        if let Err(err) = shared.subscriber.sync_cluster().await {
            tracing::debug!(error = %err, "refreshing the subscriber's slot map failed");
        }
        if let Err(err) = resubscribe(&shared).await {
            tracing::warn!(error = %err, "re-subscribing after a slot move failed");
        }
        tracing::debug!("cluster slots moved; waking every waiter");
        shared.wake_everyone();
    }
}

/// Subscribes again to every channel the subscriber tracks: the classic ones in one
/// `SUBSCRIBE`, confirmed by [`Shared::round_trip`] (the caller wakes every waiter next, and one
/// retrying before the server had the subscription could miss a release), each sharded one with
/// its own `SSUBSCRIBE` on its slot's node. Every channel is tried; the first error is returned.
/// Not fred's `resubscribe_all`: it also sends `SUBSCRIBE` and `PSUBSCRIBE` with nothing to
/// subscribe, which the server refuses, and stops at the first error, so a client with only
/// sharded channels never got them back.
async fn resubscribe(shared: &Shared) -> Result<(), fred::error::Error> {
    let subscriber = &shared.subscriber;
    let mut first_error = None;
    let classic: Vec<_> = subscriber.tracked_channels().into_iter().collect();
    if !classic.is_empty() {
        let subscribed = subscriber
            .subscribe(classic)
            .and_then(|()| shared.round_trip());
        if let Err(err) = subscribed.await {
            first_error.get_or_insert(err);
        }
    }
    for channel in subscriber.tracked_shard_channels() {
        if let Err(err) = subscriber.ssubscribe(channel).await {
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// After the subscriber reconnects, restores every subscription and then lets every waiter
/// retry once: messages sent while it was away are lost.
async fn reconnect_loop(
    shared: Arc<Shared>,
    reconnects: broadcast::Receiver<fred::types::config::Server>,
    shutdown: CancellationToken,
) {
    // A lagging receiver missed reconnects: one is all it needs to know.
    let reconnects = notifications(reconnects).take_until(shutdown.clone().cancelled_owned());
    let mut reconnects = std::pin::pin!(reconnects);
    while reconnects.next().await.is_some() {
        if let Err(err) = resubscribe(&shared).await {
            tracing::warn!(error = %err, "re-subscribing after a reconnect failed");
        }
        // Every waiter retries at once, on the command connections, which reconnect on their
        // own: wait for them too (bounded), or under `FailFast` a retry sent a moment before
        // they are back fails with `Unavailable`.
        let commands_back = async {
            let _ = shared.commands.wait_for_connect().await;
            // A command connection can still look connected while its socket died with the
            // server (fred notices at its next read or write): one PING on each proves it, or
            // makes fred notice and reconnect, before the waiters' retries go out. Without it a
            // retry on Redis 6.2, which restarts within milliseconds, once landed on such a
            // socket and failed with "Connection closed unexpectedly" under `FailFast`.
            for client in shared.commands.clients() {
                let _ = client.ping::<fred::types::Value>(None).await;
            }
            let _ = shared.commands.wait_for_connect().await;
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::timeout(shared.response_timeout, commands_back) => {}
        }
        tracing::debug!("subscriber reconnected; waking every waiter");
        shared.wake_everyone();
    }
}
