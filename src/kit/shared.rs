//! The client's shared state, which every primitive works through: the connections, the lease
//! table, pub/sub, the janitor and the hand-off queues, and the client's life cycle. The public
//! [`Client`] handle is defined here, below the primitives, so that each primitive adds its own
//! constructor (`impl Client { pub fn lock(..) }`) in its own file; `src/client.rs` connects it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fred::clients::SubscriberClient;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::handoff::Handoffs;
use super::janitor::{Janitor, Releaser};
use super::waits::WaitTable;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::lease::watchdog::LeaseTable;
use crate::transport::keyspace::Keyspace;
use crate::transport::pubsub::PubSub;
use crate::transport::sentinel::Sentinels;
use crate::transport::Redis;

/// A connection to Redis shared by any number of locks: the entry point of the crate.
///
/// A `Client` is cheap to clone (an `Arc` inside); clones share the connections, the client uuid
/// that prefixes every holder field, the pub/sub subscriber and the watchdog. Create one per
/// process (or per Redis deployment) and clone it where needed, as you would a Redisson client.
///
/// Background work (the watchdog, pub/sub dispatch, releases of dropped guards) runs on tasks of
/// the tokio runtime that created the client. They stop after [`shutdown`](Client::shutdown), or
/// when the client, its locks and its guards are all dropped.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.lock("orders:42").lock().await?;
/// // ... the critical section ...
/// guard.unlock().await?;
/// client.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) id: String,
    pub(crate) config: Config,
    pub(crate) redis: Arc<Redis>,
    pub(crate) subscriber: SubscriberClient,
    pub(crate) pubsub: PubSub,
    pub(crate) leases: Arc<LeaseTable>,
    pub(crate) janitor: Janitor,
    pub(crate) handoffs: Arc<Handoffs>,
    /// Behind sentinels: the listeners for their master switches (`sentinel.rs`).
    pub(crate) sentinels: Option<Sentinels>,
    /// Whether the server sends keyspace notifications (the token lock's waiters).
    pub(crate) keyspace: Keyspace,
    /// This client's waits, when it detects deadlocks (`waits.rs`; `None`: detection off).
    pub(crate) waits: Option<Arc<WaitTable>>,
    pub(crate) shut_down: AtomicBool,
    pub(crate) stop: CancellationToken,
    pub(crate) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl ClientInner {
    pub(crate) fn ensure_open(&self) -> Result<()> {
        if self.shut_down.load(Ordering::Acquire) {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    /// Rejects an empty name, and in a cluster a name whose `others` (its channel, other keys)
    /// hash to another slot: the scripts, which take them all as keys, would fail with
    /// CROSSSLOT. Redisson's naming keeps them in the name's slot for plain names and valid
    /// hash tags, not for a `}` without `{` or a `{` without a closing `}` (protocol §15.1).
    /// `others` is called only in a cluster: an acquire elsewhere builds no key names for it.
    pub(crate) fn check_name<const N: usize>(
        &self,
        what: &str,
        name: &str,
        others: impl FnOnce() -> [String; N],
    ) -> Result<()> {
        if name.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "a {what} name must not be empty"
            )));
        }
        if !self.redis.settings.clustered {
            return Ok(());
        }
        let slot = |key: &str| fred::util::redis_keyslot(key.as_bytes());
        match others().into_iter().find(|other| slot(other) != slot(name)) {
            Some(other) => Err(Error::InvalidArgument(format!(
                "{what} name `{name}` cannot be used in a cluster: `{other}` hashes to another \
                 slot (use a plain name or a valid {{hash tag}})"
            ))),
            _ => Ok(()),
        }
    }

    /// What releases need (see [`Releaser`]).
    pub(crate) fn releaser(&self) -> Releaser {
        Releaser {
            redis: Arc::clone(&self.redis),
            handoffs: Arc::clone(&self.handoffs),
            doubts: Arc::clone(&self.leases.doubts),
        }
    }

    /// Classifies an error from fred for an operation on the key `name` (see
    /// [`Error::from_redis`]), and tells the cases where the client itself is gone apart from
    /// an unreachable server.
    pub(crate) fn redis_error(&self, name: &str, err: fred::error::Error) -> Error {
        self.explain(Error::from_redis(
            err,
            name,
            self.redis.settings.response_timeout,
        ))
    }

    /// `err`, or the reason the client cannot work at all: it was shut down, or the runtime that
    /// ran its connections and background tasks is gone (fred then only says that it failed to
    /// send the command to its router task).
    pub(crate) fn explain(&self, err: Error) -> Error {
        if !err.is_transient() && !matches!(err, Error::Redis(_)) {
            return err;
        }
        if self.shut_down.load(Ordering::Acquire) {
            return Error::Shutdown;
        }
        // Our background tasks end only on shutdown or when their runtime drops them.
        if self.tasks.lock().iter().any(|task| task.is_finished()) {
            return Error::RuntimeGone;
        }
        err
    }
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        // The janitor sees its channel close, finishes queued releases and closes connections.
        self.stop.cancel();
    }
}
