//! Helpers for the tests of the semaphore and the count-down latch (string-integer primitives
//! woken by pub/sub): a raw subscriber that reads a channel's payloads, the string value of a
//! key, and contender processes that re-execute the test binary.
//!
//! ```ignore
//! let mut messages = Messages::subscribe(&server, "redisson_sc:{s}").await;
//! semaphore.release(1).await?;
//! assert_eq!(messages.next().await, "1");
//! messages.none().await;
//! ```

use std::time::Duration;

use fred::prelude::*;
use tokio::time::timeout;

use super::redis_state::{numsub, poll_until, wait_numsub, POLL_INTERVAL};
use super::{raw_client, RedisServer};

/// A raw client subscribed to one channel.
pub struct Messages {
    channel: String,
    /// Kept: dropping it would end the subscription.
    _subscriber: fred::clients::Client,
    rx: tokio::sync::broadcast::Receiver<fred::types::Message>,
}

impl Messages {
    /// Subscribes to `channel`, and returns once the server counts the subscription (fred's
    /// `subscribe` may resolve before that, and a message published meanwhile would be lost).
    pub async fn subscribe(server: &RedisServer, channel: &str) -> Messages {
        let subscriber = raw_client(&server.url()).await;
        let observer = raw_client(&server.url()).await;
        let before = numsub(&observer, channel).await;
        let rx = subscriber.message_rx();
        subscriber.subscribe(channel).await.expect("raw SUBSCRIBE");
        wait_numsub(&observer, channel, before + 1, Duration::from_secs(5)).await;
        Messages {
            channel: channel.to_owned(),
            _subscriber: subscriber,
            rx,
        }
    }

    /// The next message's payload, within 5 s; panics on another channel's message.
    pub async fn next(&mut self) -> String {
        let message = timeout(Duration::from_secs(5), self.rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no message on {} within 5 s", self.channel))
            .expect("message receiver");
        assert_eq!(&*message.channel, self.channel.as_str());
        message.value.convert().expect("a string payload")
    }

    /// Panics if a message arrives within 300 ms.
    pub async fn none(&mut self) {
        if let Ok(message) = timeout(Duration::from_millis(300), self.rx.recv()).await {
            panic!("unexpected message {message:?}");
        }
    }
}

/// `GET key`.
pub async fn get(raw: &fred::clients::Client, key: &str) -> Option<String> {
    raw.get(key).await.expect("GET")
}

/// Waits until `key` reads `expected`, panicking with what it read after 5 s.
pub async fn wait_value(raw: &fred::clients::Client, key: &str, expected: &str) {
    let read = poll_until(
        Duration::from_secs(5),
        POLL_INTERVAL,
        || get(raw, key),
        |value| value.as_deref() == Some(expected),
    )
    .await;
    if let Err(value) = read {
        panic!("{key} reads {value:?}, expected {expected} within 5 s");
    }
}

/// Contender processes (`super::processes`), under the name these tests use.
#[allow(unused_imports)] // not every test binary that includes `support` uses it
pub use super::processes::contenders as run_contenders;

/// Writes two keys a string-integer primitive must refuse: `<prefix>:hash` (a hash) and
/// `<prefix>:text` (a string that is no integer); returns their names.
pub async fn plant_wrong_types(raw: &fred::clients::Client, prefix: &str) -> [String; 2] {
    let [hash, text] = [format!("{prefix}:hash"), format!("{prefix}:text")];
    let _: () = raw.hset(&hash, ("f", "1")).await.expect("HSET");
    let _: () = raw
        .set(&text, "many", None, None, false)
        .await
        .expect("SET");
    [hash, text]
}

/// Asserts that `result` (of `what` on `name`) is `Error::WrongType` naming `name`.
pub fn assert_wrong_type(result: Result<(), ferrisson::Error>, name: &str, what: &str) {
    match result {
        Err(ferrisson::Error::WrongType { name: key }) => assert_eq!(key, name, "{what}"),
        other => panic!("{what} on {name}: {other:?}"),
    }
}

/// Asserts that the keys of [`plant_wrong_types`] are unchanged.
pub async fn assert_left_alone(raw: &fred::clients::Client, [hash, text]: &[String; 2]) {
    let fields: std::collections::HashMap<String, String> =
        raw.hgetall(hash).await.expect("HGETALL");
    assert_eq!(
        fields.get("f").map(String::as_str),
        Some("1"),
        "the hash is untouched"
    );
    assert_eq!(get(raw, text).await.as_deref(), Some("many"));
}
