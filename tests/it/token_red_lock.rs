//! `TokenRedLock`, the Redlock description's algorithm over token locks, against real
//! redis-servers (3 and 5 independent masters): one random value per acquisition on every
//! master, a majority within the validity, a minority down, a failed round leaving nothing, the
//! retries, and the watchdog variant. node `redlock` on the same masters: `token_interop.rs`.

use crate::support;

use std::time::Duration;

use ferrisson::{Attempt, Client, Error, RedlockOptions, TokenRedLock};
use fred::prelude::*;
use support::redis_state::pttl;
use support::{connect, connect_with, raw_client, timed_config, RedisServer};
use tokio::time::timeout;

struct Masters {
    servers: Vec<RedisServer>,
    raws: Vec<fred::clients::Client>,
    clients: Vec<Client>,
}

impl Masters {
    async fn start(n: usize, watchdog: Option<Duration>) -> Masters {
        let servers: Vec<_> = (0..n).map(|_| RedisServer::start()).collect();
        let mut raws = Vec::new();
        let mut clients = Vec::new();
        for server in &servers {
            raws.push(raw_client(&server.url()).await);
            clients.push(match watchdog {
                Some(watchdog) => {
                    let config = timed_config(server.url(), watchdog, Duration::from_secs(2));
                    connect_with(config).await
                }
                None => connect(server).await,
            });
        }
        Masters {
            servers,
            raws,
            clients,
        }
    }

    fn red(&self, name: &str) -> TokenRedLock {
        TokenRedLock::new(self.clients.iter().map(|client| client.token_lock(name)))
            .expect("a TokenRedLock")
    }

    /// The key's value on every master.
    async fn values(&self, name: &str) -> Vec<Option<String>> {
        let mut values = Vec::new();
        for (raw, server) in self.raws.iter().zip(&self.servers) {
            let _ = server;
            values.push(raw.get(name).await.unwrap_or(None));
        }
        values
    }
}

fn is_hex_32(value: &str) -> bool {
    value.len() == 32 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_random_value_per_acquisition_on_every_master_with_the_lease_and_its_validity() {
    let masters = Masters::start(3, None).await;
    let red = masters.red("red:token");
    let lease = Duration::from_secs(10);
    let guard = red.lock_with_lease(lease).await.expect("lock");
    let values = masters.values("red:token").await;
    let value = values[0].clone().expect("held on the first master");
    assert!(is_hex_32(&value), "node redlock's format: {value}");
    assert_eq!(
        values,
        vec![Some(value.clone()); 3],
        "the same value on all"
    );
    for raw in &masters.raws {
        let ttl = pttl(raw, "red:token").await;
        assert!((9_000..=10_000).contains(&ttl), "PX lease: {ttl}");
    }
    assert_eq!(guard.parts().len(), 3);
    let validity = guard.validity().expect("a fixed lease");
    assert!(
        validity < lease - Duration::from_millis(100) && validity > Duration::from_secs(8),
        "lease - elapsed - (1% + 2 ms): {validity:?}"
    );
    assert!(!guard.is_lost());
    guard.unlock().await.expect("unlock");
    assert_eq!(masters.values("red:token").await, vec![None; 3]);

    // The next acquisition draws another value.
    let again = red.lock_with_lease(lease).await.expect("lock");
    let next = masters.values("red:token").await[0].clone().expect("held");
    assert_ne!(next, value, "unique per acquisition");
    again.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_down_still_acquires_and_a_majority_down_is_an_outage_leaving_nothing() {
    let mut masters = Masters::start(5, None).await;
    masters.servers[1].stop();
    masters.servers[3].stop();
    let red = masters.red("red:down");
    let guard = red
        .try_lock_within_with_lease(Duration::from_secs(2), Duration::from_secs(10))
        .await
        .expect("try")
        .acquired()
        .expect("3 of 5 masters");
    assert_eq!(guard.parts().len(), 3);
    guard.unlock().await.expect("unlock");

    masters.servers[4].stop();
    let failed = timeout(Duration::from_secs(10), red.try_lock())
        .await
        .expect("ends");
    assert!(
        matches!(&failed, Err(err) if err.is_transient()),
        "an outage, not busy: {failed:?}"
    );
    for i in [0, 2] {
        let value: Option<String> = masters.raws[i].get("red:down").await.expect("GET");
        assert_eq!(value, None, "the failed round left nothing on master {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_held_by_another_value_is_busy_and_the_round_takes_back_what_it_took() {
    let masters = Masters::start(3, None).await;
    for raw in &masters.raws[..2] {
        let _: () = raw
            .set(
                "red:busy",
                "someone-else",
                Some(Expiration::PX(600)),
                None,
                false,
            )
            .await
            .expect("SET");
    }
    let red = masters.red("red:busy");
    let attempt = red.try_lock().await.expect("try");
    assert!(matches!(attempt, Attempt::Busy));
    let third: Option<String> = masters.raws[2].get("red:busy").await.expect("GET");
    assert_eq!(third, None, "the minority part was released");
    assert_eq!(
        masters.values("red:busy").await[..2],
        [
            Some("someone-else".to_owned()),
            Some("someone-else".to_owned())
        ],
        "the other holder's keys untouched"
    );

    // Retries after 200 ± 100 ms until the other holder's keys expire (600 ms).
    let mut options = RedlockOptions::default();
    options.retry_delay = Duration::from_millis(100);
    options.retry_jitter = Duration::from_millis(50);
    let red = red.with_options(options).expect("options");
    let guard = red
        .try_lock_within_with_lease(Duration::from_secs(5), Duration::from_secs(10))
        .await
        .expect("try")
        .acquired()
        .expect("acquired once the other holder's keys expired");
    guard.unlock().await.expect("unlock");
    let mut bad = RedlockOptions::default();
    bad.drift_factor = 1.5;
    assert!(matches!(
        red.with_options(bad),
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_lease_each_part_is_renewed_and_the_guard_is_lost_with_its_majority() {
    let watchdog = Duration::from_millis(900);
    let masters = Masters::start(3, Some(watchdog)).await;
    let red = masters.red("red:watchdog");
    let guard = red.lock().await.expect("lock");
    assert_eq!(guard.validity(), None, "renewed, not counted down");
    tokio::time::sleep(watchdog * 3).await;
    let values = masters.values("red:watchdog").await;
    assert!(
        values.iter().all(|v| v.as_deref().is_some_and(is_hex_32)),
        "{values:?}"
    );
    assert!(!guard.is_lost(), "renewed on every master");

    // Two masters lose it (overwritten): fewer than a majority remain.
    for raw in &masters.raws[..2] {
        let _: () = raw
            .set("red:watchdog", "usurper", None, None, false)
            .await
            .expect("SET");
    }
    timeout(watchdog * 3, guard.lost())
        .await
        .expect("lost() at the next renewals");
    assert!(guard.is_lost());
    assert!(
        guard.unlock().await.is_err(),
        "a lost majority's release fails"
    );
    assert_eq!(
        masters.values("red:watchdog").await[..2],
        [Some("usurper".to_owned()), Some("usurper".to_owned())],
        "never deleted another value"
    );
}

#[test]
fn fewer_than_three_masters_are_refused() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let server = RedisServer::start();
        let client = connect(&server).await;
        let two = [client.token_lock("a"), client.token_lock("a")];
        assert!(matches!(
            TokenRedLock::new(two),
            Err(Error::InvalidArgument(_))
        ));
    });
}
