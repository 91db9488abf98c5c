//! The guard of a MultiLock or RedLock: the guards of the parts it holds.

use std::future::Future;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::kit::{Guard, Protocol};
use crate::lock::Reentrant;

/// A held [`MultiLock`](crate::MultiLock), [`RedLock`](crate::RedLock) or
/// [`TokenRedLock`](crate::TokenRedLock) (`MultiGuard<Token>`): the guards of the parts it
/// took, released together.
///
/// * [`unlock`](MultiGuard::unlock) releases every part in parallel and reports the outcome;
/// * dropping the guard drops the parts' guards, each released in the background by its own
///   client;
/// * [`is_lost`](MultiGuard::is_lost) and [`lost`](MultiGuard::lost) tell when the lock can no
///   longer be counted on: a MultiLock as soon as one part is lost, a RedLock once fewer than a
///   majority of all its locks (`n/2 + 1`) remain, or once its [`validity`](MultiGuard::validity)
///   is spent.
///
/// ```no_run
/// # async fn demo(a: ferrisson::Client, b: ferrisson::Client, c: ferrisson::Client) -> ferrisson::Result<()> {
/// let red = ferrisson::RedLock::new([a.lock("job"), b.lock("job"), c.lock("job")])?;
/// let guard = red.lock().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lost the majority; stopping"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct MultiGuard<P: Protocol = Reentrant> {
    pub(super) parts: Vec<Guard<P>>,
    /// How many parts must stay held for the lock to count as held.
    pub(super) quorum: usize,
    /// When the acquisition started: validity is measured from there.
    pub(super) started: Instant,
    /// The lease asked for (`None`: the watchdog's).
    pub(super) lease: Option<Duration>,
    /// The clock drift allowance taken off the lease for the validity.
    pub(super) drift: Duration,
}

impl<P: Protocol> MultiGuard<P> {
    /// The guards of the parts held, in the order the locks were given (a RedLock may hold
    /// fewer than all).
    ///
    /// ```no_run
    /// # async fn demo(red: ferrisson::RedLock) -> ferrisson::Result<()> {
    /// let guard = red.lock().await?;
    /// println!("held on {} of {} servers", guard.parts().len(), red.locks().len());
    /// # Ok(()) }
    /// ```
    pub fn parts(&self) -> &[Guard<P>] {
        &self.parts
    }

    /// Releases every part now, in parallel. `Ok` when at least as many parts were released as
    /// the lock needs held (all for a MultiLock, a majority for a RedLock) and its
    /// [`validity`](MultiGuard::validity) was not spent; otherwise the first part's error (such
    /// as [`Error::LeaseLost`](crate::Error::LeaseLost), or
    /// [`Error::ReleaseUnknown`](crate::Error::ReleaseUnknown) for a part whose release has an
    /// unknown outcome), or `LeaseLost` for a spent validity: the work the guard protected may
    /// have overlapped another holder's. Every part is released either way.
    ///
    /// # Cancel safety
    /// Cancel safe: each part's release, once sent, is finished by its client in the background;
    /// a part not yet sent is released by its dropped guard.
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson::MultiLock) -> ferrisson::Result<()> {
    /// let guard = multi.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> impl Future<Output = Result<()>> + Send + 'static {
        let quorum = self.quorum;
        // Read before the releases: past its validity the lock could not be counted on, even
        // if the parts' keys outlived it and their releases find them.
        let spent = self.validity() == Some(Duration::ZERO);
        let name = self.parts.first().map(|part| part.lock().name().to_owned());
        let releases: Vec<_> = self.parts.into_iter().map(Guard::unlock).collect();
        async move {
            let results = futures::future::join_all(releases).await;
            let released = results.iter().filter(|result| result.is_ok()).count();
            match results.into_iter().find_map(Result::err) {
                Some(err) if released < quorum => Err(err),
                _ if spent => Err(Error::LeaseLost {
                    name: name.unwrap_or_default(),
                }),
                _ => Ok(()),
            }
        }
    }

    /// The time the lock can still be counted on, Redlock's validity: the lease, minus the time
    /// since the acquisition started, minus the clock drift allowance (1 % of the lease plus
    /// 2 ms, or a [`TokenRedLock`](crate::TokenRedLock)'s drift factor); zero once spent. `None` with the watchdog lease, which is renewed while held.
    ///
    /// ```no_run
    /// # async fn demo(red: ferrisson::RedLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let guard = red.lock_with_lease(Duration::from_secs(10)).await?;
    /// if let Some(left) = guard.validity() {
    ///     assert!(left < Duration::from_secs(10));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn validity(&self) -> Option<Duration> {
        let lease = self.lease?;
        Some(
            lease
                .saturating_sub(self.started.elapsed())
                .saturating_sub(self.drift),
        )
    }

    /// Whether the lock can no longer be counted on: fewer parts than needed remain unlost (see
    /// [`Guard::is_lost`]), or the [`validity`](MultiGuard::validity) is spent. Read from
    /// the clock, so a holder that was paused knows at once when it resumes.
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson::MultiLock) -> ferrisson::Result<()> {
    /// let guard = multi.lock().await?;
    /// assert!(!guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        let live = self.parts.iter().filter(|part| !part.is_lost()).count();
        live < self.quorum || self.validity() == Some(Duration::ZERO)
    }

    /// Resolves when the lock can no longer be counted on (as [`is_lost`](MultiGuard::is_lost)):
    /// when more parts are lost than the lock tolerates, or its validity ends. Independent of
    /// the guard (`'static`), so it can be moved into the task doing the protected work.
    ///
    /// # Cancel safety
    /// Cancel safe; it only observes.
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson::MultiLock) -> ferrisson::Result<()> {
    /// let guard = multi.lock().await?;
    /// let lost = guard.lost();
    /// tokio::spawn(async move {
    ///     lost.await;
    ///     eprintln!("lost a part; abandoning the work");
    /// });
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let losses: FuturesUnordered<_> = self.parts.iter().map(Guard::lost).collect();
        let tolerated = self.parts.len().saturating_sub(self.quorum);
        let ends = self
            .lease
            .and_then(|lease| self.started.checked_add(lease.saturating_sub(self.drift)));
        async move {
            let too_many = async {
                if losses.skip(tolerated).next().await.is_none() {
                    std::future::pending::<()>().await;
                }
            };
            match ends {
                Some(ends) => {
                    tokio::select! {
                        () = too_many => {}
                        () = tokio::time::sleep_until(ends) => {}
                    }
                }
                None => too_many.await,
            }
        }
    }
}

/// Redlock's clock drift allowance for a lease: `factor` of it plus 2 ms (Redis' expiry
/// precision), in whole milliseconds.
pub(super) fn drift(lease: Duration, factor: f64) -> Duration {
    let ms = (lease.as_millis() as f64 * factor) as u64;
    Duration::from_millis(ms.saturating_add(2))
}

impl<P: Protocol> std::fmt::Debug for MultiGuard<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiGuard")
            .field("parts", &self.parts)
            .field("quorum", &self.quorum)
            .field("validity", &self.validity())
            .field("lost", &self.is_lost())
            .finish()
    }
}
