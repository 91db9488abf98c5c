//! The read-write lock, Redisson's `RReadWriteLock` (protocol §5): many readers or one writer on
//! one hash, with a timeout key per read hold. Each side is a [`Protocol`] of the kit's
//! [`Handle`] ([`Read`], [`Write`]): they differ in the hash field they take, their scripts, and
//! what `is_locked` asks.

use arcstr::ArcStr;
use std::future::Future;
use std::time::Duration;

use fred::prelude::Value;
use futures::future::BoxFuture;

use super::reentrant::Lock;
use crate::error::{Error, Result};
use crate::kit::janitor::Release;
use crate::kit::protocol::{
    read_hash_reply, sealed, AcquireCall, Protocol, Receives, Reply, Waits,
};
use crate::kit::wait::lock_wake;
use crate::kit::{Client, Guard, Handle};
use crate::name;
use crate::owner::Owner;
use crate::transport::script::lua_scripts;
use crate::transport::script::{self, Encoded, Heir, ReleaseScript, ScriptHandOff};

lua_scripts! {
    ["lib/read_hold_gone.lua", "read_write_lock.lua"];
    static READ_ACQUIRE = ("read_acquire",
        "return read_acquire(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])\n");
    static WRITE_ACQUIRE = ("write_acquire",
        "return write_acquire(KEYS[1], ARGV[1], ARGV[2], ARGV[3])\n");
    static READ_RELEASE_SCRIPT = ("read_release",
        "return read_release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])\n");
    static WRITE_RELEASE_SCRIPT = ("write_release",
        "return write_release(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])\n");
    static FORCE_RELEASE = ("read_write_force_release",
        "return force_release(KEYS[1], KEYS[2], ARGV[1], ARGV[2])\n");
    static READ_IS_LOCKED = ("read_is_locked", "return read_is_locked(KEYS[1])\n");
}

/// How the kit releases a read hold (guards, dropped guards, undone acquires, rollbacks).
static READ_RELEASE: ReleaseScript = ReleaseScript {
    script: &READ_RELEASE_SCRIPT,
    encode: encode_read_release,
    hand_off: None,
};

/// How the kit releases a write hold, handing the lock to a local writer where it can.
static WRITE_RELEASE: ReleaseScript = ReleaseScript {
    script: &WRITE_RELEASE_SCRIPT,
    encode: encode_write_release,
    hand_off: Some(ScriptHandOff {
        encode: encode_write_hand_off,
        channel: name::rwlock_channel,
    }),
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
    let channel = name::rwlock_channel(&release.name);
    script::encode_channel_release(release, &channel, publish, None)
}

/// `write_release`'s keys and arguments for a release that hands the lock to `heir`.
fn encode_write_hand_off(release: &Release, publish: &'static str, heir: &Heir) -> Encoded {
    let channel = name::rwlock_channel(&release.name);
    let own = heir.unless_listeners_above();
    script::encode_channel_release(release, &channel, publish, Some((heir, own)))
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
///   would wait for itself. [`WriteLock::try_lock`] and [`WriteLock::try_lock_within`] report
///   [`Attempt::Busy`](crate::Attempt::Busy) then (as Redisson's `tryLock` returns `false`), and [`WriteLock::lock`]
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
        self.lock.as_kind(Read)
    }

    /// The write side: exclusive (Redisson's `writeLock()`).
    ///
    /// ```no_run
    /// # async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {
    /// let guard = rw.write_lock().lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn write_lock(&self) -> WriteLock {
        self.lock.as_kind(Write)
    }
}

impl std::fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.name())
            .finish()
    }
}

/// The read side's [`Protocol`]: [`ReadLock`] is `Handle<Read>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Read;

/// The write side's [`Protocol`]: [`WriteLock`] is `Handle<Write>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Write;

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
pub type ReadLock = Handle<Read>;

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
pub type WriteLock = Handle<Write>;

/// One hold of the read side, released when dropped (in the background).
///
/// ```no_run
/// # async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {
/// let guard = rw.read_lock().lock().await?;
/// // ... read ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type ReadGuard = Guard<Read>;

/// One hold of the write side, released when dropped (in the background).
///
/// ```no_run
/// # async fn demo(rw: ferrisson::ReadWriteLock) -> ferrisson::Result<()> {
/// let guard = rw.write_lock().lock().await?;
/// // ... write ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type WriteGuard = Guard<Write>;

/// The write side's field of an owner whose holder field is `base`.
fn write_field(base: &str) -> ArcStr {
    format!("{base}:write").into()
}

/// Deletes the lock if it is in `mode`, and publishes that side's message.
async fn force_release<P: Protocol>(lock: &Handle<P>, mode: &str) -> Result<bool> {
    let channel = name::rwlock_channel(lock.name());
    let args = [mode, lock.client().redis.settings.publish_arg];
    lock.run_flag(&FORCE_RELEASE, true, &[lock.name(), &channel], &args)
        .await
}

/// Both sides' waiters park on the one channel `redisson_rwlock:` + T(N) (a read release sends
/// `0`, which wakes one waiter per client; a write release `1`, which wakes them all). Neither
/// takes a local hand-off: only `RELEASE`'s hash knows them.
/// Readers and writers wait on the lock's one channel; a writer may be handed the write lock by
/// a writer of its own client (`write_release`), a reader waits for the message (a read hold's
/// timeout key is more than a release can write for it).
fn waits(hand_off: Option<fn(u64)>) -> Waits<()> {
    Waits::Channel {
        channel: |name, _| name::rwlock_channel(name),
        wake: lock_wake,
        hand_off,
    }
}

impl sealed::Sealed for Read {}

impl Protocol for Read {
    type Extra = ();
    type Acquiring = ();
    const NAMES: (&'static str, &'static str) = ("ReadLock", "ReadGuard");
    const RELEASE: Option<&'static ReleaseScript> = Some(&READ_RELEASE);

    fn waits(&self) -> Waits<()> {
        waits(None)
    }

    fn begin(&self, _lock: &ReadLock, _field: &ArcStr, _wait: Option<Duration>) {}

    /// `read_acquire` with the hold's timeout key prefix and the owner's write field (a writer
    /// may read).
    fn send(
        &self,
        call: AcquireCall<'_, Self>,
    ) -> BoxFuture<'static, Result<Value, fred::error::Error>> {
        let name = call.lock.name();
        let keys = vec![name.to_owned(), name::read_timeout_prefix(name, call.field)];
        let args = vec![
            call.lease_arg(),
            call.field.to_string(),
            write_field(call.base).to_string(),
        ];
        call.run(&READ_ACQUIRE, keys, args)
    }

    /// In read mode, or a writer holds read holds too: Redisson 3.24+'s `isLocked()` (up to
    /// 3.23 it tested read mode only).
    async fn is_locked(&self, lock: &ReadLock) -> Result<bool> {
        lock.run_flag(&READ_IS_LOCKED, false, &[lock.name()], &[])
            .await
    }

    /// Deletes the lock if it is in read mode, and publishes `0`.
    fn force_release(&self, lock: &ReadLock) -> impl Future<Output = Result<bool>> + Send {
        force_release(lock, "read")
    }
}

impl sealed::Sealed for Write {}

impl Protocol for Write {
    type Extra = ();
    type Acquiring = ();
    const NAMES: (&'static str, &'static str) = ("WriteLock", "WriteGuard");
    const RELEASE: Option<&'static ReleaseScript> = Some(&WRITE_RELEASE);
    const RECEIVES: Receives = Receives::HoldOf(&WRITE_RELEASE);

    fn waits(&self) -> Waits<()> {
        waits(Some(|_| ()))
    }

    /// The writer's field is `<client uuid>:<owner id>:write`.
    fn field(&self, base: ArcStr) -> ArcStr {
        write_field(&base)
    }

    fn begin(&self, _lock: &WriteLock, _field: &ArcStr, _wait: Option<Duration>) {}

    /// `write_acquire` with the owner's read field (an owner that only reads cannot upgrade).
    fn send(
        &self,
        call: AcquireCall<'_, Self>,
    ) -> BoxFuture<'static, Result<Value, fred::error::Error>> {
        let keys = vec![call.lock.name().to_owned()];
        let args = vec![
            call.lease_arg(),
            call.field.to_string(),
            call.base.to_string(),
        ];
        call.run(&WRITE_ACQUIRE, keys, args)
    }

    /// Also `[PTTL, "upgrade"]`: busy only because the owner holds read holds.
    fn read(reply: &Value) -> Option<Reply<()>> {
        match reply {
            Value::Array(parts) => match parts.as_slice() {
                [Value::Integer(ttl), Value::String(tag)] if &**tag == "upgrade" => {
                    Some(Reply::OwnHold(*ttl))
                }
                _ => None,
            },
            other => read_hash_reply(other),
        }
    }

    /// An upgrade would wait for the owner's own read holds: [`Error::UpgradeRefused`].
    fn own_hold_error(&self, lock: &WriteLock) -> Error {
        Error::UpgradeRefused {
            name: lock.name().to_owned(),
        }
    }

    /// In write mode: Redisson's `isLocked()`.
    async fn is_locked(&self, lock: &WriteLock) -> Result<bool> {
        let mode: Option<String> = lock.query("HGET", &["mode"]).await?;
        Ok(mode.as_deref() == Some("write"))
    }

    /// Deletes the lock if it is in write mode, and publishes `1`.
    fn force_release(&self, lock: &WriteLock) -> impl Future<Output = Result<bool>> + Send {
        force_release(lock, "write")
    }
}
