//! Read-write locks across Java and ferrisson: write releases wake readers, read releases,
//! renewals of each side's reads, downgrades.

use std::collections::HashMap;
use std::time::Duration;

use ferrisson::Owner;
use serde_json::json;
use tokio::time::{sleep, Instant};

use super::{gets_in, Room, LEASE, PAST_THE_LEASE, STEP, WAKE_BOUND};
use crate::support::java::{lock_args, Unavailable, Version};
use crate::support::redis_state::{exists, pttl, wait_numsub};

pub(super) async fn read_write_lock(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    rw_a_ferrisson_write_release_wakes_every_java_reader_at_once(&room).await;
    rw_a_java_read_release_spares_a_ferrisson_read_hold(&room).await;
    rw_each_side_renews_its_own_reads(&room).await;
    rw_downgrades_are_seen_across(&room).await;
    room.java.quit().await;
    Ok(())
}

/// The timeout key of read hold `k` of `field`: T(N) + `:` + F + `:rwlock_timeout:` + k.
fn read_timeout_key(name: &str, field: &str, k: u32) -> String {
    format!("{{{name}}}:{field}:rwlock_timeout:{k}")
}

/// Three Java readers wait (one subscription) behind a ferrisson writer with a 20 s lease: its
/// release publishes `1`, which wakes all three at once.
async fn rw_a_ferrisson_write_release_wakes_every_java_reader_at_once(room: &Room) {
    let name = room.name("rw:wake-readers");
    let writer = (room.client.read_write_lock(&name).with_owner(Owner::new()))
        .write_lock()
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson writes");
    let waits = json!({ "wait_ms": 25_000, "lease_ms": LEASE.as_millis() as u64 });
    let mut readers = Vec::new();
    for owner in ["r1", "r2", "r3"] {
        let reader = room
            .java
            .send("try_lock", lock_args("read", &name, owner, waits.clone()));
        readers.push(reader.await);
    }
    wait_numsub(&room.raw, &format!("redisson_rwlock:{{{name}}}"), 1, STEP).await;
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    writer.unlock().await.expect("ferrisson write release");
    for reader in readers {
        let reply = reader.wait(STEP).await;
        assert!(reply.ok() && reply.bool("acquired"), "{:?}", reply.fields);
        let woke_after = reply.received.duration_since(released);
        assert!(
            woke_after < WAKE_BOUND,
            "a Java {} reader acquired {woke_after:?} after the write release",
            room.version
        );
    }
    let holders = room.holders(&name).await;
    assert_eq!(holders.get("mode").map(String::as_str), Some("read"));
    for owner in ["r1", "r2", "r3"] {
        let field = room.java.field(owner).await;
        assert_eq!(
            holders.get(&field).map(String::as_str),
            Some("1"),
            "{holders:?}"
        );
        room.java_unlock("read", &name, owner).await;
    }
    assert_eq!(exists(&room.raw, &name).await, 0);
}

/// Java and ferrisson both read; Java's release leaves ferrisson's hold (and its timeout key)
/// in place, a Java writer still cannot get in, and ferrisson's release then frees the lock.
async fn rw_a_java_read_release_spares_a_ferrisson_read_hold(room: &Room) {
    let name = room.name("rw:java-read-release");
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    room.java
        .ok("lock", lock_args("read", &name, "r", leased))
        .await;
    let ours = (room.client.read_write_lock(&name).with_owner(Owner::new()))
        .read_lock()
        .lock_with_lease(LEASE)
        .await
        .expect("ferrisson reads beside Java");
    room.java_unlock("read", &name, "r").await;
    let holders = room.holders(&name).await;
    assert_eq!(
        holders,
        HashMap::from([
            ("mode".to_owned(), "read".to_owned()),
            (ours.holder_field().to_owned(), "1".to_owned()),
        ])
    );
    let timeout_key = read_timeout_key(&name, ours.holder_field(), 1);
    assert!(
        pttl(&room.raw, &timeout_key).await > 15_000,
        "{timeout_key}"
    );
    assert!(pttl(&room.raw, &name).await > 15_000);
    assert!(
        !room.java_try_lock("write", &name, "w").await,
        "a reader is left"
    );
    ours.unlock().await.expect("ferrisson read release");
    assert_eq!(exists(&room.raw, &name).await, 0);
    assert!(room.java_try_lock("write", &name, "w").await);
    room.java_unlock("write", &name, "w").await;
}

/// Java and ferrisson read with the watchdog (3 s leases): both holds outlive the lease, and
/// after either side releases, the other's hold goes on being renewed by its own side.
async fn rw_each_side_renews_its_own_reads(room: &Room) {
    for java_leaves_first in [true, false] {
        let name = room.name(&format!("rw:renewals:{java_leaves_first}"));
        room.java
            .ok("lock", lock_args("read", &name, "r", json!({})))
            .await;
        let ours = (room.client.read_write_lock(&name).with_owner(Owner::new()))
            .read_lock()
            .lock()
            .await
            .expect("ferrisson reads beside Java");
        let (java_field, our_field) = (room.java.field("r").await, ours.holder_field().to_owned());
        sleep(PAST_THE_LEASE).await;
        for field in [&java_field, &our_field] {
            let key = read_timeout_key(&name, field, 1);
            assert!(pttl(&room.raw, &key).await > 0, "{key} renewed");
        }
        assert!(!room.java_try_lock("write", &name, "w").await);
        let mut ours = Some(ours);
        let left_alone = if java_leaves_first {
            room.java_unlock("read", &name, "r").await;
            &our_field
        } else {
            let guard = ours.take().expect("ferrisson's hold");
            guard.unlock().await.expect("ferrisson read release");
            &java_field
        };
        sleep(PAST_THE_LEASE).await;
        let key = read_timeout_key(&name, left_alone, 1);
        assert!(
            pttl(&room.raw, &key).await > 0 && pttl(&room.raw, &name).await > 0,
            "the hold left alone ({key}) is renewed by its own side"
        );
        assert!(!room.ferrisson_gets_in_to_write(&name).await);
        match ours {
            Some(guard) => guard.unlock().await.expect("ferrisson read release"),
            None => room.java_unlock("read", &name, "r").await,
        }
        assert_eq!(exists(&room.raw, &name).await, 0);
    }
}

/// A writer that takes a read hold and releases its write keeps reading: the other side's
/// readers get in at once, its writers do not. Each side downgrades in turn.
async fn rw_downgrades_are_seen_across(room: &Room) {
    let name = room.name("rw:downgrade-ferrisson");
    let rw = room.client.read_write_lock(&name).with_owner(Owner::new());
    let write = rw.write_lock().lock_with_lease(LEASE).await.expect("write");
    let read = rw
        .read_lock()
        .lock_with_lease(LEASE)
        .await
        .expect("read under the write");
    assert!(
        !room.java_try_lock("read", &name, "r").await,
        "a writer holds"
    );
    write.unlock().await.expect("write release");
    room.assert_read_mode(&name).await;
    assert!(
        room.java_try_lock("read", &name, "r").await,
        "Java reads beside the downgraded"
    );
    assert!(!room.java_try_lock("write", &name, "w").await);
    room.java_unlock("read", &name, "r").await;
    read.unlock().await.expect("read release");
    assert_eq!(exists(&room.raw, &name).await, 0);

    let name = room.name("rw:downgrade-java");
    let leased = json!({ "lease_ms": LEASE.as_millis() as u64 });
    room.java
        .ok("lock", lock_args("write", &name, "d", leased.clone()))
        .await;
    room.java
        .ok("lock", lock_args("read", &name, "d", leased))
        .await;
    assert!(
        !room.ferrisson_gets_in_to_read(&name).await,
        "a Java writer holds"
    );
    room.java_unlock("write", &name, "d").await;
    room.assert_read_mode(&name).await;
    assert!(
        room.ferrisson_gets_in_to_read(&name).await,
        "ferrisson reads beside it"
    );
    assert!(!room.ferrisson_gets_in_to_write(&name).await);
    room.java_unlock("read", &name, "d").await;
    assert_eq!(exists(&room.raw, &name).await, 0);
}

impl Room {
    /// Asserts that `name` is held in read mode (a downgrade left its read hold).
    async fn assert_read_mode(&self, name: &str) {
        let holders = self.holders(name).await;
        let mode = holders.get("mode").map(String::as_str);
        assert_eq!(mode, Some("read"), "{holders:?}");
    }

    /// A ferrisson read `try_lock` by a new owner: whether it acquired (released at once).
    async fn ferrisson_gets_in_to_read(&self, name: &str) -> bool {
        let rw = self.client.read_write_lock(name).with_owner(Owner::new());
        gets_in(rw.read_lock()).await
    }

    /// A ferrisson write `try_lock` by a new owner: whether it acquired (released at once).
    async fn ferrisson_gets_in_to_write(&self, name: &str) -> bool {
        let rw = self.client.read_write_lock(name).with_owner(Owner::new());
        gets_in(rw.write_lock()).await
    }
}
