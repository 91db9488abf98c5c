//! The blocking twin of [`crate::Semaphore`]: every call blocks the calling thread.

use std::sync::Arc;
use std::time::Duration;

use super::{twins, wrap_in_held, AsyncGuard, Client, Held, Inner};
use crate::error::Result;
use crate::kit::{Acquisition, Attempt};

impl Client {
    /// A handle to the semaphore `name` (Redisson's `getSemaphore`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let semaphore = client.semaphore("uploads");
    /// # }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        Semaphore {
            client: Arc::clone(&self.inner),
            semaphore: self.inner.client.semaphore(name),
        }
    }
}

/// A blocking handle to a semaphore; see [`crate::Semaphore`] for the semantics of each method.
/// A semaphore has no owners: permits taken on one thread may be released on any other.
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let semaphore = client.semaphore("uploads");
/// semaphore.try_set_permits(3)?;
/// let permits = semaphore.acquire(1)?;
/// permits.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    client: Arc<Inner>,
    semaphore: crate::Semaphore,
}

impl Semaphore {
    fn semaphore(&self) -> &crate::Semaphore {
        &self.semaphore
    }

    /// The semaphore's name (its Redis key).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.semaphore("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    twins! { semaphore: "Semaphore", "crate::Semaphore", on semaphore;
        /// Blocks until `permits` permits are taken.
        fn acquire(permits: u64) -> SemaphorePermits => wrap, "let permits = semaphore.acquire(2)?;";
        /// Takes `permits` permits if they are available now.
        fn try_acquire(permits: u64) -> Attempt<SemaphorePermits> => wrap,
            "if let Some(permits) = semaphore.try_acquire(1)?.acquired() {\n    permits.release()?;\n}";
        /// Takes `permits` permits, waiting at most `wait`.
        fn try_acquire_for(permits: u64, wait: Duration) -> Attempt<SemaphorePermits> => wrap,
            "let attempt = semaphore.try_acquire_for(1, std::time::Duration::from_millis(500))?;";
        /// Adds `permits` permits, whoever took them.
        fn release(permits: u64) -> (), "semaphore.release(1)?;";
        /// Sets the permits if the semaphore does not exist.
        fn try_set_permits(permits: u64) -> bool, "semaphore.try_set_permits(3)?;";
        /// Sets the permits with a time to live if the semaphore does not exist.
        fn try_set_permits_with_ttl(permits: u64, ttl: Duration) -> bool,
            "semaphore.try_set_permits_with_ttl(3, std::time::Duration::from_secs(60))?;";
        /// Adds `delta` permits, or removes them when negative.
        fn add_permits(delta: i64) -> (), "semaphore.add_permits(-1)?;";
        /// Takes every available permit; how many there were.
        fn drain_permits() -> i64, "let taken = semaphore.drain_permits()?;";
        /// The permits available now.
        fn available_permits() -> i64, "println!(\"{}\", semaphore.available_permits()?);";
        /// Deletes the semaphore; whether it existed.
        fn delete() -> bool, "semaphore.delete()?;";
    }
}

wrap_in_held!(crate::SemaphorePermits => SemaphorePermits);

/// Permits taken through the blocking API, given back when dropped (in the background, without
/// blocking); see [`crate::SemaphorePermits`].
///
/// ```no_run
/// # fn demo(semaphore: ferrisson::blocking::Semaphore) -> ferrisson::Result<()> {
/// let permits = semaphore.acquire(1)?;
/// std::thread::spawn(move || permits.release()).join().expect("thread")?; // any thread
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard gives the permits back at once"]
#[derive(Debug)]
pub struct SemaphorePermits {
    held: Held<crate::SemaphorePermits>,
}

impl SemaphorePermits {
    /// How many permits this guard holds (0 once released or forgotten).
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::Semaphore) -> ferrisson::Result<()> {
    /// assert_eq!(semaphore.acquire(2)?.permits(), 2);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u64 {
        self.held.get().map_or(0, crate::SemaphorePermits::permits)
    }

    /// Gives the permits back now (see [`crate::SemaphorePermits::release`]).
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::Semaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(1)?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn release(self) -> Result<()> {
        self.held.unlock()
    }

    /// Keeps the permits taken, for a later [`Semaphore::release`] by anyone (see
    /// [`crate::SemaphorePermits::forget`]).
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::Semaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(1)?.forget();
    /// semaphore.release(1)?;
    /// # Ok(()) }
    /// ```
    pub fn forget(self) {
        self.held.detach();
    }

    /// How the acquisition went (wait time, what woke it).
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::Semaphore) -> ferrisson::Result<()> {
    /// println!("{:?}", semaphore.acquire(1)?.acquisition());
    /// # Ok(()) }
    /// ```
    pub fn acquisition(&self) -> Option<&Acquisition> {
        self.held.get().map(|guard| guard.acquisition())
    }
}

impl AsyncGuard for crate::SemaphorePermits {
    fn release(self) -> impl std::future::Future<Output = Result<()>> {
        crate::SemaphorePermits::release(self)
    }
    fn detach(self) {
        self.forget();
    }
    /// Permits have no lease to lose.
    fn is_lost(&self) -> bool {
        false
    }
}
