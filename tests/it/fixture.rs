//! Proves the real-Redis test fixture in `tests/it/support` works.

use crate::support;

use std::time::Duration;

use fred::{cmd, prelude::*};
use support::{answers_ping, raw_client, RedisServer};

#[tokio::test]
async fn server_answers_ping_through_raw_client() {
    let server = RedisServer::start();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    let client = raw_client(&server.url()).await;
    let pong: String = client.ping(None).await.unwrap();
    assert_eq!(pong, "PONG");
    client.quit().await.unwrap();
}

#[tokio::test]
async fn two_servers_get_different_ports() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());

    let ca = raw_client(&a.url()).await;
    let cb = raw_client(&b.url()).await;
    let _: () = ca.set("k", "a", None, None, false).await.unwrap();
    let _: () = cb.set("k", "b", None, None, false).await.unwrap();
    let va: String = ca.get("k").await.unwrap();
    let vb: String = cb.get("k").await.unwrap();
    assert_eq!((va.as_str(), vb.as_str()), ("a", "b"));
}

#[test]
fn port_is_closed_after_drop() {
    let server = RedisServer::start();
    let port = server.port();
    assert!(answers_ping(port, Duration::from_secs(1)));
    drop(server);
    assert!(
        !answers_ping(port, Duration::from_millis(500)),
        "port {port} still answers after the server was dropped"
    );
}

#[test]
fn persistence_is_off_and_extra_args_apply() {
    let server = RedisServer::start_with_args(&["--maxmemory", "12mb"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = raw_client(&server.url()).await;
        let cfg: Vec<String> = client
            .custom(cmd!("CONFIG"), vec!["GET", "maxmemory"])
            .await
            .unwrap();
        assert_eq!(
            cfg,
            vec!["maxmemory".to_string(), (12 * 1024 * 1024).to_string()]
        );
        let save: Vec<String> = client
            .custom(cmd!("CONFIG"), vec!["GET", "save"])
            .await
            .unwrap();
        assert_eq!(save, vec!["save".to_string(), String::new()]);
        let aof: Vec<String> = client
            .custom(cmd!("CONFIG"), vec!["GET", "appendonly"])
            .await
            .unwrap();
        assert_eq!(aof, vec!["appendonly".to_string(), "no".to_string()]);
    });
}

#[tokio::test]
async fn kill_and_restart_keep_the_port() {
    let mut server = RedisServer::start_with_args(&["--maxmemory", "12mb"]);
    let port = server.port();
    let client = raw_client(&server.url()).await;
    let _: () = client.set("k", "v", None, None, false).await.unwrap();
    client.quit().await.unwrap();

    server.kill();
    assert!(!server.is_running());
    assert!(!answers_ping(port, Duration::from_millis(500)));
    server.kill(); // idempotent

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    let client = raw_client(&server.url()).await;
    let v: Option<String> = client.get("k").await.unwrap();
    assert_eq!(
        v, None,
        "persistence is off, data must be gone after restart"
    );
    let cfg: Vec<String> = client
        .custom(cmd!("CONFIG"), vec!["GET", "maxmemory"])
        .await
        .unwrap();
    assert_eq!(
        cfg[1],
        (12 * 1024 * 1024).to_string(),
        "extra args survive restart"
    );

    // restart() while running works too
    server.restart();
    assert_eq!(server.port(), port);
    assert!(answers_ping(port, Duration::from_secs(1)));
}

#[test]
fn missing_binary_gives_a_clear_panic() {
    // Only checks the message; runs the fixture with a bogus REDIS_SERVER in a
    // child process so the env change cannot affect parallel tests.
    if std::env::var_os("FERRISSON_FIXTURE_CHILD").is_some() {
        RedisServer::start();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let me = support::processes::test_name(module_path!(), "missing_binary_gives_a_clear_panic");
    let out = std::process::Command::new(exe)
        .args([&*me, "--exact", "--nocapture"])
        .env("FERRISSON_FIXTURE_CHILD", "1")
        .env("REDIS_SERVER", "/nonexistent/redis-server")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stderr.contains("./dev test") || stdout.contains("./dev test"),
        "stderr: {stderr}\nstdout: {stdout}"
    );
}
