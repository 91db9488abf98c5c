//! Locks made of several reentrant locks, which may live on independent Redis servers (one
//! [`Client`](crate::Client) each): Redisson's `RedissonMultiLock` ([`MultiLock`]: every part
//! held) and `RedissonRedLock` ([`RedLock`]: a majority held), protocol §9.
//!
//! Nothing of their own is stored in Redis: each part is a plain reentrant lock ([`Lock`]), taken
//! and released with the reentrant lock's scripts, so a Java `RedissonMultiLock` over the same
//! names excludes a Rust one. The algorithm is Redisson's, client side (`rounds.rs`): the parts'
//! lease while acquiring, each part's share of the wait, the failures a kind tolerates, the
//! restart from the first part, and the final lease recalculation. One difference in speed, none
//! in what Redis sees held: once a part is taken, the parts after it are asked for at once (one
//! round trip to all the servers), keeping only a prefix of the parts while waiting.
//!
//! [`Lock`]: crate::Lock

mod guard;
mod multi_lock;
mod red_lock;
mod rounds;
mod token_red_lock;

pub use guard::MultiGuard;
pub use multi_lock::MultiLock;
pub use red_lock::RedLock;
pub use token_red_lock::{RedlockOptions, TokenRedGuard, TokenRedLock};

/// The methods MultiLock and RedLock share, delegating to `Parts` (`rounds.rs`); the types'
/// own docs say how the kinds differ. `$ty` is the type, whose field `parts` holds the locks.
macro_rules! composite_methods {
    ($ty:ident) => {
        impl $ty {
            /// The locks, in the order they are taken.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::", stringify!($ty), ") {")]
            /// for part in lock.locks() {
            ///     println!("{}", part.name());
            /// }
            /// # }
            /// ```
            pub fn locks(&self) -> &[crate::Lock] {
                self.parts.locks()
            }

            /// The same lock with every part acting for `owner` instead of the current task
            /// (see [`Lock::with_owner`](crate::Lock::with_owner)).
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::", stringify!($ty), ") {")]
            /// let for_worker = lock.with_owner(ferrisson::Owner::new());
            /// # }
            /// ```
            pub fn with_owner(&self, owner: crate::Owner) -> $ty {
                $ty {
                    parts: self.parts.with_owner(owner),
                }
            }

            /// Acquires, waiting as long as it takes, with the watchdog lease on every part.
            /// Redisson's `lock()`: rounds of [`try_lock_within`](Self::try_lock_within) with a wait
            /// of 1.5 s per lock each, until one acquires. A round that fails for an outage
            /// (no part answered "busy") ends with its error, unless every part's client is
            /// configured with [`WhenUnavailable::KeepWaiting`](crate::WhenUnavailable);
            /// another error ends it too. Parts that only got no reply within their share of a
            /// round's wait are an outage once that silence has lasted the response timeout
            /// (as for a single lock); until then the next round starts.
            ///
            /// # Cancel safety
            /// Cancel safe: dropping the future drops the guards of the parts already taken
            /// (released in the background) and takes back an acquire in flight.
            ///
            /// ```no_run
            #[doc = concat!("# async fn demo(lock: ferrisson::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// let guard = lock.lock().await?;
            /// guard.unlock().await?;
            /// # Ok(()) }
            /// ```
            pub async fn lock(&self) -> crate::Result<crate::MultiGuard> {
                self.parts.acquire(None).await
            }

            /// Acquires, waiting as long as it takes, with a fixed `lease` and no watchdog.
            /// Redisson's `lock(leaseTime)`: rounds of
            /// [`try_lock_within_with_lease`](Self::try_lock_within_with_lease) with a random wait each (in [lease/2, lease) for a lease up to 1.5 s per lock,
            /// else in [1.5 s per lock, lease)), until one acquires.
            ///
            /// # Cancel safety
            /// As [`lock`](Self::lock).
            ///
            /// ```no_run
            #[doc = concat!("# async fn demo(lock: ferrisson::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10)).await?;
            /// # Ok(()) }
            /// ```
            pub async fn lock_with_lease(
                &self,
                lease: std::time::Duration,
            ) -> crate::Result<crate::MultiGuard> {
                self.parts.acquire(Some(lease)).await
            }

            /// One attempt per lock, no waiting, watchdog lease. Redisson's `tryLock()`.
            ///
            /// # Cancel safety
            /// As [`lock`](Self::lock).
            ///
            /// ```no_run
            #[doc = concat!("# async fn demo(lock: ferrisson::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// if let Some(guard) = lock.try_lock().await?.acquired() {
            ///     guard.unlock().await?;
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn try_lock(&self) -> crate::Result<crate::Attempt<crate::MultiGuard>> {
                self.try_lock_bounded(std::time::Duration::ZERO, None).await
            }

            /// Waits at most `wait` (whole milliseconds; zero: one attempt per lock) and holds
            /// the lock with the watchdog lease. Redisson's `tryLock(waitTime, unit)`, step by
            /// step (see the type's docs).
            ///
            /// [`Attempt::Busy`](crate::Attempt::Busy) when the wait ran out (or the one round
            /// failed) and some part answered "busy"; an error instead when that says more: a
            /// part's lock cannot be taken (such as [`Error::WrongType`](crate::Error::WrongType),
            /// see the type's docs for how each kind counts it), or, in the last round, no part
            /// answered "busy", only outages (the last outage's error). Nothing is left held
            /// when it reports anything but the guard.
            ///
            /// # Cancel safety
            /// As [`lock`](Self::lock).
            ///
            /// ```no_run
            #[doc = concat!("# async fn demo(lock: ferrisson::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// use std::time::Duration;
            /// if let Some(guard) = lock.try_lock_within(Duration::from_secs(1)).await?.acquired() {
            ///     guard.unlock().await?;
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn try_lock_within(
                &self,
                wait: std::time::Duration,
            ) -> crate::Result<crate::Attempt<crate::MultiGuard>> {
                self.try_lock_bounded(wait, None).await
            }

            /// Waits at most `wait` as [`try_lock_within`](Self::try_lock_within) does, and
            /// holds the lock for a fixed `lease`, without the watchdog. Redisson's
            /// `tryLock(waitTime, leaseTime, unit)`: while acquiring, the parts get a lease of
            /// twice the wait, reset to `lease` at the end (`PEXPIRE` of each part's key, and
            /// each part's guard told).
            ///
            /// # Cancel safety
            /// As [`lock`](Self::lock).
            ///
            /// ```no_run
            #[doc = concat!("# async fn demo(lock: ferrisson::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// use std::time::Duration;
            /// let attempt = lock
            ///     .try_lock_within_with_lease(Duration::from_secs(1), Duration::from_secs(10))
            ///     .await?;
            /// if let Some(guard) = attempt.acquired() {
            ///     guard.unlock().await?;
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn try_lock_within_with_lease(
                &self,
                wait: std::time::Duration,
                lease: std::time::Duration,
            ) -> crate::Result<crate::Attempt<crate::MultiGuard>> {
                self.try_lock_bounded(wait, Some(lease)).await
            }


            /// The two above: `lease`, or the watchdog when `None`.
            async fn try_lock_bounded(
                &self,
                wait: std::time::Duration,
                lease: Option<std::time::Duration>,
            ) -> crate::Result<crate::Attempt<crate::MultiGuard>> {
                self.parts
                    .try_acquire(wait, lease)
                    .await
                    .map(crate::Attempt::from)
            }

            /// Whether this handle's owner holds every lock (Redisson's `isHeldByThread`,
            /// an AND over the locks; `HEXISTS` on each, in parallel).
            ///
            /// ```no_run
            #[doc = concat!("# async fn demo(lock: ferrisson::", stringify!($ty), ") -> ferrisson::Result<()> {")]
            /// let _guard = lock.lock().await?;
            /// println!("{}", lock.is_held_by_current_owner().await?);
            /// # Ok(()) }
            /// ```
            pub async fn is_held_by_current_owner(&self) -> crate::Result<bool> {
                self.parts.held_by_owner().await
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("locks", &self.parts.locks())
                    .finish()
            }
        }
    };
}
use composite_methods;
