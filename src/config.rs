//! Client configuration, with Redisson's defaults under the names Redisson users look for.

use std::time::Duration;

use fred::types::config::{ConnectionConfig, PerformanceConfig, ReconnectPolicy};

use crate::error::{Error, Result};

mod builder;
mod env;
mod tls;

pub use builder::ConfigBuilder;
pub use tls::TlsOptions;

/// How lock releases announce themselves and how waiters listen (protocol §1.7, §14.3).
///
/// Java Redisson uses classic pub/sub everywhere except in cluster mode from 3.22.0 on, where it
/// uses sharded pub/sub when the server supports it; the two never hear each other. The default,
/// [`Auto`](PublishMode::Auto), wakes Java waiters of every version: classic outside a cluster,
/// both ways in one. Pin a mode only to save the second publish in a cluster whose Java
/// services are all on one side of 3.22. That saving is real: a cluster node passes every
/// classic `PUBLISH` to every other node, and in docs/benchmarks.md's cluster runs `Sharded`
/// took a third less server CPU per acquisition than `Auto`.
///
/// ```
/// use ferrisson::{Config, PublishMode};
///
/// let mut config = Config::new("redis-cluster://127.0.0.1:7000");
/// assert_eq!(config.publish_mode, PublishMode::Auto);
/// config.publish_mode = PublishMode::Sharded; // every Java peer is ≥ 3.22
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PublishMode {
    /// [`Classic`](PublishMode::Classic) on a single server or sentinel, where every Redisson
    /// version uses it; [`Both`](PublishMode::Both) in a cluster, where Redisson < 3.22 uses
    /// classic and ≥ 3.22 sharded pub/sub. The default.
    #[default]
    Auto,
    /// `PUBLISH` / `SUBSCRIBE`: single server, sentinel, and clusters with Java < 3.22.
    Classic,
    /// `SPUBLISH` / `SSUBSCRIBE`: clusters whose Java peers are all ≥ 3.22 (sharding AUTO/ON).
    Sharded,
    /// Publish both ways (the sharded one tolerated to fail) and subscribe both ways, for mixed
    /// fleets. Every Java client still receives exactly one copy.
    Both,
}

impl PublishMode {
    /// The mode a client on this deployment uses: [`Auto`](PublishMode::Auto) decided.
    pub(crate) fn resolve(self, clustered: bool) -> PublishMode {
        match self {
            PublishMode::Auto if clustered => PublishMode::Both,
            PublishMode::Auto => PublishMode::Classic,
            mode => mode,
        }
    }

    /// Whether waiters subscribe, and releases publish, on classic pub/sub.
    pub(crate) fn classic(self) -> bool {
        self != PublishMode::Sharded
    }

    /// Whether waiters subscribe, and releases publish, on sharded pub/sub.
    pub(crate) fn sharded(self) -> bool {
        matches!(self, PublishMode::Sharded | PublishMode::Both)
    }

    /// The value the release scripts expect in their publish-mode argument.
    pub(crate) fn script_arg(self) -> &'static str {
        match self {
            PublishMode::Auto | PublishMode::Classic => "PUBLISH",
            PublishMode::Sharded => "SPUBLISH",
            PublishMode::Both => "BOTH",
        }
    }
}

/// What an acquire does when Redis cannot be reached.
///
/// ```
/// use ferrisson::{Config, WhenUnavailable};
///
/// let mut config = Config::new("redis://127.0.0.1:6379");
/// config.when_unavailable = WhenUnavailable::KeepWaiting;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WhenUnavailable {
    /// Fail at once with [`Error::Unavailable`]. The default: a lock client that hangs while its
    /// server is down hides the outage from the caller.
    #[default]
    FailFast,
    /// Keep retrying (with back-off) until the acquire's wait bound ends; `lock()` retries until
    /// Redis is back. Releases wait for the connection at most `response_timeout`; queries
    /// (`is_locked`, `hold_count`, ...) still fail fast.
    KeepWaiting,
}

/// Whether lock writes wait for the master's replicas (Redisson's `checkLockSyncedSlaves`,
/// protocol §1.11).
///
/// Redis replicates asynchronously: a lock written to a master that fails before any replica
/// received it is gone on the promoted replica, where a second owner can take it. With synced
/// writes, every acquire and release script is followed on the same connection by `WAIT
/// <replicas> <`[`replica_sync_timeout`](Config::replica_sync_timeout)`>`, pipelined with the
/// script (no extra round trip). An acquisition no replica acknowledged in time is rolled back
/// and reported as [`Error::NotReplicated`]; such a release is logged (it did happen on the
/// master). A master without replicas (`connected_slaves: 0`) is not waited for.
///
/// Every command of the connection waits behind a `WAIT`, so lock operations take as long as the
/// fastest replica's acknowledgement; a larger [`pool_size`](Config::pool_size) spreads them.
///
/// ```
/// use std::time::Duration;
/// use ferrisson::{Config, SyncedWrites};
///
/// let mut config = Config::new("redis-sentinel://127.0.0.1:26379?sentinelServiceName=locks");
/// assert_eq!(config.synced_writes, SyncedWrites::Auto); // waits: a sentinel deployment
/// config.replica_sync_timeout = Duration::from_millis(300);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SyncedWrites {
    /// As Redisson (≥ 3.24) does by default: [`Always`](SyncedWrites::Always) with Sentinel
    /// (`redis-sentinel://`) and Cluster (`redis-cluster://`), where a failover can promote a
    /// replica; [`Off`](SyncedWrites::Off) for a single server URL. The default.
    #[default]
    Auto,
    /// Never wait for replicas: the fastest, and the failover race above stays open.
    Off,
    /// Wait for replicas after every acquire and release, whatever the deployment (e.g. a
    /// single-server URL whose master has replicas that an operator may promote).
    Always,
}

impl SyncedWrites {
    /// Whether a client on this deployment waits: [`Auto`](SyncedWrites::Auto) decided.
    pub(crate) fn enabled(self, failover_capable: bool) -> bool {
        match self {
            SyncedWrites::Auto => failover_capable,
            SyncedWrites::Off => false,
            SyncedWrites::Always => true,
        }
    }
}

/// Whether token-lock waiters ([`TokenLock`](crate::TokenLock)) listen for keyspace
/// notifications. The peers that share a token lock (redis-py, redsync, node `redlock`,
/// rslock) publish nothing when they release it, so a waiter learns of a release only from the
/// server's keyspace events (`__keyspace@<db>__:<name>` `del` and `expired`), or by polling.
///
/// ```
/// let mut config = ferrisson::Config::new("redis://127.0.0.1:6379");
/// assert_eq!(config.keyspace_events, ferrisson::KeyspaceEvents::Detect);
/// config.keyspace_events = ferrisson::KeyspaceEvents::Enable;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyspaceEvents {
    /// Use them where the server sends them (`notify-keyspace-events` with `K`, and `A` or both
    /// `g` and `x`; read with `CONFIG GET` at most every 10 s), else poll. The setting is never
    /// changed. The default.
    #[default]
    Detect,
    /// At connect, add `Kgx` to the server's `notify-keyspace-events` (`CONFIG SET`, keeping
    /// the classes already on), then as [`Detect`](KeyspaceEvents::Detect). Keyspace events
    /// cost the server a message per write of every key; ask for them only where that is
    /// acceptable. A refused `CONFIG SET` (an ACL, a managed service) is logged, not fatal.
    Enable,
    /// Never listen for them: token-lock waiters always poll.
    Ignore,
}

/// Distributed deadlock detection: whether this client records its long waits as wait-for
/// edges in Redis, and whether a waiter looks for a cycle through itself.
///
/// With watchdog leases a distributed deadlock never ends: owner 1 holds `a` and waits for
/// `b`, owner 2 holds `b` and waits for `a`, and both watchdogs renew forever. A waiter of a
/// client with [`Detect`](DeadlockDetection::Detect) that has waited `threshold` walks the
/// graph from the lock it waits for (its holders, the locks they wait for, their holders, ...);
/// when the walk comes back to it, the cycle's youngest wait of a detecting client fails with
/// [`Error::Deadlock`](crate::Error::Deadlock) and the others go on. Every lock of the
/// reentrant family records its waits (the reentrant, fair, fenced, spin, non-reentrant and
/// token locks, both sides of the read-write lock, and the multi-locks' parts); semaphores and
/// latches do not (their permits have no holder). Java Redisson records no edges, so a cycle
/// through a Java waiter is never closed (see `docs/reliability.md`).
///
/// ```
/// use std::time::Duration;
/// use ferrisson::DeadlockDetection;
///
/// let mut config = ferrisson::Config::new("redis://127.0.0.1:6379");
/// assert_eq!(config.deadlock_detection, DeadlockDetection::Off);
/// config.deadlock_detection = DeadlockDetection::Detect { threshold: Duration::from_secs(1) };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DeadlockDetection {
    /// Records nothing and looks for nothing: no key, no command, no cost. The default.
    /// [`Client::find_deadlocks`](crate::Client::find_deadlocks) still reads the edges of
    /// other clients.
    #[default]
    Off,
    /// Records every wait that lasts `after` as an edge (one field of the client's
    /// `ferrisson_waits:{<client uuid>}` hash, removed when the wait ends), so that
    /// [`Client::find_deadlocks`](crate::Client::find_deadlocks), `ferrisson deadlocks` and
    /// the walks of other clients see it; fails no waiter. To watch before acting.
    Record {
        /// How long a wait lasts before it is recorded (at least 10 ms).
        after: Duration,
    },
    /// Records every wait that lasts half the `threshold` (as `Record`), and a waiter that
    /// has waited `threshold` looks for a cycle through itself, again every `threshold` while it
    /// waits; the youngest wait of a cycle found, of the waits of clients in this mode, fails
    /// with [`Error::Deadlock`](crate::Error::Deadlock) (see [`Deadlock::victim`](crate::Deadlock::victim)). A deadlock is broken about `threshold` plus
    /// a few round trips after its last wait began.
    Detect {
        /// How long a waiter waits before it looks (at least 20 ms).
        threshold: Duration,
    },
}

impl DeadlockDetection {
    /// How long a wait lasts before it is recorded; `None` when off.
    pub(crate) fn record_after(self) -> Option<Duration> {
        match self {
            DeadlockDetection::Off => None,
            DeadlockDetection::Record { after } => Some(after),
            DeadlockDetection::Detect { threshold } => Some(threshold / 2),
        }
    }

    /// How long a waiter waits before it looks for a cycle; `None` when it never looks.
    pub(crate) fn threshold(self) -> Option<Duration> {
        match self {
            DeadlockDetection::Detect { threshold } => Some(threshold),
            _ => None,
        }
    }

    fn validate(self) -> Result<()> {
        let (setting, value, least) = match self {
            DeadlockDetection::Off => return Ok(()),
            DeadlockDetection::Record { after } => ("Record { after }", after, 10),
            DeadlockDetection::Detect { threshold } => ("Detect { threshold }", threshold, 20),
        };
        ensure(
            value >= Duration::from_millis(least),
            format!("deadlock_detection {setting} must be at least {least} ms, got {value:?}"),
        )?;
        lease_millis(value, "deadlock_detection").map(drop)
    }
}

/// Configuration of a [`Client`](crate::Client).
///
/// Start from [`Config::new`] (Redisson's defaults) and change the public fields, or chain
/// setters on [`Config::builder`], whose [`build`](ConfigBuilder::build) checks every value;
/// [`Config::from_env`] reads `REDIS_URL` and `FERRISSON_*` variables. [`Client::new`](crate::Client::new) checks
/// the same rules as `build`, so a bad value is an [`Error::InvalidArgument`] naming the setting
/// either way.
///
/// ```
/// use std::time::Duration;
/// use ferrisson::Config;
///
/// let mut config = Config::new("redis://127.0.0.1:6379");
/// config.watchdog_timeout = Duration::from_secs(10);
/// assert_eq!(config.renewal_batch_size, 100);
/// ```
///
/// # fred's settings, and what ferrisson overrides
/// [`connection`](Config::connection), [`performance`](Config::performance) and
/// [`reconnect_policy`](Config::reconnect_policy) are fred's own types (see [`crate::fred`]),
/// passed to every connection of the client (commands, pub/sub, sentinels), or taken from a
/// fred `Builder` with [`Client::from_fred_builder`](crate::Client::from_fred_builder). A few of
/// their values decide whether locks stay correct, so ferrisson sets them itself, whatever they
/// say:
///
/// | fred setting | what ferrisson uses | why |
/// |---|---|---|
/// | `connection.connection_timeout` | [`connect_timeout`](Config::connect_timeout) | one connect timeout |
/// | `connection.internal_command_timeout`, `performance.default_command_timeout` | [`response_timeout`](Config::response_timeout) | one reply timeout, which is also the bound of a call's unknown outcome |
/// | `connection.max_redirections` | 0 on the command connections, 5 (fred's default) on the subscriber | ferrisson sends a redirected call again itself; fred's `ASK` handling under single-attempt writes tore down its router |
/// | max attempts of the lock-changing scripts (acquire, release, force-release, renewal, settling) | 1, per command | a re-sent script could take or release a hold twice; `connection.max_command_attempts` applies to queries and pub/sub commands only, which are safe to repeat |
/// | fred `Config::fail_fast` | `true` | [`when_unavailable`](Config::when_unavailable) decides per call whether to wait for a connection |
/// | fred `Config::version` | RESP2 | what Redisson speaks, and the replies ferrisson's scripts and pub/sub handling expect |
///
/// Values that cannot work are rejected with [`Error::InvalidArgument`]: a `reconnect_policy`
/// that gives up (`max_attempts` other than 0: the watchdog, waiters, background releases and
/// the settling of unknown outcomes need the connection back), `connection.max_command_attempts`
/// 0 (fred would fail every query), `performance.broadcast_channel_capacity` 0, a
/// `connection.unresponsive.interval` under 1 ms while `unresponsive.max_timeout` is set, and (at
/// connect time, with [synced](SyncedWrites) writes) an `unresponsive.max_timeout` no longer than
/// the replicas' `WAIT`, which fred would take for a dead connection. Everything else (TCP
/// keepalive, nodelay and linger, unresponsive-connection detection, `max_command_buffer_len`,
/// `auto_client_setname`, the reconnect delays, ...) is used as given.
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// Where Redis is: `redis://[user:pass@]host:port[/db]`, `rediss://` for TLS,
    /// `redis-cluster://` and `redis-sentinel://` as understood by fred.
    pub url: String,
    /// Redisson's `lockWatchdogTimeout`: the lease given to locks taken without one, renewed every
    /// third of it while held. Default 30 s. At least 3 ms.
    pub watchdog_timeout: Duration,
    /// Redisson's `lockWatchdogBatchSize`: at most this many locks are renewed by one script
    /// call. Default 100.
    pub renewal_batch_size: usize,
    /// How releases publish and waiters subscribe. Default [`PublishMode::Auto`].
    pub publish_mode: PublishMode,
    /// What acquires do when Redis is unreachable. Default [`WhenUnavailable::FailFast`].
    pub when_unavailable: WhenUnavailable,
    /// How long to wait for any single reply from Redis. Default 10 s.
    pub response_timeout: Duration,
    /// How long to wait for the connection to be established. Default 5 s.
    pub connect_timeout: Duration,
    /// Redisson's `lazyInitialization`: [`Client::new`](crate::Client::new) returns at once and
    /// connects in the background (reconnecting by [`reconnect_policy`](Config::reconnect_policy))
    /// instead of failing when the server cannot be reached. Until it is connected, calls fail
    /// with [`Error::Unavailable`] (or wait, with [`WhenUnavailable::KeepWaiting`]). For the
    /// clients of a [`RedLock`](crate::RedLock), [`TokenRedLock`](crate::TokenRedLock) or
    /// [`MultiLock`](crate::MultiLock) started while some of their servers are down: their
    /// rules then decide (a majority acquires). What a connect checks is skipped: a URL the
    /// server refuses (credentials, database) fails every call instead of the connect, and the
    /// scripts are loaded at their first call. Default `false`.
    pub lazy_initialization: bool,
    /// Number of multiplexed command connections. Default 1.
    pub pool_size: usize,
    /// Local hand-off: when this client releases a lock that other tasks of this client wait
    /// for, the release hands the lock to the longest-waiting one in the same script, instead of
    /// freeing it for a race. At most this many hand-offs follow each other; then one plain
    /// release (with its unlock message) gives waiters of other clients their chance; if the
    /// message reached any, this client's own attempts on the lock give way for twice the
    /// release's round trip (at least 2 ms), so that one of them takes it. With
    /// [`PublishMode::Classic`] outside a cluster, that release frees the lock only if the unlock
    /// channel has a subscriber besides this client (another client's waiter), and otherwise
    /// hands over too, with a plain release every 16 such budgets regardless (for waiters that
    /// poll instead of subscribing). Default 16; 0 turns hand-offs and giving way off (every
    /// release frees the lock for a race, exactly as Redisson does).
    pub max_local_handoffs: u32,
    /// TLS settings for a `rediss://` URL: a private CA to trust, a client certificate. Default
    /// `None`: the system's roots and no client certificate. Setting it for a URL without TLS
    /// is an [`Error::InvalidArgument`] at connect time.
    pub tls: Option<TlsOptions>,
    /// Whether acquires and releases wait for the master's replicas. Default
    /// [`SyncedWrites::Auto`]: with Sentinel and Cluster, as Redisson.
    pub synced_writes: SyncedWrites,
    /// Redisson's `slavesSyncTimeout`: how long a synced write waits for the replicas (the `WAIT`
    /// timeout). Default 1 s; at least 1 ms. At most half of `response_timeout` is used, so that
    /// a `WAIT` always answers before the reply timeout would leave its write's outcome unknown.
    pub replica_sync_timeout: Duration,
    /// Whether token-lock waiters listen for keyspace notifications, and whether the client
    /// turns them on. Default [`KeyspaceEvents::Detect`]: used where the server sends them,
    /// never turned on. In a cluster token-lock waiters always poll (a key's events come only
    /// from its own node).
    pub keyspace_events: KeyspaceEvents,
    /// Whether this client records its long waits in Redis and breaks the deadlocks it finds
    /// itself in. Default [`DeadlockDetection::Off`].
    pub deadlock_detection: DeadlockDetection,
    /// fred's connection settings (TCP keepalive and nodelay, unresponsive-connection detection,
    /// `max_command_attempts` of queries, ...). Default: fred's defaults. The timeouts and
    /// `max_redirections` in it are replaced (see the table on [`Config`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ferrisson::fred::socket2::TcpKeepalive;
    ///
    /// let mut config = ferrisson::Config::new("redis://127.0.0.1:6379");
    /// config.connection.tcp.nodelay = Some(true);
    /// config.connection.tcp.keepalive = Some(TcpKeepalive::new().with_time(Duration::from_secs(60)));
    /// ```
    pub connection: ConnectionConfig,
    /// fred's performance settings (`max_feed_count`, `broadcast_channel_capacity`). Default:
    /// fred's defaults; `default_command_timeout` is replaced by
    /// [`response_timeout`](Config::response_timeout).
    pub performance: PerformanceConfig,
    /// How fred reconnects a lost connection. Default: forever, backing off exponentially from
    /// 50 ms to 2 s; a policy that gives up (`max_attempts` other than 0) is refused.
    pub reconnect_policy: ReconnectPolicy,
}

impl Config {
    /// A configuration for `url` with Redisson's defaults.
    ///
    /// ```
    /// let config = ferrisson::Config::new("redis://127.0.0.1:6379");
    /// assert_eq!(config.watchdog_timeout.as_secs(), 30);
    /// ```
    pub fn new(url: impl Into<String>) -> Self {
        Config {
            url: url.into(),
            watchdog_timeout: Duration::from_secs(30),
            renewal_batch_size: 100,
            publish_mode: PublishMode::Auto,
            when_unavailable: WhenUnavailable::FailFast,
            response_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            lazy_initialization: false,
            pool_size: 1,
            max_local_handoffs: 16,
            tls: None,
            synced_writes: SyncedWrites::Auto,
            replica_sync_timeout: Duration::from_secs(1),
            keyspace_events: KeyspaceEvents::Detect,
            deadlock_detection: DeadlockDetection::Off,
            connection: ConnectionConfig::default(),
            performance: PerformanceConfig::default(),
            reconnect_policy: ReconnectPolicy::new_exponential(0, 50, 2_000, 2),
        }
    }

    /// The URL with any password replaced by `***`, for messages and logs.
    ///
    /// ```
    /// let config = ferrisson::Config::new("redis://app:s3cret@cache:6379/0");
    /// assert_eq!(config.redacted_url(), "redis://app:***@cache:6379/0");
    /// ```
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }

    /// Checks every setting, so that a bad configuration fails at `build()` or connect time with
    /// an [`Error::InvalidArgument`] naming each bad setting (all of them, not the first).
    pub(crate) fn validate(&self) -> Result<()> {
        self.problems().into_result()
    }

    /// [`Config::validate`] and the URL's syntax ([`url_problem`]), all problems at once: what
    /// `ConfigBuilder::build` and `Client::new` check (a fred `Builder`'s client has no URL).
    pub(crate) fn validate_with_url(&self) -> Result<()> {
        let mut problems = self.problems();
        if let Some(problem) = url_problem(&self.url) {
            problems.push(format!(
                "bad redis url `{}`: {problem}",
                self.redacted_url()
            ));
        }
        problems.into_result()
    }

    /// What is wrong with the settings, each problem naming its setting.
    pub(crate) fn problems(&self) -> Problems {
        let mut problems = Problems::default();
        let watchdog = self.watchdog_timeout;
        problems.check(watchdog >= Duration::from_millis(3), || {
            format!("watchdog_timeout must be at least 3 ms, got {watchdog:?}")
        });
        if watchdog >= Duration::from_millis(3) {
            problems.add(lease_millis(watchdog, "watchdog_timeout"));
        }
        problems.at_least_one("renewal_batch_size", self.renewal_batch_size);
        problems.at_least_one("pool_size", self.pool_size);
        for (setting, value) in [
            ("response_timeout", self.response_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            problems.check(!value.is_zero(), || {
                format!("{setting} must be positive, got 0s")
            });
        }
        problems.add(self.deadlock_detection.validate());
        // `WAIT 0` would block forever.
        let wait = self.replica_sync_timeout;
        problems.check(wait >= Duration::from_millis(1), || {
            format!("replica_sync_timeout must be at least 1 ms, got {wait:?}")
        });
        // The fred settings that cannot work (see the table on [`Config`]).
        let (ReconnectPolicy::Constant { max_attempts, .. }
        | ReconnectPolicy::Linear { max_attempts, .. }
        | ReconnectPolicy::Exponential { max_attempts, .. }) = self.reconnect_policy;
        problems.check(max_attempts == 0, || {
            format!(
                "reconnect_policy must reconnect forever (max_attempts 0), got max_attempts \
                 {max_attempts}: the watchdog, waiters and background releases need the connection back"
            )
        });
        problems.check(self.connection.max_command_attempts != 0, || {
            "connection.max_command_attempts must be at least 1 (fred fails every command with 0 \
             attempts)"
                .into()
        });
        let unresponsive = &self.connection.unresponsive;
        problems.check(
            unresponsive.max_timeout.is_none() || unresponsive.interval >= Duration::from_millis(1),
            || {
                format!(
                    "connection.unresponsive.interval must be at least 1 ms when max_timeout is \
                     set, got {:?}",
                    unresponsive.interval
                )
            },
        );
        problems.at_least_one(
            "performance.broadcast_channel_capacity",
            self.performance.broadcast_channel_capacity,
        );
        problems
    }
}

/// What is wrong with `url` as a URL, in a user's words (no part of it quoted, since it may
/// hold a password), or `None` if it is a URL with a host. Which schemes work is checked when
/// connecting.
fn url_problem(url: &str) -> Option<String> {
    use url::ParseError;
    let example = "write a URL such as redis://127.0.0.1:6379 or redis://user:password@host:6379/0";
    // A password is where `/`, `?`, `#` or `@` most often break a URL.
    let hint = if url.contains('@') {
        " (a password with `/`, `?`, `#` or `@` must be percent-encoded: %2F, %3F, %23, %40)"
    } else {
        ""
    };
    // `localhost:6379` parses, as the scheme `localhost:`.
    if !url.contains("://") {
        return Some(format!(
            "it has no scheme (redis://, rediss://, redis-cluster://, redis-sentinel://): {example}"
        ));
    }
    let reason = match url::Url::parse(url) {
        Ok(parsed) if parsed.host_str().is_some_and(|host| !host.is_empty()) => return None,
        Ok(_) | Err(ParseError::EmptyHost) => format!("it has no host: {example}"),
        Err(ParseError::InvalidPort) => "its port is not a number from 0 to 65535".to_owned(),
        Err(ParseError::InvalidIpv4Address) => "its host is not a valid IPv4 address".to_owned(),
        Err(ParseError::InvalidIpv6Address) => {
            "its host is not a valid IPv6 address (in brackets: redis://[::1]:6379)".to_owned()
        }
        Err(ParseError::InvalidDomainCharacter | ParseError::IdnaError) => {
            "its host has characters that a host name cannot have".to_owned()
        }
        Err(other) => format!("it is not a valid URL ({other}): {example}"),
    };
    Some(reason + hint)
}

/// The problems found in a configuration, in the order of the checks: reported together, so
/// that a user fixes them in one go.
#[derive(Debug, Default)]
pub(crate) struct Problems(Vec<String>);

impl Problems {
    /// Records `message()` unless `ok`.
    pub(crate) fn check(&mut self, ok: bool, message: impl FnOnce() -> String) {
        if !ok {
            self.0.push(message());
        }
    }

    /// Records the problem of a failed check.
    pub(crate) fn add(&mut self, checked: Result<impl Sized>) {
        if let Err(err) = checked {
            self.push(match err {
                Error::InvalidArgument(message) => message,
                other => other.to_string(),
            });
        }
    }

    pub(crate) fn push(&mut self, problem: String) {
        self.0.push(problem);
    }

    fn at_least_one(&mut self, setting: &str, value: usize) {
        self.check(value != 0, || {
            format!("{setting} must be at least 1, got 0")
        });
    }

    /// Each problem's message.
    pub(crate) fn into_messages(self) -> Vec<String> {
        self.0
    }

    /// `Ok` if there is none; else one [`Error::InvalidArgument`] that lists them all (a lone
    /// one as it is, several as `N problems: a; b; ...`).
    pub(crate) fn into_result(self) -> Result<()> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(Error::InvalidArgument(self.0.concat())),
            n => Err(Error::InvalidArgument(format!(
                "{n} problems: {}",
                self.0.join("; ")
            ))),
        }
    }
}

/// An [`Error::InvalidArgument`] with `message` unless `ok`.
fn ensure(ok: bool, message: String) -> Result<()> {
    ok.then_some(()).ok_or(Error::InvalidArgument(message))
}

/// The longest lease accepted, about 146 million years.
const MAX_LEASE_MS: u64 = i64::MAX as u64 / 2;

/// Converts a lease to whole milliseconds, rejecting what Redis or Redisson cannot represent:
/// zero (Redisson ≤ 3.17.0 would read it as "expire now"), sub-millisecond leases, and values
/// beyond a Java `long`.
pub(crate) fn lease_millis(lease: Duration, what: &str) -> Result<u64> {
    let ms = lease.as_millis();
    if ms == 0 {
        return Err(Error::InvalidArgument(format!(
            "{what} must be at least 1 ms, got {lease:?}"
        )));
    }
    // Redis adds the lease to its clock in a signed 64-bit millisecond count: keep well clear.
    u64::try_from(ms)
        .ok()
        .filter(|ms| *ms <= MAX_LEASE_MS)
        .ok_or_else(|| Error::InvalidArgument(format!("{what} is too large: {lease:?}")))
}

/// Masks the credentials of a Redis URL for messages, logs and `Debug` output: the password
/// (`redis://user:***@host`), or a lone user part, which Redis may take for a password
/// (`redis://***@host`). The one redaction function of the crate and its command-line tool.
/// Text that is not a URL is masked from the scheme to its last `@`, if any.
pub(crate) fn redact(raw: &str) -> String {
    if let Ok(mut url) = url::Url::parse(raw) {
        // Setting credentials fails only for URLs that cannot carry them (no host), which
        // then carry none either.
        let masked = if url.password().is_some() {
            url.set_password(Some("***")).is_ok()
        } else if !url.username().is_empty() {
            url.set_username("***").is_ok()
        } else {
            true
        };
        if masked {
            return url.into();
        }
    }
    let Some(scheme_end) = raw.find("://").map(|i| i + 3) else {
        return raw.to_owned();
    };
    // Up to the last `@` anywhere: a password with an unencoded `/`, `?` or `#` is what most
    // often makes a URL unparseable, and masking a path's `@` too is the safe mistake.
    let rest = &raw[scheme_end..];
    match rest.rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &raw[..scheme_end], &rest[at..]),
            None => format!("{}***{}", &raw[..scheme_end], &rest[at..]),
        },
        None => raw.to_owned(),
    }
}

impl std::fmt::Debug for Config {
    /// Prints every field, with the URL's credentials masked (see [`Config::redacted_url`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.redacted_url())
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("renewal_batch_size", &self.renewal_batch_size)
            .field("publish_mode", &self.publish_mode)
            .field("when_unavailable", &self.when_unavailable)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("lazy_initialization", &self.lazy_initialization)
            .field("pool_size", &self.pool_size)
            .field("max_local_handoffs", &self.max_local_handoffs)
            .field("tls", &self.tls)
            .field("synced_writes", &self.synced_writes)
            .field("replica_sync_timeout", &self.replica_sync_timeout)
            .field("keyspace_events", &self.keyspace_events)
            .field("deadlock_detection", &self.deadlock_detection)
            .field("connection", &self.connection)
            .field("performance", &self.performance)
            .field("reconnect_policy", &self.reconnect_policy)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:p@h:1/2"), "redis://u:***@h:1/2");
        assert_eq!(redact("rediss://:p@h"), "rediss://:***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("redis://pw@h"), "redis://***@h");
        assert_eq!(redact("not a url"), "not a url");
        assert_eq!(redact("redis://u:p@ss@h/x@y"), "redis://u:***@h/x@y");
        assert_eq!(
            redact("redis-cluster://u:p@h:1?node=h:2&node=h:3"),
            "redis-cluster://u:***@h:1?node=h:2&node=h:3"
        );
        // Not parseable as a URL (a space in the host), still masked.
        assert_eq!(redact("redis://u:p w@h x:1"), "redis://u:***@h x:1");
    }

    #[test]
    fn the_replica_sync_timeout_is_positive() {
        let mut config = Config::new("redis://h");
        config.response_timeout = Duration::from_millis(300); // shorter than the WAIT: clamped
        assert!(config.validate().is_ok());
        config.replica_sync_timeout = Duration::ZERO;
        assert!(matches!(config.validate(), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn synced_writes_follow_redisson_where_a_replica_can_be_promoted() {
        assert!(SyncedWrites::Auto.enabled(true));
        assert!(!SyncedWrites::Auto.enabled(false));
        assert!(SyncedWrites::Always.enabled(false));
        assert!(!SyncedWrites::Off.enabled(true));
    }

    #[test]
    fn debug_output_never_shows_the_password() {
        let config = Config::new("redis://app:s3cret@cache:6379/0");
        let printed = format!("{config:?} {config:#?}");
        assert!(!printed.contains("s3cret"), "{printed}");
        assert!(
            printed.contains("redis://app:***@cache:6379/0"),
            "{printed}"
        );
        assert!(printed.contains("watchdog_timeout"), "{printed}");
    }

    #[test]
    fn leases_must_be_whole_positive_milliseconds() {
        assert_eq!(
            lease_millis(Duration::from_secs(2), "lease").ok(),
            Some(2000)
        );
        for lease in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
            let refused = lease_millis(lease, "lease");
            assert!(
                matches!(refused, Err(Error::InvalidArgument(_))),
                "{lease:?}"
            );
        }
    }
}
