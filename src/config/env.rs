//! [`Config::from_env`]: a configuration from `REDIS_URL` and `FERRISSON_*` variables.

use std::time::Duration;

use super::Problems;
use super::{
    Config, DeadlockDetection, KeyspaceEvents, PublishMode, SyncedWrites, WhenUnavailable,
};
use crate::error::{Error, Result};

/// The variable that names the server, as for the command-line tool.
const URL_VARIABLE: &str = "REDIS_URL";
/// The prefix of ferrisson's own variables.
const PREFIX: &str = "FERRISSON_";
/// `true`: other `FERRISSON_*` variables than ferrisson's are ignored instead of refused.
const IGNORE_UNKNOWN: &str = "FERRISSON_IGNORE_UNKNOWN";

/// Sets one setting from a variable's value; the error says what is wrong with the value.
type Apply = fn(&mut Config, &str) -> std::result::Result<(), String>;

/// `(variable, |value| parsed, field)...` as [`SETTINGS`]' entries.
macro_rules! settings {
    ($(($variable:literal, $parse:expr, $field:ident),)*) => {
        &[$(($variable, |config: &mut Config, value: &str| {
            $parse(value).map(|value| config.$field = value)
        }),)*]
    };
}

/// Every `FERRISSON_*` variable and the setting it sets; [`Config::validate`] checks each value
/// as it is set.
const SETTINGS: &[(&str, Apply)] = settings![
    ("FERRISSON_WATCHDOG_TIMEOUT", duration, watchdog_timeout),
    ("FERRISSON_RESPONSE_TIMEOUT", duration, response_timeout),
    ("FERRISSON_CONNECT_TIMEOUT", duration, connect_timeout),
    ("FERRISSON_POOL_SIZE", number, pool_size),
    ("FERRISSON_RENEWAL_BATCH_SIZE", number, renewal_batch_size),
    ("FERRISSON_MAX_LOCAL_HANDOFFS", number, max_local_handoffs),
    (
        "FERRISSON_PUBLISH_MODE",
        |v| choice(v, PUBLISH_MODES),
        publish_mode
    ),
    (
        "FERRISSON_WHEN_UNAVAILABLE",
        |v| choice(v, WHEN_UNAVAILABLE),
        when_unavailable
    ),
    (
        "FERRISSON_SYNCED_WRITES",
        |v| choice(v, SYNCED_WRITES),
        synced_writes
    ),
    (
        "FERRISSON_REPLICA_SYNC_TIMEOUT",
        duration,
        replica_sync_timeout
    ),
    (
        "FERRISSON_KEYSPACE_EVENTS",
        |v| choice(v, KEYSPACE_EVENTS),
        keyspace_events
    ),
    (
        "FERRISSON_DEADLOCK_DETECTION",
        deadlock_detection,
        deadlock_detection
    ),
    (
        "FERRISSON_LAZY_INITIALIZATION",
        |v| choice(v, BOOLEANS),
        lazy_initialization
    ),
];

const PUBLISH_MODES: &[(&str, PublishMode)] = &[
    ("auto", PublishMode::Auto),
    ("classic", PublishMode::Classic),
    ("sharded", PublishMode::Sharded),
    ("both", PublishMode::Both),
];
const WHEN_UNAVAILABLE: &[(&str, WhenUnavailable)] = &[
    ("fail-fast", WhenUnavailable::FailFast),
    ("keep-waiting", WhenUnavailable::KeepWaiting),
];
const KEYSPACE_EVENTS: &[(&str, KeyspaceEvents)] = &[
    ("detect", KeyspaceEvents::Detect),
    ("enable", KeyspaceEvents::Enable),
    ("ignore", KeyspaceEvents::Ignore),
];
const BOOLEANS: &[(&str, bool)] = &[("true", true), ("false", false)];
const SYNCED_WRITES: &[(&str, SyncedWrites)] = &[
    ("auto", SyncedWrites::Auto),
    ("off", SyncedWrites::Off),
    ("always", SyncedWrites::Always),
];

impl Config {
    /// The server [`Config::from_env`] uses when `REDIS_URL` is not set: a Redis on this machine,
    /// as for the command-line tool and Redisson's own default.
    ///
    /// ```
    /// assert_eq!(ferrisson::Config::DEFAULT_URL, "redis://127.0.0.1:6379");
    /// ```
    pub const DEFAULT_URL: &'static str = "redis://127.0.0.1:6379";

    /// A configuration from the process environment: the server from `REDIS_URL` (default
    /// [`Config::DEFAULT_URL`]), and Redisson's defaults ([`Config::new`]) except where one of
    /// these variables says otherwise:
    ///
    /// | variable | setting | example |
    /// |---|---|---|
    /// | `FERRISSON_WATCHDOG_TIMEOUT` | [`watchdog_timeout`](Config::watchdog_timeout) | `30s` |
    /// | `FERRISSON_RESPONSE_TIMEOUT` | [`response_timeout`](Config::response_timeout) | `10s` |
    /// | `FERRISSON_CONNECT_TIMEOUT` | [`connect_timeout`](Config::connect_timeout) | `5s` |
    /// | `FERRISSON_POOL_SIZE` | [`pool_size`](Config::pool_size) | `4` |
    /// | `FERRISSON_RENEWAL_BATCH_SIZE` | [`renewal_batch_size`](Config::renewal_batch_size) | `100` |
    /// | `FERRISSON_MAX_LOCAL_HANDOFFS` | [`max_local_handoffs`](Config::max_local_handoffs) | `16` |
    /// | `FERRISSON_PUBLISH_MODE` | [`publish_mode`](Config::publish_mode) | `auto`, `classic`, `sharded`, `both` |
    /// | `FERRISSON_WHEN_UNAVAILABLE` | [`when_unavailable`](Config::when_unavailable) | `fail-fast`, `keep-waiting` |
    /// | `FERRISSON_SYNCED_WRITES` | [`synced_writes`](Config::synced_writes) | `auto`, `off`, `always` |
    /// | `FERRISSON_REPLICA_SYNC_TIMEOUT` | [`replica_sync_timeout`](Config::replica_sync_timeout) | `500ms` |
    /// | `FERRISSON_KEYSPACE_EVENTS` | [`keyspace_events`](Config::keyspace_events) | `detect`, `enable`, `ignore` |
    /// | `FERRISSON_DEADLOCK_DETECTION` | [`deadlock_detection`](Config::deadlock_detection) | `off`, `record:500ms`, `detect:1s` |
    /// | `FERRISSON_LAZY_INITIALIZATION` | [`lazy_initialization`](Config::lazy_initialization) | `true`, `false` |
    /// | `FERRISSON_IGNORE_UNKNOWN` | other `FERRISSON_*` variables ignored, not refused | `true`, `false` |
    ///
    /// Durations are humane (`500ms`, `30s`, `2m`, `1h 30m`); choices ignore case, and `_`
    /// may stand for `-`. An empty variable counts as unset. A value that does not parse, or
    /// that the setting does not accept, is a problem naming the variable and the value (never
    /// `REDIS_URL`'s value, which may hold a password: a bad URL fails at connect time, said in
    /// words with its password masked, since a caller may still replace it); so is any other
    /// `FERRISSON_*` variable (a misspelt one is told the name it most likely means), unless
    /// `FERRISSON_IGNORE_UNKNOWN=true`. Every problem is reported at once, in one
    /// [`Error::InvalidArgument`]. TLS options and fred's settings
    /// have no variables: set them on the returned configuration.
    ///
    /// Reading the environment is not synchronised with changes to it (`std::env::set_var`);
    /// tests should give their variables to [`Config::from_env_vars`] instead.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::new(ferrisson::Config::from_env()?).await?;
    /// # Ok(()) }
    /// ```
    pub fn from_env() -> Result<Config> {
        let mut vars = Vec::new();
        for (name, value) in std::env::vars_os() {
            let Some(name) = name.to_str().filter(|name| relevant(name)) else {
                continue;
            };
            let value = value.into_string().map_err(|value| {
                let shown = match name {
                    URL_VARIABLE => "(value not shown)".to_owned(),
                    _ => format!("{value:?}"),
                };
                Error::InvalidArgument(format!(
                    "environment variable {name} is not valid UTF-8: {shown}"
                ))
            })?;
            vars.push((name.to_owned(), value));
        }
        Config::from_env_vars(vars)
    }

    /// [`Config::from_env`] over the given name/value pairs instead of the process environment
    /// (a later pair wins over an earlier one with the same name; names other than `REDIS_URL`
    /// and `FERRISSON_*` are ignored).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ferrisson::{Config, Error, WhenUnavailable};
    ///
    /// let config = Config::from_env_vars([
    ///     ("REDIS_URL", "redis://cache:6379/2"),
    ///     ("FERRISSON_WATCHDOG_TIMEOUT", "10s"),
    ///     ("FERRISSON_WHEN_UNAVAILABLE", "keep-waiting"),
    /// ])?;
    /// assert_eq!(config.url, "redis://cache:6379/2");
    /// assert_eq!(config.watchdog_timeout, Duration::from_secs(10));
    /// assert_eq!(config.when_unavailable, WhenUnavailable::KeepWaiting);
    ///
    /// let err = Config::from_env_vars([("FERRISSON_POOL_SIZE", "many")]).unwrap_err();
    /// assert!(matches!(err, Error::InvalidArgument(_)));
    /// assert!(err.to_string().contains("FERRISSON_POOL_SIZE=\"many\""), "{err}");
    ///
    /// // Every problem at once; a misspelt name is told the right one.
    /// let err = Config::from_env_vars([
    ///     ("FERRISSON_POOL_SIZE", "0"),
    ///     ("FERRISSON_WATCHDOG_TIMOUT", "10s"),
    /// ])
    /// .unwrap_err()
    /// .to_string();
    /// assert!(err.contains("2 problems: FERRISSON_POOL_SIZE=\"0\": pool_size must be at least 1"), "{err}");
    /// assert!(err.contains("did you mean FERRISSON_WATCHDOG_TIMEOUT?"), "{err}");
    /// # Ok::<(), Error>(())
    /// ```
    pub fn from_env_vars<I, K, V>(vars: I) -> Result<Config>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        // Later pairs win, as in a map; settings are then applied in the table's order.
        let mut url = None;
        let mut values: Vec<Option<String>> = vec![None; SETTINGS.len()];
        let mut unknown: Vec<String> = Vec::new();
        let mut ignore_unknown = None;
        for (name, value) in vars {
            let (name, value) = (name.as_ref(), value.as_ref());
            if !relevant(name) {
                continue;
            }
            let value = (!value.is_empty()).then(|| value.to_owned());
            if name == URL_VARIABLE {
                url = value;
            } else if name == IGNORE_UNKNOWN {
                ignore_unknown = value;
            } else if let Some(index) = SETTINGS.iter().position(|(known, _)| *known == name) {
                values[index] = value;
            } else if !unknown.iter().any(|seen| seen == name) {
                unknown.push(name.to_owned());
            }
        }
        let mut problems = Problems::default();
        let ignore_unknown = match ignore_unknown {
            None => false,
            Some(value) => choice(&value, BOOLEANS).unwrap_or_else(|problem| {
                problems.push(format!("{IGNORE_UNKNOWN}={value:?}: {problem}"));
                false
            }),
        };
        // Each variable's problems are those its setting adds: the defaults have none.
        let mut config = Config::new(url.unwrap_or_else(|| Config::DEFAULT_URL.to_owned()));
        let mut seen = Vec::new();
        for ((name, apply), value) in SETTINGS.iter().zip(values) {
            let Some(value) = value else { continue };
            if let Err(problem) = apply(&mut config, &value) {
                problems.push(format!("{name}={value:?}: {problem}"));
                continue;
            }
            for problem in config.problems().into_messages() {
                if !seen.contains(&problem) {
                    problems.push(format!("{name}={value:?}: {problem}"));
                    seen.push(problem);
                }
            }
        }
        if ignore_unknown {
            for name in &unknown {
                tracing::debug!(variable = %name, "unknown FERRISSON_ variable ignored");
            }
        } else {
            for name in &unknown {
                problems.push(unknown_variable(name));
            }
        }
        problems.into_result().map(|()| config)
    }
}

/// An unknown variable's problem, with the known one it most likely misspells.
fn unknown_variable(name: &str) -> String {
    let closest = SETTINGS
        .iter()
        .map(|(known, _)| *known)
        .chain([IGNORE_UNKNOWN])
        .map(|known| (strsim::levenshtein(name, known), known))
        .min();
    let hint = match closest {
        Some((distance, known)) if distance <= 3 => format!(" (did you mean {known}?)"),
        _ => String::new(),
    };
    format!("unknown variable {name}{hint}, not one of Config::from_env's ({IGNORE_UNKNOWN}=true ignores such)")
}

fn relevant(name: &str) -> bool {
    name == URL_VARIABLE || name.starts_with(PREFIX)
}

fn duration(value: &str) -> std::result::Result<Duration, String> {
    humantime::parse_duration(value.trim())
        .map_err(|err| format!("not a duration such as 500ms, 30s or 2m ({err})"))
}

/// `off`, `record:<duration>` or `detect:<duration>`.
fn deadlock_detection(value: &str) -> std::result::Result<DeadlockDetection, String> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("off") {
        return Ok(DeadlockDetection::Off);
    }
    let expected = || "expected off, record:<duration> or detect:<duration>".to_owned();
    let (mode, after) = value.split_once(':').ok_or_else(expected)?;
    let after = duration(after)?;
    match mode.trim().to_ascii_lowercase().as_str() {
        "record" => Ok(DeadlockDetection::Record { after }),
        "detect" => Ok(DeadlockDetection::Detect { threshold: after }),
        _ => Err(expected()),
    }
}

fn number<T: std::str::FromStr>(value: &str) -> std::result::Result<T, String>
where
    T::Err: std::fmt::Display,
{
    value
        .trim()
        .parse()
        .map_err(|err| format!("not a whole number ({err})"))
}

fn choice<T: Copy>(value: &str, choices: &[(&str, T)]) -> std::result::Result<T, String> {
    let wanted = value.trim().to_ascii_lowercase().replace('_', "-");
    choices
        .iter()
        .find(|(name, _)| *name == wanted)
        .map(|(_, choice)| *choice)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            format!("expected one of {}", names.join(", "))
        })
}
