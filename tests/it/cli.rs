//! The `ferrisson` command-line tool, driven as a subprocess against a real `redis-server`:
//! `status`, `run`, `unlock --force`, `watch`, `deadlocks`, exit statuses and argument errors.

use crate::support;

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use assert_cmd::Command as AssertCommand;
use ferrisson::Owner;
use fred::{cmd, prelude::*};
use predicates::prelude::*;
use serde_json::Value as Json;
use support::fault::FaultProxy;
use support::redis_state::{
    channel_of, command_calls, exists, hgetall, poll_until, pttl, reset_stats, wait_numsub,
};
use support::{connect, hold_with_lease, raw_client, RedisServer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout};

/// The CLI: `src/bin/ferrisson`, built as this package's `ferrisson-cli` (tests/Cargo.toml).
fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ferrisson-cli")
}
/// Generous bound for anything that should happen "promptly" on a loaded 2-core CI machine.
const PROMPTLY: Duration = Duration::from_secs(5);

/// `ferrisson` with `--url` pointing at `server`, for commands that finish by themselves.
fn cli(server: &RedisServer) -> AssertCommand {
    let mut cmd = cli_offline();
    cmd.args(["--url", &server.url()]);
    cmd
}

/// A `ferrisson` without any server, for argument errors.
fn cli_offline() -> AssertCommand {
    let mut cmd = AssertCommand::new(bin());
    cmd.env_remove("REDIS_URL")
        .env_remove("RUST_LOG")
        .timeout(Duration::from_secs(20));
    // The tool reads the library's settings from the environment: none from the test's.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("FERRISSON_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

fn stdout_json(output: &std::process::Output) -> Json {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "stdout is not JSON ({err}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// A `ferrisson` running in the background, its output read line by line as it comes.
struct Running {
    child: tokio::process::Child,
    stdout: mpsc::UnboundedReceiver<String>,
    stderr: mpsc::UnboundedReceiver<String>,
    stdout_seen: Vec<String>,
    stderr_seen: Vec<String>,
}

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

impl Running {
    fn spawn(server: &RedisServer, args: &[&str]) -> Running {
        Running::spawn_with_env(server, &[], args)
    }

    /// [`Running::spawn`] with environment variables set (RUST_LOG is unset unless given).
    fn spawn_with_env(server: &RedisServer, env: &[(&str, &str)], args: &[&str]) -> Running {
        Running::spawn_at(&server.url(), env, args)
    }

    /// [`Running::spawn_with_env`] with `--url url` (a fault proxy's, say).
    fn spawn_at(url: &str, env: &[(&str, &str)], args: &[&str]) -> Running {
        let mut child = tokio::process::Command::new(bin())
            .env_remove("REDIS_URL")
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .args(["--url", url])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn ferrisson");
        let stdout = forward_lines(child.stdout.take().expect("piped stdout"));
        let stderr = forward_lines(child.stderr.take().expect("piped stderr"));
        Running {
            child,
            stdout,
            stderr,
            stdout_seen: Vec::new(),
            stderr_seen: Vec::new(),
        }
    }

    fn pid(&self) -> nix::unistd::Pid {
        let id = self.child.id().expect("ferrisson is still running");
        nix::unistd::Pid::from_raw(i32::try_from(id).expect("pid fits i32"))
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(self.pid(), signal).expect("send a signal to ferrisson");
    }

    /// Waits for the next line on `stream` that satisfies `wanted`, keeping every line read.
    async fn line(&mut self, stream: Stream, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + PROMPTLY;
        loop {
            let (rx, seen) = match stream {
                Stream::Stdout => (&mut self.stdout, &mut self.stdout_seen),
                Stream::Stderr => (&mut self.stderr, &mut self.stderr_seen),
            };
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(line)) => {
                    seen.push(line.clone());
                    if wanted(&line) {
                        return line;
                    }
                }
                Ok(None) | Err(_) => panic!(
                    "no such line within {PROMPTLY:?}; stdout: {:?}, stderr: {:?}",
                    self.stdout_seen, self.stderr_seen
                ),
            }
        }
    }

    /// Waits for the JSON event `event` on stderr (`run --json`).
    async fn event(&mut self, event: &str) -> Json {
        let line = self
            .line(Stream::Stderr, |line| {
                serde_json::from_str::<Json>(line).is_ok_and(|json| json["event"] == event)
            })
            .await;
        serde_json::from_str(&line).expect("an event line is JSON")
    }

    /// Waits (at most [`PROMPTLY`]) for the process to exit, then reads the rest of its output.
    async fn exit(&mut self) -> ExitStatus {
        let status = match timeout(PROMPTLY, self.child.wait()).await {
            Ok(status) => status.expect("wait for ferrisson"),
            Err(_) => panic!(
                "ferrisson did not exit within {PROMPTLY:?}; stdout: {:?}, stderr: {:?}",
                self.stdout_seen, self.stderr_seen
            ),
        };
        for (rx, seen) in [
            (&mut self.stdout, &mut self.stdout_seen),
            (&mut self.stderr, &mut self.stderr_seen),
        ] {
            // Ends when the pipe closes (a grandchild could keep it open: bounded).
            while let Ok(Some(line)) = timeout(PROMPTLY, rx.recv()).await {
                seen.push(line);
            }
        }
        status
    }

    /// Every JSON event line printed on stderr so far, as `event` names.
    fn events(&self) -> Vec<String> {
        self.stderr_seen
            .iter()
            .filter_map(|line| serde_json::from_str::<Json>(line).ok())
            .filter_map(|json| json["event"].as_str().map(str::to_owned))
            .collect()
    }
}

fn forward_lines(
    pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits until the lock key `name` exists (someone acquired it).
async fn wait_locked(raw: &fred::clients::Client, name: &str) {
    poll_until(
        PROMPTLY,
        Duration::from_millis(10),
        || exists(raw, name),
        |n| *n == 1,
    )
    .await
    .unwrap_or_else(|_| panic!("lock {name} was not taken within {PROMPTLY:?}"));
}

// status ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_a_free_lock_as_text_and_json() {
    let server = RedisServer::start();

    cli(&server)
        .args(["status", "cli:free"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("NAME")
                .and(predicate::str::contains("STATE"))
                .and(predicate::str::contains("HOLDERS"))
                .and(
                    predicate::str::is_match(r"(?m)^cli:free\s+free\s+-\s+-\s+-$").expect("regex"),
                ),
        );

    let output = cli(&server)
        .args(["status", "--json", "cli:free"])
        .output()
        .expect("run status --json");
    assert!(output.status.success());
    let json = stdout_json(&output);
    assert_eq!(
        json,
        serde_json::json!([{
            "name": "cli:free", "state": "free", "locked": false, "kind": null, "mode": null,
            "redis_type": null, "ttl_ms": null, "holders": [], "queued": 0, "waiters": [],
            "token": null, "count": null, "permits_out": 0, "permits": [],
            "recorded_waiters": []
        }])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_ferrisson_holder_with_its_hold_count_and_ttl() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let lock = client.lock("cli:held").with_owner(Owner::new());
    let outer = lock.lock().await.expect("acquire");
    let inner = outer.reenter().await.expect("re-enter");
    let field = outer.holder_field().to_owned();

    cli(&server)
        .args(["status", "cli:held"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("locked")
                .and(predicate::str::contains("reentrant"))
                .and(predicate::str::contains(format!("{field}=2"))),
        );

    let output = cli(&server)
        .args(["--json", "status", "cli:held"])
        .output()
        .expect("run status --json");
    assert!(output.status.success());
    let json = stdout_json(&output);
    let lock_json = &json[0];
    assert_eq!(lock_json["locked"], true);
    assert_eq!(lock_json["kind"], "reentrant");
    assert_eq!(
        lock_json["holders"],
        serde_json::json!([{ "field": field, "count": 2 }])
    );
    let ttl = lock_json["ttl_ms"].as_u64().expect("ttl_ms is a number");
    assert!(ttl > 0 && ttl <= 30_000, "watchdog lease, got {ttl} ms");

    inner.unlock().await.expect("partial release");
    outer.unlock().await.expect("release");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_redisson_written_keys_of_every_kind_in_argument_order() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let java_field = "8c1e3a9e-4a4e-4f57-9f3c-2f1d0b7d6a11:57";
    let _: () = raw.hset("java:lock", (java_field, 3)).await.expect("HSET");
    let _: () = raw
        .pexpire("java:lock", 60_000, None)
        .await
        .expect("PEXPIRE");
    let _: () = raw.hset("java:persistent", ("a:1", 1)).await.expect("HSET");
    let _: () = raw
        .hset("java:rw", vec![("mode", "write"), ("b:2:write", "1")])
        .await
        .expect("HSET");
    let _: () = raw
        .set("java:semaphore", "3", None, None, false)
        .await
        .expect("SET");

    let names = [
        "java:lock",
        "java:free",
        "java:persistent",
        "java:rw",
        "java:semaphore",
    ];
    let output = cli(&server)
        .arg("status")
        .args(names)
        .output()
        .expect("run status");
    assert_eq!(
        output.status.code(),
        Some(0),
        "every key is a primitive of the family: {output:?}"
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<&str> = text
        .lines()
        .skip(1)
        .take_while(|line| !line.is_empty())
        .collect();
    assert_eq!(rows.len(), names.len(), "one row per name: {text}");
    for (row, name) in rows.iter().zip(names) {
        assert!(row.starts_with(name), "rows in argument order: {text}");
    }
    assert!(rows[0].contains("locked") && rows[0].contains(&format!("{java_field}=3")));
    assert!(rows[0].contains('s'), "a humane TTL: {}", rows[0]);
    assert!(rows[1].contains("free"));
    assert!(rows[2].contains("no expiry") && rows[2].contains("a:1=1"));
    assert!(rows[3].contains("read-write (write)") && rows[3].contains("b:2:write=1"));
    assert!(
        predicate::str::is_match(r"^java:semaphore\s+present\s+semaphore or latch, value 3\s")
            .expect("regex")
            .eval(rows[4]),
        "{text}"
    );

    let output = cli(&server)
        .args(["status", "--json"])
        .args(names)
        .output()
        .expect("run status --json");
    let json = stdout_json(&output);
    assert_eq!(json[0]["holders"][0]["field"], java_field);
    assert_eq!(json[0]["holders"][0]["count"], 3);
    let ttl = json[0]["ttl_ms"].as_u64().expect("java:lock has a TTL");
    assert!(ttl > 0 && ttl <= 60_000);
    assert_eq!(json[1]["locked"], false);
    assert_eq!(json[2]["ttl_ms"], Json::Null, "no expiry is null");
    assert_eq!(json[3]["kind"], "read_write");
    assert_eq!(json[3]["mode"], "write");
    assert_eq!(json[4]["state"], "present");
    assert_eq!(json[4]["kind"], "semaphore_or_latch");
    assert_eq!(json[4]["count"], 3);
    assert_eq!(json[4]["locked"], false);
    assert_eq!(json[4]["redis_type"], "string");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_url_can_come_from_redis_url() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw.hset("cli:env", ("e:1", 1)).await.expect("HSET");

    AssertCommand::new(bin())
        .env("REDIS_URL", server.url())
        .args(["status", "cli:env"])
        .timeout(Duration::from_secs(20))
        .assert()
        .success()
        .stdout(predicate::str::contains("e:1=1"));
}

// status: the whole lock family, as Java Redisson lays it out ----------------------------------

/// A holder field as a Java client writes it.
const JAVA_FIELD: &str = "8c1e3a9e-4a4e-4f57-9f3c-2f1d0b7d6a11:57";

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    i64::try_from(since.as_millis()).expect("ms fit i64")
}

/// `ferrisson status ARGS`: its exit code and stdout (stderr when it has no stdout).
fn status_text(server: &RedisServer, args: &[&str]) -> (Option<i32>, String, String) {
    let output = cli(server)
        .arg("status")
        .args(args)
        .output()
        .expect("run status");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `ferrisson --json status ARGS`, which must succeed: its array of objects.
fn status_json(server: &RedisServer, args: &[&str]) -> Vec<Json> {
    let output = cli(server)
        .args(["--json", "status"])
        .args(args)
        .output()
        .expect("run status --json");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    match stdout_json(&output) {
        Json::Array(objects) => objects,
        other => panic!("not an array: {other}"),
    }
}

/// The table row of `name` in `text`.
fn row<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|line| line.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no row for {name}: {text}"))
}

/// The indented lines under the heading that starts with `heading` in `text`.
fn section<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|line| !line.starts_with(heading))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .collect()
}

async fn raw_cmd(
    raw: &fred::clients::Client,
    command: fred::types::CustomCommand,
    args: Vec<Value>,
) {
    let _: Value = raw.custom(command, args).await.expect("raw command");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_fenced_lock_with_its_token_held_or_free() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // §7: the lock hash as RLock's, plus the token counter redisson_lock_token:{N} (no TTL).
    let _: () = raw.hset("fence", (JAVA_FIELD, 1)).await.expect("HSET");
    let _: () = raw.pexpire("fence", 30_000, None).await.expect("PEXPIRE");
    let _: () = raw
        .set("redisson_lock_token:{fence}", "17", None, None, false)
        .await
        .expect("SET");
    // Released since: the token stays.
    let _: () = raw
        .set("redisson_lock_token:{gone}", "4", None, None, false)
        .await
        .expect("SET");

    let (code, text, _) = status_text(&server, &["fence", "gone"]);
    assert_eq!(code, Some(0), "{text}");
    let held = row(&text, "fence");
    assert!(
        held.contains(" locked ")
            && held.contains("fenced, token 17")
            && held.contains(&format!("{JAVA_FIELD}=1")),
        "{text}"
    );
    assert!(
        row(&text, "gone").contains(" free ") && row(&text, "gone").contains("fenced, token 4"),
        "{text}"
    );

    let json = status_json(&server, &["fence", "gone"]);
    assert_eq!(
        (&json[0]["kind"], &json[0]["token"], &json[0]["state"]),
        (
            &Json::from("fenced"),
            &Json::from(17),
            &Json::from("locked")
        )
    );
    assert_eq!(json[0]["holders"][0]["field"], JAVA_FIELD);
    assert_eq!(
        (&json[1]["kind"], &json[1]["token"], &json[1]["locked"]),
        (&Json::from("fenced"), &Json::from(4), &Json::from(false))
    );
    assert_eq!(
        (&json[1]["state"], &json[1]["redis_type"]),
        (&Json::from("free"), &Json::Null),
        "the lock key is gone"
    );

    // Before its first token a fenced lock is a plain hash: --kind says what it is.
    let _: () = raw.hset("young", (JAVA_FIELD, 1)).await.expect("HSET");
    let json = status_json(&server, &["--kind", "fenced", "young"]);
    assert_eq!(
        (&json[0]["kind"], &json[0]["token"]),
        (&Json::from("fenced"), &Json::Null)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_fair_locks_queue_in_order_with_deadlines_and_stale_waiters() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let now = now_ms();
    // §4.1: the holder hash, the queue (list of fields) and the deadlines (zset, epoch ms).
    let _: () = raw.hset("fair", (JAVA_FIELD, 1)).await.expect("HSET");
    let _: () = raw.pexpire("fair", 30_000, None).await.expect("PEXPIRE");
    let _: () = raw
        .rpush("redisson_lock_queue:{fair}", vec!["w:1", "w:2", "w:3"])
        .await
        .expect("RPUSH");
    raw_cmd(
        &raw,
        cmd!("ZADD"),
        vec![
            "redisson_lock_timeout:{fair}".into(),
            (now + 330_000).to_string().into(),
            "w:1".into(),
            (now - 5_000).to_string().into(),
            "w:2".into(),
            (now + 600_000).to_string().into(),
            "w:3".into(),
        ],
    )
    .await;

    let (code, text, _) = status_text(&server, &["fair"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(row(&text, "fair").contains("fair, 3 queued"), "{text}");
    let queue = section(&text, "`fair` queue, in order (3 queued):");
    assert_eq!(queue.len(), 3, "{text}");
    for (line, (n, field)) in queue.iter().zip([(1, "w:1"), (2, "w:2"), (3, "w:3")]) {
        assert!(
            line.trim_start().starts_with(&format!("{n}.")) && line.contains(field),
            "{text}"
        );
    }
    assert!(
        queue[0].contains("deadline in 5m 2") || queue[0].contains("deadline in 5m 3"),
        "{text}"
    );
    assert!(queue[1].contains("stale"), "{text}");
    assert!(
        queue[2].contains("deadline in 9m") || queue[2].contains("deadline in 10m"),
        "{text}"
    );
    assert!(
        !queue[0].contains("stale") && !queue[2].contains("stale"),
        "{text}"
    );

    let json = status_json(&server, &["fair"]);
    let waiters = json[0]["waiters"].as_array().expect("waiters");
    let fields: Vec<&str> = waiters.iter().filter_map(|w| w["field"].as_str()).collect();
    assert_eq!(fields, ["w:1", "w:2", "w:3"]);
    assert_eq!(waiters[0]["deadline_ms"], now + 330_000);
    let stale: Vec<bool> = waiters
        .iter()
        .filter_map(|w| w["stale"].as_bool())
        .collect();
    assert_eq!(stale, [false, true, false]);
    let left = waiters[0]["remaining_ms"].as_u64().expect("remaining_ms");
    assert!((300_000..=330_000).contains(&left), "{left}");
    assert_eq!(waiters[1]["remaining_ms"], 0);
    assert_eq!(
        (&json[0]["kind"], &json[0]["queued"]),
        (&Json::from("fair"), &Json::from(3))
    );

    // A fair lock without waiters is a plain hash: --kind fair says what it is.
    let _: () = raw.hset("calm", (JAVA_FIELD, 1)).await.expect("HSET");
    let json = status_json(&server, &["--kind", "fair", "calm"]);
    assert_eq!(
        (&json[0]["kind"], &json[0]["queued"]),
        (&Json::from("fair"), &Json::from(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_read_write_locks_writer_and_readers_with_their_hold_ttls() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // §5.1: a read lock with two readers; r:1 holds twice (both timeout keys alive), r:2
    // once with its timeout key gone.
    let _: () = raw
        .hset("rw", vec![("mode", "read"), ("r:1", "2"), ("r:2", "1")])
        .await
        .expect("HSET");
    let _: () = raw.pexpire("rw", 40_000, None).await.expect("PEXPIRE");
    for (hold, ttl) in [(1, 40_000), (2, 20_000)] {
        let _: () = raw
            .set(
                format!("{{rw}}:r:1:rwlock_timeout:{hold}"),
                "1",
                Some(Expiration::PX(ttl)),
                None,
                false,
            )
            .await
            .expect("SET");
    }
    // A write lock whose writer also took a read lock (read-while-writing).
    let writer = format!("{JAVA_FIELD}:write");
    let _: () = raw
        .hset(
            "wr",
            vec![("mode", "write"), (writer.as_str(), "1"), (JAVA_FIELD, "1")],
        )
        .await
        .expect("HSET");
    let _: () = raw.pexpire("wr", 30_000, None).await.expect("PEXPIRE");
    let _: () = raw
        .set(
            format!("{{wr}}:{JAVA_FIELD}:rwlock_timeout:1"),
            "1",
            Some(Expiration::PX(30_000)),
            None,
            false,
        )
        .await
        .expect("SET");

    let (code, text, _) = status_text(&server, &["rw", "wr"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        row(&text, "rw").contains("read-write (read)") && row(&text, "rw").contains("r:1=2, r:2=1"),
        "{text}"
    );
    assert!(
        row(&text, "wr").contains("read-write (write)")
            && row(&text, "wr").contains(&format!("{writer}=1")),
        "{text}"
    );
    let reads = section(&text, "`rw` read holds");
    assert_eq!(reads.len(), 2, "{text}");
    assert!(
        predicate::str::is_match(r"r:1\s+count 2\s+hold 1: (39|40)\.\ds, hold 2: (19|20)\.\ds$")
            .expect("regex")
            .eval(reads[0]),
        "{text}"
    );
    assert!(
        reads[1].contains("r:2") && reads[1].ends_with("hold 1: gone"),
        "{text}"
    );
    let reads = section(&text, "`wr` read holds");
    assert_eq!(reads.len(), 1, "only the writer's read hold: {text}");
    assert!(reads[0].starts_with(&format!("  {JAVA_FIELD} ")), "{text}");

    let json = status_json(&server, &["rw", "wr"]);
    assert_eq!(
        (&json[0]["kind"], &json[0]["mode"]),
        (&Json::from("read_write"), &Json::from("read"))
    );
    let r1 = &json[0]["holders"][0];
    assert_eq!(
        (&r1["field"], &r1["count"]),
        (&Json::from("r:1"), &Json::from(2))
    );
    let holds = r1["read_holds"].as_array().expect("read holds");
    assert_eq!(holds.len(), 2);
    let ttl = holds[1]["ttl_ms"].as_u64().expect("hold 2 has a TTL");
    assert!((15_000..=20_000).contains(&ttl), "{ttl}");
    assert_eq!(
        json[0]["holders"][1]["read_holds"],
        serde_json::json!([{ "hold": 1, "exists": false, "ttl_ms": null }])
    );
    assert_eq!(json[1]["mode"], "write");
    let holders = json[1]["holders"].as_array().expect("holders");
    let write = holders
        .iter()
        .find(|h| h["field"] == writer.as_str())
        .expect("the writer");
    assert_eq!(write["count"], 1);
    assert!(
        write.get("read_holds").is_none(),
        "a write hold has no timeout keys: {write}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_tells_a_semaphore_from_a_latch_only_when_told() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // §10.1 and §12.1: both are a string integer at N.
    let _: () = raw
        .set("counter", "5", Some(Expiration::PX(60_000)), None, false)
        .await
        .expect("SET");

    let (code, text, _) = status_text(&server, &["counter"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        predicate::str::is_match(
            r"^counter\s+present\s+semaphore or latch, value 5\s+(59|60)\.\ds\s+-$"
        )
        .expect("regex")
        .eval(row(&text, "counter")),
        "{text}"
    );
    let (_, text, _) = status_text(&server, &["--kind", "semaphore", "counter"]);
    assert!(
        row(&text, "counter").contains(" semaphore, 5 permits "),
        "{text}"
    );
    let (_, text, _) = status_text(&server, &["--kind", "latch", "counter", "missing"]);
    assert!(row(&text, "counter").contains(" latch, count 5 "), "{text}");
    assert!(
        predicate::str::is_match(r"^missing\s+absent\s+latch, count 0\s+-\s+-$")
            .expect("regex")
            .eval(row(&text, "missing")),
        "a missing latch reads as count 0, as Redisson's getCount: {text}"
    );

    let json = status_json(&server, &["counter"]);
    assert_eq!(
        (
            &json[0]["kind"],
            &json[0]["count"],
            &json[0]["state"],
            &json[0]["locked"]
        ),
        (
            &Json::from("semaphore_or_latch"),
            &Json::from(5),
            &Json::from("present"),
            &Json::from(false)
        )
    );
    let ttl = json[0]["ttl_ms"].as_u64().expect("a TTL");
    assert!((55_000..=60_000).contains(&ttl), "{ttl}");
    let json = status_json(&server, &["--kind", "semaphore", "counter", "missing"]);
    assert_eq!(
        (&json[0]["kind"], &json[0]["count"]),
        (&Json::from("semaphore"), &Json::from(5))
    );
    assert_eq!(
        (&json[1]["kind"], &json[1]["state"], &json[1]["count"]),
        (&Json::from("semaphore"), &Json::from("absent"), &Json::Null)
    );
    let json = status_json(&server, &["--kind", "latch", "counter"]);
    assert_eq!(json[0]["kind"], "latch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_permits_out_with_ids_in_both_formats() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let now = now_ms();
    // §11: available permits at N, permits out in {N}:timeout; Redisson >= 3.17 stores a raw
    // 16-byte id, 3.16 its 32-character hex string; 922337203685477 means never.
    let raw_id: Vec<u8> = vec![
        0x00, 0xff, 0x10, 0x80, 0x7f, 0xc3, 0x28, 0xa1, 0x01, 0x02, 0x03, 0x04, 0xfe, 0xed, 0xbe,
        0xef,
    ];
    let _: () = raw
        .set("permits", "2", None, None, false)
        .await
        .expect("SET");
    raw_cmd(
        &raw,
        cmd!("ZADD"),
        vec![
            "{permits}:timeout".into(),
            (now + 60_000).to_string().into(),
            Value::Bytes(raw_id.into()),
            "922337203685477".into(),
            "0123456789abcdef0123456789abcdef".into(),
            (now - 1_000).to_string().into(),
            "fedcba9876543210fedcba9876543210".into(),
        ],
    )
    .await;

    let (code, text, _) = status_text(&server, &["permits"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        row(&text, "permits").contains(" permit-semaphore, 2 available, 3 out "),
        "inferred from the permits out: {text}"
    );
    let permits = section(&text, "`permits` permits out (3):");
    assert_eq!(permits.len(), 3, "{text}");
    // Soonest expiry first: the expired 3.16 permit, the raw one, the one that never expires.
    assert!(
        permits[0].contains("fedcba9876543210fedcba9876543210")
            && permits[0].contains("hex-string id (Redisson 3.16)")
            && permits[0].contains("expired"),
        "{text}"
    );
    assert!(
        permits[1].contains("00ff10807fc328a101020304feedbeef")
            && permits[1].contains("raw id (Redisson >= 3.17)")
            && permits[1].contains("expires in 5"),
        "{text}"
    );
    assert!(
        permits[2].contains("0123456789abcdef0123456789abcdef")
            && permits[2].contains("never expires"),
        "{text}"
    );

    let json = status_json(&server, &["permits"]);
    assert_eq!(
        (&json[0]["kind"], &json[0]["count"], &json[0]["permits_out"]),
        (
            &Json::from("permit_semaphore"),
            &Json::from(2),
            &Json::from(3)
        )
    );
    let permits = json[0]["permits"].as_array().expect("permits");
    let ids: Vec<(&str, &str, bool)> = permits
        .iter()
        .map(|p| {
            (
                p["id"].as_str().expect("id"),
                p["id_format"].as_str().expect("format"),
                p["expired"].as_bool().expect("expired"),
            )
        })
        .collect();
    assert_eq!(
        ids,
        [
            ("fedcba9876543210fedcba9876543210", "hex", true),
            ("00ff10807fc328a101020304feedbeef", "raw", false),
            ("0123456789abcdef0123456789abcdef", "hex", false),
        ]
    );
    assert_eq!(permits[1]["expires_ms"], now + 60_000);
    assert_eq!(
        (&permits[2]["expires_ms"], &permits[2]["remaining_ms"]),
        (&Json::Null, &Json::Null)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_key_contradicts_is_a_clear_error() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw.hset("lock", (JAVA_FIELD, 1)).await.expect("HSET");
    let _: () = raw
        .hset("rw", vec![("mode", "read"), ("r:1", "1")])
        .await
        .expect("HSET");
    let _: () = raw.set("count", "3", None, None, false).await.expect("SET");
    let _: () = raw.rpush("list", "a").await.expect("RPUSH");

    let cases = [
        (
            ["--kind", "latch", "lock"],
            "`lock` is a lock (a hash of holder fields, without a `mode` field), not a count-down latch",
        ),
        (
            ["--kind", "read-write", "lock"],
            "`lock` is a lock (a hash of holder fields, without a `mode` field), not a read-write lock",
        ),
        (
            ["--kind", "fair", "rw"],
            "`rw` is a read-write lock (a hash with a `mode` field), not a fair lock",
        ),
        (
            ["--kind", "lock", "count"],
            "`count` is a semaphore or count-down latch (a string integer), not a lock",
        ),
    ];
    for (args, message) in cases {
        let output = cli(&server)
            .arg("status")
            .args(args)
            .output()
            .expect("run status");
        let whole = format!("cannot read `{}` as --kind {}: {message}", args[2], args[1]);
        one_error_line(&output, 2, &regex_escape(&whole));
        let output = cli(&server)
            .args(["--json", "status"])
            .args(args)
            .output()
            .expect("run status --json");
        assert_eq!(output.status.code(), Some(2));
        assert_eq!(stdout_json(&output)["error"]["kind"], "invalid_argument");
    }

    // A key that is no primitive of the family at all stays "not a lock" (65), whatever --kind.
    let (code, text, stderr) = status_text(&server, &["--kind", "latch", "list"]);
    assert_eq!(code, Some(65), "{text}");
    assert!(row(&text, "list").contains(" not-a-lock "), "{text}");
    assert!(
        stderr.contains("key `list` is a list, not a lock"),
        "{stderr}"
    );
    // A missing key agrees with every kind.
    for kind in [
        "lock",
        "fair",
        "fenced",
        "read-write",
        "semaphore",
        "permit-semaphore",
        "latch",
    ] {
        let (code, text, _) = status_text(&server, &["--kind", kind, "nothing"]);
        assert_eq!(code, Some(0), "--kind {kind}: {text}");
    }
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$`".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auxiliary_keys_of_the_wrong_type_are_not_read_as_the_familys() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw.hset("odd", (JAVA_FIELD, 1)).await.expect("HSET");
    // Not a queue, not deadlines, not a token, not permits: keys of other types at those names.
    let _: () = raw
        .set("redisson_lock_queue:{odd}", "x", None, None, false)
        .await
        .expect("SET");
    let _: () = raw
        .hset("redisson_lock_timeout:{odd}", ("a", "b"))
        .await
        .expect("HSET");
    let _: () = raw
        .rpush("redisson_lock_token:{odd}", "1")
        .await
        .expect("RPUSH");
    let _: () = raw.sadd("{odd}:timeout", "p").await.expect("SADD");

    let json = status_json(&server, &["odd"]);
    assert_eq!(json[0]["kind"], "reentrant", "{json:?}");
    assert_eq!(
        (
            &json[0]["queued"],
            &json[0]["token"],
            &json[0]["permits_out"]
        ),
        (&Json::from(0), &Json::Null, &Json::from(0))
    );
    assert_eq!(json[0]["holders"][0]["count"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_a_counters_changes() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw
        .set("watched", "2", None, None, false)
        .await
        .expect("SET");
    let mut watch = Running::spawn(
        &server,
        &[
            "--json",
            "watch",
            "--kind",
            "semaphore",
            "--interval",
            "20ms",
            "watched",
        ],
    );
    let state = watch
        .line(Stream::Stdout, |line| line.contains("\"event\":\"state\""))
        .await;
    let state: Json = serde_json::from_str(&state).expect("JSON");
    assert_eq!(
        (&state["kind"], &state["count"]),
        (&Json::from("semaphore"), &Json::from(2))
    );
    let _: i64 = raw.decr("watched").await.expect("DECR");
    let changed = watch
        .line(Stream::Stdout, |line| {
            line.contains("\"event\":\"count_changed\"")
        })
        .await;
    let changed: Json = serde_json::from_str(&changed).expect("JSON");
    assert_eq!(
        (&changed["previous"], &changed["count"]),
        (&Json::from(2), &Json::from(1))
    );
    watch.signal(nix::sys::signal::Signal::SIGINT);
    assert!(watch.exit().await.success());
}

// run ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_holds_the_lock_while_the_command_runs_and_releases_it_after() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let name = "cli:run";

    let mut run = Running::spawn(
        &server,
        &["run", name, "--", "sh", "-c", "sleep 0.5; echo done"],
    );
    wait_locked(&raw, name).await;
    let fields = hgetall(&raw, name).await;
    assert_eq!(fields.len(), 1, "one holder: {fields:?}");
    assert_eq!(fields.values().next().map(String::as_str), Some("1"));
    let ttl = pttl(&raw, name).await;
    assert!(ttl > 0 && ttl <= 30_000, "watchdog lease, got {ttl}");

    let status = run.exit().await;
    assert_eq!(status.code(), Some(0));
    assert_eq!(run.stdout_seen, ["done"]);
    assert_eq!(exists(&raw, name).await, 0, "released before exiting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_with_the_commands_status() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;

    cli(&server)
        .args(["run", "cli:status", "--", "sh", "-c", "exit 7"])
        .assert()
        .code(7);
    cli(&server)
        .args(["run", "cli:status", "--", "sh", "-c", "kill -TERM $$"])
        .assert()
        .code(128 + 15);
    cli(&server)
        .args(["run", "cli:status", "--", "ferrisson-no-such-command"])
        .assert()
        .code(127)
        .stderr(predicate::str::contains(
            "cannot run `ferrisson-no-such-command`",
        ));
    assert_eq!(exists(&raw, "cli:status").await, 0, "every run released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_75_without_running_the_command_when_the_lock_stays_busy() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let guard = hold_with_lease(&client, "cli:busy", Duration::from_secs(30)).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("ran");
    let touch = format!("touch '{}'", marker.display());

    cli(&server)
        .args([
            "run", "--wait", "200ms", "cli:busy", "--", "sh", "-c", &touch,
        ])
        .assert()
        .code(75)
        .stderr(
            predicate::str::contains("ferrisson: error: `cli:busy` is locked by")
                .and(predicate::str::contains(guard.holder_field()))
                .and(predicate::str::contains("not acquired within --wait 200ms")),
        );
    let output = cli(&server)
        .args(["run", "--json", "--wait", "0", "cli:busy", "--"])
        .args(["sh", "-c", &touch])
        .output()
        .expect("run --wait 0");
    assert_eq!(output.status.code(), Some(75));
    let event: Json = serde_json::from_slice(&output.stderr).expect("one JSON event line");
    assert_eq!(event["event"], "not_acquired");
    assert!(!marker.exists(), "the command ran without the lock");

    guard.unlock().await.expect("release");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_of_one_lock_never_overlap() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    let script = format!(
        "echo \"start $0\" >> '{log}'; sleep 0.3; echo \"end $0\" >> '{log}'",
        log = log.display()
    );
    let mut runs: Vec<Running> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            Running::spawn(
                &server,
                &["run", "cli:serial", "--", "sh", "-c", &script, id],
            )
        })
        .collect();
    for run in &mut runs {
        assert_eq!(
            run.exit().await.code(),
            Some(0),
            "stderr: {:?}",
            run.stderr_seen
        );
    }

    let text = std::fs::read_to_string(&log).expect("read the log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "three runs, two lines each: {lines:?}");
    let mut ids: Vec<&str> = Vec::new();
    for pair in lines.chunks(2) {
        let id = pair[0].strip_prefix("start ").expect("a start line first");
        assert_eq!(pair[1], format!("end {id}"), "interleaved runs: {lines:?}");
        ids.push(id);
    }
    ids.sort_unstable();
    assert_eq!(ids, ["a", "b", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_reports_how_each_runner_acquired_and_released() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let name = "cli:events";
    let dir = tempfile::tempdir().expect("temp dir");
    let go = dir.path().join("go");
    let first_script = format!(
        "while [ ! -e '{go}' ]; do sleep 0.02; done",
        go = go.display()
    );

    let mut first = Running::spawn(
        &server,
        &["run", "--json", name, "--", "sh", "-c", &first_script],
    );
    let acquired = first.event("acquired").await;
    assert_eq!(acquired["woken_by"], "immediate");
    assert_eq!(acquired["name"], name);
    let field = acquired["field"].as_str().expect("holder field").to_owned();
    assert_eq!(
        hgetall(&raw, name).await.keys().collect::<Vec<_>>(),
        [&field],
        "the event names the field written in Redis"
    );

    // The first runner listens for the loss of its lock on the lock's channel; the second
    // runner's subscription comes on top of that one.
    wait_numsub(&raw, &channel_of(name), 1, PROMPTLY).await;
    let mut second = Running::spawn(&server, &["run", "--json", name, "--", "true"]);
    wait_numsub(&raw, &channel_of(name), 2, PROMPTLY).await; // the second runner is waiting
    std::fs::write(&go, b"").expect("let the first command finish");

    assert_eq!(first.exit().await.code(), Some(0));
    assert_eq!(first.events(), ["acquired", "exited", "released"]);
    assert_eq!(second.exit().await.code(), Some(0));
    assert_eq!(second.events(), ["acquired", "exited", "released"]);
    let acquired = second.event_seen("acquired");
    assert_eq!(
        acquired["woken_by"], "message",
        "woken by the first release"
    );
    assert!(acquired["waited_ms"].as_u64().is_some());
}

impl Running {
    /// An event line already read (after [`Running::exit`]).
    fn event_seen(&self, event: &str) -> Json {
        self.stderr_seen
            .iter()
            .filter_map(|line| serde_json::from_str::<Json>(line).ok())
            .find(|json| json["event"] == event)
            .unwrap_or_else(|| panic!("no {event} event in {:?}", self.stderr_seen))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_is_forwarded_to_the_command_and_the_lock_released() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let name = "cli:sigterm";

    let mut run = Running::spawn(&server, &["run", "--json", name, "--", "sleep", "30"]);
    run.event("acquired").await;
    wait_locked(&raw, name).await;
    run.signal(nix::sys::signal::Signal::SIGTERM);

    let status = run.exit().await;
    assert_eq!(
        status.code(),
        Some(128 + 15),
        "sleep died of the forwarded SIGTERM"
    );
    assert_eq!(exists(&raw, name).await, 0, "released before exiting");
    let exited = run.event_seen("exited");
    assert_eq!(exited["signal"], 15);
    assert_eq!(run.events(), ["acquired", "exited", "released"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_while_waiting_for_the_lock_ends_the_wait_without_running_the_command() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let guard = hold_with_lease(&client, "cli:sigint", Duration::from_secs(30)).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("ran");

    let mut run = Running::spawn(
        &server,
        &[
            "run",
            "cli:sigint",
            "--",
            "touch",
            &marker.display().to_string(),
        ],
    );
    wait_numsub(&raw, &channel_of("cli:sigint"), 1, PROMPTLY).await;
    run.signal(nix::sys::signal::Signal::SIGINT);

    assert_eq!(run.exit().await.code(), Some(128 + 2));
    assert!(!marker.exists(), "the command ran after the interrupt");
    assert!(
        run.stderr_seen
            .iter()
            .any(|l| l.contains("SIGINT while waiting for `cli:sigint`")),
        "stderr: {:?}",
        run.stderr_seen
    );
    assert_eq!(
        hgetall(&raw, "cli:sigint").await.keys().collect::<Vec<_>>(),
        [guard.holder_field()],
        "the holder is untouched"
    );
    guard.unlock().await.expect("release");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_is_reported_the_command_runs_on_and_ferrisson_exits_76() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let name = "cli:lost";

    let mut run = Running::spawn(
        &server,
        &[
            "run",
            "--json",
            "--watchdog-timeout",
            "300ms",
            name,
            "--",
            "sh",
            "-c",
            "sleep 1; echo finished",
        ],
    );
    run.event("acquired").await;
    let _: i64 = raw.del(name).await.expect("DEL the lock behind its holder");
    let lost = run.event("lost").await;
    assert_eq!(lost["exit_status"], 76);

    assert_eq!(
        run.exit().await.code(),
        Some(76),
        "the command succeeded, unprotected"
    );
    assert_eq!(run.stdout_seen, ["finished"]);
    assert_eq!(
        run.events(),
        ["acquired", "lost", "exited"],
        "nothing to release"
    );
    assert_eq!(run.event_seen("exited")["code"], 0);
    // Every stderr line is JSON, and the loss is told once, by the `lost` event: the library's
    // own lost-lease warning is off by default (`the_loss_is_told_once_unless_rust_log_asks`).
    let lines: Vec<Json> = run
        .stderr_seen
        .iter()
        .map(|line| serde_json::from_str(line).expect("every stderr line is JSON"))
        .collect();
    assert!(
        !lines.iter().any(|line| line["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("lock lease lost"))),
        "stderr: {:?}",
        run.stderr_seen
    );
}

/// Issue 24 (defects 0.2 and 0.3): Redis is killed (-9) while `run --json` holds a lock with a
/// short watchdog lease, and comes back empty; another owner takes the lock at once; CMD ends
/// before the lease would, and ferrisson's release fails with "Connection closed unexpectedly":
/// its connections are not back yet (in the issue because of the reconnect back-off; here
/// ferrisson reaches the server through a proxy that is gone, so that the timing is the
/// test's). Nothing shows that the lock lasted until CMD ended, so ferrisson exits 76, not
/// CMD's 0, says why in a `release_failed` event and a `lost` one, and prints nothing on stderr
/// that is not JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_unknown_outcome_after_a_restart_exits_76_with_json_events_only() {
    let mut server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let name = "cli:restarted";
    let dir = tempfile::tempdir().expect("temp dir");
    let go = dir.path().join("go");
    let script = format!(
        "while [ ! -e '{go}' ]; do sleep 0.02; done",
        go = go.display()
    );
    let mut run = Running::spawn_at(
        &proxy.url(),
        &[],
        &[
            "--connect-timeout",
            "500ms",
            "run",
            "--json",
            "--watchdog-timeout",
            "3s",
            name,
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    run.event("acquired").await;
    // From here ferrisson cannot reach the server, also after the restart.
    proxy.close().await;
    server.kill();
    let killed = tokio::time::Instant::now();
    server.restart();
    let client = connect(&server).await;
    let other = client
        .lock(name)
        .with_owner(Owner::new())
        .try_lock()
        .await
        .expect("try_lock")
        .acquired()
        .expect("the restarted server is empty: another owner takes the lock at once");
    // CMD ends 1.2 s after the kill, as in the issue, well within the lease: ferrisson's
    // client knows by then that its connections are gone, so the release fails at once.
    tokio::time::sleep_until(killed + Duration::from_millis(1200)).await;
    std::fs::write(&go, b"").expect("let the command end");

    let status = run.exit().await;
    assert_eq!(
        status.code(),
        Some(76),
        "the command succeeded, but its lock cannot be shown to have lasted; stderr: {:?}",
        run.stderr_seen
    );
    assert_eq!(
        run.events(),
        ["acquired", "exited", "release_failed", "lost"],
        "the loss is found at the release, after the command ended"
    );
    assert_eq!(run.event_seen("exited")["code"], 0);
    let failed = run.event_seen("release_failed");
    assert_eq!(failed["name"], name);
    assert_eq!(failed["error"]["kind"], "release_unknown");
    assert!(
        failed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown outcome (Connection closed unexpectedly.)")),
        "{failed}"
    );
    // Redis was not reached again before the lease end: the settling could not read the hold.
    assert_eq!(failed["may_remain"], true, "{failed}");
    assert_eq!(run.event_seen("lost")["exit_status"], 76);
    for line in &run.stderr_seen {
        assert!(
            serde_json::from_str::<Json>(line).is_ok_and(|json| json.is_object()),
            "a stderr line that is not a JSON object: {line:?}; stderr: {:?}",
            run.stderr_seen
        );
    }
    let raw = raw_client(&server.url()).await;
    assert_eq!(
        hgetall(&raw, name).await.keys().collect::<Vec<_>>(),
        [other.holder_field()],
        "the other owner's hold is untouched"
    );
    other.unlock().await.expect("the other owner releases");
    client.shutdown().await;
}

/// Under `run --json`, an unusable RUST_LOG is warned of as a JSON log line like the library's,
/// not as text: stderr is all JSON. Without `--json` the warning stays one line of text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_rust_log_is_a_json_warning_under_json() {
    let server = RedisServer::start();
    let output = cli(&server)
        .env("RUST_LOG", "[")
        .args(["run", "--json", "cli:rust-log", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<Json> = stderr
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|err| panic!("not JSON ({err}): {line:?}; stderr: {stderr}"))
        })
        .collect();
    assert!(
        lines.iter().any(|line| line["level"] == "WARN"
            && line["fields"]["rust_log"] == "["
            && line["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("ignoring RUST_LOG"))),
        "stderr: {stderr}"
    );
    assert_eq!(
        lines
            .iter()
            .filter_map(|line| line["event"].as_str())
            .collect::<Vec<_>>(),
        ["acquired", "exited", "released"]
    );

    let output = cli(&server)
        .env("RUST_LOG", "[")
        .args(["run", "cli:rust-log", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "ferrisson: warning: ignoring RUST_LOG `[` (invalid filter directive); using the \
         default, warn,fred=error,ferrisson::lease_lost=off\n"
    );
}

/// Runs `ferrisson run --verbose --watchdog-timeout 300ms EXTRA... NAME -- COMMAND...` with
/// `env`, deletes the lock behind it once it says it has taken it, and waits for it to exit. Its
/// own report, not the key, says when: a key polled for could expire unseen in a stall, and a
/// lease that lapses before the `DEL` ends in the same loss.
async fn run_and_lose(
    server: &RedisServer,
    env: &[(&str, &str)],
    extra: &[&str],
    name: &str,
    command: &[&str],
) -> (Running, ExitStatus) {
    let raw = raw_client(&server.url()).await;
    let mut args = vec!["run", "--verbose", "--watchdog-timeout", "300ms"];
    args.extend_from_slice(extra);
    args.extend([name, "--"]);
    args.extend_from_slice(command);
    let mut run = Running::spawn_with_env(server, env, &args);
    let acquired = format!("ferrisson: acquired `{name}` ");
    run.line(Stream::Stderr, |line| line.starts_with(&acquired))
        .await;
    let _: i64 = raw.del(name).await.expect("DEL the lock behind its holder");
    let status = run.exit().await;
    (run, status)
}

/// A lost lease is told once, by the tool's own line: without RUST_LOG the library's warnings
/// are shown but for its lost-lease one (`ferrisson::lease_lost=off` in the default filter),
/// which a RUST_LOG that selects the crate's warnings shows besides; RUST_LOG=off silences the
/// log but not the message or the exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loss_is_told_once_unless_rust_log_asks() {
    let server = RedisServer::start();
    for (env, logged) in [
        (&[][..], false),
        (&[("RUST_LOG", "ferrisson=warn")][..], true),
        (&[("RUST_LOG", "off")][..], false),
    ] {
        let name = "cli:lost-log";
        let (run, status) = run_and_lose(&server, env, &[], name, &["sleep", "1"]).await;
        assert_eq!(status.code(), Some(76), "env {env:?}");
        let warned = run.stderr_seen.iter().any(|l| {
            l.contains(" WARN ferrisson::lease_lost: lock lease lost") && l.contains(name)
        });
        assert_eq!(warned, logged, "env {env:?}, stderr: {:?}", run.stderr_seen);
        assert!(
            run.stderr_seen.iter().any(|l| {
                l
                == "ferrisson: warning: lost the lock `cli:lost-log` (its lease ran out or it was \
                    force-unlocked); the command keeps running without it; exit status 76"
            }),
            "stderr: {:?}",
            run.stderr_seen
        );
    }
}

/// RUST_LOG selects the library's events: `ferrisson=debug` shows its debug events (text, or
/// JSON lines with --json); stdout stays clean JSON; without RUST_LOG, nothing below warnings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_log_shows_debug_events_on_stderr_only() {
    let server = RedisServer::start();

    let output = cli(&server)
        .env("RUST_LOG", "ferrisson=debug")
        .args(["status", "cli:log"])
        .output()
        .expect("run status");
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(" DEBUG ferrisson::client: ferrisson client connected")),
        "stderr: {stderr}"
    );

    let output = cli(&server)
        .env("RUST_LOG", "ferrisson=debug")
        .args(["--json", "status", "cli:log"])
        .output()
        .expect("run status --json");
    assert!(output.status.success());
    assert_eq!(
        stdout_json(&output)[0]["state"],
        "free",
        "stdout is the JSON alone"
    );
    let logs: Vec<Json> = String::from_utf8_lossy(&output.stderr)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON log line"))
        .collect();
    assert!(
        logs.iter().any(
            |l| l["level"] == "DEBUG" && l["fields"]["message"] == "ferrisson client connected"
        ),
        "logs: {logs:?}"
    );

    cli(&server)
        .args(["status", "cli:log"])
        .assert()
        .success()
        .stderr(predicate::str::is_empty());
    // fred's own warnings (here: a password the server does not need) are not shown by default.
    cli_offline()
        .args([
            "--url",
            &format!("redis://:unneeded@127.0.0.1:{}", server.port()),
        ])
        .args(["status", "cli:log"])
        .assert()
        .success()
        .stderr(predicate::str::is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_on_lost_terminates_the_command_when_the_lock_is_lost() {
    let server = RedisServer::start();
    let name = "cli:kill-on-lost";
    let (run, status) =
        run_and_lose(&server, &[], &["--kill-on-lost"], name, &["sleep", "30"]).await;

    assert_eq!(
        status.code(),
        Some(76),
        "lost, whatever the command's status"
    );
    assert!(
        run.stderr_seen
            .iter()
            .any(|l| l.contains("lost the lock `cli:kill-on-lost`")
                && l.contains("sending the command SIGTERM")
                && l.ends_with("exit status 76")),
        "stderr: {:?}",
        run.stderr_seen
    );
}

// holder processes killed and paused (issue 13) -----------------------------------------------

/// A holder process killed with SIGKILL cannot release: its lock frees at the end of the lease
/// it was last renewed for, and a waiter in another process takes it then, woken by the TTL it
/// parked on (there is no unlock message), within a few round trips of the lease end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_its_lock_at_the_lease_end() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let name = "cli:holder-killed";
    // At least two thirds of it are left at the kill: the waiter parks well before it ends.
    let watchdog = Duration::from_secs(3);

    let mut run = Running::spawn(
        &server,
        &[
            "run",
            "--json",
            "--watchdog-timeout",
            "3s",
            name,
            "--",
            "sleep",
            "5",
        ],
    );
    run.event("acquired").await;
    let mut slowest = support::round_trip(&client).await;
    run.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = std::time::Instant::now();
    let waiter = client.lock(name).with_owner(Owner::new());
    let acquire = waiter.try_lock_within(Duration::from_secs(10));
    tokio::pin!(acquire);
    // Round trips through the client are measured all along the wait (every 20 ms), so that
    // the slowest reflects the load at the lease end too.
    let attempt = loop {
        let sample = async {
            sleep(Duration::from_millis(20)).await;
            support::round_trip(&client).await
        };
        tokio::select! {
            attempt = &mut acquire => break attempt,
            rtt = sample => slowest = slowest.max(rtt),
        }
    };
    let took = killed.elapsed();
    let guard = attempt
        .expect("acquire")
        .acquired()
        .expect("the lock frees at the dead holder's lease end");
    // The key expires at most a lease after the kill. Then the waiter's timer (set from a TTL
    // in whole milliseconds, on a timer of millisecond resolution) fires and its retry takes the
    // lock: a few round trips, with room for 20 of the slowest measured.
    let bound = watchdog + slowest * 20 + Duration::from_millis(2);
    eprintln!("took {took:?}, bound {bound:?}");
    assert!(
        took <= bound,
        "the waiter got the lock {took:?} after the holder was killed (bound {bound:?}, \
         slowest round trip {slowest:?})"
    );
    assert_eq!(guard.acquisition().woken_by, ferrisson::WokenBy::Ttl);
    guard.unlock().await.expect("release");
}

/// A holder process paused (SIGSTOP) for longer than its lease: another owner takes the lock
/// meanwhile; when the holder runs again it learns of the loss at once and `--kill-on-lost`
/// stops its command. The overlap window (the command still running while another owner holds
/// the lock) is the pause beyond the lease plus the time to notice and signal: measured here
/// and documented in docs/reliability.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_lease_stops_its_command_on_resume() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let name = "cli:holder-paused";

    let mut run = Running::spawn(
        &server,
        &[
            "run",
            "--json",
            "--kill-on-lost",
            "--watchdog-timeout",
            "1s",
            name,
            "--",
            "sleep",
            "30",
        ],
    );
    run.event("acquired").await;
    run.signal(nix::sys::signal::Signal::SIGSTOP);
    let paused = std::time::Instant::now();
    let other = client
        .lock(name)
        .with_owner(Owner::new())
        .try_lock_within_with_lease(Duration::from_secs(10), Duration::from_secs(20))
        .await
        .expect("acquire")
        .acquired()
        .expect("another owner takes the lock from the paused holder");
    let overlap_from = std::time::Instant::now();
    sleep(Duration::from_millis(500)).await;
    run.signal(nix::sys::signal::Signal::SIGCONT);
    let resumed = std::time::Instant::now();

    run.event("lost").await;
    assert_eq!(run.exit().await.code(), Some(76), "the lock was lost");
    assert_eq!(
        run.event_seen("exited")["signal"],
        15,
        "the command got SIGTERM"
    );
    let stopped = std::time::Instant::now();
    let after_resume = stopped - resumed;
    assert!(
        after_resume < Duration::from_secs(1),
        "the command ran on for {after_resume:?} after the holder resumed"
    );
    eprintln!(
        "paused {:?} (lease 1 s); another owner in after {:?}; overlap window {:?}, of which \
         {after_resume:?} after the holder resumed",
        resumed - paused,
        overlap_from - paused,
        stopped - overlap_from,
    );
    other.unlock().await.expect("release");
}

// unlock ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_force_releases_a_foreign_lock_and_wakes_a_waiting_run() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "cli:force";
    let guard = hold_with_lease(&client, name, Duration::from_secs(30)).await;
    let holder = guard.holder_field().to_owned();

    let mut waiter = Running::spawn(&server, &["run", "--json", name, "--", "true"]);
    wait_numsub(&raw, &channel_of(name), 1, PROMPTLY).await;

    cli(&server)
        .args(["unlock", "--force", name])
        .assert()
        .success()
        .stdout(
            predicate::str::contains(format!("unlocked `{name}`"))
                .and(predicate::str::contains(format!("{holder}=1"))),
        );

    assert_eq!(waiter.exit().await.code(), Some(0));
    assert_eq!(waiter.event_seen("acquired")["woken_by"], "message");
    assert_eq!(exists(&raw, name).await, 0);

    cli(&server)
        .args(["unlock", "--force", "--json", name])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            r#"[{"name":"cli:force","released":false}]"#,
        ));
    drop(guard);
    client.shutdown().await;
}

/// In a task of its own: awaits `$acquire` (a library waiter), releases, and returns what woke
/// it.
macro_rules! waiter {
    ($acquire:expr) => {
        tokio::spawn(async move {
            let guard = $acquire.await.expect("the waiter acquires");
            let woken_by = guard.acquisition().woken_by;
            guard.unlock().await.expect("release");
            woken_by
        })
    };
}

/// `unlock --force` on `name` (held by someone else) while `waiter`, a library waiter of the
/// same kind, is parked on `channel`: Redisson's `message` is published on that channel and the
/// waiter wakes by it.
async fn force_unlock_wakes(
    server: &RedisServer,
    name: &str,
    channel: &str,
    message: &str,
    waiter: tokio::task::JoinHandle<ferrisson::WokenBy>,
) {
    let raw = raw_client(&server.url()).await;
    wait_numsub(&raw, channel, 1, PROMPTLY).await;
    let mut messages = support::sync::Messages::subscribe(server, channel).await;
    cli(server)
        .args(["unlock", "--force", "--json", name])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            r#"[{{"name":"{name}","released":true}}]"#
        )));
    assert_eq!(
        messages.next().await,
        message,
        "{name}: the message on {channel}"
    );
    let woken_by = timeout(PROMPTLY, waiter)
        .await
        .unwrap_or_else(|_| panic!("{name}: the waiter was not woken"))
        .expect("waiter task");
    assert_eq!(woken_by, ferrisson::WokenBy::Message, "{name}");
}

/// Each lock kind is force-released as its own primitive does: the fair lock tells its queue
/// head on the head's own channel, the read-write lock announces the side its mode names on
/// its own channel (0 read, 1 write), the fenced lock on the lock channel (its token goes on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_force_releases_each_kind_as_its_primitive_does_and_wakes_its_waiters() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let lease = Duration::from_secs(30);

    let name = "cli:fair";
    let fair = |owner| client.fair_lock(name).with_owner(owner);
    let held = fair(Owner::new()).lock_with_lease(lease).await;
    held.expect("fair").detach(); // force-released below
    let owner = Owner::new();
    let lock = fair(owner);
    let waiter = waiter!(lock.lock());
    let channel = format!(
        "redisson_lock__channel:{{{name}}}:{}:{}",
        client.id(),
        owner.id()
    );
    force_unlock_wakes(&server, name, &channel, "0", waiter).await;

    // The holder's side, and a waiter on the other side.
    for (name, mode, message) in [("cli:rw:read", "read", "0"), ("cli:rw:write", "write", "1")] {
        let holder = client.read_write_lock(name).with_owner(Owner::new());
        let other = client.read_write_lock(name).with_owner(Owner::new());
        let (read, write) = (holder.read_lock(), holder.write_lock());
        let held = match mode {
            "read" => read.lock_with_lease(lease).await.map(|held| held.detach()),
            _ => write.lock_with_lease(lease).await.map(|held| held.detach()),
        };
        held.expect("the holder's side");
        let (read, write) = (other.read_lock(), other.write_lock());
        let waiter = match mode {
            "read" => waiter!(write.lock()),
            _ => waiter!(read.lock()),
        };
        let channel = format!("redisson_rwlock:{{{name}}}");
        force_unlock_wakes(&server, name, &channel, message, waiter).await;
    }

    let name = "cli:fenced";
    let fenced = |owner| client.fenced_lock(name).with_owner(owner);
    let held = fenced(Owner::new()).lock_with_lease(lease).await;
    held.expect("fenced").detach(); // force-released below
    let lock = fenced(Owner::new());
    let waiter = waiter!(lock.lock());
    force_unlock_wakes(&server, name, &channel_of(name), "0", waiter).await;
    let token: Option<String> = raw
        .get("redisson_lock_token:{cli:fenced}")
        .await
        .expect("GET");
    assert_eq!(token.as_deref(), Some("2"), "the token sequence goes on");

    for name in ["cli:fair", "cli:rw:read", "cli:rw:write", "cli:fenced"] {
        assert_eq!(exists(&raw, name).await, 0, "{name} is released");
    }
    // Counters have no holder to break: left alone.
    let _: () = raw
        .set("cli:permits", 3, None, None, false)
        .await
        .expect("SET");
    cli(&server)
        .args(["unlock", "--force", "cli:permits"])
        .assert()
        .code(65);
    assert_eq!(exists(&raw, "cli:permits").await, 1);
    client.shutdown().await;
}

// watch ----------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_json_reports_acquire_reentry_release_and_stops_on_sigint() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let name = "cli:watch-json";
    let mut watch = Running::spawn(
        &server,
        &[
            "watch",
            "--json",
            "--interval",
            "50ms",
            "--for",
            "20s",
            name,
        ],
    );
    let first = watch.line(Stream::Stdout, |_| true).await;
    let state: Json = serde_json::from_str(&first).expect("JSON line");
    assert_eq!(state["event"], "state");
    assert_eq!(state["locked"], false);
    assert!(state["ts"].as_str().is_some_and(|ts| ts.ends_with('Z')));

    let lock = client.lock(name).with_owner(Owner::new());
    let outer = lock.lock().await.expect("acquire");
    let field = outer.holder_field().to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let inner = outer.reenter().await.expect("re-enter");
    tokio::time::sleep(Duration::from_millis(300)).await;
    inner.unlock().await.expect("partial release");
    tokio::time::sleep(Duration::from_millis(300)).await;
    outer.unlock().await.expect("release");

    watch
        .line(Stream::Stdout, |line| {
            line.contains(r#""event":"released""#)
        })
        .await;
    watch.signal(nix::sys::signal::Signal::SIGINT);
    assert_eq!(watch.exit().await.code(), Some(0));

    let events: Vec<Json> = watch
        .stdout_seen
        .iter()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect();
    let summary: Vec<(String, Json, Json)> = events
        .iter()
        .skip(1)
        .filter(|e| e["event"] != "renewed")
        .map(|e| {
            (
                e["event"].as_str().unwrap_or("?").to_owned(),
                e["field"].clone(),
                e["count"].clone(),
            )
        })
        .collect();
    let f = Json::from(field.as_str());
    assert_eq!(
        summary,
        [
            ("acquired".to_owned(), f.clone(), Json::from(1)),
            ("reentered".to_owned(), f.clone(), Json::from(2)),
            ("partially_released".to_owned(), f.clone(), Json::from(1)),
            ("released".to_owned(), f, Json::Null),
        ],
        "events: {events:?}"
    );
    client.shutdown().await;
}

/// The `event` of each JSON line `watch` printed after its first (the state), less renewals.
fn watch_events(watch: &Running) -> Vec<Json> {
    watch
        .stdout_seen
        .iter()
        .skip(1)
        .map(|line| serde_json::from_str::<Json>(line).expect("JSON line"))
        .filter(|e| e["event"] != "renewed")
        .collect()
}

/// Without keyspace events, watch hears the release channels: a hold far shorter than its
/// interval is seen by its release message, and a force unlock reads as a release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_hears_a_hold_shorter_than_its_interval_by_its_release_message() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let name = "cli:watch-short";
    let mut watch = Running::spawn(
        &server,
        &["watch", "--json", "--interval", "1h", "--for", "20s", name],
    );
    let first = watch.line(Stream::Stdout, |_| true).await;
    assert!(first.contains(r#""event":"state""#), "{first}");
    support::redis_state::wait_numsub(
        &raw_client(&server.url()).await,
        &format!("redisson_lock__channel:{{{name}}}"),
        1,
        Duration::from_secs(5),
    )
    .await;

    let lock = client.lock(name).with_owner(Owner::new());
    lock.lock()
        .await
        .expect("acquire")
        .unlock()
        .await
        .expect("release");
    let between = watch
        .line(Stream::Stdout, |l| l.contains("held_between_reads"))
        .await;
    let between: Json = serde_json::from_str(&between).expect("JSON line");
    assert_eq!(between["locked"], false, "{between}");

    // Read at once by the same message: the force unlock of a hold the interval never read.
    let guard = lock.lock().await.expect("acquire");
    assert!(lock.force_unlock().await.expect("force unlock"));
    watch
        .line(Stream::Stdout, |l| l.contains("held_between_reads"))
        .await;
    drop(guard);
    watch.signal(nix::sys::signal::Signal::SIGINT);
    assert_eq!(watch.exit().await.code(), Some(0));
    let events: Vec<_> = watch_events(&watch)
        .iter()
        .map(|e| e["event"].clone())
        .collect();
    assert_eq!(
        events,
        ["held_between_reads", "held_between_reads"],
        "{events:?}"
    );
    client.shutdown().await;
}

/// A token lock is watched as any lock: its token is its holder, its compare-and-delete a
/// release (a bare `DEL` too: nothing tells a token lock's force unlock from its release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_a_token_lock() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw
        .custom(cmd!("CONFIG"), vec!["SET", "notify-keyspace-events", "KA"])
        .await
        .expect("CONFIG SET");
    let client = connect(&server).await;
    let name = "cli:watch-token";
    let mut watch = Running::spawn(
        &server,
        &["watch", "--interval", "1h", "--for", "30s", name],
    );
    watch.line(Stream::Stdout, |l| l.ends_with("free")).await;
    support::redis_state::wait_numsub(
        &raw,
        &format!("__keyspace@0__:{name}"),
        1,
        Duration::from_secs(5),
    )
    .await;
    let lock = client.token_lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("acquire");
    let token = guard.holder_field().to_owned();
    watch
        .line(Stream::Stdout, |l| l.contains("acquired by"))
        .await;
    guard.unlock().await.expect("release");
    watch
        .line(Stream::Stdout, |l| l.contains("released by"))
        .await;
    // A peer's lock with a binary token (rslock's: 20 raw bytes, with a TTL).
    let binary: Vec<u8> = [0xffu8, b'x'].into_iter().chain(1..=18).collect();
    let _: () = raw
        .set(
            name,
            binary.as_slice(),
            Some(Expiration::PX(60_000)),
            None,
            false,
        )
        .await
        .expect("SET");
    watch
        .line(Stream::Stdout, |l| l.contains("acquired by"))
        .await;
    let _: i64 = raw.del(name).await.expect("DEL");
    watch
        .line(Stream::Stdout, |l| l.contains("released by"))
        .await;
    watch.signal(nix::sys::signal::Signal::SIGINT);
    assert_eq!(watch.exit().await.code(), Some(0));
    let binary_shown: String = std::iter::once("\\xffx".to_owned())
        .chain((1..=18).map(|byte| format!("\\x{byte:02x}")))
        .collect();
    let said: Vec<&str> = watch
        .stdout_seen
        .iter()
        .skip(1)
        .filter(|l| !l.contains("TTL renewed"))
        .map(|l| l.get(14..).unwrap_or(""))
        // Without the TTL an acquisition's line ends with.
        .map(|l| l.split(", TTL ").next().unwrap_or(l))
        .map(|l| l.trim_end_matches(", no expiry"))
        .collect();
    assert_eq!(
        said,
        [
            format!("acquired by {token} (hold count 1)"),
            format!("released by {token}"),
            format!("acquired by {binary_shown} (hold count 1)"),
            format!("released by {binary_shown}"),
        ],
        "{said:?}"
    );
    client.shutdown().await;
}

/// With keyspace events on, watch reads at every write: it tells a force unlock from a
/// release, and an expiry from both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_tells_releases_force_unlocks_and_expiries_apart_by_keyspace_events() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw
        .custom(cmd!("CONFIG"), vec!["SET", "notify-keyspace-events", "KA"])
        .await
        .expect("CONFIG SET");
    let client = connect(&server).await;
    let name = "cli:watch-keyspace";
    let mut watch = Running::spawn(
        &server,
        &["watch", "--interval", "1h", "--for", "30s", name],
    );
    let banner = watch.line(Stream::Stderr, |_| true).await;
    assert!(banner.contains("at each keyspace event"), "{banner}");
    watch.line(Stream::Stdout, |l| l.ends_with("free")).await;
    support::redis_state::wait_numsub(
        &raw,
        &format!("__keyspace@0__:{name}"),
        1,
        Duration::from_secs(5),
    )
    .await;

    // Read while held (the acquire's write is heard), then released.
    let lock = client.lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("acquire");
    let field = guard.holder_field().to_owned();
    watch
        .line(Stream::Stdout, |l| l.contains("acquired by"))
        .await;
    guard.unlock().await.expect("release");
    let released = watch
        .line(Stream::Stdout, |l| l.contains("released by"))
        .await;
    assert!(released.contains(&field), "{released}");

    // Re-entered, then deleted whoever held it.
    let guard = lock.lock().await.expect("acquire");
    watch
        .line(Stream::Stdout, |l| l.contains("acquired by"))
        .await;
    let again = guard.reenter().await.expect("re-enter");
    watch
        .line(Stream::Stdout, |l| l.contains("hold count 2"))
        .await;
    assert!(lock.force_unlock().await.expect("force unlock"));
    let forced = watch
        .line(Stream::Stdout, |l| l.contains("force-unlocked"))
        .await;
    assert!(forced.contains(&field), "{forced}");
    drop((again, guard));

    // A fixed lease that runs out.
    let _held = lock
        .lock_with_lease(Duration::from_millis(300))
        .await
        .expect("acquire");
    watch
        .line(Stream::Stdout, |l| l.contains("acquired by"))
        .await;
    watch.line(Stream::Stdout, |l| l.contains("expired")).await;

    watch.signal(nix::sys::signal::Signal::SIGINT);
    assert_eq!(watch.exit().await.code(), Some(0));
    let said: Vec<&str> = watch
        .stdout_seen
        .iter()
        .skip(1)
        .filter(|l| !l.contains("TTL renewed"))
        .map(|l| l.get(14..).unwrap_or(""))
        .collect();
    let expected = [
        format!("acquired by {field} (hold count 1)"),
        format!("released by {field}"),
        format!("acquired by {field} (hold count 1)"),
        format!("re-entered by {field} (hold count 2)"),
        format!("force-unlocked (deleted while {field} held it)"),
        format!("acquired by {field} (hold count 1)"),
        format!("expired: the lease of {field} ran out"),
    ];
    assert_eq!(said.len(), expected.len(), "{said:#?}");
    for (line, prefix) in said.iter().zip(&expected) {
        assert!(
            line.starts_with(prefix.as_str()),
            "{line:?} is not {prefix:?}: {said:#?}"
        );
    }
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_timestamped_changes_until_for_elapses() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let name = "cli:watch";
    let mut watch = Running::spawn(
        &server,
        &["watch", "--interval", "50ms", "--for", "1500ms", name],
    );
    let first = watch.line(Stream::Stdout, |_| true).await;
    assert!(is_timestamped(&first, "free"), "first line: {first:?}");

    let _: () = raw.hset(name, ("u:1", 1)).await.expect("HSET");
    let _: () = raw.pexpire(name, 10_000, None).await.expect("PEXPIRE");
    let acquired = watch.line(Stream::Stdout, |l| l.contains("acquired")).await;
    assert!(
        is_timestamped(&acquired, "acquired by u:1 (hold count 1), TTL "),
        "{acquired:?}"
    );
    let _: i64 = raw.del(name).await.expect("DEL");
    let released = watch.line(Stream::Stdout, |l| l.contains("released")).await;
    assert!(is_timestamped(&released, "released by u:1"), "{released:?}");

    assert_eq!(watch.exit().await.code(), Some(0), "--for ends the watch");
}

/// `HH:MM:SS.mmm  <text>`
fn is_timestamped(line: &str, text: &str) -> bool {
    let (time, rest) = line.split_at(line.len().min(12));
    let shape_ok = time.len() == 12
        && time.chars().enumerate().all(|(i, c)| match i {
            2 | 5 => c == ':',
            8 => c == '.',
            _ => c.is_ascii_digit(),
        });
    shape_ok && rest.strip_prefix("  ").is_some_and(|r| r.starts_with(text))
}

// flock(1)'s options -----------------------------------------------------------------------------

/// `run` takes flock(1)'s options: `-n` (no wait), `-w`/`--timeout` in plain seconds, `-E` (the
/// exit status of a conflict), `-c` (a command line for `sh -c`), `-s` (shared: Redisson's read
/// lock, beside other shared holders, excluding exclusive ones) and `-x` (exclusive, the
/// default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_takes_flocks_options() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let name = "cli:flock";
    let holder = hold_with_lease(&client, name, Duration::from_secs(20)).await;
    let run = |args: &[&str]| {
        let mut cmd = cli(&server);
        cmd.arg("run").args(args);
        cmd
    };
    run(&["-n", name, "--", "true"]).assert().code(75);
    run(&["-n", "-E", "9", name, "--", "true"]).assert().code(9);
    run(&["-x", "-n", "-E", "0", name, "--", "false"])
        .assert()
        .code(0);
    for wait in [["-w", "0.3"], ["--timeout", "0.3"]] {
        let started = std::time::Instant::now();
        run(&[wait[0], wait[1], "-E", "9", name, "--", "true"])
            .assert()
            .code(9);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300), "{wait:?}: {waited:?}");
    }
    holder.unlock().await.expect("release");
    // -c: the command line runs in `sh -c`, its status is run's.
    run(&["-n", name, "-c", "test \"$(echo held)\" = held && exit 3"])
        .assert()
        .code(3);
    assert_eq!(exists(&raw, name).await, 0, "released after the command");

    // -s: a read lock, held while the command runs, beside another shared holder.
    let shared = "cli:flock:shared";
    let mut first = Running::spawn(&server, &["run", "-s", shared, "-c", "echo held; sleep 2"]);
    first.line(Stream::Stdout, |line| line == "held").await;
    let mode: Option<String> = raw.hget(shared, "mode").await.expect("HGET");
    assert_eq!(mode.as_deref(), Some("read"));
    run(&["-s", "-n", shared, "--", "true"]).assert().code(0);
    run(&["-n", shared, "--", "true"])
        .assert()
        .code(75)
        .stderr(predicate::str::contains("not acquired"));
    let rw = client.read_write_lock(shared).with_owner(Owner::new());
    let write = rw.write_lock().try_lock().await.expect("try_lock");
    assert!(
        write.acquired().is_none(),
        "a writer got in beside `run -s`"
    );
    assert!(first.exit().await.success());
    assert_eq!(exists(&raw, shared).await, 0, "the read lock is released");
    // A shared run waits for an exclusive holder.
    let writer = rw.write_lock().lock().await.expect("write lock");
    run(&["-s", "-n", "-E", "9", shared, "--", "true"])
        .assert()
        .code(9);
    writer.unlock().await.expect("write release");

    // The README's idiom for a region of a shell script: a function, exported, run by bash.
    let script = format!(
        "region() {{ redis_check=held; echo \"in region: $redis_check\"; return 4; }}\n\
         export -f region\n\
         '{}' --url '{}' run -n {name} -- bash -c region\n\
         echo \"status $?\"",
        bin(),
        server.url()
    );
    let output = std::process::Command::new("bash")
        .args(["-c", &script])
        .env_remove("REDIS_URL")
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout, "in region: held\nstatus 4\n", "{output:?}");
}

// errors ---------------------------------------------------------------------------------------

#[test]
fn bad_arguments_exit_2_with_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["frobnicate", "x"], "unrecognized subcommand 'frobnicate'"),
        (
            &["run", "--wait", "5parsecs", "x", "--", "true"],
            "invalid value '5parsecs' for '--wait <DUR>'",
        ),
        (
            &["run", "--wait", "1.2.3", "x", "--", "true"],
            "`1.2.3` is not a number of seconds",
        ),
        (
            &["run", "-n", "--wait", "1", "x", "--", "true"],
            "cannot be used with",
        ),
        (
            &["run", "-s", "--token", "x", "--", "true"],
            "cannot be used with",
        ),
        (
            &["run", "-c", "true", "x", "--", "true"],
            "cannot be used with",
        ),
        (
            &["run", "-E", "256", "x", "--", "true"],
            "invalid value '256'",
        ),
        (&["run", "x"], "required arguments were not provided"),
        (&["unlock", "x"], "--force"),
        (
            &["watch", "--interval", "0s", "x"],
            "must be longer than zero",
        ),
        (&["status", ""], "a lock name must not be empty"),
    ];
    for (args, message) in cases {
        cli_offline()
            .args(*args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(*message));
    }
    cli_offline()
        .args(["--url", "not a url", "status", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("bad redis url"));
}

#[test]
fn an_unreachable_server_exits_69_without_revealing_the_password() {
    let port = support::free_port(); // nothing listens there
    let url = format!("redis://app:hunter2@127.0.0.1:{port}");
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("ran");
    for args in [
        vec!["status", "x"],
        vec![
            "run",
            "x",
            "--",
            "touch",
            marker.to_str().expect("utf-8 path"),
        ],
    ] {
        cli_offline()
            .args(["--url", &url, "--connect-timeout", "2s"])
            .args(&args)
            .assert()
            .code(69)
            .stderr(
                predicate::str::contains(format!(
                    "cannot connect to Redis at redis://app:***@127.0.0.1:{port}"
                ))
                .and(predicate::str::contains("hunter2").not()),
            );
    }
    assert!(
        !Path::new(&marker).exists(),
        "the command ran without a lock"
    );
}

#[tokio::test]
async fn credentials_in_the_url_authenticate_and_a_wrong_password_exits_2() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw
        .custom(cmd!("CONFIG"), vec!["SET", "requirepass", "s3cret"])
        .await
        .expect("CONFIG SET requirepass");
    let anonymous = format!("redis://127.0.0.1:{}", server.port());
    cli_offline()
        .args(["--url", &anonymous, "status", "auth:lock"])
        .assert()
        .code(2); // the server now refuses unauthenticated clients
    let good = format!("redis://:s3cret@127.0.0.1:{}", server.port());
    let bad = format!("redis://:wrong@127.0.0.1:{}", server.port());
    cli_offline()
        .args(["--url", &good, "--json", "status", "auth:lock"])
        .assert()
        .success()
        .stdout(predicate::str::contains("\"locked\":false"));
    cli_offline()
        .args(["--url", &good, "run", "auth:lock", "--", "true"])
        .assert()
        .success();
    cli_offline()
        .args(["--url", &bad, "status", "auth:lock"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("wrong").not());
}

/// Asserts that `output` failed with `code` and exactly one stderr line, `ferrisson: error: `
/// followed by `message` (a regex), free of Rust `Debug` text and fred's kind labels; returns
/// the message.
fn one_error_line(output: &std::process::Output, code: i32, message: &str) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    let text = lines[0]
        .strip_prefix("ferrisson: error: ")
        .unwrap_or_else(|| panic!("the error prefix: {stderr}"));
    let pattern = regex_lite(message);
    assert!(pattern.eval(text), "`{text}` does not match `{message}`");
    for debug in [
        "Error {",
        "Os {",
        "Custom {",
        "Unknown Error",
        "IO Error",
        "invalid argument: ",
    ] {
        assert!(!text.contains(debug), "debug text `{debug}` in `{text}`");
    }
    text.to_owned()
}

fn regex_lite(pattern: &str) -> impl Predicate<str> {
    predicate::str::is_match(format!("^{pattern}$")).expect("regex")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_error_is_one_clear_line() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let port = server.port();
    let _: () = raw
        .set("cli:string", "3", None, None, false)
        .await
        .expect("SET");
    let _: () = raw
        .custom(
            cmd!("ACL"),
            vec![
                "SETUSER",
                "noscripts",
                "on",
                ">pw",
                "~*",
                "&*",
                "+@all",
                "-evalsha",
                "-eval",
            ],
        )
        .await
        .expect("ACL SETUSER");

    let refused = support::free_port();
    let url = server.url();
    let cases: [(&[&str], i32, String); 5] = [
        (
            &["--url", &format!("redis://127.0.0.1:{refused}"), "status", "x"],
            69,
            format!(r"cannot connect to Redis at redis://127\.0\.0\.1:{refused}: connection refused"),
        ),
        (
            &["--url", &format!("redis://noscripts:wrong@127.0.0.1:{port}"), "status", "x"],
            2,
            format!(
                r"cannot connect to Redis at redis://noscripts:\*\*\*@127\.0\.0\.1:{port}: the server refused the URL's credentials \(WRONGPASS .*\)"
            ),
        ),
        (
            &["--url", &format!("redis://noscripts:pw@127.0.0.1:{port}"), "status", "x"],
            77,
            r"cannot read `x`: the URL's user is denied by the server's ACL \(NOPERM .*'evalsha'.*\); grant it the least-privilege rule of ferrisson's docs/reliability\.md".to_owned(),
        ),
        (
            &["--url", &url, "run", "cli:string", "--", "true"],
            65,
            r"key `cli:string` is a semaphore or count-down latch, not a lock: nothing to acquire"
                .to_owned(),
        ),
        (
            &["--url", &url, "unlock", "--force", "cli:string"],
            65,
            r"key `cli:string` is a semaphore or count-down latch, not a lock: left alone"
                .to_owned(),
        ),
    ];
    for (args, code, message) in &cases {
        let output = cli_offline().args(*args).output().expect("run ferrisson");
        let text = one_error_line(&output, *code, message);
        assert!(
            text.matches("redis://").count() <= 1,
            "the URL once: {text}"
        );
    }
    assert_eq!(exists(&raw, "cli:string").await, 1, "left alone");
}

/// With --json, failures are JSON objects with a stable kind: on stdout for status, unlock and
/// watch, as an `error` event on stderr for run (whose stdout is the command's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_errors_are_objects_with_a_stable_kind() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw.rpush("cli:list", "a").await.expect("RPUSH");
    let refused = format!("redis://127.0.0.1:{}", support::free_port());

    for args in [
        &["status", "x"][..],
        &["unlock", "--force", "x"],
        &["watch", "--for", "1s", "x"],
    ] {
        let output = cli_offline()
            .args(["--json", "--url", &refused])
            .args(args)
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(69), "{args:?}");
        let error = stdout_json(&output);
        assert_eq!(error["error"]["kind"], "unavailable", "{args:?}");
        let message = error["error"]["message"].as_str().expect("a message");
        assert!(
            message.starts_with("cannot connect to Redis at "),
            "{message}"
        );
    }

    let output = cli_offline()
        .args(["--json", "--url", &refused, "run", "x", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(69));
    assert!(output.stdout.is_empty());
    let event: Json = serde_json::from_slice(&output.stderr).expect("one JSON line on stderr");
    assert_eq!(event["event"], "error");
    assert_eq!(event["name"], "x");
    assert_eq!(event["error"]["kind"], "unavailable");

    let output = cli(&server)
        .args(["--json", "unlock", "--force", "cli:free", "cli:list"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(65));
    assert_eq!(
        stdout_json(&output),
        serde_json::json!({
            "error": {
                "kind": "wrong_type",
                "message": "key `cli:list` is a list, not a lock: left alone"
            },
            "results": [{"name": "cli:free", "released": false}]
        })
    );

    // Command-line errors too, before anything else runs.
    let output = cli_offline()
        .args(["run", "--json", "--lease", "1ns", "x", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    let event: Json = serde_json::from_slice(&output.stderr).expect("one JSON line on stderr");
    assert_eq!(event["error"]["kind"], "invalid_argument");
    let output = cli_offline()
        .args(["status", "--json", "--wait", "1s", "x"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stdout_json(&output)["error"]["kind"], "invalid_argument");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_a_key_of_another_type_is_not_a_lock() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw.rpush("k:list", "a").await.expect("RPUSH");
    let _: () = raw.sadd("k:set", "a").await.expect("SADD");
    let _: () = raw
        .zadd("k:zset", None, None, false, false, (1.0, "a"))
        .await
        .expect("ZADD");
    let _: () = raw.hset("k:hash", ("name", "bob")).await.expect("HSET");
    let _: () = raw.hset("k:lock", ("u:1", 1)).await.expect("HSET");
    let others = [
        ("k:list", "a list"),
        ("k:set", "a set"),
        ("k:zset", "a zset"),
        ("k:hash", "a hash but"),
    ];

    // (A string that is not an integer is a token lock: `status_reads_a_peers_token_lock`.)
    let output = cli(&server)
        .arg("status")
        .args(others.map(|(name, _)| name))
        .args(["k:lock", "k:free"])
        .output()
        .expect("run status");
    assert_eq!(output.status.code(), Some(65));
    let text = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<&str> = text.lines().skip(1).collect();
    let stderr = String::from_utf8_lossy(&output.stderr);
    for ((name, what), row) in others.iter().zip(&rows) {
        assert!(
            row.starts_with(name) && row.contains(" not-a-lock "),
            "{text}"
        );
        assert!(
            stderr.contains(&format!("ferrisson: error: key `{name}` is {what}")),
            "{stderr}"
        );
    }
    assert!(
        rows[4].contains(" locked ") && rows[5].contains(" free "),
        "{text}"
    );

    let output = cli(&server)
        .args(["--json", "status"])
        .args(others.map(|(name, _)| name))
        .output()
        .expect("run status --json");
    assert_eq!(output.status.code(), Some(65));
    let json = stdout_json(&output);
    for (i, (name, _)) in others.iter().enumerate() {
        assert_eq!(json[i]["name"], *name);
        assert_eq!(
            (&json[i]["kind"], &json[i]["state"]),
            (&Json::from("not_a_lock"), &Json::from("present")),
            "{json}"
        );
        assert_eq!(json[i]["locked"], false, "{json}");
    }
    assert_eq!(json[3]["redis_type"], "hash");

    // unlock --force would delete any hash: one that is not a lock is left alone.
    cli(&server)
        .args(["unlock", "--force", "k:hash"])
        .assert()
        .code(65);
    assert_eq!(hgetall(&raw, "k:hash").await.len(), 1);
}

/// The SETNX + GETSET recipe's lock, a string holding an expiry in epoch ms, is recognised and
/// refused: status names it (exit 65), and neither `unlock --force` nor `run` touches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_a_peers_token_lock_and_unlock_force_deletes_it() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // A node-redlock style token and an rslock style binary one (20 raw bytes), with TTLs.
    let hex = "5f4dcc3b5aa765d61d8327deb882cf99";
    let _: () = raw
        .set("k:token", hex, Some(Expiration::PX(60_000)), None, false)
        .await
        .expect("SET");
    let binary: &[u8] = &[
        0x00, b'a', 0xff, b'\\', 0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    ];
    let _: () = raw
        .set(
            "k:binary",
            binary,
            Some(Expiration::PX(60_000)),
            None,
            false,
        )
        .await
        .expect("SET");

    let output = cli(&server)
        .args(["--json", "status", "k:token", "k:binary"])
        .output()
        .expect("run status --json");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = stdout_json(&output);
    let binary_shown =
        "\\x00a\\xff\\\\\\x7f\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08\\x09\\x0a\\x0b\\x0c\\x0d\\x0e\\x0f";
    for (i, field) in [(0, hex), (1, binary_shown)] {
        assert_eq!(
            (&json[i]["kind"], &json[i]["state"], &json[i]["locked"]),
            (
                &Json::from("token_lock"),
                &Json::from("locked"),
                &Json::Bool(true)
            ),
            "{json}"
        );
        assert_eq!(json[i]["holders"][0]["field"], field, "{json}");
        assert_eq!(json[i]["holders"][0]["count"], 1, "{json}");
    }
    for i in 0..2 {
        assert!(
            json[i]["ttl_ms"].as_i64().is_some_and(|ttl| ttl > 50_000),
            "{json}"
        );
    }

    // `run` takes Redisson's lock unless told --token.
    let output = cli(&server)
        .args(["run", "--wait", "0", "k:token", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(65), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("take it with `run --token`"), "{stderr}");
    cli(&server)
        .args(["run", "--token", "--wait", "0", "k:token", "--", "true"])
        .assert()
        .code(75);
    let output = cli(&server)
        .args([
            "run", "--token", "--json", "k:fresh", "--", "sh", "-c", "exit 3",
        ])
        .output()
        .expect("run --token");
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("\"event\":\"acquired\"") && stderr.contains("\"event\":\"released\""),
        "{stderr}"
    );
    assert_eq!(exists(&raw, "k:fresh").await, 0, "released");

    let output = cli(&server)
        .args(["unlock", "--force", "k:token", "k:binary"])
        .output()
        .expect("run unlock");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(&format!("unlocked `k:token` (was held by {hex}=1)"))
            && text.contains("keyspace event or by polling"),
        "{text}"
    );
    assert_eq!(
        exists(&raw, "k:token").await + exists(&raw, "k:binary").await,
        0
    );
}

/// A string is a token lock only when it is positively one (a TTL and a peer's token shape), or
/// the caller says so: redis-py's lock without a timeout is read as a string until named with
/// `--kind token`, and `unlock --force --token` deletes only while the key holds that token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_lock_without_a_ttl_is_one_only_when_named() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let hex = "6fd1c9a26ba24c1f8ba1f6ad3bfb11a0";
    let _: () = raw
        .set("k:no-ttl", hex, None, None, false)
        .await
        .expect("SET");

    let output = cli(&server)
        .args(["--json", "status", "k:no-ttl"])
        .output()
        .expect("status");
    let json = stdout_json(&output);
    assert_eq!(
        (
            &json[0]["kind"],
            &json[0]["redis_type"],
            &json[0]["string_len"]
        ),
        (
            &Json::from("not_a_lock"),
            &Json::from("string"),
            &Json::from(32)
        ),
        "{json}"
    );
    let output = cli(&server)
        .args(["status", "k:no-ttl"])
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("string, 32 bytes"), "{text}");
    let output = cli(&server)
        .args(["unlock", "--force", "k:no-ttl"])
        .output()
        .expect("unlock");
    assert_eq!(output.status.code(), Some(65), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--kind token"), "{stderr}");
    assert_eq!(exists(&raw, "k:no-ttl").await, 1, "left alone");

    let output = cli(&server)
        .args(["--json", "status", "--kind", "token", "k:no-ttl"])
        .output()
        .expect("status --kind token");
    assert_eq!(stdout_json(&output)[0]["kind"], "token_lock");
    // Another token: left alone.
    let output = cli(&server)
        .args(["unlock", "--force", "--token", "0000", "k:no-ttl"])
        .output()
        .expect("unlock --token");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("was not locked with that token"));
    assert_eq!(exists(&raw, "k:no-ttl").await, 1, "left alone");
    cli(&server)
        .args(["unlock", "--force", "--token", hex, "k:no-ttl"])
        .assert()
        .code(0);
    assert_eq!(exists(&raw, "k:no-ttl").await, 0, "released by its token");
    let _: () = raw
        .set("k:no-ttl", hex, None, None, false)
        .await
        .expect("SET");
    cli(&server)
        .args(["unlock", "--force", "--kind", "token", "k:no-ttl"])
        .assert()
        .code(0);
    assert_eq!(exists(&raw, "k:no-ttl").await, 0, "released as named");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_recognises_the_unsupported_setnx_getset_timestamp_lock() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let expiry = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis()
        + 30_000;
    let _: () = raw
        .set("k:stamp", expiry.to_string(), None, None, false)
        .await
        .expect("SET");

    let output = cli(&server)
        .args(["status", "k:stamp"])
        .output()
        .expect("run status");
    assert_eq!(output.status.code(), Some(65));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("timestamp lock (SETNX/GETSET, unsupported)")
            && text.contains(&expiry.to_string()),
        "{text}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("ferrisson: error: key `k:stamp` is a timestamp lock of the SETNX/GETSET")
            && stderr.contains("unsafe"),
        "{stderr}"
    );

    let output = cli(&server)
        .args(["--json", "status", "k:stamp"])
        .output()
        .expect("run status --json");
    assert_eq!(output.status.code(), Some(65));
    let json = stdout_json(&output);
    assert_eq!(
        (&json[0]["kind"], &json[0]["state"], &json[0]["redis_type"]),
        (
            &Json::from("timestamp_lock"),
            &Json::from("present"),
            &Json::from("string")
        ),
        "{json}"
    );

    for args in [
        &["unlock", "--force", "k:stamp"][..],
        &["run", "--wait", "0", "k:stamp", "--", "true"][..],
    ] {
        let output = cli(&server).args(args).output().expect("run");
        assert_eq!(output.status.code(), Some(65), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("SETNX/GETSET timestamp lock (not supported as unsafe"),
            "{args:?}: {stderr}"
        );
    }
    let kept: String = raw.get("k:stamp").await.expect("GET");
    assert_eq!(kept, expiry.to_string(), "left alone");
}

/// Arguments the library would refuse are reported as such, before connecting (nothing listens
/// at the URL) or from the server's answer, never as "cannot connect".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argument_errors_are_reported_as_such() {
    let nowhere = format!("redis://127.0.0.1:{}", support::free_port());
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--lease", "1ns", "x", "--", "true"],
            "'--lease <DUR>': must be at least 1ms",
        ),
        (
            &["run", "--watchdog-timeout", "1ms", "x", "--", "true"],
            "'--watchdog-timeout <DUR>': must be at least 3ms",
        ),
    ];
    for (args, message) in cases {
        cli_offline()
            .args(["--url", &nowhere])
            .args(*args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(*message));
    }

    let server = RedisServer::start();
    let port = server.port();
    let output = cli_offline()
        .args(["--url", &format!("http://127.0.0.1:{port}"), "status", "x"])
        .output()
        .expect("run");
    one_error_line(
        &output,
        2,
        r"unsupported URL scheme `http://` in `http://127\.0\.0\.1:\d+/`: use redis://, rediss:// \(TLS\), redis-cluster:// or redis-sentinel:// .*",
    );
    let output = cli_offline()
        .args([
            "--url",
            &format!("redis://127.0.0.1:{port}/99"),
            "status",
            "x",
        ])
        .output()
        .expect("run");
    one_error_line(
        &output,
        2,
        r"database 99 does not exist on redis://127\.0\.0\.1:\d+/99: the server refused to select it .*",
    );
    let output = cli_offline()
        .args(["--url", &format!("rediss://127.0.0.1:{port}")])
        .args(["--connect-timeout", "1s", "status", "x"])
        .output()
        .expect("run");
    one_error_line(
        &output,
        2,
        r"TLS handshake with rediss://127\.0\.0\.1:\d+ got no answer, but the server answers in plain text: it does not speak TLS on this port .*",
    );
}

/// The tool reads the library's settings as `Config::from_env` does: `FERRISSON_PUBLISH_MODE`
/// chooses how releases are announced (here `sharded`: the release's message goes out by
/// `SPUBLISH` only), and a value a variable cannot take exits 2 naming the variable, as does an
/// unknown variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_settings_come_from_the_environment() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let sharded = support::server_binary().has_7_0_features();
    for (mode, publish, spublish) in [("classic", 1, 0), ("sharded", 0, 1)] {
        if mode == "sharded" && !sharded {
            continue; // Redis 6.2 refuses it (connect_errors::sharded_publishing_*)
        }
        reset_stats(&raw).await;
        cli(&server)
            .env("FERRISSON_PUBLISH_MODE", mode)
            .args(["run", "--wait", "0", "cli:env", "--", "true"])
            .assert()
            .code(0);
        assert_eq!(
            (
                command_calls(&raw, "publish").await,
                command_calls(&raw, "spublish").await
            ),
            (publish, spublish),
            "FERRISSON_PUBLISH_MODE={mode}: PUBLISH and SPUBLISH calls of the release"
        );
    }
    cli(&server)
        .env("FERRISSON_PUBLISH_MODE", "loud")
        .args(["status", "cli:env"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("ferrisson: error: ")
                .and(predicate::str::contains("FERRISSON_PUBLISH_MODE=\"loud\"")),
        );
    // A misspelt variable exits 2 too, told the right name, unless told to ignore such.
    cli(&server)
        .env("FERRISSON_PUBLSH_MODE", "classic")
        .args(["status", "cli:env"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "unknown variable FERRISSON_PUBLSH_MODE (did you mean FERRISSON_PUBLISH_MODE?)",
        ));
    cli(&server)
        .env("FERRISSON_PUBLSH_MODE", "classic")
        .env("FERRISSON_IGNORE_UNKNOWN", "true")
        .args(["status", "cli:env"])
        .assert()
        .code(0);
}

/// A client that records its waits that last 1 s. `DeadlockDetection::Record` fails nobody,
/// so a deadlock among such clients lasts until the test ends it. Not 50 ms: its edges hash
/// is renewed every `after / 2` and read as stale (its edges ignored) once `after` passes
/// without a renewal, so with 50 ms a renewal 25 ms late, common on a loaded 2-core machine,
/// hid the deadlock from the CLI (1 run in 20 beside a build).
async fn recording(server: &RedisServer) -> ferrisson::Client {
    let mut config = ferrisson::Config::new(server.url());
    config.deadlock_detection = ferrisson::DeadlockDetection::Record {
        after: Duration::from_secs(1),
    };
    support::connect_with(config).await
}

/// `owner` of `client` waits for `name` (60 s at most, a liveness bound: the test ends the
/// wait by releasing the lock) and releases it once acquired; `Ok(true)` when it acquired.
fn wait_for(
    client: &ferrisson::Client,
    name: &str,
    owner: Owner,
) -> tokio::task::JoinHandle<ferrisson::Result<bool>> {
    let lock = client.lock(name).with_owner(owner);
    tokio::spawn(async move {
        match lock.try_lock_within(Duration::from_secs(60)).await? {
            ferrisson::Attempt::Acquired(guard) => guard.unlock().await.map(|()| true),
            ferrisson::Attempt::Busy => Ok(false),
        }
    })
}

/// `<client uuid>:<owner id>`, as a recorded wait names its owner.
fn owner_field(client: &ferrisson::Client, owner: Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

/// Waits (10 s at most) until `observer`, a client that records nothing and so sees only what
/// is written in Redis, as the CLI does, reads what `done` accepts.
async fn until_written<T: std::fmt::Debug, Fut: std::future::Future<Output = T>>(
    probe: impl FnMut() -> Fut,
    done: impl Fn(&T) -> bool,
) {
    poll_until(
        Duration::from_secs(10),
        Duration::from_millis(10),
        probe,
        done,
    )
    .await
    .map(drop)
    .unwrap_or_else(|last| panic!("not written in Redis: {last:?}"));
}

/// Awaits `wait`, whose lock was just released: it acquires (`Record` fails nobody).
async fn acquires(wait: tokio::task::JoinHandle<ferrisson::Result<bool>>) {
    let acquired = timeout(PROMPTLY, wait)
        .await
        .expect("a wait ends once its lock is released")
        .expect("join")
        .expect("Record fails nobody");
    assert!(acquired, "the wait acquired its lock");
}

/// An owner of a recording client waiting for `name`, which an owner of a client that records
/// nothing holds: a recorded wait, written in Redis, that is no deadlock.
struct RecordedWait {
    /// The waiting owner, `<client uuid>:<owner id>`.
    owner: String,
    /// The holder's client and the waiter's, kept open while the wait lasts.
    _clients: [ferrisson::Client; 2],
    held: ferrisson::LockGuard,
    wait: tokio::task::JoinHandle<ferrisson::Result<bool>>,
}

impl RecordedWait {
    async fn start(server: &RedisServer, name: &str) -> RecordedWait {
        let (holder, waiter) = (connect(server).await, recording(server).await);
        let held = holder
            .lock(name)
            .with_owner(Owner::new())
            .lock()
            .await
            .expect("lock");
        let owner = Owner::new();
        let wait = wait_for(&waiter, name, owner);
        until_written(
            || async { holder.recorded_waits().await.expect("recorded_waits") },
            |waits| waits.len() == 1,
        )
        .await;
        RecordedWait {
            owner: owner_field(&waiter, owner),
            _clients: [holder, waiter],
            held,
            wait,
        }
    }

    /// Ends the wait: releases the lock, which the waiter then acquires.
    async fn end(self) {
        self.held.unlock().await.expect("unlock");
        acquires(self.wait).await;
    }
}

/// Two recording clients whose owners each hold one of `a`, `b` and wait for the other: a
/// deadlock, written in Redis, whose victim is the second client's wait (for `a`).
struct RecordedDeadlock {
    clients: [ferrisson::Client; 2],
    owners: [Owner; 2],
    held: Vec<ferrisson::LockGuard>,
    waits: Vec<tokio::task::JoinHandle<ferrisson::Result<bool>>>,
}

impl RecordedDeadlock {
    async fn start(server: &RedisServer, a: &str, b: &str) -> RecordedDeadlock {
        let (one, two) = (recording(server).await, recording(server).await);
        let (x, y) = (Owner::new(), Owner::new());
        let held = vec![
            one.lock(a).with_owner(x).lock().await.expect("a"),
            two.lock(b).with_owner(y).lock().await.expect("b"),
        ];
        // The second wait begins once the first is recorded: it is the younger, the victim.
        let first = wait_for(&one, b, x);
        support::wait_waits_recorded(&one, 1).await;
        let waits = vec![first, wait_for(&two, a, y)];
        let observer = connect(server).await;
        until_written(
            || async { observer.find_deadlocks().await.expect("find_deadlocks") },
            |found| found.len() == 1,
        )
        .await;
        observer.shutdown().await;
        RecordedDeadlock {
            clients: [one, two],
            owners: [x, y],
            held,
            waits,
        }
    }

    /// `<client uuid>:<owner id>` of the `i`th client's owner.
    fn owner(&self, i: usize) -> String {
        owner_field(&self.clients[i], self.owners[i])
    }

    /// Ends the deadlock: releases both holds, so that both waits acquire (`Record` fails
    /// nobody).
    async fn end(self) {
        for guard in self.held {
            guard.unlock().await.expect("unlock");
        }
        for wait in self.waits {
            acquires(wait).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlocks_finds_none_and_exits_0() {
    let server = RedisServer::start();
    let assert_none = || {
        cli(&server)
            .arg("deadlocks")
            .assert()
            .code(0)
            .stdout(predicate::eq(
                "no deadlock among the waits recorded by ferrisson clients with deadlock \
                 detection on\n",
            ));
        let output = cli(&server)
            .args(["--json", "deadlocks"])
            .output()
            .expect("run deadlocks --json");
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        assert_eq!(stdout_json(&output), serde_json::json!([]));
    };
    assert_none();

    // A recorded wait for a lock whose holder waits for nothing is no deadlock.
    let recorded = RecordedWait::start(&server, "dl:none").await;
    assert_none();
    recorded.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlocks_prints_a_recorded_cycle_with_its_victim_and_exits_3() {
    let server = RedisServer::start();
    let deadlock = RecordedDeadlock::start(&server, "dl:a", "dl:b").await;
    let (one, two) = (deadlock.owner(0), deadlock.owner(1));
    let output = cli(&server)
        .arg("deadlocks")
        .output()
        .expect("run deadlocks");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "a heading and a line per wait: {text}");
    assert_eq!(lines[0], "deadlock 1 (2 owners):", "{text}");
    for (waiter, lock, holder) in [(&one, "dl:b", &two), (&two, "dl:a", &one)] {
        let line = lines
            .iter()
            .find(|line| line.contains(&format!("for `{lock}`")))
            .unwrap_or_else(|| panic!("no wait for {lock}: {text}"));
        let line = line.trim_start();
        assert!(line.starts_with(&format!("{waiter} ")), "{line}");
        assert!(line.contains(" waits "), "{line}");
        assert!(line.contains(&format!("held by {holder}")), "{line}");
        // The younger wait, the second client's for dl:a, is the victim.
        assert_eq!(
            line.ends_with("victim (youngest wait)"),
            lock == "dl:a",
            "{line}"
        );
    }

    let output = cli(&server)
        .args(["--json", "deadlocks"])
        .output()
        .expect("run deadlocks --json");
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let json = stdout_json(&output);
    assert_eq!(json.as_array().map(Vec::len), Some(1), "one cycle: {json}");
    let steps = json[0]["steps"].as_array().expect("the cycle's steps");
    assert_eq!(steps.len(), 2, "{json}");
    let mut locks: Vec<&str> = Vec::new();
    for step in steps {
        let lock = step["lock"].as_str().expect("lock");
        locks.push(lock);
        let (waiter, holder) = if lock == "dl:b" {
            (&one, &two)
        } else {
            (&two, &one)
        };
        assert_eq!(step["owner"].as_str(), Some(waiter.as_str()), "{step}");
        assert_eq!(step["held_by"].as_str(), Some(holder.as_str()), "{step}");
        assert!(step["waited_ms"].as_u64().is_some(), "{step}");
        assert!(step["since_ms"].as_u64().is_some(), "{step}");
        assert!(step["wait_id"].as_u64().is_some(), "{step}");
        assert_eq!(step["victim"], lock == "dl:a", "{step}");
    }
    locks.sort_unstable();
    assert_eq!(locks, ["dl:a", "dl:b"]);
    deadlock.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_the_waiters_ferrisson_clients_recorded() {
    let server = RedisServer::start();
    let recorded = RecordedWait::start(&server, "rw:held").await;
    let field = &recorded.owner;

    let (code, text, stderr) = status_text(&server, &["rw:held", "rw:free"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let waiters = section(&text, "`rw:held` waiters recorded by ferrisson clients");
    assert_eq!(waiters.len(), 1, "{text}");
    let columns: Vec<&str> = waiters[0].split_whitespace().collect();
    assert_eq!(&columns[..2], [field.as_str(), "waiting"], "{text}");
    // No note for a lock without recorded waiters (it used to be one on stdout for each).
    assert!(!text.contains("rw:free` waiters"), "{text}");
    assert!(!text.contains("no waiters recorded"), "{text}");

    let json = status_json(&server, &["rw:held", "rw:free"]);
    let listed = json[0]["recorded_waiters"].as_array().expect("a list");
    assert_eq!(listed.len(), 1, "{}", json[0]);
    assert_eq!(listed[0]["owner"].as_str(), Some(field.as_str()));
    assert!(listed[0]["waited_ms"].as_u64().is_some(), "{}", json[0]);
    assert_eq!(json[1]["recorded_waiters"], serde_json::json!([]));
    recorded.end().await;
}

/// A user who may not SCAN cannot look for deadlocks (exit 77), and still gets a lock's status,
/// told that the recorded waiters could not be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scan_deadlocks_is_refused_and_status_says_the_waiters_are_unread() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let rule = [
        "SETUSER", "noscan", "on", ">pw", "~*", "&*", "+@all", "-scan",
    ];
    let _: () = raw
        .custom(cmd!("ACL"), rule.to_vec())
        .await
        .expect("ACL SETUSER");
    let url = format!("redis://noscan:pw@127.0.0.1:{}", server.port());

    let output = cli_offline()
        .args(["--url", &url, "deadlocks"])
        .output()
        .expect("run deadlocks");
    one_error_line(
        &output,
        77,
        r"cannot look for deadlocks: the URL's user is denied by the server's ACL \(NOPERM .*'scan'.*\); grant it the least-privilege rule of ferrisson's docs/reliability\.md",
    );

    let output = cli_offline()
        .args(["--url", &url, "status", "x"])
        .output()
        .expect("run status");
    let (text, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    // The warning (below) says it, once, on stderr; stdout is the status alone.
    assert!(!text.contains("could not be read"), "{text}");
    assert!(
        stderr.starts_with(
            "ferrisson: warning: cannot read the waits that ferrisson clients recorded: the \
             URL's user is denied by the server's ACL (NOPERM"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let output = cli_offline()
        .args(["--json", "--url", &url, "status", "x"])
        .output()
        .expect("run status --json");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let json = stdout_json(&output);
    assert_eq!(json[0]["state"], "free", "{json}");
    assert_eq!(json[0]["recorded_waiters"], Json::Null, "{json}");
}

/// Values a cache holds, beside real token locks of the peers: no command of the tool changes a
/// value that is not a lock, and every lock is still found (issue 47). The locks are taken by
/// the peers themselves where the suite runs them (ferrisson, redis-py, node `redlock`, rslock,
/// redsync) and written in the peers' formats for the two it does not run (pottery,
/// python-redis-lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_command_changes_a_value_that_is_not_a_lock_and_every_peers_lock_is_found(
) -> Result<(), support::token_peers::Unavailable> {
    use support::redsync::RedsyncPeer;
    use support::token_peers::{NodeRedlockPeer, PyAcquire, PyLockPeer, RedlockSettings};
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let minute = Some(Expiration::PX(60_000));

    let big = vec![b'x'; 1 << 20];
    let values: Vec<(&str, Vec<u8>, bool)> = vec![
        ("cache:json", br#"{"name":"bob"}"#.to_vec(), true),
        ("cache:word", b"hello".to_vec(), false),
        ("cache:words", b"the quick brown fox".to_vec(), true),
        ("cache:number", b"42".to_vec(), true),
        ("cache:float", b"3.14".to_vec(), true),
        ("cache:binary", vec![0, 159, 146, 150, 1, 2, 3], true),
        (
            "cache:session",
            b"9b1deb4d3b7d4bad9bdd2b0d7b3dcb6d9b1deb4d".to_vec(),
            true,
        ),
        ("cache:empty", Vec::new(), true),
        ("cache:big", big, true),
    ];
    for (key, value, ttl) in &values {
        let _: () = raw
            .set(
                *key,
                value.as_slice(),
                ttl.then_some(Expiration::PX(600_000)),
                None,
                false,
            )
            .await
            .expect("SET");
    }

    // The peers' locks.
    let client = connect(&server).await;
    let ferrisson = client
        .token_lock("lock:ferrisson")
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("ferrisson token lock");
    let py = PyLockPeer::start(&server.url()).await?;
    let py_held = py
        .acquire(
            "lock:redis-py",
            &PyAcquire::try_once(Some(Duration::from_secs(60))),
        )
        .await
        .expect("redis-py acquire");
    assert!(py_held.acquired);
    let node = NodeRedlockPeer::start(&[server.url()]).await?;
    node.lock(
        "lock:node-redlock",
        Duration::from_secs(60),
        &RedlockSettings::once(),
    )
    .await
    .expect("node redlock");
    let rslock = rslock::LockManager::new(vec![server.url()]);
    let rslocked = rslock
        .lock("lock:rslock", Duration::from_secs(60))
        .await
        .expect("rslock");
    let redsync = RedsyncPeer::start(&[server.url()]).await?;
    redsync
        .try_lock("lock:redsync", Duration::from_secs(60))
        .await
        .expect("redsync");
    // Formats of their sources, as these two are not in the suite: pottery's Redlock (a uuid4
    // string), python-redis-lock's (18 random bytes, URL-safe base64).
    for (key, token) in [
        ("lock:pottery", "0f3c1d1e-6b7a-4f5e-9a3b-2c1d0e9f8a7b"),
        ("lock:python-redis-lock", "q83vEjRWeJASNFZ4kBI0Vg-_"),
    ] {
        let _: () = raw
            .set(key, token, minute.clone(), None, false)
            .await
            .expect("SET");
    }
    let locks = [
        "lock:ferrisson",
        "lock:redis-py",
        "lock:node-redlock",
        "lock:rslock",
        "lock:redsync",
        "lock:pottery",
        "lock:python-redis-lock",
    ];
    let cache_keys: Vec<&str> = values.iter().map(|(key, _, _)| *key).collect();

    // status: every lock a token lock, every cache value what it is.
    let mut all: Vec<&str> = cache_keys.clone();
    all.extend(locks);
    let output = cli(&server)
        .args(["--json", "status"])
        .args(&all)
        .output()
        .expect("status");
    assert_eq!(output.status.code(), Some(65), "{output:?}");
    let json = stdout_json(&output);
    for (i, key) in all.iter().enumerate() {
        let kind = json[i]["kind"].as_str().unwrap_or_default();
        if key.starts_with("lock:") {
            assert_eq!(kind, "token_lock", "{key}: {}", json[i]);
            assert_eq!(
                json[i]["holders"].as_array().map(Vec::len),
                Some(1),
                "{key}"
            );
        } else if *key == "cache:number" {
            assert_eq!(kind, "semaphore_or_latch", "{key}");
        } else {
            assert_eq!(kind, "not_a_lock", "{key}: {}", json[i]);
        }
    }
    let output = cli(&server)
        .arg("status")
        .args(&all)
        .output()
        .expect("status");
    assert_eq!(output.status.code(), Some(65), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("string, 1048576 bytes"), "{text}");

    // Every other command, on every cache value: refused (unlock, run) or read-only (watch,
    // deadlocks), as the values read back below show.
    for key in &cache_keys {
        for (args, refused) in [
            (vec!["unlock", "--force", key], true),
            (vec!["run", "--wait", "0", key, "--", "true"], true),
            (
                vec!["run", "--token", "--wait", "0", key, "--", "true"],
                true,
            ),
            (vec!["watch", "--for", "200ms", key], false),
            (vec!["deadlocks"], false),
        ] {
            let output = cli(&server).args(&args).output().expect("the tool runs");
            if refused {
                assert_ne!(output.status.code(), Some(0), "{args:?}: {output:?}");
            }
        }
    }
    for (key, value, ttl) in &values {
        let stored: Option<Vec<u8>> = raw.get(*key).await.expect("GET");
        assert_eq!(stored.as_deref(), Some(value.as_slice()), "{key} changed");
        let left: i64 = raw.pttl(*key).await.expect("PTTL");
        assert_eq!(left > 0, *ttl, "{key}'s TTL changed: {left}");
    }

    // Every lock is found, and force-unlocked.
    let output = cli(&server)
        .args(["unlock", "--force"])
        .args(locks)
        .output()
        .expect("unlock");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    for key in locks {
        assert_eq!(exists(&raw, key).await, 0, "{key} still held");
    }
    drop((ferrisson, py_held, rslocked));
    py.quit().await;
    Ok(())
}
