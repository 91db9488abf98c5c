//! The blocking twin of the permit-expirable semaphore ([`crate::PermitExpirableSemaphore`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{twins, wrap_in_held, AsyncGuard, Client, Held, Inner};
use crate::error::Result;
use crate::kit::Attempt;
use crate::sync::PermitIdFormat;

impl Client {
    /// A handle to the permit-expirable semaphore `name` (Redisson's
    /// `getPermitExpirableSemaphore`), with permit ids in the 3.17+ format. Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let semaphore = client.permit_expirable_semaphore("workers");
    /// # }
    /// ```
    pub fn permit_expirable_semaphore(&self, name: impl Into<String>) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore {
            client: Arc::clone(&self.inner),
            semaphore: self.inner.client.permit_expirable_semaphore(name),
        }
    }
}

/// A blocking handle to a permit-expirable semaphore; see [`crate::PermitExpirableSemaphore`]
/// for the semantics of each method. Permits have no owner, so any thread may release any
/// permit by its id.
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let semaphore = client.permit_expirable_semaphore("workers");
/// semaphore.try_set_permits(2)?;
/// let permit = semaphore.acquire(Some(std::time::Duration::from_secs(30)))?;
/// permit.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PermitExpirableSemaphore {
    client: Arc<Inner>,
    semaphore: crate::PermitExpirableSemaphore,
}

impl PermitExpirableSemaphore {
    fn semaphore(&self) -> &crate::PermitExpirableSemaphore {
        &self.semaphore
    }

    /// The semaphore's name (the Redis key of its permit count).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.permit_expirable_semaphore("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// How this handle stores permit ids (see [`crate::PermitIdFormat`]).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let semaphore = client.permit_expirable_semaphore("a");
    /// assert_eq!(semaphore.id_format(), ferrisson::PermitIdFormat::Raw);
    /// # }
    /// ```
    pub fn id_format(&self) -> PermitIdFormat {
        self.semaphore.id_format()
    }

    /// The same semaphore with permit ids stored in `format` (see
    /// [`crate::PermitExpirableSemaphore::with_id_format`]).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// use ferrisson::PermitIdFormat;
    /// let legacy = client.permit_expirable_semaphore("a").with_id_format(PermitIdFormat::Hex);
    /// # }
    /// ```
    pub fn with_id_format(&self, format: PermitIdFormat) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore {
            client: Arc::clone(&self.client),
            semaphore: self.semaphore.with_id_format(format),
        }
    }

    twins! { semaphore: "PermitExpirableSemaphore", "crate::PermitExpirableSemaphore", on semaphore;
        /// Takes a permit, waiting as long as it takes; it expires after `lease`, or never.
        fn acquire(lease: Option<Duration>) -> Permit => wrap, "let permit = semaphore.acquire(None)?;";
        /// One attempt, no waiting.
        fn try_acquire(lease: Option<Duration>) -> Attempt<Permit> => wrap,
            "if let Some(permit) = semaphore.try_acquire(None)?.acquired() {\n    permit.release()?;\n}";
        /// Waits at most `wait` for a permit that expires after `lease` (or never).
        fn try_acquire_for(wait: Duration, lease: Option<Duration>) -> Attempt<Permit> => wrap,
            "let attempt = semaphore.try_acquire_for(std::time::Duration::from_millis(500), None)?;";
        /// Releases the permit `id`.
        fn release(id: &str) -> (), "let id = semaphore.acquire(None)?.forget();\nsemaphore.release(&id)?;";
        /// Releases the permit `id` if taken and in its lease.
        fn try_release(id: &str) -> bool,
            "let id = semaphore.acquire(None)?.forget();\nassert!(semaphore.try_release(&id)?);";
        /// Sets the number of permits if the semaphore does not exist yet.
        fn try_set_permits(permits: u32) -> bool, "semaphore.try_set_permits(3)?;";
        /// Adds `delta` permits (fewer when negative).
        fn add_permits(delta: i64) -> (), "semaphore.add_permits(1)?;";
        /// The permits available now, after expired ones are reclaimed.
        fn available_permits() -> i64, "println!(\"{}\", semaphore.available_permits()?);";
        /// Moves the end of permit `id`'s lease to `lease` from now (`None`: never).
        fn update_lease_time(id: &str, lease: Option<Duration>) -> bool,
            "let permit = semaphore.acquire(Some(std::time::Duration::from_secs(5)))?;\nsemaphore.update_lease_time(permit.id(), None)?;";
        /// Deletes the semaphore's keys.
        fn delete() -> bool, "semaphore.delete()?;";
    }
}

wrap_in_held!(crate::Permit => Permit);

/// A permit taken through the blocking API, released when dropped (in the background).
///
/// ```no_run
/// # fn demo(semaphore: ferrisson::blocking::PermitExpirableSemaphore) -> ferrisson::Result<()> {
/// let permit = semaphore.acquire(None)?;
/// println!("{}", permit.id());
/// permit.release()?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the permit releases it at once"]
#[derive(Debug)]
pub struct Permit {
    held: Held<crate::Permit>,
}

impl Permit {
    /// The permit's id (32 lowercase hex characters); empty once released or forgotten.
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// assert_eq!(semaphore.acquire(None)?.id().len(), 32);
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> &str {
        self.held.get().map_or("", crate::Permit::id)
    }

    /// Releases now (see [`crate::Permit::release`]).
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(None)?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn release(self) -> Result<()> {
        self.held.unlock()
    }

    /// Keeps the permit taken and returns its id (see [`crate::Permit::forget`]).
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let id = semaphore.acquire(None)?.forget();
    /// # Ok(()) }
    /// ```
    pub fn forget(mut self) -> String {
        self.held
            .guard
            .take()
            .map(crate::Permit::forget)
            .unwrap_or_default()
    }

    /// Moves the end of this permit's lease (see [`crate::Permit::update_lease`]).
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let mut permit = semaphore.acquire(Some(std::time::Duration::from_secs(5)))?;
    /// permit.update_lease(Some(std::time::Duration::from_secs(60)))?;
    /// # Ok(()) }
    /// ```
    pub fn update_lease(&mut self, lease: Option<Duration>) -> Result<bool> {
        let client = Arc::clone(&self.held.client);
        match self.held.guard.as_mut() {
            Some(permit) => client.block_on(permit.update_lease(lease))?,
            None => Ok(false),
        }
    }

    /// Whether the lease has ended by this client's clock.
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::PermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// assert!(!semaphore.acquire(None)?.is_expired());
    /// # Ok(()) }
    /// ```
    pub fn is_expired(&self) -> bool {
        self.held.is_lost()
    }
}

impl AsyncGuard for crate::Permit {
    fn release(self) -> impl Future<Output = Result<()>> {
        crate::Permit::release(self)
    }
    fn detach(self) {
        crate::Permit::forget(self);
    }
    fn is_lost(&self) -> bool {
        self.is_expired()
    }
}
