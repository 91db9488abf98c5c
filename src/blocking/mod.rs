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
//!     if let Some(guard) = lock.try_lock_within(Duration::from_millis(100))?.acquired() {
//!         guard.unlock()?;
//!     }
//!     Ok(())
//! }
//! ```

mod handle;
mod inspect;
mod latch;
mod multi;
mod permit_semaphore;
mod read_write;
mod semaphore;

use std::future::Future;
use std::sync::Arc;

pub use handle::{FairGuard, FairLock, FencedGuard, FencedLock, Guard, Handle, Lock, LockGuard};
pub use handle::{NonReentrantFairGuard, NonReentrantFairLock, NonReentrantGuard};
pub use handle::{NonReentrantLock, SpinGuard, SpinLock, TokenGuard, TokenLock};
pub use latch::CountDownLatch;
pub use multi::{MultiGuard, MultiLock, RedLock};
pub use permit_semaphore::{Permit, PermitExpirableSemaphore};
pub use read_write::{ReadGuard, ReadLock, ReadWriteLock, WriteGuard, WriteLock};
pub use semaphore::{Semaphore, SemaphorePermits};

use crate::error::{Error, Result};
use crate::inspect::LockInfo;
use crate::Config;

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

/// The runtime has no useful `Debug`; the async client is shown by [`Client`]'s.
impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("..")
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

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Client")
            .field("client", &self.inner.client)
            .finish()
    }
}

/// Writes blocking twins of async methods. Each `fn` runs the async method of the same name on
/// `self.$on()` on the client's runtime and returns its result, wrapped into the blocking type
/// when marked `=> wrap`. The generated doc links the async method (which has the semantics and
/// the cancel-safety notes) and shows `$example` with `$var`, a `ferrisson::blocking::$twin`.
macro_rules! twins {
    ($var:ident: $twin:literal, $async:literal, on $on:ident; $(
        $(#[$meta:meta])*
        fn $name:ident($($arg:ident: $ty:ty),*) -> $out:ty $(=> $wrap:ident)?, $example:literal;
    )*) => {$(
        $(#[$meta])*
        #[doc = concat!("\n\nThe blocking twin of [`", $async, "::", stringify!($name), "`].")]
        #[doc = concat!("\n```no_run\n# fn demo(", stringify!($var), ": ferrisson::blocking::", $twin,
            ") -> ferrisson::Result<()> {\n", $example, "\n# Ok(()) }\n```")]
        pub fn $name(&self, $($arg: $ty),*) -> Result<$out> {
            let out = self.client.block_on(self.$on().$name($($arg),*))??;
            $(let out = $crate::blocking::Wrap::$wrap(out, &self.client);)?
            Ok(out)
        }
    )*};
}
use twins;

/// Implements [`Wrap`] for the async guard `$async`, whose blocking twin `$twin` holds it in a
/// [`Held`].
macro_rules! wrap_in_held {
    ($async:ty => $twin:ident $(<$p:ident: $bound:path>)?) => {
        impl$(<$p: $bound>)? $crate::blocking::Wrap for $async {
            type Blocking = $twin$(<$p>)?;
            fn wrap(self, client: &Arc<$crate::blocking::Inner>) -> Self::Blocking {
                $twin {
                    held: $crate::blocking::Held::new(self, client),
                }
            }
        }
    };
}
use wrap_in_held;

/// An async value and its blocking twin: a guard and the blocking guard that holds it.
trait Wrap {
    type Blocking;
    fn wrap(self, client: &Arc<Inner>) -> Self::Blocking;
}

impl<G: Wrap> Wrap for crate::kit::Attempt<G> {
    type Blocking = crate::kit::Attempt<G::Blocking>;
    fn wrap(self, client: &Arc<Inner>) -> Self::Blocking {
        self.map(|guard| guard.wrap(client))
    }
}

/// What a blocking guard needs of the async guard it wraps.
trait AsyncGuard {
    fn release(self) -> impl Future<Output = Result<()>>;
    fn detach(self);
    fn is_lost(&self) -> bool;
}

/// The part every blocking guard shares: the async guard and the runtime that serves it.
#[derive(Debug)]
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

    /// The async guard, unless released or detached.
    fn get(&self) -> Option<&G> {
        self.guard.as_ref()
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
