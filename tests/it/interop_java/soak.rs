//! A mixed soak: three Java owners (the peer's `contend`, one platform thread each) and three
//! ferrisson owners take one RLock in turn for a bounded time, each hold logged with `RPUSH`
//! (`<tag>:in`, then `<tag>:out`) inside the lock. The log must alternate in and out of one
//! worker at a time (zero overlaps), every worker must come back within its bound (none hung),
//! and the holds per language are reported.

use std::collections::HashMap;
use std::time::Duration;

use ferrisson::Owner;
use fred::prelude::*;
use serde_json::json;
use tokio::time::{timeout, Instant};

use super::{Room, STEP};
use crate::support::java::{lock_args, Unavailable, Version};

/// How long every worker keeps taking the lock.
const SOAK: Duration = Duration::from_secs(4);
const WORKERS: usize = 3;

pub(super) async fn mixed_soak(version: Version) -> Result<(), Unavailable> {
    let room = Room::new(version).await?;
    let name = room.name("soak");
    let log = format!("{name}:log");
    let mut java = Vec::new();
    for w in 0..WORKERS {
        let owner = format!("j{w}");
        let args = json!({
            "log_key": log,
            "tag": owner,
            "duration_ms": SOAK.as_millis() as u64,
            "hold_ms": 1,
        });
        java.push(
            room.java
                .send("contend", lock_args("lock", &name, &owner, args))
                .await,
        );
    }
    let mut ours = Vec::new();
    for w in 0..WORKERS {
        let lock = room.client.lock(&name).with_owner(Owner::new());
        let raw = room.raw.clone();
        let (log, tag) = (log.clone(), format!("f{w}"));
        ours.push(tokio::spawn(async move {
            let until = Instant::now() + SOAK;
            let mut holds = 0u64;
            while Instant::now() < until {
                let guard = lock.lock().await.expect("ferrisson lock");
                let _: i64 = raw.rpush(&log, format!("{tag}:in")).await.expect("RPUSH");
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _: i64 = raw.rpush(&log, format!("{tag}:out")).await.expect("RPUSH");
                guard.unlock().await.expect("ferrisson release");
                holds += 1;
            }
            holds
        }));
    }
    let mut holds: HashMap<String, u64> = HashMap::new();
    for (w, pending) in java.into_iter().enumerate() {
        let reply = pending.wait(SOAK + STEP).await;
        assert!(reply.ok(), "Java worker j{w}: {:?}", reply.fields);
        holds.insert(format!("j{w}"), reply.u64("done"));
    }
    for (w, task) in ours.into_iter().enumerate() {
        let done = timeout(SOAK + STEP, task)
            .await
            .unwrap_or_else(|_| panic!("ferrisson worker f{w} hung"))
            .expect("worker task");
        holds.insert(format!("f{w}"), done);
    }

    let entries: Vec<String> = room.raw.lrange(&log, 0, -1).await.expect("LRANGE");
    for (i, pair) in entries.chunks(2).enumerate() {
        let closed = pair[0]
            .strip_suffix(":in")
            .is_some_and(|tag| pair.get(1) == Some(&format!("{tag}:out")));
        assert!(
            closed,
            "Java {version}: hold {i} overlaps another: {pair:?}"
        );
    }
    let logged: u64 = holds.values().sum();
    assert_eq!(entries.len() as u64, 2 * logged, "every hold logged once");
    let side = |prefix: &str| -> u64 {
        holds
            .iter()
            .filter(|(tag, _)| tag.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    };
    let (by_java, by_ferrisson) = (side("j"), side("f"));
    let mut per_worker: Vec<_> = holds.iter().collect();
    per_worker.sort();
    eprintln!(
        "Java {version} soak, {SOAK:?}: {logged} holds, no overlap; Java {by_java}, ferrisson \
         {by_ferrisson} (Java's share {:.2}); per worker {per_worker:?}",
        by_java as f64 / logged.max(1) as f64
    );
    assert!(
        by_java > 0 && by_ferrisson > 0,
        "a language was shut out: {holds:?}"
    );
    let _: i64 = room.raw.del(&log).await.expect("DEL");
    room.java.quit().await;
    Ok(())
}
