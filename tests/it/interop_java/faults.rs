//! Faults across Java and ferrisson: `kill -9` and `SIGSTOP` of holders on either side.

use std::time::Duration;

use ferrisson::Owner;
use serde_json::json;
use tokio::time::{sleep, Instant};

use super::{assert_unlock_refused, one, Room, LEASE, STEP, WATCHDOG};
use crate::support;
use crate::support::java::{lock_args, Unavailable, Version};
use crate::support::redis_state::{exists, poll_until, pttl};

pub(super) async fn faults(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    let (killed, stopped, ()) = tokio::join!(
        faults_a_killed_java_holder_lets_ferrisson_in_after_its_lease(&room),
        faults_a_stopped_java_holder_loses_the_lock_for_good(&room),
        faults_a_killed_ferrisson_holder_lets_java_in_after_its_lease(&room),
    );
    killed?;
    stopped?;
    room.java.quit().await;
    Ok(())
}

/// A Java holder in watchdog mode (lease [`WATCHDOG`]) is killed with `kill -9`: a ferrisson
/// waiter gets in once the last renewal's lease ends, not before and not much later.
async fn faults_a_killed_java_holder_lets_ferrisson_in_after_its_lease(
    room: &Room,
) -> Result<(), Unavailable> {
    let name = room.name("faults:killed-java");
    let doomed = room.java_holder_of(&name).await?;
    // Past one renewal, so that the lease left at the kill is a renewed one.
    sleep(WATCHDOG / 2).await;
    let waiter = room.client.lock(&name).with_owner(Owner::new());
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .try_lock_within(STEP)
            .await
            .expect("ferrisson try_lock")
            .acquired();
        (guard, Instant::now())
    });
    let ttl = pttl(&room.raw, &name).await;
    let killed = Instant::now();
    support::fault::signal_pid(doomed.pid(), nix::sys::signal::Signal::SIGKILL);
    let (guard, at) = waiting.await.expect("the waiter's task");
    let guard = guard.expect("ferrisson gets in after the killed holder's lease");
    let after = at.duration_since(killed);
    got_in_as_the_lease_ended(room, "ferrisson, after a killed Java holder", after, ttl);
    assert_eq!(room.holders(&name).await, one(guard.holder_field(), "1"));
    guard.unlock().await.expect("ferrisson release");
    drop(doomed);
    Ok(())
}

/// A Java holder stopped with `SIGSTOP` past its lease loses the lock to ferrisson; resumed,
/// its watchdog does not extend ferrisson's hold and its `unlock` throws
/// `IllegalMonitorStateException`, leaving ferrisson's hold alone.
async fn faults_a_stopped_java_holder_loses_the_lock_for_good(
    room: &Room,
) -> Result<(), Unavailable> {
    let name = room.name("faults:stopped-java");
    let sleeper = room.java_holder_of(&name).await?;
    let java_field = sleeper.field("h").await;
    support::fault::signal_pid(sleeper.pid(), nix::sys::signal::Signal::SIGSTOP);
    let lease = Duration::from_secs(8);
    let guard = (room.client.lock(&name).with_owner(Owner::new()))
        .try_lock_within_with_lease(STEP, lease)
        .await
        .expect("ferrisson try_lock")
        .acquired();
    let resumed = || support::fault::signal_pid(sleeper.pid(), nix::sys::signal::Signal::SIGCONT);
    let Some(guard) = guard else {
        resumed();
        panic!("ferrisson did not get in past the stopped Java holder's lease");
    };
    let taken = Instant::now();
    resumed();
    // Two of Java's renewal periods after it resumed.
    sleep(WATCHDOG * 2 / 3 + Duration::from_millis(500)).await;
    room.assert_not_extended(&name, lease, taken, "the resumed Java holder's watchdog")
        .await;
    assert_unlock_refused(&sleeper, &name, "h").await;
    let holders = room.holders(&name).await;
    assert_eq!(holders, one(guard.holder_field(), "1"));
    assert!(!holders.contains_key(&java_field));
    guard.unlock().await.expect("ferrisson release");
    sleeper.quit().await;
    Ok(())
}

/// `ferrisson run` holds a lock with the watchdog (lease [`WATCHDOG`]) and is killed with
/// `kill -9` (its whole process group): a Java waiter gets in once that lease ends.
async fn faults_a_killed_ferrisson_holder_lets_java_in_after_its_lease(room: &Room) {
    use std::os::unix::process::CommandExt;
    let name = room.name("faults:killed-ferrisson");
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_ferrisson-cli"));
    holder
        .args([
            "--url",
            &room.server.url(),
            "run",
            &name,
            "--",
            "sleep",
            "30",
        ])
        .env(
            "FERRISSON_WATCHDOG_TIMEOUT",
            format!("{}ms", WATCHDOG.as_millis()),
        )
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0);
    let mut holder = holder.spawn().expect("ferrisson run starts");
    let held = poll_until(
        STEP,
        Duration::from_millis(20),
        || exists(&room.raw, &name),
        |n| *n == 1,
    )
    .await;
    let group = nix::unistd::Pid::from_raw(holder.id() as i32);
    let kill = || {
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    };
    if held.is_err() {
        kill();
        panic!("`ferrisson run` did not take {name}");
    }
    sleep(WATCHDOG / 2).await;
    let waits = json!({ "wait_ms": STEP.as_millis() as u64, "lease_ms": LEASE.as_millis() as u64 });
    let waiting = room
        .java
        .send("try_lock", lock_args("lock", &name, "w", waits))
        .await;
    let ttl = pttl(&room.raw, &name).await;
    let killed = Instant::now();
    kill();
    let _ = holder.wait();
    let reply = waiting.wait(STEP + Duration::from_secs(5)).await;
    let after = killed.elapsed();
    assert!(
        reply.bool("acquired"),
        "Java got in after the killed holder: {:?}",
        reply.fields
    );
    got_in_as_the_lease_ended(room, "Java, after a killed ferrisson holder", after, ttl);
    let field = room.java.field("w").await;
    assert_eq!(room.holders(&name).await, one(&field, "1"));
    room.java_unlock("lock", &name, "w").await;
}

/// `who` got in `after` the kill of a holder whose lease had `ttl_ms` left: not before that
/// lease ended, and within a renewal-free lease of the kill (prints the figure).
fn got_in_as_the_lease_ended(room: &Room, who: &str, after: Duration, ttl_ms: i64) {
    eprintln!(
        "Java {}: {who}: in {after:?} after the kill, {ttl_ms} ms of lease left",
        room.version
    );
    assert!(
        after.as_millis() as i64 >= ttl_ms - 100 && after <= WATCHDOG + Duration::from_secs(2),
        "{who}: in {after:?} after the kill; the lease had {ttl_ms} ms left"
    );
}
