//! Following a Sentinel failover as soon as the sentinels announce it.
//!
//! fred asks the sentinels for the master only when a connection is (re)established. A master
//! replaced by a planned failover (`SENTINEL FAILOVER`) keeps its clients and answers as a master
//! until the sentinels demote it (closing their connections), about 10 s later. Meanwhile this
//! client would stay on it while Redisson clients, which ask the sentinels every `scanInterval`
//! (1 s), lock on the new master: two holders of one lock, and waiters that never hear the
//! release.
//!
//! So the client listens on every sentinel for `+switch-master` (and asks each sentinel for the
//! master whenever it connects, in case it missed a switch); command connections or a subscriber
//! not on the announced master reconnect, which makes fred ask the sentinels again, and the
//! subscriber's reconnect re-subscribes and wakes every waiter (`pubsub.rs`). A sentinel that
//! has not heard of the switch may still name the old master, so the reconnection is repeated
//! for a while until it lands on the new one.
//!
//! Only the latest master named is pursued, and the pursuit never holds up the listeners: a new
//! switch (the sentinels may fail over again within seconds) replaces it at once. A sentinel's
//! answer on connect is only a snapshot that may be stale (its master may die before the
//! sentinels notice): it moves the connections that are up and elsewhere once and is never
//! chased; chasing it kept every connection reconnecting for 10 s to a master that was gone,
//! deaf to the switch that followed.

use arcstr::ArcStr;
use std::time::Duration;

use fred::clients::{Pool, SubscriberClient};
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::config::{Server, ServerConfig};
use fred::types::{Builder, Message, Value};
use futures::future::{BoxFuture, FutureExt, OptionFuture};
use futures::stream::{BoxStream, StreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::shown::Reply;
use crate::transport::pubsub::{events, notifications};

/// The sentinels' announcement of a new master: `<service> <old ip> <old port> <new ip> <new port>`.
const SWITCH_MASTER: &str = "+switch-master";
/// How long a switch is pursued: the sentinels agree on the new master within a couple of hello
/// periods (2 s each), and past this the old master is demoted by the sentinels anyway.
const FOLLOW_FOR: Duration = Duration::from_secs(10);
/// The pause before reconnecting again after a sentinel named a master other than the new one.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// One subscriber connection per sentinel of a sentinel configuration, listening for switches.
#[derive(Clone)]
pub(crate) struct Sentinels {
    service: ArcStr,
    listeners: Vec<SubscriberClient>,
}

enum Event {
    /// Listener `index` (re)connected to its sentinel.
    Connected(usize),
    /// A sentinel announced this new master of the service.
    Switched(Server),
}

/// How a master the sentinels named is pursued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pursuit {
    /// Announced by `+switch-master`: reconnect until there, for at most [`FOLLOW_FOR`] (fred may
    /// ask a sentinel that has not heard of the switch yet).
    Switch,
    /// One sentinel's answer when a listener connected: reconnect once the connections that are
    /// up and on another node; a connection that is down reconnects on its own, asking the
    /// sentinels.
    Answer,
}

impl Sentinels {
    /// Listeners of every sentinel `builder` names, built like the client's own connections (TLS,
    /// timeouts, reconnect policy; the sentinels' own credentials) but not connected yet; `None` unless `builder`
    /// describes a sentinel deployment.
    pub(crate) fn new(builder: &Builder) -> Result<Option<Sentinels>, fred::error::Error> {
        let Some(ServerConfig::Sentinel {
            hosts,
            service_name,
            username,
            password,
        }) = builder.get_config().map(|config| &config.server)
        else {
            return Ok(None);
        };
        let listeners = hosts
            .iter()
            .map(|host| {
                let mut builder = builder.clone();
                builder.with_config(|config| {
                    config.server = ServerConfig::Centralized {
                        server: host.clone(),
                    };
                    // The URL's user and password are the data nodes'; a sentinel's own are
                    // `sentinelUsername`/`sentinelPassword` (none: no AUTH), as fred uses them.
                    config.username = username.clone();
                    config.password = password.clone();
                    // A sentinel has no databases to select.
                    config.database = None;
                    // A sentinel down at start is retried like a lost one, not given up.
                    config.fail_fast = false;
                });
                builder.build_subscriber_client()
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(Sentinels {
            service: service_name.as_str().into(),
            listeners,
        }))
    }

    /// Connects the listeners and starts the task that moves `commands` and `subscriber` to the
    /// master the sentinels announce; it ends (closing the listeners) when `stop` is cancelled.
    pub(crate) fn start(
        &self,
        commands: Pool,
        subscriber: SubscriberClient,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let mut events = futures::stream::select_all(
            self.listeners
                .iter()
                .enumerate()
                .map(|(index, listener)| self.events(index, listener)),
        );
        // After subscribing to the notifications: the first connection is announced too.
        for listener in &self.listeners {
            drop(listener.connect());
        }
        let sentinels = self.clone();
        tokio::spawn(async move {
            // The pursuit of the latest master named, polled beside the listeners' events so
            // that a newer one replaces it; `None` once it is over.
            let mut pursuit: Option<(Pursuit, BoxFuture<'static, ()>)> = None;
            loop {
                let pursued = OptionFuture::from(pursuit.as_mut().map(|(_, pursuing)| pursuing));
                let event = tokio::select! {
                    _ = stop.cancelled() => break,
                    event = events.next() => event,
                    Some(()) = pursued => {
                        pursuit = None;
                        continue;
                    }
                };
                let Some(event) = event else {
                    // The listeners live as long as this task: not expected.
                    stop.cancelled().await;
                    break;
                };
                let named = match event {
                    Event::Switched(master) => Some((master, Pursuit::Switch)),
                    Event::Connected(index) => {
                        let asked = tokio::select! {
                            _ = stop.cancelled() => break,
                            asked = sentinels.on_connect(&sentinels.listeners[index]) => asked,
                        };
                        asked.map(|master| (master, Pursuit::Answer))
                    }
                };
                let Some((master, how)) = named else { continue };
                if how == Pursuit::Answer && matches!(pursuit, Some((Pursuit::Switch, _))) {
                    // A switch, announced before this answer, is still being pursued: the answer
                    // is that master, or a sentinel's that has not heard of the switch yet.
                    tracing::debug!(%master, "a sentinel's answer during a switch; still following the switch");
                    continue;
                }
                let following = follow(commands.clone(), subscriber.clone(), master, how);
                pursuit = Some((how, following.boxed()));
            }
            sentinels.quit().await;
        })
    }

    /// Closes the listeners' connections (also stops reconnecting to a sentinel that is down),
    /// waiting at most a second.
    pub(crate) async fn quit(&self) {
        let quit = futures::future::join_all(self.listeners.iter().map(|listener| listener.quit()));
        let _ = tokio::time::timeout(Duration::from_secs(1), quit).await;
    }

    /// Listener `index`'s connections and the switches of this service it hears of.
    fn events(&self, index: usize, listener: &SubscriberClient) -> BoxStream<'static, Event> {
        let connects =
            notifications(listener.reconnect_rx()).map(move |()| Event::Connected(index));
        let service = ArcStr::clone(&self.service);
        // A lagging receiver is ignored: only switches are subscribed to, and other sentinels
        // announce them too.
        let switches = events(listener.message_rx()).filter_map(move |message| {
            let master = message
                .ok()
                .and_then(|message| switched_to(&message, &service));
            futures::future::ready(master.map(Event::Switched))
        });
        futures::stream::select(connects, switches).boxed()
    }

    /// On a (re)connection to a sentinel: asks it for the master (a switch may have been missed
    /// meanwhile), then listens for switches; a subscribed connection takes no other command.
    async fn on_connect(&self, listener: &SubscriberClient) -> Option<Server> {
        let asked = listener
            .custom::<Vec<String>, _>(
                fred::cmd!("SENTINEL"),
                vec!["GET-MASTER-ADDR-BY-NAME", &*self.service],
            )
            .await;
        if let Err(err) = listener.subscribe(SWITCH_MASTER).await {
            tracing::debug!(error = %err, "subscribing to a sentinel's switches failed");
        }
        match asked.as_deref() {
            Ok([host, port]) => Some(Server::new(host.as_str(), port.parse().ok()?)),
            Ok(other) => {
                let reply = Value::Array(
                    other
                        .iter()
                        .map(|text| Value::from(text.as_str()))
                        .collect(),
                );
                tracing::debug!(reply = %Reply(&reply), "a sentinel does not know the master");
                None
            }
            Err(err) => {
                tracing::debug!(error = %err, "asking a sentinel for the master failed");
                None
            }
        }
    }
}

/// The new master a `+switch-master` message announces for `service`.
fn switched_to(message: &Message, service: &str) -> Option<Server> {
    if &*message.channel != SWITCH_MASTER {
        return None;
    }
    let text = message.value.as_str()?;
    match text.split(' ').collect::<Vec<_>>().as_slice() {
        [name, _, _, host, port] if *name == service => {
            Some(Server::new(*host, port.parse().ok()?))
        }
        _ => None,
    }
}

/// Moves every command connection and the subscriber to `master`, pursued as `how` says.
async fn follow(commands: Pool, subscriber: SubscriberClient, master: Server, how: Pursuit) {
    let deadline = Instant::now() + FOLLOW_FOR;
    let commands = futures::future::join_all(
        commands
            .clients()
            .iter()
            .map(|client| reconnect_to(client, &master, how, deadline)),
    );
    futures::future::join(commands, reconnect_to(&subscriber, &master, how, deadline)).await;
}

/// Whether `client` is connected to `master`.
fn on<C: ClientLike>(client: &C, master: &Server) -> bool {
    client.is_connected() && client.active_connections().contains(master)
}

/// Reconnects `client` until it is connected to `master` (fred asks the sentinels each time),
/// at most until `deadline`; as an [`Pursuit::Answer`], at most once, and only if it is connected
/// elsewhere.
async fn reconnect_to<C: ClientLike>(client: &C, master: &Server, how: Pursuit, deadline: Instant) {
    if how == Pursuit::Answer {
        if client.is_connected() && !on(client, master) {
            tracing::debug!(%master, "a sentinel names another master; reconnecting once");
            match tokio::time::timeout_at(deadline, client.force_reconnection()).await {
                Ok(Ok(())) | Err(_) => {}
                Ok(Err(err)) => tracing::debug!(error = %err, "reconnecting failed"),
            }
        }
        return;
    }
    let mut again = false;
    while !on(client, master) {
        if Instant::now() >= deadline {
            tracing::warn!(%master, "could not reach the master the sentinels announced");
            return;
        }
        if again {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        again = true;
        tracing::debug!(%master, "the sentinels announced a new master; reconnecting");
        let reconnect = async {
            if client.is_connected() {
                client.force_reconnection().await
            } else {
                // Already reconnecting on its own (the old master is gone), asking the sentinels.
                client.wait_for_connect().await
            }
        };
        match tokio::time::timeout_at(deadline, reconnect).await {
            Ok(Ok(())) | Err(_) => {}
            Ok(Err(err)) => tracing::debug!(error = %err, "reconnecting to the new master failed"),
        }
    }
}
