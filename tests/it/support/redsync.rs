//! Go's redsync (`github.com/go-redsync/redsync/v4` v4.17.0 over go-redis v9) as a token-lock
//! peer: `tests/peers/go`, a small Go program driven by JSON lines ([`super::json_lines`]).
//!
//! [`RedsyncPeer::start`] builds it once per test process with `go build` into
//! `target/go-peer/redsync-peer` (the module proxy, or Go's module cache, provides the modules
//! that `tests/peers/go/go.sum` pins; `./dev test` builds it before the tests), then runs it over
//! one go-redis client per server URL. redsync writes `SET name <24-char base64> NX PX expiry`
//! on each server, releases and extends by compare-and-delete / compare-and-`PEXPIRE` scripts,
//! and counts a Redlock round as won with a majority of the servers.

use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::json;

use super::json_lines::{LinePeer, Reply};
pub use super::node::Unavailable;
pub use super::token_peers::PeerError;

/// The redsync release the peer runs (pinned by `tests/peers/go/go.mod`).
pub const REDSYNC_VERSION: &str = "v4.17.0";

const STARTUP: Duration = Duration::from_secs(20);
const REPLY: Duration = Duration::from_secs(15);

const HOW_TO_INSTALL: &str = "Go 1.25 or later is needed (https://go.dev/dl, or Debian's \
     golang-go when it is recent enough); `./dev test` checks it.";

/// `tests/peers/go`: the Go module.
pub fn project_dir() -> PathBuf {
    super::workspace_root()
        .join("tests")
        .join("peers")
        .join("go")
}

/// The peer's binary, built with `go build` on the first call of the process.
pub fn binary() -> Result<PathBuf, Unavailable> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build).clone().map_err(Unavailable)
}

fn build() -> Result<PathBuf, String> {
    let out_dir = super::workspace_root().join("target").join("go-peer");
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let binary = out_dir.join("redsync-peer");
    // Go's build cache makes a build with nothing changed a matter of milliseconds.
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(project_dir())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                format!(
                    "Go (`go`) was not found on PATH; it builds the redsync peer. {HOW_TO_INSTALL}"
                )
            } else {
                format!("cannot run `go build`: {e}")
            }
        })?;
    if !out.status.success() {
        return Err(format!(
            "`go build` of the redsync peer (tests/peers/go, redsync {REDSYNC_VERSION}) failed \
             ({}); it needs the Go module proxy or a module cache that has its modules:\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(binary)
}

/// How a redsync `Mutex` is made: `WithExpiry`, `WithTries`, `WithRetryDelay`.
#[derive(Clone, Copy, Debug)]
pub struct MutexOptions {
    pub expiry: Duration,
    pub tries: u32,
    pub retry_delay: Duration,
}

impl MutexOptions {
    /// `expiry`, with one try (for `try_lock`, or a `lock` that must not wait).
    pub fn once(expiry: Duration) -> MutexOptions {
        MutexOptions {
            expiry,
            tries: 1,
            retry_delay: Duration::from_millis(50),
        }
    }

    /// `expiry`, trying every 50 ms for about `wait`.
    pub fn waiting(expiry: Duration, wait: Duration) -> MutexOptions {
        let retry_delay = Duration::from_millis(50);
        let tries = (wait.as_millis() / retry_delay.as_millis()).max(1) as u32;
        MutexOptions {
            expiry,
            tries,
            retry_delay,
        }
    }
}

/// A lock redsync took: its handle in the peer, its value (the token) and its end.
#[derive(Clone, Debug)]
pub struct RedsyncLock {
    pub handle: String,
    pub value: String,
    pub until_ms: u64,
}

/// A running redsync peer; killed when dropped.
pub struct RedsyncPeer {
    peer: LinePeer,
    next: AtomicU64,
}

impl RedsyncPeer {
    /// Starts a peer over the servers at `urls` (one pool each; a Redlock when several).
    pub async fn start<S: AsRef<str>>(urls: &[S]) -> Result<RedsyncPeer, Unavailable> {
        let binary = tokio::task::spawn_blocking(binary)
            .await
            .expect("go build task")?;
        let mut command = tokio::process::Command::new(binary);
        command.args(urls.iter().map(AsRef::as_ref));
        let peer = LinePeer::spawn("redsync peer", command, STARTUP).await?;
        Ok(RedsyncPeer {
            peer,
            next: AtomicU64::new(1),
        })
    }

    fn handle(&self) -> String {
        format!("m{}", self.next.fetch_add(1, Ordering::Relaxed))
    }

    async fn take(
        &self,
        op: &str,
        name: &str,
        options: MutexOptions,
        value: Option<&str>,
    ) -> Result<RedsyncLock, PeerError> {
        let handle = self.handle();
        let mut args = json!({
            "handle": handle,
            "name": name,
            "expiry_ms": options.expiry.as_millis() as u64,
            "tries": options.tries,
            "retry_delay_ms": options.retry_delay.as_millis() as u64,
        });
        if let Some(value) = value {
            args["value"] = value.into();
        }
        let bound = REPLY + options.retry_delay * options.tries;
        let reply = result(self.peer.call(op, args, bound).await)?;
        Ok(RedsyncLock {
            handle,
            value: reply.str("value").expect("a value").to_owned(),
            until_ms: reply.u64("until_ms"),
        })
    }

    /// `Mutex.Lock()`: tries `options.tries` times.
    pub async fn lock(&self, name: &str, options: MutexOptions) -> Result<RedsyncLock, PeerError> {
        self.take("lock", name, options, None).await
    }

    /// `Mutex.TryLock()`: one round.
    pub async fn try_lock(&self, name: &str, expiry: Duration) -> Result<RedsyncLock, PeerError> {
        self.take("try_lock", name, MutexOptions::once(expiry), None)
            .await
    }

    /// A `Mutex` for the token `value` (`WithValue`), which this peer did not take: its
    /// [`unlock`](Self::unlock) and [`extend`](Self::extend) act on whatever lock has it.
    pub async fn mutex_for(&self, name: &str, value: &str, expiry: Duration) -> RedsyncLock {
        let handle = self.handle();
        let args = json!({
            "handle": handle,
            "name": name,
            "value": value,
            "expiry_ms": expiry.as_millis() as u64,
        });
        result(self.peer.call("mutex", args, REPLY).await).expect("a mutex");
        RedsyncLock {
            handle,
            value: value.to_owned(),
            until_ms: 0,
        }
    }

    /// `Mutex.Unlock()`: whether a majority released it.
    pub async fn unlock(&self, lock: &RedsyncLock) -> Result<bool, PeerError> {
        let reply = self
            .peer
            .call("unlock", json!({ "handle": lock.handle }), REPLY)
            .await;
        Ok(result(reply)?.bool("result"))
    }

    /// `Mutex.Extend()`: whether a majority extended it by its expiry.
    pub async fn extend(&self, lock: &RedsyncLock) -> Result<bool, PeerError> {
        let reply = self
            .peer
            .call("extend", json!({ "handle": lock.handle }), REPLY)
            .await;
        Ok(result(reply)?.bool("result"))
    }

    /// Ends the process.
    pub async fn quit(self) {
        self.peer.quit().await
    }
}

fn result(reply: Reply) -> Result<Reply, PeerError> {
    if reply.ok() {
        return Ok(reply);
    }
    Err(PeerError {
        class: reply.str("error_class").unwrap_or("?").to_owned(),
        message: reply.str("error").unwrap_or_default().to_owned(),
    })
}
