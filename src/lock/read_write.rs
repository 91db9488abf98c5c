//! The read-write lock, Redisson's `RReadWriteLock` (protocol §5): many readers or one writer on
//! one hash, with a timeout key per read hold.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::reentrant::Lock;
use crate::error::{Error, Result};
use crate::kit::acquire::acquire_call;
use crate::kit::hold::Hold;
use crate::kit::janitor::Release;
use crate::kit::release::send_release;
use crate::kit::wait::{
    acquire_with_wait, lock_wake, no_hand_off, script_error, TryOutcome, Waiter,
};
use crate::kit::{Acquisition, Attempt, Client};
use crate::lease::watchdog::{HoldKey, Lease};
use crate::name;
use crate::owner::{holder_field, Owner};
use crate::transport::script::{self, Encoded, ReleaseScript, Script};

/// Prepends the publish prelude and the read-write lock's functions (`lua/read_write_lock.lua`)
/// to one call line.
macro_rules! read_write_script {
    ($name:literal, $call:literal) => {
        Script::new(
            $name,
            concat!(
                include_str!("../../lua/lib/publish.lua"),
                include_str!("../../lua/lib/read_hold_gone.lua"),
                include_str!("../../lua/read_write_lock.lua"),
                $call
            ),
        )
    };
}

static READ_ACQUIRE: Script = read_write_script!(
    "read_acquire",
    "return read_acquire(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])\n"
);
static WRITE_ACQUIRE: Script = read_write_script!(
    "write_acquire",
    "return write_acquire(KEYS[1], ARGV[1], ARGV[2], ARGV[3])\n"
);
static READ_RELEASE_SCRIPT: Script = read_write_script!(
    "read_release",
    "return read_release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])\n"
);
static WRITE_RELEASE_SCRIPT: Script = read_write_script!(
    "write_release",
    "return write_release(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])\n"
);
static FORCE_RELEASE: Script = read_write_script!(
    "read_write_force_release",
    "return force_release(KEYS[1], KEYS[2], ARGV[1], ARGV[2])\n"
);
static READ_IS_LOCKED: Script =
    read_write_script!("read_is_locked", "return read_is_locked(KEYS[1])\n");

/// How the kit releases a read hold (guards, dropped guards, undone acquires, rollbacks).
static READ_RELEASE: ReleaseScript = ReleaseScript {
    script: &READ_RELEASE_SCRIPT,
    encode: encode_read_release,
};

/// How the kit releases a write hold.
static WRITE_RELEASE: ReleaseScript = ReleaseScript {
    script: &WRITE_RELEASE_SCRIPT,
    encode: encode_write_release,
};

/// `read_release`'s keys and arguments (`lua/read_write_lock.lua`). The lease is not sent: a
/// read release re-arms the hash from the readers' timeout keys instead.
fn encode_read_release(release: &Release, publish: &'static str) -> Encoded {
    let name = &*release.name;
    let channel = name::rwlock_channel(name);
    let prefix = name::read_timeout_prefix(name, &release.field);
    let tag = name::tagged(name);
    script::encode(
        &[name, channel.as_str(), prefix.as_str(), tag.as_str()],
        &[publish, &*release.field],
    )
}

/// `write_release`'s keys and arguments (`lua/read_write_lock.lua`).
fn encode_write_release(release: &Release, publish: &'static str) -> Encoded {
    let name = &*release.name;
    let channel = name::rwlock_channel(name);
    let lease = release.lease_ms.to_string();
    script::encode(
        &[name, channel.as_str()],
        &[lease.as_str(), &*release.field, publish],
    )
}

/// Both sides' waiters park on the one channel `redisson_rwlock:` + T(N) (a read release sends
/// `0`, which wakes one waiter per client; a write release `1`, which wakes them all).
fn rwlock_channel(name: &str, _field: &str) -> String {
    name::rwlock_channel(name)
}

/// A read-write lock on the same Redis keys as Java Redisson's `RReadWriteLock`: any number of
/// readers, or one writer.
///
/// Get each side with [`read_lock`](ReadWriteLock::read_lock) and
/// [`write_lock`](ReadWriteLock::write_lock). Both sides are reentrant per [`Owner`] (the current
/// task, or an explicit owner), as Redisson's are per thread, and:
/// * a writer may also take read holds (the **downgrade**): after it releases its write hold,
///   its read holds remain and other readers may join;
/// * a reader may **not** upgrade: while other readers could hold too, the write lock waits for
///   every read hold to go, its owner's own included, so an owner that holds only read holds
///   would wait for itself. [`WriteLock::try_lock`] and [`WriteLock::try_lock_for`] report
///   [`Attempt::Busy`] then (as Redisson's `tryLock` returns `false`), and [`WriteLock::lock`]
///   fails at once with [`Error::UpgradeRefused`] instead of hanging as Redisson's `lock()` does.
///   Release the read holds first.
///
/// On Redis the lock is a hash at the name: `mode` (`read` or `write`), each reader's field
/// `<client uuid>:<owner id>` with its read-hold count, and the writer's field `…:write` with
/// its write-hold count; every read hold k has a key `{name}:<field>:rwlock_timeout:k` whose TTL
/// is that hold's lease. Those keys keep our read holds alive when a Java reader releases
/// (Redisson's release deletes the hash once no reader's timeout key is left), and the watchdog
/// renews them with the hash.
///
/// # Cancel safety
/// Every acquire method is cancel safe: a dropped acquire never leaves a hold, and never leaks
/// a subscription.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
/// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
/// let rw = client.read_write_lock("catalog");
///
/// let reading = rw.read_lock().lock().await?; // readers share the lock
/// reading.unlock().await?;
///
/// let writing = rw.write_lock().lock().await?; // the writer excludes everyone else
/// let downgrade = rw.read_lock().lock().await?; // but may read too
/// writing.unlock().await?; // still held for reading
/// downgrade.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    lock: Lock,
}

impl Client {
    /// A handle to the read-write lock named `name` (Redisson's `getReadWriteLock(name)`).
    ///
    /// This sends nothing to Redis. An empty name is reported by the lock's operations as
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// let rw = client.read_write_lock("catalog");
    /// assert_eq!(rw.name(), "catalog");
    /// # }
    /// ```
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock {
            lock: self.lock(name),
        }
    }
}

impl ReadWriteLock {
    /// The lock's name, which is also the Redis key of its hash.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.read_write_lock("catalog").name(), "catalog");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The same lock, operated on behalf of `owner` instead of the current task (see
    /// [`Lock::with_owner`]).
    ///
    /// ```no_run
    /// # fn demo(rw: ferrisson::ReadWriteLock) {
    /// let owner = ferrisson::Owner::new();
    /// assert_eq!(rw.with_owner(owner).owner(), owner);
    /// # }
    /// ```
    pub fn with_owner(&self, owner: Owner) -> ReadWriteLock {
        ReadWriteLock {
            lock: self.lock.with_owner(owner),
        }
    }

    /// The owner this handle acts for: the bound explicit owner, or the current task.
    ///
    /// ```no_run
    /// # fn demo(rw: ferrisson::ReadWriteLock) {
    /// assert_eq!(rw.owner(), ferrisson::Owner::current());
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.lock.owner()
    }

    /// The read side: shared with other readers (Redisson's `readLock()`).
    ///
    /// ```no_run
    /// # async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {
    /// let guard = rw.read_lock().lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn read_lock(&self) -> ReadLock {
        ReadLock {
            side: SideLock {
                lock: self.lock.clone(),
                side: Side::Read,
            },
        }
    }

    /// The write side: exclusive (Redisson's `writeLock()`).
    ///
    /// ```no_run
    /// # async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {
    /// let guard = rw.write_lock().lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn write_lock(&self) -> WriteLock {
        WriteLock {
            side: SideLock {
                lock: self.lock.clone(),
                side: Side::Write,
            },
        }
    }
}

impl std::fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.name())
            .finish()
    }
}

/// The read side of a [`ReadWriteLock`]: held by any number of owners at once, unless an owner
/// writes (that owner may read too).
///
/// Each read hold writes its own timeout key (see [`ReadWriteLock`]). A read release deletes
/// the hash, and publishes `0` on `redisson_rwlock:{name}` (waking one waiter per client), only
/// when no read hold of anyone is left.
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let read = client.read_write_lock("catalog").read_lock();
/// let first = read.lock().await?;
/// let again = read.lock().await?; // re-enters
/// assert_eq!(read.hold_count().await?, 2);
/// again.unlock().await?;
/// first.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadLock {
    side: SideLock,
}

/// The write side of a [`ReadWriteLock`]: one owner at a time, and no reader meanwhile except
/// that owner itself.
///
/// A write re-entry adds its lease to the hash's remaining TTL (Redisson's rule). The last
/// write release deletes the hash and publishes `1` on `redisson_rwlock:{name}`, which wakes
/// every waiter of every client; if the owner still holds read holds, the lock turns to read
/// mode instead, silently. An owner that holds only read holds cannot take the write lock (see
/// [`ReadWriteLock`]): [`lock`](WriteLock::lock) fails with [`Error::UpgradeRefused`].
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let write = client.read_write_lock("catalog").write_lock();
/// let guard = write.lock().await?;
/// assert!(write.is_locked().await?);
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WriteLock {
    side: SideLock,
}

impl ReadLock {
    /// Whether the read side is held: the lock is in read mode, or a writer holds read holds
    /// too. Redisson 3.24+'s `isLocked()` (up to 3.23 it tested read mode only).
    ///
    /// ```no_run
    /// # async fn demo(read: ferrisson::ReadLock) -> ferrisson::Result<()> {
    /// let _guard = read.lock().await?;
    /// assert!(read.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let lock = &self.side.lock;
        let client = lock.client();
        client.ensure_open()?;
        lock.check_name()?;
        let reply = READ_IS_LOCKED
            .run(
                &client.redis.pool,
                &client.redis.read_options,
                &[lock.name()],
                &[] as &[&str],
            )
            .await
            .map_err(|err| script_error(client, lock.name(), err))?;
        Ok(reply.as_i64() == Some(1))
    }
}

impl WriteLock {
    /// Whether the write side is held: the lock is in write mode (Redisson's `isLocked()`).
    ///
    /// ```no_run
    /// # async fn demo(write: ferrisson::WriteLock) -> ferrisson::Result<()> {
    /// let _guard = write.lock().await?;
    /// assert!(write.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let mode: Option<String> = self.side.query("HGET", "mode").await?;
        Ok(mode.as_deref() == Some("write"))
    }
}

/// Which side of the lock: what differs between them is data, so that the wait loop, the
/// queries and the guards are written once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Read,
    Write,
}

impl Side {
    /// The `mode` value of the side, also the force-release script's argument.
    fn mode(self) -> &'static str {
        match self {
            Side::Read => "read",
            Side::Write => "write",
        }
    }

    /// The hash field of an owner whose read field is `read_field`.
    fn field(self, read_field: &Arc<str>) -> Arc<str> {
        match self {
            Side::Read => Arc::clone(read_field),
            Side::Write => format!("{read_field}:write").into(),
        }
    }

    fn release_by(self) -> &'static ReleaseScript {
        match self {
            Side::Read => &READ_RELEASE,
            Side::Write => &WRITE_RELEASE,
        }
    }
}

/// One side of the lock, bound to an owner or not: what [`ReadLock`] and [`WriteLock`] share.
#[derive(Clone)]
struct SideLock {
    lock: Lock,
    side: Side,
}

impl SideLock {
    fn with_owner(&self, owner: Owner) -> SideLock {
        SideLock {
            lock: self.lock.with_owner(owner),
            side: self.side,
        }
    }

    /// This side's field for `owner`, and the owner's read field.
    fn fields(&self, owner: Owner) -> (Arc<str>, Arc<str>) {
        let read_field = holder_field(&self.lock.client().id, owner);
        (self.side.field(&read_field), read_field)
    }

    /// The acquire path: `lease` None = watchdog; `wait` None = no limit. The hold comes with
    /// this side bound to the owner that holds.
    async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<(SideLock, Hold)>> {
        let lock = &self.lock;
        let (lease_kind, lease_ms) = lock.acquire_lease(lease, wait)?;
        let client = lock.client();
        let owner = lock.owner();
        let (field, read_field) = self.fields(owner);
        let span = tracing::debug_span!("ferrisson.acquire", lock = %lock.name(), owner = owner.id(), side = self.side.mode());
        // An upgrade would wait for itself: only an unbounded wait reports it as an error.
        let refuse_upgrade = wait.is_none();
        let attempt = || {
            self.attempt(
                Arc::clone(&field),
                Arc::clone(&read_field),
                lease_kind,
                lease_ms,
                refuse_upgrade,
            )
        };
        let waiter = Waiter {
            name: lock.name_arc(),
            field: Arc::clone(&field),
            lease_ms,
            channel: rwlock_channel,
            wake: lock_wake,
        };
        let acquired = tracing::Instrument::instrument(
            // No local hand-offs: only `RELEASE`'s hash knows them.
            acquire_with_wait(client, &waiter, wait, attempt, no_hand_off()),
            span,
        )
        .await?;
        Ok(
            acquired.map(|(mut hold, acquisition): (Hold, Acquisition)| {
                hold.set_acquisition(acquisition);
                (self.with_owner(owner), hold)
            }),
        )
    }

    /// One run of the side's acquire script, made cancel safe by the kit; on success the hold
    /// is registered before anything else can be awaited.
    async fn attempt(
        &self,
        field: Arc<str>,
        read_field: Arc<str>,
        lease: Lease,
        lease_ms: u64,
        refuse_upgrade: bool,
    ) -> Result<TryOutcome<Hold>> {
        let lock = &self.lock;
        let client = lock.client();
        let redis = Arc::clone(&client.redis);
        let name = lock.name_arc();
        let key = HoldKey {
            name: Arc::clone(&name),
            field: Arc::clone(&field),
        };
        let lease_arg: Arc<str> = lease_ms.to_string().into();
        let (script, keys, args): (&'static Script, Vec<Arc<str>>, [Arc<str>; 3]) = match self.side
        {
            Side::Read => (
                &READ_ACQUIRE,
                vec![
                    Arc::clone(&name),
                    name::read_timeout_prefix(&name, &field).into(),
                ],
                [
                    lease_arg,
                    Arc::clone(&field),
                    Side::Write.field(&read_field),
                ],
            ),
            Side::Write => (
                &WRITE_ACQUIRE,
                vec![Arc::clone(&name)],
                [lease_arg, Arc::clone(&field), read_field],
            ),
        };
        let release_by = self.side.release_by();
        let rollback = Release {
            name,
            field: Arc::clone(&field),
            lease_ms,
            script: Some(release_by),
        };
        // Boxed: the script call's future is several KB (see `FencedLock::attempt`).
        let send = async move {
            let call = redis.run_acquire(script, &keys, &args, Value::is_null, rollback);
            Box::pin(call).await
        };
        let read =
            |reply: std::result::Result<Value, fred::error::Error>, sent_at: Instant| match reply
                .map_err(|err| script_error(client, lock.name(), err))?
            {
                Value::Null => {
                    let (hold, reentered) =
                        Hold::acquired(lock.client_arc(), &key, lease, sent_at, Some(release_by));
                    Ok(TryOutcome::Acquired(hold, reentered))
                }
                Value::Integer(ttl) => Ok(TryOutcome::Busy(ttl)),
                Value::Array(parts) if refuse_upgrade && is_upgrade(&parts) => {
                    Err(Error::UpgradeRefused {
                        name: lock.name().to_owned(),
                    })
                }
                Value::Array(parts) if is_upgrade(&parts) => match parts.first() {
                    Some(Value::Integer(ttl)) => Ok(TryOutcome::Busy(*ttl)),
                    _ => Err(unexpected(&Value::Array(parts))),
                },
                other => Err(unexpected(&other)),
            };
        acquire_call(
            client,
            &key,
            lease_ms,
            Some(release_by),
            Value::is_null,
            send,
            read,
        )
        .await
    }

    /// Releases one hold of this handle's owner on this side, Redisson style.
    async fn unlock(&self) -> Result<()> {
        let lock = &self.lock;
        let client = lock.client();
        client.ensure_open()?;
        lock.check_name()?;
        let (field, _) = self.fields(lock.owner());
        let key = HoldKey {
            name: lock.name_arc(),
            field: Arc::clone(&field),
        };
        let call = client.leases.doubts.enter();
        let lease_ms = client.leases.released_by_key(&key);
        let release = Release {
            name: lock.name_arc(),
            field,
            lease_ms,
            script: Some(self.side.release_by()),
        };
        // An unknown outcome is `Error::ReleaseUnknown`, never `Ok`.
        match send_release(client, &release, call)
            .await?
            .reply(lock.name())?
        {
            Value::Null => Err(Error::NotHeld {
                name: lock.name().to_owned(),
            }),
            _ => Ok(()),
        }
    }

    /// Deletes the lock if it is in this side's mode, and publishes the side's message.
    async fn force_unlock(&self) -> Result<bool> {
        let lock = &self.lock;
        let client = lock.client();
        client.ensure_open()?;
        lock.check_name()?;
        let channel = name::rwlock_channel(lock.name());
        let reply = FORCE_RELEASE
            .run(
                &client.redis.pool,
                &client.redis.write_options,
                &[lock.name(), channel.as_str()],
                &[self.side.mode(), client.redis.publish_arg],
            )
            .await
            .map_err(|err| script_error(client, lock.name(), err))?;
        Ok(reply.as_i64() == Some(1))
    }

    async fn hold_count(&self) -> Result<u64> {
        let (field, _) = self.fields(self.lock.owner());
        let count: Option<u64> = self.query("HGET", &field).await?;
        Ok(count.unwrap_or(0))
    }

    async fn is_held_by_current_owner(&self) -> Result<bool> {
        let (field, _) = self.fields(self.lock.owner());
        self.query("HEXISTS", &field).await
    }

    /// A read-only command about the lock's hash: `COMMAND name field`.
    async fn query<T: fred::types::FromValue>(
        &self,
        command: &'static str,
        field: &str,
    ) -> Result<T> {
        let lock = &self.lock;
        let client = lock.client();
        client.ensure_open()?;
        lock.check_name()?;
        client
            .redis
            .query(command, lock.name(), &[field])
            .await
            .map_err(|err| script_error(client, lock.name(), err))
    }
}

/// `write_acquire`'s reply when the caller holds read holds: `[PTTL, "upgrade"]`.
fn is_upgrade(parts: &[Value]) -> bool {
    matches!(parts, [Value::Integer(_), Value::String(tag)] if &**tag == "upgrade")
}

fn unexpected(reply: &Value) -> Error {
    Error::Redis(fred::error::Error::new(
        fred::error::ErrorKind::Protocol,
        format!(
            "unexpected reply to a read-write lock's acquire script: {}",
            crate::shown::Reply(reply)
        ),
    ))
}

/// One hold of the read side, released when dropped (in the background).
///
/// ```no_run
/// # async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {
/// let guard = rw.read_lock().lock().await?;
/// // ... read ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct ReadGuard {
    /// Bound to the owner that holds.
    lock: ReadLock,
    hold: Hold,
}

/// One hold of the write side, released when dropped (in the background).
///
/// ```no_run
/// # async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {
/// let guard = rw.write_lock().lock().await?;
/// // ... write ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct WriteGuard {
    /// Bound to the owner that holds.
    lock: WriteLock,
    hold: Hold,
}

/// The methods both sides and both guards share, documented once for each side (`$getter`:
/// `read_lock` or `write_lock`).
macro_rules! side_api {
    ($Lock:ident, $Guard:ident, $getter:literal, $what:literal) => {
        impl $Lock {
            /// The lock's name, which is also the Redis key of its hash.
            ///
            #[doc = concat!("```no_run\n# fn demo(client: ferrisson::Client) {\nlet lock = client.read_write_lock(\"catalog\").", $getter, "();\nassert_eq!(lock.name(), \"catalog\");\n# }\n```")]
            pub fn name(&self) -> &str {
                self.side.lock.name()
            }

            /// The same side, operated on behalf of `owner` instead of the current task (see
            /// [`Lock::with_owner`]).
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::ReadWriteLock) {\nlet owner = ferrisson::Owner::new();\nassert_eq!(rw.", $getter, "().with_owner(owner).owner(), owner);\n# }\n```")]
            pub fn with_owner(&self, owner: Owner) -> $Lock {
                $Lock {
                    side: self.side.with_owner(owner),
                }
            }

            /// The owner this handle acts for: the bound explicit owner, or the current task.
            ///
            #[doc = concat!("```no_run\n# fn demo(rw: ferrisson::ReadWriteLock) {\nassert_eq!(rw.", $getter, "().owner(), ferrisson::Owner::current());\n# }\n```")]
            pub fn owner(&self) -> Owner {
                self.side.lock.owner()
            }

            #[doc = concat!("Takes a ", $what, " hold, waiting as long as it takes, with the watchdog lease (renewed until released). Redisson's `lock()`.")]
            ///
            /// # Cancel safety
            /// Cancel safe: a dropped call leaves no hold.
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nlet guard = rw.", $getter, "().lock().await?;\nguard.unlock().await?;\n# Ok(()) }\n```")]
            pub async fn lock(&self) -> Result<$Guard> {
                self.acquire(None, None).await?.ok_or_else(|| self.not_held())
            }

            #[doc = concat!("Takes a ", $what, " hold, waiting as long as it takes, with a fixed `lease` and no watchdog. Redisson's `lock(leaseTime)`.")]
            ///
            /// # Cancel safety
            /// Cancel safe: a dropped call leaves no hold.
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nlet guard = rw.", $getter, "().lock_with_lease(std::time::Duration::from_secs(10)).await?;\n# Ok(()) }\n```")]
            pub async fn lock_with_lease(&self, lease: Duration) -> Result<$Guard> {
                self.acquire(Some(lease), None)
                    .await?
                    .ok_or_else(|| self.not_held())
            }

            #[doc = concat!("One attempt at a ", $what, " hold, no waiting, watchdog lease: [`Attempt::Busy`] when the other side (or, for the write side, anyone else) holds the lock. Redisson's `tryLock()`.")]
            ///
            /// # Cancel safety
            /// Cancel safe: a dropped call leaves no hold.
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nif let Some(guard) = rw.", $getter, "().try_lock().await?.acquired() {\n    guard.unlock().await?;\n}\n# Ok(()) }\n```")]
            pub async fn try_lock(&self) -> Result<Attempt<$Guard>> {
                self.acquire(None, Some(Duration::ZERO))
                    .await
                    .map(Attempt::from)
            }

            #[doc = concat!("Waits at most `wait` for a ", $what, " hold; holds it for `lease`, or with the watchdog when `lease` is `None`. Redisson's `tryLock(waitTime, leaseTime)`; the bound is as strict as [`Lock::try_lock_for`]'s.")]
            ///
            /// # Cancel safety
            /// Cancel safe: a dropped call leaves no hold.
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nuse std::time::Duration;\nlet attempt = rw.", $getter, "().try_lock_for(Duration::from_millis(500), None).await?;\n# Ok(()) }\n```")]
            pub async fn try_lock_for(
                &self,
                wait: Duration,
                lease: Option<Duration>,
            ) -> Result<Attempt<$Guard>> {
                self.acquire(lease, Some(wait)).await.map(Attempt::from)
            }

            #[doc = concat!("Releases one ", $what, " hold of this handle's owner without a guard, Redisson style (for holds kept with `detach`). Fails with [`Error::NotHeld`] when the owner holds none on this side, [`Error::ReleaseUnknown`] when the outcome is unknown (see [`Lock::unlock`](crate::Lock::unlock)).")]
            ///
            /// # Cancel safety
            /// Cancel safe: once sent, the release completes in the background.
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nlet lock = rw.", $getter, "();\nlock.lock().await?.detach();\nlock.unlock().await?;\n# Ok(()) }\n```")]
            pub async fn unlock(&self) -> Result<()> {
                self.side.unlock().await
            }

            #[doc = concat!("Deletes the lock whoever holds it, but only while it is in ", $what, " mode, and wakes its waiters (Redisson's `forceUnlock`). Returns whether it deleted the lock.")]
            ///
            /// # Cancel safety
            /// Not cancel safe in the sense that a dropped call may or may not have deleted the
            /// lock.
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nlet deleted = rw.", $getter, "().force_unlock().await?;\n# Ok(()) }\n```")]
            pub async fn force_unlock(&self) -> Result<bool> {
                self.side.force_unlock().await
            }

            #[doc = concat!("Whether this handle's owner holds ", $what, " holds (`HEXISTS`). Redisson's `isHeldByCurrentThread`.")]
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nlet lock = rw.", $getter, "();\nlet _guard = lock.lock().await?;\nassert!(lock.is_held_by_current_owner().await?);\n# Ok(()) }\n```")]
            pub async fn is_held_by_current_owner(&self) -> Result<bool> {
                self.side.is_held_by_current_owner().await
            }

            #[doc = concat!("How many ", $what, " holds this handle's owner has (`HGET`; 0 when none). Redisson's `getHoldCount()`.")]
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nassert_eq!(rw.", $getter, "().hold_count().await?, 0);\n# Ok(()) }\n```")]
            pub async fn hold_count(&self) -> Result<u64> {
                self.side.hold_count().await
            }

            async fn acquire(
                &self,
                lease: Option<Duration>,
                wait: Option<Duration>,
            ) -> Result<Option<$Guard>> {
                let acquired = self.side.acquire(lease, wait).await?;
                Ok(acquired.map(|(side, hold)| $Guard {
                    lock: $Lock { side },
                    hold,
                }))
            }

            fn not_held(&self) -> Error {
                Error::NotHeld {
                    name: self.name().to_owned(),
                }
            }
        }

        impl std::fmt::Debug for $Lock {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($Lock))
                    .field("name", &self.name())
                    .finish()
            }
        }

        impl $Guard {
            /// Releases this hold now. Fails with [`Error::LeaseLost`] when the hold had been
            /// lost already (its lease ran out, or the lock was deleted or force-unlocked), and
            /// with [`Error::ReleaseUnknown`] when the outcome is unknown (see
            /// [`LockGuard::unlock`](crate::LockGuard::unlock)).
            ///
            /// # Cancel safety
            /// Cancel safe: once sent, the release completes in the background; before that,
            /// dropping the future drops the guard, which releases.
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nrw.", $getter, "().lock().await?.unlock().await?;\n# Ok(()) }\n```")]
            pub fn unlock(self) -> impl Future<Output = Result<()>> + Send + 'static {
                self.hold.release()
            }

            /// Releases this hold now, and settles a release of unknown outcome before
            /// answering (see [`LockGuard::unlock_settled`](crate::LockGuard::unlock_settled)).
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nrw.", $getter, "().lock().await?.unlock_settled().await?;\n# Ok(()) }\n```")]
            pub fn unlock_settled(self) -> impl Future<Output = Result<()>> + Send + 'static {
                self.hold.release_settled()
            }

            #[doc = concat!("Keeps the hold without a guard, for a later [`", stringify!($Lock), "::unlock`].")]
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nrw.", $getter, "().lock().await?.detach();\nrw.", $getter, "().unlock().await?;\n# Ok(()) }\n```")]
            pub fn detach(self) {
                self.hold.detach();
            }

            /// Resolves when the lease is lost (see [`LockGuard::lost`](crate::LockGuard::lost)).
            /// A force-unlock is noticed by the next renewal (or the end of a fixed lease).
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nlet guard = rw.", $getter, "().lock().await?;\nlet lost = guard.lost();\n# Ok(()) }\n```")]
            pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
                self.hold.lost()
            }

            /// A token cancelled when the lease is found lost (see
            /// [`LockGuard::lost_token`](crate::LockGuard::lost_token)).
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nlet cancelled = rw.", $getter, "().lock().await?.lost_token();\n# Ok(()) }\n```")]
            pub fn lost_token(&self) -> CancellationToken {
                self.hold.lost_token()
            }

            /// Whether the lease is already known lost or past its fixed end.
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nassert!(!rw.", $getter, "().lock().await?.is_lost());\n# Ok(()) }\n```")]
            pub fn is_lost(&self) -> bool {
                self.hold.is_lost()
            }

            /// How the acquisition went (its wait, what woke it).
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nprintln!(\"{:?}\", rw.", $getter, "().lock().await?.acquisition());\n# Ok(()) }\n```")]
            pub fn acquisition(&self) -> &Acquisition {
                self.hold.acquisition()
            }

            #[doc = concat!("The hash field this hold counts in: `<client uuid>:<owner id>` for a read hold, the same + `:write` for a write hold.")]
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nlet guard = rw.", $getter, "().lock().await?;\nprintln!(\"{}\", guard.holder_field());\n# Ok(()) }\n```")]
            pub fn holder_field(&self) -> &str {
                self.hold.field()
            }

            /// The side this guard holds, bound to the holding owner.
            ///
            #[doc = concat!("```no_run\n# async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {\nlet guard = rw.", $getter, "().lock().await?;\nassert_eq!(guard.lock().owner(), rw.owner());\n# Ok(()) }\n```")]
            pub fn lock(&self) -> &$Lock {
                &self.lock
            }
        }

        impl std::fmt::Debug for $Guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($Guard))
                    .field("lock", &self.lock.name())
                    .field("field", &self.hold.field())
                    .field("lease", &self.hold.lease())
                    .field("lost", &self.is_lost())
                    .finish()
            }
        }
    };
}

side_api!(ReadLock, ReadGuard, "read_lock", "read");
side_api!(WriteLock, WriteGuard, "write_lock", "write");
