//! # ferrisson
//!
//! Java Redisson's distributed locks for async Rust, **on the same Redis keys**: a Java service
//! that takes `RLock "orders:42"` with Redisson and a Rust service that takes
//! `client.lock("orders:42")` with ferrisson exclude each other, wake each other, and cannot tell
//! each other apart.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> ferrisson::Result<()> {
//! let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
//! let lock = client.lock("orders:42");
//!
//! let guard = lock.lock().await?;          // waits; watchdog lease renewed until released
//! // ... the critical section ...
//! guard.unlock().await?;                   // or drop(guard): released in the background
//! # Ok(()) }
//! ```
//!
//! ## Which lock do I need?
//!
//! | You need | Take | Why |
//! |---|---|---|
//! | One owner at a time, shared with Java's `RLock` | [`Client::lock`] → [`Lock`] | the default: reentrant per owner, woken by message, watchdog lease |
//! | A resource (a database, a file store) that must refuse a holder whose lease ran out | [`Client::fenced_lock`] → [`FencedLock`] | every acquisition gets a larger token ([`FencedGuard::token`]) to pass along and check |
//! | Waiters of every process served in arrival order | [`Client::fair_lock`] → [`FairLock`] | a queue in Redis; costs a little more per hand-off |
//! | Many readers or one writer | [`Client::read_write_lock`] → [`ReadWriteLock`] | readers share, a writer excludes all |
//! | At most N holders (a pool, a rate of jobs) | [`Client::semaphore`] → [`Semaphore`] | permits without owners; [`Client::permit_expirable_semaphore`] when each permit needs a lease of its own |
//! | Wait until N things happened | [`Client::count_down_latch`] → [`CountDownLatch`] | not a lock: a count others bring to 0 |
//! | Several locks at once, all or none | [`MultiLock`] | the parts may sit on different servers |
//! | One lock across independent Redis masters that survives a minority being down | [`RedLock`] | a majority of N servers, with a [`validity`](MultiGuard::validity) |
//! | A lock that a re-entry must not pass (a bug, not a second hold) | [`Client::non_reentrant_lock`] → [`NonReentrantLock`] | a second acquire by the holder is [`Error::AlreadyHeld`] |
//! | Interop with Java's `RSpinLock`, or no pub/sub at all | [`Client::spin_lock`] → [`SpinLock`] | polls with a [`BackOff`]; slower to hand over |
//! | A lock shared with redis-py, Go's redsync, node `redlock` or rslock | [`Client::token_lock`] → [`TokenLock`]; [`TokenRedLock`] over several masters | their `SET NX PX` key and token; waits by keyspace events, else polls |
//!
//! What a name holds on Redis right now, whoever wrote it, is [`Client::inspect`] (types in
//! [`inspect`]); the `ferrisson` command-line tool shows the same (`status`, `watch`).
//!
//! Every section below has a runnable example (`cargo run --example NAME`; the examples are
//! also run by the test suite against real servers):
//!
//! | Section | Example |
//! |---|---|
//! | [Features](#features) | `demo` (`./dev demo`): two clients, re-entry, a hand-off, the watchdog, contention |
//! | [Configuration](#configuration) | `tracing` (a `Config` with a short watchdog) |
//! | [Deployments: TLS, Cluster, Sentinel](#deployments-tls-cluster-sentinel) | `tls`, `cluster`, `sentinel` |
//! | [The blocking API](#the-blocking-api) | `blocking` |
//! | [Errors](#errors) | `errors` |
//! | [Tracing and metrics](#tracing-and-metrics) | `tracing`, `prometheus` (feature `metrics`) |
//!
//! ## Features
//! * **The reentrant lock** ([`Client::lock`] → [`Lock`]): Redisson's `RLock`. [`Lock::lock`]
//!   waits, [`Lock::try_lock`] and [`Lock::try_lock_within`] return an [`Attempt`]
//!   (`#[must_use]`: the guard it holds releases the lock when dropped), a fixed lease with
//!   [`Lock::lock_with_lease`], or the watchdog lease (30 s, renewed every 10 s) without one.
//! * **The fenced lock** ([`Client::fenced_lock`] → [`FencedLock`]): Redisson's `RFencedLock`,
//!   the reentrant lock's hash plus a fencing token per acquisition ([`FencedGuard::token`]),
//!   strictly increasing, so that a resource can refuse writes of a holder whose lease ran out.
//! * **The fair lock** ([`Client::fair_lock`] → [`FairLock`]): Redisson's `RFairLock`, waiters
//!   of every client queued in Redis and served in arrival order; one that stops waiting leaves
//!   the queue, and a crashed one is dropped from it at its deadline.
//! * **The permit-expirable semaphore** ([`Client::permit_expirable_semaphore`] →
//!   [`PermitExpirableSemaphore`]): Redisson's `RPermitExpirableSemaphore`, permits with ids and
//!   leases of their own ([`Permit`]), in either Redisson generation's id format ([`PermitIdFormat`]).
//! * **The read-write lock** ([`Client::read_write_lock`] → [`ReadWriteLock`]): Redisson's
//!   `RReadWriteLock`, many readers ([`ReadLock`]) or one writer ([`WriteLock`]), with the
//!   writer's downgrade to reading, and the same keys and messages as Java's.
//! * **The semaphore** ([`Client::semaphore`] → [`Semaphore`]): Redisson's `RSemaphore`; permits
//!   taken with [`Semaphore::acquire`] come back when their [`SemaphorePermits`] guard drops.
//! * **The count-down latch** ([`Client::count_down_latch`] → [`CountDownLatch`]): Redisson's
//!   `RCountDownLatch`; [`CountDownLatch::wait`] returns once the count reaches 0.
//! * **MultiLock and RedLock** ([`MultiLock`], [`RedLock`] → [`MultiGuard`]): Redisson's
//!   client-side compositions of reentrant locks, possibly on independent servers: all of them,
//!   or a majority with Redlock's [`validity`](MultiGuard::validity). Redisson deprecates
//!   RedLock from 3.25; it remains the way to lock across independent masters that stays
//!   available while a minority of them is down.
//! * **The spin lock** ([`Client::spin_lock`] → [`SpinLock`]): Redisson's `RSpinLock`, the
//!   reentrant lock's hash taken by polling with a [`BackOff`] (no pub/sub); its releases
//!   publish nothing, so pub/sub waiters on the same name wake only at their TTL bound.
//! * **The non-reentrant lock** ([`Client::non_reentrant_lock`] → [`NonReentrantLock`]):
//!   Redisson 4.4's `RNonReentrantLock`; a second acquire by its holder is
//!   [`Error::AlreadyHeld`], never a second hold or a deadlock.
//! * **The token lock** ([`Client::token_lock`] → [`TokenLock`]) and **TokenRedLock**
//!   ([`TokenRedLock`] → [`TokenRedGuard`]): the single-key `SET NX PX` lock of the other
//!   ecosystems (redis-py, redsync, node `redlock`, rslock) on their keys and values, with the
//!   watchdog, `lost()`, cancel safety and local hand-off; waiters wake on keyspace events
//!   where the server sends them ([`KeyspaceEvents`]), else poll; TokenRedLock is the Redlock
//!   description's algorithm over token locks on independent masters.
//! * **Guards**: [`LockGuard::unlock`] releases (dropping the guard releases in the background),
//!   [`LockGuard::lost`] resolves when the lease is lost so the protected work can stop,
//!   [`LockGuard::detach`] keeps the hold for a later [`Lock::unlock`] Redisson style.
//! * **Owners**: reentrant per [`Owner`], by default the current tokio task; explicit owners for
//!   work that spans tasks, and [`Owner::from_id`] for Redisson's `*Async(threadId)`.
//! * **Queries**: [`Lock::is_locked`], [`Lock::is_held_by_current_owner`], [`Lock::is_held_by`],
//!   [`Lock::hold_count`], [`Lock::remaining_ttl`], [`Client::inspect`] (holders, TTL, kind: the
//!   [`inspect`] module).
//! * **Fair and fast under contention**: waiters of one client queue in arrival order and get
//!   the lock handed over in the release's own script; concurrent calls share script runs.
//! * **Cancel safe**: a dropped acquire never leaves a lock held; a dropped release completes.
//! * **Deadlock detection** (opt-in, [`DeadlockDetection`]): waits that last are recorded in
//!   Redis as wait-for edges; a waiter on a cycle of owners that each wait for a lock the next
//!   one holds finds it, and the cycle's youngest wait fails with [`Error::Deadlock`] so that
//!   the others proceed. [`Client::find_deadlocks`] lists the cycles visible now.
//! * **The `ferrisson` command-line tool** (`status`, `run`, `unlock --force`, `watch`,
//!   `deadlocks`).
//!
//! ### Cargo features
//! None is on by default: the library needs only tokio and fred.
//! * `tls`: TLS through rustls (ring) for `rediss://` URLs and [`Config::tls`]
//!   (`ferrisson = { version = "0.1", features = ["tls"] }`). Without it [`TlsOptions`] still
//!   exists, but connecting with either fails with [`Error::InvalidArgument`] naming the feature.
//! * `cli`: the `ferrisson` command-line tool (`cargo install ferrisson --features cli`); it
//!   enables `tls`.
//! * `metrics`: lock-level metrics through the [`metrics`](https://docs.rs/metrics) facade (see
//!   [Tracing and metrics](#tracing-and-metrics)).
//!
//! ### How it works
//! * A lock is a Redis hash at the lock's name; its one field `<client uuid>:<owner id>` holds
//!   the reentrant hold count, and the hash's TTL is the lease (Redisson's layout).
//! * Acquire, release, force-release and renewal are Lua scripts (under `lua/`), each one atomic
//!   step, sent with EVALSHA. An uncontended acquire is one round trip, and so is a release.
//! * Waiters share one pub/sub subscription per lock per client and park until the release's
//!   unlock message (or the holder's TTL) lets them retry: no polling.
//! * Locks taken without a lease get the watchdog timeout (30 s) and are renewed every third of
//!   it, in batches, by one background task per client; a renewal that finds the lock gone
//!   fires the guard's [`lost`](LockGuard::lost) signal.
//!
//! ### Owners, tasks and the `join!` hazard
//! Redisson's lock is reentrant per Java thread. Here the implicit owner is the current **tokio
//! task** ([`Owner::current`]), even when it moves between threads; outside any task, the OS
//! thread.
//!
//! The hazard: concurrent branches of *one* task (`tokio::join!`, `select!`, `FuturesUnordered`)
//! share that identity, so two branches that both call `lock()` both "re-enter" at once. Give
//! each branch its own [`Owner`] with [`Lock::with_owner`] and they exclude each other again:
//!
//! ```no_run
//! # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
//! use ferrisson::Owner;
//!
//! let lock = client.lock("orders:42");
//! let branch = |owner: Owner| {
//!     let lock = lock.with_owner(owner);
//!     async move {
//!         let guard = lock.lock().await?;
//!         // ... exclusive work ...
//!         guard.unlock().await
//!     }
//! };
//! let (a, b) = tokio::join!(branch(Owner::new()), branch(Owner::new()));
//! # Ok(()) }
//! ```
//!
//! Work that moves to another task re-enters through its guard ([`LockGuard::reenter`]) or an
//! explicit owner, not through a fresh `lock()` (a spawned task is another owner).
//!
//! ### Compatibility
//! Keys, fields, TTLs, channels and messages follow Redisson 3.16.x through 4.x (see
//! `docs/compatibility.md` and the protocol reference). The default [`PublishMode::Auto`] wakes
//! Java waiters of every version: classic pub/sub outside a cluster, both kinds in one.
//!
//! ## Configuration
//! [`Client::connect`] takes a URL and Redisson's defaults. For more, build a [`Config`]: set
//! its public fields, chain setters on [`Config::builder`] (whose `build()` rejects a bad value
//! with [`Error::InvalidArgument`] naming the setting), or read `REDIS_URL` and `FERRISSON_*`
//! variables with [`Config::from_env`]. fred's connection, performance and reconnect settings
//! are `Config` fields too, or come from an application's fred `Builder` through
//! [`Client::from_fred_builder`]; the table on [`Config`] lists the few that ferrisson sets
//! itself, and why. fred is re-exported as [`fred`], in the version ferrisson uses.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> ferrisson::Result<()> {
//! use std::time::Duration;
//!
//! let config = ferrisson::Config::builder("redis://127.0.0.1:6379")
//!     .watchdog_timeout(Duration::from_secs(10))
//!     .pool_size(4)
//!     .build()?;
//! let client = ferrisson::Client::new(config).await?;
//! # Ok(()) }
//! ```
//!
//! ## Deployments: TLS, Cluster, Sentinel
//! The URL chooses the deployment; [`Config`] holds the rest, with Redisson's defaults under
//! Redisson's names.
//!
//! | URL | Deployment | Example |
//! |---|---|---|
//! | `redis://[user:pass@]host:port[/db]` | one server | `errors`, `tracing` |
//! | `rediss://...` + [`Config::tls`] ([`TlsOptions`]: private CA, client certificate) | one server over TLS | `tls` |
//! | `redis-cluster://host:port?node=host:port&...` | Cluster: slot moves (`MOVED`/`ASK`) and failovers followed | `cluster` |
//! | `redis-sentinel://host:port?sentinelServiceName=NAME&node=...` | Sentinel: `+switch-master` followed at once | `sentinel` |
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> ferrisson::Result<()> {
//! use ferrisson::{Client, Config, PublishMode, SyncedWrites, TlsOptions};
//!
//! let mut config = Config::new("redis-cluster://10.0.0.1:7000?node=10.0.0.2:7000");
//! config.publish_mode = PublishMode::Auto; // classic + sharded unlock messages in a cluster
//! config.synced_writes = SyncedWrites::Auto; // WAIT for replicas with Cluster and Sentinel
//! # let ca_pem: Vec<u8> = Vec::new();
//! // Over TLS (`rediss://`, or TLS in a cluster URL): trust a private CA.
//! // config.tls = Some(TlsOptions::default().trust_pem(ca_pem));
//! # let _ = TlsOptions::default().trust_pem(ca_pem);
//! let client = Client::new(config).await?;
//! # Ok(()) }
//! ```
//!
//! With Sentinel and Cluster, acquires and releases wait for the master's replicas by default,
//! as Redisson's do ([`SyncedWrites`]), so a failover cannot hand an acknowledged lock to a
//! second owner. `docs/deployment.md` compares the three deployments with measured figures.
//!
//! ## The blocking API
//! [`blocking`] offers the same locks to code without an async runtime: every call blocks, and
//! the owner is the **OS thread**, as for Java Redisson. It runs the async implementation on a
//! small runtime of its own.
//!
//! ```no_run
//! # fn main() -> ferrisson::Result<()> {
//! let client = ferrisson::blocking::Client::connect("redis://127.0.0.1:6379")?;
//! let lock = client.lock("orders:42");
//! let guard = lock.lock()?;
//! guard.unlock()?;
//! # Ok(()) }
//! ```
//!
//! ## Errors
//! One error type, [`Error`], whose variants say what the caller can do:
//!
//! | Variant | Meaning | What to do |
//! |---|---|---|
//! | [`Error::NotHeld`] | releasing what this owner does not hold | fix the locking logic |
//! | [`Error::AlreadyHeld`] | the holder of a non-reentrant lock asked for it again | fix the locking logic (or use [`Lock`]) |
//! | [`Error::LeaseLost`] | a guard's hold was lost before its release | the work may have overlapped; watch [`LockGuard::lost`] |
//! | [`Error::ReleaseUnknown`] | a release's outcome is unknown (its reply was lost); never `Ok` | count the work as unprotected; [`LockGuard::unlock_settled`] settles it first |
//! | [`Error::UpgradeRefused`] | a read holder waits for the write lock of the same read-write lock | release the read holds first |
//! | [`Error::WrongType`] | the key holds something else than a lock | fix the data or the name |
//! | [`Error::InvalidArgument`] | a bad lease, wait, name, URL or setting, rejected before sending | fix the call |
//! | [`Error::PermissionDenied`] | the ACL user lacks a right | grant the rule in `docs/reliability.md` |
//! | [`Error::Unavailable`], [`Error::Timeout`], [`Error::NotReplicated`] | transient ([`Error::is_transient`]) | retry later |
//! | [`Error::Shutdown`], [`Error::RuntimeGone`] | the client cannot be used any more | create a new client |
//!
//! A busy lock is not an error: [`Lock::try_lock`] returns [`Attempt::Busy`]. No operation
//! panics on bad input, and none leaves a lock held after an error.
//!
//! ## Tracing and metrics
//! ferrisson reports through [`tracing`](https://docs.rs/tracing): `warn` for what an operator
//! should see (lost leases, failed renewals and background releases, unreplicated writes),
//! `debug` for the life of each lock (a `ferrisson.acquire` span with the lock and owner,
//! acquisitions with their wait and wake-up, releases, renewals), `trace` for details. Values
//! read as text (`lock=orders:42`, `reply=(integer) 1`). Install any subscriber, e.g.
//! `tracing_subscriber::fmt().with_env_filter("ferrisson=debug")`; the `ferrisson`
//! command-line tool honours `RUST_LOG`.
//!
//! With the `metrics` feature, the [`metrics`](https://docs.rs/metrics) facade records
//! acquisitions, failed acquires, wait times, hand-offs, renewals, lost leases and the locks
//! held: [`crate::metrics`] lists them. Install a recorder (e.g. `metrics-exporter-prometheus`)
//! before connecting; the `prometheus` example prints what it renders.
#![deny(missing_docs)]

pub mod blocking;
mod client;
mod clock;
mod config;
mod deadlock;
mod error;
pub mod inspect;
mod kit;
mod lease;
mod lock;
pub mod metrics;
mod multi;
mod name;
mod owner;
mod shown;
mod sync;
mod transport;
mod wait_for;

#[cfg(test)]
mod model;

pub use config::{
    Config, ConfigBuilder, DeadlockDetection, KeyspaceEvents, PublishMode, SyncedWrites,
    TlsOptions, WhenUnavailable,
};
pub use error::{Error, Result};
pub use kit::Client;
pub use kit::{Acquisition, Attempt, WokenBy};
pub use kit::{BackOff, Guard, Handle, Protocol, RemainingTtl};
pub use lock::{FairGuard, FairLock, FencedGuard, FencedLock, Lock, LockGuard};
pub use lock::{NonReentrantFairGuard, NonReentrantFairLock};
pub use lock::{NonReentrantGuard, NonReentrantLock, SpinGuard, SpinLock};
pub use lock::{ReadGuard, ReadLock, ReadWriteLock, WriteGuard, WriteLock};
pub use lock::{TokenGuard, TokenLock};

/// The lock primitives as [`Protocol`]s, the parameter of [`Handle`] and [`Guard`]: [`Lock`] is
/// `Handle<kind::Reentrant>`. Name them to write code generic over several primitives, or to
/// reach a primitive's type from its handle.
///
/// ```
/// use ferrisson::{kind, Guard, Handle};
/// fn is_spin(_: &Handle<kind::Spin>) -> bool { true }
/// fn token(guard: &Guard<kind::Fenced>) -> u64 { guard.token() }
/// ```
pub mod kind {
    pub use crate::lock::Write;
    pub use crate::lock::{
        Fair, Fenced, NonReentrant, NonReentrantFair, Read, Reentrant, Spin, Token,
    };
}
pub use multi::{MultiGuard, MultiLock, RedLock, RedlockOptions, TokenRedGuard, TokenRedLock};
pub use owner::Owner;
pub use sync::{
    CountDownLatch, Permit, PermitExpirableSemaphore, PermitIdFormat, Semaphore, SemaphorePermits,
};
pub use wait_for::{Deadlock, WaitStep};

/// The [fred](https://docs.rs/fred/10) crate (version 10) that ferrisson talks to Redis with,
/// re-exported so that its types can be named without depending on fred, possibly in another
/// version: `fred::types::Builder` for [`Client::from_fred_builder`],
/// `fred::types::config::{ConnectionConfig, PerformanceConfig, ReconnectPolicy}` for
/// [`Config`], and `fred::error::Error`, the [`source`](std::error::Error::source) of
/// [`Error::Unavailable`], [`Error::Redis`] and [`Error::PermissionDenied`]. It moves to a new
/// fred major version only with a new ferrisson minor version (0.x) or major version.
///
/// ```
/// use ferrisson::fred::types::config::ReconnectPolicy;
///
/// let config = ferrisson::Config::builder("redis://127.0.0.1:6379")
///     .reconnect_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
///     .build()?;
/// # Ok::<(), ferrisson::Error>(())
/// ```
pub use fred;

/// Compile-time checks that handles, guards and futures can cross tasks and threads.
#[cfg(test)]
mod send_sync {
    use super::*;

    fn send_sync_static<T: Send + Sync + 'static>() {}
    fn send<T: Send>(_: &T) {}

    #[test]
    fn handles_and_guards_are_send_sync_static() {
        send_sync_static::<Client>();
        send_sync_static::<Lock>();
        send_sync_static::<LockGuard>();
        send_sync_static::<FencedLock>();
        send_sync_static::<FencedGuard>();
        send_sync_static::<ReadWriteLock>();
        send_sync_static::<ReadGuard>();
        send_sync_static::<WriteGuard>();
        send_sync_static::<Owner>();
        send_sync_static::<Error>();
        send_sync_static::<PermitExpirableSemaphore>();
        send_sync_static::<Permit>();
        send_sync_static::<MultiLock>();
        send_sync_static::<RedLock>();
        send_sync_static::<MultiGuard>();
        send_sync_static::<BackOff>();
    }

    /// Every lock primitive at once: the kit's generic code is what is checked.
    #[allow(dead_code)] // only type-checked: the futures are never run
    fn handles_guards_and_futures_of_every_primitive_are_send<P: Protocol>(
        lock: Handle<P>,
        guard: Guard<P>,
    ) {
        send_sync_static::<Handle<P>>();
        send_sync_static::<Guard<P>>();
        send(&lock.lock());
        send(&lock.lock_with_lease(std::time::Duration::from_secs(1)));
        send(&lock.try_lock());
        send(&lock.try_lock_within(std::time::Duration::from_secs(1)));
        send(&lock.unlock());
        send(&lock.force_unlock());
        send(&lock.is_locked());
        send(&lock.is_held_by_current_owner());
        send(&lock.hold_count());
        send(&lock.remaining_ttl());
        send(&guard.reenter());
        send(&guard.lost());
        send(&guard.unlock_settled());
    }

    #[allow(dead_code)] // only type-checked: the futures are never run
    fn client_futures_are_send(client: Client) {
        send(&Client::connect("redis://127.0.0.1:1"));
        send(&client.shutdown());
    }

    #[allow(dead_code)] // only type-checked: the futures are never run
    fn permit_futures_are_send(semaphore: PermitExpirableSemaphore, permit: Permit) {
        send(&semaphore.acquire(None));
        send(&semaphore.try_acquire_for(std::time::Duration::from_secs(1), None));
        send(&semaphore.release("00"));
        send(&semaphore.available_permits());
        send(&permit.release());
    }

    #[allow(dead_code)] // only type-checked: the futures are never run
    fn read_write_futures_are_send(read: ReadLock, write: WriteLock, guard: WriteGuard) {
        send(&read.lock());
        send(&read.is_locked());
        send(&write.try_lock_within(std::time::Duration::from_secs(1)));
        send(&write.unlock());
        send(&guard.unlock());
    }

    #[allow(dead_code)] // only type-checked: the futures are never run
    fn multi_futures_are_send(multi: MultiLock, red: RedLock, guard: MultiGuard) {
        send(&multi.lock());
        send(&red.try_lock_within(std::time::Duration::from_secs(1)));
        send(&red.is_held_by_current_owner());
        send(&guard.lost());
        send(&guard.unlock());
    }

    #[allow(dead_code)] // only type-checked: the futures are never run
    fn fenced_futures_are_send(lock: FencedLock, guard: FencedGuard) {
        send(&lock.lock());
        send(&lock.try_lock_within(std::time::Duration::from_secs(1)));
        send(&lock.token());
        send(&lock.delete());
        send(&lock.as_lock().lock());
        send(&guard.lost());
        send(&guard.unlock());
    }
}
