//! The script dispatcher: concurrent acquire and release calls of one client share one script run.
//!
//! fred writes and flushes every script call on its own (it never holds `EVALSHA` back for
//! pipelining), and Redis pays a read, a command lookup and a Lua call setup for each: under load
//! a large part of the time on both sides (`INFO commandstats`: 11.4 µs per lone acquire or
//! release script, 6.7–7.7 µs per call inside a batch of 32, before the read, parse and reply a
//! batch pays once). So the calls queued since this task's last turn leave as one run of
//! [`BATCH`], which performs each call's own script steps in order and returns one reply per
//! call. A call made while none of the client's is unanswered goes out directly from its caller,
//! as its own script: batches form only while calls queue behind busy slots (`MAX_IN_FLIGHT`),
//! so batching adds no wait or task hop at low load.
//!
//! Each call keeps its own script's semantics: its steps run atomically, calls of one batch in
//! queue order (concurrent calls have no other order: each caller awaits its reply before its
//! next call), and a failing call (say `WRONGTYPE`) fails alone. A batch is sent at most once,
//! like every lock script (`write_options`); a connection error or timeout is every call's
//! error, as if each had been in flight alone.
//!
//! In a cluster, the calls of a batch are grouped by the node that serves their hash slot, and
//! each group leaves as one run of [`BATCH_ACROSS_SLOTS`] on its node: a script may declare keys
//! of one slot only, so that one takes the keys as arguments and declares only the first call's
//! lock name, which routes it. Scripts of the classic form (no shebang) may reach keys of every
//! slot their node serves, on Redis 6.2, 7.x and Valkey 8. When the dispatcher's slot map is
//! behind the cluster's (a slot moved), a call whose key the node no longer serves fails alone,
//! at its first read and before any write, and is sent again alone, which follows the
//! redirection (`Script::run_synced`).

use fred::clients::Pool;
use fred::error::{Error as RedisError, ErrorKind};
use fred::prelude::Value;
use fred::types::config::Options;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::transport::replica_sync::{ReplicaSync, Replicated};
use crate::transport::script::{LockCall, BATCH, BATCH_ACROSS_SLOTS};
use crate::transport::Counted;

/// A lock call's reply, with whether the replicas have its writes (`src/transport/replica_sync.rs`).
pub(crate) type Reply = Result<(Value, Replicated), RedisError>;

/// The largest number of calls in one batch: bounds the time one script run blocks the server
/// (each call is a handful of hash commands).
const MAX_BATCH: usize = 64;

/// Batches sent and not yet answered, at most. Calls arriving meanwhile wait for a free slot and
/// then leave together: the fewer slots, the larger the batches and the less each call costs on
/// both sides. Two is double buffering: one batch runs on the server while the next one gathers.
/// Measured on the `uncontended` benchmark (64 tasks, 3 rounds of 1, 2, 4 and 8 slots): 2 slots
/// made 27.0k–28.2k pairs/s at 21–22 µs of client CPU per pair, 4 slots 23.0k–25.4k at
/// 24.6–25.6 µs; 1 slot varied most (20.7k–26.6k).
const MAX_IN_FLIGHT: usize = 2;

/// The sending side, kept by [`crate::transport::Redis`].
pub(crate) struct Dispatcher {
    calls: mpsc::UnboundedSender<Call>,
    /// Calls not yet answered: sent directly, queued, or in a batch. While it is 0 a new call
    /// goes out directly from its caller, saving the two task hops through the dispatcher
    /// (a hand-off at low contention is one such call).
    busy: Arc<AtomicUsize>,
    sender: Sender,
}

/// One queued script call and where its reply goes.
struct Call {
    call: LockCall,
    reply: oneshot::Sender<Reply>,
}

impl Dispatcher {
    /// Starts the dispatcher task on the current runtime. It ends when the `Dispatcher` is
    /// dropped, after the batches in flight are answered (a dropped client's background releases
    /// still go through it), or when `Client::shutdown` aborts it.
    pub(crate) fn start(
        pool: Pool,
        options: Options,
        sync: Option<Arc<ReplicaSync>>,
        clustered: bool,
    ) -> (Dispatcher, tokio::task::JoinHandle<()>) {
        let (calls, queued) = mpsc::unbounded_channel();
        let busy = Arc::new(AtomicUsize::new(0));
        let sender = Sender {
            pool,
            options,
            sync,
            clustered,
        };
        let task = tokio::spawn(dispatch(sender.clone(), queued, Arc::clone(&busy)));
        (
            Dispatcher {
                calls,
                busy,
                sender,
            },
            task,
        )
    }

    /// Runs `call` with the dispatcher's options: in a batch when other calls are out,
    /// otherwise directly as its own script.
    ///
    /// # Cancel safety
    /// Like [`crate::transport::script::Script::run_encoded`]: once the first poll queued the call,
    /// dropping the future does not withdraw it; callers that change lock state wrap it in
    /// [`crate::kit::InFlight`].
    pub(crate) async fn run(&self, call: LockCall) -> Reply {
        let idle = self
            .busy
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if idle {
            let _direct = Counted(&self.busy);
            // Boxed: the direct path holds a whole fred command future, which would otherwise
            // size every queued call's future (and its `InFlight` box) too.
            return Box::pin(self.sender.alone(call)).await;
        }
        self.busy.fetch_add(1, Ordering::AcqRel);
        let (reply, answer) = oneshot::channel();
        if self.calls.send(Call { call, reply }).is_err() {
            self.busy.fetch_sub(1, Ordering::AcqRel);
            return Err(closed());
        }
        answer.await.map_err(|_| closed())?
    }
}

/// Runs `call` as its own script (`ACQUIRE` or `RELEASE`), with `sync` followed by a `WAIT`.
pub(crate) async fn run_alone(
    pool: &Pool,
    options: &Options,
    sync: Option<&ReplicaSync>,
    call: LockCall,
) -> Reply {
    let encoded = call.encode();
    call.script()
        .run_synced(pool, options, &encoded, sync)
        .await
}

/// What the dispatcher task sends with: the connections, the write options and synced writes.
#[derive(Clone)]
struct Sender {
    pool: Pool,
    options: Options,
    sync: Option<Arc<ReplicaSync>>,
    /// Batches go per node ([`BATCH_ACROSS_SLOTS`]).
    clustered: bool,
}

impl Sender {
    /// [`run_alone`] on the dispatcher's connections.
    fn alone(&self, call: LockCall) -> impl std::future::Future<Output = Reply> + '_ {
        run_alone(&self.pool, &self.options, self.sync.as_deref(), call)
    }
}

/// The error of a call whose dispatcher is gone (its task was dropped with its runtime, or
/// ended with the client): see [`super::Gone`].
pub(crate) const CLOSED: &str = "the client's connections are closed";

fn closed() -> RedisError {
    RedisError::new(ErrorKind::Canceled, CLOSED)
}

async fn dispatch(
    sender: Sender,
    mut queued: mpsc::UnboundedReceiver<Call>,
    busy: Arc<AtomicUsize>,
) {
    // Each batch in flight resolves to its number of calls.
    let mut in_flight: FuturesUnordered<BoxFuture<'static, usize>> = FuturesUnordered::new();
    let mut outstanding = 0;
    let mut calls = Vec::with_capacity(MAX_BATCH);
    let mut open = true;
    while open || !in_flight.is_empty() || !calls.is_empty() {
        let room = MAX_BATCH - calls.len();
        tokio::select! {
            biased;
            // First, so that a batch pushed in the previous turn is written before the next one.
            Some(done) = in_flight.next(), if !in_flight.is_empty() => outstanding -= done,
            // 0: the channel is closed (and empty).
            count = queued.recv_many(&mut calls, room), if open && room > 0 => open = count > 0,
            // Unreachable: gathered calls always leave while no batch is out. Were it reached,
            // the gathered callers would get the "closed" error.
            else => break,
        }
        if calls.is_empty() || in_flight.len() >= MAX_IN_FLIGHT {
            continue; // while the slots are full, calls queue up and leave together later
        }
        // A free slot while another batch is out: send only once the gathered calls are at least
        // half as many as those out (or no more can come). The callers woken by a batch's
        // replies queue their next calls one by one, and without this the first of them left
        // alone and held the slot for a round trip: measured at 64 tasks, a quarter of all
        // batches had one call, and gathering made 5-10 % more pairs/s (docs/benchmarks.md's history).
        let enough = calls.len() * 2 >= outstanding || calls.len() == MAX_BATCH || !open;
        if !in_flight.is_empty() && !enough {
            continue;
        }
        let batch = std::mem::replace(&mut calls, Vec::with_capacity(MAX_BATCH));
        let (busy, count) = (Arc::clone(&busy), batch.len());
        outstanding += count;
        let sent = send(sender.clone(), batch);
        in_flight.push(Box::pin(async move {
            sent.await;
            busy.fetch_sub(count, Ordering::AcqRel);
            count
        }));
    }
}

/// Sends `calls` (one alone as its own script, several as one [`BATCH`], or in a cluster one
/// [`BATCH_ACROSS_SLOTS`] per node, each followed by one `WAIT` with synced writes) and delivers
/// the replies.
async fn send(sender: Sender, mut calls: Vec<Call>) {
    if calls.len() == 1 {
        if let Some(Call { call, reply }) = calls.pop() {
            let _ = reply.send(sender.alone(call).await);
        }
        return;
    }
    if sender.clustered {
        return send_per_node(&sender, calls).await;
    }
    let encoded = LockCall::encode_batch(calls.iter().map(|queued| &queued.call));
    let replies: Vec<_> = calls.into_iter().map(|queued| queued.reply).collect();
    let sync = sender.sync.as_deref();
    let reply = BATCH.run_synced(&sender.pool, &sender.options, &encoded, sync);
    deliver(replies, reply.await);
}

/// In a cluster: groups `calls` by the node that serves their slot (in this client's slot map)
/// and sends each group at once, as one [`BATCH_ACROSS_SLOTS`] or, one call, alone. Without a
/// slot map every call goes alone.
async fn send_per_node(sender: &Sender, calls: Vec<Call>) {
    use fred::interfaces::ClusterInterface;

    let routing = sender.pool.next().cached_cluster_state();
    let mut groups: Vec<(Option<&fred::types::config::Server>, Vec<Call>)> = Vec::new();
    for call in calls {
        let node = routing
            .as_ref()
            .and_then(|map| map.get_server(call.call.slot()));
        match groups
            .iter_mut()
            .find(|(served_by, _)| node.is_some() && *served_by == node)
        {
            Some((_, group)) => group.push(call),
            None => groups.push((node, vec![call])),
        }
    }
    let sends = groups
        .into_iter()
        .map(|(_, group)| send_to_node(sender, group));
    futures::future::join_all(sends).await;
}

/// Sends `calls`, whose slots one node serves, as one [`BATCH_ACROSS_SLOTS`] (one call alone),
/// and each call that the node refused (its slot has moved) again alone.
async fn send_to_node(sender: &Sender, mut calls: Vec<Call>) {
    if calls.len() == 1 {
        if let Some(Call { call, reply }) = calls.pop() {
            let _ = reply.send(sender.alone(call).await);
        }
        return;
    }
    let encoded = LockCall::encode_batch_across_slots(calls.iter().map(|queued| &queued.call));
    let sync = sender.sync.as_deref();
    let reply = BATCH_ACROSS_SLOTS
        .run_synced(&sender.pool, &sender.options, &encoded, sync)
        .await;
    let (values, replicated) = match reply {
        Ok((Value::Array(values), replicated)) if values.len() == calls.len() => {
            (values, replicated)
        }
        other => {
            deliver(
                calls.into_iter().map(|queued| queued.reply).collect(),
                other,
            );
            return;
        }
    };
    let mut again = Vec::new();
    for (queued, value) in calls.into_iter().zip(values) {
        match decode(value) {
            Err(err) if not_served_here(&err) => again.push(queued),
            result => {
                let _ = queued.reply.send(result.map(|value| (value, replicated)));
            }
        }
    }
    let resends = again.into_iter().map(|Call { call, reply }| async move {
        let _ = reply.send(sender.alone(call).await);
    });
    futures::future::join_all(resends).await;
}

/// Whether a call of a [`BATCH_ACROSS_SLOTS`] failed because its node does not serve its key's
/// slot (Redis 7 and Valkey: "Script attempted to access a non local key in a cluster node";
/// Redis 6.2: "Lua script attempted ..."). The call failed at its first read: nothing ran.
fn not_served_here(err: &RedisError) -> bool {
    err.details().contains("non local key")
}

/// Splits a [`BATCH`] reply into the callers' replies.
fn deliver(replies: Vec<oneshot::Sender<Reply>>, reply: Reply) {
    let err = match reply {
        Ok((Value::Array(values), replicated)) if values.len() == replies.len() => {
            for (reply, value) in replies.into_iter().zip(values) {
                let _ = reply.send(decode(value).map(|value| (value, replicated)));
            }
            return;
        }
        Ok((other, _)) => RedisError::new(
            ErrorKind::Protocol,
            format!("unexpected reply to a batch of lock scripts: {other:?}"),
        ),
        Err(err) => err,
    };
    for reply in replies {
        let _ = reply.send(Err(err.clone()));
    }
}

/// One call's entry of lua/batch.lua's reply: the call's own integer, nil or array (a fenced
/// hand-off's `[-1, token]`) reply, or its error message (the scripts never reply with a
/// string).
fn decode(value: Value) -> Result<Value, RedisError> {
    match value {
        Value::Integer(_) | Value::Null | Value::Array(_) => Ok(value),
        Value::String(_) | Value::Bytes(_) => {
            let message = value.as_string().unwrap_or_default();
            // As fred classifies a server error reply of a script of its own.
            let kind = if message.starts_with("WRONGTYPE") {
                ErrorKind::InvalidArgument
            } else {
                ErrorKind::Unknown
            };
            Err(RedisError::new(kind, message))
        }
        other => Err(RedisError::new(
            ErrorKind::Protocol,
            format!("unexpected entry in a batch reply: {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_decode_to_the_reply_of_a_script_of_its_own() {
        assert_eq!(decode(Value::Integer(7)).ok(), Some(Value::Integer(7)));
        assert_eq!(decode(Value::Null).ok(), Some(Value::Null));
        let err = decode(Value::from("WRONGTYPE Operation against a key"))
            .err()
            .map(|err| (err.kind().clone(), err.details().to_owned()));
        assert_eq!(
            err,
            Some((
                ErrorKind::InvalidArgument,
                "WRONGTYPE Operation against a key".to_owned()
            ))
        );
        // A fenced hand-off's reply passes as it is.
        let handed = Value::Array(vec![Value::Integer(-1), Value::Integer(7)]);
        assert_eq!(decode(handed.clone()).ok(), Some(handed));
        assert!(decode(Value::Double(1.5)).is_err());
    }

    #[test]
    fn a_key_of_another_node_is_told_apart_from_other_failures() {
        for message in [
            "ERR Script attempted to access a non local key in a cluster node script: 1f, on @user_script:1.",
            "ERR Lua script attempted to access a non local key in a cluster node",
        ] {
            assert!(not_served_here(&RedisError::new(ErrorKind::Unknown, message)));
        }
        for message in [
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "NON_REENTRANT_REACQUIRE",
        ] {
            assert!(!not_served_here(&RedisError::new(
                ErrorKind::Unknown,
                message
            )));
        }
    }

    #[test]
    fn a_short_reply_fails_every_call_instead_of_misrouting() {
        let (senders, mut receivers): (Vec<_>, Vec<_>) = (0..2).map(|_| oneshot::channel()).unzip();
        deliver(
            senders,
            Ok((Value::Array(vec![Value::Integer(1)]), Replicated::NotAsked)),
        );
        for receiver in &mut receivers {
            assert!(matches!(receiver.try_recv(), Ok(Err(_))));
        }
    }
}
