//! Fair and non-reentrant fair locks across Java and ferrisson: one line served in arrival
//! order, give-ups, and a killed Java waiter.

use std::time::Duration;

use ferrisson::{Guard, Handle, Owner, Protocol};
use fred::clients::Client as RawClient;
use fred::prelude::*;
use serde_json::json;
use tokio::time::{timeout, Instant};

use super::{one, Room, LEASE, STEP, WAKE_BOUND};
use crate::support;
use crate::support::java::{lock_args, JavaPeer, Options, Unavailable, Version};
use crate::support::redis_state::{exists, poll_until};

pub(super) async fn fair_lock(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    let client = room.client.clone();
    fair_scenarios(&room, "fair", move |name| client.fair_lock(name)).await?;
    room.java.quit().await;
    Ok(())
}

pub(super) async fn non_reentrant_fair_lock(version: Version) -> Result<(), Unavailable> {
    if support::skip(
        version.has_non_reentrant_locks(),
        &format!("Redisson {version} has no non-reentrant fair lock (4.4.0 and later)"),
    ) {
        return Ok(());
    }
    let room = Room::new(version).await?;
    let client = room.client.clone();
    fair_scenarios(&room, "nonreentrant_fair", move |name| {
        client.non_reentrant_fair_lock(name)
    })
    .await?;
    room.java.quit().await;
    Ok(())
}

async fn fair_scenarios<P: Protocol>(
    room: &Room,
    kind: &str,
    lock: impl Fn(&str) -> Handle<P> + Send + Sync + Clone + 'static,
) -> Result<(), Unavailable> {
    fair_waiters_of_both_sides_are_served_in_arrival_order(room, kind, &lock).await;
    fair_a_waiter_that_gives_up_does_not_delay_the_next(room, kind, &lock).await;
    fair_a_killed_java_waiter_delays_the_next_by_its_wait_not_forever(room, kind, &lock).await
}

fn queue_of(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn timeouts_of(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

/// The fair lock's queue once it holds `n` waiters (panics after [`STEP`]).
async fn queued(raw: &RawClient, name: &str, n: usize) -> Vec<String> {
    let queue = queue_of(name);
    let probe = || async {
        raw.lrange::<Vec<String>, _>(&queue, 0, -1)
            .await
            .expect("LRANGE")
    };
    poll_until(STEP, Duration::from_millis(5), probe, |q: &Vec<String>| {
        q.len() == n
    })
    .await
    .unwrap_or_else(|q| panic!("{name}: {n} waiters not queued within {STEP:?}: {q:?}"))
}

/// A ferrisson waiter of `lock` that acquires with [`LEASE`], says when, and releases when
/// told.
struct FerrissonWaiter {
    acquired: tokio::sync::oneshot::Receiver<(String, Instant)>,
    release: tokio::sync::oneshot::Sender<()>,
}

fn spawn_waiter<P: Protocol>(lock: Handle<P>) -> FerrissonWaiter {
    let (acquired_tx, acquired) = tokio::sync::oneshot::channel();
    let (release, release_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let guard: Guard<P> = lock
            .lock_with_lease(LEASE)
            .await
            .expect("ferrisson acquires");
        let _ = acquired_tx.send((guard.holder_field().to_owned(), Instant::now()));
        let _ = release_rx.await;
        guard.unlock().await.expect("ferrisson release");
    });
    FerrissonWaiter { acquired, release }
}

impl FerrissonWaiter {
    /// Its holder field and when it acquired, within `within` of now.
    async fn acquired(&mut self, within: Duration, what: &str) -> (String, Instant) {
        timeout(within, &mut self.acquired)
            .await
            .unwrap_or_else(|_| {
                panic!("{what}: the ferrisson waiter did not acquire in {within:?}")
            })
            .expect("waiter task")
    }

    fn has_acquired(&mut self) -> bool {
        !matches!(
            self.acquired.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty)
        )
    }

    async fn release(self) {
        let _ = self.release.send(());
    }
}

/// Java, ferrisson, Java, ferrisson queue up behind a ferrisson holder, in that order: each
/// release hands the lock to the next of them, whichever side it is on, within a second.
async fn fair_waiters_of_both_sides_are_served_in_arrival_order<P: Protocol>(
    room: &Room,
    kind: &str,
    lock: &(impl Fn(&str) -> Handle<P> + Send + Sync + Clone + 'static),
) {
    let name = room.name(&format!("{kind}:order"));
    let java = &room.java;
    let holder = lock(&name).with_owner(Owner::new());
    let held = holder
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson holds");
    // An owner's thread id is asked before it blocks in its wait (it answers on that thread).
    let (j1_field, j2_field) = (java.field("j1").await, java.field("j2").await);
    let waits = json!({ "wait_ms": 30_000, "lease_ms": LEASE.as_millis() as u64 });
    let j1 = java
        .send("try_lock", lock_args(kind, &name, "j1", waits.clone()))
        .await;
    queued(&room.raw, &name, 1).await;
    let mut f1 = spawn_waiter(lock(&name).with_owner(Owner::new()));
    queued(&room.raw, &name, 2).await;
    let mut j2 = java
        .send("try_lock", lock_args(kind, &name, "j2", waits))
        .await;
    queued(&room.raw, &name, 3).await;
    let mut f2 = spawn_waiter(lock(&name).with_owner(Owner::new()));
    let queue = queued(&room.raw, &name, 4).await;
    assert_eq!((&queue[0], &queue[2]), (&j1_field, &j2_field), "{queue:?}");
    let ours = format!("{}:", room.client.id());
    assert!(
        queue[1].starts_with(&ours) && queue[3].starts_with(&ours),
        "{queue:?}"
    );

    let released = Instant::now();
    held.unlock().await.expect("ferrisson release");
    let reply = j1.wait(STEP).await;
    assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
    assert!(
        reply.received.duration_since(released) < WAKE_BOUND,
        "Java's turn came late"
    );
    assert!(j2.poll().is_none() && !f1.has_acquired() && !f2.has_acquired());
    assert_eq!(room.holders(&name).await, one(&j1_field, "1"));

    let released = Instant::now();
    room.java_unlock(kind, &name, "j1").await;
    let (field, acquired) = f1.acquired(STEP, "second in line").await;
    assert_eq!(field, queue[1]);
    assert!(acquired.duration_since(released) < WAKE_BOUND);
    assert!(j2.poll().is_none() && !f2.has_acquired());

    let released = Instant::now();
    f1.release().await;
    let reply = j2.wait(STEP).await;
    assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
    assert!(reply.received.duration_since(released) < WAKE_BOUND + Duration::from_millis(100));
    assert!(!f2.has_acquired());

    let released = Instant::now();
    room.java_unlock(kind, &name, "j2").await;
    let (field, acquired) = f2.acquired(STEP, "fourth in line").await;
    assert_eq!(field, queue[3]);
    assert!(acquired.duration_since(released) < WAKE_BOUND);
    f2.release().await;
    let gone =
        || async { exists(&room.raw, &name).await + exists(&room.raw, &queue_of(&name)).await };
    poll_until(STEP, Duration::from_millis(5), gone, |n| *n == 0)
        .await
        .expect("lock and queue gone after the last release");
}

/// A waiter whose wait runs out leaves the line at once (its give-up), so the waiter behind it
/// is next: a Java `tryLock(1 s)` ahead of a ferrisson waiter, and the reverse.
async fn fair_a_waiter_that_gives_up_does_not_delay_the_next<P: Protocol>(
    room: &Room,
    kind: &str,
    lock: &(impl Fn(&str) -> Handle<P> + Send + Sync + Clone + 'static),
) {
    let name = room.name(&format!("{kind}:java-gives-up"));
    let held = (lock(&name).with_owner(Owner::new()))
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson holds");
    let short = json!({ "wait_ms": 1_000, "lease_ms": LEASE.as_millis() as u64 });
    let quitter = room
        .java
        .send("try_lock", lock_args(kind, &name, "q", short))
        .await;
    queued(&room.raw, &name, 1).await;
    let mut next = spawn_waiter(lock(&name).with_owner(Owner::new()));
    queued(&room.raw, &name, 2).await;
    let reply = quitter.wait(STEP).await;
    assert!(reply.ok() && !reply.bool("acquired"), "{:?}", reply.fields);
    let queue = queued(&room.raw, &name, 1).await;
    assert!(queue[0].starts_with(room.client.id()), "{queue:?}");
    let released = Instant::now();
    held.unlock().await.expect("ferrisson release");
    let (_, acquired) = next
        .acquired(STEP, "behind a Java waiter that gave up")
        .await;
    assert!(acquired.duration_since(released) < WAKE_BOUND);
    next.release().await;

    let name = room.name(&format!("{kind}:ferrisson-gives-up"));
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    room.java
        .ok("lock", lock_args(kind, &name, "h", leased))
        .await;
    let quitter = lock(&name).with_owner(Owner::new());
    let quitting = tokio::spawn(async move {
        quitter
            .try_lock_within_with_lease(Duration::from_secs(1), LEASE)
            .await
            .map(|attempt| attempt.acquired().is_some())
    });
    queued(&room.raw, &name, 1).await;
    let next_field = room.java.field("n").await;
    let waits = json!({ "wait_ms": 30_000, "lease_ms": LEASE.as_millis() as u64 });
    let next = room
        .java
        .send("try_lock", lock_args(kind, &name, "n", waits))
        .await;
    queued(&room.raw, &name, 2).await;
    let gave_up = timeout(STEP, quitting)
        .await
        .expect("the ferrisson wait ends");
    assert!(
        !gave_up.expect("task").expect("try_lock"),
        "it could not acquire"
    );
    let queue = queued(&room.raw, &name, 1).await;
    assert_eq!(queue[0], next_field);
    let released = Instant::now();
    room.java_unlock(kind, &name, "h").await;
    let reply = next.wait(STEP).await;
    assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
    assert!(reply.received.duration_since(released) < WAKE_BOUND);
    room.java_unlock(kind, &name, "n").await;
}

/// A Java waiter at the head of the line is killed (`kill -9`): it never gives up, so the
/// waiter behind it gets the lock when the dead one's deadline passes (its wait of 2 s after
/// the lock's TTL), and not before, nor much after.
async fn fair_a_killed_java_waiter_delays_the_next_by_its_wait_not_forever<P: Protocol>(
    room: &Room,
    kind: &str,
    lock: &(impl Fn(&str) -> Handle<P> + Send + Sync + Clone + 'static),
) -> Result<(), Unavailable> {
    let name = room.name(&format!("{kind}:killed"));
    let url = room.server.url();
    let doomed = JavaPeer::start_with(room.version, &[url], Options::default()).await?;
    let held = (lock(&name).with_owner(Owner::new()))
        .lock_with_lease(Duration::from_secs(3))
        .await
        .expect("ferrisson holds");
    let waits = json!({ "wait_ms": 2_000, "lease_ms": LEASE.as_millis() as u64 });
    let _never = doomed
        .send("try_lock", lock_args(kind, &name, "d", waits))
        .await;
    let queue = queued(&room.raw, &name, 1).await;
    let deadline: f64 = room
        .raw
        .zscore(timeouts_of(&name), &queue[0])
        .await
        .expect("ZSCORE");
    support::fault::signal_pid(doomed.pid(), nix::sys::signal::Signal::SIGKILL);
    let mut next = spawn_waiter(lock(&name).with_owner(Owner::new()));
    queued(&room.raw, &name, 2).await;
    held.unlock().await.expect("ferrisson release");
    let (_, _) = next
        .acquired(Duration::from_secs(15), "behind a killed Java waiter")
        .await;
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as f64;
    eprintln!(
        "Java {}: the next waiter got in {:.0} ms after the killed head's deadline",
        room.version,
        at - deadline
    );
    assert!(
        at >= deadline - 50.0 && at <= deadline + 2_000.0,
        "acquired at {at}, the dead head's deadline was {deadline}"
    );
    next.release().await;
    drop(doomed);
    Ok(())
}
