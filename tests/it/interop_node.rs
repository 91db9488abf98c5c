//! Interoperation with a foreign Redisson implementation: the npm package `node-redisson`
//! (1.0.4, on `ioredis`), run as a separate Node.js process (`tests/interop/peer.js`) against the
//! same `redis-server` as the ferrisson client. Both directions are covered: Rust holds while Node
//! waits, and Node holds while Rust waits.
//!
//! The peer is installed once per test run with `npm ci` in `tests/interop` (`support::node`; skipped when
//! `node_modules` already matches `package-lock.json`). Node.js and npm must be on `PATH`; the
//! tests fail with a clear message when they are not.
//!
//! Known node-redisson deviations from Java Redisson are listed in `docs/compatibility.md`
//! ("Interop tests with node-redisson"). Cross-client wake-up tests therefore use brace-free
//! names, or names that *start* with a hash tag, where both rules agree; ferrisson's own brace
//! handling is checked against the protocol reference directly.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use ferrisson::{Client, Config, Error, LockGuard, Owner, PublishMode, RemainingTtl, WokenBy};
use fred::clients::Client as RawClient;
use fred::{cmd, prelude::*};
use node_peer::NodePeer;
use support::cluster::RedisCluster;
use support::node::Unavailable;
use support::redis_state::numsub;
use support::{connect, connect_with, raw_client, RedisServer};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

/// The lease used where a wake-up must come from the unlock message, not from the lease ending.
const LEASE: Duration = Duration::from_secs(20);
/// The bound the issue sets on a message wake-up with a 20 s lease.
const WAKE_BOUND: Duration = Duration::from_secs(1);
/// How long a waiter must stay parked to count as "still waiting".
const STILL_WAITING: Duration = Duration::from_millis(300);
/// Upper bound for any single step that should be quick (generous: CI has 2 cores).
const STEP: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The node-redisson peer process
// ---------------------------------------------------------------------------------------------

mod node_peer {
    //! Runs `tests/interop/peer.js` and talks to it: one JSON command per stdin line, one JSON
    //! reply per stdout line, matched by request id (replies may come out of order).

    use std::collections::HashMap;
    use std::process::Stdio;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::process::{Child, ChildStdin};
    use tokio::sync::oneshot;
    use tokio::time::{timeout, Instant};

    use crate::support::node::{install, node_binary};

    /// How long the peer may take to start and connect.
    const STARTUP: Duration = Duration::from_secs(20);
    /// Default bound for a reply that should come promptly.
    const REPLY: Duration = Duration::from_secs(10);

    /// A value in the peer's flat JSON replies.
    #[derive(Clone, Debug, PartialEq)]
    pub enum Json {
        Null,
        Bool(bool),
        Num(f64),
        Str(String),
    }

    impl From<&str> for Json {
        fn from(s: &str) -> Json {
            Json::Str(s.to_owned())
        }
    }
    impl From<String> for Json {
        fn from(s: String) -> Json {
            Json::Str(s)
        }
    }
    impl From<u64> for Json {
        fn from(n: u64) -> Json {
            Json::Num(n as f64)
        }
    }

    /// One reply line of the peer.
    #[derive(Clone, Debug)]
    pub struct Reply {
        pub fields: HashMap<String, Json>,
        /// When the reply line was read by the test.
        pub received: Instant,
    }

    impl Reply {
        pub fn ok(&self) -> bool {
            self.fields.get("ok") == Some(&Json::Bool(true))
        }

        pub fn error(&self) -> Option<String> {
            match self.fields.get("error") {
                Some(Json::Str(s)) => Some(s.clone()),
                _ => None,
            }
        }

        pub fn bool(&self, field: &str) -> bool {
            match self.fields.get(field) {
                Some(Json::Bool(b)) => *b,
                other => {
                    panic!("peer reply field {field:?} is not a boolean: {other:?} in {self:?}")
                }
            }
        }

        pub fn num(&self, field: &str) -> f64 {
            match self.fields.get(field) {
                Some(Json::Num(n)) => *n,
                other => {
                    panic!("peer reply field {field:?} is not a number: {other:?} in {self:?}")
                }
            }
        }

        /// Panics with the peer's error unless the reply is a success.
        pub fn expect_ok(self, what: &str) -> Reply {
            assert!(self.ok(), "node peer: {what} failed: {:?}", self.error());
            self
        }
    }

    /// A request sent to the peer whose reply has not been awaited yet.
    pub struct Pending {
        what: String,
        rx: oneshot::Receiver<Reply>,
        stderr: Arc<Mutex<String>>,
    }

    impl Pending {
        /// The reply, waiting at most `within`.
        pub async fn wait(self, within: Duration) -> Reply {
            let Pending { what, rx, stderr } = self;
            match timeout(within, rx).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(_)) => panic!(
                    "node peer exited before answering {what}; its stderr:\n{}",
                    stderr.lock().expect("stderr buffer").as_str()
                ),
                Err(_) => panic!("node peer did not answer {what} within {within:?}"),
            }
        }

        /// The reply if it has arrived, without waiting.
        pub fn poll(&mut self) -> Option<Reply> {
            self.rx.try_recv().ok()
        }
    }

    type PendingMap = Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>;

    /// A running `node peer.js` process with one node-redisson client.
    pub struct NodePeer {
        child: Child,
        stdin: tokio::sync::Mutex<ChildStdin>,
        pending: PendingMap,
        next_id: AtomicU64,
        client_id: String,
        connection_name: String,
        stderr: Arc<Mutex<String>>,
    }

    impl NodePeer {
        /// Starts a peer connected to `url` with node-redisson's default `lockWatchdogTimeout`.
        /// An `Err` says why it could not (no Node.js, `npm ci` failed, the peer did not start),
        /// which the tests return as their own failure: a message, not a panic.
        pub async fn start(url: &str) -> Result<NodePeer, String> {
            NodePeer::start_with_watchdog(url, None).await
        }

        /// Starts a peer whose node-redisson client uses `lockWatchdogTimeout = watchdog`.
        pub async fn start_with_watchdog(
            url: &str,
            watchdog: Option<Duration>,
        ) -> Result<NodePeer, String> {
            let dir = install()?;
            let mut cmd = tokio::process::Command::new(node_binary());
            cmd.arg(dir.join("peer.js")).arg(url);
            if let Some(wd) = watchdog {
                cmd.arg(wd.as_millis().to_string());
            }
            cmd.current_dir(&dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("cannot spawn `node peer.js`: {e}"))?;
            let stdin = child.stdin.take().expect("peer stdin");
            let stdout = child.stdout.take().expect("peer stdout");
            let stderr_pipe = child.stderr.take().expect("peer stderr");

            let stderr = Arc::new(Mutex::new(String::new()));
            {
                let stderr = Arc::clone(&stderr);
                tokio::spawn(async move {
                    let mut lines = BufReader::new(stderr_pipe).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let mut buf = stderr.lock().expect("stderr buffer");
                        buf.push_str(&line);
                        buf.push('\n');
                    }
                });
            }

            let pending: PendingMap = Arc::new(Mutex::new(HashMap::new()));
            let (ready_tx, ready_rx) = oneshot::channel::<Reply>();
            {
                let pending = Arc::clone(&pending);
                let stderr = Arc::clone(&stderr);
                tokio::spawn(async move {
                    let mut ready_tx = Some(ready_tx);
                    let mut lines = BufReader::new(stdout).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let received = Instant::now();
                        let fields = match parse_flat_json(&line) {
                            Ok(fields) => fields,
                            Err(e) => {
                                let mut buf = stderr.lock().expect("stderr buffer");
                                buf.push_str(&format!(
                                    "[test] unparsable peer line {line:?}: {e}\n"
                                ));
                                continue;
                            }
                        };
                        let reply = Reply { fields, received };
                        if reply.fields.contains_key("event") {
                            if let Some(tx) = ready_tx.take() {
                                let _ = tx.send(reply);
                            }
                            continue;
                        }
                        let id = match reply.fields.get("id") {
                            Some(Json::Num(n)) => *n as u64,
                            _ => {
                                let mut buf = stderr.lock().expect("stderr buffer");
                                buf.push_str(&format!("[test] peer reply without id: {line}\n"));
                                continue;
                            }
                        };
                        let tx = pending.lock().expect("pending map").remove(&id);
                        if let Some(tx) = tx {
                            let _ = tx.send(reply);
                        }
                    }
                    // EOF: dropping the senders tells every waiter that the peer is gone.
                    pending.lock().expect("pending map").clear();
                });
            }

            let ready = match timeout(STARTUP, ready_rx).await {
                Ok(Ok(ready)) => ready,
                Ok(Err(_)) => {
                    let status = child.wait().await;
                    return Err(format!(
                        "node peer exited during startup ({status:?}); its stderr:\n{}",
                        stderr.lock().expect("stderr buffer").as_str()
                    ));
                }
                Err(_) => {
                    return Err(format!(
                        "node peer did not report ready within {STARTUP:?}; its stderr:\n{}",
                        stderr.lock().expect("stderr buffer").as_str()
                    ))
                }
            };
            match ready.fields.get("event") {
                Some(Json::Str(e)) if e == "ready" => {}
                _ => return Err(format!("node peer failed to start: {ready:?}")),
            }
            let client_id = match ready.fields.get("client_id") {
                Some(Json::Str(id)) => id.clone(),
                other => panic!("node peer ready line without client_id: {other:?}"),
            };
            let connection_name = match ready.fields.get("connection_name") {
                Some(Json::Str(n)) => n.clone(),
                other => panic!("node peer ready line without connection_name: {other:?}"),
            };
            Ok(NodePeer {
                child,
                stdin: tokio::sync::Mutex::new(stdin),
                pending,
                next_id: AtomicU64::new(1),
                client_id,
                connection_name,
                stderr,
            })
        }

        /// The node-redisson client id (Redisson's `ID`, a UUID).
        pub fn client_id(&self) -> &str {
            &self.client_id
        }

        /// The `CLIENT SETNAME` name of both of the peer's Redis connections.
        pub fn connection_name(&self) -> &str {
            &self.connection_name
        }

        /// The holder field node-redisson writes for `owner`: `<client id>:<owner>`.
        pub fn field(&self, owner: &str) -> String {
            format!("{}:{owner}", self.client_id)
        }

        /// Sends `op` with `args`; the reply is awaited through the returned [`Pending`].
        pub async fn send(&self, op: &str, args: &[(&str, Json)]) -> Pending {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let mut fields: Vec<(&str, Json)> = vec![("id", id.into()), ("op", op.into())];
            fields.extend(args.iter().cloned());
            let line = to_json(&fields);
            let (tx, rx) = oneshot::channel();
            self.pending.lock().expect("pending map").insert(id, tx);
            let mut stdin = self.stdin.lock().await;
            let written = async {
                stdin.write_all(line.as_bytes()).await?;
                stdin.write_all(b"\n").await?;
                stdin.flush().await
            }
            .await;
            if let Err(e) = written {
                panic!(
                    "cannot write to the node peer ({e}); its stderr:\n{}",
                    self.stderr.lock().expect("stderr buffer").as_str()
                );
            }
            Pending {
                what: line,
                rx,
                stderr: Arc::clone(&self.stderr),
            }
        }

        /// Sends `op` and waits for its reply (at most 10 s).
        pub async fn call(&self, op: &str, args: &[(&str, Json)]) -> Reply {
            self.send(op, args).await.wait(REPLY).await
        }

        /// node-redisson `lock(lease)` (watchdog when `lease` is `None`); completes when acquired.
        pub async fn lock(&self, name: &str, owner: &str, lease: Option<Duration>) -> Pending {
            let mut args = vec![("name", name.into()), ("owner", owner.into())];
            if let Some(lease) = lease {
                args.push(("lease_ms", (lease.as_millis() as u64).into()));
            }
            self.send("lock", &args).await
        }

        /// node-redisson `tryLock(wait, lease)`: whether it acquired.
        pub async fn try_lock(
            &self,
            name: &str,
            owner: &str,
            wait: Duration,
            lease: Option<Duration>,
        ) -> bool {
            let mut args = vec![
                ("name", name.into()),
                ("owner", owner.into()),
                ("wait_ms", (wait.as_millis() as u64).into()),
            ];
            if let Some(lease) = lease {
                args.push(("lease_ms", (lease.as_millis() as u64).into()));
            }
            self.send("try_lock", &args)
                .await
                .wait(wait + REPLY)
                .await
                .expect_ok("try_lock")
                .bool("acquired")
        }

        /// node-redisson `unlock()`: `Err(message)` when node-redisson rejects it.
        pub async fn unlock(&self, name: &str, owner: &str) -> Result<(), String> {
            let reply = self
                .call("unlock", &[("name", name.into()), ("owner", owner.into())])
                .await;
            if reply.ok() {
                Ok(())
            } else {
                Err(reply.error().unwrap_or_default())
            }
        }

        /// node-redisson `forceUnlock()`: whether a lock was deleted.
        pub async fn force_unlock(&self, name: &str) -> bool {
            self.call("force_unlock", &[("name", name.into())])
                .await
                .expect_ok("force_unlock")
                .bool("result")
        }

        /// node-redisson `isLocked()`.
        pub async fn is_locked(&self, name: &str) -> bool {
            self.call("is_locked", &[("name", name.into())])
                .await
                .expect_ok("is_locked")
                .bool("locked")
        }

        /// Whether the process is still running.
        pub fn is_running(&mut self) -> bool {
            matches!(self.child.try_wait(), Ok(None))
        }
    }

    // -- minimal JSON for flat objects -----------------------------------------------------

    fn escape(s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
    }

    pub fn to_json(fields: &[(&str, Json)]) -> String {
        let mut out = String::from("{");
        for (i, (key, value)) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            escape(key, &mut out);
            out.push(':');
            match value {
                Json::Null => out.push_str("null"),
                Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                Json::Num(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => {
                    out.push_str(&format!("{}", *n as i64))
                }
                Json::Num(n) => out.push_str(&format!("{n}")),
                Json::Str(s) => escape(s, &mut out),
            }
        }
        out.push('}');
        out
    }

    /// Parses one JSON object whose values are all strings, numbers, booleans or null.
    pub fn parse_flat_json(line: &str) -> Result<HashMap<String, Json>, String> {
        let mut p = Parser {
            s: line.as_bytes(),
            i: 0,
        };
        let mut map = HashMap::new();
        p.ws();
        p.expect(b'{')?;
        p.ws();
        let mut closed = p.peek() == Some(b'}');
        if closed {
            p.i += 1;
        }
        while !closed {
            p.ws();
            let key = p.string()?;
            p.ws();
            p.expect(b':')?;
            p.ws();
            let value = p.value()?;
            map.insert(key, value);
            p.ws();
            match p.next() {
                Some(b',') => {}
                Some(b'}') => closed = true,
                other => return Err(format!("expected , or }} at {}, got {other:?}", p.i)),
            }
        }
        p.ws();
        if p.i != p.s.len() {
            return Err(format!("trailing characters at {}", p.i));
        }
        Ok(map)
    }

    struct Parser<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn peek(&self) -> Option<u8> {
            self.s.get(self.i).copied()
        }
        fn next(&mut self) -> Option<u8> {
            let c = self.peek();
            self.i += 1;
            c
        }
        fn ws(&mut self) {
            while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
                self.i += 1;
            }
        }
        fn expect(&mut self, c: u8) -> Result<(), String> {
            match self.next() {
                Some(got) if got == c => Ok(()),
                got => Err(format!(
                    "expected {:?} at {}, got {got:?}",
                    c as char, self.i
                )),
            }
        }
        fn hex4(&mut self) -> Result<u32, String> {
            let digits = self
                .s
                .get(self.i..self.i + 4)
                .and_then(|h| std::str::from_utf8(h).ok())
                .ok_or("truncated \\u escape")?;
            self.i += 4;
            u32::from_str_radix(digits, 16).map_err(|e| format!("bad \\u escape: {e}"))
        }
        fn string(&mut self) -> Result<String, String> {
            self.expect(b'"')?;
            let mut bytes = Vec::new();
            loop {
                match self.next().ok_or("unterminated string")? {
                    b'"' => break,
                    b'\\' => match self.next().ok_or("unterminated escape")? {
                        b'"' => bytes.push(b'"'),
                        b'\\' => bytes.push(b'\\'),
                        b'/' => bytes.push(b'/'),
                        b'b' => bytes.push(0x08),
                        b'f' => bytes.push(0x0c),
                        b'n' => bytes.push(b'\n'),
                        b'r' => bytes.push(b'\r'),
                        b't' => bytes.push(b'\t'),
                        b'u' => {
                            let mut code = self.hex4()?;
                            if (0xd800..0xdc00).contains(&code)
                                && self.s.get(self.i..self.i + 2) == Some(b"\\u")
                            {
                                self.i += 2;
                                let low = self.hex4()?;
                                code =
                                    0x10000 + ((code - 0xd800) << 10) + (low.wrapping_sub(0xdc00));
                            }
                            let c = char::from_u32(code).unwrap_or('\u{fffd}');
                            let mut buf = [0u8; 4];
                            bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        other => return Err(format!("bad escape \\{}", other as char)),
                    },
                    b => bytes.push(b),
                }
            }
            String::from_utf8(bytes).map_err(|e| format!("invalid UTF-8 in string: {e}"))
        }
        fn value(&mut self) -> Result<Json, String> {
            match self.peek().ok_or("missing value")? {
                b'"' => Ok(Json::Str(self.string()?)),
                b't' if self.s[self.i..].starts_with(b"true") => {
                    self.i += 4;
                    Ok(Json::Bool(true))
                }
                b'f' if self.s[self.i..].starts_with(b"false") => {
                    self.i += 5;
                    Ok(Json::Bool(false))
                }
                b'n' if self.s[self.i..].starts_with(b"null") => {
                    self.i += 4;
                    Ok(Json::Null)
                }
                b'-' | b'0'..=b'9' => {
                    let start = self.i;
                    while matches!(
                        self.peek(),
                        Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                    ) {
                        self.i += 1;
                    }
                    let text = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII");
                    text.parse()
                        .map(Json::Num)
                        .map_err(|e| format!("bad number {text:?}: {e}"))
                }
                other => Err(format!(
                    "unsupported value starting with {:?} at {} (only flat objects)",
                    other as char, self.i
                )),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Redisson's lock channel for a name without `{` (protocol §1.1).
fn channel_of(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

async fn hgetall(raw: &RawClient, key: &str) -> HashMap<String, String> {
    raw.hgetall(key).await.expect("HGETALL")
}

async fn pttl(raw: &RawClient, key: &str) -> i64 {
    raw.pttl(key).await.expect("PTTL")
}

/// Waits until at least `at_least` connections subscribe to `channel`: the waiter is parked on
/// the unlock message. Panics after 10 s.
async fn wait_subscribed(raw: &RawClient, channel: &str, at_least: i64) {
    let deadline = Instant::now() + STEP;
    loop {
        let n = numsub(raw, channel).await;
        if n >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no waiter subscribed to {channel} within {STEP:?} (NUMSUB {n}, expected >= {at_least})"
        );
        sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the node peer's subscriber connection is subscribed to a channel (`sub>=1` in
/// `CLIENT LIST`): a node-redisson waiter is parked on the unlock message. node-redisson
/// subscribes only after a failed attempt, so a release before this point could be missed
/// (docs/compatibility.md); ferrisson's own subscriptions do not count here. Panics after 10 s.
async fn wait_node_parked(raw: &RawClient, peer: &NodePeer) {
    wait_node_parked_on(std::slice::from_ref(raw), peer).await
}

/// [`wait_node_parked`] over several servers (a cluster's masters): the peer's subscriber
/// connection is on one of them.
async fn wait_node_parked_on(raws: &[RawClient], peer: &NodePeer) {
    wait_node_subscriptions_on(raws, peer, |subscribed| subscribed >= 1, "subscribe").await
}

/// Waits until the node peer's subscriber connection has no subscription left (a waiter's
/// unsubscribe is sent after it was woken), so that a [`wait_node_parked_on`] after it can only
/// see the next waiter. Panics after 10 s.
async fn wait_node_unsubscribed_on(raws: &[RawClient], peer: &NodePeer) {
    wait_node_subscriptions_on(raws, peer, |subscribed| subscribed == 0, "unsubscribe").await
}

/// Waits until `done` holds for the number of channels the node peer's subscriber connection
/// subscribes to (`sub=` in `CLIENT LIST`, over `raws`). Panics after `STEP`.
async fn wait_node_subscriptions_on(
    raws: &[RawClient],
    peer: &NodePeer,
    done: impl Fn(u64) -> bool,
    what: &str,
) {
    let deadline = Instant::now() + STEP;
    // ioredis names a cluster's subscriber connection `ioredis-cluster(subscriber):<name>`.
    let ours = |line: &str| {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix("name="))
            .is_some_and(|name| {
                name == peer.connection_name()
                    || name.ends_with(&format!(":{}", peer.connection_name()))
            })
    };
    loop {
        let mut lists = Vec::new();
        for raw in raws {
            let list: String = raw
                .custom(cmd!("CLIENT"), vec!["LIST"])
                .await
                .expect("CLIENT LIST");
            lists.push(list);
        }
        let subscribed: u64 = lists
            .iter()
            .flat_map(|list| list.lines())
            .filter(|line| ours(line))
            .filter_map(|line| {
                line.split(' ')
                    .find_map(|kv| kv.strip_prefix("sub="))
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .sum();
        if done(subscribed) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the node waiter did not {what} within {STEP:?}; CLIENT LIST:\n{}",
            lists.join("\n")
        );
        sleep(Duration::from_millis(10)).await;
    }
}

/// With a Rust `waiter` parked on `name`, which the node peer's owner "1" holds: node releases,
/// and its unlock message wakes the waiter within [`WAKE_BOUND`]. Returns the waiter's guard.
async fn node_release_wakes(
    peer: &NodePeer,
    waiter: JoinHandle<(LockGuard, Instant)>,
    name: &str,
) -> LockGuard {
    sleep(Duration::from_millis(50)).await;
    assert!(
        !waiter.is_finished(),
        "rust acquired while node held {name}"
    );
    let released = Instant::now();
    peer.unlock(name, "1").await.expect("node release");
    let (guard, acquired) = join_waiter(waiter, name).await;
    let woke_after = acquired.duration_since(released);
    eprintln!("{name}: rust woken {woke_after:?} after the node release");
    assert!(
        woke_after < WAKE_BOUND,
        "rust waiter took {woke_after:?} to acquire after the node release (lease {LEASE:?})"
    );
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message);
    guard
}

/// A Rust client connected to `server` with the default configuration.
async fn rust_client(server: &RedisServer) -> Client {
    connect(server).await
}

/// A Rust waiter: a spawned task that acquires `name` with a fixed lease and reports the guard
/// and the instant it got it.
fn spawn_rust_waiter(
    client: &Client,
    name: &str,
    owner: Owner,
    lease: Duration,
) -> JoinHandle<(LockGuard, Instant)> {
    let lock = client.lock(name).with_owner(owner);
    tokio::spawn(async move {
        let guard = lock
            .lock_with_lease(lease)
            .await
            .expect("rust waiter acquires");
        (guard, Instant::now())
    })
}

async fn join_waiter(waiter: JoinHandle<(LockGuard, Instant)>, what: &str) -> (LockGuard, Instant) {
    timeout(LEASE + STEP, waiter)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{what}: rust waiter did not acquire within {:?}",
                LEASE + STEP
            )
        })
        .expect("rust waiter task")
}

/// Receives pub/sub messages on `channels` through a dedicated raw connection.
struct ChannelSpy {
    _client: RawClient,
    rx: tokio::sync::broadcast::Receiver<fred::types::Message>,
}

impl ChannelSpy {
    async fn new(url: &str, channels: &[&str]) -> ChannelSpy {
        let client = raw_client(url).await;
        let rx = client.message_rx();
        for channel in channels {
            client.subscribe(*channel).await.expect("raw SUBSCRIBE");
        }
        ChannelSpy {
            _client: client,
            rx,
        }
    }

    /// The next (channel, payload) within `within`, if any.
    async fn next(&mut self, within: Duration) -> Option<(String, String)> {
        match timeout(within, self.rx.recv()).await {
            Ok(Ok(message)) => {
                let payload: String = message.value.convert().expect("string payload");
                Some((message.channel.to_string(), payload))
            }
            Ok(Err(e)) => panic!("spy receiver failed: {e}"),
            Err(_) => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Mutual exclusion
// ---------------------------------------------------------------------------------------------

/// Checks a critical-section log (`<side>:in`, `<side>:out`, ...) and returns how many times each
/// side entered and how many times consecutive entries came from different sides.
fn check_log(log: &[String]) -> (HashMap<String, usize>, usize) {
    assert_eq!(log.len() % 2, 0, "odd critical-section log: {log:?}");
    let mut entries: HashMap<String, usize> = HashMap::new();
    let mut handovers = 0;
    let mut previous: Option<&str> = None;
    for (i, pair) in log.chunks(2).enumerate() {
        let side = pair[0].strip_suffix(":in").unwrap_or_else(|| {
            panic!(
                "entry {i} is {:?}, expected <side>:in; log {log:?}",
                pair[0]
            )
        });
        assert_eq!(
            pair[1],
            format!("{side}:out"),
            "mutual exclusion violated at entry {i}: {side} entered and then {:?} happened \
             before it left; log {log:?}",
            pair[1]
        );
        *entries.entry(side.to_owned()).or_default() += 1;
        if previous.is_some_and(|p| p != side) {
            handovers += 1;
        }
        previous = Some(side);
    }
    (entries, handovers)
}

/// Free-running contention: two Rust owners and one node-redisson owner take the lock 25 times
/// each; every hold appends `<side>:in` and `<side>:out` to a Redis list, which must show no two
/// holds overlapping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_node_exclude_each_other_under_interleaved_contention() -> Result<(), Unavailable>
{
    const ITERATIONS: u64 = 25;
    const RUST_TASKS: u64 = 2;
    const GAP_MS: u64 = 3;
    // node-redisson can miss a wake-up and then sleeps for the returned TTL (docs/compatibility.md,
    // items 2 and 4); short leases bound that cost. Exclusion does not depend on them: each hold
    // lasts a few ms.
    const CONTEND_LEASE: Duration = Duration::from_secs(2);
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let client = rust_client(&server).await;
    let name = "interop:contended";
    let log_key = "interop:contended:log";

    let node_run = peer
        .send(
            "contend",
            &[
                ("name", name.into()),
                ("owner", "1".into()),
                ("iterations", ITERATIONS.into()),
                ("hold_ms", 2u64.into()),
                ("gap_ms", GAP_MS.into()),
                ("log_key", log_key.into()),
                ("tag", "node".into()),
                ("lease_ms", (CONTEND_LEASE.as_millis() as u64).into()),
            ],
        )
        .await;
    let started = Instant::now();
    let mut rust_runs = Vec::new();
    for task in 0..RUST_TASKS {
        let lock = client.lock(name).with_owner(Owner::new());
        let raw = raw_client(&server.url()).await;
        let tag = format!("rust{task}");
        rust_runs.push(tokio::spawn(async move {
            for _ in 0..ITERATIONS {
                let guard = lock
                    .lock_with_lease(CONTEND_LEASE)
                    .await
                    .expect("rust acquire");
                let _: i64 = raw
                    .rpush(log_key, format!("{tag}:in"))
                    .await
                    .expect("RPUSH");
                sleep(Duration::from_millis(2)).await;
                let _: i64 = raw
                    .rpush(log_key, format!("{tag}:out"))
                    .await
                    .expect("RPUSH");
                guard.unlock().await.expect("rust release");
                sleep(Duration::from_millis(GAP_MS)).await;
            }
        }));
    }
    for run in rust_runs {
        timeout(Duration::from_secs(60), run)
            .await
            .expect("rust contenders finish")
            .expect("rust contender task");
    }
    let node_done = node_run
        .wait(Duration::from_secs(60))
        .await
        .expect_ok("contend")
        .num("done");
    let elapsed = started.elapsed();
    assert_eq!(node_done as u64, ITERATIONS);

    let log: Vec<String> = raw.lrange(log_key, 0, -1).await.expect("LRANGE");
    let (entries, handovers) = check_log(&log);
    assert_eq!(entries.get("node").copied(), Some(ITERATIONS as usize));
    for task in 0..RUST_TASKS {
        assert_eq!(
            entries.get(&format!("rust{task}")).copied(),
            Some(ITERATIONS as usize)
        );
    }
    // Interleaving: the clients did not just run one after the other.
    let node_handoffs = log
        .chunks(2)
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| (w[0][0] == "node:in") != (w[1][0] == "node:in"))
        .count();
    eprintln!(
        "contention: {} holds in {elapsed:?}, {handovers} handovers, {node_handoffs} between \
         rust and node",
        log.len() / 2
    );
    assert!(
        node_handoffs >= 2,
        "rust and node did not interleave: only {node_handoffs} handovers between them; log {log:?}"
    );
    assert_eq!(pttl(&raw, name).await, -2, "lock left behind");
    Ok(())
}

/// Strict alternation, step by step: each side waits while the other holds, is woken by the
/// other's release, and only then gets the lock.
#[tokio::test]
async fn rust_and_node_hand_the_lock_back_and_forth_many_times() -> Result<(), Unavailable> {
    const ROUNDS: usize = 10;
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let client = rust_client(&server).await;
    let name = "interop:alternate";
    let node_holds = HashMap::from([(peer.field("1"), "1".to_string())]);

    let mut rust_guard = client
        .lock(name)
        .with_owner(Owner::new())
        .lock_with_lease(LEASE)
        .await
        .expect("rust acquire");
    for round in 0..ROUNDS {
        // Rust holds, node waits.
        let mut node = peer.lock(name, "1", Some(LEASE)).await;
        wait_node_parked(&raw, &peer).await;
        assert!(
            node.poll().is_none(),
            "round {round}: node got in while rust held"
        );
        assert_eq!(
            hgetall(&raw, name).await,
            HashMap::from([(rust_guard.holder_field().to_string(), "1".to_string())]),
            "round {round}: rust's hold"
        );
        let released = Instant::now();
        rust_guard.unlock().await.expect("rust release");
        let reply = node.wait(LEASE + STEP).await.expect_ok("node lock");
        let woke_after = reply.received.duration_since(released);
        assert!(
            woke_after < WAKE_BOUND,
            "round {round}: node took {woke_after:?} after the rust release"
        );
        assert_eq!(
            hgetall(&raw, name).await,
            node_holds,
            "round {round}: node's hold"
        );

        // Node holds, Rust waits.
        let waiter = spawn_rust_waiter(&client, name, Owner::new(), LEASE);
        wait_subscribed(&raw, &channel_of(name), 1).await;
        sleep(Duration::from_millis(20)).await;
        assert!(
            !waiter.is_finished(),
            "round {round}: rust got in while node held"
        );
        assert_eq!(
            hgetall(&raw, name).await,
            node_holds,
            "round {round}: node's hold"
        );
        let released = Instant::now();
        peer.unlock(name, "1").await.expect("node release");
        let (guard, acquired) = join_waiter(waiter, "alternation").await;
        let woke_after = acquired.duration_since(released);
        assert!(
            woke_after < WAKE_BOUND,
            "round {round}: rust took {woke_after:?} after the node release"
        );
        rust_guard = guard;
    }
    rust_guard.unlock().await.expect("rust release");
    assert_eq!(pttl(&raw, name).await, -2, "lock left behind");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Wake-up by the holder's unlock message
// ---------------------------------------------------------------------------------------------

/// Rust holds with a 20 s lease; node-redisson waits; the Rust release must wake it at once.
async fn node_waiter_woken_by_rust_release(
    server: &RedisServer,
    name: &str,
    channel: &str,
) -> Result<(), Unavailable> {
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let client = rust_client(server).await;
    let lock = client.lock(name).with_owner(Owner::new());
    let guard = lock.lock_with_lease(LEASE).await.expect("rust acquires");

    let mut node = peer.lock(name, "1", Some(LEASE)).await;
    wait_node_parked(&raw, &peer).await;
    assert_eq!(numsub(&raw, channel).await, 1, "node waits on {channel}");
    sleep(Duration::from_millis(50)).await;
    assert!(
        node.poll().is_none(),
        "node acquired while rust held {name}"
    );

    let released = Instant::now();
    guard.unlock().await.expect("rust release");
    let reply = node.wait(LEASE + STEP).await.expect_ok("node lock");
    let woke_after = reply.received.duration_since(released);
    eprintln!("{name}: node woken {woke_after:?} after the rust release");
    assert!(
        woke_after < WAKE_BOUND,
        "node waiter took {woke_after:?} to acquire after the rust release (lease {LEASE:?}): \
         the unlock message did not wake it"
    );
    let holders = hgetall(&raw, name).await;
    assert_eq!(
        holders,
        HashMap::from([(peer.field("1"), "1".to_string())]),
        "node's hold as seen in Redis"
    );
    let ttl = pttl(&raw, name).await;
    assert!(
        ttl > 15_000 && ttl <= 20_000,
        "node's lease, got PTTL {ttl}"
    );
    peer.unlock(name, "1").await.expect("node release");
    Ok(())
}

/// node-redisson holds with a 20 s lease; a Rust waiter must be woken by its release at once.
async fn rust_waiter_woken_by_node_release(
    server: &RedisServer,
    name: &str,
    channel: &str,
) -> Result<(), Unavailable> {
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let client = rust_client(server).await;
    peer.lock(name, "1", Some(LEASE))
        .await
        .wait(STEP)
        .await
        .expect_ok("node lock");

    let waiter = spawn_rust_waiter(&client, name, Owner::new(), LEASE);
    wait_subscribed(&raw, channel, 1).await;
    let guard = node_release_wakes(&peer, waiter, name).await;
    assert_eq!(
        hgetall(&raw, name).await,
        HashMap::from([(guard.holder_field().to_string(), "1".to_string())])
    );
    guard.unlock().await.expect("rust release");
    Ok(())
}

#[tokio::test]
async fn node_waiter_is_woken_by_rust_unlock_well_before_the_lease_ends() -> Result<(), Unavailable>
{
    let server = RedisServer::start();
    let name = "interop:wake:rust-holds";
    node_waiter_woken_by_rust_release(&server, name, &channel_of(name)).await?;
    Ok(())
}

#[tokio::test]
async fn rust_waiter_is_woken_by_node_unlock_well_before_the_lease_ends() -> Result<(), Unavailable>
{
    let server = RedisServer::start();
    let name = "interop:wake:node-holds";
    rust_waiter_woken_by_node_release(&server, name, &channel_of(name)).await?;
    Ok(())
}

/// Names that *start* with a hash tag get no extra braces under both Redisson's rule ("contains
/// `{`") and node-redisson's ("starts with `{`"), so the clients must wake each other.
#[tokio::test]
async fn cross_client_wake_ups_work_for_names_that_start_with_a_hash_tag() -> Result<(), Unavailable>
{
    let server = RedisServer::start();
    let name = "{interop}:wake:tagged";
    let channel = "redisson_lock__channel:{interop}:wake:tagged";
    node_waiter_woken_by_rust_release(&server, name, channel).await?;
    rust_waiter_woken_by_node_release(&server, name, channel).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reentrancy seen across clients
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn node_reentrant_holds_keep_rust_out_until_the_last_release() -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let client = rust_client(&server).await;
    let name = "interop:reentrant:node-holds";

    for _ in 0..2 {
        peer.lock(name, "1", Some(LEASE))
            .await
            .wait(STEP)
            .await
            .expect_ok("node lock");
    }
    assert_eq!(
        hgetall(&raw, name).await,
        HashMap::from([(peer.field("1"), "2".to_string())]),
        "node's reentrant hold count in Redis"
    );
    let probe = client.lock(name).with_owner(Owner::new());
    assert!(probe.try_lock().await.expect("try_lock").is_busy());
    assert!(probe.is_locked().await.expect("is_locked"));

    let waiter = spawn_rust_waiter(&client, name, Owner::new(), LEASE);
    wait_subscribed(&raw, &channel_of(name), 1).await;

    peer.unlock(name, "1").await.expect("node partial release");
    assert_eq!(
        hgetall(&raw, name).await,
        HashMap::from([(peer.field("1"), "1".to_string())])
    );
    assert!(
        pttl(&raw, name).await > 15_000,
        "partial release re-arms node's lease"
    );
    sleep(STILL_WAITING).await;
    assert!(
        !waiter.is_finished(),
        "rust acquired after node's first (partial) release"
    );
    assert!(probe.try_lock().await.expect("try_lock").is_busy());

    let released = Instant::now();
    peer.unlock(name, "1").await.expect("node final release");
    let (guard, acquired) = join_waiter(waiter, "after node's last release").await;
    let woke_after = acquired.duration_since(released);
    assert!(
        woke_after < WAKE_BOUND,
        "rust took {woke_after:?} to acquire after node's last release"
    );
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message);
    guard.unlock().await.expect("rust release");
    Ok(())
}

#[tokio::test]
async fn rust_reentrant_holds_keep_node_out_until_the_last_release() -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let client = rust_client(&server).await;
    let name = "interop:reentrant:rust-holds";
    let channel = channel_of(name);

    let lock = client.lock(name).with_owner(Owner::new());
    let outer = lock.lock_with_lease(LEASE).await.expect("rust acquire");
    let inner = outer.reenter().await.expect("rust re-enter");
    assert_eq!(
        hgetall(&raw, name).await,
        HashMap::from([(outer.holder_field().to_string(), "2".to_string())])
    );
    assert!(!peer.try_lock(name, "1", Duration::ZERO, Some(LEASE)).await);
    assert!(peer.is_locked(name).await);

    let mut node = peer.lock(name, "1", Some(LEASE)).await;
    wait_node_parked(&raw, &peer).await;
    assert_eq!(numsub(&raw, &channel).await, 1, "node waits on {channel}");

    inner.unlock().await.expect("rust partial release");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    sleep(STILL_WAITING).await;
    assert!(
        node.poll().is_none(),
        "node acquired after rust's first (partial) release"
    );
    assert!(!peer.try_lock(name, "2", Duration::ZERO, Some(LEASE)).await);
    assert!(peer.is_locked(name).await);

    let released = Instant::now();
    outer.unlock().await.expect("rust final release");
    let reply = node.wait(LEASE + STEP).await.expect_ok("node lock");
    let woke_after = reply.received.duration_since(released);
    assert!(
        woke_after < WAKE_BOUND,
        "node took {woke_after:?} to acquire after rust's last release"
    );
    assert_eq!(
        hgetall(&raw, name).await,
        HashMap::from([(peer.field("1"), "1".to_string())])
    );
    peer.unlock(name, "1").await.expect("node release");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Force unlock
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn rust_force_unlock_wakes_a_waiting_node_client() -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let client = rust_client(&server).await;
    let name = "interop:force:rust";

    let holder = client.lock(name).with_owner(Owner::new());
    let guard = holder.lock_with_lease(LEASE).await.expect("rust acquire");
    let mut node = peer.lock(name, "1", Some(LEASE)).await;
    wait_node_parked(&raw, &peer).await;
    sleep(Duration::from_millis(50)).await;
    assert!(node.poll().is_none(), "node acquired while rust held");

    // Force unlock from another Rust client: it ignores ownership.
    let other = rust_client(&server).await;
    let released = Instant::now();
    assert!(other.lock(name).force_unlock().await.expect("force unlock"));
    let reply = node.wait(LEASE + STEP).await.expect_ok("node lock");
    let woke_after = reply.received.duration_since(released);
    assert!(
        woke_after < WAKE_BOUND,
        "node took {woke_after:?} to acquire after the rust force unlock"
    );
    assert_eq!(
        hgetall(&raw, name).await,
        HashMap::from([(peer.field("1"), "1".to_string())])
    );
    // The evicted Rust holder's release must not touch node's hold.
    assert!(
        matches!(
            guard.unlock().await,
            Err(ferrisson::Error::LeaseLost { .. })
        ),
        "stale rust release"
    );
    assert_eq!(
        hgetall(&raw, name).await,
        HashMap::from([(peer.field("1"), "1".to_string())])
    );
    peer.unlock(name, "1").await.expect("node release");
    Ok(())
}

#[tokio::test]
async fn node_force_unlock_wakes_a_waiting_rust_client() -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let client = rust_client(&server).await;
    let name = "interop:force:node";

    peer.lock(name, "1", Some(LEASE))
        .await
        .wait(STEP)
        .await
        .expect_ok("node lock");
    let waiter = spawn_rust_waiter(&client, name, Owner::new(), LEASE);
    wait_subscribed(&raw, &channel_of(name), 1).await;
    sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "rust acquired while node held");

    let released = Instant::now();
    assert!(
        peer.force_unlock(name).await,
        "node force unlock deleted nothing"
    );
    let (guard, acquired) = join_waiter(waiter, "after node force unlock").await;
    let woke_after = acquired.duration_since(released);
    assert!(
        woke_after < WAKE_BOUND,
        "rust took {woke_after:?} to acquire after the node force unlock"
    );
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message);
    // node's evicted holder can no longer release, and Rust's hold is intact.
    assert!(peer.unlock(name, "1").await.is_err());
    assert_eq!(
        hgetall(&raw, name).await,
        HashMap::from([(guard.holder_field().to_string(), "1".to_string())])
    );
    guard.unlock().await.expect("rust release");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Watchdog
// ---------------------------------------------------------------------------------------------

/// Renewals every second: one up to 2 s late, in a process on a loaded machine, still keeps
/// the lock.
const SHORT_WATCHDOG: Duration = Duration::from_millis(3_000);
/// Past two initial leases: the lock outlives its first lease only if the watchdog renews it.
const OBSERVE: Duration = Duration::from_millis(2 * SHORT_WATCHDOG.as_millis() as u64 + 1_000);

#[tokio::test]
async fn node_watchdog_keeps_the_lock_alive_for_rust_beyond_the_initial_lease(
) -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start_with_watchdog(&server.url(), Some(SHORT_WATCHDOG)).await?;
    let client = rust_client(&server).await;
    let name = "interop:watchdog:node";

    peer.lock(name, "1", None)
        .await
        .wait(STEP)
        .await
        .expect_ok("node lock (watchdog)");
    let acquired = Instant::now();
    let ttl = pttl(&raw, name).await;
    assert!(
        ttl > 0 && ttl <= SHORT_WATCHDOG.as_millis() as i64,
        "node's watchdog lease should be {SHORT_WATCHDOG:?}, PTTL {ttl}"
    );
    let probe = client.lock(name).with_owner(Owner::new());
    let expected = HashMap::from([(peer.field("1"), "1".to_string())]);
    while acquired.elapsed() < OBSERVE {
        assert!(
            probe.try_lock().await.expect("try_lock").is_busy(),
            "rust acquired {name} {:?} after node took it with a {SHORT_WATCHDOG:?} watchdog lease",
            acquired.elapsed()
        );
        assert_eq!(hgetall(&raw, name).await, expected);
        match probe.remaining_ttl().await.expect("remaining_ttl") {
            RemainingTtl::Expires(left) => assert!(left <= SHORT_WATCHDOG, "{left:?}"),
            other => panic!("node's watchdog lock should expire, got {other:?}"),
        }
        sleep(Duration::from_millis(100)).await;
    }
    assert!(probe.is_locked().await.expect("is_locked"));

    peer.unlock(name, "1").await.expect("node release");
    let guard = probe
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("rust acquires after node's release");
    guard.unlock().await.expect("rust release");
    Ok(())
}

#[tokio::test]
async fn rust_watchdog_keeps_the_lock_alive_for_node_beyond_the_initial_lease(
) -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let mut config = Config::new(server.url());
    config.watchdog_timeout = SHORT_WATCHDOG;
    let client = connect_with(config).await;
    let name = "interop:watchdog:rust";

    let lock = client.lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("rust acquire (watchdog)");
    let acquired = Instant::now();
    let expected = HashMap::from([(guard.holder_field().to_string(), "1".to_string())]);
    while acquired.elapsed() < OBSERVE {
        assert!(
            !peer.try_lock(name, "1", Duration::ZERO, None).await,
            "node acquired {name} {:?} after rust took it with a {SHORT_WATCHDOG:?} watchdog lease",
            acquired.elapsed()
        );
        assert!(peer.is_locked(name).await);
        assert_eq!(hgetall(&raw, name).await, expected);
        let ttl = pttl(&raw, name).await;
        assert!(
            ttl > 0 && ttl <= SHORT_WATCHDOG.as_millis() as i64,
            "rust's watchdog lease, PTTL {ttl}"
        );
        sleep(Duration::from_millis(100)).await;
    }
    assert!(!guard.is_lost());

    guard.unlock().await.expect("rust release");
    assert!(
        peer.try_lock(name, "1", Duration::ZERO, Some(LEASE)).await,
        "node acquires after rust's release"
    );
    peer.unlock(name, "1").await.expect("node release");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Unlock by a non-owner of the other client
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn node_non_owner_unlock_fails_and_leaves_the_rust_lock_intact() -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let client = rust_client(&server).await;
    let name = "interop:non-owner:rust-holds";
    let mut spy = ChannelSpy::new(&server.url(), &[channel_of(name).as_str()]).await;

    let owner = Owner::new();
    let lock = client.lock(name).with_owner(owner);
    let guard = lock.lock_with_lease(LEASE).await.expect("rust acquire");
    let before = hgetall(&raw, name).await;
    let ttl_before = pttl(&raw, name).await;

    // A node owner, and a node owner with the very same thread id as the Rust holder: the
    // holder field includes the client id, so neither is the holder.
    for node_owner in ["1".to_string(), owner.id().to_string()] {
        let err = peer
            .unlock(name, &node_owner)
            .await
            .expect_err("node non-owner unlock must fail");
        assert!(
            err.contains("not locked by current client"),
            "unexpected node error: {err}"
        );
    }
    assert_eq!(hgetall(&raw, name).await, before, "lock hash changed");
    let ttl_after = pttl(&raw, name).await;
    assert!(
        ttl_after > 0 && ttl_after <= ttl_before,
        "lease changed: {ttl_before} -> {ttl_after}"
    );
    assert_eq!(lock.hold_count().await.expect("hold_count"), 1);
    assert!(lock.is_held_by_current_owner().await.expect("held"));
    if let Some(message) = spy.next(Duration::from_millis(200)).await {
        panic!("a failed node unlock published {message:?}");
    }
    guard.unlock().await.expect("rust release");
    assert_eq!(
        spy.next(STEP).await,
        Some((channel_of(name), "0".to_string()))
    );
    Ok(())
}

#[tokio::test]
async fn rust_non_owner_unlock_fails_and_leaves_the_node_lock_intact() -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let peer = NodePeer::start(&server.url()).await?;
    let client = rust_client(&server).await;
    let name = "interop:non-owner:node-holds";
    let mut spy = ChannelSpy::new(&server.url(), &[channel_of(name).as_str()]).await;

    peer.lock(name, "1", Some(LEASE))
        .await
        .wait(STEP)
        .await
        .expect_ok("node lock");
    let before = hgetall(&raw, name).await;
    assert_eq!(before, HashMap::from([(peer.field("1"), "1".to_string())]));
    let ttl_before = pttl(&raw, name).await;

    let stranger = client.lock(name).with_owner(Owner::new());
    match stranger.unlock().await {
        Err(Error::NotHeld { name: n }) => assert_eq!(n, name),
        other => panic!("rust non-owner unlock should fail with NotHeld, got {other:?}"),
    }
    // The implicit owner (this test's thread) is no holder either.
    assert!(matches!(
        client.lock(name).unlock().await,
        Err(Error::NotHeld { .. })
    ));
    assert_eq!(hgetall(&raw, name).await, before, "lock hash changed");
    let ttl_after = pttl(&raw, name).await;
    assert!(
        ttl_after > 0 && ttl_after <= ttl_before,
        "lease changed: {ttl_before} -> {ttl_after}"
    );
    assert!(peer.is_locked(name).await);
    assert!(!stranger.is_held_by_current_owner().await.expect("held"));
    if let Some(message) = spy.next(Duration::from_millis(200)).await {
        panic!("a failed rust unlock published {message:?}");
    }
    peer.unlock(name, "1").await.expect("node release");
    assert_eq!(
        spy.next(STEP).await,
        Some((channel_of(name), "0".to_string()))
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Our own side's brace handling, against the protocol reference
// ---------------------------------------------------------------------------------------------

/// Protocol §0.2/§1.1: T(N) = N when N contains `{` anywhere, else `{N}`; the lock channel is
/// `redisson_lock__channel:` + T(N). node-redisson only tests for a *leading* `{`, so for names
/// with a brace elsewhere it would use the second channel below; ferrisson must follow Redisson.
#[tokio::test]
async fn rust_publishes_on_the_redisson_channel_for_names_with_braces_anywhere() {
    let server = RedisServer::start();
    let client = rust_client(&server).await;
    let cases = [
        // (name, Redisson's channel, node-redisson's channel)
        (
            "orders{eu}:42",
            "redisson_lock__channel:orders{eu}:42",
            "redisson_lock__channel:{orders{eu}:42}",
        ),
        (
            "a{b",
            "redisson_lock__channel:a{b",
            "redisson_lock__channel:{a{b}",
        ),
        (
            "{eu}:orders:42",
            "redisson_lock__channel:{eu}:orders:42",
            "redisson_lock__channel:{eu}:orders:42",
        ),
        (
            "a}b",
            "redisson_lock__channel:{a}b}",
            "redisson_lock__channel:{a}b}",
        ),
    ];
    for (name, redisson_channel, node_channel) in cases {
        let mut spy = ChannelSpy::new(&server.url(), &[redisson_channel, node_channel]).await;
        let lock = client.lock(name).with_owner(Owner::new());
        let guard = lock.lock_with_lease(LEASE).await.expect("acquire");
        guard.unlock().await.expect("release");
        assert_eq!(
            spy.next(STEP).await,
            Some((redisson_channel.to_string(), "0".to_string())),
            "release of {name:?}"
        );
        if let Some(extra) = spy.next(Duration::from_millis(100)).await {
            panic!("release of {name:?} also published {extra:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The peer itself
// ---------------------------------------------------------------------------------------------

/// The helper's own plumbing: concurrent requests are answered by id, and a node-redisson hold
/// shows up in Redisson's layout (`<uuid>:<owner>` → count, with a PTTL).
#[tokio::test]
async fn node_peer_writes_redisson_layout_and_answers_requests_by_id() -> Result<(), Unavailable> {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let mut peer = NodePeer::start(&server.url()).await?;
    assert_eq!(peer.client_id().len(), 36, "node-redisson id is a UUID");
    let name = "interop:layout";
    let lease = Duration::from_millis(5_000);
    let first = peer.lock(name, "7", Some(lease)).await;
    let second = peer.lock(name, "7", Some(lease)).await;
    first.wait(STEP).await.expect_ok("first lock");
    second.wait(STEP).await.expect_ok("reentrant lock");
    assert_eq!(
        hgetall(&raw, name).await,
        HashMap::from([(peer.field("7"), "2".to_string())])
    );
    let ttl = pttl(&raw, name).await;
    assert!(ttl > 0 && ttl <= 5_000, "PTTL {ttl}");
    assert!(peer.is_running());
    let bad = peer.call("no_such_op", &[]).await;
    assert!(!bad.ok() && bad.error().is_some_and(|e| e.contains("unknown op")));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// On a Redis Cluster
// ---------------------------------------------------------------------------------------------

/// Classic subscribers of `channel` over every master (`PUBSUB NUMSUB` counts a node's own).
async fn cluster_numsub(cluster: &RedisCluster, channel: &str) -> i64 {
    let mut total = 0;
    for master in &cluster.master_clients {
        total += numsub(master, channel).await;
    }
    total
}

/// On a Redis 7 cluster node-redisson subscribes and publishes classically, as Java Redisson
/// before 3.22 does. ferrisson's default (`PublishMode::Auto`: both ways in a cluster) wakes it
/// and is woken by it; a `Sharded` release does not reach it, which is why `Auto` publishes
/// both ways (the node waiter then waits out the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_node_and_rust_wake_each_other_with_the_default_publish_mode(
) -> Result<(), Unavailable> {
    let cluster = RedisCluster::start(3, 0).await;
    let peer = NodePeer::start(&cluster.url()).await?;
    let auto = connect_with(Config::new(cluster.url())).await;
    // Redis 6.2 has no sharded pub/sub and refuses `Sharded` at connect: no last step there.
    let sharded = if support::server_binary().has_7_0_features() {
        let mut sharded = Config::new(cluster.url());
        sharded.publish_mode = PublishMode::Sharded;
        Some(connect_with(sharded).await)
    } else {
        None
    };

    // Rust holds, node waits: the release wakes node at once.
    let name = "cluster:interop";
    let guard = auto
        .lock(name)
        .with_owner(Owner::new())
        .lock_with_lease(LEASE)
        .await
        .expect("rust acquires");
    let node = peer.lock(name, "1", Some(LEASE)).await;
    wait_node_parked_on(&cluster.master_clients, &peer).await;
    let released = Instant::now();
    guard.unlock().await.expect("rust release");
    let reply = node.wait(LEASE + STEP).await.expect_ok("node lock");
    let woke_after = reply.received.duration_since(released);
    assert!(
        woke_after < WAKE_BOUND,
        "node woken {woke_after:?} after the rust release"
    );

    // node holds, Rust waits: node's classic message wakes it.
    let waiter = spawn_rust_waiter(&auto, name, Owner::new(), LEASE);
    let channel = channel_of(name);
    let deadline = Instant::now() + STEP;
    while cluster_numsub(&cluster, &channel).await < 1 {
        assert!(
            Instant::now() < deadline,
            "the rust waiter did not subscribe"
        );
        sleep(Duration::from_millis(10)).await;
    }
    let guard = node_release_wakes(&peer, waiter, name).await;
    guard.unlock().await.expect("rust release");

    // A sharded-only release is not heard by node's classic subscription.
    let Some(sharded) = sharded else {
        return Ok(());
    };
    let lease = Duration::from_secs(6);
    wait_node_unsubscribed_on(&cluster.master_clients, &peer).await;
    let guard = sharded
        .lock(name)
        .with_owner(Owner::new())
        .lock_with_lease(lease)
        .await
        .expect("rust acquires");
    let mut node = peer.lock(name, "1", Some(LEASE)).await;
    wait_node_parked_on(&cluster.master_clients, &peer).await;
    guard.unlock().await.expect("rust release");
    sleep(WAKE_BOUND).await;
    if let Some(reply) = node.poll() {
        panic!("node was woken by a sharded message it does not subscribe to: {reply:?}");
    }
    node.wait(lease + STEP)
        .await
        .expect_ok("node lock, after its TTL-bounded wait");
    peer.unlock(name, "1").await.expect("node release");
    Ok(())
}
