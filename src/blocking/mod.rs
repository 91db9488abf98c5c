//! The same locks for code without an async runtime: every call blocks the calling thread.
//!
//! The owner is the calling **OS thread**, exactly as for Java Redisson: nested acquisitions on
//! one thread re-enter, other threads wait, and a release from another thread fails with
//! [`Error::NotHeld`]. A guard remembers its owner, so it may be moved to and released on another
//! thread.
//!
//! A blocking [`Client`] wraps an async [`crate::Client`] and a small tokio runtime of its own
//! (one worker thread) that runs the background work: the watchdog, pub/sub wake-ups and the
//! releases of dropped guards. Every operation runs the async implementation on the calling
//! thread; nothing is implemented twice.
//!
//! Calling the blocking API from inside an async runtime would block that runtime's worker; it
//! fails with [`Error::InvalidArgument`] instead. Use the async API there.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! fn main() -> ferrisson::Result<()> {
//!     let client = ferrisson::blocking::Client::connect("redis://127.0.0.1:6379")?;
//!     let lock = client.lock("orders:42");
//!     let guard = lock.lock()?;
//!     let again = lock.lock()?; // same thread: re-enters
//!     assert_eq!(lock.hold_count()?, 2);
//!     again.unlock()?;
//!     guard.unlock()?;
//!     if let Some(guard) = lock.try_lock_for(Duration::from_millis(100), None)?.acquired() {
//!         guard.unlock()?;
//!     }
//!     Ok(())
//! }
//! ```

mod inspect;
mod latch;
mod permit_semaphore;
mod semaphore;

pub use latch::CountDownLatch;
pub use semaphore::{Semaphore, SemaphorePermits};
mod multi;

pub use multi::{MultiGuard, MultiLock, RedLock};
mod fair;

pub use fair::{FairGuard, FairLock};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use permit_semaphore::{Permit, PermitExpirableSemaphore};

use crate::error::{Error, Result};
use crate::kit::{Acquisition, Attempt};
use crate::lock::RemainingTtl;
use crate::{Config, LockInfo, Owner};

mod read_write;
pub use read_write::{ReadGuard, ReadLock, ReadWriteLock, WriteGuard, WriteLock};
mod guard;
mod non_reentrant;
mod spin;
mod twin;
pub use guard::Guard;
pub use non_reentrant::{NonReentrantGuard, NonReentrantLock};
pub use spin::{SpinGuard, SpinLock};

/// A blocking client: a [`crate::Client`] plus the runtime that serves it.
///
/// Cheap to clone; clones share the connections and the runtime. When the last clone and the
/// last guard are dropped, the client shuts down (finishing pending releases) and its runtime
/// stops.
///
/// ```no_run
/// let client = ferrisson::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// # Ok::<(), ferrisson::Error>(())
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    client: crate::Client,
    /// `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Inner {
    fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::InvalidArgument(
                "the blocking API was called from inside an async runtime; use the async API there"
                    .into(),
            ));
        }
        let runtime = self.runtime.as_ref().ok_or(Error::Shutdown)?;
        Ok(runtime.block_on(future))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Dropped inside an async context, where a runtime may not block: stop without
            // waiting (leases of undelivered releases then expire on their own).
            runtime.shutdown_background();
        } else {
            runtime.block_on(self.client.shutdown());
        }
    }
}

impl Client {
    /// Connects to the Redis at `url` with Redisson's defaults.
    ///
    /// ```no_run
    /// let client = ferrisson::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn connect(url: &str) -> Result<Client> {
        Client::new(Config::new(url))
    }

    /// Connects with a full [`Config`].
    ///
    /// ```no_run
    /// let mut config = ferrisson::Config::new("redis://127.0.0.1:6379");
    /// config.watchdog_timeout = std::time::Duration::from_secs(10);
    /// let client = ferrisson::blocking::Client::new(config)?;
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn new(config: Config) -> Result<Client> {
        Client::start(|| crate::Client::new(config))
    }

    /// Connects with a fred `Builder` the application already has, as
    /// [`crate::Client::from_fred_builder`]: server, credentials, TLS and fred settings from
    /// `builder`, ferrisson's settings from `config`.
    ///
    /// ```no_run
    /// use ferrisson::fred::types::{config::Config as FredConfig, Builder};
    ///
    /// let builder = Builder::from_config(FredConfig::from_url("redis://127.0.0.1:6379/2")?);
    /// let config = ferrisson::Config::new(ferrisson::Config::DEFAULT_URL);
    /// let client = ferrisson::blocking::Client::from_fred_builder(&builder, config)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_fred_builder(builder: &fred::types::Builder, config: Config) -> Result<Client> {
        Client::start(|| crate::Client::from_fred_builder(builder, config))
    }

    /// Starts the client's runtime and connects on it with `connect`.
    fn start<F>(connect: impl FnOnce() -> F) -> Result<Client>
    where
        F: Future<Output = Result<crate::Client>>,
    {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::InvalidArgument(
                "ferrisson::blocking::Client was created inside an async runtime; use ferrisson::Client".into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ferrisson-blocking")
            .enable_all()
            .build()
            .map_err(|err| {
                Error::InvalidArgument(format!("cannot start the client's runtime: {err}"))
            })?;
        let client = runtime.block_on(connect())?;
        Ok(Client {
            inner: Arc::new(Inner {
                client,
                runtime: Some(runtime),
            }),
        })
    }

    /// A handle to the reentrant lock `name` (Redisson's `getLock`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let lock = client.lock("orders:42");
    /// # }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock {
            client: Arc::clone(&self.inner),
            lock: self.inner.client.lock(name),
            owner: None,
        }
    }

    /// A handle to the fenced lock `name` (Redisson's `getFencedLock`). Sends nothing.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let lock = client.fenced_lock("orders:42");
    /// # }
    /// ```
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        let lock = self.lock(name);
        FencedLock {
            fenced: self.inner.client.fenced_lock(lock.name()),
            lock,
        }
    }

    /// Reads a lock's state atomically (see [`crate::Client::inspect`]).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// println!("{:?}", client.inspect("orders:42")?.holders);
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self, name: &str) -> Result<LockInfo> {
        self.inner.block_on(self.inner.client.inspect(name))?
    }

    /// What this client knows of lock `name` locally (see [`crate::Client::local_state`]).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// println!("{}", client.local_state("orders:42"));
    /// # }
    /// ```
    pub fn local_state(&self, name: &str) -> crate::kit::LocalState {
        self.inner.client.local_state(name)
    }

    /// The client uuid that starts every holder field this client writes.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.id().len(), 36);
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        self.inner.client.id()
    }

    /// Shuts the client down now (see [`crate::Client::shutdown`]).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// client.shutdown()?;
    /// # Ok(()) }
    /// ```
    pub fn shutdown(&self) -> Result<()> {
        self.inner.block_on(self.inner.client.shutdown())
    }
}

/// A blocking handle to a reentrant lock; see [`crate::Lock`] for the semantics of each method.
/// The owner is the calling thread, or the explicit owner bound with [`with_owner`](Lock::with_owner).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let lock = client.lock("orders:42");
/// let guard = lock.lock()?;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    client: Arc<Inner>,
    lock: crate::Lock,
    owner: Option<Owner>,
}

impl Lock {
    /// The async lock acting for this handle's owner.
    fn bound(&self) -> crate::Lock {
        self.lock.with_owner(self.owner())
    }

    fn guard(&self, guard: crate::LockGuard) -> LockGuard {
        LockGuard {
            held: Held::new(guard, &self.client),
        }
    }

    /// The lock's name (its Redis key).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The same lock acting for `owner` instead of the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) {
    /// let shared = lock.with_owner(ferrisson::Owner::new());
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> Lock {
        Lock {
            client: Arc::clone(&self.client),
            lock: self.lock.clone(),
            owner: Some(owner),
        }
    }

    /// The owner this handle acts for: the bound owner, or the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) {
    /// let me = lock.owner();
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.owner.unwrap_or_else(Owner::current_thread)
    }

    /// Blocks until the lock is acquired; watchdog lease.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> Result<LockGuard> {
        let lock = self.bound();
        self.client
            .block_on(lock.lock())?
            .map(|guard| self.guard(guard))
    }

    /// Blocks until the lock is acquired; fixed `lease`, no watchdog.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        let lock = self.bound();
        self.client
            .block_on(lock.lock_with_lease(lease))?
            .map(|guard| self.guard(guard))
    }

    /// One attempt without waiting; watchdog lease. [`Attempt::Busy`] if another owner holds
    /// the lock.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// if let Some(guard) = lock.try_lock()?.acquired() { guard.unlock()?; }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self) -> Result<Attempt<LockGuard>> {
        let lock = self.bound();
        Ok(self
            .client
            .block_on(lock.try_lock())??
            .map(|guard| self.guard(guard)))
    }

    /// Waits at most `wait`; `lease` or the watchdog when `None`. [`Attempt::Busy`] when the
    /// wait ran out.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// use ferrisson::Attempt;
    /// match lock.try_lock_for(std::time::Duration::from_secs(1), None)? {
    ///     Attempt::Acquired(guard) => guard.unlock()?,
    ///     Attempt::Busy => eprintln!("busy"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<LockGuard>> {
        let lock = self.bound();
        Ok(self
            .client
            .block_on(lock.try_lock_for(wait, lease))??
            .map(|guard| self.guard(guard)))
    }

    /// Releases one hold of this handle's owner without a guard (for detached holds);
    /// [`Error::NotHeld`] when the owner holds none.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// lock.lock()?.detach();
    /// lock.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(&self) -> Result<()> {
        let lock = self.bound();
        self.client.block_on(lock.unlock())?
    }

    /// Deletes the lock whoever holds it and wakes its waiters; whether it existed.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// lock.force_unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.client.block_on(self.lock.force_unlock())?
    }

    /// Whether anyone holds the lock.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let locked = lock.is_locked()?;
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.client.block_on(self.lock.is_locked())?
    }

    /// Whether this handle's owner (by default the calling thread) holds the lock: Redisson's
    /// `isHeldByCurrentThread`. The same name as the async
    /// [`Lock::is_held_by_current_owner`](crate::Lock::is_held_by_current_owner).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let mine = lock.is_held_by_current_owner()?;
    /// # Ok(()) }
    /// ```
    pub fn is_held_by_current_owner(&self) -> Result<bool> {
        self.is_held_by(self.owner())
    }

    /// Whether `owner` of this client holds the lock: Redisson's `isHeldByThread(threadId)`.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let worker = ferrisson::Owner::from_id(42)?;
    /// let held = lock.is_held_by(worker)?;
    /// # Ok(()) }
    /// ```
    pub fn is_held_by(&self, owner: Owner) -> Result<bool> {
        self.client.block_on(self.lock.is_held_by(owner))?
    }

    /// How many holds this handle's owner has.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let holds = lock.hold_count()?;
    /// # Ok(()) }
    /// ```
    pub fn hold_count(&self) -> Result<u64> {
        let lock = self.bound();
        self.client.block_on(lock.hold_count())?
    }

    /// The lock's remaining time to live.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let ttl = lock.remaining_ttl()?;
    /// # Ok(()) }
    /// ```
    pub fn remaining_ttl(&self) -> Result<RemainingTtl> {
        self.client.block_on(self.lock.remaining_ttl())?
    }
}

/// One hold of a lock taken through the blocking API; released when dropped (in the background,
/// without blocking).
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
/// let guard = lock.lock()?;
/// std::thread::spawn(move || guard.unlock()).join().expect("thread")?; // the guard keeps its owner
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    held: Held<crate::LockGuard>,
}

impl LockGuard {
    /// Releases now, with the shape of [`Lock::unlock`]: [`Error::LeaseLost`] if the hold had
    /// been lost (see [`crate::LockGuard::unlock`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// lock.lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> Result<()> {
        self.held.unlock()
    }

    /// Releases now, and settles a release of unknown outcome before answering (see
    /// [`crate::LockGuard::unlock_settled`]): `Ok` only when the hold is shown to have lasted
    /// until it was released.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// lock.lock()?.unlock_settled()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock_settled(self) -> Result<()> {
        self.held.unlock_settled()
    }

    /// Keeps the hold without a guard; release it later with [`Lock::unlock`] on the same thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// lock.lock()?.detach();
    /// lock.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn detach(self) {
        self.held.detach();
    }

    /// Whether the lease is known to be lost (see [`crate::LockGuard::lost`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// if guard.is_lost() { eprintln!("stop: the lock is gone"); }
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// How the acquisition went (wait time, what woke it).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// println!("{:?}", guard.acquisition());
    /// # Ok(()) }
    /// ```
    pub fn acquisition(&self) -> Option<&Acquisition> {
        self.held.guard.as_ref().map(|guard| guard.acquisition())
    }

    /// The owner of this hold.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::Lock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// assert_eq!(Some(guard.owner()), Some(lock.owner()));
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> Owner {
        self.held
            .guard
            .as_ref()
            .map_or_else(Owner::current_thread, |guard| guard.owner())
    }
}

/// A blocking handle to a fenced lock; see [`crate::FencedLock`] for the semantics. The owner is
/// the calling thread, or the explicit owner bound with [`with_owner`](FencedLock::with_owner).
/// Releases and queries are the reentrant lock's ([`as_lock`](FencedLock::as_lock)).
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let lock = client.fenced_lock("orders:42");
/// let guard = lock.lock()?;
/// println!("token {}", guard.token());
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedLock {
    /// The blocking reentrant lock of the same name and owner: queries and releases.
    lock: Lock,
    fenced: crate::FencedLock,
}

impl FencedLock {
    /// Runs an acquire of the async lock bound to this handle's owner.
    fn acquire<F: Future<Output = Result<T>>, T>(
        &self,
        acquire: impl FnOnce(crate::FencedLock) -> F,
    ) -> Result<T> {
        let fenced = self.fenced.with_owner(self.owner());
        self.lock.client.block_on(acquire(fenced))?
    }

    fn guard(&self, guard: crate::FencedGuard) -> FencedGuard {
        FencedGuard {
            held: Held::new(guard, &self.lock.client),
        }
    }

    /// The lock's name (the Redis key of its hash).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.fenced_lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.fenced.name()
    }

    /// The same lock acting for `owner` instead of the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) {
    /// let shared = lock.with_owner(ferrisson::Owner::new());
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> FencedLock {
        FencedLock {
            lock: self.lock.with_owner(owner),
            fenced: self.fenced.clone(),
        }
    }

    /// The owner this handle acts for: the bound owner, or the calling thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) {
    /// let me = lock.owner();
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.lock.owner()
    }

    /// The blocking reentrant lock on the same hash and owner (for `unlock`, `force_unlock`
    /// and the queries).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// lock.lock()?.detach();
    /// assert_eq!(lock.as_lock().hold_count()?, 1);
    /// lock.as_lock().unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn as_lock(&self) -> &Lock {
        &self.lock
    }

    /// Blocks until the lock is acquired; watchdog lease.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// let token = lock.lock()?.token();
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> Result<FencedGuard> {
        let guard = self.acquire(|lock| async move { lock.lock().await })?;
        Ok(self.guard(guard))
    }

    /// Blocks until the lock is acquired; fixed `lease`, no watchdog.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn lock_with_lease(&self, lease: Duration) -> Result<FencedGuard> {
        let guard = self.acquire(|lock| async move { lock.lock_with_lease(lease).await })?;
        Ok(self.guard(guard))
    }

    /// One attempt without waiting; watchdog lease.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = lock.try_lock()?.acquired() { guard.unlock()?; }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self) -> Result<Attempt<FencedGuard>> {
        let attempt = self.acquire(|lock| async move { lock.try_lock().await })?;
        Ok(attempt.map(|guard| self.guard(guard)))
    }

    /// Waits at most `wait`; `lease` or the watchdog when `None`.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// let attempt = lock.try_lock_for(std::time::Duration::from_secs(1), None)?;
    /// # Ok(()) }
    /// ```
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Attempt<FencedGuard>> {
        let attempt = self.acquire(|lock| async move { lock.try_lock_for(wait, lease).await })?;
        Ok(attempt.map(|guard| self.guard(guard)))
    }

    /// The last token handed out, `None` before the first (see [`crate::FencedLock::token`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// let last = lock.token()?;
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> Result<Option<u64>> {
        self.lock.client.block_on(self.fenced.token())?
    }

    /// Deletes the lock and its token key, resetting the token sequence (see
    /// [`crate::FencedLock::delete`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// lock.delete()?;
    /// # Ok(()) }
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.lock.client.block_on(self.fenced.delete())?
    }
}

/// One hold of a fenced lock taken through the blocking API, with its token; released when
/// dropped (in the background, without blocking).
///
/// ```no_run
/// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
/// let guard = lock.lock()?;
/// let token = guard.token();
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct FencedGuard {
    held: Held<crate::FencedGuard>,
}

impl FencedGuard {
    /// The token this acquisition took (see [`crate::FencedGuard::token`]); 0 once released.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// assert!(lock.lock()?.token() > 0);
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> u64 {
        self.held
            .guard
            .as_ref()
            .map_or(0, crate::FencedGuard::token)
    }

    /// Releases now: [`Error::LeaseLost`] if the hold had been lost.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// lock.lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> Result<()> {
        self.held.unlock()
    }

    /// Releases now, and settles a release of unknown outcome before answering (see
    /// [`crate::FencedGuard::unlock_settled`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// lock.lock()?.unlock_settled()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock_settled(self) -> Result<()> {
        self.held.unlock_settled()
    }

    /// Keeps the hold without a guard; release it later with the lock's
    /// [`as_lock`](FencedLock::as_lock)`().unlock()` on the same thread.
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// lock.lock()?.detach();
    /// lock.as_lock().unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn detach(self) {
        self.held.detach();
    }

    /// Whether the lease is known to be lost (see [`crate::FencedGuard::lost`]).
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::FencedLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// if guard.is_lost() { eprintln!("stop: the lock is gone"); }
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }
}

impl std::fmt::Debug for FencedGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::FencedGuard")
            .field("guard", &self.held.guard)
            .finish()
    }
}

impl std::fmt::Debug for FencedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::FencedLock")
            .field("name", &self.name())
            .field("owner", &self.lock.owner)
            .finish()
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::LockGuard")
            .field("guard", &self.held.guard)
            .finish()
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Lock")
            .field("name", &self.name())
            .field("owner", &self.owner)
            .finish()
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Client")
            .field("client", &self.inner.client)
            .finish()
    }
}

/// What a blocking guard needs of the async guard it wraps.
trait AsyncGuard {
    fn release(self) -> impl Future<Output = Result<()>>;
    fn detach(self);
    fn is_lost(&self) -> bool;
}

/// An async guard whose release of unknown outcome can be settled (`unlock_settled`).
trait SettledGuard: AsyncGuard {
    fn release_settled(self) -> impl Future<Output = Result<()>>;
}

impl AsyncGuard for crate::LockGuard {
    fn release(self) -> impl Future<Output = Result<()>> {
        self.unlock()
    }
    fn detach(self) {
        crate::LockGuard::detach(self);
    }
    fn is_lost(&self) -> bool {
        crate::LockGuard::is_lost(self)
    }
}

impl SettledGuard for crate::LockGuard {
    fn release_settled(self) -> impl Future<Output = Result<()>> {
        self.unlock_settled()
    }
}

impl SettledGuard for crate::FencedGuard {
    fn release_settled(self) -> impl Future<Output = Result<()>> {
        self.unlock_settled()
    }
}

impl AsyncGuard for crate::FencedGuard {
    fn release(self) -> impl Future<Output = Result<()>> {
        self.unlock()
    }
    fn detach(self) {
        crate::FencedGuard::detach(self);
    }
    fn is_lost(&self) -> bool {
        crate::FencedGuard::is_lost(self)
    }
}

/// The part every blocking guard shares: the async guard and the runtime that serves it.
struct Held<G> {
    /// `None` once released or detached.
    guard: Option<G>,
    /// Keeps the runtime alive for as long as the hold exists.
    client: Arc<Inner>,
}

impl<G: AsyncGuard> Held<G> {
    fn new(guard: G, client: &Arc<Inner>) -> Held<G> {
        Held {
            guard: Some(guard),
            client: Arc::clone(client),
        }
    }

    fn unlock(self) -> Result<()> {
        self.finish(G::release)
    }

    /// Runs `release` on the guard through the client's runtime.
    fn finish<F: Future<Output = Result<()>>>(
        mut self,
        release: impl FnOnce(G) -> F,
    ) -> Result<()> {
        match self.guard.take() {
            Some(guard) => self.client.block_on(release(guard))?,
            // Only consuming methods and `Drop` take the guard.
            None => Ok(()),
        }
    }

    fn detach(mut self) {
        if let Some(guard) = self.guard.take() {
            guard.detach();
        }
    }

    fn is_lost(&self) -> bool {
        self.guard.as_ref().is_none_or(|guard| guard.is_lost())
    }
}

impl<G: SettledGuard> Held<G> {
    fn unlock_settled(self) -> Result<()> {
        self.finish(G::release_settled)
    }
}
