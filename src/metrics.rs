//! Lock-level metrics, recorded through the [`metrics`](https://docs.rs/metrics) facade when
//! the crate's `metrics` feature is on; without it every recording function is an empty
//! `#[inline]` no-op, so the lock code calls them without any `cfg`.
//!
//! This module owns every metric name, label and description. Names follow Prometheus'
//! conventions (`_total` counters, base units in the name). Install a recorder (an exporter such
//! as `metrics-exporter-prometheus`) **before connecting** a [`Client`](crate::Client): the
//! held-locks gauge is kept with increments, which a recorder installed later never saw.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `ferrisson_acquisitions_total` | counter | `how` | Holds acquired: `immediate` (free at the first attempt), `after_wait` (by a retry after an unlock message or the holder's TTL), `handoff` (handed over by a local release), `reentrant` (the owner already held the lock). |
//! | `ferrisson_acquire_failures_total` | counter | `reason` | Acquire calls that ended without the lock: `busy` (`try_lock` refused, or the wait ran out), `error` (the call failed: Redis unreachable, timeout, wrong type, ...). |
//! | `ferrisson_acquire_wait_seconds` | histogram | | Time from the acquire call to the hold, for every acquisition. |
//! | `ferrisson_handoffs_total` | counter | | Releases that handed the lock straight to a waiter of the same client. |
//! | `ferrisson_renewals_total` | counter | `outcome` | Watchdog renewals, per hold: `renewed`, `lost` (the server no longer had the hold), `failed` (no answer or an error; retried while the lease lasts). |
//! | `ferrisson_leases_lost_total` | counter | `reason` | Leases lost while held, once per lease (what fires a guard's `lost()`): `server` (the server no longer had the hold), `unconfirmed` (the lease's end passed without a confirmed renewal). |
//! | `ferrisson_held_locks` | gauge | | Holds this process has now (reentrant holds count one each). |
//! | `ferrisson_deadlocks_total` | counter | | Waits of this process that gave way to break a deadlock ([`Error::Deadlock`](crate::Error::Deadlock)). |
//!
//! No metric has a lock-name label: a lock name often carries an id (`orders:42`), and a label
//! per name would make one time series per order, without bound. Per-lock detail is in the
//! `tracing` events, which carry the name.
//!
//! ```
//! // With a Prometheus exporter, say, give the wait histogram buckets by its name:
//! let wait_histogram = ferrisson::metrics::ACQUIRE_WAIT_SECONDS;
//! assert_eq!(wait_histogram, "ferrisson_acquire_wait_seconds");
//! ```

/// The metric names, each with its doc and a doc example that reads it.
macro_rules! names {
    ($($(#[$doc:meta])* $name:ident = $value:literal;)*) => {$(
        $(#[$doc])*
        ///
        /// ```
        #[doc = concat!("assert_eq!(ferrisson::metrics::", stringify!($name), ", \"", $value, "\");")]
        /// ```
        pub const $name: &str = $value;
    )*};
}

names! {
    /// `ferrisson_acquisitions_total`: holds acquired, labelled `how`.
    ACQUISITIONS = "ferrisson_acquisitions_total";
    /// `ferrisson_acquire_failures_total`: acquire calls that ended without the lock, labelled
    /// `reason`.
    ACQUIRE_FAILURES = "ferrisson_acquire_failures_total";
    /// `ferrisson_acquire_wait_seconds`: histogram of the time from an acquire call to its hold.
    ACQUIRE_WAIT_SECONDS = "ferrisson_acquire_wait_seconds";
    /// `ferrisson_handoffs_total`: releases that handed the lock to a waiter of the same client.
    HANDOFFS = "ferrisson_handoffs_total";
    /// `ferrisson_renewals_total`: watchdog renewals per hold, labelled `outcome`.
    RENEWALS = "ferrisson_renewals_total";
    /// `ferrisson_leases_lost_total`: leases lost while held, labelled `reason`.
    LEASES_LOST = "ferrisson_leases_lost_total";
    /// `ferrisson_held_locks`: gauge of the holds this process has now.
    HELD_LOCKS = "ferrisson_held_locks";
    /// `ferrisson_deadlocks_total`: waits that gave way to break a deadlock.
    DEADLOCKS = "ferrisson_deadlocks_total";
}

/// How a hold was acquired (`how` label of [`ACQUISITIONS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    Immediate,
    AfterWait,
    Handoff,
    Reentrant,
}

/// Why an acquire call ended without the lock (`reason` label of [`ACQUIRE_FAILURES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    Busy,
    Error,
}

/// What a renewal of one hold found (`outcome` label of [`RENEWALS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    Renewed,
    Lost,
    Failed,
}

/// How a lease was found lost (`reason` label of [`LEASES_LOST`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    Server,
    Unconfirmed,
}

#[cfg(feature = "metrics")]
mod recorded {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};

    use super::*;

    /// Describes every metric to the installed recorder. Called at each connect: cheap, and a
    /// recorder installed between two connects learns them too.
    pub(crate) fn describe() {
        describe_counter!(
            ACQUISITIONS,
            Unit::Count,
            "Lock holds acquired, by how: immediate, after_wait, handoff, reentrant"
        );
        describe_counter!(
            ACQUIRE_FAILURES,
            Unit::Count,
            "Acquire calls that ended without the lock, by reason: busy, error"
        );
        describe_histogram!(
            ACQUIRE_WAIT_SECONDS,
            Unit::Seconds,
            "Time from an acquire call to its hold"
        );
        describe_counter!(
            HANDOFFS,
            Unit::Count,
            "Releases that handed the lock straight to a waiter of the same client"
        );
        describe_counter!(
            RENEWALS,
            Unit::Count,
            "Watchdog lease renewals per hold, by outcome: renewed, lost, failed"
        );
        describe_counter!(
            LEASES_LOST,
            Unit::Count,
            "Leases lost while held, by reason: server, unconfirmed"
        );
        describe_counter!(
            DEADLOCKS,
            Unit::Count,
            "Waits of this process that gave way to break a deadlock"
        );
        describe_gauge!(
            HELD_LOCKS,
            Unit::Count,
            "Lock holds this process has now (reentrant holds count one each)"
        );
    }

    // Literal label values: the facade then builds each key from static parts, without
    // allocating.

    #[inline]
    pub(crate) fn acquired(how: How, waited: Duration) {
        match how {
            How::Immediate => counter!(ACQUISITIONS, "how" => "immediate").increment(1),
            How::AfterWait => counter!(ACQUISITIONS, "how" => "after_wait").increment(1),
            How::Handoff => counter!(ACQUISITIONS, "how" => "handoff").increment(1),
            How::Reentrant => counter!(ACQUISITIONS, "how" => "reentrant").increment(1),
        }
        ::metrics::histogram!(ACQUIRE_WAIT_SECONDS).record(waited.as_secs_f64());
    }

    #[inline]
    pub(crate) fn not_acquired(why: Failure) {
        match why {
            Failure::Busy => counter!(ACQUIRE_FAILURES, "reason" => "busy").increment(1),
            Failure::Error => counter!(ACQUIRE_FAILURES, "reason" => "error").increment(1),
        }
    }

    #[inline]
    pub(crate) fn handed_off() {
        counter!(HANDOFFS).increment(1);
    }

    #[inline]
    pub(crate) fn deadlock() {
        counter!(DEADLOCKS).increment(1);
    }

    #[inline]
    pub(crate) fn renewals(outcome: Renewal, holds: u64) {
        if holds == 0 {
            return;
        }
        match outcome {
            Renewal::Renewed => counter!(RENEWALS, "outcome" => "renewed").increment(holds),
            Renewal::Lost => counter!(RENEWALS, "outcome" => "lost").increment(holds),
            Renewal::Failed => counter!(RENEWALS, "outcome" => "failed").increment(holds),
        }
    }

    #[inline]
    pub(crate) fn lease_lost(reason: Loss) {
        match reason {
            Loss::Server => counter!(LEASES_LOST, "reason" => "server").increment(1),
            Loss::Unconfirmed => counter!(LEASES_LOST, "reason" => "unconfirmed").increment(1),
        }
    }

    /// One client's share of the [`HELD_LOCKS`] gauge. The lease table (the one record of a
    /// client's holds) calls it under its lock, for every hold it gains or loses; once
    /// retired (the client shut down or dropped, its remaining holds subtracted), it changes
    /// the gauge no more, so that guards dropped after a shutdown are not subtracted twice.
    #[derive(Default)]
    pub(crate) struct Held {
        retired: AtomicBool,
    }

    impl Held {
        #[inline]
        pub(crate) fn add(&self, holds: u32) {
            if !self.retired.load(Ordering::Relaxed) {
                gauge!(HELD_LOCKS).increment(f64::from(holds));
            }
        }

        #[inline]
        pub(crate) fn sub(&self, holds: u32) {
            if holds > 0 && !self.retired.load(Ordering::Relaxed) {
                gauge!(HELD_LOCKS).decrement(f64::from(holds));
            }
        }

        /// Subtracts the client's `live` holds, once, and stops counting.
        pub(crate) fn retire(&self, live: u64) {
            if !self.retired.swap(true, Ordering::Relaxed) && live > 0 {
                gauge!(HELD_LOCKS).decrement(live as f64);
            }
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod recorded {
    use std::time::Duration;

    use super::*;

    /// The recording functions and (after `self:`) `Held`'s methods, each doing nothing.
    macro_rules! nothing {
        (self: $($name:ident($($arg:ty),*);)*) => {$(
            #[inline]
            pub(crate) fn $name(&self, $(_: $arg),*) {}
        )*};
        ($($name:ident($($arg:ty),*);)*) => {$(
            #[inline]
            pub(crate) fn $name($(_: $arg),*) {}
        )*};
    }

    nothing! {
        describe();
        acquired(How, Duration);
        not_acquired(Failure);
        handed_off();
        deadlock();
        renewals(Renewal, u64);
        lease_lost(Loss);
    }

    /// Without the feature: nothing to count.
    #[derive(Default)]
    pub(crate) struct Held;

    impl Held {
        nothing! {
            self:
            add(u32);
            sub(u32);
            retire(u64);
        }
    }
}

pub(crate) use recorded::{
    acquired, deadlock, describe, handed_off, lease_lost, not_acquired, renewals, Held,
};
