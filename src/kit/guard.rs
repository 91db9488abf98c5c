//! The guard every lock primitive shares ([`Guard`]): one hold, released now or when dropped,
//! with its lost-lease signals; a primitive adds what is its own (a fenced lock's token).

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::handle::Handle;
use super::hold::Hold;
use super::protocol::Protocol;
use super::Acquisition;
use crate::error::Result;
use crate::lease::watchdog::Lease;
use crate::owner::Owner;

/// One hold of a lock of the primitive `P`, released when dropped. Users meet it by its
/// primitives' names: [`LockGuard`](crate::LockGuard) is `Guard<Reentrant>`,
/// [`FencedGuard`](crate::FencedGuard) `Guard<Fenced>`, and so on.
///
/// * [`unlock`](Guard::unlock) releases now and reports the outcome;
/// * dropping the guard hands the release to the client's background task, so `drop` never
///   blocks the runtime (errors are logged with `tracing`);
/// * [`lost`](Guard::lost) resolves when the lease is known to be gone, so that work done
///   under the lock can stop: the key was deleted or expired behind the holder's back, or a fixed
///   lease ran out. Redisson has no such signal.
///
/// A guard taken without a lease is renewed by the watchdog until it is released.
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let guard = client.lock("orders:42").lock().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lost the lock; stopping"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
/// }
/// guard.unlock().await?; // `Error::LeaseLost` if it was lost meanwhile
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct Guard<P: Protocol> {
    /// Bound to the owner that holds.
    pub(crate) lock: Handle<P>,
    pub(crate) hold: Hold,
    /// What the primitive's acquisition gave besides the hold (a fenced lock's token).
    pub(crate) extra: P::Extra,
}

impl<P: Protocol> super::wait::Lapse for Guard<P> {
    const RECEIVES: super::handoff::Receives = P::RECEIVES;

    fn lapsed(&self) -> bool {
        self.is_lost()
    }
}

impl<P: Protocol> Guard<P> {
    /// Releases this hold now, with the primitive's release: the lock is free if it was the
    /// last hold. The same shape as [`Handle::unlock`].
    ///
    /// `Ok` only when the server released a hold that was still proven: the work the guard
    /// protected was protected until the release.
    ///
    /// * [`Error::LeaseLost`](crate::Error::LeaseLost) when the hold had already been lost (its
    ///   lease ran out, or the lock was deleted or force-unlocked), or was past its proven end
    ///   when the release began ([`is_lost`](Guard::is_lost) was true: whatever the server
    ///   still kept of it is released all the same; a fixed-lease hold re-entered since, whose
    ///   key's TTL the re-entry reset, is judged by the server's reply instead): the work the
    ///   guard protected may have overlapped another holder's.
    /// * [`Error::ReleaseUnknown`](crate::Error::ReleaseUnknown) (`may_remain: true`) when the
    ///   release failed after it may have reached Redis (the connection failed, the reply timed
    ///   out), or was left to the settling of an earlier call of unknown outcome on the same
    ///   holder field: it may not have run, and nothing shows that the hold lasted until it.
    ///   The client settles the field once Redis answers;
    ///   [`unlock_settled`](Guard::unlock_settled) waits for that.
    ///
    /// # Cancel safety
    /// Cancel safe: once the release has been sent, dropping the future lets the background task
    /// finish it; if it had not been sent, dropping the future drops the guard, which releases.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// match guard.unlock().await {
    ///     Ok(()) => {}
    ///     Err(ferrisson::Error::LeaseLost { name }) => eprintln!("{name} was lost meanwhile"),
    ///     Err(ferrisson::Error::ReleaseUnknown { name, .. }) => {
    ///         eprintln!("{name}: unknown whether the hold lasted; its work is unprotected")
    ///     }
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn unlock(mut self) -> impl Future<Output = Result<()>> + Send + 'static {
        // The hold's own future, not one around it: the guard is not needed to release.
        self.hold.release(&self.lock, false)
    }

    /// Releases as [`unlock`](Guard::unlock) does, but settles a release of unknown outcome
    /// before answering. It waits at most until the hold's proven lease end (a fixed lease's
    /// end, or the watchdog lease's last confirmed end), after which nothing could show that
    /// the hold lasted: for the release's reply and, when its outcome is unknown, for the
    /// client to reach Redis again and settle the holder field, which reads whether the server
    /// still had the hold and takes it back if so.
    ///
    /// * `Ok(())` when the release ran on a hold still proven, or the settling found the hold
    ///   still on the server (so it lasted until it was taken back);
    /// * [`Error::ReleaseUnknown`](crate::Error::ReleaseUnknown) with `may_remain: false` when
    ///   the settling found nothing of the hold: the release may have run, or the hold may have
    ///   been lost before it (a restart without persistence, say); with `may_remain: true` when
    ///   the lease end (or the client's shutdown) came first (the release, if still unanswered,
    ///   is finished and its field settled in the background);
    /// * the other errors as `unlock`.
    ///
    /// Use it where the caller must know whether its work was protected (the `ferrisson run`
    /// command exits 76 unless it is `Ok`).
    ///
    /// # Cancel safety
    /// Cancel safe as `unlock`; dropped while waiting for the settling, the settling goes on in
    /// the background.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// // ... the protected work ...
    /// if let Err(err) = guard.unlock_settled().await {
    ///     eprintln!("the work may not have been protected: {err}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn unlock_settled(mut self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.hold.release(&self.lock, true)
    }

    /// Takes the lock once more with the same owner and lease kind (a reentrant acquire;
    /// a [`NonReentrantLock`](crate::NonReentrantLock) refuses with
    /// [`Error::AlreadyHeld`](crate::Error::AlreadyHeld)). Use it to re-enter from code that
    /// runs under another task or owner than the one that locked.
    ///
    /// # Cancel safety
    /// As [`Handle::lock`].
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let outer = lock.lock().await?;
    /// let inner = tokio::spawn(async move {
    ///     let inner = outer.reenter().await?;
    ///     inner.unlock().await?;
    ///     outer.unlock().await
    /// });
    /// # Ok(()) }
    /// ```
    pub async fn reenter(&self) -> Result<Guard<P>> {
        let lease = match self.hold.lease() {
            Lease::Watchdog => None,
            Lease::Fixed(ms) => Some(Duration::from_millis(ms)),
        };
        self.lock
            .acquire(lease, None)
            .await?
            .ok_or_else(|| self.lock.not_held())
    }

    /// Keeps the hold but drops the guard without releasing it, Redisson style: the watchdog
    /// (if any) keeps renewing, and [`Handle::unlock`] by the same owner releases it later.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// lock.lock().await?.detach();
    /// // ... later, from the same task (or with the same explicit owner):
    /// lock.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn detach(mut self) {
        self.hold.detach();
    }

    /// Resolves when this hold's lease is lost or can no longer be proven, so that the work it
    /// protects can stop:
    /// * the server says this owner no longer holds the lock (a renewal, or the check that
    ///   follows an unlock message on the lock's channel, such as another client's
    ///   `force_unlock`: asking for this signal makes the client listen to that channel; a
    ///   spin lock, which has no channel, finds out at its next renewal);
    /// * a watchdog lease reached its end without a confirmed renewal (Redis down, paused or
    ///   too slow), timed locally, without waiting for Redis; the client then takes back what
    ///   the server may still keep of the hold once Redis answers;
    /// * a fixed lease's time ran out: this hold's own, or the lock's TTL as the owner's last
    ///   acquire or partial release set it (a re-entry resets the TTL of the whole lock to its
    ///   own lease, as in Redisson, so a short re-entry ends a long outer hold with it unless a
    ///   watchdog hold keeps the lock).
    ///
    /// The ends are measured from when the acquire or renewal was *sent*, so they err on the
    /// early side. Never resolves for a hold that stays held. The future is independent of the
    /// guard (`'static`), so it can be moved into the task doing the protected work.
    ///
    /// # Cancel safety
    /// Cancel safe; it only observes.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// let lost = guard.lost();
    /// tokio::spawn(async move {
    ///     tokio::select! {
    ///         _ = lost => eprintln!("lock lost, abandoning the work"),
    ///         _ = std::future::pending::<()>() => {}
    ///     }
    /// });
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold.lost(&self.lock)
    }

    /// A token cancelled when this hold's lease is found lost or given up (the cases of
    /// [`lost`](Guard::lost) but the end of a fixed lease, the hold's own or the lock's),
    /// for code that prefers `CancellationToken`s.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// let token = guard.lost_token();
    /// assert!(!token.is_cancelled());
    /// # Ok(()) }
    /// ```
    pub fn lost_token(&self) -> CancellationToken {
        self.hold.lost_token(&self.lock)
    }

    /// Whether the lease is already known to be lost or past its proven end (see
    /// [`lost`](Guard::lost)); read from the clock, so a holder that was paused knows at
    /// once when it resumes.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// assert!(!guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost(&self.lock)
    }

    /// How the acquisition went: its wait, its attempts, and what ended its wait.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// println!("{:?}", guard.acquisition());
    /// # Ok(()) }
    /// ```
    pub fn acquisition(&self) -> &Acquisition {
        self.hold.acquisition()
    }

    /// The owner holding this hold.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// assert_eq!(guard.owner(), ferrisson::Owner::current());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> Owner {
        self.lock.owner()
    }

    /// The holder field written in the lock's hash: `<client uuid>:<owner id>`.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// assert!(guard.holder_field().ends_with(&format!(":{}", guard.owner().id())));
    /// # Ok(()) }
    /// ```
    pub fn holder_field(&self) -> &str {
        self.hold.field()
    }

    /// The lock this guard holds, bound to the holding owner.
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// assert_eq!(guard.lock().name(), lock.name());
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> &Handle<P> {
        &self.lock
    }
}

impl<P: Protocol> Drop for Guard<P> {
    fn drop(&mut self) {
        // Nothing once released or detached.
        self.hold.dropped(&self.lock);
    }
}

impl<P: Protocol> std::fmt::Debug for Guard<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(P::NAMES.1)
            .field("lock", &self.lock.name())
            .field("field", &self.hold.field())
            .field("extra", &self.extra)
            .field("lease", &self.hold.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}
