//! The transport: how ferrisson talks to Redis. The command connections ([`Redis`]: the pool,
//! the write and read options, lock calls through the dispatcher, queries), the Lua scripts
//! ([`script`]), the batching dispatcher ([`dispatch`]), replica-synced writes
//! ([`replica_sync`]), pub/sub ([`pubsub`]), Sentinel master switches ([`sentinel`]) and TLS
//! ([`tls`]). It knows lock calls only as scripts and their arguments; nothing here depends on
//! the lease table, the lock kit or the primitives above it.

pub(crate) mod dispatch;
pub(crate) mod keyspace;
/// The model checks' in-memory server (`crate::model`).
#[cfg(test)]
pub(crate) mod model_server;
pub(crate) mod pubsub;
pub(crate) mod replica_sync;
pub(crate) mod script;
pub(crate) mod sentinel;
pub(crate) mod tls;

use arcstr::ArcStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Pool;
use fred::error::Error as RedisError;
use fred::interfaces::ClientLike;
use fred::types::config::Options;
use fred::types::Value;

use dispatch::Dispatcher;
use replica_sync::ReplicaSync;
use script::{Heir, LockCall, Release, ReleaseScript, Script};

/// What takes back an acquisition that no replica acknowledged (synced writes).
pub(crate) enum Rollback {
    /// Release the hold it took, as the kit releases it.
    Hold(Release),
    /// Run the primitive's own undo of `name` (a semaphore gives its permits back).
    Write {
        name: ArcStr,
        script: &'static Script,
        encoded: script::Encoded,
    },
}

/// The error of an acquisition of `name` that was rolled back.
fn not_replicated(name: &str) -> RedisError {
    RedisError::new(
        fred::error::ErrorKind::Unknown,
        format!(
            "{}: no replica acknowledged the acquisition of `{name}`",
            replica_sync::NOT_REPLICATED
        ),
    )
}

/// A call that failed because the task that carried it is gone: the runtime that ran the
/// connection's tasks shut down (or the client was closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gone {
    /// Never sent: fred's router task was gone (or never started) when the call came.
    Unsent,
    /// Cut off: the task that had the call was dropped before it answered, so the call may or
    /// may not have reached the server.
    CutOff,
}

impl Gone {
    /// What `err` says of the task that carried the call, if it says it is gone.
    pub(crate) fn of(err: &RedisError) -> Option<Gone> {
        use fred::error::ErrorKind;
        match (err.kind(), err.details()) {
            // fred's, when its router task is gone or was never started.
            (
                ErrorKind::Unknown,
                "Failed to send command to router." | "Client is not initialized.",
            ) => Some(Gone::Unsent),
            // A reply channel whose sender was dropped with its task (tokio's `RecvError`).
            (ErrorKind::Unknown, "channel closed") => Some(Gone::CutOff),
            // The dispatcher's, for calls it had when its task was dropped.
            (ErrorKind::Canceled, dispatch::CLOSED) => Some(Gone::CutOff),
            _ => None,
        }
    }
}

/// Takes back one counted in a counter when dropped (also when the future that holds it is): a
/// direct call in `Dispatcher::busy`, a parked waiter of a channel.
pub(crate) struct Counted<'a>(pub(crate) &'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The command connections and how lock commands are sent on them.
pub(crate) struct Redis {
    pub(crate) pool: Pool,
    /// Batches concurrent lock scripts (in a cluster, one batch per node).
    pub(crate) dispatcher: Dispatcher,
    pub(crate) settings: Settings,
}

/// What a [`Redis`] is made of besides its pool: the client's settings for lock commands.
#[derive(Clone)]
pub(crate) struct Settings {
    /// For scripts that change a lock: never re-sent after a connection loss (a second run could
    /// take or release a hold twice), failing fast when the connection is down.
    pub(crate) write_options: Options,
    /// For read-only queries.
    pub(crate) read_options: Options,
    pub(crate) clustered: bool,
    pub(crate) publish_arg: &'static str,
    pub(crate) response_timeout: Duration,
    /// Synced writes (`src/transport/replica_sync.rs`); `None` when off.
    pub(crate) sync: Option<Arc<ReplicaSync>>,
}

impl Redis {
    /// The command connections over `pool` (connected or not), with their dispatcher, whose
    /// task runs on the current runtime and ends with the returned `Redis`.
    pub(crate) fn open(pool: Pool, settings: Settings) -> (Redis, tokio::task::JoinHandle<()>) {
        let (dispatcher, task) = Dispatcher::start(
            pool.clone(),
            settings.write_options.clone(),
            settings.sync.clone(),
            settings.clustered,
        );
        let redis = Redis {
            pool,
            dispatcher,
            settings,
        };
        (redis, task)
    }

    /// Runs an acquire or release script call with `write_options` through the dispatcher
    /// (it batches concurrent calls). Cancel safety as [`Script::run_encoded`].
    ///
    /// With synced writes, an acquisition that no replica acknowledged is rolled back here (one
    /// `RELEASE` of the hold it added) and fails with [`replica_sync::NOT_REPLICATED`]
    /// (`Error::NotReplicated`); the rollback's own failure is returned instead, so that an
    /// unknown outcome still puts the field in doubt. An unacknowledged release is logged: it
    /// did happen on the master, and sending it again could take a second hold.
    pub(crate) async fn run_lock_call(&self, call: LockCall) -> Result<Value, RedisError> {
        if self.settings.sync.is_some() {
            // Boxed, to keep the common future small (see `lock_call_futures_stay_small`).
            return Box::pin(self.run_synced(call)).await;
        }
        self.dispatcher.run(call).await.map(|(value, _)| value)
    }

    /// [`Redis::run_lock_call`] with synced writes: what an unacknowledged write means.
    async fn run_synced(&self, call: LockCall) -> Result<Value, RedisError> {
        let rollback = match &call {
            LockCall::Acquire {
                name,
                field,
                lease_ms,
                op,
            } => Some(Release {
                name: ArcStr::clone(name),
                field: ArcStr::clone(field),
                lease_ms: *lease_ms,
                script: op.release,
            }),
            LockCall::Release { .. } => None,
        };
        let name = call.name();
        let (value, replicated) = self.dispatcher.run(call).await?;
        if replicated.is_synced() {
            return Ok(value);
        }
        match (rollback, &value) {
            // Acquired (nil), but a failover could lose it: take the hold back.
            (Some(rollback), Value::Null) => self.roll_back(Rollback::Hold(rollback)).await,
            // Refused (a TTL): nothing was written.
            (Some(_), _) => Ok(value),
            (None, _) => {
                tracing::warn!(
                    lock = %name,
                    "no replica acknowledged a release; after a failover the lock may come back until its lease ends"
                );
                Ok(value)
            }
        }
    }

    /// Runs a primitive's own acquire script (never batched), its keys and arguments encoded
    /// ([`script::encode`], or [`script::ScriptArgs::bytes`] for arguments that are not text),
    /// with `write_options`. With synced writes it is followed by `WAIT`, and an acquisition
    /// (`acquired` reads the reply) that no replica acknowledged is rolled back as in
    /// [`Redis::run_lock_call`] (one `RELEASE` of `rollback`). Cancel safety as
    /// [`Script::run_encoded`].
    pub(crate) async fn run_acquire_encoded(
        &self,
        script: &'static Script,
        encoded: &script::Encoded,
        acquired: fn(&Value) -> bool,
        rollback: Rollback,
    ) -> Result<Value, RedisError> {
        let sync = self.settings.sync.as_deref();
        let (value, replicated) = script
            .run_synced(&self.pool, &self.settings.write_options, encoded, sync)
            .await?;
        if replicated.is_synced() || !acquired(&value) {
            return Ok(value);
        }
        self.roll_back(rollback).await
    }

    /// Runs a primitive's own release script (`release.script`; never batched), handing the
    /// lock to `to` when the script hands over, with `write_options`, followed by `WAIT` with
    /// synced writes. An unacknowledged release is
    /// logged, as in [`Redis::run_lock_call`]. Cancel safety as [`Script::run_encoded`].
    pub(crate) async fn run_release(
        &self,
        release: &Release,
        by: &'static ReleaseScript,
        to: Option<&Heir>,
    ) -> Result<Value, RedisError> {
        let encoded = match (to, &by.hand_off) {
            (Some(heir), Some(hand_off)) => {
                (hand_off.encode)(release, self.settings.publish_arg, heir)
            }
            _ => (by.encode)(release, self.settings.publish_arg),
        };
        self.run_write(&release.name, by.script, &encoded).await
    }

    /// Runs a primitive's own write of `name` (a release, a semaphore's give-back or change)
    /// alone with `write_options`, followed by `WAIT` with synced writes; an unacknowledged
    /// write is logged, as in [`Redis::run_lock_call`].
    pub(crate) async fn run_write(
        &self,
        name: &str,
        script: &'static Script,
        encoded: &script::Encoded,
    ) -> Result<Value, RedisError> {
        let sync = self.settings.sync.as_deref();
        let (value, replicated) = script
            .run_synced(&self.pool, &self.settings.write_options, encoded, sync)
            .await?;
        if !replicated.is_synced() {
            tracing::warn!(
                key = %name,
                "no replica acknowledged a write; after a failover it may be undone"
            );
        }
        Ok(value)
    }

    /// Releases the one hold an unreplicated acquisition added.
    async fn roll_back(&self, undo: Rollback) -> Result<Value, RedisError> {
        let (name, script, encoded) = match undo {
            Rollback::Write {
                name,
                script,
                encoded,
            } => (name, script, encoded),
            Rollback::Hold(hold) => {
                let name = ArcStr::clone(&hold.name);
                let (script, encoded) = match hold.script {
                    Some(by) => (by.script, (by.encode)(&hold, self.settings.publish_arg)),
                    None => {
                        let release = LockCall::Release {
                            release: hold,
                            publish: self.settings.publish_arg,
                            to: None,
                        };
                        (release.script(), release.encode())
                    }
                };
                (name, script, encoded)
            }
        };
        tracing::warn!(lock = %name, "no replica acknowledged the acquisition; rolling it back");
        script
            .run_encoded(&self.pool, &self.settings.write_options, &encoded)
            .await?;
        Err(not_replicated(&name))
    }

    /// Sends one read-only command about `key` (routed to its hash slot) with the read options:
    /// `COMMAND key extra...`.
    pub(crate) async fn query<T: fred::types::FromValue>(
        &self,
        command: &'static str,
        key: &str,
        extra: &[&str],
    ) -> Result<T, RedisError> {
        use fred::types::CustomCommand;
        let mut args = Vec::with_capacity(1 + extra.len());
        args.push(Value::from(key));
        args.extend(extra.iter().map(|arg| Value::from(*arg)));
        let slot = fred::util::redis_keyslot(key.as_bytes());
        script::resend_redirected(command, &self.pool, Some(slot), |route| {
            let client = self
                .pool
                .next()
                .with_options(&route.options(&self.settings.read_options));
            let command = CustomCommand::new_static(command, route.hash(), false);
            let args = args.clone();
            async move {
                // Back to back on the migration target's connection: `ASKING` lets it in.
                let (asked, reply) =
                    futures::join!(route.asking(&client), client.custom(command, args));
                asked.transpose()?;
                reply
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every acquire and release future is boxed once (into `InFlight`) and moved around by
    /// value before that: a lock call future that embedded fred's command future inline (several
    /// KB) made each call copy kilobytes.
    #[tokio::test]
    async fn lock_call_futures_stay_small() {
        fn size<F: std::future::Future>(_: &F) -> usize {
            std::mem::size_of::<F>()
        }
        let pool = Pool::new(fred::types::config::Config::default(), None, None, None, 1)
            .expect("a pool that is not connected yet");
        let call = || LockCall::Acquire {
            name: "lock".into(),
            field: "client:1".into(),
            lease_ms: 1000,
            op: &script::REENTRANT_ACQUIRE,
        };
        for clustered in [false, true] {
            let settings = Settings {
                write_options: Options::default(),
                read_options: Options::default(),
                clustered,
                publish_arg: "PUBLISH",
                response_timeout: Duration::from_secs(1),
                sync: None,
            };
            let (redis, task) = Redis::open(pool.clone(), settings);
            let future = redis.run_lock_call(call());
            assert!(size(&future) <= 256, "{} bytes", size(&future));
            drop(future);
            drop(redis);
            task.await.expect("the dispatcher ends with its sender");
        }
    }
}
