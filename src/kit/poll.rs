//! Waiting by polling, for a primitive that has no channel (the spin lock, protocol §6): attempt,
//! and while busy pause by a [`BackOff`] and attempt again, within the wait bound. The pub/sub
//! primitives wait in `wait.rs` instead.

use std::future::Future;
use std::time::Duration;

use super::wait::{
    attempt_within, count_failure, out_of_time, Lapse, TryOutcome, WaitBound, Waiting,
};
use super::{Acquisition, WokenBy};
use crate::config::{lease_millis, WhenUnavailable};
use crate::error::{Error, Result};
use crate::metrics;

/// How long a polling waiter (a [`SpinLock`](crate::SpinLock)'s) pauses between attempts: Redisson's `LockOptions.BackOff`.
///
/// * [`BackOff::exponential`] (the default: 1 ms, doubling, at most 128 ms): each pause is
///   the previous one times the multiplier plus a random 0..n−1 ms after the n-th failure, so
///   that contenders that started together drift apart;
/// * [`BackOff::constant`]: the same pause every time (Redisson's default for it: 64 ms).
///
/// Delays count in whole milliseconds, as Redisson's. The first attempt never waits.
///
/// ```
/// use std::time::Duration;
/// use ferrisson::BackOff;
///
/// let gentle = BackOff::exponential(Duration::from_millis(5), Duration::from_millis(200), 3)?;
/// let steady = BackOff::constant(Duration::from_millis(64))?;
/// assert_ne!(gentle, steady);
/// assert!(BackOff::constant(Duration::ZERO).is_err());
/// # Ok::<(), ferrisson::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackOff {
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Exponential {
        initial_ms: u64,
        max_ms: u64,
        multiplier: u32,
    },
    Constant {
        delay_ms: u64,
    },
}

impl BackOff {
    /// Pauses that start at `initial`, grow by `multiplier` (plus the jitter) after each
    /// failed attempt, and stop growing at `max`: Redisson's `ExponentialBackOff`.
    ///
    /// Fails with [`Error::InvalidArgument`] when a delay is below 1 ms (a zero pause would
    /// hammer Redis) or too large, when `initial` exceeds `max`, or when `multiplier` is 0.
    ///
    /// ```
    /// use std::time::Duration;
    /// let backoff = ferrisson::BackOff::exponential(Duration::from_millis(1), Duration::from_millis(128), 2)?;
    /// assert_eq!(backoff, ferrisson::BackOff::default());
    /// assert!(ferrisson::BackOff::exponential(Duration::from_millis(9), Duration::from_millis(8), 2).is_err());
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn exponential(initial: Duration, max: Duration, multiplier: u32) -> Result<BackOff> {
        let initial_ms = lease_millis(initial, "the back-off's initial delay")?;
        let max_ms = lease_millis(max, "the back-off's maximum delay")?;
        if initial_ms > max_ms {
            return Err(Error::InvalidArgument(format!(
                "the back-off's initial delay {initial:?} exceeds its maximum {max:?}"
            )));
        }
        if multiplier == 0 {
            return Err(Error::InvalidArgument(
                "the back-off's multiplier must be at least 1, got 0".into(),
            ));
        }
        Ok(BackOff {
            kind: Kind::Exponential {
                initial_ms,
                max_ms,
                multiplier,
            },
        })
    }

    /// The same pause, `delay`, after every failed attempt: Redisson's `ConstantBackOff`
    /// (whose default is 64 ms). Fails with [`Error::InvalidArgument`] for a delay below
    /// 1 ms or too large.
    ///
    /// ```
    /// let backoff = ferrisson::BackOff::constant(std::time::Duration::from_millis(64))?;
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn constant(delay: Duration) -> Result<BackOff> {
        let delay_ms = lease_millis(delay, "the back-off's delay")?;
        Ok(BackOff {
            kind: Kind::Constant { delay_ms },
        })
    }

    /// [`BackOff::exponential`] in whole ms, for defaults known valid.
    pub(crate) const fn exponential_ms(initial_ms: u64, max_ms: u64, multiplier: u32) -> BackOff {
        BackOff {
            kind: Kind::Exponential {
                initial_ms,
                max_ms,
                multiplier,
            },
        }
    }

    /// The pauses of one acquire.
    pub(crate) fn pauses(self) -> Pauses {
        let next_ms = match self.kind {
            Kind::Exponential { initial_ms, .. } => initial_ms,
            Kind::Constant { delay_ms } => delay_ms,
        };
        Pauses {
            kind: self.kind,
            next_ms,
            failures: 0,
        }
    }
}

impl Default for BackOff {
    /// Redisson's default `ExponentialBackOff`: 1 ms, doubling, at most 128 ms.
    ///
    /// ```
    /// let backoff = ferrisson::BackOff::default();
    /// ```
    fn default() -> BackOff {
        BackOff {
            kind: Kind::Exponential {
                initial_ms: 1,
                max_ms: 128,
                multiplier: 2,
            },
        }
    }
}

/// One acquire's sequence of pauses: Redisson's `BackOffPolicy`.
pub(crate) struct Pauses {
    kind: Kind,
    next_ms: u64,
    failures: u32,
}

impl Pauses {
    /// The next pause.
    pub(crate) fn next(&mut self) -> Duration {
        let pause = self.next_ms;
        if let Kind::Exponential {
            max_ms, multiplier, ..
        } = self.kind
        {
            // As Redisson: the n-th failure adds 0..n-1 ms, so that contenders drift apart.
            self.failures = self.failures.saturating_add(1);
            let jitter = fastrand::u64(0..u64::from(self.failures));
            self.next_ms = pause
                .saturating_mul(u64::from(multiplier))
                .saturating_add(jitter)
                .min(max_ms);
        }
        Duration::from_millis(pause)
    }
}

/// Runs `attempt` until it acquires, pausing by `backoff` between refusals (each pause no longer
/// than the PTTL the refusal gave), or until `wait`
/// (None: no limit) runs out (`Ok(None)`). Counts the outcome in the metrics. An acquisition
/// whose lease ended before it could be handed out is let go, as in the wait loop (see
/// [`Lapse`]).
///
/// # Cancel safety
/// Cancel safe as long as `attempt` is: the pauses hold nothing.
pub(crate) async fn poll_loop<T: Lapse, F, Fut>(
    client: &(impl Waiting + ?Sized),
    wait: Option<Duration>,
    backoff: BackOff,
    mut attempt: F,
) -> Result<Option<(T, Acquisition)>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<TryOutcome<T>>>,
{
    let limit = WaitBound::new(wait);
    let mut pauses = backoff.pauses();
    let outcome = async {
        let mut attempts = 0u32;
        // Whether Redis ever answered, and the outage that failed the last attempt: what the
        // wait reports when it runs out (as the pub/sub primitives do).
        let mut answered = false;
        let mut outage: Option<Box<Error>> = None;
        // The lock's PTTL from the last refusal (-1: none known).
        let mut busy_ms: i64 = -1;
        loop {
            attempts += 1;
            // A dropped attempt is settled by the kit. Boxed, as in the wait loop: inline, the
            // attempt's future would size the whole acquire's, pauses and all.
            match Box::pin(attempt_within(limit.left(), attempts == 1, &mut attempt)).await {
                // Its lease ended before it could be handed out (see `Lapse`): let it go
                // (dropping it gives it up) and poll on.
                Some(Ok(TryOutcome::Acquired(hold, _))) if hold.lapsed() => {
                    drop(hold);
                    tracing::debug!(
                        attempts,
                        "acquired only after the lease ran out; not handed out"
                    );
                    answered = true;
                    outage = None;
                }
                Some(Ok(TryOutcome::Acquired(hold, reentered))) => {
                    let woken_by = match attempts {
                        1 => WokenBy::Immediate,
                        _ => WokenBy::BackOff,
                    };
                    let how = metrics::How::of(woken_by, reentered);
                    return Ok(Some((
                        hold,
                        Acquisition::record(limit.start, woken_by, attempts, how),
                    )));
                }
                Some(Ok(TryOutcome::Busy(ttl))) => {
                    answered = true;
                    outage = None;
                    busy_ms = ttl;
                }
                Some(Err(err))
                    if err.is_transient()
                        && client.when_unavailable() == WhenUnavailable::KeepWaiting =>
                {
                    tracing::debug!(error = %err, "redis unavailable; polling on");
                    outage = Some(Box::new(err));
                }
                Some(Err(err)) => return Err(client.explain(err)),
                None => break,
            }
            // No longer than the holder's lease: a lock that expires sooner is tried then.
            let pause = match u64::try_from(busy_ms) {
                Ok(ttl) if ttl > 0 => pauses.next().min(Duration::from_millis(ttl)),
                _ => pauses.next(),
            };
            busy_ms = -1;
            match limit.left() {
                Some(left) if left.is_zero() => break,
                Some(left) => tokio::time::sleep(pause.min(left)).await,
                None => tokio::time::sleep(pause).await,
            }
        }
        tracing::debug!(attempts, "not acquired within the wait bound");
        out_of_time(client, wait, answered, outage)
    }
    .await;
    count_failure(&outcome);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sequence(backoff: BackOff, n: usize) -> Vec<u64> {
        let mut pauses = backoff.pauses();
        (0..n).map(|_| pauses.next().as_millis() as u64).collect()
    }

    #[test]
    fn the_default_backoff_doubles_from_1_ms_with_jitter_up_to_128_ms() {
        for _ in 0..100 {
            let pauses = sequence(BackOff::default(), 12);
            assert_eq!(pauses[..2], [1, 2], "{pauses:?}");
            for (n, pair) in pauses.windows(2).enumerate() {
                // The pause after the (n+1)-th failure: twice the previous plus 0..=n ms.
                let low = (pair[0] * 2).min(128);
                let high = (pair[0] * 2 + n as u64).min(128);
                assert!(
                    (low..=high).contains(&pair[1]),
                    "{pauses:?} at {n}: {} not in {low}..={high}",
                    pair[1]
                );
            }
            assert_eq!(pauses[11], 128, "capped: {pauses:?}");
        }
    }

    #[test]
    fn a_constant_backoff_pauses_the_same_every_time() {
        let backoff = BackOff::constant(Duration::from_millis(64)).expect("valid");
        assert_eq!(sequence(backoff, 5), [64; 5]);
    }

    #[test]
    fn bad_backoffs_are_invalid_arguments() {
        let ms = Duration::from_millis;
        for bad in [
            BackOff::constant(Duration::ZERO),
            BackOff::constant(Duration::from_micros(999)),
            BackOff::constant(Duration::MAX),
            BackOff::exponential(Duration::ZERO, ms(10), 2),
            BackOff::exponential(ms(20), ms(10), 2),
            BackOff::exponential(ms(1), ms(10), 0),
            BackOff::exponential(ms(1), Duration::MAX, 2),
        ] {
            assert!(
                matches!(bad, Err(Error::InvalidArgument(_))),
                "{bad:?} should be refused"
            );
        }
        assert!(BackOff::exponential(ms(10), ms(10), 1).is_ok());
    }
}
