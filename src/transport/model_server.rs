//! The model checks' in-memory server: the reentrant lock's hash (one holder field and its hold
//! count) with its acquire and release steps as `lua/acquire.lua` and `lua/release.lua` take
//! them (protocol §2.2, §2.3), a count-down latch's count (`GET`, and `lua/latch.lua`'s count
//! down, §8), and pub/sub delivered as fred delivers it, on a broadcast channel
//! per connection, so that a receiver made after a message never hears it.
//!
//! Every request is a round trip: the scheduler may run other tasks between the call and the
//! server's step, and between that step and the caller seeing the reply. SUBSCRIBE and
//! UNSUBSCRIBE are as fred sends them: done for the caller once written, applied by the server
//! later, in the connection's order (a `PING` written after them is answered after them). The
//! step itself is atomic, as a script is. Bad protocol use panics, so that the checks fail on
//! it: a release of a field that holds nothing, a hold count below zero.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use fred::types::config::Server as ServerName;
use fred::types::{Message, MessageKind, Value};
use parking_lot::Mutex;
use tokio::sync::broadcast;

/// The TTL (ms) a refused acquire reports: longer than any check, so that a waiter whose
/// wake-up was lost stays parked and the scheduler reports the deadlock.
pub(crate) const LEASE_MS: i64 = 3_600_000;

/// An invariant the server checks after every step it takes.
type Invariant = Box<dyn Fn() + Send + Sync>;

pub(crate) struct Server {
    state: Mutex<State>,
    invariants: Mutex<Vec<Invariant>>,
    /// Touched on each side of every request: a scheduling point of the checks' scheduler that,
    /// unlike a yield, does not count as the task backing off (PCT lowers a yielding task).
    round_trips: shuttle::sync::atomic::AtomicUsize,
    /// How many acquires were refused so far.
    refusals: tokio::sync::watch::Sender<usize>,
}

#[derive(Default)]
struct State {
    /// Lock name → its one holder field and hold count.
    locks: HashMap<String, (String, u32)>,
    /// Latch name → its count (absent: 0).
    latches: HashMap<String, u64>,
    /// Channel → the connections subscribed to it.
    subscribers: HashMap<String, HashSet<usize>>,
    /// Per connection, where its messages go.
    connections: Vec<broadcast::Sender<Message>>,
}

/// What a release step replied (`lua/release.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// One hold of several was released (`0`).
    Partial,
    /// The lock was freed and `0` published to this many subscribers (`1 + receivers`).
    Freed { receivers: u64 },
    /// The lock went straight to the heir (`-1`).
    HandedOver,
}

impl Server {
    /// A server; made inside a check's schedule (its scheduling point belongs to it).
    pub(crate) fn new() -> Arc<Server> {
        Arc::new(Server {
            state: Mutex::default(),
            invariants: Mutex::default(),
            round_trips: shuttle::sync::atomic::AtomicUsize::new(0),
            refusals: tokio::sync::watch::Sender::new(0),
        })
    }

    /// A point where the scheduler may run another task: one side of a round trip.
    fn switch(&self) {
        self.round_trips
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// A subscriber connection of a client.
    pub(crate) fn connect(self: &Arc<Self>) -> Connection {
        let (sender, _) = broadcast::channel(1024);
        let id = {
            let mut state = self.state.lock();
            state.connections.push(sender);
            state.connections.len() - 1
        };
        let (written, mut commands) = tokio::sync::mpsc::unbounded_channel();
        // The server's side of the connection: what was written, applied in order. Detached:
        // it ends when the connection's last handle goes.
        let server = Arc::clone(self);
        drop(shuttle::future::spawn(async move {
            while let Some(command) = commands.recv().await {
                server.switch();
                match command {
                    Written::Subscribe(channel) => {
                        let mut state = server.state.lock();
                        state.subscribers.entry(channel).or_default().insert(id);
                    }
                    Written::Unsubscribe(channel) => {
                        let mut state = server.state.lock();
                        if let Some(subs) = state.subscribers.get_mut(&channel) {
                            subs.remove(&id);
                            if subs.is_empty() {
                                state.subscribers.remove(&channel);
                            }
                        }
                    }
                    Written::Ping(answer) => {
                        let _ = answer.send(());
                    }
                }
                server.stepped();
            }
        }));
        Connection {
            server: Arc::clone(self),
            id,
            written,
        }
    }

    /// `lua/acquire.lua` for `field`: `Ok(reentered)`, or the lock's TTL when another field
    /// holds it.
    pub(crate) async fn acquire(&self, name: &str, field: &str) -> Result<bool, i64> {
        self.step(|state| match state.locks.get_mut(name) {
            None => {
                state.locks.insert(name.to_owned(), (field.to_owned(), 1));
                Ok(false)
            }
            Some((holder, count)) if holder == field => {
                *count += 1;
                Ok(true)
            }
            Some(_) => {
                self.refusals.send_modify(|refusals| *refusals += 1);
                Err(LEASE_MS)
            }
        })
    }

    /// `lua/release.lua` for `field`, handing the lock to `heir` when this was its last hold
    /// (unless more than `own` subscribers listen, with `own` given). Panics when `field` holds
    /// nothing: a double release.
    pub(crate) async fn release(
        &self,
        name: &str,
        channel: &str,
        field: &str,
        heir: Option<&str>,
        own: Option<u64>,
    ) -> Released {
        self.step(|state| {
            let Some((holder, count)) = state.locks.get_mut(name) else {
                panic!("{field} released {name}, which nobody holds: a hold counted twice");
            };
            assert_eq!(
                holder, field,
                "{field} released {name}, which {holder} holds: a hold counted twice"
            );
            if *count > 1 {
                *count -= 1;
                Released::Partial
            } else {
                let listeners = state.subscribers.get(channel).map_or(0, |subs| subs.len());
                let others_listen = own.is_some_and(|own| listeners as u64 > own);
                match heir {
                    Some(heir) if !others_listen => {
                        state.locks.insert(name.to_owned(), (heir.to_owned(), 1));
                        Released::HandedOver
                    }
                    _ => {
                        state.locks.remove(name);
                        let receivers = state.publish(channel, 0);
                        Released::Freed { receivers }
                    }
                }
            }
        })
    }

    /// `SET name count`: a latch's count (`try_set_count` on a latch that is open).
    pub(crate) fn set_count(&self, name: &str, count: u64) {
        self.state.lock().latches.insert(name.to_owned(), count);
    }

    /// `GET name`: a latch's count, read in a round trip.
    pub(crate) async fn count(&self, name: &str) -> u64 {
        self.switch();
        let count = self.state.lock().latches.get(name).copied().unwrap_or(0);
        if count > 0 {
            self.refusals.send_modify(|refusals| *refusals += 1);
        }
        self.switch();
        count
    }

    /// `lua/latch.lua`'s count down: one less, and `0` published on `channel` when it reaches 0.
    pub(crate) async fn count_down(&self, name: &str, channel: &str) {
        self.step(|state| {
            if let Some(count) = state.latches.get_mut(name) {
                *count -= 1;
                if *count == 0 {
                    state.latches.remove(name);
                    state.publish(channel, 0);
                }
            }
        })
    }

    /// Waits until `count` acquires have been refused.
    pub(crate) async fn refused(&self, count: usize) {
        let mut refusals = self.refusals.subscribe();
        let _ = refusals.wait_for(|refusals| *refusals >= count).await;
    }

    /// Checks `invariant` after every step from now on (it may read the server).
    pub(crate) fn check_always(&self, invariant: impl Fn() + Send + Sync + 'static) {
        self.invariants.lock().push(Box::new(invariant));
    }

    /// One atomic step on the state as a round trip, the invariants checked after it.
    fn step<T>(&self, step: impl FnOnce(&mut State) -> T) -> T {
        self.switch();
        let reply = step(&mut self.state.lock());
        self.stepped();
        self.switch();
        reply
    }

    fn stepped(&self) {
        for invariant in self.invariants.lock().iter() {
            invariant();
        }
    }

    /// The holder field of `name` and its count, if held.
    pub(crate) fn holder(&self, name: &str) -> Option<(String, u32)> {
        self.state.lock().locks.get(name).cloned()
    }

    /// Whether connection `id` is subscribed to `channel`.
    pub(crate) fn subscribed(&self, id: usize, channel: &str) -> bool {
        self.state
            .lock()
            .subscribers
            .get(channel)
            .is_some_and(|subs| subs.contains(&id))
    }
}

impl State {
    /// `PUBLISH channel message`: the number of connections it reached.
    fn publish(&mut self, channel: &str, message: i64) -> u64 {
        let Some(subscribers) = self.subscribers.get(channel) else {
            return 0;
        };
        for id in subscribers {
            // A connection without a receiver yet loses the message, as fred's broadcast does.
            let _ = self.connections[*id].send(Message {
                channel: channel.into(),
                value: Value::Integer(message),
                kind: MessageKind::Message,
                server: ServerName::new("model", 0),
            });
        }
        subscribers.len() as u64
    }
}

/// A client's subscriber connection to the model server.
#[derive(Clone)]
pub(crate) struct Connection {
    server: Arc<Server>,
    pub(crate) id: usize,
    /// Commands written and not yet applied by the server's side of the connection.
    written: tokio::sync::mpsc::UnboundedSender<Written>,
}

/// A command written to a subscriber connection.
enum Written {
    Subscribe(String),
    Unsubscribe(String),
    Ping(tokio::sync::oneshot::Sender<()>),
}

impl Connection {
    /// A receiver of the messages sent to this connection from now on.
    pub(crate) fn message_rx(&self) -> broadcast::Receiver<Message> {
        self.server.state.lock().connections[self.id].subscribe()
    }

    /// Writes `SUBSCRIBE channel`: done once written, as fred reports it.
    pub(crate) async fn subscribe(&self, channel: &str) {
        self.server.switch();
        let _ = self.written.send(Written::Subscribe(channel.to_owned()));
    }

    /// Writes `UNSUBSCRIBE channel`: done once written.
    pub(crate) async fn unsubscribe(&self, channel: &str) {
        self.server.switch();
        let _ = self.written.send(Written::Unsubscribe(channel.to_owned()));
    }

    /// `PING`, answered once the server has applied everything written before it.
    pub(crate) async fn ping(&self) {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let _ = self.written.send(Written::Ping(answer));
        let _ = answered.await;
        self.server.switch();
    }
}
