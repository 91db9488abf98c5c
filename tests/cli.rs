//! The `ferrisson` command-line tool, driven as a subprocess against a real `redis-server`:
//! `status`, `run`, `unlock --force`, `watch`, exit statuses and argument errors.

mod support;

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use assert_cmd::Command as AssertCommand;
use ferrisson::Owner;
use fred::{cmd, prelude::*};
use predicates::prelude::*;
use serde_json::Value as Json;
use support::redis_state::{channel_of, exists, hgetall, poll_until, pttl, wait_numsub};
use support::{connect, hold_with_lease, raw_client, RedisServer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout};

const BIN: &str = env!("CARGO_BIN_EXE_ferrisson");
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
    let mut cmd = AssertCommand::new(BIN);
    cmd.env_remove("REDIS_URL")
        .env_remove("RUST_LOG")
        .timeout(Duration::from_secs(20));
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
        let mut child = tokio::process::Command::new(BIN)
            .env_remove("REDIS_URL")
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .args(["--url", &server.url()])
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
            "name": "cli:free", "state": "free", "locked": false, "kind": "free", "mode": null,
            "redis_type": null, "ttl_ms": null, "holders": [], "queued": 0
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
        Some(65),
        "java:semaphore is not a lock"
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<&str> = text.lines().skip(1).collect();
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
        predicate::str::is_match(r"^java:semaphore\s+not-a-lock\s+string\s")
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
    assert_eq!(json[3]["kind"], "read-write");
    assert_eq!(json[3]["mode"], "write");
    assert_eq!(json[4]["state"], "not_a_lock");
    assert_eq!(json[4]["locked"], false);
    assert_eq!(json[4]["redis_type"], "string");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_url_can_come_from_redis_url() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw.hset("cli:env", ("e:1", 1)).await.expect("HSET");

    AssertCommand::new(BIN)
        .env("REDIS_URL", server.url())
        .args(["status", "cli:env"])
        .timeout(Duration::from_secs(20))
        .assert()
        .success()
        .stdout(predicate::str::contains("e:1=1"));
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
            predicate::str::contains("`cli:busy` is locked by")
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
    // Every stderr line is JSON, the library's warning included (a log line, not an event).
    let lines: Vec<Json> = run
        .stderr_seen
        .iter()
        .map(|line| serde_json::from_str(line).expect("every stderr line is JSON"))
        .collect();
    assert!(
        lines.iter().any(|line| line["level"] == "WARN"
            && line["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("lock lease lost"))
            && line["fields"]["lock"] == name),
        "stderr: {:?}",
        run.stderr_seen
    );
}

/// Runs `ferrisson run --watchdog-timeout 300ms EXTRA... NAME -- COMMAND...` with `env`, deletes
/// the lock behind it once taken, and waits for it to exit.
async fn run_and_lose(
    server: &RedisServer,
    env: &[(&str, &str)],
    extra: &[&str],
    name: &str,
    command: &[&str],
) -> (Running, ExitStatus) {
    let raw = raw_client(&server.url()).await;
    let mut args = vec!["run", "--watchdog-timeout", "300ms"];
    args.extend_from_slice(extra);
    args.extend([name, "--"]);
    args.extend_from_slice(command);
    let mut run = Running::spawn_with_env(server, env, &args);
    wait_locked(&raw, name).await;
    let _: i64 = raw.del(name).await.expect("DEL the lock behind its holder");
    let status = run.exit().await;
    (run, status)
}

/// Without RUST_LOG the library's warnings are shown, so a lost lease is logged (besides the
/// tool's own message); RUST_LOG=off silences the log but not the message or the exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_librarys_lease_loss_warning_is_logged_unless_rust_log_is_off() {
    let server = RedisServer::start();
    for (env, logged) in [(&[][..], true), (&[("RUST_LOG", "off")][..], false)] {
        let name = "cli:lost-log";
        let (run, status) = run_and_lose(&server, env, &[], name, &["sleep", "1"]).await;
        assert_eq!(status.code(), Some(76), "env {env:?}");
        let warned = run.stderr_seen.iter().any(|l| {
            l.contains(" WARN ferrisson::lease::watchdog: lock lease lost") && l.contains(name)
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
    let watchdog = Duration::from_secs(1);

    let mut run = Running::spawn(
        &server,
        &[
            "run",
            "--json",
            "--watchdog-timeout",
            "1s",
            name,
            "--",
            "sleep",
            "5",
        ],
    );
    run.event("acquired").await;
    run.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = std::time::Instant::now();
    let guard = client
        .lock(name)
        .with_owner(Owner::new())
        .try_lock_for(Duration::from_secs(10), None)
        .await
        .expect("acquire")
        .acquired()
        .expect("the lock frees at the dead holder's lease end");
    let took = killed.elapsed();
    assert!(
        took <= watchdog + Duration::from_millis(300),
        "the waiter got the lock {took:?} after the holder was killed"
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
        .try_lock_for(Duration::from_secs(10), Some(Duration::from_secs(20)))
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
            &["run", "--wait", "5", "x", "--", "true"],
            "`5` has no unit",
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
            r"key `cli:string` is a string, not a lock: nothing to acquire".to_owned(),
        ),
        (
            &["--url", &url, "unlock", "--force", "cli:string"],
            65,
            r"key `cli:string` is a string, not a lock: left alone".to_owned(),
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
    let _: () = raw
        .set("k:string", "1", None, None, false)
        .await
        .expect("SET");
    let _: () = raw.rpush("k:list", "a").await.expect("RPUSH");
    let _: () = raw.sadd("k:set", "a").await.expect("SADD");
    let _: () = raw
        .zadd("k:zset", None, None, false, false, (1.0, "a"))
        .await
        .expect("ZADD");
    let _: () = raw.hset("k:hash", ("name", "bob")).await.expect("HSET");
    let _: () = raw.hset("k:lock", ("u:1", 1)).await.expect("HSET");
    let others = [
        ("k:string", "a string"),
        ("k:list", "a list"),
        ("k:set", "a set"),
        ("k:zset", "a zset"),
        ("k:hash", "a hash but"),
    ];

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
            stderr.contains(&format!("ferrisson: key `{name}` is {what}")),
            "{stderr}"
        );
    }
    assert!(
        rows[5].contains(" locked ") && rows[6].contains(" free "),
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
        assert_eq!(json[i]["state"], "not_a_lock", "{json}");
        assert_eq!(json[i]["locked"], false, "{json}");
    }
    assert_eq!(json[4]["redis_type"], "hash");

    // unlock --force would delete any hash: one that is not a lock is left alone.
    cli(&server)
        .args(["unlock", "--force", "k:hash"])
        .assert()
        .code(65);
    assert_eq!(hgetall(&raw, "k:hash").await.len(), 1);
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
