//! The lease table and the watchdog.
//!
//! The lease table records, per lock and holder field, how many holds this client has (the
//! reentrant count as seen locally), how many of them use the watchdog lease, the lease to re-arm
//! on a partial release, until when the server keeps the key (by the last TTL this client set
//! on it, whichever lease that was), and the lost-lease signal shared by those holds:
//! Redisson's `ExpirationEntry`.
//!
//! The watchdog is one background task per client. Every watchdog-leased hold waits in a bucket
//! of a grid of ticks (a tenth of the renewal interval) about a third of the watchdog timeout
//! ahead; each non-empty bucket has one timer in a hashed timing wheel
//! (`tokio_util::time::DelayQueue`). A due bucket's holds are renewed by one script call per
//! `renewal_batch_size` holds (per hash slot in a cluster), the partial last batch (per slot)
//! topped up from the next buckets: L held locks cost about L / batch size calls per period, and
//! renewing a little early is safe. A renewal that finds the field gone marks the lease lost.
//!
//! Acquires and releases never wake the watchdog: an acquire appends a track request to a list
//! the watchdog drains once per grid tick, and a release marks its entry untracked in place, so
//! a hold released within a tick costs the watchdog one list entry, and a tracked hold is
//! renewed at most a third plus a thirtieth of the timeout after it was taken, well before it
//! could expire.
//!
//! Memory per held lock: the table and the watchdog share one entry per lock and holder field
//! (its watchdog state, the bucket's tick and the expiry, is in the entry), found by the hash of
//! its key: a bucket keeps that 8-byte hash, not the key, and an entry is the one a bucket
//! means only while its tick is the bucket's (a stale or colliding hash finds none, or finds
//! another entry due at the same tick, which is renewed then anyway).

use arcstr::ArcStr;
use std::collections::BTreeMap;
use std::hash::BuildHasher;

use foldhash::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use hashbrown::HashTable;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::time::{delay_queue, DelayQueue};

use crate::lease::doubt::Doubts;
use crate::metrics;
use crate::shown::Reply;
use crate::transport::pubsub::{PubSub, Subscription};
use crate::transport::script::Script;
use crate::transport::Redis;

/// The `tracing` target of the lost-lease warning: an application that reports a loss itself
/// (the CLI's `run`, through `LockGuard::lost`) can turn this one event off without the rest of
/// the crate's warnings (`ferrisson::lease_lost=off`).
const LEASE_LOST: &str = "ferrisson::lease_lost";

/// A lock and one of its holder fields.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct HoldKey {
    pub(crate) name: ArcStr,
    pub(crate) field: ArcStr,
}

/// The lease an acquisition asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lease {
    /// No lease given: the watchdog timeout, renewed while held.
    Watchdog,
    /// A fixed lease in ms; never renewed.
    Fixed(u64),
}

/// What a guard keeps of its registration: the generation tells its holds apart from those of a
/// later acquisition by the same owner after the lease was lost.
#[derive(Clone, Debug)]
pub(crate) struct Ticket {
    pub(crate) key: HoldKey,
    pub(crate) generation: u64,
    pub(crate) lease: Lease,
}

struct HoldEntry {
    holds: u32,
    watchdog_holds: u32,
    /// Set when the lease is known gone (the server said so) or can no longer be proven (its
    /// renewal was not confirmed before the lease would end); the entry's holds count as gone.
    lost: bool,
    /// Set when this client set the key's TTL to other than the watchdog timeout (a fixed-lease
    /// acquire or relet, a partial release re-arming a fixed lease) since the watchdog last
    /// settled a renewal of the entry: a renewal in flight meanwhile may have run before or
    /// after it, so its confirmation bounds `lease_end` by the smaller end, not the larger.
    mixed_ttl: bool,
    /// Whether a guard asked for the entry's lost token (kept in `Holds::tokens`: most holds
    /// never do, and a token per held lock would be a large share of its memory).
    watched: bool,
    /// Until when the server is known to keep the key, whatever each hold's lease: the TTL the
    /// last `PEXPIRE` this client knows of set, timed from when it was *sent* (the server applied
    /// it later). Every acquire sets the TTL to its own lease (protocol §2.2: a re-entry resets
    /// it, a shorter lease shortens it), as does every renewal, relet and partial release
    /// (§2.3). Past it the holds can no longer be proven.
    lease_end: Stamp,
    last_lease_ms: u64,
    generation: u64,
    /// The watchdog's part, kept here rather than in a map of its own (one entry per held lock
    /// instead of two): the grid tick of the bucket the entry's watchdog holds wait in,
    /// [`IN_FLIGHT`] while their renewal is in flight, or [`UNTRACKED`].
    tick: u64,
    /// The tick at or just before the end of the lease as the watchdog last confirmed it: holds
    /// whose renewal is not confirmed by then are given up as lost, without waiting for Redis.
    expiry: u64,
}

impl HoldEntry {
    /// Whether these are the holds of `generation`, not known lost.
    fn live(&self, generation: u64) -> bool {
        !self.lost && self.generation == generation
    }
}

/// An instant as nanoseconds since the lease table's epoch: 8 bytes where an `Instant` takes 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Stamp(u64);

/// A lock and holder field's entry, and its key.
struct Slot {
    key: HoldKey,
    entry: HoldEntry,
}

/// The lease table's entries, found by the hash of their key: the watchdog's buckets keep that
/// hash (8 bytes) rather than the key.
struct Holds {
    slots: HashTable<Slot>,
    hasher: foldhash::fast::RandomState,
    /// The lost tokens of entries with `watched` set, by generation.
    tokens: HashMap<u64, CancellationToken>,
}

/// The hash an entry of `key` is filed under.
fn key_hash(hasher: &foldhash::fast::RandomState, key: &HoldKey) -> u64 {
    hasher.hash_one((&*key.name, &*key.field))
}

impl Holds {
    fn hash(&self, key: &HoldKey) -> u64 {
        key_hash(&self.hasher, key)
    }

    fn get_mut(&mut self, key: &HoldKey) -> Option<&mut HoldEntry> {
        self.get_mut_hashed(self.hash(key), key)
    }

    /// [`get_mut`](Holds::get_mut) for a caller that has the key's hash already (acquires and
    /// releases need it for several lookups).
    fn get_mut_hashed(&mut self, hash: u64, key: &HoldKey) -> Option<&mut HoldEntry> {
        self.slots
            .find_mut(hash, |slot| slot.key == *key)
            .map(|slot| &mut slot.entry)
    }

    fn get(&self, key: &HoldKey) -> Option<&HoldEntry> {
        let hash = self.hash(key);
        self.slots
            .find(hash, |slot| slot.key == *key)
            .map(|slot| &slot.entry)
    }

    fn remove(&mut self, hash: u64, key: &HoldKey) -> Option<HoldEntry> {
        let (slot, _) = self
            .slots
            .find_entry(hash, |slot| slot.key == *key)
            .ok()?
            .remove();
        Some(slot.entry)
    }

    fn insert(&mut self, hash: u64, key: HoldKey, entry: HoldEntry) -> &mut HoldEntry {
        let hasher = &self.hasher;
        let slot = self.slots.insert_unique(hash, Slot { key, entry }, |slot| {
            key_hash(hasher, &slot.key)
        });
        &mut slot.into_mut().entry
    }

    /// The slot of hash `hash` whose entry passes `test` (the watchdog's lookups: its buckets
    /// keep hashes, and an entry is the one they mean only at the tick or generation they
    /// were filed with; a stale bucket entry finds none). The slot's own hash is compared
    /// too: the table matches candidates by 7 bits of the hash only, and many entries share a
    /// tick (without it, a bucket could renew another entry due then in place of its own).
    fn find_mut(&mut self, hash: u64, test: impl Fn(&HoldEntry) -> bool) -> Option<&mut Slot> {
        let hasher = &self.hasher;
        self.slots.find_mut(hash, |slot| {
            test(&slot.entry) && key_hash(hasher, &slot.key) == hash
        })
    }
}

/// What [`LeaseTable::released`] reports.
pub(crate) struct Released {
    /// The lease (ms) to re-arm if the release turns out partial.
    pub(crate) rearm_ms: u64,
    /// Whether the hold's lease was already known lost (nothing to release on the server).
    pub(crate) lost: bool,
}

enum Command {
    /// The watchdog holds of the entry with this hash and generation are to be renewed before
    /// the entry's `lease_end` (just taken, or the key's TTL set again otherwise than by a
    /// renewal).
    Track(u64, u64),
    /// A hold whose guard listens for its loss: check it whenever its lock's unlock message
    /// arrives (say from a `force_unlock`), without waiting for the next renewal.
    Watch(HoldKey, u64),
    Unwatch(u64),
}

pub(crate) struct LeaseTable {
    entries: Mutex<Holds>,
    /// What `Stamp`s count from.
    epoch: Instant,
    /// Track/untrack requests, drained by the watchdog once per grid tick (see the module docs).
    pending: Mutex<Vec<Command>>,
    next_generation: AtomicU64,
    watchdog_ms: u64,
    /// Holder fields whose server state is unknown (see `doubt.rs`): a watchdog lease given up
    /// without the server's word puts its field there.
    pub(crate) doubts: Arc<Doubts>,
    /// This client's share of the held-locks gauge: the holds of entries not lost, changed
    /// under the `entries` lock wherever they change, so that the gauge cannot drift.
    held: metrics::Held,
}

impl LeaseTable {
    fn new(watchdog_ms: u64, doubts: Arc<Doubts>) -> LeaseTable {
        LeaseTable {
            entries: Mutex::new(Holds {
                slots: HashTable::new(),
                hasher: foldhash::fast::RandomState::default(),
                tokens: HashMap::default(),
            }),
            epoch: Instant::now(),
            pending: Mutex::new(Vec::new()),
            next_generation: AtomicU64::new(1),
            watchdog_ms,
            doubts,
            held: Default::default(),
        }
    }

    /// `at` as a [`Stamp`] (instants before the epoch count as the epoch).
    fn stamp(&self, at: Instant) -> Stamp {
        let nanos = at.saturating_duration_since(self.epoch).as_nanos();
        Stamp(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The instant of `stamp`.
    fn instant(&self, stamp: Stamp) -> Instant {
        let since = Duration::from_nanos(stamp.0);
        self.epoch
            .checked_add(since)
            .unwrap_or_else(|| end_of(self.epoch, u64::MAX))
    }

    /// When a TTL of `ms` set by a command sent at `sent_at` ends at the earliest.
    fn end_stamp(&self, sent_at: Instant, ms: u64) -> Stamp {
        self.stamp(end_of(sent_at, ms))
    }

    /// Records a successful acquisition, whose script was sent at `sent_at`, and returns its
    /// ticket and whether it re-entered holds of the same field (a reentrant acquisition).
    ///
    /// Holds of the field whose key's TTL ended before this reply (`HoldEntry::lease_end`: a
    /// fixed lease run out, which no one times; a watchdog renewal, or a synced acquire's
    /// `WAIT`, confirmed too late; a short re-entry's lease) are not re-entered: the server may
    /// have dropped them, so that this script took the lock afresh, and its reply cannot tell.
    /// They are marked lost (their field in doubt: the reconciler brings the server down to the
    /// new hold should they have survived) and this hold starts a new entry. As a re-entry it
    /// would revive their lease, let their guards release the server's only hold while its
    /// guard believes it holds, and (watchdog lease) be given up with them by the watchdog.
    pub(crate) fn acquired(&self, key: &HoldKey, lease: Lease, sent_at: Instant) -> (Ticket, bool) {
        let now = Instant::now();
        let mut guard = self.entries.lock();
        let holds = &mut *guard;
        let lapsed = self.lapse(holds, key, None, now);
        let hash = holds.hash(key);
        let lease_ms = match lease {
            Lease::Watchdog => self.watchdog_ms,
            Lease::Fixed(ms) => ms,
        };
        let end = self.end_stamp(sent_at, lease_ms);
        let mut reentered = true;
        let entry = match holds.get_mut_hashed(hash, key) {
            Some(entry) if !entry.lost => entry,
            // Holds whose lease was lost no longer exist on the server: start afresh.
            _ => {
                reentered = false;
                if let Some(old) = holds.remove(hash, key) {
                    self.forget(holds, &old);
                }
                holds.insert(
                    hash,
                    key.clone(),
                    HoldEntry {
                        holds: 0,
                        watchdog_holds: 0,
                        lost: false,
                        mixed_ttl: false,
                        watched: false,
                        lease_end: self.stamp(sent_at),
                        last_lease_ms: self.watchdog_ms,
                        generation: self.next_generation.fetch_add(1, Ordering::Relaxed),
                        tick: UNTRACKED,
                        expiry: 0,
                    },
                )
            }
        };
        entry.holds += 1;
        self.held.add(1);
        // The script reset the key's TTL to this lease when it ran, longer or shorter than
        // what it was.
        entry.lease_end = end;
        entry.last_lease_ms = lease_ms;
        match lease {
            Lease::Watchdog => {
                entry.watchdog_holds += 1;
                if entry.watchdog_holds == 1 {
                    self.track(hash, entry);
                }
            }
            Lease::Fixed(_) => self.ttl_set(hash, entry, lease_ms),
        }
        let ticket = Ticket {
            key: key.clone(),
            generation: entry.generation,
            lease,
        };
        drop(guard);
        if lapsed {
            self.doubts.mark(key);
        }
        (ticket, reentered)
    }

    /// The key of `entry` (of hash `hash`) just had its TTL set to `lease_ms` (`lease_end`
    /// moved) otherwise than by a watchdog renewal or acquire: flags `mixed_ttl` for renewals
    /// in flight and, while it has watchdog holds, tells the watchdog the new end, which may
    /// come before the next renewal was due (a short fixed re-entry of a watchdog-held lock).
    fn ttl_set(&self, hash: u64, entry: &mut HoldEntry, lease_ms: u64) {
        if lease_ms != self.watchdog_ms {
            entry.mixed_ttl = true;
        }
        if entry.watchdog_holds > 0 {
            self.track(hash, entry);
        }
    }

    /// Tells the watchdog to renew the watchdog holds of `entry` before its `lease_end`.
    fn track(&self, hash: u64, entry: &HoldEntry) {
        self.pending
            .lock()
            .push(Command::Track(hash, entry.generation));
    }

    /// Marks the entry of `key` (if of `generation`, when given) lost if its key ran past its
    /// proven end by `now`; returns whether it did (the caller then puts the field in doubt,
    /// outside the lock).
    fn lapse(
        &self,
        holds: &mut Holds,
        key: &HoldKey,
        generation: Option<u64>,
        now: Instant,
    ) -> bool {
        let now = self.stamp(now);
        let Some(entry) = holds.get(key) else {
            return false;
        };
        if entry.lost || now < entry.lease_end || generation.is_some_and(|g| g != entry.generation)
        {
            return false;
        }
        let proof = if entry.watchdog_holds > 0 {
            Proof::Clock
        } else {
            Proof::RanOut
        };
        self.lose(holds, key, proof);
        true
    }

    /// The key of `ticket`'s holds had its TTL set to `lease_ms` by a command sent at `sent_at`
    /// (see `Hold::relet`): the key's end moves there, and, when the holds are all fixed, a
    /// partial release re-arms that lease from now on.
    pub(crate) fn relet(&self, ticket: &Ticket, lease_ms: u64, sent_at: Instant) {
        let end = self.end_stamp(sent_at, lease_ms);
        let mut holds = self.entries.lock();
        let hash = holds.hash(&ticket.key);
        if let Some(entry) = holds
            .get_mut_hashed(hash, &ticket.key)
            .filter(|e| e.live(ticket.generation))
        {
            entry.lease_end = end;
            if entry.watchdog_holds == 0 {
                entry.last_lease_ms = lease_ms;
            }
            self.ttl_set(hash, entry, lease_ms);
        }
    }

    /// Whether this client has a hold of `key` whose lease is not known lost.
    pub(crate) fn holds(&self, key: &HoldKey) -> bool {
        self.live_holds(key) > 0
    }

    /// This client's holds of lock `name`: each holder field with its hold count and whether
    /// its lease is known lost.
    pub(crate) fn holds_of(&self, name: &str) -> Vec<(ArcStr, u32, bool)> {
        let mut holds: Vec<_> = self
            .entries
            .lock()
            .slots
            .iter()
            .filter(|slot| &*slot.key.name == name)
            .map(|slot| {
                let entry = &slot.entry;
                (ArcStr::clone(&slot.key.field), entry.holds, entry.lost)
            })
            .collect();
        holds.sort();
        holds
    }

    /// Records the release of one hold of `ticket`.
    pub(crate) fn released(&self, ticket: &Ticket) -> Released {
        self.release_hold(&ticket.key, Some(ticket.generation), ticket.lease)
    }

    /// [`LeaseTable::released`] for a hold dropped unreleased, whose release the janitor sends
    /// later. Past the key's proven end that release must not be sent: the server may have
    /// dropped the holds and the owner's next acquire (which need not wait for the janitor)
    /// taken the field afresh, a hold the late release would free. So the holds are given up
    /// as lost (their field in doubt: the reconciler takes back what the server kept) and
    /// `lost` tells the caller to send nothing. An awaited release (`Hold::release`) needs none
    /// of this: its caller's next acquire comes after its reply.
    pub(crate) fn dropped(&self, ticket: &Ticket) -> Released {
        let lapsed = {
            let mut holds = self.entries.lock();
            self.lapse(
                &mut holds,
                &ticket.key,
                Some(ticket.generation),
                Instant::now(),
            )
        };
        if lapsed {
            self.doubts.mark(&ticket.key);
        }
        self.released(ticket)
    }

    /// Whether the holds of `ticket` are known lost (also when a later acquisition replaced
    /// them after the loss), or the key has run past its proven end (`HoldEntry::lease_end`:
    /// a watchdog lease past its last confirmed renewal, a fixed lease that ran out, whichever
    /// lease set the key's TTL last): read from the clock, so a holder that was paused knows
    /// it as soon as it runs again.
    pub(crate) fn is_lost(&self, ticket: &Ticket) -> bool {
        self.lease_end(ticket).is_none()
    }

    /// Until when the holds of `ticket` are proven (`HoldEntry::lease_end`), or `None` if they
    /// are lost (as [`LeaseTable::is_lost`]). The end moves with renewals and re-entries.
    pub(crate) fn lease_end(&self, ticket: &Ticket) -> Option<Instant> {
        let now = self.stamp(Instant::now());
        let end = self
            .entries
            .lock()
            .get(&ticket.key)
            .filter(|entry| entry.live(ticket.generation) && now < entry.lease_end)
            .map(|entry| entry.lease_end)?;
        Some(self.instant(end))
    }

    /// How many holds of `key` this client has that are not given up as lost: what the server
    /// should keep of the field once its doubts are settled.
    pub(crate) fn live_holds(&self, key: &HoldKey) -> u64 {
        self.entries
            .lock()
            .get(key)
            .filter(|entry| !entry.lost)
            .map_or(0, |entry| u64::from(entry.holds))
    }

    /// The server keeps fewer holds of `key` than this client has: they are lost.
    pub(crate) fn lost_on_server(&self, key: &HoldKey) {
        let generation = self.entries.lock().get(key).map(|entry| entry.generation);
        if let Some(generation) = generation {
            self.mark_lost(key, generation, Proof::Server);
        }
    }

    /// A token cancelled when the holds of `ticket` are found lost (already cancelled if they
    /// are); made on first request and shared by the entry's holds.
    pub(crate) fn lost_token(&self, ticket: &Ticket) -> CancellationToken {
        let mut guard = self.entries.lock();
        let holds = &mut *guard;
        let first = match holds.get_mut(&ticket.key) {
            Some(entry) if entry.live(ticket.generation) => {
                !std::mem::replace(&mut entry.watched, true)
            }
            _ => {
                let token = CancellationToken::new();
                token.cancel();
                return token;
            }
        };
        if first {
            // Someone listens for the loss: have the watchdog listen for the lock's unlock
            // messages too.
            self.pending
                .lock()
                .push(Command::Watch(ticket.key.clone(), ticket.generation));
        }
        holds.tokens.entry(ticket.generation).or_default().clone()
    }

    /// Records the release of one hold of `key`, whichever acquisition took it (Redisson-style
    /// release by identity), and returns the lease to re-arm.
    pub(crate) fn released_by_key(&self, key: &HoldKey) -> u64 {
        let lease = match self.entries.lock().get(key) {
            Some(entry) if entry.watchdog_holds > 0 => Lease::Watchdog,
            Some(entry) => Lease::Fixed(entry.last_lease_ms),
            None => return self.watchdog_ms,
        };
        self.release_hold(key, None, lease).rearm_ms
    }

    fn release_hold(&self, key: &HoldKey, generation: Option<u64>, lease: Lease) -> Released {
        let now = Instant::now();
        let mut guard = self.entries.lock();
        let holds = &mut *guard;
        let hash = holds.hash(key);
        let Some(entry) = holds.get_mut_hashed(hash, key) else {
            return Released {
                rearm_ms: self.watchdog_ms,
                lost: true,
            };
        };
        if generation.is_some_and(|g| g != entry.generation) {
            return Released {
                rearm_ms: entry.last_lease_ms,
                lost: true,
            };
        }
        let lost = entry.lost;
        if !lost && entry.holds > 0 {
            // A lost entry's holds left the gauge when it was marked lost.
            self.held.sub(1);
        }
        entry.holds = entry.holds.saturating_sub(1);
        if lease == Lease::Watchdog && entry.watchdog_holds > 0 {
            entry.watchdog_holds -= 1;
            if entry.watchdog_holds == 0 {
                // Its bucket entries go stale; a renewal in flight is not settled.
                entry.tick = UNTRACKED;
            }
        }
        let rearm = if entry.watchdog_holds > 0 {
            self.watchdog_ms
        } else {
            entry.last_lease_ms
        };
        if entry.holds == 0 {
            if let Some(entry) = holds.remove(hash, key) {
                self.forget(holds, &entry);
            }
        } else if !lost {
            // A partial release re-arms the key's TTL to `rearm` (protocol §2.3) once it runs,
            // which is after now; if it never runs, the TTL stays as it was: either way the key
            // lives at least until the earlier of the two.
            entry.lease_end = entry.lease_end.min(self.end_stamp(now, rearm));
            if rearm != self.watchdog_ms {
                entry.mixed_ttl = true;
            }
        }
        Released {
            rearm_ms: rearm,
            lost,
        }
    }

    /// Takes this client's holds out of the held-locks gauge for good: at shutdown (the watchdog
    /// stops and the holds expire) or when the table is dropped (detached holds that were
    /// never released).
    pub(crate) fn retire(&self) {
        let holds = self.entries.lock();
        let live = holds
            .slots
            .iter()
            .filter(|slot| !slot.entry.lost)
            .map(|slot| u64::from(slot.entry.holds))
            .sum();
        self.held.retire(live);
    }

    /// Drops what was kept beside `entry`, just removed from the table, and tells the watchdog
    /// it needs no checks (its renewals stop by themselves: the watchdog finds no entry).
    fn forget(&self, holds: &mut Holds, entry: &HoldEntry) {
        if entry.watched {
            holds.tokens.remove(&entry.generation);
            self.pending.lock().push(Command::Unwatch(entry.generation));
        }
    }

    /// Marks the holds of `key` lost, if they are still those of `generation`. A loss the server
    /// did not confirm puts the field in doubt: the server may still keep the holds, and they
    /// must be taken back before the field is used again.
    fn mark_lost(&self, key: &HoldKey, generation: u64, proof: Proof) {
        let mut holds = self.entries.lock();
        if !holds.get(key).is_some_and(|entry| entry.live(generation)) {
            return;
        }
        self.lose(&mut holds, key, proof);
        drop(holds);
        if proof == Proof::Clock {
            self.doubts.mark(key);
        }
    }

    /// Marks the entry of `key` lost (under the `entries` lock): logged, counted, out of the
    /// held-locks gauge, its guards told. The caller puts the field in doubt after releasing
    /// the lock when the loss is by the clock.
    fn lose(&self, holds: &mut Holds, key: &HoldKey, proof: Proof) {
        match proof {
            Proof::Server => {
                tracing::warn!(target: LEASE_LOST, lock = %key.name, field = %key.field, "lock lease lost: the lock is no longer held by this owner");
                metrics::lease_lost(metrics::Loss::Server);
            }
            Proof::Clock => {
                tracing::warn!(target: LEASE_LOST, lock = %key.name, field = %key.field, "lock lease lost: its renewal was not confirmed before the lease would end");
                metrics::lease_lost(metrics::Loss::Unconfirmed);
            }
            // Not a loss while held: the holder let its fixed lease run out.
            Proof::RanOut => {
                tracing::debug!(lock = %key.name, field = %key.field, "lock lease ran out before the owner's next acquire: that acquire is a new hold");
            }
        }
        let Some(entry) = holds.get_mut(key) else {
            return;
        };
        entry.lost = true;
        self.held.sub(entry.holds);
        let (watched, generation) = (entry.watched, entry.generation);
        if let Some(token) = holds.tokens.get(&generation).filter(|_| watched) {
            token.cancel();
        }
    }
}

/// The lease table as the model checks use it (`crate::model`): without its watchdog task,
/// whose part the check plays through these.
#[cfg(test)]
impl LeaseTable {
    pub(crate) fn detached(watchdog_ms: u64, doubts: Arc<Doubts>) -> Arc<LeaseTable> {
        Arc::new(LeaseTable::new(watchdog_ms, doubts))
    }

    /// The generations of the holds the watchdog is told to track, as it drains its commands
    /// at a grid tick.
    pub(crate) fn take_tracked(&self) -> Vec<u64> {
        std::mem::take(&mut *self.pending.lock())
            .into_iter()
            .filter_map(|command| match command {
                Command::Track(_, generation) => Some(generation),
                _ => None,
            })
            .collect()
    }

    /// What the watchdog does when the server answers a renewal of hold `generation` of `key`
    /// with "not held" (`Watchdog::settle`).
    pub(crate) fn renewal_not_held(&self, key: &HoldKey, generation: u64) {
        self.mark_lost(key, generation, Proof::Server);
    }
}

impl Drop for LeaseTable {
    fn drop(&mut self) {
        self.retire();
    }
}

/// When a TTL of `ms` set by a command sent at `sent_at` ends at the earliest (a lease too long
/// for the clock never does).
fn end_of(sent_at: Instant, ms: u64) -> Instant {
    let far = Duration::from_secs(86_400 * 365 * 30);
    sent_at
        .checked_add(Duration::from_millis(ms))
        .or_else(|| sent_at.checked_add(far))
        .unwrap_or(sent_at)
}

/// How a lease is known to be lost.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Proof {
    /// The server said the field no longer holds the lock.
    Server,
    /// The lease's end passed without a confirmed renewal; the server's state is unknown.
    Clock,
    /// The key's TTL, set by fixed leases only, ran out by the clock (noticed when the owner
    /// acquires again); the server's state is unknown, as for `Clock`.
    RanOut,
}

/// Starts the watchdog task and returns the lease table it serves.
pub(crate) fn start(
    redis: Arc<Redis>,
    renew_script: &'static Script,
    watchdog_timeout: Duration,
    batch_size: usize,
    doubts: Arc<Doubts>,
    (pubsub, watched_messages): (PubSub, mpsc::UnboundedReceiver<ArcStr>),
    shutdown: CancellationToken,
) -> (Arc<LeaseTable>, tokio::task::JoinHandle<()>) {
    let watchdog_ms = u64::try_from(watchdog_timeout.as_millis()).unwrap_or(u64::MAX);
    let table = Arc::new(LeaseTable::new(watchdog_ms, doubts));
    let watchdog = Watchdog {
        table: Arc::downgrade(&table),
        redis,
        renew_script,
        watchdog_ms,
        interval: watchdog_timeout / 3,
        grid: (watchdog_timeout / 30).max(Duration::from_millis(1)),
        epoch: Instant::now(),
        batch_size,
        queue: DelayQueue::new(),
        buckets: BTreeMap::new(),
        watches: Watches {
            pubsub,
            messages: watched_messages,
            holds: HashMap::default(),
            by_channel: HashMap::default(),
        },
    };
    let task = tokio::spawn(watchdog.run(shutdown));
    (table, task)
}

enum Outcome {
    Renewed,
    NotHeld,
    Failed,
}

/// Renewal script calls in flight at most (see `Watchdog::run`).
const MAX_RENEWALS_IN_FLIGHT: usize = 8;

/// [`HoldEntry::tick`] of an entry whose renewal is in flight. Never a real tick: ticks are at
/// least 1 ms apart, and `tick_after` saturates below it.
const IN_FLIGHT: u64 = u64::MAX;

/// [`HoldEntry::tick`] of an entry the watchdog does not renew (no watchdog holds, given up, or
/// not yet scheduled). Never a real tick either.
const UNTRACKED: u64 = u64::MAX - 1;

/// The holds due at one tick of the grid, and that tick's timer in the wheel.
struct Bucket {
    /// The hashes of the entries due (`Holds::find_mut`). May hold stale ones (untracked or
    /// rescheduled entries, whose tick is no longer this one); they are skipped when due.
    holds: Vec<u64>,
    timer: delay_queue::Key,
}

struct Watchdog {
    /// Weak, so that the task never keeps the client alive.
    table: std::sync::Weak<LeaseTable>,
    redis: Arc<Redis>,
    /// The batched renewal of the primitives' holds (`src/lock/upkeep.rs`).
    renew_script: &'static Script,
    watchdog_ms: u64,
    interval: Duration,
    grid: Duration,
    epoch: Instant,
    batch_size: usize,
    /// The hashed timing wheel: one timer per non-empty bucket, valued by its tick.
    queue: DelayQueue<u64>,
    /// Buckets by tick, ordered, so that a partial batch can be topped up from the next ones.
    buckets: BTreeMap<u64, Bucket>,
    watches: Watches,
}

/// The holds whose guards listen for their loss, and their subscriptions to their locks'
/// unlock channels (as watchers: they take no wake-ups from the locks' waiters).
struct Watches {
    pubsub: PubSub,
    /// Channels with watchers on which a message arrived (from `pubsub.rs`).
    messages: mpsc::UnboundedReceiver<ArcStr>,
    /// Generation → the hold, and its subscription once confirmed.
    holds: HashMap<u64, (HoldKey, Option<Subscription>)>,
    by_channel: HashMap<ArcStr, Vec<u64>>,
}

/// When a renewal batch was sent, and each entry's outcome (by hash and generation).
type BatchResult = (Instant, Vec<(u64, u64, Outcome)>);

impl Watchdog {
    async fn run(mut self, shutdown: CancellationToken) {
        let mut in_flight: FuturesUnordered<BoxFuture<'static, BatchResult>> =
            FuturesUnordered::new();
        let mut backlog: std::collections::VecDeque<Vec<Due>> = std::collections::VecDeque::new();
        // Holds whose lease ended without a confirmed renewal, to be reported lost.
        let mut lapsed: Vec<(HoldKey, u64)> = Vec::new();
        let mut watch_events = WatchEvents::new();
        let mut tick = tokio::time::interval(self.grid);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {
                    let Some(table) = self.table.upgrade() else {
                        return; // the client is gone
                    };
                    let commands = std::mem::take(&mut *table.pending.lock());
                    let mut holds = table.entries.lock();
                    for command in commands {
                        self.apply(&table, &mut holds, command, &mut watch_events);
                    }
                },
                Some(channel) = self.watches.messages.recv() => {
                    // An unlock message on a watched lock (a force unlock, say): check its
                    // watched holds now rather than at their next renewal.
                    for generation in self.watches.by_channel.get(&channel).into_iter().flatten() {
                        if let Some((key, _)) = self.watches.holds.get(generation) {
                            watch_events.push(check(Arc::clone(&self.redis), key.clone(), *generation));
                        }
                    }
                },
                Some(event) = watch_events.next(), if !watch_events.is_empty() => {
                    self.on_watch_event(event, &mut watch_events);
                },
                Some(expired) = self.queue.next(), if !self.queue.is_empty() => {
                    let Some(table) = self.table.upgrade() else {
                        return;
                    };
                    let due = self.take_due(&table, expired.into_inner(), &mut lapsed);
                    backlog.extend(split_into_batches(due, self.batch_size, self.redis.settings.clustered));
                },
                Some(results) = in_flight.next(), if !in_flight.is_empty() => {
                    let Some(table) = self.table.upgrade() else {
                        return;
                    };
                    self.settle(&table, results, &mut lapsed);
                }
            }
            if !lapsed.is_empty() {
                if let Some(table) = self.table.upgrade() {
                    for (key, generation) in lapsed.drain(..) {
                        table.mark_lost(&key, generation, Proof::Clock);
                    }
                }
                lapsed.clear();
            }
            // A bounded number of renewal calls at a time: when many holds fall due together
            // (say 100,000 taken within one grid tick), the rest wait as compact batches here
            // instead of as encoded commands, which bounds the renewal's transient memory; Redis
            // runs them one after another either way.
            while in_flight.len() < MAX_RENEWALS_IN_FLIGHT {
                let Some(batch) = backlog.pop_front() else {
                    break;
                };
                let lease_end = self.instant_of(batch.iter().map(|due| due.expiry).min());
                in_flight.push(Box::pin(renew(
                    Arc::clone(&self.redis),
                    self.renew_script,
                    self.watchdog_ms,
                    batch,
                    lease_end,
                )));
            }
        }
    }

    fn apply(
        &mut self,
        table: &LeaseTable,
        holds: &mut Holds,
        command: Command,
        watch_events: &mut WatchEvents,
    ) {
        match command {
            Command::Watch(key, generation) => {
                let channel: ArcStr = crate::name::lock_channel(&key.name).into();
                self.watches
                    .by_channel
                    .entry(ArcStr::clone(&channel))
                    .or_default()
                    .push(generation);
                self.watches.holds.insert(generation, (key, None));
                let pubsub = self.watches.pubsub.clone();
                watch_events.push(Box::pin(async move {
                    WatchEvent::Subscribed(generation, pubsub.watch(&channel).await)
                }));
            }
            Command::Unwatch(generation) => self.unwatch(generation),
            Command::Track(hash, generation) => {
                let Some(slot) = holds.find_mut(hash, |e| e.generation == generation) else {
                    return; // released meanwhile
                };
                let entry = &mut slot.entry;
                if entry.watchdog_holds == 0 {
                    return; // its watchdog holds were released meanwhile
                }
                let lease_end = table.instant(entry.lease_end);
                let expiry = self.tick_at(lease_end);
                // Renew a third of the timeout from now, or before the key's TTL ends if a
                // shorter lease set it (a fixed-lease re-entry of a watchdog-held lock).
                let tick = self.tick_after(self.renew_within(lease_end));
                if entry.tick == UNTRACKED {
                    entry.tick = tick;
                    entry.expiry = expiry;
                    self.add_to_bucket(tick, vec![hash]);
                    return;
                }
                // Tracked already: the TTL was set again otherwise than by a renewal. A longer
                // one the next renewal cuts back to the timeout: give up by the earlier end.
                entry.expiry = entry.expiry.min(expiry);
                if entry.tick == IN_FLIGHT {
                    // The renewal in flight settles by the table's end (`mixed_ttl`).
                    return;
                }
                if tick < entry.tick {
                    entry.tick = tick;
                    self.add_to_bucket(tick, vec![hash]);
                }
                // No renewal in flight: the next one is sent after the TTL was set, so its
                // confirmation proves the timeout again.
                entry.mixed_ttl = false;
            }
        }
    }

    fn unwatch(&mut self, generation: u64) {
        let Some((key, _share)) = self.watches.holds.remove(&generation) else {
            return;
        };
        let channel = crate::name::lock_channel(&key.name);
        if let Some(generations) = self.watches.by_channel.get_mut(channel.as_str()) {
            generations.retain(|watched| *watched != generation);
            if generations.is_empty() {
                self.watches.by_channel.remove(channel.as_str());
            }
        }
    }

    fn on_watch_event(&mut self, event: WatchEvent, watch_events: &mut WatchEvents) {
        match event {
            WatchEvent::Subscribed(generation, share) => {
                let Some((key, slot)) = self.watches.holds.get_mut(&generation) else {
                    return; // released meanwhile: the share unsubscribes as it drops
                };
                match share {
                    Ok(share) => *slot = Some(share),
                    // Renewals and the lease end still tell the loss; reconnects resubscribe.
                    Err(err) => {
                        tracing::debug!(lock = %key.name, error = %err, "cannot listen for the lock's unlock messages")
                    }
                }
                // A message sent before the subscription was confirmed is not heard: check once.
                watch_events.push(check(Arc::clone(&self.redis), key.clone(), generation));
            }
            WatchEvent::Checked(key, generation, false) => {
                if self.watches.holds.contains_key(&generation) {
                    if let Some(table) = self.table.upgrade() {
                        table.mark_lost(&key, generation, Proof::Server);
                    }
                }
            }
            WatchEvent::Checked(..) => {}
        }
    }

    /// The grid tick at or just before `after` from now: renewing a little early is safe.
    fn tick_after(&self, after: Duration) -> u64 {
        self.tick_at(Instant::now() + after)
    }

    /// The grid tick at or just before `at` (0 for instants before the task started).
    fn tick_at(&self, at: Instant) -> u64 {
        let target = at.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(target / self.grid.as_nanos().max(1)).unwrap_or(IN_FLIGHT - 1)
    }

    /// The instant tick `tick` starts at (`None`: never).
    fn instant_of(&self, tick: Option<u64>) -> Option<Instant> {
        let nanos = u64::try_from(self.grid.as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_mul(tick?);
        self.epoch.checked_add(Duration::from_nanos(nanos))
    }

    /// When to renew a hold whose key's TTL ends at `lease_end`: a renewal interval from now,
    /// or halfway to that end if it is closer.
    fn renew_within(&self, lease_end: Instant) -> Duration {
        self.interval
            .min(lease_end.saturating_duration_since(Instant::now()) / 2)
    }

    /// Appends `holds` (already marked with `tick`) to that tick's bucket, creating its timer.
    fn add_to_bucket(&mut self, tick: u64, mut holds: Vec<u64>) {
        if holds.is_empty() {
            return;
        }
        if let Some(bucket) = self.buckets.get_mut(&tick) {
            bucket.holds.append(&mut holds);
        } else {
            let at = self
                .instant_of(Some(tick))
                .unwrap_or_else(|| Instant::now() + self.interval);
            let timer = self.queue.insert_at(tick, at);
            self.buckets.insert(tick, Bucket { holds, timer });
        }
    }

    /// Takes the live holds of bucket `tick` (marking them in flight), topped up from the next
    /// buckets within half an interval so that the last batch is full: with every batch full,
    /// L held locks cost about L / batch_size calls per period, and the holds renewed early
    /// join this bucket's phase for good. Holds whose lease end has come without a confirmed
    /// renewal go to `expired` instead.
    fn take_due(
        &mut self,
        table: &LeaseTable,
        tick: u64,
        expired: &mut Vec<(HoldKey, u64)>,
    ) -> Vec<Due> {
        let now = self.tick_after(Duration::ZERO);
        let mut due = Vec::new();
        let mut holds = table.entries.lock();
        if let Some(bucket) = self.buckets.remove(&tick) {
            take_live(
                &mut holds,
                tick,
                bucket.holds,
                &mut due,
                expired,
                usize::MAX,
                now,
            );
        }
        if self.redis.settings.clustered {
            self.top_up_slots(&mut holds, &mut due, expired, now);
            return due;
        }
        let horizon = self.tick_after(self.interval / 2);
        while due.len() % self.batch_size != 0 {
            let Some((&next, _)) = self.buckets.range(..=horizon).next() else {
                break;
            };
            let Some(mut bucket) = self.buckets.remove(&next) else {
                break;
            };
            let wanted = self.batch_size - due.len() % self.batch_size;
            let split = bucket.holds.len().saturating_sub(wanted);
            let taken = bucket.holds.split_off(split);
            take_live(&mut holds, next, taken, &mut due, expired, wanted, now);
            self.put_back(next, bucket);
        }
        due
    }

    /// Puts back bucket `tick`, whose holds were taken in part, or drops its timer if none is left.
    fn put_back(&mut self, tick: u64, bucket: Bucket) {
        if bucket.holds.is_empty() {
            self.queue.try_remove(&bucket.timer);
        } else {
            self.buckets.insert(tick, bucket);
        }
    }

    /// In a cluster a batch keeps to one hash slot, so each slot's partial batch is topped up
    /// with holds of the same slot from the next buckets within half an interval: the holds of
    /// one slot taken across a grid tick (their tracking drained at two ticks) are renewed by
    /// one call a round rather than one per bucket, and keep that common phase from then on.
    fn top_up_slots(
        &mut self,
        holds: &mut Holds,
        due: &mut Vec<Due>,
        expired: &mut Vec<(HoldKey, u64)>,
        now: u64,
    ) {
        let mut wanted: HashMap<u16, usize> = HashMap::default();
        for hold in due.iter() {
            *wanted.entry(slot_of(&hold.key)).or_default() += 1;
        }
        for count in wanted.values_mut() {
            *count = (self.batch_size - *count % self.batch_size) % self.batch_size;
        }
        wanted.retain(|_, count| *count > 0);
        let horizon = self.tick_after(self.interval / 2);
        let next_ticks: Vec<u64> = self
            .buckets
            .range(..=horizon)
            .map(|(tick, _)| *tick)
            .collect();
        for next in next_ticks {
            if wanted.is_empty() {
                break;
            }
            let Some(mut bucket) = self.buckets.remove(&next) else {
                continue;
            };
            let mut kept = Vec::with_capacity(bucket.holds.len());
            for hash in std::mem::take(&mut bucket.holds) {
                let Some(found) = holds.find_mut(hash, |e| e.tick == next) else {
                    continue; // untracked or rescheduled: a stale entry
                };
                let slot = slot_of(&found.key);
                match wanted.get_mut(&slot) {
                    Some(count) => {
                        *count -= 1;
                        if *count == 0 {
                            wanted.remove(&slot);
                        }
                        take_live(holds, next, vec![hash], due, expired, 1, now);
                    }
                    None => kept.push(hash),
                }
            }
            bucket.holds = kept;
            self.put_back(next, bucket);
        }
    }

    /// Reschedules a renewed batch: one clock read, and one lookup per entry. A renewal that
    /// failed is retried, but not past the end of the lease as last confirmed: then the hold
    /// is given up (`expired`).
    fn settle(
        &mut self,
        table: &LeaseTable,
        (sent, results): BatchResult,
        expired: &mut Vec<(HoldKey, u64)>,
    ) {
        let now = self.tick_after(Duration::ZERO);
        let renew_tick = self.tick_after(self.interval);
        // Retry well before the lease can run out.
        let retry_tick = self.tick_after(self.interval / 2);
        let lease_end = sent + Duration::from_millis(self.watchdog_ms);
        let renewed_end = table.stamp(lease_end);
        let renewed_expiry = self.tick_at(lease_end);
        let mut renewed = Vec::with_capacity(results.len());
        let mut retries: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let mut not_held = Vec::new();
        let mut holds = table.entries.lock();
        for (hash, generation, outcome) in results {
            let Some(slot) = holds.find_mut(hash, |e| e.generation == generation) else {
                continue; // released meanwhile
            };
            let entry = &mut slot.entry;
            if entry.tick != IN_FLIGHT {
                // Untracked meanwhile (its last watchdog hold released: fixed holds remain),
                // perhaps tracked again and scheduled afresh. A renewal that ran (or, failed,
                // may still run) after a TTL set since it was sent bounds the key's end all
                // the same: the shorter of the two is all that is known.
                if !matches!(outcome, Outcome::NotHeld) {
                    entry.lease_end = entry.lease_end.min(renewed_end);
                }
                continue;
            }
            match outcome {
                Outcome::Renewed => {
                    // The renewal set the TTL to the timeout after every TTL set before it was
                    // sent. Another TTL set while it was in flight (a fixed-lease re-entry, the
                    // last watchdog hold's release re-arming a fixed lease) may have come after
                    // it: then only the earlier end is known, and the hold is renewed again
                    // before it.
                    let mixed = std::mem::replace(&mut entry.mixed_ttl, false);
                    if mixed && entry.lease_end < renewed_end {
                        let end = table.instant(entry.lease_end);
                        let tick = self.tick_after(self.renew_within(end));
                        entry.expiry = self.tick_at(end);
                        entry.tick = tick;
                        retries.entry(tick).or_default().push(hash);
                        continue;
                    }
                    entry.lease_end = renewed_end;
                    entry.tick = renew_tick;
                    entry.expiry = renewed_expiry;
                    renewed.push(hash);
                }
                Outcome::Failed if entry.expiry > now => {
                    // A renewal that failed may still run, and set the timeout then.
                    entry.lease_end = entry.lease_end.min(renewed_end);
                    let tick = retry_tick.min(entry.expiry);
                    entry.tick = tick;
                    retries.entry(tick).or_default().push(hash);
                }
                Outcome::Failed => {
                    entry.tick = UNTRACKED;
                    expired.push((slot.key.clone(), generation));
                }
                Outcome::NotHeld => {
                    entry.tick = UNTRACKED;
                    not_held.push((slot.key.clone(), generation));
                }
            }
        }
        drop(holds);
        for (key, generation) in not_held {
            table.mark_lost(&key, generation, Proof::Server);
        }
        self.add_to_bucket(renew_tick, renewed);
        for (tick, hashes) in retries {
            self.add_to_bucket(tick, hashes);
        }
    }
}

/// Moves the live entries of `hashes` (due at `tick`) into `due`, marking them in flight, or,
/// when their lease ends by tick `now`, out of the watchdog into `expired`.
fn take_live(
    holds: &mut Holds,
    tick: u64,
    hashes: Vec<u64>,
    due: &mut Vec<Due>,
    expired: &mut Vec<(HoldKey, u64)>,
    limit: usize,
    now: u64,
) {
    let mut taken = 0;
    for hash in hashes {
        if taken == limit {
            break;
        }
        let Some(slot) = holds.find_mut(hash, |e| e.tick == tick) else {
            continue; // untracked or rescheduled: a stale entry
        };
        let entry = &mut slot.entry;
        if entry.expiry <= now {
            entry.tick = UNTRACKED;
            expired.push((slot.key.clone(), entry.generation));
            continue;
        }
        entry.tick = IN_FLIGHT;
        due.push(Due {
            key: slot.key.clone(),
            hash,
            generation: entry.generation,
            expiry: entry.expiry,
        });
        taken += 1;
    }
}

/// Subscriptions of watched holds being confirmed, and checks of watched holds.
type WatchEvents = FuturesUnordered<BoxFuture<'static, WatchEvent>>;

/// What became of a watched hold's subscription or check.
enum WatchEvent {
    Subscribed(u64, crate::error::Result<Subscription>),
    /// Whether the hold's field was still in the lock (`true` also when the check failed: the
    /// renewals decide then).
    Checked(HoldKey, u64, bool),
}

/// Checks with `HEXISTS` whether the watched hold `generation` still holds its lock.
fn check(redis: Arc<Redis>, key: HoldKey, generation: u64) -> BoxFuture<'static, WatchEvent> {
    Box::pin(async move {
        let held: Result<i64, _> = redis.query("HEXISTS", &key.name, &[&key.field]).await;
        let held = !matches!(held, Ok(0));
        WatchEvent::Checked(key, generation, held)
    })
}

/// An entry due for renewal: its key, hash, generation and expiry tick.
struct Due {
    key: HoldKey,
    hash: u64,
    generation: u64,
    expiry: u64,
}

/// The cluster hash slot of a hold's lock.
fn slot_of(key: &HoldKey) -> u16 {
    fred::util::redis_keyslot(key.name.as_bytes())
}

/// Groups `due` per hash slot (in a cluster; one group otherwise) and cuts each group into
/// batches of at most `batch_size`.
fn split_into_batches(due: Vec<Due>, batch_size: usize, clustered: bool) -> Vec<Vec<Due>> {
    let mut groups: HashMap<u16, Vec<Due>> = HashMap::default();
    for hold in due {
        let slot = if clustered { slot_of(&hold.key) } else { 0 };
        groups.entry(slot).or_default().push(hold);
    }
    // Each batch in a vector of its own size: splitting one vector in place (`split_off`)
    // would leave every batch holding the capacity of all the holds after it, which is
    // quadratic in the holds due at once (gigabytes for 100,000).
    let mut batches = Vec::new();
    for (_, group) in groups {
        let mut holds = group.into_iter().peekable();
        while holds.peek().is_some() {
            batches.push(holds.by_ref().take(batch_size.max(1)).collect());
        }
    }
    batches
}

/// One batched renewal script call, given up at `lease_end` (the earliest lease end of the
/// batch): a reply after that could not keep the lease proven anyway.
async fn renew(
    redis: Arc<Redis>,
    script: &'static Script,
    watchdog_ms: u64,
    batch: Vec<Due>,
    lease_end: Option<Instant>,
) -> BatchResult {
    let sent = Instant::now();
    let keys: Vec<&str> = batch.iter().map(|due| &*due.key.name).collect();
    let timeout = watchdog_ms.to_string();
    let mut args: Vec<&str> = Vec::with_capacity(batch.len() + 1);
    args.push(&timeout);
    args.extend(batch.iter().map(|due| &*due.key.field));
    let run = script.run(&redis.pool, &redis.settings.write_options, &keys, &args);
    // While the command connections are down (a restart, fred's reconnect backing off), a
    // renewal fails at once (fail fast) and its retry comes half an interval later, however
    // soon they are back: with a short lease, the retry that finally goes out may be the last
    // one before the lease end, with a fraction of a second left for its reply. Wait for them
    // instead, within the lease end below, so that the renewal goes out as they reconnect.
    let call = async {
        use fred::interfaces::ClientLike;
        if lease_end.is_some() && !redis.pool.clients().iter().all(|c| c.is_connected()) {
            let _ = redis.pool.wait_for_connect().await;
        }
        run.await
    };
    let reply = match lease_end {
        Some(deadline) => tokio::time::timeout_at(deadline, call).await.ok(),
        None => Some(call.await),
    };
    let outcomes = match reply {
        Some(Ok(fred::prelude::Value::Array(flags))) if flags.len() == batch.len() => {
            tracing::debug!(locks = batch.len(), "renewed watchdog leases");
            let renewed = flags.iter().filter(|flag| flag.as_i64() == Some(1)).count() as u64;
            metrics::renewals(metrics::Renewal::Renewed, renewed);
            metrics::renewals(metrics::Renewal::Lost, flags.len() as u64 - renewed);
            let outcome = |flag: fred::prelude::Value| match flag.as_i64() {
                Some(1) => Outcome::Renewed,
                _ => Outcome::NotHeld,
            };
            let flags = flags.into_iter().map(outcome);
            batch
                .into_iter()
                .zip(flags)
                .map(|(due, outcome)| (due.hash, due.generation, outcome))
                .collect()
        }
        other => {
            match other {
                Some(Err(err)) => {
                    tracing::warn!(locks = batch.len(), error = %err, "lease renewal failed; retrying")
                }
                Some(Ok(reply)) => {
                    tracing::warn!(reply = %Reply(&reply), "unexpected reply to lease renewal; retrying")
                }
                None => tracing::warn!(
                    locks = batch.len(),
                    "lease renewal not answered before the lease would end"
                ),
            }
            metrics::renewals(metrics::Renewal::Failed, batch.len() as u64);
            batch
                .into_iter()
                .map(|due| (due.hash, due.generation, Outcome::Failed))
                .collect()
        }
    };
    (sent, outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(count: u64) -> Vec<Due> {
        (0..count)
            .map(|i| {
                let key = HoldKey {
                    name: format!("lock:{i}").into(),
                    field: "client:1".into(),
                };
                Due {
                    key,
                    hash: i,
                    generation: i,
                    expiry: u64::MAX,
                }
            })
            .collect()
    }

    /// The lease table's slot is a large share of a held lock's memory (docs/benchmarks.md):
    /// key, counts, flags, the key's end and the watchdog's tick and expiry in 72 bytes. It was
    /// 88 bytes in the table and 56 in the watchdog's own map before they were one.
    #[test]
    fn a_lease_table_slot_takes_72_bytes() {
        let size = std::mem::size_of::<Slot>();
        assert!(size <= 72, "Slot {size} B");
    }

    /// The watchdog's buckets find entries by hash and tick, and most entries share a tick
    /// (locks taken together are renewed together): each hash must find its own entry, not
    /// another one due then whose hash shares the table's 7-bit tag. (Without the full hash's
    /// comparison, the `held` benchmark lost 5 of 100,000 locks that were never renewed.)
    #[test]
    fn a_bucket_finds_its_own_entry_among_many_due_at_the_same_tick() {
        let mut holds = Holds {
            slots: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            tokens: HashMap::default(),
        };
        let keys: Vec<HoldKey> = (0..20_000)
            .map(|i| HoldKey {
                name: format!("lock:{i}").into(),
                field: "client:1".into(),
            })
            .collect();
        for (generation, key) in (1..).zip(&keys) {
            let entry = HoldEntry {
                holds: 1,
                watchdog_holds: 1,
                lost: false,
                mixed_ttl: false,
                watched: false,
                lease_end: Stamp(0),
                last_lease_ms: 30_000,
                generation,
                tick: 7,
                expiry: 100,
            };
            holds.insert(holds.hash(key), key.clone(), entry);
        }
        for key in &keys {
            let hash = holds.hash(key);
            let found = holds.find_mut(hash, |entry| entry.tick == 7);
            assert_eq!(found.map(|slot| &slot.key), Some(key));
        }
    }

    #[test]
    fn batches_are_full_and_hold_only_their_own_capacity() {
        let batches = split_into_batches(due(1_050), 100, false);
        assert_eq!(batches.len(), 11);
        assert!(batches[..10].iter().all(|batch| batch.len() == 100));
        assert_eq!(batches[10].len(), 50);
        // A batch cut from a shared vector would keep the capacity of everything after it.
        assert!(batches.iter().all(|batch| batch.capacity() <= 100));
        let mut generations: Vec<u64> = batches.iter().flatten().map(|d| d.generation).collect();
        generations.sort_unstable();
        assert_eq!(
            generations,
            (0..1_050).collect::<Vec<_>>(),
            "every hold once"
        );
    }

    #[test]
    fn in_a_cluster_a_batch_keeps_to_one_hash_slot() {
        for batch in split_into_batches(due(500), 100, true) {
            let slot = slot_of(&batch[0].key);
            assert!(batch.iter().all(|due| slot_of(&due.key) == slot));
        }
    }
}
