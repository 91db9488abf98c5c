//! Wait-for edges and the cycles they make (distributed deadlock detection): what a ferrisson
//! waiter records in Redis while it waits, how a cycle is found in what a walk read, and which
//! wait of a cycle gives way. Pure: the client's table of its own waits is `kit/waits.rs`, the
//! edges' upkeep and the walks are `deadlock.rs`.
//!
//! The graph has two kinds of arcs. An owner waits for a lock: an edge, recorded by the
//! waiting client in its edges hash (`name::wait_edges_key`), field `<owner id>:<wait id>`,
//! value `<since ms> <asked field> <lock name>`. A lock is held by owners: its holder fields, in
//! the lock itself (Redisson's layout, read by `Client::inspect`). A cycle is a path
//! owner → lock → holder → lock → ... back to the first owner.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::time::Duration;

/// One wait of a [`Deadlock`]: `owner` has waited `waited` for `lock`, which the owner of the
/// next step holds (the last step's lock is held by the first step's owner).
///
/// ```
/// # fn demo(deadlock: &ferrisson::Deadlock) {
/// for step in &deadlock.steps {
///     println!("{} waits {:?} for {}", step.owner, step.waited, step.lock);
/// }
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitStep {
    /// The waiting owner's holder field, `<client uuid>:<owner id>`.
    pub owner: String,
    /// The lock it waits for.
    pub lock: String,
    /// How long it has waited, by the waiting client's clock as recorded and this machine's
    /// clock now (clocks of different machines may disagree by their skew).
    pub waited: Duration,
    /// When the wait started, epoch milliseconds of the waiting client's clock.
    pub since_ms: u64,
    /// The wait's id within its client (the wait's identity: a later wait of the same owner
    /// for the same lock has another).
    pub wait_id: u64,
    /// Whether the waiting client breaks deadlocks
    /// ([`DeadlockDetection::Detect`](crate::DeadlockDetection::Detect)); a client that only
    /// records its waits (`Record`) never gives way, so its waits are victims only of a cycle
    /// without any detecting client.
    pub detects: bool,
}

/// A cycle of waits that cannot end by itself: each owner waits for a lock that the next one
/// holds, and the last step's lock is held by the first step's owner. With watchdog leases
/// nobody's lease runs out, so without a victim nobody ever proceeds.
///
/// ```
/// # fn demo(deadlock: &ferrisson::Deadlock) {
/// println!("{deadlock}");
/// println!("the youngest wait gives way: {}", deadlock.victim().owner);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deadlock {
    /// The waits, in order around the cycle.
    pub steps: Vec<WaitStep>,
}

impl Deadlock {
    /// The wait that gives way: the youngest (the latest start; ties broken by owner and wait
    /// id) of the waits whose client detects deadlocks
    /// ([`DeadlockDetection::Detect`](crate::DeadlockDetection::Detect)), which every client of
    /// the cycle picks alike; its acquire fails with [`Error::Deadlock`](crate::Error::Deadlock).
    /// In a cycle of clients that only record their waits, the youngest wait, which nobody
    /// fails.
    ///
    /// ```
    /// # fn demo(deadlock: &ferrisson::Deadlock) {
    /// assert!(deadlock.steps.contains(deadlock.victim()));
    /// # }
    /// ```
    pub fn victim(&self) -> &WaitStep {
        &self.steps[victim_index(&self.steps)]
    }
}

impl fmt::Display for Deadlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.steps.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} waits for `{}`", step.owner, step.lock)?;
            let next = &self.steps[(i + 1) % self.steps.len()];
            write!(f, " (held by {})", next.owner)?;
        }
        Ok(())
    }
}

/// The index of the wait that gives way: the youngest of the waits whose client detects (all
/// waits when none does), ties broken by owner, then wait id. A youngest wait of a client
/// that only records would leave the cycle unbroken. Never called on an empty cycle (a
/// [`Deadlock`] has at least one step).
pub(crate) fn victim_index(steps: &[WaitStep]) -> usize {
    (0..steps.len())
        .max_by(|&a, &b| {
            let key = |step: &WaitStep| {
                (
                    step.detects,
                    step.since_ms,
                    step.owner.clone(),
                    step.wait_id,
                )
            };
            key(&steps[a]).cmp(&key(&steps[b]))
        })
        .unwrap_or(0)
}

/// One recorded wait, as read back from an edges hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Edge {
    /// The waiting owner's holder field, `<client uuid>:<owner id>`.
    pub(crate) owner: String,
    pub(crate) wait_id: u64,
    pub(crate) since_ms: u64,
    /// The hash field the wait asks for (the owner's holder field, `...:write` for a write
    /// side): an edge whose lock holds this very field has been granted, not waited for.
    pub(crate) field: String,
    pub(crate) lock: String,
    /// Whether the waiting client detects deadlocks (and so may be the victim).
    pub(crate) detects: bool,
}

impl Edge {
    /// The step of a [`Deadlock`] this edge is, `now_ms` by this machine's clock.
    pub(crate) fn step(&self, now_ms: u64) -> WaitStep {
        WaitStep {
            owner: self.owner.clone(),
            lock: self.lock.clone(),
            waited: Duration::from_millis(now_ms.saturating_sub(self.since_ms)),
            since_ms: self.since_ms,
            wait_id: self.wait_id,
            detects: self.detects,
        }
    }
}

/// The field of a wait in its client's edges hash: `<owner id>:<wait id>`.
pub(crate) fn edge_field(owner_id: u64, wait_id: u64) -> String {
    format!("{owner_id}:{wait_id}")
}

/// The value of a wait in its client's edges hash: `<since ms> <asked field> <lock name>`
/// (the name last: it may contain anything, the field has no space).
pub(crate) fn edge_value(since_ms: u64, field: &str, lock: &str) -> String {
    format!("{since_ms} {field} {lock}")
}

/// An edge read from client `client_id`'s hash; `None` for a field or value it never writes.
/// Its `detects` is false: the hash's own field says (`deadlock.rs`).
pub(crate) fn parse_edge(client_id: &str, field: &str, value: &str) -> Option<Edge> {
    let (owner_id, wait_id) = field.split_once(':')?;
    let owner_id: u64 = owner_id.parse().ok()?;
    let wait_id: u64 = wait_id.parse().ok()?;
    let mut parts = value.splitn(3, ' ');
    let since_ms: u64 = parts.next()?.parse().ok()?;
    let asked = parts.next()?;
    let lock = parts.next()?;
    let owner = format!("{client_id}:{owner_id}");
    // The asked field is the owner's own (or its write side): anything else was not written
    // by this crate.
    if asked != owner && asked.strip_suffix(":write") != Some(owner.as_str()) {
        return None;
    }
    Some(Edge {
        owner,
        wait_id,
        since_ms,
        field: asked.to_owned(),
        lock: lock.to_owned(),
        detects: false,
    })
}

/// The owner of a holder field: the field without a write side's `:write`.
pub(crate) fn holder_owner(field: &str) -> &str {
    field.strip_suffix(":write").unwrap_or(field)
}

/// The client uuid of an owner `<client uuid>:<owner id>`; `None` for a value that is no
/// holder field (a peer's random token).
pub(crate) fn client_of(owner: &str) -> Option<&str> {
    let (client, id) = owner.split_once(':')?;
    (!client.is_empty() && !id.is_empty()).then_some(client)
}

/// What a walk has read: the waits of some owners, the holder fields of some locks.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    /// Waits by owner, granted ones left out (see [`Graph::add_holders`]).
    waits: HashMap<String, Vec<Edge>>,
    /// Holder fields by lock.
    holders: HashMap<String, Vec<String>>,
}

impl Graph {
    /// Records `edge` (a wait of its owner).
    pub(crate) fn add_wait(&mut self, edge: Edge) {
        let waits = self.waits.entry(edge.owner.clone()).or_default();
        if !waits.contains(&edge) {
            waits.push(edge);
        }
    }

    /// Records the holder fields of `lock`.
    pub(crate) fn add_holders(&mut self, lock: &str, fields: Vec<String>) {
        self.holders.insert(lock.to_owned(), fields);
    }

    /// Whether the holders of `lock` have been read.
    pub(crate) fn knows_lock(&self, lock: &str) -> bool {
        self.holders.contains_key(lock)
    }

    /// The owners holding `lock` (its read holders, writers, ...), each once.
    fn holders_of(&self, lock: &str) -> Vec<&str> {
        let mut owners: Vec<&str> = Vec::new();
        for field in self.holders.get(lock).into_iter().flatten() {
            let owner = holder_owner(field);
            if !owners.contains(&owner) {
                owners.push(owner);
            }
        }
        owners
    }

    /// The waits of `owner` that are waits: an edge whose lock holds the very field it asks
    /// for was granted (its client has not yet removed it), and leads nowhere.
    fn waits_of(&self, owner: &str) -> impl Iterator<Item = &Edge> {
        self.waits
            .get(owner)
            .into_iter()
            .flatten()
            .filter(|edge| !self.granted(edge))
    }

    fn granted(&self, edge: &Edge) -> bool {
        self.holders
            .get(&edge.lock)
            .is_some_and(|fields| fields.contains(&edge.field))
    }

    /// The shortest cycle that starts with the wait `start`: owner → lock → holder → ... →
    /// back to `start`'s owner; `None` when what was read closes none (yet). A wait that was
    /// granted starts none.
    pub(crate) fn cycle_through(&self, start: &Edge) -> Option<Vec<Edge>> {
        if self.granted(start) {
            return None;
        }
        // Breadth first over owners; `via` keeps the wait by which each owner was reached.
        let mut via: HashMap<&str, &Edge> = HashMap::new();
        let mut queue: VecDeque<&Edge> = VecDeque::from([start]);
        while let Some(wait) = queue.pop_front() {
            for holder in self.holders_of(&wait.lock) {
                if holder == start.owner {
                    let mut cycle = vec![wait.clone()];
                    let mut at = wait;
                    while at.owner != start.owner {
                        at = via[at.owner.as_str()];
                        cycle.push(at.clone());
                    }
                    cycle.reverse();
                    return Some(cycle);
                }
                if via.contains_key(holder) {
                    continue;
                }
                via.insert(holder, wait);
                queue.extend(self.waits_of(holder));
            }
        }
        None
    }

    /// The locks that the waits of `owner` (not granted) wait for.
    pub(crate) fn locks_waited_by(&self, owner: &str) -> Vec<String> {
        self.waits_of(owner).map(|edge| edge.lock.clone()).collect()
    }

    /// One cycle per group of owners that wait for each other (a strongly connected
    /// component of the owner graph with a cycle): the shortest cycle through the group's
    /// youngest wait, so that every reader names the wait that gives way alike.
    pub(crate) fn cycles(&self) -> Vec<Vec<Edge>> {
        let mut found: Vec<Vec<Edge>> = Vec::new();
        let mut covered: HashSet<(String, u64)> = HashSet::new();
        // Youngest first: a group's youngest wait is on a cycle of the group (see `victim`).
        let mut waits: Vec<&Edge> = self.waits.values().flatten().collect();
        waits.sort_by(|a, b| {
            (b.since_ms, &b.owner, b.wait_id).cmp(&(a.since_ms, &a.owner, a.wait_id))
        });
        for wait in waits {
            if covered.contains(&(wait.owner.clone(), wait.wait_id)) {
                continue;
            }
            let Some(cycle) = self.cycle_through(wait) else {
                continue;
            };
            // A cycle through a younger wait already found this group.
            let members: HashSet<&str> = cycle.iter().map(|edge| edge.owner.as_str()).collect();
            let known = found.iter().any(|other| {
                other
                    .iter()
                    .any(|edge| members.contains(edge.owner.as_str()))
            });
            for edge in &cycle {
                covered.insert((edge.owner.clone(), edge.wait_id));
            }
            if !known {
                found.push(cycle);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(owner: &str, wait_id: u64, since_ms: u64, lock: &str) -> Edge {
        Edge {
            owner: owner.to_owned(),
            wait_id,
            since_ms,
            field: owner.to_owned(),
            lock: lock.to_owned(),
            detects: true,
        }
    }

    fn graph(waits: &[Edge], holders: &[(&str, &[&str])]) -> Graph {
        let mut graph = Graph::default();
        for wait in waits {
            graph.add_wait(wait.clone());
        }
        for (lock, fields) in holders {
            graph.add_holders(lock, fields.iter().map(|f| (*f).to_owned()).collect());
        }
        graph
    }

    #[test]
    fn an_edge_reads_back_as_written() {
        let value = edge_value(1_700, "c1:7:write", "orders: 42");
        let edge = parse_edge("c1", &edge_field(7, 3), &value).expect("parses");
        assert_eq!(edge.owner, "c1:7");
        assert_eq!((edge.wait_id, edge.since_ms), (3, 1_700));
        assert_eq!(edge.field, "c1:7:write");
        assert_eq!(edge.lock, "orders: 42");
        // Another owner's field, a bad number, a missing part: not ours.
        assert!(parse_edge("c1", "7:3", "1 c2:7 x").is_none());
        assert!(parse_edge("c1", "7:x", "1 c1:7 x").is_none());
        assert!(parse_edge("c1", "7:3", "1 c1:7").is_none());
    }

    #[test]
    fn two_owners_in_opposite_order_make_one_cycle_whose_youngest_gives_way() {
        let a = edge("c1:1", 1, 100, "b");
        let b = edge("c2:1", 1, 200, "a");
        let g = graph(
            &[a.clone(), b.clone()],
            &[("a", &["c1:1"]), ("b", &["c2:1"])],
        );
        let cycle = g.cycle_through(&a).expect("a cycle");
        assert_eq!(cycle, vec![a.clone(), b.clone()]);
        let steps: Vec<_> = cycle.iter().map(|e| e.step(300)).collect();
        assert_eq!(victim_index(&steps), 1);
        assert_eq!(g.cycles().len(), 1);
    }

    #[test]
    fn the_victim_is_the_youngest_wait_of_a_detecting_client() {
        let recording = |mut edge: Edge| {
            edge.detects = false;
            edge
        };
        let steps =
            |edges: &[Edge]| -> Vec<WaitStep> { edges.iter().map(|e| e.step(500)).collect() };
        let old = edge("c1:1", 1, 100, "b");
        let young = edge("c2:1", 1, 200, "c");
        let youngest = recording(edge("c3:1", 1, 300, "a"));
        // The youngest wait only records: the youngest of the detecting ones gives way.
        assert_eq!(
            victim_index(&steps(&[old.clone(), young, youngest.clone()])),
            1
        );
        // No wait of the cycle detects: the youngest is named, for the record.
        let all_recording = [recording(old), youngest];
        assert_eq!(victim_index(&steps(&all_recording)), 1);
    }

    #[test]
    fn a_ring_of_three_is_one_cycle_and_a_chain_is_none() {
        let x = edge("c1:1", 1, 100, "b");
        let y = edge("c2:1", 1, 150, "c");
        let z = edge("c3:1", 1, 120, "a");
        let holders: &[(&str, &[&str])] = &[("a", &["c1:1"]), ("b", &["c2:1"]), ("c", &["c3:1"])];
        let ring = graph(&[x.clone(), y.clone(), z.clone()], holders);
        assert_eq!(ring.cycle_through(&z).map(|c| c.len()), Some(3));
        assert_eq!(ring.cycles().len(), 1);
        let chain = graph(&[x.clone(), y], holders);
        assert!(chain.cycle_through(&x).is_none());
        assert!(chain.cycles().is_empty());
    }

    #[test]
    fn a_granted_wait_and_a_holder_that_waits_for_nothing_close_no_cycle() {
        // c1:1 asked for b and holds it now: its edge is on the way out.
        let a = edge("c1:1", 1, 100, "b");
        let b = edge("c2:1", 1, 200, "a");
        let g = graph(
            &[a.clone(), b.clone()],
            &[("a", &["c1:1"]), ("b", &["c1:1"])],
        );
        assert!(g.cycle_through(&b).is_none());
        // A Java holder (no edges) of b.
        let g = graph(&[a.clone(), b], &[("a", &["c1:1"]), ("b", &["java:1"])]);
        assert!(g.cycle_through(&a).is_none());
        assert!(g.cycles().is_empty());
    }

    #[test]
    fn a_write_holder_is_its_owner_and_a_reader_asking_to_write_waits_for_itself() {
        let mut up = edge("c1:1", 1, 100, "rw");
        up.field = "c1:1:write".into();
        let g = graph(&[up.clone()], &[("rw", &["c1:1", "c2:5"])]);
        assert_eq!(g.cycle_through(&up).map(|c| c.len()), Some(1));
        let w = edge("c2:5", 1, 100, "a");
        let g = graph(
            &[w.clone(), edge("c1:1", 2, 50, "rw")],
            &[("rw", &["c2:5:write"]), ("a", &["c1:1"])],
        );
        assert_eq!(g.cycle_through(&w).map(|c| c.len()), Some(2));
    }
}
