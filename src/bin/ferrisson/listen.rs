//! What `watch` hears between its reads: the server's keyspace events on the watched key where
//! the server sends them (`notify-keyspace-events`; never turned on here), else the channels
//! on which the family announces releases. Each message makes `watch` read the lock at once,
//! and says what happened in a way a read alone cannot: a hold that came and went between two
//! reads, a force unlock (a `DEL` that no release's decrement preceded).

use std::time::Duration;

use ferrisson::fred::clients::SubscriberClient;
use ferrisson::fred::prelude::{ClientLike, EventInterface, PubsubInterface};
use ferrisson::fred::types::config::Config as FredConfig;
use ferrisson::fred::types::{Builder, KeyspaceEvent, Message};
use ferrisson::PublishMode;
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};

/// Where the changes are heard from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Keyspace events on the watched key: every write, delete and expiry.
    Keyspace,
    /// The release channels: every full release and force unlock that publishes.
    Channels,
}

/// What was heard since the last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Heard {
    /// Keyspace events on the key, in order (`hincrby`, `pexpire`, `del`, `expired`, ...).
    pub events: Vec<String>,
    /// Messages on the release channels.
    pub messages: u32,
    /// Messages were dropped (the reader fell behind): anything may have happened.
    pub lagged: bool,
}

impl Heard {
    /// Whether the key was deleted by something other than a release: a `DEL` that no
    /// decrement (`hincrby`, a release's last step before the delete) directly preceded.
    /// `before` is the last event heard before these.
    pub fn deleted_by_force(&self, before: Option<&str>) -> bool {
        let mut previous = before;
        for event in &self.events {
            if event == "del" && !matches!(previous, Some("hincrby" | "hdel")) {
                return true;
            }
            previous = Some(event.as_str());
        }
        false
    }

    pub fn expired(&self) -> bool {
        self.events.iter().any(|e| e == "expired")
    }

    /// Whether the key's end was heard: deleted or expired.
    fn gone(&self) -> bool {
        self.events.iter().any(|e| e == "del" || e == "expired")
    }

    fn append(&mut self, more: Heard) {
        self.events.extend(more.events);
        self.messages += more.messages;
        self.lagged |= more.lagged;
    }

    /// The releases heard (a key deleted or expired, or a message on a release channel);
    /// `None` when messages were lost.
    pub fn releases(&self) -> Option<u32> {
        let gone = self
            .events
            .iter()
            .filter(|e| matches!(e.as_str(), "del" | "expired"))
            .count();
        (!self.lagged).then(|| self.messages + u32::try_from(gone).unwrap_or(u32::MAX))
    }
}

/// A subscription of its own, beside the library's client.
pub struct Listener {
    client: SubscriberClient,
    messages: broadcast::Receiver<Message>,
    /// fred hands keyspace notifications to their own receiver, not as messages.
    events: broadcast::Receiver<KeyspaceEvent>,
    pub source: Source,
    /// Why keyspace events are not used, for the banner.
    pub why_not_keyspace: Option<String>,
    /// Heard and not drained yet.
    pending: Heard,
    /// A receiver closed (the subscriber client stopped).
    closed: bool,
}

impl Listener {
    /// Subscribes for `name`, with the connection settings of `config`. Fails with a message when
    /// the server refuses the subscription (an ACL rule without `SUBSCRIBE`, say).
    pub async fn start(config: &ferrisson::Config, name: &str) -> Result<Listener, String> {
        let fred_config = FredConfig::from_url(&config.url).map_err(|err| err.to_string())?;
        let clustered = fred_config.server.is_clustered();
        let db = fred_config.database.unwrap_or(0);
        let mut builder = Builder::from_config(fred_config);
        builder
            .set_connection_config(config.connection.clone())
            .set_policy(config.reconnect_policy.clone());
        let client = builder
            .build_subscriber_client()
            .map_err(|err| err.to_string())?;
        // A connection left open by a failure would outlive the error: quit it first.
        let started = async {
            let connected = async {
                client.init().await?;
                client.wait_for_connect().await
            };
            match tokio::time::timeout(config.connect_timeout, connected).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => return Err(err.to_string()),
                Err(_) => return Err("the subscription's connection timed out".to_owned()),
            }
            let why_not_keyspace = if clustered {
                Some("a cluster sends keyspace events from the key's node only".to_owned())
            } else {
                why_not_keyspace(&client).await
            };
            let keyspace_channel = format!("__keyspace@{db}__:{name}");
            let messages = client.message_rx();
            let events = client.keyspace_event_rx();
            let subscribed = async {
                if why_not_keyspace.is_none() {
                    client.subscribe(keyspace_channel.as_str()).await?;
                    return Ok(());
                }
                let channels = ferrisson::inspect::release_channels(name);
                if config.publish_mode != PublishMode::Sharded {
                    client.subscribe(Vec::from(channels.clone())).await?;
                    // A fair lock's release tells only its queue's head, on its own channel.
                    client
                        .psubscribe(format!("{}:*", glob_escape(&channels[0])))
                        .await?;
                }
                if matches!(
                    config.publish_mode,
                    PublishMode::Sharded | PublishMode::Both
                ) || (clustered && config.publish_mode == PublishMode::Auto)
                {
                    for channel in channels {
                        client.ssubscribe(channel).await?;
                    }
                }
                Ok::<(), ferrisson::fred::error::Error>(())
            };
            match tokio::time::timeout(config.response_timeout, subscribed).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => return Err(err.to_string()),
                Err(_) => return Err("the subscription timed out".to_owned()),
            }
            Ok::<_, String>((why_not_keyspace, messages, events))
        };
        let (why_not_keyspace, messages, events) = match started.await {
            Ok(started) => started,
            Err(err) => {
                let _ = tokio::time::timeout(config.response_timeout, client.quit()).await;
                return Err(err);
            }
        };
        // Subscriptions are made again after a reconnect.
        let _resubscribing = client.manage_subscriptions();
        let source = match why_not_keyspace {
            None => Source::Keyspace,
            Some(_) => Source::Channels,
        };
        Ok(Listener {
            client,
            source,
            why_not_keyspace,
            messages,
            events,
            pending: Heard::default(),
            closed: false,
        })
    }

    /// Waits for a message and keeps it for [`drain`](Self::drain).
    ///
    /// # Cancel safety
    /// Cancel safe: a message received is kept; one not received stays queued.
    pub async fn recv(&mut self) {
        if self.closed {
            // A closed receiver would answer at once, forever: the interval's reads go on.
            return std::future::pending().await;
        }
        tokio::select! {
            received = self.messages.recv() => self.take_message(received),
            received = self.events.recv() => self.take_event(received),
        }
    }

    /// Adds to `heard` the keyspace event of the key's end, waiting for it at most `within`: a
    /// read can see the key gone before the event that tells how (a release, a force unlock,
    /// an expiry) has been received, although the server sent it first.
    pub async fn await_end(&mut self, heard: &mut Heard, within: Duration) {
        if self.source != Source::Keyspace {
            return;
        }
        let until = tokio::time::Instant::now() + within;
        while !heard.gone() && !self.closed {
            if tokio::time::timeout_at(until, self.recv()).await.is_err() {
                break;
            }
            heard.append(self.drain());
        }
    }

    /// What was heard since the last drain, with every message already received.
    pub fn drain(&mut self) -> Heard {
        let (pending, closed) = (&mut self.pending, &mut self.closed);
        drain_ready(&mut self.events, |event| note_event(pending, closed, event));
        drain_ready(&mut self.messages, |message| {
            note_message(pending, closed, message)
        });
        std::mem::take(&mut self.pending)
    }

    fn take_message(&mut self, received: Result<Message, RecvError>) {
        note_message(&mut self.pending, &mut self.closed, received);
    }

    fn take_event(&mut self, received: Result<KeyspaceEvent, RecvError>) {
        note_event(&mut self.pending, &mut self.closed, received);
    }

    pub async fn stop(self) {
        let _ = self.client.quit().await;
    }
}

/// Hands every item `receiver` has ready to `take` (a lost run as `Lagged`, the end as
/// `Closed`).
fn drain_ready<T: Clone>(
    receiver: &mut broadcast::Receiver<T>,
    mut take: impl FnMut(Result<T, RecvError>),
) {
    loop {
        match receiver.try_recv() {
            Ok(item) => take(Ok(item)),
            Err(TryRecvError::Empty) => return,
            Err(TryRecvError::Lagged(n)) => take(Err(RecvError::Lagged(n))),
            Err(TryRecvError::Closed) => return take(Err(RecvError::Closed)),
        }
    }
}

fn note_message(heard: &mut Heard, closed: &mut bool, received: Result<Message, RecvError>) {
    match received {
        Ok(_) => heard.messages += 1,
        // Lost (the reader fell behind): anything may have happened.
        Err(RecvError::Lagged(_)) => heard.lagged = true,
        Err(RecvError::Closed) => *closed = true,
    }
}

fn note_event(heard: &mut Heard, closed: &mut bool, received: Result<KeyspaceEvent, RecvError>) {
    match received {
        Ok(event) => heard.events.push(event.operation),
        Err(RecvError::Lagged(_)) => heard.lagged = true,
        Err(RecvError::Closed) => *closed = true,
    }
}

/// `None` when the server sends the keyspace events a watch needs (`K` with `A`, or with the
/// generic, expired and hash classes `g`, `x`, `h`); else why not.
async fn why_not_keyspace(client: &SubscriberClient) -> Option<String> {
    let reply: Result<Vec<String>, _> = client
        .custom(
            ferrisson::fred::cmd!("CONFIG"),
            vec!["GET", "notify-keyspace-events"],
        )
        .await;
    let flags = match reply {
        Ok(pair) if pair.len() == 2 => pair[1].clone(),
        Ok(_) => return Some("the server did not say whether it sends keyspace events".into()),
        Err(err) => return Some(format!("CONFIG GET notify-keyspace-events failed: {err}")),
    };
    let enough = flags.contains('K')
        && (flags.contains('A') || ['g', 'x', 'h'].iter().all(|c| flags.contains(*c)));
    (!enough).then(|| {
        format!("notify-keyspace-events is `{flags}`, where `Kghx` or `KA` would show every write")
    })
}

/// `text` with the glob characters of a `PSUBSCRIBE` pattern escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heard(events: &[&str]) -> Heard {
        Heard {
            events: events.iter().map(|e| (*e).to_owned()).collect(),
            ..Heard::default()
        }
    }

    #[test]
    fn a_delete_after_a_decrement_is_a_release_and_a_bare_one_is_forced() {
        assert!(!heard(&["hincrby", "del"]).deleted_by_force(Some("pexpire")));
        assert!(!heard(&["del"]).deleted_by_force(Some("hincrby")));
        assert!(heard(&["del"]).deleted_by_force(Some("pexpire")));
        assert!(heard(&["del"]).deleted_by_force(None));
        assert!(heard(&["hincrby", "pexpire", "del"]).deleted_by_force(None));
        assert!(!heard(&["hincrby", "pexpire"]).deleted_by_force(None));
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\d{e}"), "a\\*b\\?\\[c\\]\\\\d{e}");
    }
}
