//! `Client::new` reports a wrong URL as `Error::InvalidArgument`, not as an outage: a scheme
//! other than Redis's, a database the server does not have, and `rediss://` to a server that
//! does not speak TLS (the handshake gets no answer).

use crate::support;

use std::time::Duration;

use ferrisson::{Client, Config, Error};
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
