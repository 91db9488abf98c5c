//! Distributed deadlock detection's work in Redis ([`DeadlockDetection`]): the keeper task that
//! writes this client's long waits as wait-for edges (`lua/wait_edges.lua`), removes them when
//! they end and renews their hash; the walks by which a waiter that has waited the threshold
//! looks for a cycle through itself, and the verdict on the cycle's youngest wait; and
//! [`Client::find_deadlocks`], which reads every client's edges.
//!
//! The graph's arcs are read from what is already in Redis: a lock's holders from the lock
//! itself (`Client::inspect`, which knows every layout of the family, Java's included), an
//! owner's waits from its client's edges hash (`wait_for.rs` has the layout). A walk reads one
//! round of locks and one round of edges hashes at a time, each round's reads at once, at most
//! [`MAX_ROUNDS`] rounds and [`MAX_LOCKS`] locks.
//!
//! No false verdict from a stale edge: a wait's edge carries its identity (owner and wait id),
//! an edge whose lock already holds the field it asks for was granted and leads nowhere, the
//! edges of a client that stopped renewing its hash (a crashed process) are ignored, and the
//! youngest wait gives way only after a second walk, a moment later, finds the very same waits.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fred::prelude::Value;
use futures::{StreamExt, TryStreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::DeadlockDetection;
use crate::error::{Error, Result};
use crate::kit::waits::{Wait, WaitTable};
use crate::kit::{Client, ClientInner};
use crate::name;
use crate::transport::script::Script;
use crate::wait_for::{self, Deadlock, Edge, Graph, WaitStep};

/// Writes, removes and renews a client's edges.
static WAIT_EDGES: Script = Script::new("wait_edges", include_str!("../lua/wait_edges.lua"));
/// Reads a client's edges and the TTL of their hash.
static READ_WAIT_EDGES: Script = Script::new(
    "read_wait_edges",
    include_str!("../lua/read_wait_edges.lua"),
);

/// The most rounds of reads (locks, then edges) one walk makes: a cycle of up to this many
/// owners is found.
const MAX_ROUNDS: usize = 8;
/// The most locks one walk reads.
const MAX_LOCKS: usize = 64;
/// How many reads a walk or a scan has in flight at once.
const READS_IN_FLIGHT: usize = 16;
/// How long the removal of an ended wait's edge waits for others to go in the same write: in
/// a drain, where a hand-off ends a wait every round trip, one write takes several removals
/// instead of one each. Well below the shortest confirmation pause (10 ms, [`Timing::confirm`]),
/// so that a second walk never reads an edge whose wait ended before the first.
const COALESCE_REMOVALS: Duration = Duration::from_millis(2);

/// How a client of `mode` times its edges: recorded after `after`, the hash renewed every
/// `renew` with a TTL of four times that.
#[derive(Clone, Copy, Debug)]
struct Timing {
    after: Duration,
    renew: Duration,
    /// The threshold of a client that looks for cycles.
    threshold: Option<Duration>,
}

impl Timing {
    fn of(mode: DeadlockDetection) -> Option<Timing> {
        let after = mode.record_after()?;
        let renew = (after / 2).clamp(Duration::from_millis(25), Duration::from_secs(10));
        Some(Timing {
            after,
            renew,
            threshold: mode.threshold(),
        })
    }

    /// Four renewals, and at least 2 s: readers take a hash with less than half its TTL left
    /// for a stopped client's, so a live client that renews late (a stall, a slow reply) keeps
    /// at least a second of slack even with a short `after`.
    fn ttl(&self) -> Duration {
        (self.renew * 4).max(Duration::from_secs(2))
    }

    /// The pause between the first walk that finds this wait the victim and the second: long
    /// enough for the removal of a wait that just ended to reach Redis.
    fn confirm(&self) -> Duration {
        (self.threshold.unwrap_or(self.after) / 20)
            .clamp(Duration::from_millis(10), Duration::from_millis(100))
    }
}

/// Starts the keeper of a client that records its waits; `None` when detection is off.
pub(crate) fn start(inner: &Arc<ClientInner>) -> Option<tokio::task::JoinHandle<()>> {
    let table = Arc::clone(inner.waits.as_ref()?);
    let timing = Timing::of(inner.config.deadlock_detection)?;
    let keeper = Keeper {
        client: Arc::downgrade(inner),
        key: name::wait_edges_key(&inner.id),
        table,
        timing,
        written: HashMap::new(),
        detects: if detects(inner.config.deadlock_detection) {
            "1"
        } else {
            "0"
        },
        removals: Vec::new(),
        removals_since: None,
        renewed: None,
        checks: HashMap::new(),
        retry: None,
        replace: false,
    };
    Some(tokio::spawn(keeper.run(inner.stop.clone())))
}

/// The keeper's state.
struct Keeper {
    client: Weak<ClientInner>,
    /// This client's edges hash.
    key: String,
    table: Arc<WaitTable>,
    timing: Timing,
    /// Waits whose edge is written (`true`) or still to be sent (`false`), by wait id.
    written: HashMap<u64, (Arc<Wait>, bool)>,
    /// This client's `detects` field: `1` in Detect mode (as its waits' [`local_edge`]s say).
    detects: &'static str,
    /// Fields of ended waits still to be removed.
    removals: Vec<String>,
    /// When the oldest of `removals` was queued: they are written [`COALESCE_REMOVALS`] later.
    removals_since: Option<Instant>,
    /// When the hash was last written.
    renewed: Option<Instant>,
    /// When each wait looks for a cycle next, by wait id.
    checks: HashMap<u64, Instant>,
    /// After a failed write: when to try again.
    retry: Option<Instant>,
    /// The next write replaces the whole hash (it did not hold what was written).
    replace: bool,
}

impl Keeper {
    async fn run(mut self, stop: CancellationToken) {
        loop {
            let next = self.next_due();
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.table.changed.notified() => {}
                () = sleep_until(next) => {}
            }
            let Some(inner) = self.client.upgrade() else {
                return;
            };
            let client = Client { inner };
            self.write(&client).await;
            if self.timing.threshold.is_some() {
                self.detect(&client).await;
            }
        }
    }

    /// When the keeper next has work without being told: a wait to record, the hash to renew,
    /// a wait to look for a cycle, a failed write to retry.
    fn next_due(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |at: Instant| next = Some(next.map_or(at, |next| next.min(at)));
        for wait in self.table.waits() {
            if !self.written.contains_key(&wait.id) {
                consider(wait.since + self.timing.after);
            }
            if let Some(threshold) = self.timing.threshold {
                let check = self.checks.get(&wait.id).copied();
                consider(check.unwrap_or(wait.since + threshold));
            }
        }
        if let Some(renewed) = self.renewed.filter(|_| !self.written.is_empty()) {
            consider(renewed + self.timing.renew);
        }
        if let Some(since) = self.removals_since.filter(|_| self.retry.is_none()) {
            consider(since + COALESCE_REMOVALS);
        }
        if let Some(retry) = self.retry {
            consider(retry);
        }
        next
    }

    /// Removes the edges of ended waits, writes those of waits that lasted, renews the hash.
    async fn write(&mut self, client: &Client) {
        let now = Instant::now();
        for wait in self.table.take_ended() {
            self.checks.remove(&wait.id);
            // Sent or not: a write whose reply was lost may have reached the hash.
            if self.written.remove(&wait.id).is_some() {
                self.removals
                    .push(wait_for::edge_field(wait.owner_id, wait.id));
                self.removals_since.get_or_insert(now);
            }
        }
        let waits = self.table.waits();
        let live: HashSet<u64> = waits.iter().map(|wait| wait.id).collect();
        for wait in waits {
            if now < wait.since + self.timing.after || self.written.contains_key(&wait.id) {
                continue;
            }
            // A wait that ended meanwhile is not written (and not removed either).
            if wait.mark_written() {
                self.written.insert(wait.id, (wait, false));
            }
        }
        self.checks.retain(|id, _| live.contains(id));
        let unsent = self.written.values().any(|(_, sent)| !sent);
        let renew_due = self
            .renewed
            .is_some_and(|renewed| now >= renewed + self.timing.renew);
        let retry_due = self.retry.is_some_and(|retry| now >= retry);
        let removals_due = self
            .removals_since
            .is_some_and(|since| now >= since + COALESCE_REMOVALS);
        let due = unsent
            || (removals_due && (self.retry.is_none() || retry_due))
            || (!self.written.is_empty() && renew_due);
        if !due || self.retry.is_some_and(|retry| now < retry) {
            return;
        }
        let ttl_ms = self.timing.ttl().as_millis().to_string();
        let mode = if self.replace { "replace" } else { "update" };
        let mut args = vec![
            ttl_ms,
            mode.to_owned(),
            self.detects.to_owned(),
            self.removals.len().to_string(),
        ];
        args.extend(self.removals.iter().cloned());
        // Only waits not yet in the hash: a renewal alone sends no field.
        for (wait, _) in self.written.values().filter(|(_, sent)| !sent) {
            args.push(wait_for::edge_field(wait.owner_id, wait.id));
            args.push(wait_for::edge_value(wait.since_ms, &wait.field, &wait.lock));
        }
        let redis = &client.inner.redis;
        match WAIT_EDGES
            .run(
                &redis.pool,
                &redis.settings.write_options,
                &[&self.key],
                &args,
            )
            .await
        {
            Ok(reply) => {
                self.removals.clear();
                self.removals_since = None;
                self.renewed = Some(Instant::now());
                // Every written wait is in the hash now, and nothing else, unless it lost
                // fields (a server restart without persistence, a flush) or kept one of a
                // write whose reply was lost: then the whole hash is written again, at the
                // next renewal rather than at once, should the count never agree.
                let whole = reply.as_u64() == Some(self.written.len() as u64);
                for (_, sent) in self.written.values_mut() {
                    *sent = whole;
                }
                self.replace = !whole;
                self.retry = (!whole).then(|| Instant::now() + self.timing.renew);
            }
            Err(err) => {
                // Once per outage: a renewal fails every renewal period while it lasts.
                if self.retry.is_none() {
                    tracing::warn!(error = %err, "could not write this client's wait-for edges");
                } else {
                    tracing::debug!(error = %err, "could not write this client's wait-for edges");
                }
                self.retry = Some(Instant::now() + self.timing.renew);
                // The call may or may not have reached the hash: write it whole next time.
                self.replace = true;
                for (_, sent) in self.written.values_mut() {
                    *sent = false;
                }
            }
        }
    }

    /// Looks for a cycle through every wait that has waited the threshold and is due to look;
    /// names the youngest wait of a cycle to give way once a second walk confirms the cycle.
    async fn detect(&mut self, client: &Client) {
        let Some(threshold) = self.timing.threshold else {
            return;
        };
        let now = Instant::now();
        let waits = self.table.waits();
        let due: Vec<Arc<Wait>> = waits
            .iter()
            .filter(|wait| {
                let check = self.checks.get(&wait.id).copied();
                now >= check.unwrap_or(wait.since + threshold)
            })
            .cloned()
            .collect();
        if due.is_empty() {
            return;
        }
        for wait in &due {
            self.checks.insert(wait.id, now + threshold);
        }
        let found = match victims(client, &self.table, &due).await {
            Ok(found) if found.is_empty() => return,
            Ok(found) => found,
            Err(err) => {
                tracing::debug!(error = %err, "deadlock walk failed");
                return;
            }
        };
        // A moment later, the very same waits, or no verdict.
        tokio::time::sleep(self.timing.confirm()).await;
        let first: Vec<Arc<Wait>> = found.iter().map(|(wait, _)| Arc::clone(wait)).collect();
        let Ok(again) = victims(client, &self.table, &first).await else {
            return;
        };
        for (wait, cycle) in found {
            let same = again.iter().any(|(other, cycle_again)| {
                other.id == wait.id && identity(cycle_again) == identity(&cycle)
            });
            if same && wait.is_live() {
                let now_ms = crate::clock::epoch_ms();
                let deadlock = Deadlock {
                    steps: cycle.iter().map(|edge| edge.step(now_ms)).collect(),
                };
                tracing::warn!(lock = %wait.lock, %deadlock, "deadlock: this wait gives way");
                crate::metrics::deadlock();
                wait.give_way(deadlock);
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The waits of a cycle, as (owner, wait id) pairs.
fn identity(cycle: &[Edge]) -> HashSet<(String, u64)> {
    cycle
        .iter()
        .map(|edge| (edge.owner.clone(), edge.wait_id))
        .collect()
}

type Verdicts = Vec<(Arc<Wait>, Vec<Edge>)>;

/// The waits of `due` that are the youngest of a cycle through themselves, with their cycle:
/// one walk from the locks they wait for.
async fn victims(client: &Client, table: &WaitTable, due: &[Arc<Wait>]) -> Result<Verdicts> {
    let id = &client.inner.id;
    let mut graph = Graph::default();
    // This client's own waits from its table: fresher than its hash, and complete (young
    // waits are not written yet).
    for wait in table.waits() {
        graph.add_wait(local_edge(&client.inner, &wait));
    }
    let locks: Vec<String> = due.iter().map(|wait| wait.lock.to_string()).collect();
    walk(client, &mut graph, locks, Some(id)).await?;
    let mut found = Vec::new();
    for wait in due.iter().filter(|wait| wait.is_live()) {
        let start = local_edge(&client.inner, wait);
        let Some(cycle) = graph.cycle_through(&start) else {
            continue;
        };
        let steps: Vec<_> = cycle.iter().map(|edge| edge.step(0)).collect();
        let victim = &cycle[wait_for::victim_index(&steps)];
        if victim.owner == start.owner && victim.wait_id == start.wait_id {
            found.push((Arc::clone(wait), cycle));
        }
    }
    Ok(found)
}

/// The edge of this client's `wait`, as other clients read it.
fn local_edge(inner: &ClientInner, wait: &Wait) -> Edge {
    Edge {
        owner: format!("{}:{}", inner.id, wait.owner_id),
        wait_id: wait.id,
        since_ms: wait.since_ms,
        field: wait.field.to_string(),
        lock: wait.lock.to_string(),
        detects: detects(inner.config.deadlock_detection),
    }
}

/// Whether a client of `mode` breaks deadlocks (its hash's `detects` field).
fn detects(mode: DeadlockDetection) -> bool {
    mode.threshold().is_some()
}

/// Reads into `graph`, from `locks` on: their holders, the waits of those holders (from their
/// clients' hashes; `own` is this client's, whose waits are in `graph` already), the holders of
/// the locks those wait for, ..., within [`MAX_ROUNDS`] and [`MAX_LOCKS`].
async fn walk(
    client: &Client,
    graph: &mut Graph,
    mut locks: Vec<String>,
    own: Option<&str>,
) -> Result<()> {
    let mut read_clients: HashSet<String> = own.into_iter().map(str::to_owned).collect();
    let mut locks_read = 0;
    for _ in 0..MAX_ROUNDS {
        locks.retain(|lock| !graph.knows_lock(lock));
        locks.sort();
        locks.dedup();
        locks.truncate(MAX_LOCKS.saturating_sub(locks_read));
        if locks.is_empty() {
            return Ok(());
        }
        locks_read += locks.len();
        let holders = read_holders(client, &locks, Reads::Lenient).await?;
        let mut owners = Vec::new();
        for (lock, fields) in holders {
            owners.extend(fields.iter().map(|f| wait_for::holder_owner(f).to_owned()));
            graph.add_holders(&lock, fields);
        }
        let clients: Vec<String> = owners
            .iter()
            .filter_map(|owner| wait_for::client_of(owner))
            .filter(|id| !read_clients.contains(*id))
            .map(str::to_owned)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        read_clients.extend(clients.iter().cloned());
        for edge in read_edges(client, &clients, Reads::Lenient).await? {
            graph.add_wait(edge);
        }
        locks = owners
            .iter()
            .flat_map(|owner| graph.locks_waited_by(owner))
            .collect();
    }
    Ok(())
}

/// Whether a failed read fails the whole (a tool's), or counts as nothing read (a walk's: a
/// lock or hash it may not read, say under a confined ACL user, closes no cycle).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reads {
    Strict,
    Lenient,
}

impl Reads {
    fn settle<T: Default>(self, what: &str, read: Result<T>) -> Result<T> {
        match read {
            Err(err) if self == Reads::Lenient => {
                tracing::debug!(error = %err, what, "deadlock walk: read failed, taken as empty");
                Ok(T::default())
            }
            read => read,
        }
    }
}

/// The holder fields of each of `locks` (none for a missing key or a non-lock).
async fn read_holders(
    client: &Client,
    locks: &[String],
    reads: Reads,
) -> Result<Vec<(String, Vec<String>)>> {
    futures::stream::iter(locks.iter().cloned())
        .map(|lock| async move {
            let read = client.inspect(&lock).await.map(|info| {
                let holders = info.holders.into_iter();
                holders.map(|holder| holder.field).collect::<Vec<_>>()
            });
            Ok::<_, Error>((lock.clone(), reads.settle(&lock, read)?))
        })
        .buffer_unordered(READS_IN_FLIGHT)
        .try_collect()
        .await
}

/// The live waits recorded by each of `clients` (by uuid).
async fn read_edges(client: &Client, clients: &[String], reads: Reads) -> Result<Vec<Edge>> {
    let all: Vec<Vec<Edge>> = futures::stream::iter(clients.iter().cloned())
        .map(|id| async move { reads.settle(&id, read_client_edges(client, &id).await) })
        .buffer_unordered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(all.into_iter().flatten().collect())
}

/// The waits recorded in client `id`'s hash, none when the hash is stale: a live client renews
/// it at least every quarter of its TTL, so a hash with less than half its TTL left belongs to a client
/// that stopped (or a key someone else wrote).
async fn read_client_edges(client: &Client, id: &str) -> Result<Vec<Edge>> {
    let inner = &client.inner;
    let key = name::wait_edges_key(id);
    let reply = READ_WAIT_EDGES
        .run::<_, &str>(
            &inner.redis.pool,
            &inner.redis.settings.read_options,
            &[&key],
            &[],
        )
        .await
        .map_err(|err| inner.redis_error(&key, err))?;
    Ok(parse_edges(id, reply))
}

fn parse_edges(id: &str, reply: Value) -> Vec<Edge> {
    let Value::Array(mut parts) = reply else {
        return Vec::new();
    };
    let (Some(Value::Array(fields)), Some(pttl)) = (parts.pop(), parts.pop()) else {
        return Vec::new();
    };
    let text = |value: &Value| {
        value
            .as_bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    let mut ttl: Option<i64> = None;
    let mut detects = false;
    let mut edges = Vec::new();
    for pair in fields.chunks_exact(2) {
        let (Some(field), Some(value)) = (text(&pair[0]), text(&pair[1])) else {
            continue;
        };
        if field == "ttl" {
            ttl = value.parse().ok();
        } else if field == "detects" {
            detects = value == "1";
        } else if let Some(edge) = wait_for::parse_edge(id, &field, &value) {
            edges.push(edge);
        }
    }
    let live = match (pttl.as_i64(), ttl) {
        (Some(left), Some(ttl)) => left > 0 && left.saturating_mul(2) > ttl,
        _ => false,
    };
    if live {
        for edge in &mut edges {
            edge.detects = detects;
        }
        edges
    } else {
        Vec::new()
    }
}

impl Client {
    /// The deadlocks visible now: cycles of waits recorded by clients with
    /// [`DeadlockDetection`] on (this one's own waits included, recorded or not yet), each
    /// cycle once (one per group of owners that wait for each other, through the group's
    /// youngest wait, [`Deadlock::victim`]). Reads every client's edges hash (`SCAN` on every
    /// master, then one read per hash) and the holders of each lock waited for; an empty list
    /// when nobody records waits. Cycles through a waiter that records nothing (Java Redisson,
    /// a client with detection off) are not seen.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// for deadlock in client.find_deadlocks().await? {
    ///     println!("{deadlock}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn find_deadlocks(&self) -> Result<Vec<Deadlock>> {
        let graph = self.wait_graph().await?;
        let now_ms = crate::clock::epoch_ms();
        Ok(graph
            .cycles()
            .into_iter()
            .map(|cycle| Deadlock {
                steps: cycle.iter().map(|edge| edge.step(now_ms)).collect(),
            })
            .collect())
    }

    /// Every wait that clients with [`DeadlockDetection`] on have recorded now (this client's
    /// own waits included, recorded in Redis or not yet), oldest first: who waits for which
    /// lock, since when. What `ferrisson status` lists as a lock's waiters. A waiter that
    /// records nothing (Java Redisson, a client with detection off) is not among them.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// for wait in client.recorded_waits().await? {
    ///     println!("{} has waited {:?} for {}", wait.owner, wait.waited, wait.lock);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn recorded_waits(&self) -> Result<Vec<WaitStep>> {
        let (edges, _) = self.recorded_edges().await?;
        let now_ms = crate::clock::epoch_ms();
        let mut waits: Vec<WaitStep> = edges.iter().map(|edge| edge.step(now_ms)).collect();
        waits.sort_by(|a, b| {
            (a.since_ms, &a.owner, a.wait_id).cmp(&(b.since_ms, &b.owner, b.wait_id))
        });
        Ok(waits)
    }

    /// Every recorded wait (this client's own included) and the locks they wait for.
    async fn recorded_edges(&self) -> Result<(Vec<Edge>, Vec<String>)> {
        let inner = &self.inner;
        inner.ensure_open()?;
        let mut edges = Vec::new();
        let mut own_clients = Vec::new();
        if let Some(table) = &inner.waits {
            edges.extend(table.waits().iter().map(|wait| local_edge(inner, wait)));
            own_clients.push(inner.id.clone());
        }
        let clients: Vec<String> = self
            .edge_hashes()
            .await?
            .into_iter()
            .filter(|id| !own_clients.contains(id))
            .collect();
        edges.extend(read_edges(self, &clients, Reads::Strict).await?);
        let mut locks: Vec<String> = edges.iter().map(|edge| edge.lock.clone()).collect();
        locks.sort();
        locks.dedup();
        Ok((edges, locks))
    }

    /// Every recorded wait (this client's own included) and the holders of the locks waited
    /// for.
    async fn wait_graph(&self) -> Result<Graph> {
        let (edges, locks) = self.recorded_edges().await?;
        let mut graph = Graph::default();
        for edge in edges {
            graph.add_wait(edge);
        }
        for (lock, fields) in read_holders(self, &locks, Reads::Strict).await? {
            graph.add_holders(&lock, fields);
        }
        Ok(graph)
    }

    /// The client uuids of every edges hash (`SCAN MATCH ferrisson_waits:*`, on every master
    /// of a cluster). By hand rather than fred's scan streams, which report a refused `SCAN`
    /// (an ACL without `+scan`) as a protocol error instead of the server's answer.
    async fn edge_hashes(&self) -> Result<Vec<String>> {
        use fred::interfaces::ClusterInterface;
        let redis = &self.inner.redis;
        let client = redis.pool.next();
        let pattern = format!("{}:*", name::WAIT_EDGES_PREFIX);
        let error = |err| self.inner.redis_error(name::WAIT_EDGES_PREFIX, err);
        let mut keys = Vec::new();
        if redis.settings.clustered {
            let masters = client
                .cached_cluster_state()
                .map(|state| state.unique_primary_nodes())
                .unwrap_or_default();
            for master in masters {
                let node = client.with_cluster_node(master);
                scan(&node, &pattern, &mut keys).await.map_err(error)?;
            }
        } else {
            scan(client, &pattern, &mut keys).await.map_err(error)?;
        }
        let mut ids: Vec<String> = keys
            .iter()
            .filter_map(|key| name::wait_edges_client(key))
            .map(str::to_owned)
            .collect();
        ids.sort();
        ids.dedup();
        Ok(ids)
    }
}

/// Appends the keys of one server matching `pattern` to `keys` (`SCAN` to its end).
async fn scan<C: fred::interfaces::ClientLike>(
    client: &C,
    pattern: &str,
    keys: &mut Vec<String>,
) -> std::result::Result<(), fred::error::Error> {
    let mut cursor = "0".to_owned();
    loop {
        let args = vec![cursor.as_str(), "MATCH", pattern, "COUNT", "100"];
        let (next, page): (String, Vec<String>) = client.custom(fred::cmd!("SCAN"), args).await?;
        keys.extend(page);
        if next == "0" {
            return Ok(());
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(pttl: i64, fields: &[(&str, &str)]) -> Value {
        let fields = fields
            .iter()
            .flat_map(|(f, v)| [Value::from(*f), Value::from(*v)])
            .collect();
        Value::Array(vec![Value::Integer(pttl), Value::Array(fields)])
    }

    #[test]
    fn a_hash_renewed_within_half_its_ttl_is_live_and_an_older_one_is_not() {
        let fields = [("ttl", "1000"), ("7:1", "5 c:7 a")];
        assert_eq!(parse_edges("c", reply(900, &fields)).len(), 1);
        assert!(parse_edges("c", reply(400, &fields)).is_empty());
        assert!(parse_edges("c", reply(-1, &fields)).is_empty());
        // No `ttl` field: not written by a ferrisson keeper.
        assert!(parse_edges("c", reply(900, &fields[1..])).is_empty());
    }

    #[test]
    fn the_timing_follows_the_mode() {
        assert!(Timing::of(DeadlockDetection::Off).is_none());
        let detect = Timing::of(DeadlockDetection::Detect {
            threshold: Duration::from_secs(1),
        })
        .expect("on");
        assert_eq!(detect.after, Duration::from_millis(500));
        assert_eq!(detect.renew, Duration::from_millis(250));
        assert_eq!(detect.ttl(), Duration::from_secs(2), "at least 2 s");
        let slow = Timing::of(DeadlockDetection::Detect {
            threshold: Duration::from_secs(8),
        })
        .expect("on");
        assert_eq!(slow.ttl(), Duration::from_secs(8), "four renewals of 2 s");
        assert_eq!(detect.confirm(), Duration::from_millis(50));
    }
}
