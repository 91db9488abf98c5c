//! Giving way: after a release of this client freed a lock and its unlock message reached
//! waiters of other clients, this client's next attempts on the lock hold back for a moment, so
//! that one of those waiters takes it.
//!
//! Why: a freed lock goes to whichever attempt reaches Redis first. This client's own waiters
//! receive the same unlock message as other clients' waiters and answer it as fast, and a race
//! with a systematic edge goes the same way almost every time: in a test where four tasks of one
//! client kept a lock busy (a plain release every fifth acquisition, the rest local hand-offs),
//! a waiter of another client waited out a median of 20–200 of their acquisitions per lock call,
//! and up to 3,060 (5.7 s). Redisson has the same race between its JVMs; a mixed fleet should
//! not lose it to us. (Since then, acquires that start behind local waiters queue without an
//! attempt, which took most of that edge away: in the same scenario, 30 calls a run on the
//! 2-core test machine, the other client waited out a median of 0–5 and at most 20–60
//! acquisitions without giving way (9 runs, with the pause or the whole of this module taken
//! out), and at most 9–13 with it (10 runs).)
//!
//! Limit: the pause is a bet on time, not a hand-over. A waiter of another client that takes
//! longer than the pause to answer the message (a starved CPU, a slow link) loses the race
//! again: with eight busy loops beside the same test the other client waited out up to 36
//! acquisitions, and once, beside the whole test suite, more than 50. Only a fair lock
//! serves waiters in a promised order.
//!
//! How: `lua/release.lua` replies to a full release with the number of subscribers its unlock
//! message reached. If that is more than this client's own subscription, the client gives way on
//! the lock until twice the release's round trip has passed (at least [`MIN_GIVE_WAY`], at most
//! [`MAX_GIVE_WAY`]): every attempt on the lock waits for that instant before it starts. A local
//! waiter can receive the unlock message before the releasing task has read the release's
//! reply; so while a plain release is in flight on a lock that has local waiters, their attempts
//! first wait for its outcome.
//!
//! Cost: when the other client does take the lock, none (this client's attempt would have lost
//! anyway). When it does not (its waiter gave up, or its subscription was about to end), the
//! lock stays free for the pause, once per plain release, and only while another client is
//! subscribed to the lock's channel. A single client never gives way to itself.

use arcstr::ArcStr;
use std::sync::Arc;
use std::time::Duration;

use foldhash::HashMap;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::transport::pubsub::PubSub;

/// The shortest pause: time for another client's woken waiter to retry where twice this
/// client's own round trip is less. In the hand-off test on the 2-core test machine, 1 ms and
/// 2 ms did equally well (the other client took the lock at the first or second plain release
/// after its call, in 6 runs of 30 each); 2 ms leaves room for a waiter in a busier process or
/// a JVM. The cost is paid only when no other client takes the lock.
pub(crate) const MIN_GIVE_WAY: Duration = Duration::from_millis(2);

/// The longest pause: a slow release (a slow link, a batch queued behind others) does not make
/// this client wait longer. Also the longest an attempt waits for a release in flight.
pub(crate) const MAX_GIVE_WAY: Duration = Duration::from_millis(100);

/// Locks remembered at once, above which stale entries are swept on insertion.
const SWEEP_ABOVE: usize = 64;

/// The per-client registry of locks this client gives way on.
pub(crate) struct GiveWay {
    locks: Mutex<HashMap<ArcStr, Arc<Courtesy>>>,
    /// Tells whether this client's own subscriber is among an unlock message's receivers.
    pubsub: PubSub,
}

/// One lock's state.
struct Courtesy {
    state: Mutex<State>,
    /// Signalled when a release in flight settles.
    settled: Notify,
}

#[derive(Default)]
struct State {
    /// Plain releases in flight whose outcome local waiters wait for.
    releasing: u32,
    /// Until when attempts give way.
    until: Option<Instant>,
}

impl State {
    fn stale(&self, now: Instant) -> bool {
        self.releasing == 0 && self.until.is_none_or(|until| until <= now)
    }
}

/// A plain release on its way: settle it with its reply's receiver count. Dropped unsettled (the
/// call failed or was dropped), it lets waiting attempts go.
pub(crate) struct PlainRelease<'a> {
    give_way: &'a GiveWay,
    name: ArcStr,
    /// The lock's unlock channel.
    channel: String,
    /// Registered as in flight (local waiters wait for the outcome).
    pending: Option<Arc<Courtesy>>,
    sent_at: Instant,
    /// Whether this client may have been subscribed to the lock's channel when the release was
    /// sent, and the subscriptions it had torn down by then: the unlock message is published
    /// somewhere between the send and the reply, and this client's own subscription may end
    /// (or begin and end) meanwhile. Counted as its own receiver whenever it may have been
    /// one, so that it never gives way to itself (found by the model checks, `crate::model`:
    /// a waiter's share that ended during the release made the message's one receiver look
    /// like another client's).
    subscribed_at_send: bool,
    teardowns_at_send: usize,
}

impl GiveWay {
    pub(crate) fn new(pubsub: PubSub) -> GiveWay {
        GiveWay {
            locks: Mutex::new(HashMap::default()),
            pubsub,
        }
    }

    /// Call before sending a release of `name` that will free the lock unless it is re-entered,
    /// announcing it on `channel`. `local_waiters`: whether this client has waiters of the
    /// lock, which could answer its unlock message before the reply is read (then their
    /// attempts wait for the outcome).
    pub(crate) fn releasing(
        &self,
        name: &ArcStr,
        channel: String,
        local_waiters: bool,
    ) -> PlainRelease<'_> {
        let pending = local_waiters.then(|| {
            let courtesy = self.entry(name);
            courtesy.state.lock().releasing += 1;
            courtesy
        });
        PlainRelease {
            give_way: self,
            name: ArcStr::clone(name),
            pending,
            sent_at: Instant::now(),
            subscribed_at_send: self.own_listeners(&channel) > 0,
            teardowns_at_send: self.pubsub.teardowns(),
            channel,
        }
    }

    /// Whether this client gives way on no lock at all: a cheap check on every attempt, which
    /// also drops the entries whose time has passed (else one lock given way on once, and never
    /// tried again, would keep every attempt on the slower path).
    pub(crate) fn is_idle(&self) -> bool {
        let mut locks = self.locks.lock();
        if locks.is_empty() {
            return true;
        }
        let now = Instant::now();
        locks.retain(|_, courtesy| !courtesy.state.lock().stale(now));
        locks.is_empty()
    }

    /// Waits while this client gives way on lock `name`, at most until `deadline`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub(crate) async fn wait_turn(&self, name: &str, deadline: Option<Instant>) {
        loop {
            let Some(courtesy) = self.locks.lock().get(name).cloned() else {
                return;
            };
            let settled = courtesy.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            let now = Instant::now();
            let wake_at = {
                let state = courtesy.state.lock();
                if state.releasing > 0 {
                    now + MAX_GIVE_WAY
                } else {
                    match state.until {
                        Some(until) if until > now => until,
                        _ => {
                            drop(state);
                            self.forget_if_stale(name, &courtesy);
                            return;
                        }
                    }
                }
            };
            let wake_at = deadline.map_or(wake_at, |deadline| deadline.min(wake_at));
            if wake_at <= now {
                return;
            }
            tokio::select! {
                () = settled.as_mut() => {}
                () = tokio::time::sleep_until(wake_at) => {
                    if courtesy.state.lock().releasing > 0 || Some(wake_at) == deadline {
                        return; // the release is slow, or the caller's time is up: try anyway
                    }
                }
            }
        }
    }

    /// Whether this client gives way on lock `name` now: a plain release of it in flight that
    /// local waiters wait for, or a pause after one (for
    /// [`Client::local_state`](crate::Client::local_state)).
    pub(crate) fn snapshot(&self, name: &str) -> bool {
        let now = Instant::now();
        self.locks
            .lock()
            .get(name)
            .is_some_and(|courtesy| !courtesy.state.lock().stale(now))
    }

    /// How many of this client's subscriptions a message on `channel` (a lock's unlock channel)
    /// would reach: 1 while this client may be subscribed to it, else 0.
    pub(crate) fn own_listeners(&self, channel: &str) -> u32 {
        u32::from(self.pubsub.may_receive(channel))
    }

    fn entry(&self, name: &ArcStr) -> Arc<Courtesy> {
        let mut locks = self.locks.lock();
        if locks.len() >= SWEEP_ABOVE {
            let now = Instant::now();
            locks.retain(|_, courtesy| !courtesy.state.lock().stale(now));
        }
        let courtesy = locks.entry(ArcStr::clone(name)).or_insert_with(|| {
            Arc::new(Courtesy {
                state: Mutex::new(State::default()),
                settled: Notify::new(),
            })
        });
        Arc::clone(courtesy)
    }

    fn forget_if_stale(&self, name: &str, courtesy: &Arc<Courtesy>) {
        let mut locks = self.locks.lock();
        if courtesy.state.lock().stale(Instant::now())
            && locks.get(name).is_some_and(|c| Arc::ptr_eq(c, courtesy))
        {
            locks.remove(name);
        }
    }
}

impl PlainRelease<'_> {
    /// Settles the release: its unlock message reached `receivers` subscribers (0 when it did
    /// not free the lock). If any of them is another client's, this client gives way.
    pub(crate) fn settle(mut self, receivers: u64) {
        self.finish(receivers, self.sent_at.elapsed());
    }

    fn finish(&mut self, receivers: u64, took: Duration) {
        let own = u64::from(
            self.subscribed_at_send
                || self.give_way.own_listeners(&self.channel) > 0
                || self.give_way.pubsub.teardowns() != self.teardowns_at_send,
        );
        let others = receivers > 0 && receivers > own;
        let courtesy = match (others, self.pending.take()) {
            (false, None) => return,
            (true, None) => self.give_way.entry(&self.name),
            (_, Some(courtesy)) => {
                let mut state = courtesy.state.lock();
                state.releasing = state.releasing.saturating_sub(1);
                drop(state);
                courtesy
            }
        };
        if others {
            let until = Instant::now() + (took * 2).clamp(MIN_GIVE_WAY, MAX_GIVE_WAY);
            let mut state = courtesy.state.lock();
            state.until = Some(state.until.map_or(until, |earlier| earlier.max(until)));
        }
        courtesy.settled.notify_waiters();
        self.give_way.forget_if_stale(&self.name, &courtesy);
    }
}

impl Drop for PlainRelease<'_> {
    fn drop(&mut self) {
        if self.pending.is_some() {
            self.finish(0, Duration::ZERO);
        }
    }
}
