//! Interoperation with the real Java Redisson, every protocol era of the matrix
//! (`support::java::VERSIONS`), both directions: a JVM of `org.redisson:redisson` from Maven
//! Central (`tests/peers/java`) and a ferrisson client on the same `redis-server`.
//!
//! One test per group of scenarios and version, named `interop_java::v<version>::<group>`, so
//! that `cargo test --test it -- java` runs them all and `-- v4_7_0` one version. A group
//! starts one server and one JVM and runs its scenarios in turn on names of their own. One
//! file per primitive or theme (`rlock.rs`, `fair.rs`, ...); this one holds what they share: the
//! bounds, the per-version test macro and the [`Room`] every group starts with.
//!
//! Bounds: a wake-up by an unlock message must come within [`WAKE_BOUND`] of the release while
//! the holder's lease is [`LEASE`], so that only the message can explain it (Java re-checks
//! after the lock's TTL, ferrisson likewise).

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use ferrisson::{Client, Guard, Handle, Owner, Protocol, WokenBy};
use fred::clients::Client as RawClient;
use serde_json::json;
use support::java::{error_class, lock_args, JavaPeer, Options, Unavailable, Version};
use support::json_lines::{Pending, Reply};
use support::redis_state::{hgetall, pttl};
use support::wait_parked;
use support::{connect_with, raw_client, timed_config, RedisServer};
use tokio::time::{sleep, timeout, Instant};

/// The lease of a holder whose release must wake the other side by message.
const LEASE: Duration = Duration::from_secs(20);
/// How soon after the release a waiter woken by its message acquires.
const WAKE_BOUND: Duration = Duration::from_secs(1);
/// Both sides' watchdog lease where a group watches renewals: renewed every second.
const WATCHDOG: Duration = Duration::from_secs(3);
/// Past the watchdog lease and a renewal more: a hold still there was renewed.
const PAST_THE_LEASE: Duration = Duration::from_millis(4_500);
/// The bound on a step that should be quick (2 cores, JVMs beside the suite).
const STEP: Duration = Duration::from_secs(10);

/// One test per version for each group named: `v3_16_8::rlock`, ...
macro_rules! for_every_version {
    ($($group:ident),* $(,)?) => {
        for_every_version!(@module v3_16_8, V3_16; $($group),*);
        for_every_version!(@module v3_23_5, V3_23; $($group),*);
        for_every_version!(@module v3_43_0, V3_43; $($group),*);
        for_every_version!(@module v3_52_0, V3_52; $($group),*);
        for_every_version!(@module v4_7_0, V4_7; $($group),*);
    };
    (@module $module:ident, $version:ident; $($group:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $group() -> Result<(), super::Unavailable> {
                    super::$group(crate::support::java::$version).await
                }
            )*
        }
    };
}

mod async_api;
mod cluster;
mod fair;
mod family_wakeups;
mod faults;
mod fenced;
mod multi;
mod read_write;
mod replica_sync;
mod rlock;
mod semaphores;
mod sentinel;
mod soak;
mod spin_and_non_reentrant;

use async_api::async_api;
use fair::{fair_lock, non_reentrant_fair_lock};
use faults::faults;
use fenced::fenced_lock;
use multi::multi_and_red_lock;
use read_write::read_write_lock;
use rlock::rlock;
use semaphores::semaphores_and_latch;
use soak::mixed_soak;
use spin_and_non_reentrant::spin_and_non_reentrant_lock;

for_every_version!(
    rlock,
    fair_lock,
    non_reentrant_fair_lock,
    read_write_lock,
    fenced_lock,
    semaphores_and_latch,
    faults,
    multi_and_red_lock,
    async_api,
    mixed_soak,
    spin_and_non_reentrant_lock,
);

/// What every group starts with: a server, a raw client, a JVM with the watchdog lease
/// [`WATCHDOG`], and a ferrisson client with the same.
struct Room {
    server: RedisServer,
    raw: RawClient,
    java: JavaPeer,
    client: Client,
    version: Version,
}

impl Room {
    async fn new(version: Version) -> Result<Room, Unavailable> {
        let server = RedisServer::start();
        let url = server.url();
        let raw = raw_client(&url).await;
        let java = JavaPeer::start_with(
            version,
            std::slice::from_ref(&url),
            Options::watchdog(WATCHDOG),
        )
        .await?;
        let client = connect_with(timed_config(url, WATCHDOG, Duration::from_secs(5))).await;
        Ok(Room {
            server,
            raw,
            java,
            client,
            version,
        })
    }

    /// A lock name of this group and version.
    fn name(&self, what: &str) -> String {
        format!("java:{}:{what}", self.version)
    }

    async fn holders(&self, name: &str) -> HashMap<String, String> {
        hgetall(&self.raw, name).await
    }

    /// Java's `try_lock` of `owner` without waiting: whether it acquired.
    async fn java_try_lock(&self, kind: &str, name: &str, owner: &str) -> bool {
        self.java
            .ok("try_lock", lock_args(kind, name, owner, json!({})))
            .await
            .bool("acquired")
    }

    async fn java_unlock(&self, kind: &str, name: &str, owner: &str) {
        self.java
            .ok("unlock", lock_args(kind, name, owner, json!({})))
            .await;
    }

    /// A JVM of its own (to be killed or stopped) whose owner `h` holds `name` in watchdog mode.
    async fn java_holder_of(&self, name: &str) -> Result<JavaPeer, Unavailable> {
        let peer = JavaPeer::start_with(
            self.version,
            &[self.server.url()],
            Options::watchdog(WATCHDOG),
        )
        .await?;
        peer.ok("lock", lock_args("lock", name, "h", json!({})))
            .await;
        Ok(peer)
    }

    /// A ferrisson `try_lock` by a new owner: whether it acquired (released at once if so).
    async fn ferrisson_gets_in(&self, name: &str) -> bool {
        gets_in(self.client.lock(name).with_owner(Owner::new())).await
    }
}

impl Room {
    /// Asserts that the PTTL of `name`, held by ferrisson with `lease` since `taken`, is no
    /// more than what is left of that lease: `who` did not extend it.
    async fn assert_not_extended(&self, name: &str, lease: Duration, taken: Instant, who: &str) {
        let ttl = pttl(&self.raw, name).await;
        let left = lease.saturating_sub(taken.elapsed()).as_millis() as i64;
        assert!(
            ttl <= left + 50,
            "PTTL {ttl} ms, {left} ms left of ferrisson's lease: {who} (Java {}) extended it",
            self.version
        );
    }
}

/// `owner`'s `unlock` of the lock `name` on `peer` throws `IllegalMonitorStateException`: it
/// holds nothing there any more.
async fn assert_unlock_refused(peer: &JavaPeer, name: &str, owner: &str) {
    let stale = peer
        .call("unlock", lock_args("lock", name, owner, json!({})))
        .await;
    assert_eq!(
        error_class(&stale),
        Some("IllegalMonitorStateException"),
        "{:?}",
        stale.fields
    );
}

/// A Java `waiter` parked behind ferrisson's `guard` (subscribed, as the caller made sure):
/// still waiting 300 ms later, then acquiring within [`WAKE_BOUND`] of the guard's release, so
/// woken by its unlock message. `what` names the waiter in a failure.
async fn java_woken_by_the_release<P: Protocol>(
    waiter: Pending,
    guard: Guard<P>,
    what: &str,
) -> Reply {
    let release = async { guard.unlock().await.expect("ferrisson release") };
    let reply = java_returns_on(waiter, release, what).await;
    assert!(reply.bool("acquired"), "{what}: {:?}", reply.fields);
    reply
}

/// Java's call `waiter`, subscribed and still waiting 300 ms on, returns (ok) within
/// [`WAKE_BOUND`] of `act` (ferrisson's release): by its message, when the call's own re-check
/// comes no sooner than [`LEASE`] (or never: an untimed `acquire()` or `await()`).
async fn java_returns_on(
    mut waiter: Pending,
    act: impl std::future::Future<Output = ()>,
    what: &str,
) -> Reply {
    // Past its attempt after subscribing, refused: parked on its semaphore.
    sleep(Duration::from_millis(300)).await;
    assert!(
        waiter.poll().is_none(),
        "{what}: returned before the release"
    );
    let acted = Instant::now();
    act.await;
    let reply = waiter.wait(LEASE + STEP).await;
    assert!(reply.ok(), "{what}: {:?}", reply.fields);
    let after = reply.received.duration_since(acted);
    assert!(
        after < WAKE_BOUND,
        "{what}: returned {after:?} after the release: not woken by its message"
    );
    reply
}

/// A ferrisson waiter on `lock` (of `client`), parked while Java holds it: `release` (Java's
/// release) lets it in within [`WAKE_BOUND`], woken by the unlock message. `what` names the
/// release in a failure.
async fn ferrisson_woken_by<P: Protocol>(
    client: &Client,
    lock: Handle<P>,
    release: impl std::future::Future<Output = ()>,
    what: &str,
) -> Guard<P> {
    let name = lock.name().to_owned();
    let waiter = tokio::spawn(async move {
        let guard = lock.lock_with_lease(LEASE).await;
        (guard, Instant::now())
    });
    wait_parked(client, &name, 1).await;
    let released = Instant::now();
    release.await;
    let (guard, acquired) = timeout(STEP, waiter)
        .await
        .unwrap_or_else(|_| panic!("ferrisson did not acquire after {what}"))
        .expect("waiter task");
    let guard = guard.expect("ferrisson lock");
    let woke_after = acquired.duration_since(released);
    assert!(
        woke_after < WAKE_BOUND,
        "ferrisson acquired {woke_after:?} after {what}"
    );
    assert_eq!(
        guard.acquisition().woken_by,
        WokenBy::Message,
        "after {what}"
    );
    guard
}

/// One `try_lock` of `lock`: whether it acquired (released at once if so).
async fn gets_in<P: Protocol>(lock: Handle<P>) -> bool {
    match lock
        .try_lock()
        .await
        .expect("ferrisson try_lock")
        .acquired()
    {
        Some(guard) => {
            guard.unlock().await.expect("ferrisson release");
            true
        }
        None => false,
    }
}

fn one(field: impl Into<String>, count: &str) -> HashMap<String, String> {
    HashMap::from([(field.into(), count.to_owned())])
}

/// `./dev test` resolves the versions of `tests/peers/java/versions` before the tests run: the
/// file lists exactly the matrix these tests run on.
#[test]
fn the_java_peers_versions_file_lists_the_matrix() {
    let path = support::java::project_dir().join("versions");
    let text = std::fs::read_to_string(&path).expect("tests/peers/java/versions");
    let listed: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let matrix: Vec<String> = support::java::VERSIONS
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(listed, matrix);
}
