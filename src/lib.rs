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
//! ## How it works
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
//! ## Owners, tasks and the `join!` hazard
//! Redisson's lock is reentrant per Java thread. Here the implicit owner is the current **tokio
//! task** ([`Owner::current`]), so nested acquisitions inside one task re-enter even when the
//! task moves between threads. Outside any task the OS thread is the owner.
//!
//! The hazard: concurrent branches of *one* task (`tokio::join!`, `select!`, `FuturesUnordered`)
//! share that identity, so two branches that both call `lock()` both "re-enter" and run their
//! critical sections at the same time. Give each branch its own [`Owner`] with
//! [`Lock::with_owner`] and they exclude each other again:
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
//! ## Compatibility
//! Keys, fields, TTLs, channels and messages follow Redisson 3.16.x through 4.x (see
//! `docs/architecture.md` and the protocol reference). The default [`PublishMode::Auto`] wakes
//! Java waiters of every version: classic pub/sub outside a cluster, both kinds in one.
//!
//! ## Deployments
//! A single server (`redis://`), Sentinel (`redis-sentinel://`, failovers followed as the
//! sentinels announce them) and Cluster (`redis-cluster://`, slot moves and failovers
//! followed). With Sentinel and Cluster, acquires and releases wait for the master's replicas
//! by default, as Redisson's do ([`SyncedWrites`]), so a failover cannot hand an acknowledged
//! lock to a second owner. `docs/deployment.md` compares the three.
#![deny(missing_docs)]

pub mod blocking;
mod client;
mod config;
mod dispatch;
mod doubt;
mod error;
mod inspect;
mod janitor;
mod lock;
pub mod metrics;
mod name;
mod owner;
mod pubsub;
mod replica_sync;
mod script;
mod sentinel;
mod shown;
mod tls;
mod watchdog;

pub use client::Client;
pub use config::{Config, PublishMode, SyncedWrites, WhenUnavailable};
pub use error::{Error, Result};
pub use inspect::{Holder, LockInfo, LockKind};
pub use lock::{Acquisition, Lock, LockGuard, RemainingTtl, WokenBy};
pub use owner::Owner;
pub use tls::TlsOptions;

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
        send_sync_static::<Owner>();
        send_sync_static::<Error>();
    }

    #[allow(dead_code)] // only type-checked: the futures are never run
    fn futures_are_send(client: Client, lock: Lock, guard: LockGuard) {
        send(&Client::connect("redis://127.0.0.1:1"));
        send(&lock.lock());
        send(&lock.lock_with_lease(std::time::Duration::from_secs(1)));
        send(&lock.try_lock());
        send(&lock.try_lock_for(std::time::Duration::from_secs(1), None));
        send(&lock.unlock());
        send(&lock.force_unlock());
        send(&lock.is_locked());
        send(&lock.hold_count());
        send(&guard.reenter());
        send(&guard.lost());
        send(&client.shutdown());
        send(&guard.unlock());
    }
}
