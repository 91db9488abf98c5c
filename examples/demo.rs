//! A short guided tour of ferrisson: two clients and several tasks share one lock, `orders:42`.
//!
//! ```text
//! ./dev demo                                  # installs redis-server if missing, then runs this
//! cargo run --release --example demo          # the same, with redis-server already installed
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example demo
//! ```
//!
//! Without `REDIS_URL` the demo starts its own `redis-server` (from `REDIS_SERVER` or `PATH`) on
//! a free loopback port, with persistence off and a temporary directory, and kills it at the end.
//! With `REDIS_URL` it uses that server and touches only the keys `orders:42` and
//! `orders:42:processed` (the latter is deleted at the start and at the end).
//!
//! The scenes:
//! 1. a reentrant acquire: one task takes the lock twice; the hash shows a hold count of 2;
//! 2. a pub/sub hand-off: a waiter on the other client is woken by the unlock message;
//! 3. the watchdog: a client with a 1.5 s watchdog holds the lock for 2 s and its TTL keeps
//!    going back up;
//! 4. contention: four tasks on two clients increment a counter with a non-atomic GET + SET
//!    under the lock; no increment is lost.
//!
//! Only ferrisson's warnings are logged by default; `RUST_LOG=ferrisson=debug` shows what the
//! library does.

use std::collections::HashMap;
use std::error::Error;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferrisson::{Client, Config, Lock, RemainingTtl, WokenBy};
use fred::prelude::{
    Builder, Client as RawClient, ClientLike, Config as RawConfig, HashesInterface, KeysInterface,
    PubsubInterface, Value,
};
use tokio::time::{sleep, Instant};

type BoxError = Box<dyn Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The lock every scene contends for.
const LOCK: &str = "orders:42";
/// Its unlock channel: Redisson's `redisson_lock__channel:` + the name in braces (the name has
/// no `{` of its own).
const CHANNEL: &str = "redisson_lock__channel:{orders:42}";
/// The counter scene 4 increments under the lock.
const COUNTER: &str = "orders:42:processed";

/// The instant the demo started; every line is stamped with the milliseconds since.
static START: OnceLock<Instant> = OnceLock::new();

/// Prints one line of the story: `[  ms] who  what`.
macro_rules! say {
    ($who:expr, $($what:tt)*) => {
        println!("[{:>5} ms] {:<9} {}", elapsed_ms(), $who, format_args!($($what)*))
    };
}

fn elapsed_ms() -> u128 {
    START.get_or_init(Instant::now).elapsed().as_millis()
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    match tokio::time::timeout(Duration::from_secs(60), demo()).await {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(err)) => {
            eprintln!("demo failed: {err}");
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!(
                "demo failed: did not finish within 60 s (is `{LOCK}` held by someone else?)"
            );
            ExitCode::FAILURE
        }
    }
}

/// Quiet by default (ferrisson's warnings only; fred's connection chatter is hidden);
/// `RUST_LOG` overrides it.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fred=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn demo() -> Result<()> {
    // `server` lives until the end of this function: dropping it kills redis-server, also when
    // a scene fails and `?` returns early.
    let (url, server) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => (url, None),
        _ => {
            let server = RedisServer::start()?;
            (server.url(), Some(server))
        }
    };
    START.get_or_init(Instant::now);
    match &server {
        Some(server) => say!(
            "setup",
            "started redis-server on {} (pid {})",
            server.url(),
            server.pid()
        ),
        None => say!("setup", "using REDIS_URL={url}"),
    }

    // Client A has Redisson's defaults; client B a short watchdog, so that scene 3 fits in 2 s.
    let a = Client::connect(&url).await?;
    let mut config = Config::new(url.as_str());
    config.watchdog_timeout = Duration::from_millis(1500);
    let b = Client::new(config).await?;
    say!("setup", "client A {} (watchdog 30 s)", a.id());
    say!("setup", "client B {} (watchdog 1.5 s)", b.id());

    // A plain Redis client, to look at what the locks write.
    let raw = Builder::from_config(RawConfig::from_url(&url)?).build()?;
    raw.init().await?;
    raw.del::<i64, _>(COUNTER).await?;

    println!("\n-- 1. reentrant acquire --------------------------------------------------");
    reentrant(&a, &raw).await?;
    println!("\n-- 2. pub/sub hand-off between clients -----------------------------------");
    hand_off(&a, &b, &raw).await?;
    println!("\n-- 3. watchdog renewal ---------------------------------------------------");
    watchdog(&b).await?;
    println!("\n-- 4. mutual exclusion under contention ----------------------------------");
    contention(&a, &b, &raw).await?;

    raw.del::<i64, _>(COUNTER).await?;
    raw.quit().await?;
    a.shutdown().await;
    b.shutdown().await;
    println!();
    say!("done", "clients shut down");
    drop(server);
    Ok(())
}

/// Scene 1: one task takes the lock twice. The owner is the task, as a thread is in Java, so the
/// second `lock()` re-enters instead of waiting for itself.
async fn reentrant(a: &Client, raw: &RawClient) -> Result<()> {
    let lock = a.lock(LOCK);
    let raw = raw.clone();
    let task = tokio::spawn(async move {
        let outer = lock.lock().await?;
        say!("A:task", "locked {LOCK} as {:?}", outer.owner());
        let inner = lock.lock().await?;
        let hash: HashMap<String, String> = raw.hgetall(LOCK).await?;
        say!(
            "A:task",
            "locked it again: re-entered at once ({:?})",
            inner.acquisition().woken_by
        );
        for (field, count) in &hash {
            say!("A:task", "HGETALL {LOCK} -> {field} = {count}");
        }
        say!("A:task", "hold_count() = {}", lock.hold_count().await?);

        inner.unlock().await?; // partial release: count 2 -> 1, no unlock message
        say!(
            "A:task",
            "released the inner hold: hold_count() = {}",
            lock.hold_count().await?
        );
        outer.unlock().await?; // full release: DEL + PUBLISH 0
        say!(
            "A:task",
            "released the outer hold: is_locked() = {}",
            lock.is_locked().await?
        );
        Ok::<_, BoxError>(())
    });
    task.await?
}

/// Scene 2: A holds the lock, a task on client B waits for it. A's release publishes `0` on the
/// lock's channel; B's shared subscription turns it into a permit, B retries and wins.
async fn hand_off(a: &Client, b: &Client, raw: &RawClient) -> Result<()> {
    let held = a.lock(LOCK).lock().await?;
    say!("A:main", "locked {LOCK}");

    let waiter = b.lock(LOCK);
    let task = tokio::spawn(async move {
        say!(
            "B:waiter",
            "lock() ... (busy: subscribes to {CHANNEL} and parks)"
        );
        let guard = waiter.lock().await?;
        let acquired_at = Instant::now();
        let how = *guard.acquisition();
        say!(
            "B:waiter",
            "acquired: waited {} ms, woken_by={:?}, attempts={}",
            how.waited.as_millis(),
            how.woken_by,
            how.attempts
        );
        guard.unlock().await?;
        Ok::<_, BoxError>((acquired_at, how.woken_by))
    });

    // Let the waiter subscribe and park before releasing (only so that the story shows a real
    // wake-up; the library needs no such pause).
    wait_for_subscriber(raw).await?;
    sleep(Duration::from_millis(50)).await;
    say!("A:main", "PUBSUB NUMSUB {CHANNEL} = 1; unlocking");
    let released_at = Instant::now();
    held.unlock().await?;

    let (acquired_at, woken_by) = task.await??;
    let latency = acquired_at.saturating_duration_since(released_at);
    say!(
        "hand-off",
        "unlock sent -> B acquired: {:.2} ms (woken by {woken_by:?}, no polling)",
        latency.as_secs_f64() * 1000.0
    );
    Ok(())
}

/// Waits until some connection is subscribed to the lock's channel.
async fn wait_for_subscriber(raw: &RawClient) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // PUBSUB NUMSUB answers [channel, count].
        let reply: Vec<Value> = raw.pubsub_numsub(CHANNEL).await?;
        if reply.get(1).and_then(Value::as_i64).unwrap_or(0) > 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("nobody subscribed to {CHANNEL} within 5 s").into());
        }
        sleep(Duration::from_millis(5)).await;
    }
}

/// Scene 3: client B's watchdog timeout is 1.5 s, so a lock taken without a lease expires after
/// 1.5 s unless renewed; the watchdog renews it every 0.5 s. Held for 2 s, it stays locked and
/// its PTTL keeps jumping back up.
async fn watchdog(b: &Client) -> Result<()> {
    let lock = b.lock(LOCK);
    let guard = lock.lock().await?;
    let watchdog = b.config().watchdog_timeout;
    say!(
        "B:main",
        "locked {LOCK} without a lease: PTTL = {} ms, renewed every {} ms",
        pttl_ms(&lock).await?,
        (watchdog / 3).as_millis()
    );

    let hold = Duration::from_secs(2);
    let since = Instant::now();
    let mut last = pttl_ms(&lock).await?;
    let mut lowest = last;
    let mut renewals = 0;
    while since.elapsed() < hold {
        sleep(Duration::from_millis(25)).await;
        let now = pttl_ms(&lock).await?;
        if now > last + 100 {
            renewals += 1;
            say!(
                "B:main",
                "PTTL {last} -> {now} ms: watchdog renewal #{renewals}"
            );
        }
        lowest = lowest.min(now);
        last = now;
    }
    say!(
        "B:main",
        "held for {} ms (lease {} ms): PTTL never below {lowest} ms, lost = {}",
        since.elapsed().as_millis(),
        watchdog.as_millis(),
        guard.is_lost()
    );
    if renewals == 0 || guard.is_lost() {
        return Err("the watchdog did not keep the lock alive".into());
    }
    // `Ok(())`: the hold was still ours when released (`Error::LeaseLost` otherwise).
    guard.unlock().await?;
    say!("B:main", "unlock() = Ok: the hold was still ours");
    Ok(())
}

/// The lock's PTTL in ms; an error if it is not locked with an expiry.
async fn pttl_ms(lock: &Lock) -> Result<u128> {
    match lock.remaining_ttl().await? {
        RemainingTtl::Expires(ttl) => Ok(ttl.as_millis()),
        other => Err(format!("expected {LOCK} to be locked with a TTL, found {other:?}").into()),
    }
}

/// Scene 4: four tasks, two per client, each increment a counter `ROUNDS` times with a GET,
/// a pause and a SET: a lost update would show at once if two of them ever overlapped.
async fn contention(a: &Client, b: &Client, raw: &RawClient) -> Result<()> {
    const ROUNDS: u64 = 2;
    let workers = [("A:w1", a), ("A:w2", a), ("B:w1", b), ("B:w2", b)];
    // How many workers are inside the critical section now, and the most ever seen.
    let inside = Arc::new(AtomicUsize::new(0));
    let most_inside = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    for (name, client) in workers {
        let lock = client.lock(LOCK);
        let raw = raw.clone();
        let (inside, most_inside) = (Arc::clone(&inside), Arc::clone(&most_inside));
        tasks.push(tokio::spawn(async move {
            let mut woken = Vec::new();
            for _ in 0..ROUNDS {
                let guard = lock.lock().await?;
                let how = *guard.acquisition();
                say!(
                    name,
                    "acquired (waited {:>3} ms, woken_by={:?})",
                    how.waited.as_millis(),
                    how.woken_by
                );
                woken.push(how.woken_by);

                let now_inside = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most_inside.fetch_max(now_inside, Ordering::SeqCst);
                let value: Option<u64> = raw.get(COUNTER).await?;
                sleep(Duration::from_millis(20)).await; // widen the race window
                raw.set::<(), _, _>(COUNTER, value.unwrap_or(0) + 1, None, None, false)
                    .await?;
                inside.fetch_sub(1, Ordering::SeqCst);

                guard.unlock().await?;
                sleep(Duration::from_millis(5)).await; // other work between rounds
            }
            Ok::<_, BoxError>(woken)
        }));
    }
    let mut woken = Vec::new();
    for task in tasks {
        woken.extend(task.await??);
    }

    let expected = ROUNDS * workers.len() as u64;
    let counter: Option<u64> = raw.get(COUNTER).await?;
    let counter = counter.unwrap_or(0);
    let by_message = woken.iter().filter(|w| **w == WokenBy::Message).count();
    say!(
        "summary",
        "counter = {counter} (expected {expected}); at most {} worker(s) inside at once",
        most_inside.load(Ordering::SeqCst)
    );
    say!(
        "summary",
        "{} acquisitions: {by_message} after an unlock message, {} without waiting, {} after a TTL",
        woken.len(),
        woken.iter().filter(|w| **w == WokenBy::Immediate).count(),
        woken.iter().filter(|w| **w == WokenBy::Ttl).count()
    );
    if counter != expected || most_inside.load(Ordering::SeqCst) != 1 {
        return Err("mutual exclusion was violated".into());
    }
    Ok(())
}

/// A private `redis-server` child process: loopback only, persistence off, its own temporary
/// directory. Killed (and reaped) on drop.
struct RedisServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts `redis-server` (from `REDIS_SERVER`, else `PATH`) on a free port and waits until it
    /// answers PING. Tries a few ports, in case another process takes the one picked first.
    fn start() -> Result<RedisServer> {
        let binary = std::env::var_os("REDIS_SERVER")
            .filter(|binary| !binary.is_empty())
            .unwrap_or_else(|| "redis-server".into());
        let mut failures = Vec::new();
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("ferrisson-demo-")
                .tempdir()?;
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
                .local_addr()?
                .port();
            let log = File::create(dir.path().join("redis.log"))?;
            let child = Command::new(&binary)
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1"])
                .args(["--save", ""])
                .args(["--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .map_err(|err| {
                    format!(
                        "cannot run {}: {err} (run `./dev demo`, which installs redis-server, \
                         or set REDIS_URL or REDIS_SERVER)",
                        binary.to_string_lossy()
                    )
                })?;
            let mut server = RedisServer { child, port, dir };
            match server.wait_ready(Duration::from_secs(5)) {
                Ok(()) => return Ok(server),
                // Dropping `server` kills the failed attempt.
                Err(err) => failures.push(format!("port {port}: {err}")),
            }
        }
        Err(format!("redis-server did not start: {}", failures.join("; ")).into())
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the server answers PING, failing early if the process exits.
    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("exited during startup ({status}): {}", self.log()).into());
            }
            if answers_ping(self.port) {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!("no answer to PING within {timeout:?}").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The end of the server's log, for error messages.
    fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(self.dir.path().join("redis.log")) {
            let _ = file.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether something on 127.0.0.1:`port` answers a RESP `PING` with `+PONG`.
fn answers_ping(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let timeout = Duration::from_millis(200);
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let mut reply = [0u8; 7];
    stream.set_read_timeout(Some(timeout)).is_ok()
        && stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}
