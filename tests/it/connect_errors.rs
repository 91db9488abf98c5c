//! `Client::new` reports a wrong URL as `Error::InvalidArgument`, not as an outage: a scheme
//! other than Redis's, a database the server does not have, and `rediss://` to a server that
//! does not speak TLS (the handshake gets no answer); and `PublishMode::Sharded` on a server
//! without sharded pub/sub (Redis 6.2), which would otherwise fail at every wait and release.

use crate::support;

use std::time::Duration;

use ferrisson::{Client, Config, Error, PublishMode};
use fred::prelude::*;
use support::RedisServer;

/// The message of the `InvalidArgument` that connecting to `url` fails with.
async fn invalid_argument(url: String) -> String {
    match connect_error(url).await {
        Error::InvalidArgument(message) => message,
        err => panic!("got {err:?}"),
    }
}

async fn connect_error(url: String) -> Error {
    let mut config = Config::new(url);
    config.connect_timeout = Duration::from_secs(2);
    match Client::new(config).await {
        Ok(client) => {
            client.shutdown().await;
            panic!("connected");
        }
        Err(err) => err,
    }
}

#[tokio::test]
async fn an_http_url_is_refused_before_connecting() {
    let server = RedisServer::start(); // fred would speak Redis to it, taking http:// as redis://
    let message = invalid_argument(format!("http://127.0.0.1:{}", server.port())).await;
    for scheme in [
        "`http://`",
        "redis://",
        "rediss://",
        "redis-cluster://",
        "redis-sentinel://",
    ] {
        assert!(message.contains(scheme), "{message}");
    }
}

#[tokio::test]
async fn a_database_the_server_does_not_have_is_an_invalid_argument() {
    let server = RedisServer::start();
    let message = invalid_argument(format!("{}/99", server.url())).await;
    assert!(
        message.starts_with("database 99 does not exist on "),
        "{message}"
    );
}

#[tokio::test]
async fn rediss_to_a_plain_server_says_it_does_not_speak_tls() {
    let server = RedisServer::start();
    let message = invalid_argument(format!("rediss://127.0.0.1:{}", server.port())).await;
    assert!(message.contains("does not speak TLS"), "{message}");

    // Nothing listening at all is still an outage.
    let port = support::free_port();
    let err = connect_error(format!("rediss://127.0.0.1:{port}")).await;
    assert!(matches!(err, Error::Unavailable(_)), "got {err:?}");
}

/// Redis 6.2 (`./dev test --servers redis-6.2`): refused with the server's version and what to
/// use instead, and no connection is left open. Redis 7.0 and Valkey: the mode connects and a
/// lock and its release go through (a single server serves sharded pub/sub too).
#[tokio::test]
async fn sharded_publishing_is_refused_where_the_server_lacks_it() {
    let server = RedisServer::start();
    let raw = support::raw_client(&server.url()).await;
    let mut config = Config::new(server.url());
    config.publish_mode = PublishMode::Sharded;
    let connected = Client::new(config).await;
    let binary = support::server_binary();
    if binary.has_7_0_features() {
        let client = connected.expect("Sharded connects where the server has sharded pub/sub");
        let guard = client.lock("sharded:single").lock().await.expect("lock");
        guard.unlock().await.expect("unlock");
        client.shutdown().await;
        return;
    }
    match connected {
        Err(Error::InvalidArgument(message)) => {
            let (major, minor, patch) = binary.version;
            for part in [
                "PublishMode::Sharded".to_owned(),
                format!("runs Redis {major}.{minor}.{patch}"),
                "PublishMode::Auto or Classic".to_owned(),
            ] {
                assert!(message.contains(&part), "{part:?} not in {message:?}");
            }
        }
        Err(err) => panic!("refused with the wrong error: {err:?}"),
        Ok(client) => {
            client.shutdown().await;
            panic!("Sharded connected to a server without sharded pub/sub");
        }
    }
    // The refused client's connections are closed: only the raw client's remains.
    support::redis_state::poll_until(
        Duration::from_secs(5),
        Duration::from_millis(20),
        || async {
            let list: String = raw
                .custom(fred::cmd!("CLIENT"), vec!["LIST"])
                .await
                .expect("CLIENT LIST");
            list.lines().count()
        },
        |count| *count == 1,
    )
    .await
    .expect("the refused client closed its connections");
}
