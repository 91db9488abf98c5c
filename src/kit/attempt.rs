//! What an attempt that may find a primitive busy returns: its guard, or "busy".

/// The outcome of a non-blocking or bounded acquire ([`Lock::try_lock`](crate::Lock::try_lock),
/// [`Lock::try_lock_within`](crate::Lock::try_lock_within) and their blocking twins): the guard of the
/// hold it took, or `Busy` when another owner held the lock throughout.
///
/// It is `#[must_use]`, unlike an `Option`: `lock.try_lock().await?;` warns, since the guard it
/// throws away releases the lock at once (and a `Busy` went unnoticed).
///
/// ```no_run
/// # async fn demo(lock: ferrisson::Lock) -> ferrisson::Result<()> {
/// use ferrisson::Attempt;
///
/// match lock.try_lock().await? {
///     Attempt::Acquired(guard) => guard.unlock().await?,
///     Attempt::Busy => println!("someone else holds it"),
/// }
/// // Or as an `Option`:
/// if let Some(guard) = lock.try_lock().await?.acquired() {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
///
/// Ignoring it is a `unused_must_use` warning (an error here, under `deny`):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// async fn careless(lock: ferrisson::Lock) -> ferrisson::Result<()> {
///     lock.try_lock().await?; // the guard would be dropped, and the lock released, at once
///     Ok(())
/// }
/// ```
///
/// while the same code that keeps the attempt compiles:
///
/// ```
/// #![deny(unused_must_use)]
/// async fn careful(lock: ferrisson::Lock) -> ferrisson::Result<()> {
///     let _held = lock.try_lock().await?;
///     Ok(())
/// }
/// ```
#[must_use = "an acquired guard releases the lock when dropped: match on the attempt or call `.acquired()`"]
#[derive(Debug)]
pub enum Attempt<G> {
    /// The lock was acquired (or re-entered): this guard holds it.
    Acquired(G),
    /// Another owner held the lock, and the attempt's wait (if any) ran out.
    Busy,
}

impl<G> Attempt<G> {
    /// The guard, if the lock was acquired.
    ///
    /// ```
    /// use ferrisson::Attempt;
    /// assert_eq!(Attempt::Acquired(7).acquired(), Some(7));
    /// assert_eq!(Attempt::<u8>::Busy.acquired(), None);
    /// ```
    #[must_use = "dropping the guard releases the lock at once"]
    pub fn acquired(self) -> Option<G> {
        match self {
            Attempt::Acquired(guard) => Some(guard),
            Attempt::Busy => None,
        }
    }

    /// Whether the lock was acquired.
    ///
    /// ```
    /// assert!(ferrisson::Attempt::Acquired(()).is_acquired());
    /// ```
    pub fn is_acquired(&self) -> bool {
        matches!(self, Attempt::Acquired(_))
    }

    /// Whether another owner held the lock.
    ///
    /// ```
    /// assert!(ferrisson::Attempt::<()>::Busy.is_busy());
    /// ```
    pub fn is_busy(&self) -> bool {
        matches!(self, Attempt::Busy)
    }

    /// Converts the guard, keeping `Busy` (how the blocking API wraps async guards).
    ///
    /// ```
    /// use ferrisson::Attempt;
    /// assert_eq!(Attempt::Acquired(2).map(|n| n * 10).acquired(), Some(20));
    /// ```
    pub fn map<H>(self, f: impl FnOnce(G) -> H) -> Attempt<H> {
        match self {
            Attempt::Acquired(guard) => Attempt::Acquired(f(guard)),
            Attempt::Busy => Attempt::Busy,
        }
    }
}

impl<G> From<Option<G>> for Attempt<G> {
    fn from(guard: Option<G>) -> Attempt<G> {
        guard.map_or(Attempt::Busy, Attempt::Acquired)
    }
}

impl<G> From<Attempt<G>> for Option<G> {
    fn from(attempt: Attempt<G>) -> Option<G> {
        attempt.acquired()
    }
}
