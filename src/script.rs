//! The Lua scripts under `lua/`, embedded at build time and run with EVALSHA.
//!
//! A script is sent by its SHA1 first; when the server answers NOSCRIPT (a restart, a
//! `SCRIPT FLUSH`, a failover to a replica that never saw it) it is sent once in full with EVAL,
//! which also caches it again. NOSCRIPT means the script did not run, so the fallback can never
//! run an operation twice.

use fred::clients::Pool;
use fred::interfaces::LuaInterface;
use fred::prelude::Value;

/// One Lua file and its SHA1.
pub(crate) struct Script {
    name: &'static str,
    lua: &'static str,
    sha1: std::sync::OnceLock<String>,
    /// The operation's name inside [`BATCH`], for the scripts that can share a batch.
    pub(crate) batch_operation: Option<&'static str>,
}

impl Script {
    const fn new(name: &'static str, lua: &'static str) -> Script {
        Script {
            name,
            lua,
            sha1: std::sync::OnceLock::new(),
            batch_operation: None,
        }
    }

    const fn batched_as(mut self, operation: &'static str) -> Script {
        self.batch_operation = Some(operation);
        self
    }

    pub(crate) fn sha1(&self) -> &str {
        self.sha1.get_or_init(|| fred::util::sha1_hash(self.lua))
    }

    /// Runs the script: EVALSHA, then EVAL once on NOSCRIPT.
    ///
    /// Sent as custom commands because fred's `WithOptions` wrapper does not apply its options
    /// to the Lua interface; this way `options` (at most one attempt, fail fast, timeout) hold.
    /// The command is routed to the hash slot of the first key, as Redisson does.
    ///
    /// # Cancel safety
    /// Not cancel safe on its own: once the command is written, dropping the future does not stop
    /// the script. Callers that change lock state wrap it in [`crate::lock::InFlight`].
    pub(crate) async fn run<K: AsRef<str> + Sync, A: AsRef<str> + Sync>(
        &'static self,
        redis: &Pool,
        options: &fred::types::config::Options,
        keys: &[K],
        args: &[A],
    ) -> Result<Value, fred::error::Error> {
        use fred::interfaces::ClientLike;
        use fred::types::{ClusterHash, CustomCommand};

        let client = redis.next().with_options(options);
        let route = || match keys.first() {
            Some(key) => ClusterHash::Custom(fred::util::redis_keyslot(key.as_ref().as_bytes())),
            None => ClusterHash::Random,
        };
        // Built again for the rare NOSCRIPT fallback rather than cloned up front: a clone of
        // every argument costs an allocation each (`Bytes` promotion) on every call.
        let command = |head: Value| {
            let mut command: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
            command.push(head);
            command.push(Value::Integer(keys.len() as i64));
            command.extend(keys.iter().map(|key| Value::from(key.as_ref())));
            command.extend(args.iter().map(|arg| Value::from(arg.as_ref())));
            command
        };
        let evalsha = CustomCommand::new_static("EVALSHA", route(), false);
        match client
            .custom::<Value, Value>(evalsha, command(self.sha1().into()))
            .await
        {
            Err(err) if err.details().starts_with("NOSCRIPT") => {
                tracing::debug!(
                    script = self.name,
                    "script not cached by the server; sending it in full"
                );
                client
                    .custom(
                        CustomCommand::new_static("EVAL", route(), false),
                        command(self.lua.into()),
                    )
                    .await
            }
            other => other,
        }
    }
}

/// Acquire or re-enter (protocol §2.2).
pub(crate) static ACQUIRE: Script =
    Script::new("acquire", include_str!("../lua/acquire.lua")).batched_as("acquire");
/// Release one hold, publishing on the full release (§2.3), or hand the lock to a local waiter.
pub(crate) static RELEASE: Script = Script::new(
    "release",
    concat!(
        include_str!("../lua/lib/publish.lua"),
        include_str!("../lua/release.lua")
    ),
)
.batched_as("release");
/// `ACQUIRE` and `RELEASE` calls of several callers in one run (`src/dispatch.rs`): each file
/// becomes a local function of `(KEYS, ARGV)`, so a call runs exactly its own script's steps.
pub(crate) static BATCH: Script = Script::new(
    "batch",
    concat!(
        include_str!("../lua/lib/publish.lua"),
        "local function acquire(KEYS, ARGV)\n",
        include_str!("../lua/acquire.lua"),
        "end\nlocal function release(KEYS, ARGV)\n",
        include_str!("../lua/release.lua"),
        "end\n",
        include_str!("../lua/batch.lua")
    ),
);
/// Delete the lock whoever holds it and publish (§2.4).
pub(crate) static FORCE_RELEASE: Script = Script::new(
    "force_release",
    concat!(
        include_str!("../lua/lib/publish.lua"),
        include_str!("../lua/force_release.lua")
    ),
);
/// Batched watchdog renewal (§3.2).
pub(crate) static RENEW: Script = Script::new("renew", include_str!("../lua/renew.lua"));

/// Read a lock's state for status displays.
pub(crate) static INSPECT: Script = Script::new("inspect", include_str!("../lua/inspect.lua"));

/// Every script, for loading them once at connect time.
pub(crate) static ALL: [&Script; 6] =
    [&ACQUIRE, &RELEASE, &BATCH, &FORCE_RELEASE, &RENEW, &INSPECT];

/// Loads every script into the server's cache (on every primary in a cluster), so that the first
/// lock operations need no fallback. Best effort: EVALSHA's fallback covers any failure.
pub(crate) async fn preload(redis: &Pool, clustered: bool) {
    for script in ALL {
        let loaded = if clustered {
            redis.next().script_load_cluster::<(), _>(script.lua).await
        } else {
            redis
                .next()
                .script_load::<String, _>(script.lua)
                .await
                .map(drop)
        };
        if let Err(err) = loaded {
            tracing::debug!(script = script.name, error = %err, "could not preload script");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_matches_the_file() {
        assert_eq!(ACQUIRE.sha1().len(), 40);
        assert_ne!(ACQUIRE.sha1(), RELEASE.sha1());
        assert_eq!(
            ACQUIRE.sha1(),
            fred::util::sha1_hash(include_str!("../lua/acquire.lua"))
        );
    }
}
