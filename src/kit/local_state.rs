//! What one client knows of a lock locally: its holds, its waiters in line for a local hand-off,
//! its wake-up subscriptions and whether it gives way. Redis shows the lock (`Client::inspect`);
//! this shows the other half of a hang report: read side by side, a waiter parked on a lock that
//! Redis says is free, with no wake-up banked and nothing in flight, is a lost wake-up.

use std::fmt;

use crate::kit::Client;

/// A snapshot of what this client knows of one lock locally (see [`Client::local_state`]).
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let state = client.local_state("orders:42");
/// if !state.line.is_empty() && !client.inspect("orders:42").await?.is_locked() {
///     eprintln!("waiters of a free lock: {state}");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalState {
    /// The lock's name.
    pub name: String,
    /// This client's holds of the lock, as its lease table counts them.
    pub holds: Vec<LocalHold>,
    /// This client's waiters in line for a local hand-off, head first. A waiter that cannot be
    /// handed the lock (a fair lock's, a read lock's, a semaphore's) waits without a place here.
    pub line: Vec<LocalWaiter>,
    /// Hand-offs in a row since the last release that freed the lock for every client.
    pub handoffs_in_row: u32,
    /// Whether this client gives way on the lock now to other clients' waiters (a release of its
    /// own in flight, or the pause after one whose unlock message reached them).
    pub giving_way: bool,
    /// This client's subscriptions of the lock's wake-up channels.
    pub subscriptions: Vec<LocalSubscription>,
}

/// One holder field of this client in [`LocalState::holds`].
///
/// ```no_run
/// # fn demo(client: ferrisson::Client) {
/// for hold in client.local_state("orders:42").holds {
///     println!("{} holds {} time(s){}", hold.field, hold.count, if hold.lost { " (lost)" } else { "" });
/// }
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalHold {
    /// The holder field (`<client uuid>:<owner id>`).
    pub field: String,
    /// Holds the client counts (re-entries included).
    pub count: u32,
    /// Whether the lease of these holds is known lost.
    pub lost: bool,
}

/// One waiter in [`LocalState::line`].
///
/// ```no_run
/// # fn demo(client: ferrisson::Client) {
/// let parked = client
///     .local_state("orders:42")
///     .line
///     .iter()
///     .filter(|waiter| waiter.state == ferrisson::inspect::LocalWaiterState::Parked)
///     .count();
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalWaiter {
    /// The waiter's holder field.
    pub field: String,
    /// Where it stands.
    pub state: LocalWaiterState,
}

/// Where a waiter of [`LocalState::line`] stands.
///
/// ```
/// assert_eq!(ferrisson::inspect::LocalWaiterState::Parked.to_string(), "parked");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LocalWaiterState {
    /// Parked: waiting for an unlock message, a hand-off or its bound.
    Parked,
    /// Running an acquire attempt of its own (no hand-off can reach it meanwhile).
    Trying,
    /// A release of this client is handing the lock to it right now.
    BeingHandedOver,
    /// Handed the lock; it has not taken the hold over yet.
    HandedOver,
    /// Gone (cancelled or done) while a hand-off to it was in flight.
    Left,
}

impl fmt::Display for LocalWaiterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LocalWaiterState::Parked => "parked",
            LocalWaiterState::Trying => "trying",
            LocalWaiterState::BeingHandedOver => "being-handed-over",
            LocalWaiterState::HandedOver => "handed-over",
            LocalWaiterState::Left => "left",
        })
    }
}

/// One of this client's wake-up subscriptions in [`LocalState::subscriptions`].
///
/// ```no_run
/// # fn demo(client: ferrisson::Client) {
/// for sub in client.local_state("orders:42").subscriptions {
///     println!("{}: {} parked, {} wake-ups banked", sub.channel, sub.parked, sub.banked_wakeups);
/// }
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalSubscription {
    /// The channel.
    pub channel: String,
    /// Whether the server confirmed the subscription.
    pub confirmed: bool,
    /// Waiters sharing it (parked or about to be).
    pub waiters: usize,
    /// Holders sharing it to hear of their own lock's loss.
    pub watchers: usize,
    /// Waiters parked on it now.
    pub parked: usize,
    /// Wake-ups received and not yet taken by a waiter.
    pub banked_wakeups: usize,
}

impl fmt::Display for LocalState {
    /// One line: `lock N: holds [..]; line [field parked, ..]; in a row 3; giving way; channel
    /// C: confirmed, 2 waiters, 1 parked, 0 banked`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lock {}: holds [", self.name)?;
        for (i, hold) in self.holds.iter().enumerate() {
            let lost = if hold.lost { " lost" } else { "" };
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{} ×{}{lost}", hold.field, hold.count)?;
        }
        write!(f, "]; line [")?;
        for (i, waiter) in self.line.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{} {}", waiter.field, waiter.state)?;
        }
        write!(f, "]; {} hand-offs in a row", self.handoffs_in_row)?;
        if self.giving_way {
            write!(f, "; giving way")?;
        }
        if self.subscriptions.is_empty() {
            write!(f, "; no subscription")?;
        }
        for sub in &self.subscriptions {
            let confirmed = if sub.confirmed {
                "confirmed"
            } else {
                "unconfirmed"
            };
            write!(
                f,
                "; channel {}: {confirmed}, {} waiters, {} watchers, {} parked, {} banked",
                sub.channel, sub.waiters, sub.watchers, sub.parked, sub.banked_wakeups
            )?;
        }
        Ok(())
    }
}

impl Client {
    /// What this client knows of lock `name` locally, now: its holds, its waiters in line for
    /// a local hand-off, whether it gives way, and its subscriptions of the lock's wake-up
    /// channels (every primitive's of that name: the lock's, a fair lock's per-waiter ones, a
    /// read-write lock's, a semaphore's, a latch's). For diagnosing a wait: compare it with
    /// what Redis holds ([`Client::inspect`]). It reads local state only and never waits.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) {
    /// println!("{}", client.local_state("orders:42"));
    /// # }
    /// ```
    pub fn local_state(&self, name: &str) -> LocalState {
        let inner = &self.inner;
        let holds = inner
            .leases
            .holds_of(name)
            .into_iter()
            .map(|(field, count, lost)| LocalHold {
                field: field.to_string(),
                count,
                lost,
            })
            .collect();
        let (line, handoffs_in_row) = inner.handoffs.snapshot(name);
        let line = line
            .into_iter()
            .map(|(field, state)| LocalWaiter {
                field: field.to_string(),
                state,
            })
            .collect();
        let tagged = crate::name::tagged(name);
        let subscriptions = inner
            .pubsub
            .snapshot(|channel| channel_of(channel, &tagged))
            .into_iter()
            .map(|sub| LocalSubscription {
                channel: sub.channel,
                confirmed: sub.confirmed,
                waiters: sub.waiters,
                watchers: sub.watchers,
                parked: sub.parked,
                banked_wakeups: sub.banked,
            })
            .collect();
        LocalState {
            name: name.to_owned(),
            holds,
            line,
            handoffs_in_row,
            giving_way: inner.handoffs.give_way.snapshot(name),
            subscriptions,
        }
    }
}

/// Whether `channel` is one of the wake-up channels of the name whose tagged form is `tagged`
/// (protocol §1.1): `<prefix>:T(N)`, a fair waiter's `<prefix>:T(N):<field>`, or the latch's
/// `<prefix>T(N)`.
fn channel_of(channel: &str, tagged: &str) -> bool {
    use crate::name::{
        LATCH_CHANNEL_PREFIX, LOCK_CHANNEL_PREFIX, RWLOCK_CHANNEL_PREFIX, SEMAPHORE_CHANNEL_PREFIX,
    };
    if let Some(rest) = channel.strip_prefix(LATCH_CHANNEL_PREFIX) {
        return rest == tagged;
    }
    [
        LOCK_CHANNEL_PREFIX,
        RWLOCK_CHANNEL_PREFIX,
        SEMAPHORE_CHANNEL_PREFIX,
    ]
    .iter()
    .any(|prefix| {
        channel
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix(':'))
            .and_then(|rest| rest.strip_prefix(tagged))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
    })
}

#[cfg(test)]
mod tests {
    use super::channel_of;

    #[test]
    fn every_wake_up_channel_of_a_name_and_no_other() {
        let t = crate::name::tagged("orders:42");
        assert!(channel_of(&crate::name::lock_channel("orders:42"), &t));
        assert!(channel_of(
            &crate::name::fair_waiter_channel("orders:42", "u:1"),
            &t
        ));
        assert!(channel_of(&crate::name::rwlock_channel("orders:42"), &t));
        assert!(channel_of(&crate::name::semaphore_channel("orders:42"), &t));
        assert!(channel_of(&crate::name::latch_channel("orders:42"), &t));
        assert!(!channel_of(&crate::name::lock_channel("orders:4"), &t));
        assert!(!channel_of(&crate::name::lock_channel("orders:421"), &t));
        assert!(!channel_of(&crate::name::latch_channel("x"), &t));
        let braced = crate::name::tagged("a{b}c");
        assert!(channel_of(&crate::name::lock_channel("a{b}c"), &braced));
        assert!(!channel_of(&crate::name::lock_channel("a{b}cd"), &braced));
    }
}
