//! The Redlock algorithm as its description gives it (redis.io's "Distributed Locks with
//! Redis") and as node `redlock`, redsync and rslock run it: token locks on independent masters,
//! one random value per acquisition written on all of them at once, a majority within the
//! validity time, retries after a random delay, and a compare-and-delete on all after a failed
//! round.

use arcstr::ArcStr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::guard::{drift, MultiGuard};
use crate::config::lease_millis;
use crate::error::{Error, Result};
use crate::kit::Attempt;
use crate::lock::{Token, TokenGuard, TokenLock};

/// How a [`TokenRedLock`] counts validity and retries: the Redlock description's parameters,
/// with node `redlock`'s defaults.
///
/// ```
/// use std::time::Duration;
/// let mut options = ferrisson::RedlockOptions::default();
/// assert_eq!(options.drift_factor, 0.01);
/// // redsync's pauses, 50 to 250 ms: 150 ± 100.
/// options.retry_delay = Duration::from_millis(150);
/// options.retry_jitter = Duration::from_millis(100);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct RedlockOptions {
    /// The clock drift allowance, as a fraction of the lease: the validity is the lease minus
    /// the time the round took minus `drift_factor × lease + 2 ms`. Default 0.01.
    pub drift_factor: f64,
    /// The pause between two rounds, around which the jitter spreads it. Default 200 ms.
    pub retry_delay: Duration,
    /// The pause is `retry_delay` plus a uniform random offset in ±`retry_jitter` (at least
    /// 0). Default 100 ms.
    pub retry_jitter: Duration,
}

impl Default for RedlockOptions {
    /// node `redlock`'s: drift factor 0.01, retries 200 ± 100 ms apart.
    fn default() -> RedlockOptions {
        RedlockOptions {
            drift_factor: 0.01,
            retry_delay: Duration::from_millis(200),
            retry_jitter: Duration::from_millis(100),
        }
    }
}

/// The Redlock algorithm over [`TokenLock`]s on independent Redis masters, on the keys and
/// values node `redlock`, Go's redsync and rslock use: held when a majority of the masters
/// (`n/2 + 1` of `n`) hold the lock's key with one random value, written on all of them for
/// that acquisition. Give it one [`TokenLock`] per master, each from its own
/// [`Client`](crate::Client).
///
/// One round, as the description's steps:
/// 1. note the time, and draw a value: 32 random hex characters (node `redlock`'s format),
///    unique to this acquisition;
/// 2. `SET name value NX PX lease` on every master at once, each bounded by a per-master
///    timeout of 5 % of the lease (redsync's `timeoutFactor`; at least 10 ms), so that a master
///    that is down or slow costs no more than that;
/// 3. acquired when at least `n/2 + 1` masters said yes and the validity, `lease − elapsed −
///    (drift_factor × lease + 2 ms)`, is still positive;
/// 4. otherwise every part taken is released (compare-and-delete, awaited), an attempt that got
///    no reply is taken back by its client when the reply comes, and the next round starts
///    after `retry_delay ± retry_jitter` ([`RedlockOptions`]).
///
/// Without a lease the parts take the watchdog's (from the first part's client), and each
/// part's client renews its part while held (compare-and-`PEXPIRE`): a Redlock that does not
/// expire under a long task, which node `redlock` offers only through `using`. The guard is a
/// [`MultiGuard<Token>`]: lost once fewer than a majority of its parts remain, or, with a fixed
/// lease, once its validity is spent; its release deletes the value on every master that still
/// holds it.
///
/// Interoperable with node `redlock`, redsync and rslock on the same masters and key: each
/// takes the key with `SET NX` (node `redlock` by a script checking `EXISTS`), so any holder's
/// key excludes the others, and each deletes only its own value.
///
/// # Cancel safety
/// Every acquire method is cancel safe: dropping its future drops the parts taken (released in
/// the background) and the attempts in flight (taken back by their clients).
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// use std::time::Duration;
/// use ferrisson::{Client, TokenRedLock};
///
/// let mut locks = Vec::new();
/// for host in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
///     let client = Client::connect(&format!("redis://{host}:6379")).await?;
///     locks.push(client.token_lock("jobs:nightly"));
/// }
/// let red = TokenRedLock::new(locks)?;
/// let guard = red.lock_with_lease(Duration::from_secs(10)).await?;
/// println!("valid for {:?}", guard.validity());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct TokenRedLock {
    locks: Arc<[TokenLock]>,
    options: RedlockOptions,
}

/// The guard of a held [`TokenRedLock`].
///
/// ```no_run
/// # async fn demo(red: ferrisson::TokenRedLock) -> ferrisson::Result<()> {
/// let guard: ferrisson::TokenRedGuard = red.lock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type TokenRedGuard = MultiGuard<Token>;

/// What one round got.
enum Round {
    Acquired(TokenRedGuard),
    /// Not acquired; whether any master answered "held".
    Refused {
        busy: bool,
        error: Option<Error>,
    },
}

impl TokenRedLock {
    /// The fewest locks a TokenRedLock accepts (as [`RedLock`](crate::RedLock)).
    pub const MIN_LOCKS: usize = 3;

    /// A TokenRedLock over `locks` (one per independent master), with the default
    /// [`RedlockOptions`]. Fails with [`Error::InvalidArgument`] for fewer than
    /// [`MIN_LOCKS`](TokenRedLock::MIN_LOCKS) locks or an empty name. Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(a: ferrisson::Client, b: ferrisson::Client, c: ferrisson::Client) -> ferrisson::Result<()> {
    /// let red = ferrisson::TokenRedLock::new([a.token_lock("job"), b.token_lock("job"), c.token_lock("job")])?;
    /// assert_eq!(red.locks().len(), 3);
    /// # Ok(()) }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = TokenLock>) -> Result<TokenRedLock> {
        let locks: Arc<[TokenLock]> = locks.into_iter().collect();
        if locks.len() < Self::MIN_LOCKS {
            return Err(Error::InvalidArgument(format!(
                "a TokenRedLock needs at least {} locks, got {}",
                Self::MIN_LOCKS,
                locks.len()
            )));
        }
        for lock in locks.iter() {
            lock.check_name()?;
        }
        Ok(TokenRedLock {
            locks,
            options: RedlockOptions::default(),
        })
    }

    /// The same lock, counting validity and retrying by `options`. Fails with
    /// [`Error::InvalidArgument`] for a drift factor outside `0.0..1.0`.
    ///
    /// ```no_run
    /// # fn demo(red: ferrisson::TokenRedLock) -> ferrisson::Result<()> {
    /// let mut options = ferrisson::RedlockOptions::default();
    /// options.retry_delay = std::time::Duration::from_millis(150);
    /// let red = red.with_options(options)?;
    /// # Ok(()) }
    /// ```
    pub fn with_options(&self, options: RedlockOptions) -> Result<TokenRedLock> {
        if !(0.0..1.0).contains(&options.drift_factor) {
            return Err(Error::InvalidArgument(format!(
                "the drift factor must be in 0.0..1.0, got {}",
                options.drift_factor
            )));
        }
        Ok(TokenRedLock {
            locks: Arc::clone(&self.locks),
            options,
        })
    }

    /// The locks, one per master.
    ///
    /// ```no_run
    /// # fn demo(red: ferrisson::TokenRedLock) {
    /// for lock in red.locks() {
    ///     println!("{}", lock.name());
    /// }
    /// # }
    /// ```
    pub fn locks(&self) -> &[TokenLock] {
        &self.locks
    }

    /// Acquires, in as many rounds as it takes, with the watchdog lease on every part.
    ///
    /// A round that fails only for outages (no master answered "held") ends the call with the
    /// outage's error.
    ///
    /// ```no_run
    /// # async fn demo(red: ferrisson::TokenRedLock) -> ferrisson::Result<()> {
    /// let guard = red.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<TokenRedGuard> {
        self.acquire(None, None)
            .await?
            .ok_or(Error::Timeout(Duration::MAX))
    }

    /// Acquires, in as many rounds as it takes, with a fixed `lease` on every part (no
    /// watchdog): the description's Redlock, whose guard's
    /// [`validity`](MultiGuard::validity) says how long it can be counted on.
    ///
    /// ```no_run
    /// # async fn demo(red: ferrisson::TokenRedLock) -> ferrisson::Result<()> {
    /// let guard = red.lock_with_lease(std::time::Duration::from_secs(10)).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<TokenRedGuard> {
        self.acquire(Some(lease), None)
            .await?
            .ok_or(Error::Timeout(Duration::MAX))
    }

    /// One round, with the watchdog lease: [`Attempt::Busy`] when a majority was not reached.
    ///
    /// ```no_run
    /// # async fn demo(red: ferrisson::TokenRedLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = red.try_lock().await?.acquired() {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Attempt<TokenRedGuard>> {
        self.acquire(None, Some(Duration::ZERO))
            .await
            .map(Attempt::from)
    }

    /// Rounds until one acquires or `wait` is spent (no round starts after it), with the
    /// watchdog lease.
    ///
    /// ```no_run
    /// # async fn demo(red: ferrisson::TokenRedLock) -> ferrisson::Result<()> {
    /// let attempt = red.try_lock_within(std::time::Duration::from_secs(2)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_within(&self, wait: Duration) -> Result<Attempt<TokenRedGuard>> {
        self.acquire(None, Some(wait)).await.map(Attempt::from)
    }

    /// Rounds until one acquires or `wait` is spent, each part with a fixed `lease`: node
    /// `redlock`'s `acquire` with a retry budget of `wait`.
    ///
    /// ```no_run
    /// # async fn demo(red: ferrisson::TokenRedLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let attempt = red.try_lock_within_with_lease(Duration::from_secs(2), Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_within_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Attempt<TokenRedGuard>> {
        self.acquire(Some(lease), Some(wait))
            .await
            .map(Attempt::from)
    }

    /// Rounds until one acquires (`Some`) or, with `wait`, until it is spent (`None`).
    async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<TokenRedGuard>> {
        let ttl = match lease {
            Some(lease) => {
                lease_millis(lease, "lease")?;
                lease
            }
            None => self.locks[0].client().config.watchdog_timeout,
        };
        let started = Instant::now();
        let deadline = wait.map(|wait| started.checked_add(wait).unwrap_or(started));
        loop {
            match self.round(ttl, lease).await {
                Round::Acquired(guard) => return Ok(Some(guard)),
                Round::Refused {
                    busy: false,
                    error: Some(err),
                } => return Err(err),
                Round::Refused {
                    error: Some(err), ..
                } if !err.is_transient() => return Err(err),
                Round::Refused { .. } => {}
            }
            let pause = self.pause();
            match deadline {
                Some(deadline) if Instant::now() + pause >= deadline => return Ok(None),
                _ => tokio::time::sleep(pause).await,
            }
        }
    }

    /// The pause before the next round: `retry_delay ± retry_jitter`, at least 0.
    fn pause(&self) -> Duration {
        let RedlockOptions {
            retry_delay,
            retry_jitter,
            ..
        } = self.options;
        let jitter = u64::try_from(retry_jitter.as_millis()).unwrap_or(u64::MAX);
        let delay = u64::try_from(retry_delay.as_millis()).unwrap_or(u64::MAX);
        let offset = fastrand::u64(0..=jitter.saturating_mul(2));
        Duration::from_millis(delay.saturating_add(offset).saturating_sub(jitter))
    }

    /// One round (see the type's docs).
    async fn round(&self, ttl: Duration, lease: Option<Duration>) -> Round {
        let n = self.locks.len();
        let quorum = n / 2 + 1;
        let value = ArcStr::from(uuid::Uuid::new_v4().simple().to_string());
        let per_master = (ttl / 20).max(Duration::from_millis(10));
        let start = Instant::now();
        let attempts = join_all(self.locks.iter().map(|lock| {
            let part = lock.with_shared_token(ArcStr::clone(&value));
            async move {
                let attempt = part.try_lock_bounded(Duration::ZERO, lease);
                tokio::time::timeout(per_master, attempt)
                    .await
                    .unwrap_or(Err(Error::Timeout(per_master)))
            }
        }))
        .await;
        let elapsed = start.elapsed();
        let drift = drift(ttl, self.options.drift_factor);
        let valid = ttl.saturating_sub(elapsed).saturating_sub(drift) > Duration::ZERO;

        let mut held: Vec<TokenGuard> = Vec::with_capacity(n);
        let (mut busy, mut error) = (false, None);
        for attempt in attempts {
            match attempt {
                Ok(Attempt::Acquired(guard)) => held.push(guard),
                Ok(Attempt::Busy) => busy = true,
                Err(err) => {
                    tracing::debug!(error = %err, "a master of a TokenRedLock failed");
                    // A master that cannot be taken says more than one that is down.
                    if error.as_ref().is_none_or(Error::is_transient) {
                        error = Some(err);
                    }
                }
            }
        }
        if held.len() >= quorum && valid {
            tracing::debug!(
                held = held.len(),
                masters = n,
                elapsed_ms = elapsed.as_millis() as u64,
                "TokenRedLock acquired"
            );
            return Round::Acquired(MultiGuard {
                parts: held,
                quorum,
                started: start,
                lease,
                drift,
            });
        }
        // Step 4: what this round took goes, on every master, before the next round.
        for result in join_all(held.into_iter().map(TokenGuard::unlock)).await {
            if let Err(err) = result {
                tracing::debug!(error = %err, "releasing a part of a failed TokenRedLock round");
            }
        }
        busy |= !valid;
        Round::Refused { busy, error }
    }
}
