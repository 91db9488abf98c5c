//! Third-party token-lock peers for the token lock's interop tests, each a process driven by JSON
//! lines ([`super::json_lines`]):
//!
//! - [`PyLockPeer`]: redis-py's `redis.lock.Lock` (`tests/interop/py/token_peer.py`), redis-py
//!   [`REDIS_PY_VERSION`] from PyPI. `SET name <uuid1 hex> NX [PX ms]`, compare-and-delete
//!   release, extend that adds to (or replaces) the PTTL, reacquire that resets it.
//! - [`NodeRedlockPeer`]: npm `redlock` 4.2.0 (`tests/interop/token_peer.js`) over one ioredis
//!   client per server: Redlock with one random 32-hex value on every server.
//!
//! The wire formats both write are in `/work/notes/peers-token-locks.md` §1–2 (redis-py, node
//! redlock).
//!
//! Installation, once per test process: the Node side is `npm ci` in `tests/interop`
//! ([`super::node::install`], `redlock` is pinned by its `package-lock.json`). The Python side
//! needs only `python3` (>= 3.9) with pip: [`python_path`] fetches the pinned wheels with
//! `python3 -m pip download --no-deps --only-binary=:all: --require-hashes` into
//! `<workspace>/target/py-peers` (skipped when they are already there) and the peer runs with
//! `PYTHONPATH` naming them (a pure-Python wheel is importable as a zip). Besides redis-py that
//! is async-timeout, which redis-py imports on Python < 3.11.3 (Debian 12's python3 is 3.11.2).
//!
//! Failures to start come back as [`Unavailable`] (a clear message, e.g. "python3 was not found
//! on PATH ..."). Once a peer runs, each call waits a bounded time for its reply and panics (with
//! the peer's stderr) if there is none; what the library raised comes back as a [`PeerError`].

use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use super::json_lines::{LinePeer, Reply};
pub use super::node::Unavailable;

/// The redis-py release the Python peer runs (PyPI `redis`, pure Python, Python >= 3.9).
pub const REDIS_PY_VERSION: &str = "6.4.0";
/// async-timeout, which redis-py imports on Python < 3.11.3 (`redis/_parsers/base.py`).
pub const ASYNC_TIMEOUT_VERSION: &str = "5.0.1";

/// The wheels fetched for the Python peer: requirement, file name, sha256 (PyPI's).
const WHEELS: [(&str, &str, &str); 2] = [
    (
        "redis==6.4.0",
        "redis-6.4.0-py3-none-any.whl",
        "f0544fa9604264e9464cdf4814e7d4830f74b165d52f2a330a760a88dd248b7f",
    ),
    (
        "async-timeout==5.0.1",
        "async_timeout-5.0.1-py3-none-any.whl",
        "39e3809566ff85354557ec2398b55e096c8364bacac9405a7a1fa429e77fe76c",
    ),
];

/// The oldest Python redis-py [`REDIS_PY_VERSION`] runs on.
const MIN_PYTHON: (u32, u32) = (3, 9);

/// How long a peer may take to start and connect.
const STARTUP: Duration = Duration::from_secs(20);
/// The bound on a reply that should come promptly.
const REPLY: Duration = Duration::from_secs(10);
/// The bound on a reply that may wait without a bound of its own (a blocking acquire without
/// `blocking_timeout`, a Redlock with `retry_count` -1).
const LONG_REPLY: Duration = Duration::from_secs(60);
/// token_peer.js's ioredis `commandTimeout`: the longest one Redlock round may take.
const NODE_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

const HOW_TO_INSTALL_PYTHON: &str = "`./dev test` installs python3-pip with apt when missing; or \
     run `sudo apt-get install python3-pip` (or see https://www.python.org).";

/// What a peer's library raised: the exception's class (redis-py: `LockNotOwnedError`,
/// `LockError`, `ConnectionError`, ...; node: `LockError`, `Error`, ...) and its message. Also
/// used for a command the peer refused (class `BadCommand` / `Error`, e.g. an unknown handle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerError {
    pub class: String,
    pub message: String,
}

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.class, self.message)
    }
}

impl std::error::Error for PeerError {}

/// `tests/interop`: the peers' scripts.
pub fn peers_dir() -> PathBuf {
    super::workspace_root().join("tests").join("interop")
}

/// `<workspace>/target/py-peers`: the downloaded wheels.
pub fn wheel_dir() -> PathBuf {
    super::workspace_root().join("target").join("py-peers")
}

/// The Python executable.
pub fn python_binary() -> &'static str {
    "python3"
}

// ---------------------------------------------------------------------------------------------
// redis-py
// ---------------------------------------------------------------------------------------------

/// The `PYTHONPATH` under which `token_peer.py` imports the pinned redis-py: the wheels of
/// [`WHEELS`] in [`wheel_dir`], fetched with pip on the first call of the process when missing.
/// An `Err` says what is missing (python3, pip, the network for PyPI) and how to get it.
pub fn python_path() -> Result<OsString, Unavailable> {
    static PATH: OnceLock<Result<OsString, String>> = OnceLock::new();
    PATH.get_or_init(fetch_wheels).clone().map_err(Unavailable)
}

fn fetch_wheels() -> Result<OsString, String> {
    check_python()?;
    let dir = wheel_dir();
    let wheels: Vec<PathBuf> = WHEELS.iter().map(|(_, file, _)| dir.join(file)).collect();
    if !wheels.iter().all(|w| w.is_file()) {
        download_wheels(&dir)?;
    }
    std::env::join_paths(&wheels).map_err(|e| format!("cannot build PYTHONPATH: {e}"))
}

/// `python3` runs and is at least [`MIN_PYTHON`].
fn check_python() -> Result<(), String> {
    let out = match Command::new(python_binary())
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(format!(
                "Python (`python3`) was not found on PATH. The redis-py peer \
                 (tests/interop/py/token_peer.py) needs Python >= {}.{} with pip. \
                 {HOW_TO_INSTALL_PYTHON}",
                MIN_PYTHON.0, MIN_PYTHON.1
            ))
        }
        Err(e) => return Err(format!("cannot run `python3 --version`: {e}")),
    };
    // "Python 3.11.7" (on stderr before Python 3.4).
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!(
            "`python3 --version` failed ({}): {said}",
            out.status
        ));
    }
    let mut numbers = said
        .trim()
        .trim_start_matches("Python ")
        .split('.')
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    if version < MIN_PYTHON {
        return Err(format!(
            "`python3` is {} but the redis-py peer (redis {REDIS_PY_VERSION}) needs Python >= \
             {}.{}",
            said.trim(),
            MIN_PYTHON.0,
            MIN_PYTHON.1
        ));
    }
    Ok(())
}

/// `pip download`s [`WHEELS`] (hash-checked) into a private directory next to `dir`, then moves
/// them into `dir`: a concurrent test process never sees half a wheel.
fn download_wheels(dir: &Path) -> Result<(), String> {
    match Command::new(python_binary())
        .args(["-m", "pip", "--version"])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            return Err(format!(
                "pip for python3 is missing (`python3 -m pip --version` failed: {}). It fetches \
                 redis-py {REDIS_PY_VERSION} for the redis-py peer (tests/interop/py). \
                 {HOW_TO_INSTALL_PYTHON}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
        Err(e) => return Err(format!("cannot run `python3 -m pip --version`: {e}")),
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(".download-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let result = download_into(&tmp, dir);
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

fn download_into(tmp: &Path, dir: &Path) -> Result<(), String> {
    let requirements = tmp.join("requirements.txt");
    let text: String = WHEELS
        .iter()
        .map(|(spec, _, sha256)| format!("{spec} --hash=sha256:{sha256}\n"))
        .collect();
    std::fs::write(&requirements, text)
        .map_err(|e| format!("cannot write {}: {e}", requirements.display()))?;
    let out = Command::new(python_binary())
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args([
            "--require-hashes",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .arg("--dest")
        .arg(tmp)
        .arg("-r")
        .arg(&requirements)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `python3 -m pip download`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`python3 -m pip download redis=={REDIS_PY_VERSION} async-timeout=={ASYNC_TIMEOUT_VERSION}` \
             into {} failed ({}); it needs PyPI (or a pip cache or index that has them):\n{}\n{}",
            tmp.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    for (_, file, _) in WHEELS {
        let from = tmp.join(file);
        std::fs::rename(&from, dir.join(file)).map_err(|e| {
            format!(
                "cannot move {} into {} after pip download: {e}",
                from.display(),
                dir.display()
            )
        })?;
    }
    Ok(())
}

/// How a [`PyLockPeer::acquire`] goes: redis-py's `Lock(timeout=..., sleep=...,
/// blocking_timeout=...)` and `acquire(blocking=..., token=...)`.
#[derive(Clone, Debug)]
pub struct PyAcquire {
    /// The lock's TTL (`PX`), `None`: no TTL, redis-py's default (the key never expires).
    pub timeout: Option<Duration>,
    /// Poll until acquired (or `blocking_timeout`), else one `SET NX`.
    pub blocking: bool,
    /// How long a blocking acquire polls; `None`: forever (the reply then waits 60 s at most).
    pub blocking_timeout: Option<Duration>,
    /// The poll interval (`None`: redis-py's 0.1 s).
    pub sleep: Option<Duration>,
    /// The token to write (`None`: redis-py's `uuid1().hex`).
    pub token: Option<String>,
}

impl PyAcquire {
    /// One `SET NX` with TTL `timeout` (`blocking=False`).
    pub fn try_once(timeout: Option<Duration>) -> PyAcquire {
        PyAcquire {
            timeout,
            blocking: false,
            blocking_timeout: None,
            sleep: None,
            token: None,
        }
    }

    /// Polls for at most `blocking_timeout`, with TTL `timeout`.
    pub fn blocking(timeout: Option<Duration>, blocking_timeout: Duration) -> PyAcquire {
        PyAcquire {
            blocking: true,
            blocking_timeout: Some(blocking_timeout),
            ..PyAcquire::try_once(timeout)
        }
    }

    /// With the poll interval `sleep`.
    pub fn with_sleep(mut self, sleep: Duration) -> PyAcquire {
        self.sleep = Some(sleep);
        self
    }

    /// With a caller-chosen token.
    pub fn with_token(mut self, token: &str) -> PyAcquire {
        self.token = Some(token.to_owned());
        self
    }
}

/// The outcome of [`PyLockPeer::acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyAcquired {
    /// What `acquire()` returned.
    pub acquired: bool,
    /// The peer's `Lock` object, for release, extend, reacquire and owned (also when not
    /// acquired: a later call on it acts like redis-py's on an unacquired lock).
    pub handle: u64,
    /// The token written (the lock's `local.token`), when acquired.
    pub token: Option<String>,
}

/// A `python3 token_peer.py <url>` process: redis-py `redis.lock.Lock` objects on one
/// `redis.Redis` client. Killed when dropped.
pub struct PyLockPeer {
    peer: LinePeer,
    redis_py: String,
    python: String,
}

impl PyLockPeer {
    /// Starts a peer on `url` (fetching redis-py first if needed, see [`python_path`]).
    pub async fn start(url: &str) -> Result<PyLockPeer, Unavailable> {
        let python_path = tokio::task::spawn_blocking(python_path)
            .await
            .expect("python_path task")?;
        let dir = peers_dir().join("py");
        let mut command = tokio::process::Command::new(python_binary());
        command
            .arg(dir.join("token_peer.py"))
            .arg(url)
            .current_dir(&dir)
            .env("PYTHONPATH", python_path)
            .env("PYTHONNOUSERSITE", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1");
        let peer = LinePeer::spawn("redis-py peer", command, STARTUP).await?;
        let ready = peer.ready();
        let redis_py = ready.str("redis_py").unwrap_or_default().to_owned();
        let python = ready.str("python").unwrap_or_default().to_owned();
        if redis_py != REDIS_PY_VERSION {
            return Err(Unavailable(format!(
                "the redis-py peer imported redis {redis_py:?}, not the pinned \
                 {REDIS_PY_VERSION} (PYTHONPATH not honoured?)"
            )));
        }
        Ok(PyLockPeer {
            peer,
            redis_py,
            python,
        })
    }

    /// `redis.__version__` of the peer.
    pub fn redis_py_version(&self) -> &str {
        &self.redis_py
    }

    /// The peer's Python version ("3.11.7").
    pub fn python_version(&self) -> &str {
        &self.python
    }

    /// A new `Lock(name, timeout, sleep, blocking_timeout, thread_local=False)` and its
    /// `acquire(blocking, token)`.
    pub async fn acquire(&self, name: &str, how: &PyAcquire) -> Result<PyAcquired, PeerError> {
        let within = match (how.blocking, how.blocking_timeout) {
            (false, _) => REPLY,
            (true, Some(bound)) => bound + REPLY,
            (true, None) => LONG_REPLY,
        };
        let args = json!({
            "name": name,
            "timeout_s": how.timeout.map(|d| d.as_secs_f64()),
            "blocking": how.blocking,
            "blocking_timeout_s": how.blocking_timeout.map(|d| d.as_secs_f64()),
            "sleep_s": how.sleep.map(|d| d.as_secs_f64()),
            "token": how.token,
        });
        let reply = py_result(self.peer.call("acquire", args, within).await)?;
        Ok(PyAcquired {
            acquired: reply.bool("acquired"),
            handle: reply.u64("handle"),
            token: reply.str("token").map(str::to_owned),
        })
    }

    /// `release()`: `Err` with class `LockNotOwnedError` when the key no longer holds the
    /// token, `LockError` when the object holds none.
    pub async fn release(&self, handle: u64) -> Result<(), PeerError> {
        self.outcome("release", json!({ "handle": handle }), "released")
            .await
    }

    /// `extend(additional, replace_ttl)`: adds `additional` to the PTTL (or sets it, with
    /// `replace_ttl`). `LockError` for a lock without timeout, `LockNotOwnedError` when the
    /// token does not match or the key has no TTL.
    pub async fn extend(
        &self,
        handle: u64,
        additional: Duration,
        replace_ttl: bool,
    ) -> Result<(), PeerError> {
        let args = json!({
            "handle": handle,
            "additional_s": additional.as_secs_f64(),
            "replace_ttl": replace_ttl,
        });
        self.outcome("extend", args, "extended").await
    }

    /// `reacquire()`: resets the PTTL to the lock's timeout.
    pub async fn reacquire(&self, handle: u64) -> Result<(), PeerError> {
        self.outcome("reacquire", json!({ "handle": handle }), "reacquired")
            .await
    }

    /// `owned()`: the key holds this object's token.
    pub async fn owned(&self, handle: u64) -> Result<bool, PeerError> {
        let reply = self.peer.call("owned", json!({ "handle": handle }), REPLY);
        Ok(py_result(reply.await)?.bool("owned"))
    }

    /// `Lock(name).locked()`: the key exists (whoever holds it).
    pub async fn locked(&self, name: &str) -> Result<bool, PeerError> {
        let reply = self.peer.call("locked", json!({ "name": name }), REPLY);
        Ok(py_result(reply.await)?.bool("locked"))
    }

    /// The plumbing, e.g. to send a command without awaiting its reply.
    pub fn line_peer(&self) -> &LinePeer {
        &self.peer
    }

    /// Ends the process.
    pub async fn quit(self) {
        self.peer.quit().await
    }

    async fn outcome(&self, op: &str, args: Value, field: &str) -> Result<(), PeerError> {
        let reply = py_result(self.peer.call(op, args, REPLY).await)?;
        if reply.bool(field) {
            Ok(())
        } else {
            Err(py_error(&reply))
        }
    }
}

/// redis-py replies name the exception's class in "error" and its text in "message".
fn py_error(reply: &Reply) -> PeerError {
    PeerError {
        class: reply.str("error").unwrap_or("?").to_owned(),
        message: reply.str("message").unwrap_or_default().to_owned(),
    }
}

fn py_result(reply: Reply) -> Result<Reply, PeerError> {
    if reply.ok() {
        Ok(reply)
    } else {
        Err(py_error(&reply))
    }
}

// ---------------------------------------------------------------------------------------------
// node redlock
// ---------------------------------------------------------------------------------------------

/// A Redlock's settings for one [`NodeRedlockPeer::lock`]; `None`: redlock's default
/// (retryCount 10, retryDelay 200 ms, retryJitter 100 ms, driftFactor 0.01). The lock's extend
/// and unlock use the settings it was acquired with.
#[derive(Clone, Debug, Default)]
pub struct RedlockSettings {
    /// Retries after the first attempt (-1: forever).
    pub retry_count: Option<i64>,
    pub retry_delay: Option<Duration>,
    pub retry_jitter: Option<Duration>,
    pub drift_factor: Option<f64>,
}

impl RedlockSettings {
    /// One attempt, no retry.
    pub fn once() -> RedlockSettings {
        RedlockSettings {
            retry_count: Some(0),
            ..RedlockSettings::default()
        }
    }

    /// The longest a lock or extend with these settings can take, plus [`REPLY`].
    fn bound(&self) -> Duration {
        let Ok(retries) = u32::try_from(self.retry_count.unwrap_or(10)) else {
            return LONG_REPLY;
        };
        let delay = self.retry_delay.unwrap_or(Duration::from_millis(200))
            + self.retry_jitter.unwrap_or(Duration::from_millis(100));
        ((NODE_COMMAND_TIMEOUT + delay).saturating_mul(retries.saturating_add(1)) + REPLY)
            .min(LONG_REPLY)
    }
}

/// A lock the node peer holds (or held).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedlockLock {
    /// The peer's lock object.
    pub handle: u64,
    /// The random value written on every server (32 hex chars).
    pub value: String,
    /// redlock's `expiration`, epoch ms: attempt start + ttl - (round(drift × ttl) + 2).
    pub expiration_ms: u64,
    /// The attempt that succeeded (1 = the first); 0 after an extend.
    pub attempts: u64,
}

impl RedlockLock {
    /// [`RedlockLock::expiration_ms`] as a time.
    pub fn expiration(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.expiration_ms)
    }
}

/// A `node token_peer.js <url>...` process: one ioredis client per server and Redlock (npm
/// `redlock` 4.2.0) over all of them. Killed when dropped.
pub struct NodeRedlockPeer {
    peer: LinePeer,
    servers: usize,
    connected: usize,
}

impl NodeRedlockPeer {
    /// Starts a peer over the servers at `urls` (after `npm ci` if needed). A server that is
    /// down does not stop it (see [`NodeRedlockPeer::connected_at_start`]); its client keeps
    /// reconnecting, and commands to it fail at once meanwhile (votes against).
    pub async fn start<S: AsRef<str>>(urls: &[S]) -> Result<NodeRedlockPeer, Unavailable> {
        assert!(!urls.is_empty(), "a Redlock needs at least one server");
        let dir = tokio::task::spawn_blocking(super::node::install)
            .await
            .expect("npm install task")?;
        let mut command = tokio::process::Command::new(super::node::node_binary());
        command
            .arg(dir.join("token_peer.js"))
            .args(urls.iter().map(AsRef::as_ref))
            .current_dir(&dir);
        let peer = LinePeer::spawn("node redlock peer", command, STARTUP).await?;
        let servers = peer.ready().u64("servers") as usize;
        let connected = peer.ready().u64("connected") as usize;
        Ok(NodeRedlockPeer {
            peer,
            servers,
            connected,
        })
    }

    /// How many servers the Redlock spans.
    pub fn servers(&self) -> usize {
        self.servers
    }

    /// How many of them were connected when the peer reported ready.
    pub fn connected_at_start(&self) -> usize {
        self.connected
    }

    /// `redlock.lock(resource, ttl)` with `settings`: the lock, or `Err` with class `LockError`
    /// when it could not get a quorum within its attempts.
    pub async fn lock(
        &self,
        resource: &str,
        ttl: Duration,
        settings: &RedlockSettings,
    ) -> Result<RedlockLock, PeerError> {
        let mut args = Map::new();
        args.insert("resource".into(), resource.into());
        args.insert("ttl_ms".into(), millis(ttl).into());
        if let Some(count) = settings.retry_count {
            args.insert("retry_count".into(), count.into());
        }
        if let Some(delay) = settings.retry_delay {
            args.insert("retry_delay_ms".into(), millis(delay).into());
        }
        if let Some(jitter) = settings.retry_jitter {
            args.insert("retry_jitter_ms".into(), millis(jitter).into());
        }
        if let Some(drift) = settings.drift_factor {
            args.insert("drift_factor".into(), drift.into());
        }
        let reply = self
            .peer
            .call("lock", Value::Object(args), settings.bound())
            .await;
        let reply = node_result(reply, "acquired")?;
        Ok(RedlockLock {
            handle: reply.u64("handle"),
            value: reply.str("value").expect("lock reply value").to_owned(),
            expiration_ms: reply.u64("expiration"),
            attempts: reply.u64("attempts"),
        })
    }

    /// `lock.unlock()`: `Err` (`LockError`) unless a quorum of servers deleted the key.
    pub async fn unlock(&self, handle: u64) -> Result<(), PeerError> {
        let reply = self.peer.call("unlock", json!({ "handle": handle }), REPLY);
        node_result(reply.await, "released").map(drop)
    }

    /// `lock.extend(ttl)`: the lock with its new expiration (the same handle and value), or
    /// `Err` (`LockError`). With redlock v4 a failed extend attempt deletes the key where it
    /// still holds the value, and retries with the lock's settings.
    pub async fn extend(&self, handle: u64, ttl: Duration) -> Result<RedlockLock, PeerError> {
        let args = json!({ "handle": handle, "ttl_ms": millis(ttl) });
        let reply = self.peer.call("extend", args, LONG_REPLY).await;
        let reply = node_result(reply, "extended")?;
        Ok(RedlockLock {
            handle,
            value: reply.str("value").expect("extend reply value").to_owned(),
            expiration_ms: reply.u64("expiration"),
            attempts: 0,
        })
    }

    /// A raw `GET resource` on server `server_index` (in the order of the URLs): `Err` when that
    /// server does not answer.
    pub async fn get(
        &self,
        resource: &str,
        server_index: usize,
    ) -> Result<Option<String>, PeerError> {
        let args = json!({ "resource": resource, "server_index": server_index });
        let reply = node_result(self.peer.call("get", args, REPLY).await, "ok")?;
        Ok(reply.str("value").map(str::to_owned))
    }

    /// The plumbing, e.g. to send a command without awaiting its reply.
    pub fn line_peer(&self) -> &LinePeer {
        &self.peer
    }

    /// Ends the process.
    pub async fn quit(self) {
        self.peer.quit().await
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A node reply whose `outcome` field is true, else its error: node replies carry the error's
/// name in "class" and its message in "error".
fn node_result(reply: Reply, outcome: &str) -> Result<Reply, PeerError> {
    if reply.ok() && reply.bool(outcome) {
        return Ok(reply);
    }
    Err(PeerError {
        class: reply.str("class").unwrap_or("?").to_owned(),
        message: reply.str("error").unwrap_or_default().to_owned(),
    })
}
