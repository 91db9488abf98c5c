//! [`ConfigBuilder`]: the chainable way to a checked [`Config`].

use std::time::Duration;

use fred::types::config::{ConnectionConfig, PerformanceConfig, ReconnectPolicy};

use super::TlsOptions;
use super::{
    Config, DeadlockDetection, KeyspaceEvents, PublishMode, SyncedWrites, WhenUnavailable,
};
use crate::error::Result;

/// Builds a [`Config`] one setting at a time, from Redisson's defaults; [`build`](Self::build)
/// checks every value. Made by [`Config::builder`]; each setter has the name of the
/// [`Config`] field it sets, whose documentation gives its meaning and default.
///
/// ```
/// use std::time::Duration;
/// use ferrisson::{Config, WhenUnavailable};
///
/// let config = Config::builder("redis://127.0.0.1:6379")
///     .watchdog_timeout(Duration::from_secs(10))
///     .when_unavailable(WhenUnavailable::KeepWaiting)
///     .pool_size(4)
///     .build()?;
/// assert_eq!(config.pool_size, 4);
///
/// // A bad value fails at `build()`, naming the setting.
/// let err = Config::builder("redis://127.0.0.1:6379").pool_size(0).build().unwrap_err();
/// assert!(err.to_string().contains("pool_size"));
/// # Ok::<(), ferrisson::Error>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a ConfigBuilder does nothing until `build()` is called"]
pub struct ConfigBuilder {
    config: Config,
}

impl Config {
    /// A [`ConfigBuilder`] for `url`, starting from Redisson's defaults ([`Config::new`]).
    ///
    /// ```
    /// let config = ferrisson::Config::builder("redis://127.0.0.1:6379")
    ///     .renewal_batch_size(50)
    ///     .build()?;
    /// assert_eq!(config.renewal_batch_size, 50);
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn builder(url: impl Into<String>) -> ConfigBuilder {
        ConfigBuilder {
            config: Config::new(url),
        }
    }
}

impl From<Config> for ConfigBuilder {
    /// Continues from an existing configuration (e.g. one read by [`Config::from_env`]).
    ///
    /// ```
    /// use ferrisson::{Config, ConfigBuilder};
    ///
    /// let config = ConfigBuilder::from(Config::new("redis://127.0.0.1:6379"))
    ///     .max_local_handoffs(0)
    ///     .build()?;
    /// assert_eq!(config.max_local_handoffs, 0);
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    fn from(config: Config) -> Self {
        ConfigBuilder { config }
    }
}

/// One chainable setter per field: `$name(value)` sets `Config::$name`; with `= $example`,
/// its doc gets an example that sets that value and reads it back.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $type:ty $(= $example:expr)?;)*) => {$(
        $(#[$doc])*
        $(
            ///
            /// ```
            /// # use std::time::Duration;
            /// # use ferrisson::{Config, DeadlockDetection, KeyspaceEvents, PublishMode};
            /// # use ferrisson::{SyncedWrites, WhenUnavailable};
            #[doc = concat!(
                "let config = Config::builder(\"redis://h\").",
                stringify!($name), "(", stringify!($example), ").build()?;"
            )]
            #[doc = concat!("assert_eq!(config.", stringify!($name), ", ", stringify!($example), ");")]
            /// # Ok::<(), ferrisson::Error>(())
            /// ```
        )?
        pub fn $name(mut self, value: $type) -> Self {
            self.config.$name = value;
            self
        }
    )*};
}

impl ConfigBuilder {
    setters! {
        /// Sets [`Config::watchdog_timeout`] (at least 3 ms).
        watchdog_timeout: Duration = Duration::from_secs(9);
        /// Sets [`Config::renewal_batch_size`] (at least 1).
        renewal_batch_size: usize = 10;
        /// Sets [`Config::publish_mode`].
        publish_mode: PublishMode = PublishMode::Classic;
        /// Sets [`Config::when_unavailable`].
        when_unavailable: WhenUnavailable = WhenUnavailable::KeepWaiting;
        /// Sets [`Config::response_timeout`] (positive).
        response_timeout: Duration = Duration::from_secs(2);
        /// Sets [`Config::connect_timeout`] (positive).
        connect_timeout: Duration = Duration::from_secs(1);
        /// Sets [`Config::lazy_initialization`].
        lazy_initialization: bool = true;
        /// Sets [`Config::pool_size`] (at least 1).
        pool_size: usize = 8;
        /// Sets [`Config::max_local_handoffs`] (0 turns local hand-offs off).
        max_local_handoffs: u32 = 0;
        /// Sets [`Config::synced_writes`].
        synced_writes: SyncedWrites = SyncedWrites::Always;
        /// Sets [`Config::replica_sync_timeout`] (at least 1 ms).
        replica_sync_timeout: Duration = Duration::from_millis(300);
        /// Sets [`Config::keyspace_events`].
        keyspace_events: KeyspaceEvents = KeyspaceEvents::Enable;
        /// Sets [`Config::deadlock_detection`] (a threshold of at least 20 ms, a record delay
        /// of at least 10 ms).
        deadlock_detection: DeadlockDetection =
            DeadlockDetection::Detect { threshold: Duration::from_secs(1) };
        /// Sets [`Config::connection`], fred's connection settings (see the table on [`Config`]
        /// for the ones ferrisson overrides).
        ///
        /// ```
        /// use ferrisson::fred::types::config::ConnectionConfig;
        /// let mut connection = ConnectionConfig::default();
        /// connection.tcp.nodelay = Some(true);
        /// let config = ferrisson::Config::builder("redis://h").connection(connection).build()?;
        /// assert_eq!(config.connection.tcp.nodelay, Some(true));
        /// # Ok::<(), ferrisson::Error>(())
        /// ```
        connection: ConnectionConfig;
        /// Sets [`Config::performance`], fred's performance settings.
        ///
        /// ```
        /// use ferrisson::fred::types::config::PerformanceConfig;
        /// let performance = PerformanceConfig { broadcast_channel_capacity: 256, ..Default::default() };
        /// let config = ferrisson::Config::builder("redis://h").performance(performance).build()?;
        /// assert_eq!(config.performance.broadcast_channel_capacity, 256);
        /// # Ok::<(), ferrisson::Error>(())
        /// ```
        performance: PerformanceConfig;
        /// Sets [`Config::reconnect_policy`]; it must reconnect forever (`max_attempts` 0).
        ///
        /// ```
        /// use ferrisson::fred::types::config::ReconnectPolicy;
        /// let config = ferrisson::Config::builder("redis://h")
        ///     .reconnect_policy(ReconnectPolicy::new_constant(0, 100))
        ///     .build()?;
        /// assert_eq!(config.reconnect_policy, ReconnectPolicy::new_constant(0, 100));
        /// assert!(ferrisson::Config::builder("redis://h")
        ///     .reconnect_policy(ReconnectPolicy::new_constant(3, 100))
        ///     .build()
        ///     .is_err());
        /// # Ok::<(), ferrisson::Error>(())
        /// ```
        reconnect_policy: ReconnectPolicy;
    }

    /// Sets [`Config::url`].
    ///
    /// ```
    /// let config = ferrisson::Config::builder("redis://a:6379").url("redis://b:6379").build()?;
    /// assert_eq!(config.url, "redis://b:6379");
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.config.url = url.into();
        self
    }

    /// Sets [`Config::tls`]: a private CA to trust, a client certificate (for `rediss://`).
    ///
    /// ```
    /// use ferrisson::{Config, TlsOptions};
    /// # let ca_pem = Vec::new();
    /// let config = Config::builder("rediss://127.0.0.1:6380")
    ///     .tls(TlsOptions::default().trust_pem(ca_pem))
    ///     .build()?;
    /// assert!(config.tls.is_some());
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn tls(mut self, options: TlsOptions) -> Self {
        self.config.tls = Some(options);
        self
    }

    /// The configuration, after checking every setting and the URL's syntax as
    /// [`Client::new`](crate::Client::new) does: every bad value is named in one
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument). (Whether the URL's scheme
    /// works with these settings is checked when connecting.)
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let err = ferrisson::Config::builder("redis://h")
    ///     .watchdog_timeout(Duration::from_millis(1))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("watchdog_timeout"));
    /// ```
    ///
    /// ```
    /// // Every problem at once, the URL's in words.
    /// let err = ferrisson::Config::builder("localhost:6379")
    ///     .pool_size(0)
    ///     .build()
    ///     .unwrap_err()
    ///     .to_string();
    /// assert!(err.contains("2 problems: "), "{err}");
    /// assert!(err.contains("pool_size must be at least 1"), "{err}");
    /// assert!(err.contains("it has no scheme"), "{err}");
    /// ```
    pub fn build(self) -> Result<Config> {
        self.config.validate_with_url()?;
        Ok(self.config)
    }
}
