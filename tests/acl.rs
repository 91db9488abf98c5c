//! A least-privilege ACL user (issue 13, section 4). The rule is the one documented in
//! `docs/reliability.md` (read from there, so the documentation cannot drift from what is
//! tested): with it every lock operation works and the server's `ACL LOG` records no denial;
//! a user without the rule's permissions gets a clear typed error, never a hang or a leaked
//! lock; and the password never shows in `Debug` output or error messages.

mod support;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use ferrisson::{Config, Error, Owner};
use fred::prelude::*;
use support::redis_state::{channel_of, exists, wait_numsub};
use support::{raw_client, RedisServer};
use tokio::time::timeout;

const PASSWORD: &str = "s3cret-Pa55";

/// The `ACL SETUSER` rule of docs/reliability.md, as arguments, for user `user`.
fn documented_rule(user: &str) -> Vec<String> {
    let docs = include_str!("../docs/reliability.md");
    let line = docs
        .lines()
        .find(|line| line.trim_start().starts_with("ACL SETUSER ferrisson "))
        .expect("docs/reliability.md documents the ACL rule");
    line.split_whitespace()
        .skip(2) // ACL SETUSER
        .map(|word| match word {
            "ferrisson" => user.to_owned(),
            ">PASSWORD" => format!(">{PASSWORD}"),
            other => other.to_owned(),
        })
        .collect()
}

async fn set_user(raw: &fred::clients::Client, args: Vec<String>) {
    let _: Value = raw
        .custom(
            fred::cmd!("ACL"),
            [vec!["SETUSER".to_owned()], args].concat(),
        )
        .await
        .expect("ACL SETUSER");
}

/// The denials the server logged since the last reset, as "reason: object" lines.
async fn acl_denials(raw: &fred::clients::Client) -> Vec<String> {
    let log: Vec<Value> = raw
        .custom(fred::cmd!("ACL"), vec!["LOG"])
        .await
        .expect("ACL LOG");
    log.iter()
        .map(|entry| {
            let fields: Vec<Value> = entry.clone().convert().unwrap_or_default();
            let text: Vec<String> = fields
                .iter()
                .filter_map(|value| value.as_string())
                .collect();
            text.join(" ")
        })
        .collect()
}

/// The server logged no ACL denial, and synced writes ran their `WAIT` as the user.
async fn assert_nothing_denied_and_writes_synced(raw: &fred::clients::Client) {
    assert_eq!(acl_denials(raw).await, Vec::<String>::new(), "denied");
    assert!(
        support::redis_state::command_calls(raw, "wait").await > 0,
        "synced writes waited for the replicas"
    );
}

/// Waits for `lock`, then releases it.
async fn take_and_release(lock: ferrisson::Lock) {
    let guard = lock
        .try_lock_for(Duration::from_secs(10), None)
        .await
        .expect("acquire")
        .acquired()
        .expect("acquired");
    guard.unlock().await.expect("release");
}

fn config_for(server: &RedisServer, user: &str) -> Config {
    let mut config = Config::new(format!(
        "redis://{user}:{PASSWORD}@127.0.0.1:{}",
        server.port()
    ));
    config.watchdog_timeout = Duration::from_millis(600);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_least_privilege_user_can_do_everything_ferrisson_does() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // A replica, so that synced writes (INFO replication, WAIT) run under the rule too.
    let port = server.port().to_string();
    let _replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    support::redis_state::wait_replication(&raw, "state=online").await;
    set_user(&raw, documented_rule("locker")).await;
    let _: Value = raw
        .custom(fred::cmd!("ACL"), vec!["LOG", "RESET"])
        .await
        .expect("ACL LOG RESET");
    let mut config = config_for(&server, "locker");
    config.synced_writes = ferrisson::SyncedWrites::Always;
    let holder_client = ferrisson::Client::new(config)
        .await
        .expect("the least-privilege user connects");
    let waiter_client = ferrisson::Client::new(config_for(&server, "locker"))
        .await
        .expect("the least-privilege user connects");
    let name = "acl:orders:42";

    let lock = holder_client.lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    let again = guard.reenter().await.expect("re-enter");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 2);
    assert!(lock.is_locked().await.expect("is_locked"));
    assert!(lock.is_held_by_current_owner().await.expect("held by"));
    lock.remaining_ttl().await.expect("remaining_ttl");
    let info = holder_client.inspect(name).await.expect("inspect");
    assert!(info.is_locked());
    // A waiter in another client, woken by the unlock message; renewals meanwhile.
    let waiter = tokio::spawn({
        let lock = waiter_client.lock(name).with_owner(Owner::new());
        async move { take_and_release(lock).await }
    });
    wait_numsub(&raw, &channel_of(name), 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(900)).await; // past the 600 ms lease: renewed
    assert!(!guard.is_lost());
    // Local waiters of the holder's client too (hand-off, giving way).
    let local = tokio::spawn({
        let lock = holder_client.lock(name).with_owner(Owner::new());
        async move { take_and_release(lock).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    again.unlock().await.expect("partial release");
    guard.unlock().await.expect("full release");
    for task in [waiter, local] {
        let Ok(outcome) = timeout(Duration::from_secs(5), task).await else {
            panic!(
                "a waiter was not woken; ACL denials: {:?}",
                acl_denials(&raw).await
            );
        };
        outcome.expect("waiter task");
    }
    // Dropped guards and force unlocks.
    drop(lock.lock().await.expect("lock again"));
    support::redis_state::wait_key_gone(&raw, name, Duration::from_secs(2)).await;
    lock.lock().await.expect("lock again").detach();
    assert!(waiter_client
        .lock(name)
        .force_unlock()
        .await
        .expect("force_unlock"));
    holder_client.shutdown().await;
    waiter_client.shutdown().await;

    assert_nothing_denied_and_writes_synced(&raw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_permissions_gets_a_clear_error_and_leaves_nothing() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // Can connect and read, nothing else.
    set_user(
        &raw,
        [
            "reader",
            "on",
            &format!(">{PASSWORD}"),
            "~*",
            "&*",
            "+@read",
            "+@connection",
        ]
        .map(str::to_owned)
        .to_vec(),
    )
    .await;
    let client = ferrisson::Client::new(config_for(&server, "reader"))
        .await
        .expect("the reader connects");
    let lock = client.lock("acl:denied").with_owner(Owner::new());
    for result in [
        lock.lock().await.map(drop),
        lock.try_lock().await.map(drop),
        lock.try_lock_for(Duration::from_millis(200), None)
            .await
            .map(drop),
    ] {
        let err = result.expect_err("the reader cannot run the lock scripts");
        assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("permission"), "{text}");
        assert!(!text.contains(PASSWORD), "{text}");
    }
    assert_eq!(exists(&raw, "acl:denied").await, 0);

    // The documented rule narrowed to the `orders:` locks (their channels are passed to the
    // release script as keys, so their pattern stays): a lock outside gets the same clear error.
    let rule: Vec<String> = documented_rule("narrow")
        .into_iter()
        .flat_map(|word| match word.as_str() {
            "~*" => vec![
                "~orders:*".to_owned(),
                "~redisson_lock__channel:*".to_owned(),
            ],
            _ => vec![word],
        })
        .collect();
    set_user(&raw, rule).await;
    let narrow = ferrisson::Client::new(config_for(&server, "narrow"))
        .await
        .expect("the narrow user connects");
    let inside = narrow.lock("orders:1").with_owner(Owner::new());
    inside
        .lock()
        .await
        .expect("a lock inside the pattern")
        .unlock()
        .await
        .expect("release");
    let err = narrow
        .lock("invoices:1")
        .with_owner(Owner::new())
        .lock()
        .await
        .expect_err("a lock outside the key pattern");
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    assert_eq!(exists(&raw, "invoices:1").await, 0);
}

/// Every log line of this test binary, at every level (ferrisson's `tracing` events and, through
/// the `log` bridge, fred's).
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || LogSink(sink.clone()))
            .try_init()
            .expect("the only subscriber of this test binary");
        logs
    })
    .clone()
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_stay_out_of_logs() {
    let logs = captured_logs();
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    set_user(&raw, documented_rule("logged")).await;
    let client = ferrisson::Client::new(config_for(&server, "logged"))
        .await
        .expect("connects");
    let guard = client.lock("acl:logged").lock().await.expect("lock");
    guard.unlock().await.expect("release");
    client.shutdown().await;
    let _ = ferrisson::Client::new(config_for(&server, "nobody")).await;
    let text = String::from_utf8_lossy(&logs.lock()).into_owned();
    assert!(
        text.contains("ferrisson client connected"),
        "the capture works: {text}"
    );
    assert!(
        text.contains("logged:***@"),
        "the URL is logged, masked: {text}"
    );
    assert!(!text.contains(PASSWORD), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_stay_out_of_debug_output_and_errors() {
    let server = RedisServer::start();
    let config = config_for(&server, "nobody");
    assert!(!format!("{config:?}").contains(PASSWORD));
    let err = ferrisson::Client::new(config)
        .await
        .expect_err("no such user");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(!err.to_string().contains(PASSWORD), "{err}");
    assert!(!format!("{err:?}").contains(PASSWORD), "{err:?}");
}

/// Behind Sentinel the documented rule is enough as well: fred checks `ROLE` on the master the
/// sentinels name, and synced writes, on by default there, read `INFO replication` and send
/// `WAIT`. The sentinels themselves need no user: the URL's credentials are the data nodes'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rule_is_enough_behind_sentinel() {
    let fixture = support::sentinel::RedisSentinel::start().await;
    for index in 0..fixture.nodes.len() {
        let node = fixture.node_client(index).await;
        set_user(&node, documented_rule("locker")).await;
        let _: Value = node
            .custom(fred::cmd!("ACL"), vec!["LOG", "RESET"])
            .await
            .expect("ACL LOG RESET");
    }
    let url = fixture.url().replacen(
        "redis-sentinel://",
        &format!("redis-sentinel://locker:{PASSWORD}@"),
        1,
    );
    let client = ferrisson::Client::new(Config::new(url))
        .await
        .expect("the least-privilege user connects through the sentinels");
    let waiter_client = ferrisson::Client::new(client.config().clone())
        .await
        .expect("a second client connects");
    let name = "acl:sentinel";
    let guard = support::hold(&client, name).await;
    let waiter = tokio::spawn({
        let lock = waiter_client.lock(name).with_owner(Owner::new());
        async move { take_and_release(lock).await }
    });
    let master = fixture.master_client().await;
    wait_numsub(&master, &channel_of(name), 1, Duration::from_secs(5)).await;
    guard.unlock().await.expect("release");
    timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is woken")
        .expect("waiter task");
    client.shutdown().await;
    waiter_client.shutdown().await;

    assert_nothing_denied_and_writes_synced(&master).await;
}

/// The documented rule covers the read-write lock too: its channel, `SET` for the read holds'
/// timeout keys and `HKEYS` for a read release that looks at every reader's keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_least_privilege_user_can_use_the_read_write_lock() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    set_user(&raw, documented_rule("rw")).await;
    let _: Value = raw
        .custom(fred::cmd!("ACL"), vec!["LOG", "RESET"])
        .await
        .expect("ACL LOG RESET");
    let client = ferrisson::Client::new(config_for(&server, "rw"))
        .await
        .expect("the least-privilege user connects");
    let name = "acl:catalog";
    let owner = client.read_write_lock(name).with_owner(Owner::new());
    let other = client.read_write_lock(name).with_owner(Owner::new());

    let write = owner.write_lock().lock().await.expect("write");
    let read = owner.read_lock().lock().await.expect("downgrade");
    let again = owner.read_lock().lock().await.expect("re-enter");
    assert!(owner.write_lock().is_locked().await.expect("is_locked"));
    assert!(owner.read_lock().is_locked().await.expect("is_locked"));
    assert_eq!(owner.read_lock().hold_count().await.expect("count"), 2);
    let waiter = tokio::spawn(async move {
        let guard = other.write_lock().lock().await.expect("the other writer");
        guard.unlock().await.expect("release");
    });
    tokio::time::sleep(Duration::from_millis(900)).await; // past the 600 ms lease: renewed
    write.unlock().await.expect("write release");
    again.unlock().await.expect("partial read release");
    read.unlock().await.expect("last read release");
    timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the writer is woken")
        .expect("waiter task");
    owner.read_lock().lock().await.expect("read").detach();
    assert!(owner.read_lock().force_unlock().await.expect("force"));
    client.shutdown().await;
    assert_eq!(acl_denials(&raw).await, Vec::<String>::new(), "denied");
}
