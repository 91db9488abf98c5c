//! The count-down latch (Redisson's `RCountDownLatch`) against a real redis-server: waiters in
//! several tasks, clients and processes released by the count reaching 0 (the `0` message),
//! `try_set_count` only while absent, `count_down` on a missing latch, `delete`, bounded waits,
//! the Redis layout and payloads Java reads, wrong-type keys, bad arguments and the blocking
//! twin.

use crate::support;

use std::time::Duration;

use ferrisson::Error;
use fred::prelude::*;
use support::redis_state::wait_numsub;
use support::sync::{
    assert_left_alone, assert_wrong_type, get, plant_wrong_types, run_contenders, Messages,
};
use support::{connect, raw_client, RedisServer};
use tokio::time::timeout;

fn channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_several_tasks_and_clients_open_when_the_count_reaches_zero() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let clients = [connect(&server).await, connect(&server).await];
    let name = "latch:tasks";
    let mut messages = Messages::subscribe(&server, &channel(name)).await;
    let latch = clients[0].count_down_latch(name);
    assert!(latch.try_set_count(2).await.expect("set"));
    assert_eq!(messages.next().await, "1", "a new count");
    assert_eq!(get(&raw, name).await.as_deref(), Some("2"));

    let waiters: Vec<_> = (0..6)
        .map(|i| {
            let latch = clients[i % 2].count_down_latch(name);
            tokio::spawn(async move { latch.wait().await })
        })
        .collect();
    // Each client shares one subscription among its waiters: the raw one and two more.
    wait_numsub(&raw, &channel(name), 3, Duration::from_secs(5)).await;
    latch.count_down().await.expect("count down");
    assert_eq!(latch.count().await.expect("count"), 1);
    messages.none().await; // 1 is no news
    assert!(waiters.iter().all(|waiter| !waiter.is_finished()));

    clients[1]
        .count_down_latch(name)
        .count_down()
        .await
        .expect("count down");
    assert_eq!(messages.next().await, "0", "zero reached");
    for waiter in waiters {
        timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the 0 message opens every waiter")
            .expect("task")
            .expect("wait");
    }
    assert_eq!(get(&raw, name).await, None, "the latch key is deleted at 0");
    assert_eq!(latch.count().await.expect("count"), 0);
}

/// The env variable that makes this test binary a waiting process of the test below.
const CHILD_URL: &str = "FERRISSON_LATCH_CHILD_URL";
const CROSS_PROCESS: &str = "waiters_in_other_processes_open_when_the_count_reaches_zero";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_in_other_processes_open_when_the_count_reaches_zero() {
    let name = "latch:processes";
    if let Ok(url) = std::env::var(CHILD_URL) {
        // A waiter: two tasks each report `OPENED <whether the wait saw the count reach 0>`.
        let client = ferrisson::Client::connect(&url)
            .await
            .expect("child connects");
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let latch = client.count_down_latch(name);
                tokio::spawn(async move { latch.wait_for(Duration::from_secs(30)).await })
            })
            .collect();
        for task in tasks {
            let opened = task.await.expect("task").expect("wait");
            println!("OPENED {opened}");
        }
        client.shutdown().await;
        return;
    }
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let client = connect(&server).await;
    let latch = client.count_down_latch(name);
    assert!(latch.try_set_count(3).await.expect("set"));
    let url = server.url();
    let children = tokio::spawn(async move {
        run_contenders(
            &support::processes::test_name(module_path!(), CROSS_PROCESS),
            CHILD_URL,
            &url,
            3,
            "OPENED ",
        )
        .await
    });
    // Every process waits (one subscription each) before the count goes down.
    wait_numsub(&raw, &channel(name), 3, Duration::from_secs(10)).await;
    for _ in 0..2 {
        latch.count_down().await.expect("count down");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!children.is_finished(), "the waiters wait for 0");
    latch.count_down().await.expect("the last count down");
    let reports = timeout(Duration::from_secs(20), children)
        .await
        .expect("the waiting processes end")
        .expect("join");
    let opened: Vec<&str> = reports.iter().flatten().map(String::as_str).collect();
    assert_eq!(opened, ["true"; 6], "every waiter of every process opened");
}

#[tokio::test]
async fn try_set_count_sets_only_while_the_latch_is_absent() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let latch = client.count_down_latch("latch:set");
    assert_eq!(latch.count().await.expect("count"), 0);
    assert!(latch.try_set_count(2).await.expect("set"));
    assert!(!latch.try_set_count(5).await.expect("set again"));
    assert_eq!(latch.count().await.expect("count"), 2);
    latch.count_down().await.expect("count down");
    latch.count_down().await.expect("count down");
    assert_eq!(get(&raw, "latch:set").await, None);
    assert!(latch.try_set_count(5).await.expect("set once open"));
    assert_eq!(latch.count().await.expect("count"), 5);
}

#[tokio::test]
async fn counting_down_a_missing_latch_leaves_nothing_and_publishes_nothing() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "latch:missing";
    let mut messages = Messages::subscribe(&server, &channel(name)).await;
    let latch = client.count_down_latch(name);
    latch.count_down().await.expect("count down");
    assert_eq!(get(&raw, name).await, None, "-1 is deleted at once");
    messages.none().await;
    assert_eq!(latch.count().await.expect("count"), 0);
}

#[tokio::test]
async fn delete_publishes_a_new_count_and_a_bounded_wait_then_reads_the_count() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let name = "latch:delete";
    let mut messages = Messages::subscribe(&server, &channel(name)).await;
    let latch = client.count_down_latch(name);
    assert!(!latch.delete().await.expect("delete absent"));
    messages.none().await;
    latch.try_set_count(4).await.expect("set");
    assert_eq!(messages.next().await, "1");

    let waiter = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait_for(Duration::from_millis(600)).await })
    };
    wait_numsub(&raw, &channel(name), 2, Duration::from_secs(5)).await;
    assert!(latch.delete().await.expect("delete"));
    assert_eq!(messages.next().await, "1", "delete publishes a new count");
    assert_eq!(get(&raw, name).await, None);
    // A `1` wakes nobody (Java's waiters close their latch); at the end of its time, the
    // waiter reads the count once more, as Java's `await(timeout)` does, and finds it open.
    let opened = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the bounded wait ends")
        .expect("task")
        .expect("wait_for");
    assert!(opened, "a deleted latch is open");
}

#[tokio::test]
async fn a_bounded_wait_times_out_and_a_missing_latch_is_open() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let latch = client.count_down_latch("latch:timeout");
    assert!(latch.wait_for(Duration::ZERO).await.expect("absent"));
    timeout(Duration::from_secs(5), latch.wait())
        .await
        .expect("waiting on a missing latch returns at once")
        .expect("wait");
    latch.try_set_count(1).await.expect("set");
    assert!(!latch
        .wait_for(Duration::from_millis(200))
        .await
        .expect("wait_for"));
    assert!(!latch.wait_for(Duration::ZERO).await.expect("wait_for 0"));
    assert_eq!(
        latch.count().await.expect("count"),
        1,
        "waiting changes nothing"
    );
    // A dropped wait leaves nothing behind either.
    assert!(timeout(Duration::from_millis(100), latch.wait())
        .await
        .is_err());
    latch.count_down().await.expect("count down");
    assert!(latch.wait_for(Duration::ZERO).await.expect("wait_for"));
}

#[tokio::test]
async fn the_redis_layout_is_redissons() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    // Braces are added even around a name that has some (§12.1).
    let name = "{job}:7";
    let mut messages =
        Messages::subscribe(&server, "redisson_countdownlatch__channel__{{job}:7}").await;
    let latch = client.count_down_latch(name);
    latch.try_set_count(3).await.expect("set");
    let kind: String = raw
        .custom(fred::cmd!("TYPE"), vec![name])
        .await
        .expect("TYPE");
    assert_eq!(kind, "string");
    assert_eq!(get(&raw, name).await.as_deref(), Some("3"));
    assert_eq!(messages.next().await, "1");
    // A count written as Java writes it is counted down here.
    let _: () = raw.set(name, "1", None, None, false).await.expect("SET");
    latch.count_down().await.expect("count down");
    assert_eq!(messages.next().await, "0");
    assert_eq!(get(&raw, name).await, None);
}

#[tokio::test]
async fn keys_of_another_type_are_wrong_type_and_left_alone() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let raw = raw_client(&server.url()).await;
    let keys = plant_wrong_types(&raw, "latch").await;
    for name in &keys {
        let latch = client.count_down_latch(name);
        let wrong = |result, what| assert_wrong_type(result, name, what);
        wrong(latch.try_set_count(1).await.map(drop), "try_set_count");
        wrong(latch.count_down().await, "count_down");
        wrong(latch.count().await.map(drop), "count");
        wrong(latch.wait().await, "wait");
        wrong(latch.wait_for(Duration::ZERO).await.map(drop), "wait_for");
        wrong(latch.delete().await.map(drop), "delete");
    }
    assert_left_alone(&raw, &keys).await;

    assert!(matches!(
        client.count_down_latch("").count().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client
            .count_down_latch("latch:big")
            .try_set_count(u64::MAX)
            .await,
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn the_blocking_latch_opens_waiting_threads() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::connect(&server.url()).expect("connect");
    let latch = client.count_down_latch("latch:blocking");
    assert!(latch.try_set_count(2).expect("set"));
    assert!(!latch.try_set_count(2).expect("set again"));
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let latch = latch.clone();
            std::thread::spawn(move || latch.wait())
        })
        .collect();
    assert!(!latch
        .wait_for(Duration::from_millis(100))
        .expect("wait_for"));
    latch.count_down().expect("count down");
    assert_eq!(latch.count().expect("count"), 1);
    latch.count_down().expect("count down");
    for waiter in waiters {
        waiter.join().expect("thread").expect("wait");
    }
    assert!(latch.wait_for(Duration::ZERO).expect("open"));
    latch.try_set_count(1).expect("set");
    assert!(latch.delete().expect("delete"));
}
