//! Configuration: `Config::builder` and `Config::from_env_vars` check every value and name the
//! setting (or the variable) at fault; fred's settings reach the client's connections, also from
//! an application's own fred `Builder`, and cannot switch off what keeps locks correct.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ferrisson::fred::interfaces::ClientLike;
use ferrisson::fred::types::config::{
    Config as FredConfig, ConnectionConfig, PerformanceConfig, ReconnectPolicy, Server,
    ServerConfig, UnresponsiveConfig,
};
use ferrisson::fred::types::Builder;
use ferrisson::{
    Client, Config, DeadlockDetection, Error, PublishMode, SyncedWrites, WhenUnavailable,
};
use parking_lot::Mutex;
use support::fault::{self, FaultProxy, ProxyMode};
use support::redis_state::{channel_of, exists, holder_fields, poll_until, wait_numsub};
use support::{hold, raw_client, RedisServer};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The message of an `InvalidArgument`; panics on any other outcome.
fn invalid(result: ferrisson::Result<Config>) -> String {
    match result {
        Err(Error::InvalidArgument(message)) => message,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

// Config::builder ------------------------------------------------------------------------------

#[test]
fn the_builder_sets_every_setting_and_keeps_the_defaults_of_the_others() {
    let connection = ConnectionConfig {
        max_command_attempts: 7,
        ..ConnectionConfig::default()
    };
    let config = Config::builder("redis://a:1")
        .url("redis://b:2")
        .watchdog_timeout(Duration::from_secs(9))
        .renewal_batch_size(7)
        .publish_mode(PublishMode::Both)
        .when_unavailable(WhenUnavailable::KeepWaiting)
        .response_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(2))
        .pool_size(5)
        .max_local_handoffs(0)
        .synced_writes(SyncedWrites::Off)
        .replica_sync_timeout(Duration::from_millis(200))
        .connection(connection)
        .reconnect_policy(ReconnectPolicy::new_constant(0, 10))
        .build()
        .expect("a valid configuration");
    assert_eq!(config.url, "redis://b:2");
    assert_eq!(config.watchdog_timeout, Duration::from_secs(9));
    assert_eq!(config.renewal_batch_size, 7);
    assert_eq!(config.publish_mode, PublishMode::Both);
    assert_eq!(config.when_unavailable, WhenUnavailable::KeepWaiting);
    assert_eq!(config.response_timeout, Duration::from_secs(3));
    assert_eq!(config.connect_timeout, Duration::from_secs(2));
    assert_eq!(config.pool_size, 5);
    assert_eq!(config.max_local_handoffs, 0);
    assert_eq!(config.synced_writes, SyncedWrites::Off);
    assert_eq!(config.replica_sync_timeout, Duration::from_millis(200));
    assert_eq!(config.connection.max_command_attempts, 7);
    assert_eq!(
        config.reconnect_policy,
        ReconnectPolicy::new_constant(0, 10)
    );
    // Untouched: Redisson's defaults, as Config::new has them.
    let defaults = Config::builder("redis://h").build().expect("the defaults");
    let new = Config::new("redis://h");
    assert_eq!(format!("{defaults:?}"), format!("{new:?}"));
}

#[test]
fn the_builder_rejects_a_bad_value_naming_the_setting() {
    let builder = || Config::builder("redis://127.0.0.1:6379");
    let unresponsive = ConnectionConfig {
        unresponsive: UnresponsiveConfig {
            max_timeout: Some(Duration::from_secs(1)),
            interval: Duration::ZERO,
        },
        ..ConnectionConfig::default()
    };
    let cases = [
        (
            "watchdog_timeout",
            builder().watchdog_timeout(Duration::from_millis(2)),
        ),
        ("renewal_batch_size", builder().renewal_batch_size(0)),
        ("pool_size", builder().pool_size(0)),
        (
            "response_timeout",
            builder().response_timeout(Duration::ZERO),
        ),
        ("connect_timeout", builder().connect_timeout(Duration::ZERO)),
        (
            "replica_sync_timeout",
            builder().replica_sync_timeout(Duration::ZERO),
        ),
        (
            "reconnect_policy",
            builder().reconnect_policy(ReconnectPolicy::new_exponential(5, 10, 100, 2)),
        ),
        (
            "connection.max_command_attempts",
            builder().connection(ConnectionConfig {
                max_command_attempts: 0,
                ..ConnectionConfig::default()
            }),
        ),
        (
            "connection.unresponsive.interval",
            builder().connection(unresponsive),
        ),
        (
            "performance.broadcast_channel_capacity",
            builder().performance(PerformanceConfig {
                broadcast_channel_capacity: 0,
                ..PerformanceConfig::default()
            }),
        ),
    ];
    for (setting, builder) in cases {
        let message = invalid(builder.build());
        assert!(message.starts_with(setting), "{setting}: {message}");
    }
}

/// Several bad settings are all named in one error, in the order of the checks, with their
/// count; the URL's syntax is checked too, in words.
#[test]
fn the_builder_names_every_bad_setting_at_once() {
    let message = invalid(
        Config::builder("redis://127.0.0.1:6379")
            .pool_size(0)
            .watchdog_timeout(Duration::from_millis(1))
            .replica_sync_timeout(Duration::ZERO)
            .build(),
    );
    assert_eq!(
        message,
        "3 problems: watchdog_timeout must be at least 3 ms, got 1ms; pool_size must be at \
         least 1, got 0; replica_sync_timeout must be at least 1 ms, got 0ns"
    );
    let message = invalid(Config::builder("cache:6379").pool_size(0).build());
    assert!(message.starts_with("2 problems: pool_size"), "{message}");
    assert!(
        message.contains("url `cache:6379`: it has no scheme"),
        "{message}"
    );
}

/// A URL that does not parse is said in words (never `RelativeUrlWithoutBase`), its password
/// masked, at `build()` and at `Client::new`.
#[tokio::test]
async fn a_malformed_url_is_said_in_words_with_its_password_masked() {
    let cases = [
        ("127.0.0.1:6379", "it has no scheme"),
        ("localhost:6379", "it has no scheme"),
        ("redis://", "it has no host"),
        ("redis://app:s3cret@:6379", "it has no host"),
        (
            "redis://127.0.0.1:99999",
            "its port is not a number from 0 to 65535",
        ),
        ("redis://127.0.0.1:port", "its port is not a number"),
        ("redis://[::1:6379", "its host is not a valid IPv6 address"),
        (
            "redis://app:s3/cret@127.0.0.1:6379",
            "must be percent-encoded",
        ),
    ];
    for (url, words) in cases {
        let built = invalid(Config::builder(url).build());
        assert!(built.contains(words), "{url}: {built}");
        let connected = match Client::new(Config::new(url)).await {
            Err(Error::InvalidArgument(message)) => message,
            other => panic!("{url}: expected InvalidArgument, got {other:?}"),
        };
        assert!(connected.contains(words), "{url}: {connected}");
        for message in [&built, &connected] {
            assert!(
                !message.contains("s3cret") && !message.contains("cret@"),
                "{message}"
            );
            assert!(!message.contains("RelativeUrlWithoutBase"), "{message}");
        }
    }
}

/// `Client::new` runs the same checks on a configuration whose public fields were changed.
#[tokio::test]
async fn client_new_rejects_what_the_builder_rejects() {
    let mut config = Config::new("redis://127.0.0.1:1");
    config.reconnect_policy = ReconnectPolicy::new_constant(1, 10);
    let err = Client::new(config)
        .await
        .expect_err("a policy that gives up");
    assert!(
        matches!(&err, Error::InvalidArgument(message) if message.contains("reconnect_policy")),
        "{err:?}"
    );
}

/// Unresponsive-connection detection shorter than a synced write's `WAIT` would close the
/// connection under every unacknowledged write: refused when writes are synced, not otherwise.
#[tokio::test]
async fn unresponsive_detection_must_outlast_the_replicas_wait() {
    let server = RedisServer::start();
    let config = |synced| {
        Config::builder(server.url())
            .synced_writes(synced)
            .replica_sync_timeout(Duration::from_secs(1))
            .connection(ConnectionConfig {
                unresponsive: UnresponsiveConfig {
                    max_timeout: Some(Duration::from_millis(500)),
                    interval: Duration::from_millis(100),
                },
                ..ConnectionConfig::default()
            })
            .build()
            .expect("valid on its own")
    };
    let err = Client::new(config(SyncedWrites::Always))
        .await
        .expect_err("shorter than the WAIT");
    assert!(
        matches!(&err, Error::InvalidArgument(message) if message.starts_with("connection.unresponsive.max_timeout")),
        "{err:?}"
    );
    let client = Client::new(config(SyncedWrites::Auto))
        .await
        .expect("a single server: no WAIT");
    client.shutdown().await;
}

// Config::from_env_vars ------------------------------------------------------------------------

#[test]
fn from_env_vars_reads_every_variable() {
    let config = Config::from_env_vars([
        ("REDIS_URL", "redis://cache:6380/1"),
        ("FERRISSON_WATCHDOG_TIMEOUT", "1m 30s"),
        ("FERRISSON_RESPONSE_TIMEOUT", "2500ms"),
        ("FERRISSON_CONNECT_TIMEOUT", " 3s "),
        ("FERRISSON_POOL_SIZE", "4"),
        ("FERRISSON_RENEWAL_BATCH_SIZE", "25"),
        ("FERRISSON_MAX_LOCAL_HANDOFFS", "0"),
        ("FERRISSON_PUBLISH_MODE", "Sharded"),
        ("FERRISSON_WHEN_UNAVAILABLE", "KEEP_WAITING"),
        ("FERRISSON_SYNCED_WRITES", "always"),
        ("FERRISSON_REPLICA_SYNC_TIMEOUT", "250ms"),
        ("FERRISSON_DEADLOCK_DETECTION", "Detect: 1s"),
        ("FERRISSON_LAZY_INITIALIZATION", "True"),
        ("PATH", "/usr/bin"),
    ])
    .expect("valid variables");
    assert_eq!(config.url, "redis://cache:6380/1");
    assert_eq!(config.watchdog_timeout, Duration::from_secs(90));
    assert_eq!(config.response_timeout, Duration::from_millis(2500));
    assert_eq!(config.connect_timeout, Duration::from_secs(3));
    assert_eq!(config.pool_size, 4);
    assert_eq!(config.renewal_batch_size, 25);
    assert_eq!(config.max_local_handoffs, 0);
    assert_eq!(config.publish_mode, PublishMode::Sharded);
    assert_eq!(config.when_unavailable, WhenUnavailable::KeepWaiting);
    assert_eq!(config.synced_writes, SyncedWrites::Always);
    assert_eq!(config.replica_sync_timeout, Duration::from_millis(250));
    assert!(config.lazy_initialization);
    assert_eq!(
        config.deadlock_detection,
        DeadlockDetection::Detect {
            threshold: Duration::from_secs(1)
        }
    );
    for (value, mode) in [
        ("off", DeadlockDetection::Off),
        (
            "record:500ms",
            DeadlockDetection::Record {
                after: Duration::from_millis(500),
            },
        ),
    ] {
        let config = Config::from_env_vars([("FERRISSON_DEADLOCK_DETECTION", value)]);
        assert_eq!(config.expect("valid").deadlock_detection, mode);
    }
}

#[test]
fn from_env_vars_without_variables_is_the_local_default() {
    let none: [(&str, &str); 0] = [];
    let config = Config::from_env_vars(none).expect("defaults");
    assert_eq!(config.url, "redis://127.0.0.1:6379");
    assert_eq!(config.url, Config::DEFAULT_URL);
    assert_eq!(
        format!("{config:?}"),
        format!("{:?}", Config::new(Config::DEFAULT_URL))
    );
    // Empty counts as unset; a later pair wins; other variables than REDIS_URL and FERRISSON_*
    // are not read.
    let config = Config::from_env_vars([
        ("REDIS_URL", ""),
        ("FERRISSON_POOL_SIZE", "2"),
        ("FERRISSON_POOL_SIZE", "3"),
        ("FERRISSON_WATCHDOG_TIMEOUT", ""),
        ("PATH", "/bin"),
        ("REDIS_PASSWORD", "x"),
    ])
    .expect("valid variables");
    assert_eq!(config.url, Config::DEFAULT_URL);
    assert_eq!(config.pool_size, 3);
    assert_eq!(config.watchdog_timeout, Duration::from_secs(30));
}

/// An unknown `FERRISSON_*` variable is an error (a misspelt one told the name it most likely
/// means), unless `FERRISSON_IGNORE_UNKNOWN=true`; every problem is named at once.
#[test]
fn from_env_vars_refuses_unknown_variables_unless_told_to_ignore_them() {
    let message = invalid(Config::from_env_vars([
        ("FERRISSON_WATCHDOG_TIMOUT", "10s"),
        ("FERRISSON_POOL_SIZE", "0"),
        ("FERRISSON_SOMETHING_ELSE", "1"),
        ("FERRISSON_PUBLISH_MODE", "loud"),
    ]));
    assert!(message.starts_with("4 problems: "), "{message}");
    let problems: Vec<&str> = message["4 problems: ".len()..].split("; ").collect();
    assert!(
        problems[0].starts_with("FERRISSON_POOL_SIZE=\"0\": pool_size must be at least 1"),
        "{problems:?}"
    );
    assert!(
        problems[1].starts_with("FERRISSON_PUBLISH_MODE=\"loud\": expected one of"),
        "{problems:?}"
    );
    assert!(
        problems[2].starts_with(
            "unknown variable FERRISSON_WATCHDOG_TIMOUT (did you mean FERRISSON_WATCHDOG_TIMEOUT?)"
        ),
        "{problems:?}"
    );
    assert!(
        problems[3].starts_with("unknown variable FERRISSON_SOMETHING_ELSE, not one of")
            && !problems[3].contains("did you mean"),
        "{problems:?}"
    );

    let config = Config::from_env_vars([
        ("FERRISSON_WATCHDOG_TIMOUT", "10s"),
        ("FERRISSON_POOL_SIZE", "3"),
        ("FERRISSON_IGNORE_UNKNOWN", "true"),
    ])
    .expect("unknown variables ignored");
    assert_eq!(config.pool_size, 3);
    assert_eq!(config.watchdog_timeout, Duration::from_secs(30));
    let message = invalid(Config::from_env_vars([(
        "FERRISSON_IGNORE_UNKNOWN",
        "maybe",
    )]));
    assert!(
        message.starts_with("FERRISSON_IGNORE_UNKNOWN=\"maybe\": expected one of true, false"),
        "{message}"
    );
}

#[test]
fn from_env_vars_rejects_a_bad_value_naming_the_variable_and_the_value() {
    let cases = [
        ("FERRISSON_WATCHDOG_TIMEOUT", "30"),
        ("FERRISSON_WATCHDOG_TIMEOUT", "2ms"),
        ("FERRISSON_RESPONSE_TIMEOUT", "soon"),
        ("FERRISSON_CONNECT_TIMEOUT", "0s"),
        ("FERRISSON_POOL_SIZE", "0"),
        ("FERRISSON_POOL_SIZE", "-1"),
        ("FERRISSON_RENEWAL_BATCH_SIZE", "1.5"),
        ("FERRISSON_MAX_LOCAL_HANDOFFS", "99999999999"),
        ("FERRISSON_PUBLISH_MODE", "loud"),
        ("FERRISSON_WHEN_UNAVAILABLE", "wait"),
        ("FERRISSON_SYNCED_WRITES", "yes"),
        ("FERRISSON_REPLICA_SYNC_TIMEOUT", "0ms"),
        ("FERRISSON_DEADLOCK_DETECTION", "on"),
        ("FERRISSON_DEADLOCK_DETECTION", "detect:5ms"),
        ("FERRISSON_DEADLOCK_DETECTION", "record:soon"),
    ];
    for (name, value) in cases {
        let message = invalid(Config::from_env_vars([
            ("FERRISSON_POOL_SIZE", "2"), // a valid neighbour does not hide the bad one
            (name, value),
        ]));
        assert!(
            message.starts_with(&format!("{name}={value:?}: ")),
            "{name}={value}: {message}"
        );
    }
    let message = invalid(Config::from_env_vars([("FERRISSON_PUBLISH_MODE", "loud")]));
    assert!(
        message.contains("auto, classic, sharded, both"),
        "{message}"
    );
}

// An application's fred Builder ----------------------------------------------------------------

fn builder_for(server: &RedisServer, database: Option<u8>) -> Builder {
    Builder::from_config(FredConfig {
        server: ServerConfig::Centralized {
            server: Server::new("127.0.0.1", server.port()),
        },
        database,
        ..FredConfig::default()
    })
}

/// The server, database and connection settings come from the builder: the lock hash is
/// written to database 3, and every connection of the client carries the name fred's
/// `auto_client_setname` gives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_from_a_fred_builder_locks_in_its_database() {
    let server = RedisServer::start();
    let mut builder = builder_for(&server, Some(3));
    builder.with_connection_config(|connection| connection.auto_client_setname = true);
    let client = Client::from_fred_builder(&builder, Config::new(Config::DEFAULT_URL))
        .await
        .expect("connects with the builder's settings");
    assert_eq!(
        client.config().url,
        format!("redis://127.0.0.1:{}/3", server.port())
    );
    assert!(client.config().connection.auto_client_setname);

    let db0 = raw_client(&server.url()).await;
    let db3 = raw_client(&format!("{}/3", server.url())).await;
    let guard = hold(&client, "config:db").await;
    let fields = holder_fields(&db3, "config:db").await;
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert!(fields[0].starts_with(client.id()), "{fields:?}");
    assert_eq!(exists(&db0, "config:db").await, 0);

    let list: String = db0
        .custom(ferrisson::fred::cmd!("CLIENT"), vec!["LIST"])
        .await
        .expect("CLIENT LIST");
    let named = list
        .lines()
        .filter(|line| line.contains(" name=fred-"))
        .count();
    // The command connection and the subscriber; the raw clients have no name.
    assert_eq!(named, 2, "{list}");

    guard.unlock().await.expect("release");
    assert_eq!(exists(&db3, "config:db").await, 0);
    client.shutdown().await;
}

/// fred never reconnects a client built without a reconnect policy; ferrisson gives it its own,
/// so killed connections come back and locks work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fred_builder_without_a_reconnect_policy_still_reconnects() {
    let server = RedisServer::start();
    let builder = builder_for(&server, None);
    assert!(builder.get_policy().is_none());
    // The two connections come back each in its own time: a waiter that finds the subscriber
    // still down waits for it (the default, `FailFast`, would fail the acquire at once).
    let mut config = Config::new(Config::DEFAULT_URL);
    config.when_unavailable = WhenUnavailable::KeepWaiting;
    let client = Client::from_fred_builder(&builder, config)
        .await
        .expect("connects");
    let raw = fault::resilient_raw_client(&server.url(), Duration::from_secs(5)).await;
    // The command connection and the subscriber (not subscribed yet, so of type normal).
    assert_eq!(fault::client_kill(&raw, "normal").await, 2);

    let name = "config:reconnect";
    let lock = client.lock(name);
    let locked = poll_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || lock.is_locked(),
        |reply| reply.is_ok(),
    )
    .await;
    assert!(
        matches!(locked, Ok(Ok(false))),
        "no reconnection: {locked:?}"
    );
    // The subscriber is back too: a waiter subscribes and is woken by the release.
    let holder = hold(&client, name).await;
    let waiter = support::spawn_waiter(&client, name, Duration::from_secs(10));
    wait_numsub(&raw, &channel_of(name), 1, Duration::from_secs(10)).await;
    holder.unlock().await.expect("release");
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is woken")
        .expect("the waiter acquires");
    client.shutdown().await;
}

/// A builder whose policy gives up, or with no server configuration, is refused before any
/// connection is made; messages name the builder's server, never its password.
#[tokio::test]
async fn a_fred_builder_that_cannot_work_is_refused() {
    let server = RedisServer::start();
    let mut builder = builder_for(&server, None);
    builder.set_policy(ReconnectPolicy::new_constant(3, 100));
    let err = Client::from_fred_builder(&builder, Config::new(Config::DEFAULT_URL))
        .await
        .expect_err("a policy that gives up");
    assert!(
        matches!(&err, Error::InvalidArgument(message) if message.contains("reconnect_policy")),
        "{err:?}"
    );

    let err = Client::from_fred_builder(&Builder::default(), Config::new(Config::DEFAULT_URL))
        .await
        .expect_err("no server configuration");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");

    let nobody = support::free_port();
    let builder = Builder::from_config(FredConfig {
        server: ServerConfig::Centralized {
            server: Server::new("127.0.0.1", nobody),
        },
        username: Some("app".into()),
        password: Some("s3cret".into()),
        ..FredConfig::default()
    });
    let config = Config::builder(Config::DEFAULT_URL)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .expect("valid");
    let err = Client::from_fred_builder(&builder, config)
        .await
        .expect_err("nothing listens there");
    let message = err.to_string();
    assert!(
        message.contains(&format!("redis://127.0.0.1:{nobody}")),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
}

// Safety overrides -----------------------------------------------------------------------------

/// `MONITOR` on `port`: every command the server runs, one line each, as they come.
async fn monitor(port: u16) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect for MONITOR");
    stream
        .write_all(b"MONITOR\r\n")
        .await
        .expect("send MONITOR");
    let mut lines = BufReader::new(stream).lines();
    let ok = lines.next_line().await.expect("MONITOR reply");
    assert_eq!(ok.as_deref(), Some("+OK"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let task = {
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                seen.lock().push(line);
            }
        })
    };
    (seen, task)
}

/// The script calls on key `name` with `keys` keys that `MONITOR` saw (an acquire has 1 key,
/// the settling of an unknown outcome 2).
fn script_calls(seen: &Mutex<Vec<String>>, name: &str, keys: usize) -> usize {
    let needle = format!("\"{keys}\" \"{name}\"");
    seen.lock()
        .iter()
        .filter(|line| line.contains("\"EVALSHA\"") || line.contains("\"EVAL\""))
        .filter(|line| line.contains(&needle))
        .count()
}

/// A user's fred settings that make fred re-send commands (10 attempts, and unresponsive
/// detection that closes a connection whose replies stop and re-sends what was in flight)
/// still never re-send a lock script: an acquire lost in a network partition is reported as
/// an error and settled, and the server never runs it, not even after the partition heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_fred_settings_cannot_make_a_lock_script_run_again() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let (seen, monitor_task) = monitor(server.port()).await;
    let connection = ConnectionConfig {
        max_command_attempts: 10,
        unresponsive: UnresponsiveConfig {
            max_timeout: Some(Duration::from_millis(300)),
            interval: Duration::from_millis(50),
        },
        ..ConnectionConfig::default()
    };
    let config = Config::builder(proxy.url())
        // Waits for the connection instead of failing fast, so that fred would keep the
        // command for another attempt.
        .when_unavailable(WhenUnavailable::KeepWaiting)
        .response_timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(1))
        .connection(connection)
        // Reconnects a second after the connection is given up: after the partition healed.
        .reconnect_policy(ReconnectPolicy::new_constant(0, 1_000))
        .build()
        .expect("valid");
    let client = Client::new(config)
        .await
        .expect("connects through the proxy");
    let name = "config:once";
    let lock = client.lock(name).with_owner(ferrisson::Owner::new());

    proxy.set_mode(ProxyMode::Blackhole);
    let attempt =
        tokio::spawn(async move { lock.try_lock().await.map(|attempt| attempt.is_acquired()) });
    // Longer than the unresponsive detection, shorter than the reconnect delay.
    tokio::time::sleep(Duration::from_millis(700)).await;
    proxy.set_mode(ProxyMode::Pass);
    let outcome = tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .expect("the acquire ends")
        .expect("acquire task");
    let err = outcome.expect_err("the acquire was lost in the partition, not answered");
    assert!(err.is_transient(), "{err:?}");

    // The client settles the unknown outcome once the server answers (a 2-key script); a
    // re-sent acquire would have reached the server before that.
    let settled = poll_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async { script_calls(&seen, name, 2) },
        |calls| *calls >= 1,
    )
    .await;
    assert!(settled.is_ok(), "no settling: {:?}", seen.lock());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(script_calls(&seen, name, 1), 0, "{:#?}", seen.lock());
    let raw = raw_client(&server.url()).await;
    assert_eq!(exists(&raw, name).await, 0);
    client.shutdown().await;
    monitor_task.abort();
}
