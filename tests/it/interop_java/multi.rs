//! MultiLock and RedLock across Java and ferrisson, over three independent servers: one JVM
//! with a Redisson client per server (`getMultiLock`/`getRedLock` of a lock of the same name on
//! each) beside one ferrisson client per server. Each side's composite lock excludes the
//! other's, a failed try leaves nothing behind on any server, and Java's lease rule (each part
//! tried with twice the wait, then `PEXPIRE` to the lease) leaves the lease it was asked for.

use std::collections::HashMap;
use std::time::Duration;

use ferrisson::{Attempt, MultiGuard, MultiLock, Owner, RedLock};
use serde_json::{json, Value};
use tokio::time::{sleep, timeout, Instant};

use super::{LEASE, STEP};
use crate::support::java::{lock_args, JavaPeer, Options, Unavailable, Version};
use crate::support::redis_state::hgetall;
use crate::support::servers::Servers;

pub(super) async fn multi_and_red_lock(version: Version) -> Result<(), Unavailable> {
    let three = Three::start(version).await?;
    for mode in [Mode::Multi, Mode::Red] {
        each_side_excludes_the_other(&three, mode).await;
        a_waiter_of_each_side_gets_in_after_the_others_release(&three, mode).await;
    }
    java_multi_lock_parts_keep_the_lease_asked_for(&three).await;
    a_red_lock_majority_held_by_ferrisson_refuses_java_and_java_takes_nothing_back(&three).await;
    a_red_lock_majority_held_by_java_refuses_ferrisson(&three).await;
    three.java.quit().await;
    Ok(())
}

/// Three servers, a JVM with a client on each, ferrisson clients on each.
struct Three {
    servers: Servers,
    java: JavaPeer,
    version: Version,
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Multi,
    Red,
}

impl Mode {
    /// The peer's `mode` field.
    fn java(self) -> &'static str {
        match self {
            Mode::Multi => "multi",
            Mode::Red => "red",
        }
    }
}

impl Three {
    async fn start(version: Version) -> Result<Three, Unavailable> {
        let servers = Servers::start(3).await;
        let urls: Vec<String> = servers.servers.iter().map(|s| s.url()).collect();
        let java = JavaPeer::start_with(version, &urls, Options::default()).await?;
        Ok(Three {
            servers,
            java,
            version,
        })
    }

    fn name(&self, what: &str) -> String {
        format!("java:{}:{what}", self.version)
    }

    /// Java's composite op `op` of `name` by `owner` in `mode`, with `more` fields.
    fn args(mode: Mode, name: &str, owner: &str, more: Value) -> Value {
        let mut args = lock_args("lock", name, owner, more);
        args["mode"] = mode.java().into();
        args
    }

    /// Java's holder field of `owner` on server `i` (its client there, its thread).
    async fn java_field(&self, i: usize, owner: &str) -> String {
        let thread = self.java.thread_id(owner).await;
        format!("{}:{thread}", self.java.client_ids()[i])
    }

    /// The holders of `name` on each server, in server order.
    async fn holders(&self, name: &str) -> Vec<HashMap<String, String>> {
        let mut all = Vec::new();
        for raw in &self.servers.raws {
            all.push(hgetall(raw, name).await);
        }
        all
    }

    /// Ferrisson's composite lock of `mode` on `name` (a part on each server), for `owner`.
    fn ferrisson(&self, mode: Mode, name: &str, owner: Owner) -> Composite {
        let locks = self.servers.locks(name);
        match mode {
            Mode::Multi => {
                Composite::Multi(MultiLock::new(locks).expect("locks").with_owner(owner))
            }
            Mode::Red => Composite::Red(RedLock::new(locks).expect("locks").with_owner(owner)),
        }
    }

    /// Ferrisson's composite lock of `mode` on `name`, by `owner`, leased [`LEASE`].
    async fn ferrisson_lock(&self, mode: Mode, name: &str, owner: Owner) -> MultiGuard {
        let lock = self.ferrisson(mode, name, owner);
        lock.lock().await.expect("ferrisson's composite lock")
    }

    /// One try of ferrisson's composite lock of `mode` on `name` by a new owner.
    async fn ferrisson_try(&self, mode: Mode, name: &str) -> Attempt<MultiGuard> {
        let lock = self.ferrisson(mode, name, Owner::new());
        lock.try_lock().await.expect("ferrisson try_lock")
    }

    /// A try of ferrisson's composite lock `name` by a new owner, without waiting: whether it
    /// acquired (released at once if so).
    async fn ferrisson_gets_in(&self, mode: Mode, name: &str) -> bool {
        match self.ferrisson_try(mode, name).await.acquired() {
            Some(guard) => {
                guard.unlock().await.expect("ferrisson release");
                true
            }
            None => false,
        }
    }

    /// Java's `tryLock(0, lease)` of its composite lock: whether it acquired.
    async fn java_gets_in(&self, mode: Mode, name: &str, owner: &str) -> bool {
        let tries = json!({ "wait_ms": 0, "lease_ms": LEASE.as_millis() as u64 });
        let reply = self
            .java
            .ok("multi_try_lock", Three::args(mode, name, owner, tries))
            .await;
        reply.bool("acquired")
    }
}

/// Ferrisson's MultiLock or RedLock: the same methods, two types.
enum Composite {
    Multi(MultiLock),
    Red(RedLock),
}

impl Composite {
    /// `lock_with_lease(LEASE)`.
    async fn lock(&self) -> ferrisson::Result<MultiGuard> {
        match self {
            Composite::Multi(lock) => lock.lock_with_lease(LEASE).await,
            Composite::Red(lock) => lock.lock_with_lease(LEASE).await,
        }
    }

    async fn try_lock(&self) -> ferrisson::Result<Attempt<MultiGuard>> {
        match self {
            Composite::Multi(lock) => lock.try_lock().await,
            Composite::Red(lock) => lock.try_lock().await,
        }
    }
}

fn one(field: &str) -> HashMap<String, String> {
    HashMap::from([(field.to_owned(), "1".to_owned())])
}

/// Java holds its composite lock on all three servers: ferrisson's is busy and takes nothing;
/// then the reverse.
async fn each_side_excludes_the_other(three: &Three, mode: Mode) {
    let name = three.name(&format!("{mode:?}:exclusion"));
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    three
        .java
        .ok("multi_lock", Three::args(mode, &name, "m", leased))
        .await;
    let mut fields = Vec::new();
    for i in 0..3 {
        fields.push(three.java_field(i, "m").await);
    }
    let java_holds: Vec<_> = fields.iter().map(|f| one(f)).collect();
    assert_eq!(
        three.holders(&name).await,
        java_holds,
        "Java {mode:?} holds all three"
    );
    assert!(
        !three.ferrisson_gets_in(mode, &name).await,
        "ferrisson's {mode:?} got in beside Java's"
    );
    assert_eq!(
        three.holders(&name).await,
        java_holds,
        "ferrisson took nothing"
    );
    three
        .java
        .ok("multi_unlock", Three::args(mode, &name, "m", json!({})))
        .await;
    assert!(three.servers.holding(0..3, &name).await.is_empty());

    let guard = three.ferrisson_lock(mode, &name, Owner::new()).await;
    let ours: Vec<_> = guard
        .parts()
        .iter()
        .map(|p| one(p.holder_field()))
        .collect();
    assert_eq!(three.holders(&name).await, ours);
    assert!(
        !three.java_gets_in(mode, &name, "j").await,
        "Java's {mode:?} got in beside ferrisson's"
    );
    assert_eq!(three.holders(&name).await, ours, "Java took nothing back");
    guard.unlock().await.expect("ferrisson release");
    assert!(three.servers.holding(0..3, &name).await.is_empty());
}

/// A Java composite `lock()` waiting behind ferrisson's gets in after ferrisson releases, and a
/// ferrisson one waiting behind Java's likewise.
async fn a_waiter_of_each_side_gets_in_after_the_others_release(three: &Three, mode: Mode) {
    let name = three.name(&format!("{mode:?}:waiters"));
    let held = three.ferrisson_lock(mode, &name, Owner::new()).await;
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    let mut waiter = three
        .java
        .send("multi_lock", Three::args(mode, &name, "w", leased.clone()))
        .await;
    sleep(Duration::from_millis(500)).await;
    assert!(
        waiter.poll().is_none(),
        "Java's {mode:?} got in while ferrisson held"
    );
    held.unlock().await.expect("ferrisson release");
    let reply = waiter.wait(STEP).await;
    assert!(reply.ok(), "Java's {mode:?} lock(): {:?}", reply.fields);
    assert_eq!(three.servers.holding(0..3, &name).await, vec![0, 1, 2]);

    let waiting = three.ferrisson(mode, &name, Owner::new());
    let ferrisson = tokio::spawn(async move { waiting.lock().await });
    sleep(Duration::from_millis(500)).await;
    assert!(!ferrisson.is_finished(), "ferrisson got in while Java held");
    let released = Instant::now();
    three
        .java
        .ok("multi_unlock", Three::args(mode, &name, "w", json!({})))
        .await;
    let guard = timeout(STEP, ferrisson)
        .await
        .expect("ferrisson gets in after Java's release")
        .expect("task")
        .expect("ferrisson lock");
    eprintln!(
        "Java {} {mode:?}: ferrisson in {:?} after Java's release",
        three.version,
        released.elapsed()
    );
    guard.unlock().await.expect("ferrisson release");
}

/// Java's `MultiLock.tryLock(wait 2 s, lease 10 s)` tries each part with twice the wait as its
/// lease, then sets every part to the lease asked for: each server's PTTL is about 10 s.
async fn java_multi_lock_parts_keep_the_lease_asked_for(three: &Three) {
    let name = three.name("multi:lease");
    let tries = json!({ "wait_ms": 2_000, "lease_ms": 10_000 });
    let reply = three
        .java
        .ok(
            "multi_try_lock",
            Three::args(Mode::Multi, &name, "l", tries),
        )
        .await;
    assert!(reply.bool("acquired"));
    three
        .servers
        .assert_pttl_within(0..3, &name, 8_000..=10_000)
        .await;
    three
        .java
        .ok(
            "multi_unlock",
            Three::args(Mode::Multi, &name, "l", json!({})),
        )
        .await;
}

/// Ferrisson holds plain locks on two of the three servers: Java's RedLock can take one part at
/// most, fails, and gives back the part it took; ferrisson's holds are untouched.
async fn a_red_lock_majority_held_by_ferrisson_refuses_java_and_java_takes_nothing_back(
    three: &Three,
) {
    let name = three.name("red:majority-ferrisson");
    let owner = Owner::new();
    let mut ours = Vec::new();
    for client in &three.servers.clients[..2] {
        let lock = client.lock(&name).with_owner(owner);
        ours.push(lock.lock_with_lease(LEASE).await.expect("ferrisson part"));
    }
    assert!(!three.java_gets_in(Mode::Red, &name, "j").await);
    let holders = three.holders(&name).await;
    assert_eq!(holders[0], one(ours[0].holder_field()));
    assert_eq!(holders[1], one(ours[1].holder_field()));
    assert!(
        holders[2].is_empty(),
        "Java gave back its one part: {holders:?}"
    );
    for guard in ours {
        guard.unlock().await.expect("ferrisson release");
    }
}

/// The reverse: Java's plain locks on two servers (its clients there) keep ferrisson's RedLock
/// out, and ferrisson gives back the part it took.
async fn a_red_lock_majority_held_by_java_refuses_ferrisson(three: &Three) {
    let name = three.name("red:majority-java");
    // The peer's plain lock ops use its first client; server 1's part is taken by a JVM of its
    // own on that server.
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    three
        .java
        .ok("lock", lock_args("lock", &name, "p", leased.clone()))
        .await;
    let second = JavaPeer::start_with(
        three.version,
        &[three.servers.servers[1].url()],
        Options::default(),
    )
    .await;
    let Ok(second) = second else {
        panic!("a second JVM on server 1 did not start");
    };
    second
        .ok("lock", lock_args("lock", &name, "p", leased))
        .await;
    let attempt = three.ferrisson_try(Mode::Red, &name).await;
    assert!(
        attempt.is_busy(),
        "ferrisson's RedLock got in on one of three"
    );
    let holders = three.holders(&name).await;
    assert_eq!(holders[0], one(&three.java_field(0, "p").await));
    assert_eq!(holders[1], one(&second.field("p").await));
    assert!(
        holders[2].is_empty(),
        "ferrisson gave back its one part: {holders:?}"
    );
    three
        .java
        .ok("unlock", lock_args("lock", &name, "p", json!({})))
        .await;
    second
        .ok("unlock", lock_args("lock", &name, "p", json!({})))
        .await;
    second.quit().await;
}
