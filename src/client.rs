//! The client: connections, identity and the background tasks every lock of it shares.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Pool, SubscriberClient};
use fred::interfaces::ClientLike;
use fred::types::config::{Config as FredConfig, Options, ServerConfig};
use fred::types::Builder;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, PublishMode, WhenUnavailable};
use crate::error::{Error, Result};
use crate::kit::exit::{Connect, ExitReleaser};
use crate::kit::handoff::Handoffs;
use crate::kit::janitor::{Janitor, Releaser};
use crate::kit::waits::WaitTable;
use crate::kit::{Client, ClientInner};
use crate::lease::doubt::Doubts;
use crate::lease::watchdog;
use crate::transport::pubsub::PubSub;
use crate::transport::replica_sync::ReplicaSync;
use crate::transport::sentinel::Sentinels;
use crate::transport::{Redis, Settings};

/// How many cluster redirections fred follows for the subscriber's (S)SUBSCRIBE commands:
/// fred's default.
const SUBSCRIBER_REDIRECTIONS: u32 = 5;

impl Client {
    /// Connects to the Redis at `url` with Redisson's defaults (see [`Config::new`]).
    ///
    /// Fails with [`Error::Unavailable`] when the server cannot be reached within the connect
    /// timeout, and with [`Error::InvalidArgument`] for a malformed URL, a scheme other than
    /// `redis://`, `rediss://`, `redis-cluster://` or `redis-sentinel://` (`rediss-` for TLS), a
    /// database the server does not have, refused credentials, or `rediss://` to a server that
    /// does not speak TLS.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::connect("redis://127.0.0.1:6379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Client> {
        Client::new(Config::new(url)).await
    }

    /// Connects with a full [`Config`] (from [`Config::new`], [`Config::builder`] or
    /// [`Config::from_env`]).
    ///
    /// Fails with [`Error::InvalidArgument`] for a setting the checks of
    /// [`ConfigBuilder::build`](crate::ConfigBuilder::build) reject, a malformed URL or TLS
    /// options that do not fit it, and as [`Client::connect`] otherwise.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
    /// let mut config = ferrisson::Config::new("redis://127.0.0.1:6379");
    /// config.watchdog_timeout = std::time::Duration::from_secs(10);
    /// let client = ferrisson::Client::new(config).await?;
    ///
    /// let client = ferrisson::Client::new(ferrisson::Config::from_env()?).await?;
    /// # Ok(()) }
    /// ```
    pub async fn new(config: Config) -> Result<Client> {
        config.validate_with_url()?;
        check_scheme(&config)?;
        let fred_config = FredConfig::from_url(&config.url).map_err(|err| {
            Error::InvalidArgument(format!(
                "bad redis url `{}`: {}",
                config.redacted_url(),
                err.details()
            ))
        })?;
        let mut builder = Builder::from_config(fred_config.clone());
        builder
            .set_connection_config(config.connection.clone())
            .set_performance_config(config.performance.clone())
            .set_policy(config.reconnect_policy.clone());
        Client::start(builder, fred_config, config).await
    }

    /// Connects with a fred [`Builder`](fred::types::Builder) the application already has: the
    /// server (single, cluster or sentinel), database, credentials (or credential provider),
    /// TLS, connection and performance settings and reconnect policy come from `builder`;
    /// ferrisson's own settings (watchdog, timeouts, pool size, publish mode, ...) from
    /// `config`.
    ///
    /// * `config.url` is not used (any value will do, e.g. [`Config::DEFAULT_URL`]): the client's
    ///   [`config`](Client::config) names the builder's server instead, for messages and logs, in
    ///   fred's URL syntax without credentials (`redis://host:port/db`, `rediss://...`,
    ///   `redis-cluster://host:port?node=...`, `redis-sentinel://host:port?sentinelServiceName=...`).
    /// * The client's `config().connection`, `performance` and `reconnect_policy` are the
    ///   builder's; a builder without a reconnect policy gets `config.reconnect_policy`
    ///   (ferrisson's default: reconnect forever), since fred would otherwise never reconnect.
    /// * The overrides and checks in the table on [`Config`] apply to the builder's settings as
    ///   to a config's: the timeouts come from `config`, lock scripts are sent at most once,
    ///   and a reconnect policy that gives up is an [`Error::InvalidArgument`].
    /// * `config.tls`, if set, replaces the builder's TLS connector (the builder must use TLS).
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
    /// use ferrisson::fred::types::config::{Config as FredConfig, ReconnectPolicy};
    /// use ferrisson::fred::types::Builder;
    ///
    /// let mut builder = Builder::from_config(FredConfig {
    ///     database: Some(3),
    ///     ..FredConfig::default() // 127.0.0.1:6379
    /// });
    /// builder
    ///     .with_connection_config(|connection| connection.tcp.nodelay = Some(true))
    ///     .set_policy(ReconnectPolicy::new_constant(0, 500));
    ///
    /// let config = ferrisson::Config::builder(ferrisson::Config::DEFAULT_URL)
    ///     .watchdog_timeout(std::time::Duration::from_secs(10))
    ///     .build()?;
    /// let client = ferrisson::Client::from_fred_builder(&builder, config).await?;
    /// assert_eq!(client.config().url, "redis://127.0.0.1:6379/3");
    /// # Ok(()) }
    /// ```
    pub async fn from_fred_builder(builder: &Builder, mut config: Config) -> Result<Client> {
        let Some(fred_config) = builder.get_config() else {
            return Err(Error::InvalidArgument(
                "the fred Builder has no server configuration (see Builder::from_config)".into(),
            ));
        };
        config.url = describe(fred_config);
        config.connection = builder.get_connection_config().clone();
        config.performance = builder.get_performance_config().clone();
        if let Some(policy) = builder.get_policy() {
            config.reconnect_policy = policy.clone();
        }
        config.validate()?;
        let fred_config = fred_config.clone();
        let mut builder = builder.clone();
        builder.set_policy(config.reconnect_policy.clone());
        Client::start(builder, fred_config, config).await
    }

    /// Connects to `fred_config`'s server with `builder`'s fred settings, `config`'s settings
    /// and ferrisson's overrides (see the table on [`Config`]); `config` is valid.
    async fn start(
        mut builder: Builder,
        mut fred_config: FredConfig,
        config: Config,
    ) -> Result<Client> {
        crate::transport::tls::configure(&config, &mut fred_config)?;
        // `when_unavailable` decides per call whether to wait for a connection.
        // fred's `fail_fast` is about the first connection alone (calls get theirs from their
        // options): a failed first connect ends the connection task, unless the client connects
        // lazily, when the reconnect policy retries it.
        fred_config.fail_fast = !config.lazy_initialization;
        // What Redisson speaks, and the replies the scripts and the pub/sub handling expect.
        fred_config.version = fred::types::RespVersion::RESP2;
        let clustered = fred_config.server.is_clustered();
        // For the connect errors' messages, before the builder takes the config.
        let (database, tls_url) = (fred_config.database, fred_config.uses_tls());
        let first_host = fred_config.server.hosts().into_iter().next();
        // Sentinel and Cluster can promote a replica: there `SyncedWrites::Auto` waits for them.
        let failover_capable = clustered || fred_config.server.is_sentinel();
        let publish_mode = config.publish_mode.resolve(clustered);
        let sync_wait = config.synced_writes.enabled(failover_capable).then(|| {
            let wait = config.replica_sync_timeout.min(config.response_timeout / 2);
            wait.max(Duration::from_millis(1))
        });
        // fred would take a connection blocked in `WAIT` for a dead one and close it, leaving
        // every synced write's outcome unknown.
        let unresponsive = config.connection.unresponsive.max_timeout;
        if let Some((wait, unresponsive)) = sync_wait.zip(unresponsive).filter(|(w, u)| u <= w) {
            return Err(Error::InvalidArgument(format!(
                "connection.unresponsive.max_timeout ({unresponsive:?}) must be longer than the \
                 replicas' WAIT ({wait:?}, replica_sync_timeout) with synced writes"
            )));
        }
        builder
            .set_config(fred_config)
            .with_connection_config(|connection| {
                connection.connection_timeout = config.connect_timeout;
                connection.internal_command_timeout = config.response_timeout;
                // The command connections' is set to 0 below.
                connection.max_redirections = SUBSCRIBER_REDIRECTIONS;
            })
            .with_performance_config(|performance| {
                performance.default_command_timeout = config.response_timeout;
            });

        let url = config.redacted_url();
        let map_connect = |err: fred::error::Error| {
            let details = err.details();
            match err.kind() {
                // The user lacks a right the connection needs (`ROLE` behind Sentinel, say).
                _ if details.contains("NOPERM") => Error::PermissionDenied(err),
                // The server refused the URL's `SELECT`: a wrong URL, not an outage.
                _ if details.contains("DB index is out of range") => {
                    Error::InvalidArgument(format!(
                        "database {} does not exist on {url}: the server refused to select it \
                         (its `databases` setting is lower)",
                        database.unwrap_or_default()
                    ))
                }
                // A plain server's reply to the TLS hello, when it answers it at all.
                _ if tls_url && plain_reply_to_tls(details) => Error::InvalidArgument(format!(
                    "TLS handshake with {url} failed: the server does not speak TLS on this port \
                     (use redis://, or its TLS port)"
                )),
                kind if matches!(
                    kind,
                    fred::error::ErrorKind::Auth | fred::error::ErrorKind::Config
                ) || crate::transport::tls::is_tls_kind(kind) =>
                {
                    Error::InvalidArgument(format!("cannot connect to {url}: {details}"))
                }
                // rustls reports a refused handshake (a certificate not trusted, or the server's
                // alert about ours) as an I/O error: a configuration problem, not an outage.
                _ if crate::transport::tls::handshake_refused(details) => {
                    Error::InvalidArgument(format!(
                        "TLS handshake with {url} failed: {details} (check Config::tls: the CA \
                         to trust and the client certificate)"
                    ))
                }
                kind => Error::Unavailable(fred::error::Error::new(
                    kind.clone(),
                    format!("cannot connect to {url}: {details}"),
                )),
            }
        };
        let subscriber = builder.build_subscriber_client().map_err(map_connect)?;
        let sentinels = Sentinels::new(&builder).map_err(map_connect)?;
        // The command connections follow no redirection: `script::resend_redirected` sends a
        // `MOVED` call again, while fred's own `ASK` handling tears down its router and fails
        // every call in flight (see `script::Redirected`). Per command, fred reads 0 as "inherit".
        builder.with_connection_config(|connection| connection.max_redirections = 0);
        let pool = builder.build_pool(config.pool_size).map_err(map_connect)?;
        if config.lazy_initialization {
            // fred's connection tasks connect, and reconnect, in the background; what needs an
            // answer from the server (the publish mode's check, the scripts' preload, enabling
            // keyspace events) is left to the calls that need it.
            drop(pool.connect());
            drop(subscriber.connect());
            return Ok(Client::open(
                pool, subscriber, sentinels, builder, clustered, database, config,
            ));
        }
        let connect = async {
            pool.init().await?;
            subscriber.init().await?;
            Ok::<_, fred::error::Error>(())
        };
        match tokio::time::timeout(config.connect_timeout, connect).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                // fred already stopped the client whose init failed; close the other one.
                if pool.is_connected() {
                    let _ = pool.quit().await;
                }
                return Err(map_connect(err));
            }
            Err(_) => {
                close(&pool, &subscriber).await;
                // A plain server never answers a TLS hello, so the handshake just times out;
                // one PING in plain text tells that apart from an unreachable server.
                if let (true, Some(host)) = (tls_url, &first_host) {
                    if answers_plain_resp(host.host.to_string(), host.port).await {
                        return Err(Error::InvalidArgument(format!(
                            "TLS handshake with {url} got no answer, but the server answers in \
                             plain text: it does not speak TLS on this port (use redis://, or \
                             its TLS port)"
                        )));
                    }
                }
                return Err(Error::Unavailable(fred::error::Error::new(
                    fred::error::ErrorKind::Timeout,
                    format!(
                        "could not connect to {url} within {:?}",
                        config.connect_timeout
                    ),
                )));
            }
        }
        if let Err(err) = refuse_unsupported_publish_mode(&pool, publish_mode, &url).await {
            close(&pool, &subscriber).await;
            return Err(err);
        }
        crate::transport::script::preload(&pool, clustered, &crate::lock::upkeep::SCRIPTS).await;
        if config.keyspace_events == crate::config::KeyspaceEvents::Enable && !clustered {
            crate::transport::keyspace::enable(&pool).await;
        }
        Ok(Client::open(
            pool, subscriber, sentinels, builder, clustered, database, config,
        ))
    }

    /// The client over connections `pool` and `subscriber` (connected, or connecting in the
    /// background), with its background tasks started on the current runtime.
    fn open(
        pool: Pool,
        subscriber: SubscriberClient,
        sentinels: Option<Sentinels>,
        builder: Builder,
        clustered: bool,
        database: Option<u8>,
        config: Config,
    ) -> Client {
        let publish_mode = config.publish_mode.resolve(clustered);
        let failover_capable =
            clustered || builder.get_config().is_some_and(|c| c.server.is_sentinel());
        let sync_wait = config.synced_writes.enabled(failover_capable).then(|| {
            let wait = config.replica_sync_timeout.min(config.response_timeout / 2);
            wait.max(Duration::from_millis(1))
        });
        let keyspace = crate::transport::keyspace::Keyspace::new(
            config.keyspace_events,
            database.unwrap_or_default(),
            clustered,
        );

        let read_options = Options {
            fail_fast: true,
            timeout: Some(config.response_timeout),
            ..Options::default()
        };
        let write_options = Options {
            max_attempts: Some(1),
            fail_fast: config.when_unavailable == WhenUnavailable::FailFast,
            ..read_options.clone()
        };
        let settings = Settings {
            write_options,
            read_options,
            clustered,
            publish_arg: publish_mode.script_arg(),
            response_timeout: config.response_timeout,
            sync: sync_wait.map(|wait| Arc::new(ReplicaSync::new(wait))),
        };
        // Releases that the runtime's shutdown leaves unfinished go out on a connection of
        // their own, opened then from this builder (`kit/exit.rs`).
        let exit_connect = exit_connection(builder.clone(), settings.clone());
        let (redis, dispatcher_task) = Redis::open(pool, settings);
        let redis = Arc::new(redis);
        let stop = CancellationToken::new();
        let (watched, watched_messages) = tokio::sync::mpsc::unbounded_channel();
        let (pubsub, mut tasks) = PubSub::start(
            subscriber.clone(),
            redis.pool.clone(),
            publish_mode,
            config.when_unavailable,
            config.response_timeout,
            watched,
            stop.clone(),
        );
        let doubts = Doubts::new(stop.child_token());
        let (leases, watchdog_task) = watchdog::start(
            Arc::clone(&redis),
            &crate::lock::upkeep::RENEW,
            config.watchdog_timeout,
            config.renewal_batch_size,
            Arc::clone(&doubts),
            (pubsub.clone(), watched_messages),
            stop.clone(),
        );
        let reconciler_task = tokio::spawn(crate::lease::doubt::run(
            Arc::clone(&doubts),
            Arc::downgrade(&leases),
            Arc::clone(&redis),
            &crate::lock::upkeep::SETTLE,
        ));
        // A conditional hand-off counts the channel's subscribers on the lock's server, which
        // sees them all only with PUBLISH outside a cluster (src/kit/handoff.rs).
        let conditional = !clustered && publish_mode == PublishMode::Classic;
        let handoffs = Arc::new(Handoffs::new(
            config.max_local_handoffs,
            conditional,
            pubsub.clone(),
        ));
        let exit = ExitReleaser::new(
            exit_connect,
            config.response_timeout,
            Arc::downgrade(&leases),
            Arc::clone(&doubts),
            &crate::lock::upkeep::SETTLE,
        );
        let (janitor, janitor_task) = Janitor::start(
            Releaser {
                redis: Arc::clone(&redis),
                handoffs: Arc::clone(&handoffs),
                doubts,
            },
            subscriber.clone(),
            exit,
        );
        // The local lines' TTL timers (src/kit/handoff.rs, `Place::wake_at`).
        let timers_task = tokio::spawn(crate::kit::handoff::run_timers(
            Arc::clone(&handoffs.timers),
            stop.clone(),
        ));
        tasks.extend([watchdog_task, janitor_task, reconciler_task, timers_task]);
        tasks.push(dispatcher_task);
        if let Some(sentinels) = &sentinels {
            tasks.push(sentinels.start(redis.pool.clone(), subscriber.clone(), stop.clone()));
        }

        let id = uuid::Uuid::new_v4().to_string();
        crate::metrics::describe();
        tracing::debug!(client = %id, url = %config.redacted_url(), "ferrisson client connected");
        let waits = (config.deadlock_detection.record_after().is_some())
            .then(|| Arc::new(WaitTable::default()));
        let client = Client {
            inner: Arc::new(ClientInner {
                id,
                config,
                redis,
                subscriber,
                pubsub,
                leases,
                janitor,
                handoffs,
                sentinels,
                keyspace,
                waits,
                shut_down: AtomicBool::new(false),
                stop,
                tasks: Mutex::new(tasks),
            }),
        };
        // The deadlock keeper needs the client (to inspect locks), which it holds weakly.
        if let Some(keeper) = crate::deadlock::start(&client.inner) {
            client.inner.tasks.lock().push(keeper);
        }
        client
    }

    /// The client's id: the uuid that starts every holder field this client writes.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) {
    /// assert_eq!(client.id().len(), 36);
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The configuration the client was created with.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) {
    /// println!("watchdog timeout: {:?}", client.config().watchdog_timeout);
    /// # }
    /// ```
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Shuts the client down: finishes the releases of already dropped guards, stops the
    /// watchdog (locks it was renewing expire with their lease) and the pub/sub loops, and closes
    /// the connections. Afterwards every operation fails with [`Error::Shutdown`]. Calling it
    /// again does nothing.
    ///
    /// # Cancel safety
    /// If the future is dropped, the client is still marked shut down, and the background task
    /// closes the connections once the last handle is dropped.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) {
    /// client.shutdown().await;
    /// assert!(client.lock("x").is_locked().await.is_err());
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        if self.inner.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        self.inner.janitor.close(&self.inner.redis).await;
        self.inner.stop.cancel();
        let tasks = std::mem::take(&mut *self.inner.tasks.lock());
        close(&self.inner.redis.pool, &self.inner.subscriber).await;
        // Its task, aborted below, may not have closed them yet.
        if let Some(sentinels) = &self.inner.sentinels {
            sentinels.quit().await;
        }
        for task in tasks {
            task.abort();
        }
        // The watchdog is stopped: what this client still holds expires with its lease.
        self.inner.leases.retire();
        tracing::debug!(client = %self.inner.id, "ferrisson client shut down");
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .field("url", &self.inner.config.redacted_url())
            .finish()
    }
}

/// The server `config` connects to, in fred's URL syntax and without credentials, for messages
/// (see [`Client::from_fred_builder`]).
/// Opens, on whatever runtime runs it, one connection over `builder` (the command connections'
/// settings) for the releases that outlive the client's runtime, without synced writes: at
/// exit, a `WAIT` for replicas would only add to what the process is held up.
fn exit_connection(builder: Builder, settings: Settings) -> Connect {
    Box::new(move || {
        let builder = builder.clone();
        let settings = Settings {
            sync: None,
            ..settings.clone()
        };
        Box::pin(async move {
            let pool = builder.build_pool(1)?;
            pool.init().await?;
            let (redis, _dispatcher) = Redis::open(pool, settings);
            Ok(Arc::new(redis))
        })
    })
}

fn describe(config: &FredConfig) -> String {
    let tls = if config.uses_tls() { "s" } else { "" };
    let database = config
        .database
        .map(|db| format!("/{db}"))
        .unwrap_or_default();
    let with_nodes = |scheme: &str, hosts: &[fred::types::config::Server], mut query: Vec<_>| {
        let first = hosts.first().map(ToString::to_string).unwrap_or_default();
        query.extend(hosts.iter().skip(1).map(|host| format!("node={host}")));
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        format!("{scheme}{tls}://{first}{database}{query}")
    };
    #[allow(unreachable_patterns)] // fred's `unix-sockets` feature adds a variant
    match &config.server {
        ServerConfig::Centralized { server } => {
            with_nodes("redis", std::slice::from_ref(server), vec![])
        }
        ServerConfig::Clustered { hosts, .. } => with_nodes("redis-cluster", hosts, vec![]),
        ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        } => with_nodes(
            "redis-sentinel",
            hosts,
            vec![format!("sentinelServiceName={service_name}")],
        ),
        other => format!("{other:?}"),
    }
}

/// URL schemes `Client::new` accepts, as fred reads them (Valkey's names are aliases): fred would
/// read any other one (`http://`) as `redis://`.
const SCHEMES: [&str; 12] = [
    "redis",
    "rediss",
    "redis-cluster",
    "rediss-cluster",
    "redis-sentinel",
    "rediss-sentinel",
    "valkey",
    "valkeys",
    "valkey-cluster",
    "valkeys-cluster",
    "valkey-sentinel",
    "valkeys-sentinel",
];

fn check_scheme(config: &Config) -> Result<()> {
    // Without a scheme the URL is malformed, which fred's parser reports.
    let Some((scheme, _)) = config.url.split_once("://") else {
        return Ok(());
    };
    if SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "unsupported URL scheme `{scheme}://` in `{}`: use redis://, rediss:// (TLS), \
         redis-cluster:// or redis-sentinel:// (rediss-cluster://, rediss-sentinel:// with TLS; \
         valkey... for each)",
        config.redacted_url()
    )))
}

/// Whether rustls's error is a plain Redis reply read as a TLS record (`-ERR ...` or `+...`).
fn plain_reply_to_tls(details: &str) -> bool {
    details.contains("InvalidContentType") || details.contains("corrupt message")
}

/// Whether `host:port` answers a plain-text `PING` with a Redis reply (`+PONG`, `-NOAUTH ...`),
/// within a second. Blocking sockets on the blocking pool: tokio's `net` feature is not needed.
async fn answers_plain_resp(host: String, port: u16) -> bool {
    let probe = move || -> std::io::Result<bool> {
        use std::io::{Read, Write};
        use std::net::ToSocketAddrs;
        let limit = Duration::from_secs(1);
        let Some(addr) = (host.as_str(), port).to_socket_addrs()?.next() else {
            return Ok(false);
        };
        let mut stream = std::net::TcpStream::connect_timeout(&addr, limit)?;
        stream.set_read_timeout(Some(limit))?;
        stream.set_write_timeout(Some(limit))?;
        stream.write_all(b"PING\r\n")?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first)?;
        Ok(matches!(first[0], b'+' | b'-'))
    };
    matches!(tokio::task::spawn_blocking(probe).await, Ok(Ok(true)))
}

/// Refuses [`PublishMode::Sharded`] on a server without sharded pub/sub (Redis before 7.0):
/// there every waiter's `SSUBSCRIBE` would fail, and every release's `SPUBLISH` too, after the
/// release's writes. Read from `INFO server` (Valkey reports the Redis version it matches); a
/// user without the right to `INFO` is not checked, as before.
async fn refuse_unsupported_publish_mode(pool: &Pool, mode: PublishMode, url: &str) -> Result<()> {
    if mode != PublishMode::Sharded {
        return Ok(());
    }
    let Ok(info) = pool
        .info::<String>(Some(fred::types::InfoKind::Server))
        .await
    else {
        return Ok(());
    };
    let Some(version) = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(str::trim)
    else {
        return Ok(());
    };
    match version
        .split('.')
        .next()
        .and_then(|major| major.parse::<u32>().ok())
    {
        Some(major) if major < 7 => Err(Error::InvalidArgument(format!(
            "PublishMode::Sharded needs sharded pub/sub (Redis 7.0 or later, or Valkey), but \
             {url} runs Redis {version}: use PublishMode::Auto or Classic"
        ))),
        _ => Ok(()),
    }
}

async fn close(pool: &Pool, subscriber: &SubscriberClient) {
    let quit = async {
        let _ = pool.quit().await;
        let _ = subscriber.quit().await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), quit).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_fred_reads_is_accepted_and_others_are_refused() {
        for scheme in SCHEMES {
            let query = if scheme.ends_with("sentinel") {
                "?sentinelServiceName=mymaster"
            } else {
                ""
            };
            let config = Config::new(format!("{scheme}://127.0.0.1:6379{query}"));
            assert!(check_scheme(&config).is_ok(), "{scheme}");
            assert!(
                FredConfig::from_url(&config.url).is_ok(),
                "fred reads {scheme}"
            );
        }
        for url in ["http://h:1", "redis+tls://h:1", "tcp://h:1"] {
            let err = check_scheme(&Config::new(url)).expect_err(url);
            assert!(matches!(err, Error::InvalidArgument(_)), "{url}: {err:?}");
        }
    }

    #[test]
    fn a_fred_config_is_described_in_freds_url_syntax_without_credentials() {
        use fred::types::config::Server;
        let describe_url = |url: &str| {
            let mut config = FredConfig::from_url(url).expect("a valid url");
            config.password = Some("s3cret".into());
            describe(&config)
        };
        assert_eq!(describe_url("redis://u:p@h:1/2"), "redis://h:1/2");
        // Without the `tls` feature fred reads no TLS (and connecting refuses the URL).
        if cfg!(feature = "tls") {
            assert_eq!(describe_url("rediss://h:1"), "rediss://h:1");
        }
        // fred keeps the seed nodes in its own order: any of them will do.
        assert_eq!(
            describe_url("redis-cluster://h:1?node=h:2&node=h:3"),
            "redis-cluster://h:2?node=h:3&node=h:1"
        );
        let sentinel = FredConfig {
            server: ServerConfig::Sentinel {
                hosts: vec![Server::new("s", 1), Server::new("s", 2)],
                service_name: "locks".into(),
                username: None,
                password: Some("s3cret".into()),
            },
            database: Some(1),
            ..FredConfig::default()
        };
        assert_eq!(
            describe(&sentinel),
            "redis-sentinel://s:1/1?sentinelServiceName=locks&node=s:2"
        );
    }
}

#[cfg(all(test, not(feature = "tls")))]
mod without_tls_feature {
    use super::*;
    use crate::config::TlsOptions;

    fn refused(config: Config) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        match runtime.block_on(Client::new(config)) {
            Err(Error::InvalidArgument(message)) => message,
            Err(other) => panic!("expected InvalidArgument, got {other:?}"),
            Ok(_) => panic!("connected although TLS is not compiled in"),
        }
    }

    fn assert_names_the_feature(message: &str) {
        assert!(
            message.contains("TLS support is not compiled in")
                && message.contains("enable ferrisson's `tls` feature")
                && message.contains(r#"features = ["tls"]"#),
            "{message}"
        );
    }

    #[test]
    fn a_tls_url_is_refused_naming_the_tls_feature() {
        // Port 1: nothing listens, so a plain-text attempt would fail differently.
        for url in [
            "rediss://app:secret@127.0.0.1:1",
            "rediss-cluster://127.0.0.1:1",
            "valkeys://127.0.0.1:1",
        ] {
            let message = refused(Config::new(url));
            assert_names_the_feature(&message);
            assert!(message.contains("uses TLS"), "{message}");
            assert!(!message.contains("secret"), "credentials leaked: {message}");
        }
    }

    #[test]
    fn tls_options_are_refused_naming_the_tls_feature() {
        let mut config = Config::new("redis://127.0.0.1:1");
        config.tls = Some(TlsOptions::default());
        let message = refused(config);
        assert_names_the_feature(&message);
        assert!(message.contains("Config::tls is set"), "{message}");
    }

    #[test]
    fn a_plain_url_without_tls_options_passes() {
        let config = Config::new("redis://127.0.0.1:1");
        let mut fred_config = FredConfig::from_url(&config.url).expect("url");
        assert!(crate::transport::tls::configure(&config, &mut fred_config).is_ok());
    }
}
