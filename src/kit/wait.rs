//! The wait loop shared by every pub/sub lock (protocol §1.6), with local hand-off.
//!
//! 0. If other owners of this client are in line for the lock already (see `handoff.rs`) and
//!    the client holds a confirmed subscription of its channel, take a share of it and a place
//!    at the back of the line *without* trying, and go to step 4: a task that releases the lock
//!    and asks again at once must queue behind the local waiters, also behind one whose own
//!    attempt is still out. (Not for a lone `try_lock`, nor when the owner holds the lock
//!    already: a re-entry must not wait for itself.)
//! 1. Try once. Acquired: done. (If this client already holds a confirmed subscription of the
//!    lock's channel, a share of it is taken *before* this try, so step 3 is not needed.)
//!    Refused: take a place in the local line, marked as retrying (no hand-off reaches it while
//!    an attempt of its own may still run).
//! 2. Take a share of the lock channel's subscription and wait for the server's confirmation.
//! 3. Try again: a release between step 1 and the subscription is caught here, so no wake-up is
//!    ever lost.
//! 4. Mark the place as waiting and park until an unlock message, a hand-off from a local
//!    releaser, or min(the lock's TTL, the time left) (after step 0, whose waiter knows no TTL:
//!    the watchdog timeout). A hand-off means the lock is already ours; anything else means: try
//!    again (step 3), keeping the place in the queue.
//!
//! Before any attempt (steps 1 and 3), an acquire waits while this client gives way on the lock
//! to other clients' waiters after a release of its own (`give_way.rs`).
//!
//! There is no fixed-interval polling: every retry follows a message, a TTL, or a reconnect.

use arcstr::ArcStr;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::handoff::{Handoffs, Receives, Turn};
use super::janitor::Janitor;
use crate::config::WhenUnavailable;
use crate::error::{Error, Result};
use crate::kit::ClientInner;
use crate::lease::watchdog::HoldKey;
use crate::metrics;
use crate::transport::pubsub::{Parked, PubSub, Unanswered, WakeRule, Wakes};

/// What the wait loop needs of its client: its subscriptions, its local lines and janitor,
/// whether it holds a field already, and two settings. [`ClientInner`]; in the model checks
/// (`crate::model`), a client on an in-memory server, so that they run this very loop.
pub(crate) trait Waiting {
    fn pubsub(&self) -> &PubSub;
    fn handoffs(&self) -> &Arc<Handoffs>;
    fn janitor(&self) -> &Janitor;
    /// Whether the client has a live hold of `key` (a re-entry must not wait for itself).
    fn holds(&self, key: &HoldKey) -> bool;
    fn watchdog_timeout(&self) -> Duration;
    fn when_unavailable(&self) -> WhenUnavailable;
    /// The error to report for `err` (see [`ClientInner::explain`]).
    fn explain(&self, err: Error) -> Error;
}

impl Waiting for ClientInner {
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
        self.leases.holds(key)
    }
    fn watchdog_timeout(&self) -> Duration {
        self.config.watchdog_timeout
    }
    fn when_unavailable(&self) -> WhenUnavailable {
        self.config.when_unavailable
    }
    fn explain(&self, err: Error) -> Error {
        ClientInner::explain(self, err)
    }
}

/// What ended an acquire's wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WokenBy {
    /// The lock was free (or already held by the owner) without parking.
    Immediate,
    /// An unlock message (or a reconnect) woke the waiter and its retry succeeded.
    Message,
    /// The wait bound by the lock's TTL ran out and the retry succeeded (the holder's lease
    /// expired, or its unlock message was lost).
    Ttl,
    /// A back-off pause ended and its retry succeeded: a waiter that polls (a spin lock's, and
    /// a token lock's where the server sends no keyspace events: nothing wakes them).
    BackOff,
    /// A keyspace notification of the lock's key (its `del` or `expired` event) woke the
    /// waiter and its retry succeeded: a token lock's waiter, where the server sends them
    /// ([`KeyspaceEvents`](crate::KeyspaceEvents)).
    Keyspace,
}

/// How an acquisition went: how long it waited and what woke it.
///
/// ```no_run
/// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
/// let guard = lock.lock().await?;
/// println!("waited {:?}, woken by {:?}", guard.acquisition().waited, guard.acquisition().woken_by);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Acquisition {
    /// Time from the call to the successful attempt's reply.
    pub waited: Duration,
    /// What ended the last wait before the successful attempt.
    pub woken_by: WokenBy,
    /// Acquire script runs, including the successful one.
    pub attempts: u32,
}

impl Acquisition {
    /// An acquisition's stand-in until the wait loop records the real one: no wait, `attempts`.
    pub(crate) fn immediate(attempts: u32) -> Acquisition {
        Acquisition {
            waited: Duration::ZERO,
            woken_by: WokenBy::Immediate,
            attempts,
        }
    }

    /// An acquisition that started at `start` and succeeded just now, as `how`: counted in the
    /// metrics and logged.
    pub(crate) fn record(
        start: Instant,
        woken_by: WokenBy,
        attempts: u32,
        how: metrics::How,
    ) -> Acquisition {
        let acquisition = Acquisition {
            waited: start.elapsed(),
            woken_by,
            attempts,
        };
        metrics::acquired(how, acquisition.waited);
        tracing::debug!(
            waited_ms = acquisition.waited.as_millis() as u64,
            ?woken_by,
            attempts,
            "acquired"
        );
        acquisition
    }
}

impl metrics::How {
    /// How an acquisition by the owner's own attempt went, for the metrics.
    pub(crate) fn of(woken_by: WokenBy, reentered: bool) -> metrics::How {
        match woken_by {
            _ if reentered => metrics::How::Reentrant,
            WokenBy::Immediate => metrics::How::Immediate,
            _ => metrics::How::AfterWait,
        }
    }
}

/// What a bounded wait (`wait`) that ran out reports: the lock is busy only if Redis said so
/// (`answered`); while Redis was unreachable or silent, the `outage` or a timeout instead.
pub(crate) fn out_of_time<T>(
    client: &(impl Waiting + ?Sized),
    wait: Option<Duration>,
    answered: bool,
    outage: Option<Box<Error>>,
) -> Result<Option<T>> {
    match outage {
        Some(err) => Err(client.explain(*err)),
        None if !answered => Err(Error::Timeout(wait.unwrap_or_default())),
        None => Ok(None),
    }
}

/// What the wait loop asks of an acquisition before it hands it out: whether its lease already
/// ran out. An acquire's reply (or a local hand-off) may be read only after the lease it took
/// has ended: this process was frozen, or the reply was that slow. The server may have let
/// another owner in meanwhile, so such a hold proves nothing, and handing it out would let the
/// caller into a section another owner may be in already. The loop drops it instead (which
/// gives it up: see `LeaseTable::dropped`) and goes on waiting within its bound.
pub(crate) trait Lapse {
    /// What a local hand-off of such an acquisition writes (see `handoff.rs`): a constant,
    /// so that a parked waiter's future keeps no copy of it.
    const RECEIVES: Receives = Receives::Hold;

    /// Whether the lease this acquisition took is already past its proven end.
    fn lapsed(&self) -> bool;
}

/// The latch's wait takes nothing that could lapse.
impl Lapse for () {
    fn lapsed(&self) -> bool {
        false
    }
}

/// The outcome of one acquire attempt.
pub(crate) enum TryOutcome<T> {
    /// Acquired; `T` is the new hold, and the flag tells whether it re-entered a hold the
    /// owner had (for the metrics).
    Acquired(T, bool),
    /// Held by someone else; the lock's PTTL in ms (−1: no TTL, −2: gone meanwhile).
    Busy(i64),
}

/// Who waits: what a local releaser needs to hand the lock over.
pub(crate) struct Waiter<'a> {
    pub(crate) name: &'a ArcStr,
    /// Who waits, for a primitive whose holds are fields of a hash: `None` for one whose
    /// waiters hold nothing by name (a semaphore's permits, a latch), which never line up for
    /// a hand-off and have no hold to re-enter.
    pub(crate) holder: Option<Holder<'a>>,
    /// How many of the channel's waiters a message lets retry ([`lock_wake`] for the reentrant
    /// lock's family).
    pub(crate) wake: WakeRule,
    /// The channel whose messages wake this waiter, from the lock's name and the waiter's field
    /// ([`lock_channel`] for the reentrant lock's family; the fair lock's waiters each have
    /// their own). Derived on demand: most acquires never need it, and keeping it per lock
    /// would cost memory per held lock.
    pub(crate) channel: WaitChannel,
}

/// A waiting holder: its hash field and the lease it asks for (what a local releaser needs to
/// hand it the lock); for a semaphore's waiter, the semaphore's name and the permits it asks
/// for.
pub(crate) struct Holder<'a> {
    pub(crate) field: &'a ArcStr,
    pub(crate) lease_ms: u64,
    /// Its wait time in the lock's queue in Redis (the fair lock's; 0 for others).
    pub(crate) wait_ms: u64,
}

/// Where a waiter listens (see [`Waiter::channel`]).
#[derive(Clone, Copy)]
pub(crate) enum WaitChannel {
    /// The channel derived from the lock's name and the waiter's field.
    Of(fn(&str, &str) -> String),
    /// The lock key's keyspace channel in this database (`transport::keyspace`): the token
    /// lock's, whose peers publish nothing.
    Keyspace(u8),
}

impl Waiter<'_> {
    fn channel(&self) -> ArcStr {
        let field = self.holder.as_ref().map_or("", |holder| holder.field);
        match self.channel {
            WaitChannel::Of(channel) => channel(self.name, field).into(),
            WaitChannel::Keyspace(db) => crate::transport::keyspace::channel(db, self.name).into(),
        }
    }

    /// Whether the client holds the lock this waiter waits for under the waiter's own field (a
    /// re-entry must not wait for itself, nor give way to others).
    fn holds(&self, client: &(impl Waiting + ?Sized)) -> bool {
        self.holder.as_ref().is_some_and(|holder| {
            client.holds(&HoldKey {
                name: ArcStr::clone(self.name),
                field: ArcStr::clone(holder.field),
            })
        })
    }
}

/// How a lock channel's message wakes its waiters, as Java's `LockPubSub` reads it (protocol
/// §1.4): `0` (a release) one waiter, `1` (the write side's release of a read-write lock, which
/// readers and writers wait for alike) every one, anything else none. The rule of every lock of
/// the reentrant lock's family, the fair lock's per-waiter channels and the read-write lock's
/// channel.
pub(crate) fn lock_wake(message: i64) -> Wakes {
    match message {
        0 => Wakes::Up(1),
        1 => Wakes::Everyone,
        _ => Wakes::Nobody,
    }
}

/// The `adopt` of a waiter that takes no local hand-off (see [`acquire_with_wait`]).
pub(crate) fn no_hand_off<T>() -> Option<fn(Instant, u64) -> T> {
    None
}

/// The unlock channel of the reentrant lock's family (`redisson_lock__channel:` + T(name)),
/// shared by every waiter: [`Waiter::channel`] of the reentrant, fenced, spin and non-reentrant
/// locks.
pub(crate) fn lock_channel(name: &str, _field: &str) -> String {
    crate::name::lock_channel(name)
}

/// Runs `attempt` until it acquires, a local releaser hands the lock over (then `adopt` builds
/// the hold from the instant the hand-off was sent and the fencing token it took), or `wait`
/// (None: no limit) runs out (`Ok(None)`). Counts the outcome in the metrics.
///
/// Without `adopt`, no releaser hands the lock to this waiter (`handoff.rs`): the waiter never
/// lines up, and every acquisition is its own attempt's. A primitive whose acquire does more
/// than a release can do for it (a read hold's timeout key, a permit's id and expiry) waits
/// so.
///
/// # Cancel safety
/// Cancel safe as long as `attempt` is: the subscription share and the queue place are released
/// on drop, and a hand-off that arrives for a dropped waiter is released again.
///
/// `client` is any [`Waiting`] client: a [`ClientInner`], or the model checks' client.
pub(crate) fn acquire_with_wait<'a, T, F, Fut, C, A>(
    client: &'a C,
    waiter: &'a Waiter<'a>,
    wait: Option<Duration>,
    attempt: F,
    adopt: Option<A>,
) -> impl Future<Output = Result<Option<(T, Acquisition)>>> + 'a
where
    T: Lapse + 'a,
    C: Waiting + ?Sized,
    F: FnMut() -> Fut + 'a,
    Fut: Future<Output = Result<TryOutcome<T>>> + 'a,
    A: FnMut(Instant, u64) -> T + 'a,
{
    // The bound starts now: the caller awaits this future at once.
    let limit = WaitBound::new(wait);
    // A combinator, not an `async` wrapper, which would keep the loop's future twice (as
    // captured and as awaited).
    let waited = wait_loop(client, waiter, limit, attempt, adopt);
    futures::FutureExt::inspect(waited, count_failure)
}

/// Counts an acquire that ended without a hold in the metrics: acquisitions are counted where
/// the loop knows how they happened, the other ends here.
pub(crate) fn count_failure<T>(outcome: &Result<Option<T>>) {
    match outcome {
        Ok(Some(_)) => {}
        Ok(None) => metrics::not_acquired(metrics::Failure::Busy),
        Err(_) => metrics::not_acquired(metrics::Failure::Error),
    }
}

/// When one wait started and when it ends (`None`: never).
#[derive(Clone, Copy)]
pub(super) struct WaitBound {
    pub(super) start: Instant,
    pub(super) deadline: Option<Instant>,
}

impl WaitBound {
    /// A wait of at most `wait` from now; one too large for the clock is no bound at all.
    pub(super) fn new(wait: Option<Duration>) -> WaitBound {
        let start = Instant::now();
        WaitBound {
            start,
            deadline: wait.and_then(|wait| start.checked_add(wait)),
        }
    }

    /// The wait this bound was made for (`None`: unbounded).
    pub(super) fn wait(&self) -> Option<Duration> {
        (self.deadline).map(|deadline| deadline.saturating_duration_since(self.start))
    }

    /// The time left, `None` when unbounded.
    pub(super) fn left(&self) -> Option<Duration> {
        (self.deadline).map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }
}

/// [`acquire_with_wait`]'s loop.
///
/// A plain fn around an `async move` block rather than an `async fn`: an `async fn` keeps its
/// arguments twice in its future (as passed and as moved into its body), and this future is
/// what every parked waiter costs.
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn wait_loop<'a, T, F, Fut, C, A>(
    client: &'a C,
    waiter: &'a Waiter<'a>,
    limit: WaitBound,
    mut attempt: F,
    mut adopt: Option<A>,
) -> impl Future<Output = Result<Option<(T, Acquisition)>>> + 'a
where
    T: Lapse + 'a,
    C: Waiting + ?Sized,
    F: FnMut() -> Fut + 'a,
    Fut: Future<Output = Result<TryOutcome<T>>> + 'a,
    A: FnMut(Instant, u64) -> T + 'a,
{
    async move {
        // Plain calls below rather than closures over these locals: each closure would keep its
        // captures in every parked waiter's future.
        // Waiting already (a live subscription): join it first, so that no retry is needed after
        // the first attempt. Only when nobody waits does the uncontended path stay subscription-free.
        let mut subscription = if client.pubsub().is_idle() {
            None // no subscription at all: skip deriving the channel
        } else {
            client.pubsub().join_active(&waiter.channel(), waiter.wake)
        };
        // Without a place, no releaser hands this waiter the lock, and step 0 never applies.
        let hands_off = adopt.is_some();
        let mut place = None;
        // Step 0 (see the module docs): behind this client's other waiters, without a first attempt
        // (not for waiters that must try first: `Receives::tries_first`).
        let mut in_line_first = false;
        if subscription.is_some() && !T::RECEIVES.tries_first() {
            let may_wait = limit.left().is_none_or(|left| !left.is_zero());
            if may_wait && client.handoffs().contended(waiter.name) && !waiter.holds(client) {
                place = join_line::<T>(client, waiter, hands_off, false);
                in_line_first = place.is_some();
            }
        }
        // A fair lock's waiter listens on a channel of its own, which no earlier waiter left
        // subscribed, and must try first. When this client's other owners are in line already
        // (the lock is busy), it subscribes before its first attempt, which then needs no retry
        // after subscribing (step 3): one script run less per acquisition. A failure to
        // subscribe here leaves the usual order to deal with it.
        if subscription.is_none()
            && T::RECEIVES.own_channel()
            && hands_off
            && limit.left().is_none_or(|left| !left.is_zero())
            && client.handoffs().contended(waiter.name)
        {
            // Boxed, as below: the subscribe future is large and runs once per acquire at most.
            subscription = Box::pin(subscribe_bounded(client, waiter, limit.left()))
                .await
                .ok();
        }
        let mut woken_by = WokenBy::Immediate;
        // A wake-up taken from the channel that no attempt of this waiter has answered yet: passed
        // on to the next waiter if this one goes away first (see `Subscription::unanswered`).
        let mut unanswered: Option<Unanswered> = None;
        let mut attempts = 0u32;
        let mut backoff = Duration::from_millis(50);
        // What the wait reports when its bound runs out: the lock is busy only if Redis said so.
        // While Redis is unreachable (or silent), the caller gets that error instead.
        let mut answered = false;
        // Boxed: rare, and inline it would size every parked waiter's future.
        let mut outage: Option<Box<Error>> = None;
        // Acquisitions in a row that came too late to be held (see `Lapse`).
        let mut lapses = 0u32;
        loop {
            let untried = std::mem::take(&mut in_line_first);
            // In a block, and with nothing awaited while it is alive: the attempt's outcome (a
            // guard, an error) would otherwise keep its storage in every parked waiter's future.
            let step = {
                let outcome = if untried {
                    // No TTL of its own: wait until the lock's expiry as the waiters ahead learned it
                    // (else the watchdog timeout). A hand-off or an unlock message normally comes
                    // first; the bound covers a holder that vanished, or a wake-up taken by a waiter
                    // that then went away.
                    let known = place.as_ref().and_then(|place| place.known_expiry());
                    let ttl = match known {
                        Some(at) => at.saturating_duration_since(Instant::now()),
                        None => client.watchdog_timeout(),
                    };
                    Some(Ok(TryOutcome::Busy(
                        i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
                    )))
                } else {
                    if must_give_way(client, waiter, limit.deadline) {
                        // Boxed, as the attempt: rare, and its future would size every parked waiter's.
                        let give_way = &client.handoffs().give_way;
                        Box::pin(give_way.wait_turn(waiter.name, limit.deadline)).await;
                    }
                    attempts += 1;
                    if let Some(wake) = unanswered.take() {
                        wake.answered();
                    }
                    // Boxed: an attempt's future (the script call, its settling) is the loop's largest
                    // state, and inline it would size every parked waiter's future too.
                    Box::pin(attempt_within(limit.left(), attempts == 1, &mut attempt)).await
                };
                let outcome = match outcome {
                    Some(outcome) => outcome,
                    None => {
                        tracing::debug!(attempts, "not acquired within the wait bound");
                        return out_of_time(client, limit.wait(), answered, outage);
                    }
                };
                match outcome {
                    Ok(TryOutcome::Acquired(hold, _)) if hold.lapsed() => {
                        Step::Lapsed(lapse(hold, &mut lapses, backoff, limit.left()))
                    }
                    Ok(TryOutcome::Acquired(hold, reentered)) => {
                        if let Some(place) = place.take() {
                            super::handoff::Place::done(place);
                        }
                        let how = metrics::How::of(woken_by, reentered);
                        return Ok(Some((
                            hold,
                            Acquisition::record(limit.start, woken_by, attempts, how),
                        )));
                    }
                    Ok(TryOutcome::Busy(ttl_ms)) => Step::Busy(ttl_ms),
                    Err(err)
                        if err.is_transient()
                            && client.when_unavailable() == WhenUnavailable::KeepWaiting =>
                    {
                        // Redis is unreachable: wait for it within the bound, backing off.
                        let pause = match limit.left() {
                            Some(left) if left.is_zero() => return Err(client.explain(err)),
                            Some(left) => backoff.min(left),
                            None => backoff,
                        };
                        tracing::debug!(error = %err, ?pause, "redis unavailable; waiting for it");
                        outage = Some(Box::new(err));
                        Step::Pause(pause)
                    }
                    Err(err) => return Err(client.explain(err)),
                }
            };
            let ttl_ms = match step {
                Step::Busy(ttl_ms) => {
                    answered = true;
                    outage = None;
                    ttl_ms
                }
                Step::Lapsed(pause) => {
                    if let Some(pause) = pause {
                        tokio::time::sleep(pause).await;
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                    answered = true;
                    outage = None;
                    continue;
                }
                Step::Pause(pause) => {
                    tokio::time::sleep(pause).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    subscription = None; // re-subscribe once Redis is back
                    continue;
                }
            };
            backoff = Duration::from_millis(50);
            lapses = 0;
            if limit.left().is_some_and(|left| left.is_zero()) {
                tracing::debug!(attempts, "not acquired within the wait bound");
                return Ok(None);
            }
            // In line from the first refusal on, marked as retrying (the retry after subscribing is
            // still to come), so that this client's other owners queue behind this waiter from now.
            if place.is_none() {
                place = join_line::<T>(client, waiter, hands_off, true);
            }
            let Some(share) = subscription.as_ref() else {
                // Subscribe (bounded by the time left), then retry at once (step 3). Boxed, and
                // its reply read in full before anything else is awaited: the subscribe future is
                // large and runs once per acquire at most, and inline its locals (the channel,
                // the reply) would stay in every parked waiter's future.
                let failed = match Box::pin(subscribe_bounded(client, waiter, limit.left())).await {
                    Ok(share) => {
                        subscription = Some(share);
                        continue;
                    }
                    Err(None) => return out_of_time(client, limit.wait(), answered, outage),
                    Err(Some(err)) => err,
                };
                if !failed.is_transient()
                    || client.when_unavailable() != WhenUnavailable::KeepWaiting
                {
                    return Err(client.explain(failed));
                }
                outage = Some(Box::new(failed));
                tokio::time::sleep(limit.left().map_or(backoff, |left| left.min(backoff))).await;
                continue;
            };
            // A negative TTL: the lock has no expiry (wait for a message only) or just vanished.
            let mut bound = match (ttl_ms, limit.left()) {
                (-2 | 0, _) => continue,
                (ttl, left) if ttl > 0 => {
                    let ttl = Duration::from_millis(ttl as u64);
                    Some(left.map_or(ttl, |left| left.min(ttl)))
                }
                (_, left) => left,
            };
            // Step 4: in line for a local hand-off, keeping the place across retries. Only now, with
            // no attempt of ours running, may a releaser hand the lock to this place.
            if let Some(place) = &place {
                if !untried && ttl_ms > 0 {
                    // A lease too long for the clock is no expiry worth noting.
                    if let Some(at) =
                        Instant::now().checked_add(Duration::from_millis(ttl_ms as u64))
                    {
                        place.note_expiry(at);
                    }
                }
                place.requeue();
                // With no bound of the caller's, the TTL bound is the line's one timer: no timer
                // of its own in this waiter's future (see `Place::wake_at`).
                if limit.deadline.is_none() {
                    if let Some(at) = bound.and_then(|bound| Instant::now().checked_add(bound)) {
                        place.wake_at(at);
                        bound = None;
                    }
                }
            }
            let handed = place.as_ref().map(super::handoff::Place::notified);
            let parked = share.park(bound, handed).await;
            // Read (and cleared) on every wake-up, so that it tells only of this one.
            let expired = place
                .as_ref()
                .is_some_and(super::handoff::Place::take_expired);
            woken_by = match parked {
                Parked::Message => {
                    unanswered = Some(share.unanswered());
                    match waiter.channel {
                        WaitChannel::Keyspace(_) => WokenBy::Keyspace,
                        WaitChannel::Of(_) => WokenBy::Message,
                    }
                }
                Parked::Handed if expired => WokenBy::Ttl,
                Parked::Handed => WokenBy::Message,
                Parked::Timeout => WokenBy::Ttl,
            };
            if let (Some(current), Some(adopt)) = (&place, adopt.as_mut()) {
                if let Turn::Owned(sent_at, token) = current.turn().await {
                    if let Some(wake) = unanswered.take() {
                        wake.answered(); // the lock is this waiter's: nobody else can take it
                    }
                    if let Some(place) = place.take() {
                        place.done();
                    }
                    // In a block that ends before the pause: a hold alive across an await would
                    // keep its storage in every parked waiter's future.
                    let pause = {
                        let hold = adopt(sent_at, token);
                        if !hold.lapsed() {
                            let acquisition = Acquisition::record(
                                limit.start,
                                WokenBy::Message,
                                attempts,
                                metrics::How::Handoff,
                            );
                            return Ok(Some((hold, acquisition)));
                        }
                        lapse(hold, &mut lapses, backoff, limit.left())
                    };
                    if let Some(pause) = pause {
                        tokio::time::sleep(pause).await;
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                    answered = true;
                    continue;
                }
            }
        }
    }
}

/// A share of `waiter`'s channel, confirmed within `left` (`None`: no bound); `Err(None)` when
/// the bound ran out first, else the subscribe's error.
async fn subscribe_bounded(
    client: &(impl Waiting + ?Sized),
    waiter: &Waiter<'_>,
    left: Option<Duration>,
) -> std::result::Result<crate::transport::pubsub::Subscription, Option<Error>> {
    let channel = waiter.channel();
    let subscribe = client.pubsub().subscribe(&channel, waiter.wake);
    let share = match left {
        Some(left) => tokio::time::timeout(left, subscribe)
            .await
            .map_err(|_| None)?,
        None => subscribe.await,
    };
    share.map_err(Some)
}

/// In line for a local hand-off of the lock `waiter` waits for (`retrying`: after a refusal),
/// receiving what a hand-off of a `T` writes;
/// `None` when this waiter takes no hand-off (`hands_off` false, or no holder) or the client
/// hands off nothing.
fn join_line<T: Lapse>(
    client: &(impl Waiting + ?Sized),
    waiter: &Waiter<'_>,
    hands_off: bool,
    retrying: bool,
) -> Option<super::handoff::Place> {
    let holder = waiter.holder.as_ref().filter(|_| hands_off)?;
    client.handoffs().join(
        waiter.name,
        holder,
        const { &T::RECEIVES },
        retrying,
        client.janitor(),
    )
}

/// What the wait loop does after an attempt that did not end the acquire: park (the lock is busy
/// for this many ms), retry after giving up a lapsed acquisition (at once, or after the pause
/// [`lapse`] asks for), or pause while Redis is unreachable. Small, so that no attempt's outcome
/// lives on in a parked waiter's future.
enum Step {
    Busy(i64),
    Lapsed(Option<Duration>),
    Pause(Duration),
}

/// Gives up an acquisition whose lease ran out before it could be handed out (see [`Lapse`]):
/// dropping it puts its field in doubt, and the reconciler takes back whatever the server kept
/// of it (the field's next acquire waits for that). The first in a row is retried at once
/// (a frozen process is the usual cause, and the lock may be free); later ones in a row back
/// off (the pause returned, bounded by the time `left`), so that a lease too short for the
/// round trip does not spin.
fn lapse<T>(
    hold: T,
    lapses: &mut u32,
    backoff: Duration,
    left: Option<Duration>,
) -> Option<Duration> {
    drop(hold);
    *lapses += 1;
    tracing::debug!(
        lapses,
        "acquired only after the lease ran out; not handed out"
    );
    (*lapses > 1).then(|| left.map_or(backoff, |left| left.min(backoff)))
}

/// Whether an attempt must first wait while this client gives way on the lock to other
/// clients' waiters after a release of its own (see `give_way.rs`), at most until `deadline`.
/// Not for a lone try (no time to wait), nor for a re-entry by a holder.
fn must_give_way(
    client: &(impl Waiting + ?Sized),
    waiter: &Waiter<'_>,
    deadline: Option<Instant>,
) -> bool {
    !(client.handoffs().give_way.is_idle()
        || deadline.is_some_and(|deadline| deadline <= Instant::now())
        || waiter.holds(client))
}

/// Runs one attempt within `left` of the wait bound (`None`: no bound); `None` when the bound ran
/// out first, or had already. A slow server or a connection being re-established counts against
/// the bound; a `first` attempt with no time left at all (a lone try, `try_lock`) is bounded by
/// the response timeout only.
pub(super) async fn attempt_within<T, F, Fut>(
    left: Option<Duration>,
    first: bool,
    attempt: &mut F,
) -> Option<Result<TryOutcome<T>>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<TryOutcome<T>>>,
{
    match left {
        Some(left) if !left.is_zero() => tokio::time::timeout(left, attempt()).await.ok(),
        Some(_) if !first => None,
        _ => Some(attempt().await),
    }
}

#[cfg(test)]
mod tests {
    use super::{lock_wake, Wakes};

    #[test]
    fn a_lock_channel_wakes_as_javas_lock_pub_sub() {
        assert_eq!(lock_wake(0), Wakes::Up(1));
        assert_eq!(lock_wake(1), Wakes::Everyone);
        assert_eq!(lock_wake(7), Wakes::Nobody);
    }
}
