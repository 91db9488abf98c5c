//! Calls in doubt on the fair and read-write layouts (`src/lease/doubt.rs`, `lua/reconcile.lua`).
//!
//! An acquire whose script ran on the server but whose reply never came back (the server was
//! busy when it arrived, and the client's network went silent before it answered) leaves a hold
//! that no guard owns. Once Redis answers again the client's reconcile takes it back and frees
//! the lock as the primitive's own release would: no hash holding only `mode`, no read timeout
//! key left behind, and the waiter of another client woken at once by the message its layout
//! listens for (a fair lock's queue head on its own channel, a read-write lock's waiters on
//! `redisson_rwlock:{name}`), long before the lost hold's lease would have ended.
//!
//! The last test runs the script itself on hand-made hashes, for the layout details that an
//! acquire in doubt does not reach (partial reductions, the downgrade, a stale queue head).

use crate::support;

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrisson::{Client, Owner};
use fred::prelude::*;
use support::fault::{self, FaultProxy, ProxyMode};
use support::redis_state::{
    exists, hgetall, holder_fields, poll_until, pttl, wait_key_gone, wait_numsub, POLL_INTERVAL,
};
use support::{connect, connect_with, raw_client, timed_config, RedisServer};
use tokio::time::{sleep, timeout};

/// The lease of the hold whose reply is lost: the lock would stay taken this long if the
/// reconcile did not free it.
const LEASE: Duration = Duration::from_secs(30);

/// How soon after Redis answers the client again the waiter must hold the lock: the reconnect,
/// the reconcile's back-off (at most 1 s) and a round trip, far below `LEASE`.
const PROMPTLY: Duration = Duration::from_secs(5);

/// The response timeout of the client behind the proxy.
const RESPONSE: Duration = Duration::from_millis(1500);

/// The password of the ACL user below, as `ACL SETUSER` takes it.
const PASSWORD: &str = ">doubt-secret";

/// A server, a client behind a fault proxy (whose acquire's reply gets lost) and a client
/// connected directly (the waiter's).
struct Scene {
    /// Kept alive for the scene's life.
    _server: RedisServer,
    proxy: FaultProxy,
    raw: fred::clients::Client,
    cut_off: Client,
    direct: Client,
}

impl Scene {
    async fn start() -> Scene {
        Scene::start_as(None).await
    }

    /// The scene with the client behind the proxy logged in as `user` (`ACL SETUSER` rule
    /// words), with the password `PASSWORD`.
    async fn start_as(user: Option<(&str, &[&str])>) -> Scene {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port()).await;
        let raw = fault::resilient_raw_client(&server.url(), Duration::from_secs(5)).await;
        let url = match user {
            None => proxy.url(),
            Some((user, rule)) => {
                let mut words = vec!["SETUSER", user, "on", PASSWORD];
                words.extend_from_slice(rule);
                let _: Value = raw
                    .custom(fred::cmd!("ACL"), words)
                    .await
                    .expect("ACL SETUSER");
                format!(
                    "redis://{user}:{}@127.0.0.1:{}",
                    &PASSWORD[1..],
                    proxy.port()
                )
            }
        };
        let cut_off = connect_with(timed_config(url, Duration::from_secs(30), RESPONSE)).await;
        let direct = connect(&server).await;
        Scene {
            _server: server,
            proxy,
            raw,
            cut_off,
            direct,
        }
    }

    /// Runs `acquire` (a call through the proxy) so that its script runs but its reply is lost:
    /// the server holds the call (`CLIENT PAUSE WRITE`), the proxy goes silent once the server
    /// has it, and the server runs it when the call has failed (its reply timed out) and the
    /// client's reconcile, sent through the silent proxy, cannot reach it. Each step waits for
    /// the event it needs (the pause in effect, the call held), never for a guessed time. The
    /// proxy stays silent until [`Scene::restore`]. `warm_up` (the same kind of acquire and
    /// release, on another name) runs first, so that the server has the scripts cached: a
    /// `NOSCRIPT` reply lost instead would leave nothing to settle.
    async fn lose_reply<T: std::fmt::Debug + Send + 'static>(
        &self,
        warm_up: impl Future<Output = ferrisson::Result<()>>,
        acquire: impl Future<Output = ferrisson::Result<T>> + Send + 'static,
    ) {
        warm_up.await.expect("warm-up acquire and release");
        fault::pause_writes(&self.raw).await;
        let call = tokio::spawn(acquire);
        fault::wait_script_held(&self.raw, Duration::from_secs(10)).await;
        self.proxy.set_mode(ProxyMode::Blackhole);
        let err = call
            .await
            .expect("acquire task")
            .expect_err("no reply through the blackhole");
        assert!(err.is_transient(), "{err:?}");
        fault::unpause(&self.raw).await;
    }

    /// Lets the client behind the proxy reach Redis again (on fresh connections).
    fn restore(&self) {
        self.proxy.set_mode(ProxyMode::Pass);
        self.proxy.reset_all();
    }

    /// Waits until the waiter listens on `channel`, restores the proxy, and returns the
    /// waiter's guard once it acquired, which it must do promptly: woken by the reconcile's
    /// message, not by the lost hold's lease end.
    async fn woken_promptly<G: Send + 'static>(
        &self,
        channel: &str,
        waiter: tokio::task::JoinHandle<G>,
    ) -> G {
        wait_numsub(&self.raw, channel, 1, Duration::from_secs(5)).await;
        sleep(Duration::from_millis(100)).await;
        assert!(
            !waiter.is_finished(),
            "the waiter parks behind the lost hold"
        );
        self.restore();
        timeout(PROMPTLY, waiter)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the waiter still waits {PROMPTLY:?} after Redis answered again, with the \
                     lost hold's lease ({LEASE:?}) far from its end"
                )
            })
            .expect("waiter task")
    }

    /// The keys of every read hold's timeout key of lock `name`.
    async fn timeout_keys(&self, name: &str) -> Vec<String> {
        let pattern = format!("{{{name}}}:*:rwlock_timeout:*");
        self.raw
            .custom(fred::cmd!("KEYS"), vec![pattern])
            .await
            .expect("KEYS")
    }
}

/// Loses the reply of a `lock_with_lease(LEASE)` of lock `$name` on the scene's client behind
/// the proxy (see [`Scene::lose_reply`]), for a fresh owner. `$handle(client, name)` makes the
/// lock's handle; the warm-up uses it on another name.
macro_rules! lose_acquire {
    ($scene:expr, $name:expr, $handle:expr) => {{
        let handle = $handle;
        let lock = handle(&$scene.cut_off, $name).with_owner(Owner::new());
        let warm = handle(&$scene.cut_off, &format!("{}:warm", $name));
        $scene
            .lose_reply(async { warm.lock().await?.unlock().await }, async move {
                lock.lock_with_lease(LEASE).await
            })
            .await
    }};
}

/// Asserts that lock `name` is in read-write `mode` with `holders` holder fields.
async fn assert_mode(raw: &fred::clients::Client, name: &str, mode: &str, holders: usize) {
    let fields = hgetall(raw, name).await;
    assert_eq!(
        fields.get("mode").map(String::as_str),
        Some(mode),
        "{fields:?}"
    );
    assert_eq!(fields.len(), holders + 1, "{fields:?}");
}

/// Spawns `acquire` (a waiter that queues or parks for as long as `LEASE`); the task returns its
/// guard.
fn spawn_waiter<G: Send + 'static>(
    acquire: impl Future<Output = ferrisson::Result<ferrisson::Attempt<G>>> + Send + 'static,
) -> tokio::task::JoinHandle<G> {
    tokio::spawn(async move {
        acquire
            .await
            .expect("waiter's acquire")
            .acquired()
            .expect("the waiter acquires within its wait")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_acquire_in_doubt_is_taken_back_and_the_queue_head_told() {
    let scene = Scene::start().await;
    let name = "doubt:fair";
    lose_acquire!(scene, name, |client: &Client, name: &str| client
        .fair_lock(name));
    let lost = holder_fields(&scene.raw, name).await;
    assert_eq!(lost.len(), 1, "the acquire ran: {lost:?}");

    let waiter = spawn_waiter({
        let lock = scene.direct.fair_lock(name).with_owner(Owner::new());
        async move { lock.try_lock_within(LEASE).await }
    });
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let head = poll_until(
        Duration::from_secs(5),
        POLL_INTERVAL,
        || async { scene.raw.lindex::<Option<String>, _>(&queue, 0).await },
        |head| matches!(head, Ok(Some(_))),
    )
    .await
    .expect("the waiter queues")
    .expect("LINDEX")
    .expect("a head");
    let channel = format!("redisson_lock__channel:{{{name}}}:{head}");
    let guard = scene.woken_promptly(&channel, waiter).await;

    assert_eq!(guard.holder_field(), head);
    assert_eq!(
        holder_fields(&scene.raw, name).await,
        vec![head.clone()],
        "the lost hold is gone"
    );
    guard.unlock().await.expect("release");
    wait_key_gone(&scene.raw, name, Duration::from_secs(2)).await;
    assert_eq!(exists(&scene.raw, &queue).await, 0, "nobody left queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_acquire_in_doubt_is_taken_back_with_its_timeout_key_and_a_writer_woken() {
    let scene = Scene::start().await;
    let name = "doubt:read";
    lose_acquire!(scene, name, |client: &Client, name: &str| client
        .read_write_lock(name)
        .read_lock());
    assert_mode(&scene.raw, name, "read", 1).await;
    assert_eq!(scene.timeout_keys(name).await.len(), 1, "the acquire ran");

    let waiter = spawn_waiter({
        let lock = scene
            .direct
            .read_write_lock(name)
            .write_lock()
            .with_owner(Owner::new());
        async move { lock.try_lock_within(LEASE).await }
    });
    let channel = format!("redisson_rwlock:{{{name}}}");
    let guard = scene.woken_promptly(&channel, waiter).await;

    assert_mode(&scene.raw, name, "write", 1).await;
    assert!(
        scene.timeout_keys(name).await.is_empty(),
        "the lost read hold's timeout key went with it"
    );
    guard.unlock().await.expect("release");
    wait_key_gone(&scene.raw, name, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_acquire_in_doubt_is_taken_back_and_a_reader_woken() {
    let scene = Scene::start().await;
    let name = "doubt:write";
    lose_acquire!(scene, name, |client: &Client, name: &str| client
        .read_write_lock(name)
        .write_lock());
    assert_mode(&scene.raw, name, "write", 1).await;

    // Two readers of one client: the write side's message `1` wakes every waiter of a client
    // (`0` would wake one).
    let waiters = spawn_waiter({
        let rw = scene.direct.read_write_lock(name);
        let (first, second) = (
            rw.read_lock().with_owner(Owner::new()),
            rw.read_lock().with_owner(Owner::new()),
        );
        async move {
            let (first, second) =
                tokio::join!(first.try_lock_within(LEASE), second.try_lock_within(LEASE));
            Ok(first?.acquired().zip(second?.acquired()).into())
        }
    });
    let channel = format!("redisson_rwlock:{{{name}}}");
    let (first, second) = scene.woken_promptly(&channel, waiters).await;

    assert_mode(&scene.raw, name, "read", 2).await;
    first.unlock().await.expect("release");
    second.unlock().await.expect("release");
    wait_key_gone(&scene.raw, name, Duration::from_secs(2)).await;
    assert!(scene.timeout_keys(name).await.is_empty());
}

/// A user allowed only the reentrant lock's keys and what its scripts run (docs/reliability.md's
/// rule narrowed to the `doubt:` locks) settles a plain lock's acquire in doubt all the same:
/// the other layouts' names are not the script's keys, and the fair queue it may not read
/// counts as none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_confined_to_the_reentrant_keys_settles_its_plain_lock() {
    let rule = [
        "resetkeys",
        "~doubt:*",
        "~redisson_lock__channel:*",
        "resetchannels",
        "&redisson_lock__channel:*",
        "nocommands",
        "+client|id",
        "+ping",
        "+evalsha",
        "+eval",
        "+script|load",
        "+subscribe",
        "+unsubscribe",
        "+publish",
        "+exists",
        "+hexists",
        "+hget",
        "+hincrby",
        "+hset",
        "+hdel",
        "+pexpire",
        "+pttl",
        "+del",
        "+info",
        "+role",
    ];
    let scene = Scene::start_as(Some(("confined", &rule))).await;
    let name = "doubt:plain";
    lose_acquire!(scene, name, |client: &Client, name: &str| client.lock(name));
    assert_eq!(
        holder_fields(&scene.raw, name).await.len(),
        1,
        "the acquire ran"
    );

    let waiter = spawn_waiter({
        let lock = scene.direct.lock(name).with_owner(Owner::new());
        async move { lock.try_lock_within(LEASE).await }
    });
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let guard = scene.woken_promptly(&channel, waiter).await;
    assert_eq!(
        holder_fields(&scene.raw, name).await,
        vec![guard.holder_field().to_owned()]
    );
    guard.unlock().await.expect("release");
}

/// A token lock's acquire in doubt is settled as a hash lock's: the reconcile deletes the
/// string only while it holds the lost acquire's token, and the lock is free again long before
/// the lost hold's lease would end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_acquire_in_doubt_is_taken_back() {
    let scene = Scene::start().await;
    let name = "doubt:token";
    lose_acquire!(scene, name, |client: &Client, name: &str| client
        .token_lock(name));
    let token: Option<String> = scene.raw.get(name).await.expect("GET");
    let token = token.expect("the acquire ran");
    assert!(token.starts_with(scene.cut_off.id()), "{token}");

    scene.restore();
    wait_key_gone(&scene.raw, name, PROMPTLY).await;
    let guard = scene
        .direct
        .token_lock(name)
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("free again");
    guard.unlock().await.expect("release");
}

/// `lua/reconcile.lua` as the client sends it (`src/lock/upkeep.rs`, `RECONCILE`).
const RECONCILE: &str = concat!(
    include_str!("../../lua/lib/publish.lua"),
    include_str!("../../lua/lib/fair_prune.lua"),
    include_str!("../../lua/lib/read_hold_gone.lua"),
    include_str!("../../lua/reconcile.lua")
);

/// Runs the reconcile of `field` of lock `name` down to `keep` holds; returns its reply.
async fn reconcile(raw: &fred::clients::Client, name: &str, field: &str, keep: u64) -> i64 {
    let keys = vec![
        name.to_owned(),
        format!("redisson_lock__channel:{{{name}}}"),
    ];
    let args = vec![
        field.to_owned(),
        keep.to_string(),
        "PUBLISH".to_owned(),
        now_ms().to_string(),
        format!("redisson_rwlock:{{{name}}}"),
        format!("redisson_lock_queue:{{{name}}}"),
        format!("redisson_lock_timeout:{{{name}}}"),
        format!("{{{name}}}"),
    ];
    raw.eval(RECONCILE, keys, args)
        .await
        .expect("EVAL reconcile")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64
}

/// Sets the timeout key of read hold `k` of `field` on lock `name`, living `ttl_ms`.
async fn read_timeout(raw: &fred::clients::Client, name: &str, field: &str, k: u64, ttl_ms: i64) {
    let key = format!("{{{name}}}:{field}:rwlock_timeout:{k}");
    let _: () = raw
        .set(key, 1, Some(Expiration::PX(ttl_ms)), None, false)
        .await
        .expect("SET");
}

#[tokio::test]
async fn the_reconcile_keeps_each_layout_as_its_release_would() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;

    // A token lock: deleted only while it holds the field's token; kept for a count of 1.
    let name = "script:token";
    let _: () = raw
        .set(name, "uuid-a:1", None, None, false)
        .await
        .expect("SET");
    assert_eq!(
        reconcile(&raw, name, "uuid-b:1", 0).await,
        0,
        "another's token"
    );
    assert_eq!(reconcile(&raw, name, "uuid-a:1", 1).await, 1, "kept");
    assert_eq!(exists(&raw, name).await, 1);
    assert_eq!(reconcile(&raw, name, "uuid-a:1", 0).await, 1, "taken back");
    assert_eq!(exists(&raw, name).await, 0);

    let (f, g) = ("uuid-a:1", "uuid-b:1");
    let timeout_key = |name: &str, k: u64| format!("{{{name}}}:{f}:rwlock_timeout:{k}");

    // A read field brought from 3 holds to 1: holds 2 and 3 lose their timeout keys, and the
    // hash lives as long as the longest hold left (F's first, not G's shorter one).
    let name = "script:read:partial";
    let _: () = raw
        .hset(name, [("mode", "read"), (f, "3"), (g, "1")])
        .await
        .expect("HSET");
    for (k, ttl) in [(1, 20_000), (2, 40_000), (3, 60_000)] {
        read_timeout(&raw, name, f, k, ttl).await;
    }
    read_timeout(&raw, name, g, 1, 5_000).await;
    let _: () = raw.pexpire(name, 60_000, None).await.expect("PEXPIRE");
    assert_eq!(reconcile(&raw, name, f, 1).await, 3);
    assert_eq!(
        hgetall(&raw, name).await.get(f).map(String::as_str),
        Some("1")
    );
    assert_eq!(exists(&raw, &timeout_key(name, 1)).await, 1);
    assert_eq!(exists(&raw, &timeout_key(name, 2)).await, 0);
    assert_eq!(exists(&raw, &timeout_key(name, 3)).await, 0);
    let ttl = pttl(&raw, name).await;
    assert!((5_000..=20_000).contains(&ttl), "PTTL {ttl}");
    assert_eq!(reconcile(&raw, name, f, 1).await, 1, "idempotent");

    // The writer in doubt, its owner still reading (the downgrade): the hash stays, in `read`.
    let name = "script:downgrade";
    let writer = format!("{f}:write");
    let _: () = raw
        .hset(name, [("mode", "write"), (writer.as_str(), "1"), (f, "1")])
        .await
        .expect("HSET");
    read_timeout(&raw, name, f, 1, 30_000).await;
    assert_eq!(reconcile(&raw, name, &writer, 0).await, 1);
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.get("mode").map(String::as_str), Some("read"));
    assert_eq!(fields.get(f).map(String::as_str), Some("1"));
    assert!(!fields.contains_key(&writer));

    // The writer's own read hold in doubt: the write hold keeps the lock.
    let name = "script:write:reads";
    let _: () = raw
        .hset(name, [("mode", "write"), (writer.as_str(), "1"), (f, "2")])
        .await
        .expect("HSET");
    read_timeout(&raw, name, f, 1, 30_000).await;
    read_timeout(&raw, name, f, 2, 30_000).await;
    assert_eq!(reconcile(&raw, name, f, 0).await, 2);
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.get("mode").map(String::as_str), Some("write"));
    assert_eq!(fields.len(), 2, "{fields:?}");
    assert_eq!(exists(&raw, &timeout_key(name, 1)).await, 0);
    assert_eq!(exists(&raw, &timeout_key(name, 2)).await, 0);

    // A fair lock whose queue head is stale: it is pruned, and the next waiter told on its own
    // channel.
    let name = "script:fair";
    let (queue, timeouts) = (
        format!("redisson_lock_queue:{{{name}}}"),
        format!("redisson_lock_timeout:{{{name}}}"),
    );
    let _: () = raw.hset(name, [(f, "1")]).await.expect("HSET");
    let _: () = raw.rpush(&queue, vec!["stale:1", g]).await.expect("RPUSH");
    let now = now_ms() as f64;
    let _: () = raw
        .zadd(
            &timeouts,
            None,
            None,
            false,
            false,
            vec![(now - 1_000.0, "stale:1"), (now + 60_000.0, g)],
        )
        .await
        .expect("ZADD");
    let subscriber = raw_client(&server.url()).await;
    let mut received = subscriber.message_rx();
    let channel = format!("redisson_lock__channel:{{{name}}}:{g}");
    subscriber
        .subscribe(channel.as_str())
        .await
        .expect("SUBSCRIBE");
    assert_eq!(reconcile(&raw, name, f, 0).await, 1);
    assert_eq!(exists(&raw, name).await, 0);
    let left: Vec<String> = raw.lrange(&queue, 0, -1).await.expect("LRANGE");
    assert_eq!(left, vec![g.to_owned()], "the stale head was pruned");
    let message = timeout(Duration::from_secs(2), received.recv())
        .await
        .expect("the queue head is told")
        .expect("a message");
    assert_eq!(&*message.channel, channel.as_str());
    assert_eq!(message.value.as_string().as_deref(), Some("0"));
}
