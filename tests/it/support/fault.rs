//! Fault injection on loopback: signals to processes (pause, resume, kill), a raw client that
//! survives the faults it drives, server-side faults (`CLIENT KILL`, `DEBUG SLEEP`) and a TCP
//! [`FaultProxy`] that delays, blackholes or resets the traffic between a client and a server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::ReconnectPolicy;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::RedisServer;

/// Sends `signal` to process `pid`; a process that is already gone is not an error.
pub fn signal_pid(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

impl RedisServer {
    /// Sends `signal` to the server process. Panics if the server is not running.
    pub fn signal(&self, signal: Signal) {
        signal_pid(self.pid().expect("the server runs"), signal);
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Thaws a server frozen by [`RedisServer::pause`] (SIGCONT).
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }
}

/// A raw fred client for a test that drives faults: it reconnects after the server is killed or
/// its connection is, and no command waits longer than `timeout`, so the driver itself never
/// hangs on a fault it caused.
pub async fn resilient_raw_client(url: &str, timeout: Duration) -> fred::clients::Client {
    let config = Config::from_url(url).unwrap_or_else(|e| panic!("bad redis url {url}: {e}"));
    let mut builder = Builder::from_config(config);
    builder
        .with_connection_config(|connection| {
            connection.connection_timeout = timeout;
            connection.internal_command_timeout = timeout;
        })
        .with_performance_config(|performance| performance.default_command_timeout = timeout)
        .set_policy(ReconnectPolicy::new_constant(0, 50));
    super::init_raw(builder, url).await
}

/// `CLIENT KILL TYPE <kind> SKIPME yes`: drops every connection of that kind (`normal`,
/// `pubsub`) but the caller's. Returns how many were killed (0 when the command failed).
pub async fn client_kill(raw: &fred::clients::Client, kind: &str) -> i64 {
    raw.custom(
        fred::cmd!("CLIENT"),
        vec!["KILL", "TYPE", kind, "SKIPME", "yes"],
    )
    .await
    .unwrap_or(0)
}

/// `redis-server` arguments that allow `DEBUG` from loopback (Redis 7 refuses it by default).
pub const DEBUG_COMMAND: [&str; 2] = ["--enable-debug-command", "local"];

/// Starts `DEBUG SLEEP <seconds>` on the server from a task of its own, so that the caller goes
/// on while the server is busy. The sleep begins within a round trip of the call; the task ends
/// with the server's answer (an error if `DEBUG` is not enabled, see [`DEBUG_COMMAND`]).
pub fn debug_sleep(
    raw: &fred::clients::Client,
    seconds: f64,
) -> tokio::task::JoinHandle<Result<(), fred::error::Error>> {
    let raw = raw.clone();
    tokio::spawn(async move {
        raw.custom::<Value, _>(
            fred::cmd!("DEBUG"),
            vec!["SLEEP".to_string(), seconds.to_string()],
        )
        .await
        .map(drop)
    })
}

/// `CLIENT PAUSE <long> WRITE`: from its reply on, the server holds every write command of
/// every client (scripts included, so every acquire and release) unanswered and unrun until
/// [`unpause`]; reads, `CLIENT` and `DEBUG` still run. Unlike a sleep begun from another task,
/// the pause is in effect when this returns, so whatever a test sends next is held.
pub async fn pause_writes(raw: &fred::clients::Client) {
    let _: Value = raw
        .custom(fred::cmd!("CLIENT"), vec!["PAUSE", "600000", "WRITE"])
        .await
        .expect("CLIENT PAUSE");
}

/// `CLIENT UNPAUSE`: the held commands run, in the order they arrived, before this returns.
pub async fn unpause(raw: &fred::clients::Client) {
    let _: Value = raw
        .custom(fred::cmd!("CLIENT"), vec!["UNPAUSE"])
        .await
        .expect("CLIENT UNPAUSE");
}

/// [`debug_sleep`], then [`unpause`], sent back to back on one connection from a task of its
/// own: after [`pause_writes`], the calls a test sends meanwhile stay held until the sleep ends,
/// whether they reach the server before the sleep begins or during it.
pub fn debug_sleep_then_unpause(
    raw: &fred::clients::Client,
    seconds: f64,
) -> tokio::task::JoinHandle<Result<(), fred::error::Error>> {
    let pipeline = raw.pipeline();
    tokio::spawn(async move {
        let _: () = pipeline
            .custom(
                fred::cmd!("DEBUG"),
                vec!["SLEEP".to_string(), seconds.to_string()],
            )
            .await?;
        let _: () = pipeline
            .custom(fred::cmd!("CLIENT"), vec!["UNPAUSE"])
            .await?;
        let _: Vec<Value> = pipeline.all().await?;
        Ok(())
    })
}

/// Waits (at most `within`, else panics) until the server holds a script call under
/// [`pause_writes`]: a client whose last command is `EVALSHA` or `EVAL` and that is blocked
/// (`CLIENT LIST` flag `b`). From then on the call runs at [`unpause`], whatever becomes of
/// the network it came by.
pub async fn wait_script_held(raw: &fred::clients::Client, within: Duration) {
    let held = |list: &str| {
        list.lines().any(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|kv| kv.strip_prefix(name))
                    .unwrap_or_default()
            };
            field("flags=").contains('b') && matches!(field("cmd="), "evalsha" | "eval")
        })
    };
    super::redis_state::poll_until(
        within,
        super::redis_state::POLL_INTERVAL,
        || async {
            raw.custom::<String, _>(fred::cmd!("CLIENT"), vec!["LIST"])
                .await
                .unwrap_or_default()
        },
        |list| held(list),
    )
    .await
    .unwrap_or_else(|list| panic!("no script call held by the paused server:\n{list}"));
}

/// What a [`FaultProxy`] does to the traffic it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward everything as it comes.
    Pass,
    /// Forward every chunk, each in both directions after this delay.
    Delay(Duration),
    /// Accept connections and read from them, but forward nothing either way: a network
    /// partition as the client sees it (no error, no answer).
    Blackhole,
    /// Forward everything, but hold back a chunk from the client that carries a `SUBSCRIBE` or
    /// `UNSUBSCRIBE` (and, by order, whatever follows it on that connection) for this long: a
    /// subscriber connection slower than the command connection beside it.
    DelaySubscribes(Duration),
}

/// A TCP proxy on a loopback port in front of a server, whose behaviour a test switches at
/// run time. Connections are carried by tasks of the runtime that started the proxy; dropping
/// the proxy stops accepting and closes every carried connection.
pub struct FaultProxy {
    port: u16,
    mode: Arc<Mutex<ProxyMode>>,
    /// Chunks held back by [`ProxyMode::DelaySubscribes`] so far.
    delayed: Arc<AtomicUsize>,
    /// Bumped by [`FaultProxy::reset_all`]: every carried connection closes with a reset.
    resets: watch::Sender<u64>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port that forwards to 127.0.0.1:`target_port`.
    pub async fn start(target_port: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fault proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        let mode = Arc::new(Mutex::new(ProxyMode::Pass));
        let delayed = Arc::new(AtomicUsize::new(0));
        let (resets, _) = watch::channel(0u64);
        let target: SocketAddr = ([127, 0, 0, 1], target_port).into();
        let acceptor = {
            let (mode, delayed) = (mode.clone(), delayed.clone());
            let resets = resets.clone();
            tokio::spawn(async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    let (mode, delayed) = (mode.clone(), delayed.clone());
                    let reset = resets.subscribe();
                    tokio::spawn(carry(inbound, target, mode, delayed, reset));
                }
            })
        };
        FaultProxy {
            port,
            mode,
            delayed,
            resets,
            acceptor,
        }
    }

    /// The proxy's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// How many chunks [`ProxyMode::DelaySubscribes`] has held back so far (counted as the hold
    /// begins).
    pub fn delayed(&self) -> usize {
        self.delayed.load(Ordering::SeqCst)
    }

    /// Switches what the proxy does to the traffic from now on (also on open connections).
    pub fn set_mode(&self, mode: ProxyMode) {
        *self.mode.lock() = mode;
    }

    /// Closes every open connection with a TCP reset (RST), as a middlebox that dropped them
    /// would. New connections are carried again as the mode says.
    pub fn reset_all(&self) {
        self.resets.send_modify(|generation| *generation += 1);
    }

    /// Takes the proxy down for good: returns once its port no longer listens (a connect is
    /// refused at once; dropping the proxy only asks its listening task to stop), and closes
    /// every carried connection with a reset. The client behind it stays disconnected,
    /// whatever becomes of the server.
    pub async fn close(mut self) {
        self.acceptor.abort();
        // Resolves once the task, and with it the listener, is gone.
        let _ = (&mut self.acceptor).await;
        self.reset_all();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.reset_all();
    }
}

/// Carries one connection until either side closes or a reset is asked for.
async fn carry(
    inbound: TcpStream,
    target: SocketAddr,
    mode: Arc<Mutex<ProxyMode>>,
    delayed: Arc<AtomicUsize>,
    mut reset: watch::Receiver<u64>,
) {
    reset.borrow_and_update();
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (mut in_read, mut in_write) = inbound.into_split();
    let (mut out_read, mut out_write) = outbound.into_split();
    let upstream = pump(&mut in_read, &mut out_write, &mode, Some(&delayed));
    let downstream = pump(&mut out_read, &mut in_write, &mode, None);
    let reset_asked = tokio::select! {
        _ = upstream => false,
        _ = downstream => false,
        _ = reset.changed() => true,
    };
    if reset_asked {
        // A zero linger turns the close into a reset on both sides. (tokio deprecates
        // `set_linger` because a non-zero linger blocks on drop; a zero one never does.)
        #[allow(deprecated)]
        for stream in [
            in_read.reunite(in_write).ok(),
            out_read.reunite(out_write).ok(),
        ]
        .into_iter()
        .flatten()
        {
            let _ = stream.set_linger(Some(Duration::ZERO));
            drop(stream);
        }
    }
}

/// Copies `from` to `to` chunk by chunk, applying the proxy's mode to each chunk. `upstream`
/// (from the client to the server) counts the chunks it holds back.
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    mode: &Mutex<ProxyMode>,
    upstream: Option<&AtomicUsize>,
) where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        let current = *mode.lock();
        match current {
            ProxyMode::Pass => {}
            ProxyMode::Delay(delay) => tokio::time::sleep(delay).await,
            ProxyMode::Blackhole => continue,
            ProxyMode::DelaySubscribes(delay) => {
                let chunk = &buffer[..read];
                if let Some(delayed) = upstream {
                    if chunk.windows(9).any(|window| window == b"SUBSCRIBE") {
                        delayed.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(delay).await;
                    }
                }
            }
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
