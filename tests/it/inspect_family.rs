//! `Client::inspect_as` (async and blocking) on keys written as Java Redisson writes them: the
//! named primitive is read where the stored value agrees, and refused with a typed error where
//! the key holds another primitive of the family. (The CLI tests in `tests/it/cli.rs` cover every
//! kind's layout through `ferrisson status`.)

use crate::support;

use ferrisson::inspect::{LockKind, Primitive};
use ferrisson::Error;
use fred::prelude::*;
use support::{connect, raw_client, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_integer_is_the_counter_it_is_named_and_no_lock() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let _: () = raw
        .set("jobs:done", "4", None, None, false)
        .await
        .expect("SET");
    let client = connect(&server).await;

    let inferred = client.inspect("jobs:done").await.expect("inspect");
    assert_eq!(
        (inferred.kind, inferred.count),
        (LockKind::SemaphoreOrLatch, Some(4))
    );
    let latch = client
        .inspect_as("jobs:done", Primitive::CountDownLatch)
        .await
        .expect("a latch");
    assert_eq!(
        (latch.kind, latch.count),
        (LockKind::CountDownLatch, Some(4))
    );
    match client.inspect_as("jobs:done", Primitive::Lock).await {
        Err(Error::InvalidArgument(message)) => assert!(
            message.contains("a string integer") && message.contains("not a lock"),
            "{message}"
        ),
        other => panic!("a counter is no lock: {other:?}"),
    }
    client.shutdown().await;
}

#[test]
fn the_blocking_client_reads_a_named_primitive_too() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let missing = client
        .inspect_as("pool", Primitive::Semaphore)
        .expect("a missing semaphore");
    assert!(!missing.is_locked());
    assert_eq!((missing.kind, missing.count), (LockKind::Semaphore, None));

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let raw = raw_client(&server.url()).await;
        let _: () = raw
            .hset("pool", ("8c1e3a9e-4a4e-4f57-9f3c-2f1d0b7d6a11:57", 1))
            .await
            .expect("HSET");
    });
    let refused = client.inspect_as("pool", Primitive::Semaphore);
    assert!(
        matches!(&refused, Err(Error::InvalidArgument(message)) if message.contains("is a lock")),
        "{refused:?}"
    );
}
