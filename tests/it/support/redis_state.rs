//! Reading (and waiting for) server-side state through a raw fred client, as the integration
//! tests assert it: lock hashes, TTLs, pub/sub subscriber counts and command statistics.
//!
//! ```ignore
//! use support::redis_state::{hgetall, pttl, wait_numsub, channel_of};
//!
//! let raw = support::raw_client(&server.url()).await;
//! assert_eq!(pttl(&raw, "my-lock").await, -2);
//! wait_numsub(&raw, &channel_of("my-lock"), 1, Duration::from_secs(5)).await;
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use fred::clients::Client as RawClient;
use fred::{cmd, prelude::*};
use tokio::time::{sleep, Instant};

/// How often the `wait_*` helpers re-read the server.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Runs `probe` until `done` accepts its value or `within` has passed, sleeping `every` between
/// probes. The deadline is checked after each probe that was not accepted, so `probe` always
/// runs at least once. Returns `Ok(value)` once accepted, `Err(last value)` on timeout.
pub async fn poll_until<T, F, Fut>(
    within: Duration,
    every: Duration,
    mut probe: F,
    done: impl Fn(&T) -> bool,
) -> Result<T, T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = Instant::now() + within;
    loop {
        let value = probe().await;
        if done(&value) {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(value);
        }
        sleep(every).await;
    }
}

/// The pub/sub channel Redisson (and ferrisson) publish unlock messages of lock `name` on.
/// Like Redisson, a name with a `{` anywhere is used as it is, any other is wrapped in braces.
pub fn channel_of(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_lock__channel:{name}")
    } else {
        format!("redisson_lock__channel:{{{name}}}")
    }
}

/// `HGETALL key` (empty when the key does not exist).
pub async fn hgetall(raw: &RawClient, key: &str) -> HashMap<String, String> {
    raw.hgetall(key).await.expect("HGETALL")
}

/// The field names of the lock hash `name`, sorted.
pub async fn holder_fields(raw: &RawClient, name: &str) -> Vec<String> {
    let mut keys: Vec<String> = hgetall(raw, name).await.into_keys().collect();
    keys.sort();
    keys
}

/// `PTTL key`: -2 when the key does not exist, -1 when it has no expiry.
pub async fn pttl(raw: &RawClient, key: &str) -> i64 {
    raw.pttl(key).await.expect("PTTL")
}

/// `EXISTS key`: 1 or 0.
pub async fn exists(raw: &RawClient, key: &str) -> i64 {
    raw.exists(key).await.expect("EXISTS")
}

/// Polls `EXISTS name` until the key is gone, panicking with its contents after `within`.
pub async fn wait_key_gone(raw: &RawClient, name: &str, within: Duration) {
    let gone = poll_until(within, POLL_INTERVAL, || exists(raw, name), |n| *n == 0).await;
    if gone.is_err() {
        let fields = hgetall(raw, name).await;
        let pttl = pttl(raw, name).await;
        panic!("lock {name} still held after {within:?}: {fields:?} (pttl {pttl} ms)");
    }
}

/// Waits until something reset the TTL of `key` (a watchdog renewal of a lock, say): polls
/// `PTTL` until a reading is above the one before it, which a key left alone never shows.
/// Panics if the key goes away or no reset comes within `within`.
pub async fn wait_ttl_reset(raw: &RawClient, key: &str, within: Duration) {
    let mut last = pttl(raw, key).await;
    let deadline = Instant::now() + within;
    loop {
        assert!(last >= 0, "{key} has no TTL to reset (PTTL {last})");
        sleep(POLL_INTERVAL).await;
        let now = pttl(raw, key).await;
        if now > last {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the TTL of {key} was not reset within {within:?} (PTTL {now} ms)"
        );
        last = now;
    }
}

/// `PUBSUB NUMSUB channel`: how many connections subscribe to `channel`.
pub async fn numsub(raw: &RawClient, channel: &str) -> i64 {
    let reply: Vec<Value> = raw
        .custom(cmd!("PUBSUB"), vec!["NUMSUB", channel])
        .await
        .expect("PUBSUB NUMSUB");
    reply
        .get(1)
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("unexpected PUBSUB NUMSUB reply {reply:?}"))
}

/// Polls `PUBSUB NUMSUB channel` until it equals `expected`, panicking after `within`.
pub async fn wait_numsub(raw: &RawClient, channel: &str, expected: i64, within: Duration) {
    let polled = poll_until(
        within,
        POLL_INTERVAL,
        || numsub(raw, channel),
        |n| *n == expected,
    )
    .await;
    if let Err(n) = polled {
        panic!("PUBSUB NUMSUB {channel} stayed {n}, expected {expected} within {within:?}");
    }
}

/// Waits until `INFO replication` of `raw`'s server contains `needle` (a replica's
/// `master_link_status:up`, a master's `state=online`), panicking after 10 s.
pub async fn wait_replication(raw: &RawClient, needle: &str) {
    let polled = poll_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async {
            raw.info::<String>(Some(fred::types::InfoKind::Replication))
                .await
                .unwrap_or_default()
        },
        |info| info.contains(needle),
    )
    .await;
    if let Err(info) = polled {
        panic!("INFO replication did not show {needle} within 10 s:\n{info}");
    }
}

/// Waits until `replicas` replicas of `raw`'s server acknowledge a write of `raw`'s, panicking
/// after 10 s: from then on a `WAIT` after a write is answered within a round trip of the
/// replicas. `state=online` in the master's `INFO replication` (or `master_link_status:up` on
/// the replica) comes earlier: after a diskless full sync (Redis 7's default) the master counts
/// the replica online, in `connected_slaves` too, once it has reaped the RDB child, but streams
/// commands to it only from the replica's next `REPLCONF ACK`. The replica sends its first one
/// right after loading the RDB; when that one arrives before the child was reaped (the master's
/// cron does it, up to 100 ms later), the stream waits for the periodic one, up to a second
/// later, and so does every `WAIT` meanwhile (887 ms once in 20 runs here). Leaves no key
/// behind.
pub async fn wait_replicas_streaming(raw: &RawClient, replicas: i64) {
    wait_replicas_streaming_at(raw, replicas, "support:replication-probe").await;
}

/// [`wait_replicas_streaming`] with the probe key `probe`: on a cluster master, a key of a slot
/// it serves (`{<a key of that slot>}:probe`).
pub async fn wait_replicas_streaming_at(raw: &RawClient, replicas: i64, probe: &str) {
    let acked = poll_until(
        Duration::from_secs(10),
        POLL_INTERVAL,
        || async {
            let _: i64 = raw.incr(probe).await.expect("INCR");
            let acked: i64 = raw
                .custom(cmd!("WAIT"), vec![replicas, 100])
                .await
                .expect("WAIT");
            acked
        },
        |acked| *acked >= replicas,
    )
    .await;
    let _: i64 = raw.del(probe).await.expect("DEL");
    if let Err(acked) = acked {
        panic!("{acked} of {replicas} replicas acknowledged a write within 10 s");
    }
}

/// `CONFIG RESETSTAT`: zeroes the server's command statistics.
pub async fn reset_stats(raw: &RawClient) {
    let _: Value = raw
        .custom(cmd!("CONFIG"), vec!["RESETSTAT"])
        .await
        .expect("CONFIG RESETSTAT");
}

/// `calls` of every command in INFO commandstats, by lower-case command name
/// (`cmdstat_evalsha:calls=12,usec=...` gives `"evalsha" => 12`).
pub async fn command_stats(raw: &RawClient) -> HashMap<String, u64> {
    let info: String = raw
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_ascii_lowercase(), calls))
        })
        .collect()
}

/// How many times the server ran the (lower-case) command `name` since the last reset, 0 if
/// never.
pub async fn command_calls(raw: &RawClient, name: &str) -> u64 {
    command_stats(raw).await.get(name).copied().unwrap_or(0)
}

/// Script runs (`EVALSHA` and `EVAL`) on the server since the last reset.
pub async fn script_runs(raw: &RawClient) -> u64 {
    command_calls(raw, "evalsha").await + command_calls(raw, "eval").await
}

/// How many connections of type `kind` (`normal`, `pubsub`, ...) the server has:
/// `CLIENT LIST TYPE kind`.
pub async fn clients_of_type(raw: &RawClient, kind: &str) -> usize {
    let list: String = raw
        .custom(cmd!("CLIENT"), vec!["LIST", "TYPE", kind])
        .await
        .expect("CLIENT LIST");
    list.lines().count()
}
