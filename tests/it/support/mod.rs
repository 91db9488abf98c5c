//! Reusable real-Redis test fixture.
//!
//! The integration tests' binary (`tests/it/main.rs`) declares it with `mod support;` (the soak
//! checker and the benches include it by `#[path]`); a test module then writes:
//!
//! ```ignore
//! use crate::support;
//!
//! let server = support::RedisServer::start();
//! let client = support::raw_client(&server.url()).await;
//! let ferrisson = support::connect(&server).await;
//! ```
//!
//! Every [`RedisServer`] is a private `redis-server` child process on a free
//! loopback port, with persistence off and its own temporary directory. The
//! child is killed (SIGKILL) and reaped when the value is dropped, also when
//! the test panics, so no process is leaked.
//!
//! The binary is taken from the `REDIS_SERVER` environment variable if set,
//! otherwise `redis-server` is looked up on `PATH`.
//!
//! [`fault`] injects faults: signals, `CLIENT KILL`, `DEBUG SLEEP`, a TCP fault proxy.
//!
//! [`cluster`] and [`sentinel`] run a real local Redis Cluster and a Sentinel deployment;
//! [`tls`] a TLS server with a private CA.
//!
//! [`contenders`] runs copies of a test's binary as contender processes; [`processes`] re-runs a
//! test under its full name, also in a process of its own for process-wide state.
//!
//! [`redis_state`] reads server-side state (lock hashes, TTLs, subscriber counts, command
//! statistics) through a raw client and waits for it to change.
//!
//! [`java`] runs the Java Redisson peer of each version of the matrix (`tests/peers/java`).
//!
//! [`redsync`] runs Go's redsync (`tests/peers/go`), a token-lock and Redlock peer.
//!
//! [`token_peers`] runs third-party token-lock peers (redis-py's `Lock`, node `redlock`) over
//! the JSON-lines plumbing of [`json_lines`].
#![allow(dead_code)]

pub mod built;
pub mod cluster;
pub mod contenders;
pub mod fault;
pub mod java;
pub mod json_lines;
pub mod liveness;
pub mod node;
pub mod processes;
pub mod redis_state;
pub mod redsync;
pub mod sentinel;
pub mod servers;
pub mod sync;
pub mod tls;
pub mod token_peers;

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The workspace's root (the `ferrisson` package): the parent of `tests/` and of `benches/`,
/// whose packages both compile this module.
pub fn workspace_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// How long a server may take to answer PING after being spawned.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many fresh ports `start*` tries before giving up (another process may
/// grab the port between picking it and redis binding it).
const START_ATTEMPTS: usize = 5;

/// A `redis-server` child process owned by one test.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    binary: OsString,
    extra_args: Vec<String>,
    /// A configuration file in `dir`, passed first (sentinels need one: they rewrite it).
    config_file: Option<PathBuf>,
}

impl RedisServer {
    /// Starts a fresh server on a free loopback port. Blocking; fine to call
    /// from inside `#[tokio::test]`.
    pub fn start() -> RedisServer {
        RedisServer::start_with_args(&[])
    }

    /// Like [`RedisServer::start`], with extra `redis-server` command-line
    /// arguments appended (e.g. `&["--maxmemory", "10mb"]`). They are kept
    /// for [`RedisServer::restart`].
    pub fn start_with_args(extra_args: &[&str]) -> RedisServer {
        RedisServer::start_with_config(None, extra_args)
    }

    /// Like [`RedisServer::start_with_args`], with `config` (if any) written to `redis.conf` in
    /// the server's directory and passed as its configuration file, before the arguments (e.g. a
    /// sentinel's `sentinel monitor ...`, with `&["--sentinel"]`). The server may rewrite the
    /// file; [`RedisServer::restart`] reuses it as it is then.
    pub fn start_with_config(config: Option<&str>, extra_args: &[&str]) -> RedisServer {
        let binary = redis_server_binary();
        let extra_args = args_for_this_server(extra_args);
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("ferrisson-redis-")
                .tempdir()
                .expect("failed to create a temp dir for redis-server");
            let port = free_port();
            let config_file = config.map(|text| {
                let path = dir.path().join("redis.conf");
                std::fs::write(&path, text).expect("failed to write the redis-server config file");
                path
            });
            let mut server = RedisServer {
                child: None,
                port,
                dir,
                binary: binary.clone(),
                extra_args: extra_args.clone(),
                config_file,
            };
            match server.spawn_and_wait(STARTUP_TIMEOUT) {
                Ok(()) => return server,
                Err(err) => {
                    failures.push(format!("attempt {attempt} (port {port}): {err}"));
                    // Drop kills and reaps whatever was spawned.
                }
            }
        }
        panic!(
            "redis-server ({}) did not come up after {START_ATTEMPTS} attempts:\n{}",
            binary.to_string_lossy(),
            failures.join("\n")
        );
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's private working directory (its log is `redis.log` there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Process id of the running server, if it is running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the child process is alive (not killed and not exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the server with SIGKILL and waits for it to exit. The port and
    /// temp dir are kept so that [`RedisServer::restart`] can reuse them.
    /// Calling it on a stopped server is a no-op.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Alias for [`RedisServer::kill`].
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Kills the server if it is running and starts a new one on the same
    /// port (with the same extra arguments), waiting until it answers PING.
    /// The data set is empty afterwards (persistence is off).
    pub fn restart(&mut self) {
        self.kill();
        // The old listening socket is gone once the process is reaped; redis
        // uses SO_REUSEADDR, but retry briefly in case the bind still fails.
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let mut last_err = String::new();
        while Instant::now() < deadline {
            match self.spawn_and_wait(deadline.saturating_duration_since(Instant::now())) {
                Ok(()) => return,
                Err(err) => {
                    last_err = err;
                    self.kill();
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        panic!(
            "redis-server could not be restarted on port {} within {:?}: {last_err}",
            self.port, STARTUP_TIMEOUT
        );
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn_and_wait(&mut self, timeout: Duration) -> Result<(), String> {
        assert!(self.child.is_none(), "redis-server is already running");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("cannot open redis log file: {e}"))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("cannot clone redis log file handle: {e}"))?;
        let port = self.port.to_string();
        let mut cmd = Command::new(&self.binary);
        cmd.args(&self.config_file)
            .arg("--port")
            .arg(&port)
            .args(["--bind", "127.0.0.1"])
            .args(["--protected-mode", "no"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--logfile", ""])
            .args(&self.extra_args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == ErrorKind::NotFound => panic!(
                "redis-server not found (tried {:?}{}). Run `./dev test`, which installs it, \
                 or set REDIS_SERVER to the path of a redis-server binary.",
                self.binary,
                if std::env::var_os("REDIS_SERVER").is_some() {
                    " from $REDIS_SERVER"
                } else {
                    " on PATH"
                }
            ),
            Err(e) => panic!("failed to spawn redis-server {:?}: {e}", self.binary),
        };
        let pid = child.id();
        self.child = Some(child);
        self.wait_ready(pid, timeout).map_err(|err| {
            self.kill();
            format!("{err}\n--- redis.log ---\n{}", self.read_log_tail())
        })
    }

    /// Waits until *our* child answers PING on the port (and INFO reports our
    /// pid, so another test's server that grabbed the port is not mistaken
    /// for ours).
    fn wait_ready(&mut self, pid: u32, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut() {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        return Err(format!("redis-server exited during startup ({status})"))
                    }
                    Ok(None) => {}
                    Err(e) => return Err(format!("cannot poll redis-server: {e}")),
                }
            }
            let last = match probe(self.port, Duration::from_millis(500)) {
                Ok(Some(server_pid)) if server_pid == pid => return Ok(()),
                Ok(Some(other)) => {
                    format!(
                        "port {} is served by another process (pid {other})",
                        self.port
                    )
                }
                Ok(None) => "answered PING but INFO had no process_id".to_string(),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "redis-server did not answer PING on 127.0.0.1:{} within {:?} (last: {last})",
                    self.port, timeout
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn read_log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = File::open(self.log_path()) {
            let _ = f.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Builds and connects a plain fred client for test assertions (HGETALL,
/// PTTL, PUBSUB NUMSUB, INFO commandstats, ...). Panics on failure.
pub async fn raw_client(url: &str) -> fred::clients::Client {
    let config = fred::types::config::Config::from_url(url)
        .unwrap_or_else(|e| panic!("bad redis url {url}: {e}"));
    init_raw(fred::types::Builder::from_config(config), url).await
}

/// Builds the client `builder` describes and connects it to `url`. Panics on failure.
pub async fn init_raw(builder: fred::types::Builder, url: &str) -> fred::clients::Client {
    use fred::prelude::*;
    let client = builder
        .build()
        .unwrap_or_else(|e| panic!("cannot build fred client for {url}: {e}"));
    client
        .init()
        .await
        .unwrap_or_else(|e| panic!("cannot connect fred client to {url}: {e}"));
    client
}

/// Connects a ferrisson client with the default configuration to `server`. Panics on failure.
pub async fn connect(server: &RedisServer) -> ferrisson::Client {
    ferrisson::Client::connect(&server.url())
        .await
        .expect("ferrisson client connects to the fixture server")
}

/// Connects a ferrisson client with `config` (whose URL names the server). Panics on failure.
pub async fn connect_with(config: ferrisson::Config) -> ferrisson::Client {
    ferrisson::Client::new(config)
        .await
        .expect("ferrisson client connects to the fixture server")
}

/// A ferrisson configuration for `url` with a short `watchdog` lease and `response` timeout,
/// for tests in which leases run out and calls time out.
pub fn timed_config(url: String, watchdog: Duration, response: Duration) -> ferrisson::Config {
    let mut config = ferrisson::Config::new(url);
    config.watchdog_timeout = watchdog;
    config.response_timeout = response;
    config
}

/// Waits for `guard.lost()` at most `within` (panics if it does not fire); returns when it did.
pub async fn lost_within(guard: &ferrisson::LockGuard, within: Duration) -> Instant {
    tokio::time::timeout(within, guard.lost())
        .await
        .expect("lost() fires");
    Instant::now()
}

/// The machine's round trip through `client` now, under the load it has: the slowest of 5
/// queries (`EXISTS` of a key nobody uses). A test whose subject is a short lease sizes the
/// lease's margin from it ([`short_lease`]) rather than from a guess.
pub async fn round_trip(client: &ferrisson::Client) -> Duration {
    let probe = client.lock("support:round-trip-probe");
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let asked = Instant::now();
        probe.is_locked().await.expect("a round trip");
        slowest = slowest.max(asked.elapsed());
    }
    slowest
}

/// A lease for a test whose subject is a short lease: at least `floor`, and at least 20 round
/// trips as measured now ([`round_trip`]), so that the steps the test must take before the
/// lease ends fit however loaded the machine is when the test runs.
pub fn short_lease(round_trip: Duration, floor: Duration) -> Duration {
    floor.max(round_trip.saturating_mul(20))
}

/// How many waiters of `client` are parked on `name` now ([`ferrisson::Client::local_state`]):
/// parked on its wake-up channels, or parked in its local line (a line's waiters past the head
/// wait for a hand-off, not on the channel).
pub fn parked_waiters(client: &ferrisson::Client, name: &str) -> usize {
    let state = client.local_state(name);
    let on_channels: usize = state.subscriptions.iter().map(|sub| sub.parked).sum();
    let in_line = state
        .line
        .iter()
        .filter(|waiter| waiter.state == ferrisson::inspect::LocalWaiterState::Parked)
        .count();
    on_channels.max(in_line)
}

/// Waits (at most 5 s, else panics with the local state) until `n` waiters of `client` are
/// parked on `name`: subscribed, their attempt after subscribing refused, and waiting for a
/// message or a hand-off. A test that then releases knows the release is what wakes them;
/// a subscription alone (`NUMSUB`) says nothing of the attempt that follows it.
pub async fn wait_parked(client: &ferrisson::Client, name: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while parked_waiters(client, name) < n {
        assert!(
            Instant::now() < deadline,
            "{n} waiters of {name} not parked within 5 s: {}",
            client.local_state(name)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// What the spawned acquire `waiter` took, within `within` (panics if it did not end in time,
/// panicked, or failed).
pub async fn acquired_within<T>(
    waiter: tokio::task::JoinHandle<ferrisson::Result<T>>,
    within: Duration,
) -> T {
    tokio::time::timeout(within, waiter)
        .await
        .unwrap_or_else(|_| panic!("the waiter did not acquire within {within:?}"))
        .expect("waiter task")
        .expect("the waiter acquires")
}

/// [`wait_parked`] for one waiter: the one parked on the channel of `name` ending in `channel`
/// (a fair lock's waiter has a channel of its own).
pub async fn wait_parked_on(client: &ferrisson::Client, name: &str, channel: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let parked = |state: &ferrisson::inspect::LocalState| {
        (state.subscriptions.iter()).any(|sub| sub.channel.ends_with(channel) && sub.parked > 0)
    };
    while !parked(&client.local_state(name)) {
        assert!(
            Instant::now() < deadline,
            "no waiter of {name} parked on `{channel}` within 5 s: {}",
            client.local_state(name)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Takes lock `name` on `client` for a fresh [`ferrisson::Owner`] with the watchdog lease.
/// Panics if the lock cannot be taken.
pub async fn hold(client: &ferrisson::Client, name: &str) -> ferrisson::LockGuard {
    client
        .lock(name)
        .with_owner(ferrisson::Owner::new())
        .lock()
        .await
        .expect("holder acquires")
}

/// Takes lock `name` on `client` for a fresh [`ferrisson::Owner`] with a fixed `lease`: the
/// "holder" that other owners then wait on. Panics if the lock cannot be taken.
pub async fn hold_with_lease(
    client: &ferrisson::Client,
    name: &str,
    lease: Duration,
) -> ferrisson::LockGuard {
    client
        .lock(name)
        .with_owner(ferrisson::Owner::new())
        .lock_with_lease(lease)
        .await
        .expect("holder acquires")
}

/// Spawns a waiter of a fresh owner on `client` for lock `name`, waiting at most `wait` (with the
/// watchdog lease); the task releases the lock it got and returns how its acquire was woken.
/// Panics (in the task) if it did not acquire.
pub fn spawn_waiter(
    client: &ferrisson::Client,
    name: &str,
    wait: Duration,
) -> tokio::task::JoinHandle<ferrisson::WokenBy> {
    let lock = client.lock(name).with_owner(ferrisson::Owner::new());
    tokio::spawn(async move {
        let guard = lock
            .try_lock_within(wait)
            .await
            .expect("the waiter's acquire")
            .acquired()
            .expect("the waiter acquires");
        let woken_by = guard.acquisition().woken_by;
        guard.unlock().await.expect("the waiter releases");
        woken_by
    })
}

/// Hands lock `name` from a holder on `holder_client` (fixed `holder_lease`) to a waiter on
/// `waiter_client` (fixed `waiter_lease`): the waiter starts waiting, the holder releases once
/// the waiter is parked ([`wait_parked`]: its retry after subscribing was refused, so the release
/// is what wakes it), and the waiter's guard is returned. The holder's lease must outlast those
/// steps; a waiter that does not hear the release is woken when it ends. Panics if the waiter
/// has not acquired within 5 s of the release.
pub async fn hand_over(
    holder_client: &ferrisson::Client,
    waiter_client: &ferrisson::Client,
    name: &str,
    holder_lease: Duration,
    waiter_lease: Duration,
) -> ferrisson::LockGuard {
    let holder = hold_with_lease(holder_client, name, holder_lease).await;
    let lock = waiter_client.lock(name).with_owner(ferrisson::Owner::new());
    let waiter = tokio::spawn(async move {
        lock.try_lock_within_with_lease(Duration::from_secs(10), waiter_lease)
            .await
    });
    wait_parked(waiter_client, name, 1).await;
    holder.unlock().await.expect("the holder releases");
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap_or_else(|_| panic!("the waiter on `{name}` was not woken within 5 s"))
        .expect("waiter task")
        .expect("the waiter's acquire")
        .acquired()
        .expect("the waiter acquires")
}

/// Sends a raw `PING` to 127.0.0.1:`port` and returns whether it answered
/// `+PONG` within `timeout`.
pub fn answers_ping(port: u16, timeout: Duration) -> bool {
    let addr = loopback(port);
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while got.len() < 7 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got.starts_with(b"+PONG")
}

/// What the test server binary (`REDIS_SERVER`, else `redis-server` on `PATH`) is and can do,
/// read once per test process: `./dev test --servers` runs the suite on Redis 6.2, 7.0 and
/// Valkey 8, and a test that needs what one of them lacks asks here and is skipped ([`skip`]).
pub struct ServerBinary {
    /// "Redis" or "Valkey".
    pub product: String,
    /// major, minor, patch.
    pub version: (u32, u32, u32),
    /// Built with TLS (Debian's is; the registries' 6.2 and Valkey builds are not).
    pub tls: bool,
}

impl ServerBinary {
    /// Redis 7.0 or later, or any Valkey: sharded pub/sub (and so the ACL rights of its
    /// commands), `--enable-debug-command`.
    pub fn has_7_0_features(&self) -> bool {
        self.product == "Valkey" || self.version >= (7, 0, 0)
    }

    /// As `redis-server --version` names it, e.g. "Redis 6.2.14".
    pub fn describe(&self) -> String {
        let (major, minor, patch) = self.version;
        format!("{} {major}.{minor}.{patch}", self.product)
    }
}

/// The test server binary's version and abilities (see [`ServerBinary`]).
pub fn server_binary() -> &'static ServerBinary {
    static BINARY: std::sync::OnceLock<ServerBinary> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| {
        let binary = redis_server_binary();
        let run = |args: &[&str]| {
            Command::new(&binary)
                .args(args)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {binary:?} {args:?}: {e}"))
        };
        // "Redis server v=7.0.15 sha=..." or "Valkey server v=8.1.8 sha=...".
        let text = String::from_utf8_lossy(&run(&["--version"]).stdout).into_owned();
        let product = text.split_whitespace().next().unwrap_or("Redis").to_owned();
        let numbers: Vec<u32> = text
            .split_whitespace()
            .find_map(|word| word.strip_prefix("v="))
            .unwrap_or_else(|| panic!("no version in {binary:?} --version: {text:?}"))
            .split('.')
            .map(|n| n.parse().unwrap_or(0))
            .collect();
        let version = (
            numbers.first().copied().unwrap_or(0),
            numbers.get(1).copied().unwrap_or(0),
            numbers.get(2).copied().unwrap_or(0),
        );
        // A TLS port with no certificate: a TLS build refuses the configuration, a build without
        // TLS refuses the directive (Redis) or the connection type (Valkey); each exits at once.
        let probe = run(&[
            "--port",
            "0",
            "--tls-port",
            "1",
            "--save",
            "",
            "--logfile",
            "",
        ]);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&probe.stdout),
            String::from_utf8_lossy(&probe.stderr)
        );
        let tls = !(said.contains("Bad directive") || said.contains("Failed finding TLS support"));
        ServerBinary {
            product,
            version,
            tls,
        }
    })
}

/// `args` less what this server does not know: `--enable-debug-command` came with Redis 7.0,
/// where `DEBUG` became opt-in (before, it is always on).
fn args_for_this_server(args: &[&str]) -> Vec<String> {
    let mut kept = Vec::new();
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if *word == "--enable-debug-command" && !server_binary().has_7_0_features() {
            words.next();
            continue;
        }
        kept.push(word.to_string());
    }
    kept
}

/// Skips the calling test unless `supported`: says why on stderr and in
/// `target/tmp/skipped.txt`, which `./dev test --servers` prints after each server's run.
/// Returns whether the test is skipped, for `if support::skip(..) { return; }`.
pub fn skip(supported: bool, why: &str) -> bool {
    if supported {
        return false;
    }
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let line = format!("{test}: skipped on {}: {why}\n", server_binary().describe());
    eprint!("{line}");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped.txt");
    if let Ok(mut file) = OpenOptions::new().create(true).append(true).open(path) {
        let _ = file.write_all(line.as_bytes());
    }
    true
}

/// Picks a currently free loopback port by binding 127.0.0.1:0.
pub fn free_port() -> u16 {
    TcpListener::bind(loopback(0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot bind 127.0.0.1:0 to pick a free port")
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

fn redis_server_binary() -> OsString {
    match std::env::var_os("REDIS_SERVER") {
        Some(path) if !path.is_empty() => path,
        _ => OsString::from("redis-server"),
    }
}

/// PINGs the port with raw RESP; on `+PONG` asks `INFO server` and returns
/// the server's `process_id`.
fn probe(port: u16, timeout: Duration) -> Result<Option<u32>, String> {
    let mut stream = TcpStream::connect_timeout(&loopback(port), timeout)
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|_| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("set timeout: {e}"))?;
    stream
        .write_all(b"PING\r\n")
        .map_err(|e| format!("write PING: {e}"))?;
    let reply = read_line(&mut stream).map_err(|e| format!("read PING reply: {e}"))?;
    if !reply.starts_with("+PONG") {
        return Err(format!("unexpected PING reply {reply:?}"));
    }
    stream
        .write_all(b"INFO server\r\n")
        .map_err(|e| format!("write INFO: {e}"))?;
    let header = read_line(&mut stream).map_err(|e| format!("read INFO reply: {e}"))?;
    let len: usize = header
        .strip_prefix('$')
        .and_then(|n| n.trim_end().parse().ok())
        .ok_or_else(|| format!("unexpected INFO reply {header:?}"))?;
    let mut body = vec![0u8; len + 2];
    stream
        .read_exact(&mut body)
        .map_err(|e| format!("read INFO body: {e}"))?;
    let body = String::from_utf8_lossy(&body);
    Ok(body
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok()))
}

/// Reads one `\r\n`-terminated line byte by byte (so nothing after it is
/// consumed).
fn read_line(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let n = stream.read(&mut byte)?;
        if n == 0 {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        line.push(byte[0]);
        if line.ends_with(b"\r\n") {
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
        if line.len() > 1024 {
            return Err(std::io::Error::new(ErrorKind::InvalidData, "line too long"));
        }
    }
}

/// Waits (at most 5 s, else panics) until `client` records `n` waits of its own
/// ([`ferrisson::Client::recorded_waits`] with deadlock detection on, recorded in Redis or
/// not yet), then 2 ms more: a wait begun afterwards is the younger, whatever the scheduling.
pub async fn wait_waits_recorded(client: &ferrisson::Client, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let waits = client.recorded_waits().await.expect("recorded_waits");
        let own = waits
            .iter()
            .filter(|wait| wait.owner.starts_with(client.id()))
            .count();
        if own >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{n} waits not recorded: {waits:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(2)).await;
}
