//! A peer process driven by JSON lines, the protocol of the interop peers in `tests/interop`
//! (`peer.js`, `token_peer.js`, `py/token_peer.py`): the process prints one `{"event": ...}` line
//! when it is ready, then reads one JSON command per stdin line (with a numeric `"id"` and an
//! `"op"`) and answers each with one flat JSON line on stdout carrying the same `"id"`. Replies
//! may come out of order; they are matched by id.
//!
//! [`LinePeer`] is that plumbing, whatever the peer; `token_peers` builds typed drivers on it.
//! (`interop_node.rs` keeps its own copy for node-redisson, from before this module.)

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::oneshot;
use tokio::time::{timeout, Instant};

/// One reply line of a peer (or its ready line).
#[derive(Clone, Debug)]
pub struct Reply {
    pub fields: Map<String, Value>,
    /// When the line was read by the test.
    pub received: Instant,
}

impl Reply {
    /// `"ok": true`.
    pub fn ok(&self) -> bool {
        self.fields.get("ok") == Some(&Value::Bool(true))
    }

    /// A string field, `None` when absent or not a string (e.g. `null`).
    pub fn str(&self, field: &str) -> Option<&str> {
        self.fields.get(field).and_then(Value::as_str)
    }

    /// A boolean field; panics when it is missing or not a boolean.
    pub fn bool(&self, field: &str) -> bool {
        match self.fields.get(field) {
            Some(Value::Bool(b)) => *b,
            other => panic!("peer reply field {field:?} is not a boolean: {other:?} in {self:?}"),
        }
    }

    /// A non-negative integer field; panics when it is missing or not one.
    pub fn u64(&self, field: &str) -> u64 {
        match self.fields.get(field).and_then(Value::as_u64) {
            Some(n) => n,
            None => panic!(
                "peer reply field {field:?} is not a non-negative integer: {:?} in {self:?}",
                self.fields.get(field)
            ),
        }
    }
}

/// A command sent to the peer whose reply has not been awaited yet.
pub struct Pending {
    what: String,
    rx: oneshot::Receiver<Reply>,
    stderr: Arc<Mutex<String>>,
}

impl Pending {
    /// The reply, waiting at most `within`; panics (with the peer's stderr) when the peer
    /// exits first or does not answer in time.
    pub async fn wait(self, within: Duration) -> Reply {
        let Pending { what, rx, stderr } = self;
        match timeout(within, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => panic!(
                "{what}: the peer exited before answering; its stderr:\n{}",
                stderr.lock().expect("stderr buffer").as_str()
            ),
            Err(_) => panic!(
                "{what}: no reply within {within:?}; the peer's stderr:\n{}",
                stderr.lock().expect("stderr buffer").as_str()
            ),
        }
    }

    /// The reply if it has arrived, without waiting.
    pub fn poll(&mut self) -> Option<Reply> {
        self.rx.try_recv().ok()
    }
}

type PendingMap = Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>;

/// A running peer process; killed when dropped.
pub struct LinePeer {
    name: String,
    child: Child,
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: PendingMap,
    next_id: AtomicU64,
    stderr: Arc<Mutex<String>>,
    ready: Reply,
}

impl LinePeer {
    /// Spawns `command` (its stdio is taken over, and it is killed on drop) and waits at most
    /// `startup` for its ready line, `{"event":"ready",...}`. `name` names the peer in messages.
    /// An `Err` says why it did not start: it exited (with its stderr), reported another event,
    /// or stayed silent.
    pub async fn spawn(
        name: &str,
        mut command: Command,
        startup: Duration,
    ) -> Result<LinePeer, String> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot spawn the {name} ({command:?}): {e}"))?;
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
                    let note = |text: String| {
                        let mut buf = stderr.lock().expect("stderr buffer");
                        buf.push_str(&text);
                        buf.push('\n');
                    };
                    let fields = match serde_json::from_str::<Value>(&line) {
                        Ok(Value::Object(fields)) => fields,
                        _ => {
                            note(format!("[test] unparsable peer line {line:?}"));
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
                    let Some(id) = reply.fields.get("id").and_then(Value::as_u64) else {
                        note(format!("[test] peer reply without id: {line}"));
                        continue;
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

        let stderr_now = || stderr.lock().expect("stderr buffer").clone();
        let ready = match timeout(startup, ready_rx).await {
            Ok(Ok(ready)) => ready,
            Ok(Err(_)) => {
                let status = timeout(Duration::from_secs(5), child.wait()).await;
                return Err(format!(
                    "the {name} exited during startup ({status:?}); its stderr:\n{}",
                    stderr_now()
                ));
            }
            Err(_) => {
                return Err(format!(
                    "the {name} did not report ready within {startup:?}; its stderr:\n{}",
                    stderr_now()
                ))
            }
        };
        if ready.str("event") != Some("ready") {
            return Err(format!(
                "the {name} failed to start: {}; its stderr:\n{}",
                Value::Object(ready.fields.clone()),
                stderr_now()
            ));
        }
        Ok(LinePeer {
            name: name.to_owned(),
            child,
            stdin: tokio::sync::Mutex::new(stdin),
            pending,
            next_id: AtomicU64::new(1),
            stderr,
            ready,
        })
    }

    /// The ready line.
    pub fn ready(&self) -> &Reply {
        &self.ready
    }

    /// What the peer wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr buffer").clone()
    }

    /// Sends `op` with the fields of `args` (a JSON object, or `Value::Null` for none); the
    /// reply is awaited through the returned [`Pending`]. Panics when the peer's stdin is closed.
    pub async fn send(&self, op: &str, args: Value) -> Pending {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut fields = Map::new();
        fields.insert("id".into(), id.into());
        fields.insert("op".into(), op.into());
        match args {
            Value::Object(args) => fields.extend(args),
            Value::Null => {}
            other => panic!("peer command arguments must be a JSON object, not {other}"),
        }
        let line = Value::Object(fields).to_string();
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
                "cannot write to the {} ({e}); its stderr:\n{}",
                self.name,
                self.stderr()
            );
        }
        Pending {
            what: format!("{} {line}", self.name),
            rx,
            stderr: Arc::clone(&self.stderr),
        }
    }

    /// Sends `op` and waits at most `within` for its reply.
    pub async fn call(&self, op: &str, args: Value, within: Duration) -> Reply {
        self.send(op, args).await.wait(within).await
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `quit` and waits (at most 5 s) for the process to exit; kills it otherwise.
    pub async fn quit(mut self) {
        let pending = self.send("quit", Value::Null).await;
        let _ = timeout(Duration::from_secs(5), pending.rx).await;
        if timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
