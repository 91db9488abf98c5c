//! The lock family on a real local Redis Cluster (3 masters, `support::cluster`), one cluster
//! for the whole file: each primitive on names spread over every master (plain names and
//! `{hash tags}`), woken or excluded across two clients, a deadlock across masters found and
//! broken, and a name it cannot use in a cluster refused with `Error::InvalidArgument` before
//! anything is written.
//!
//! One test function runs every scenario in turn: the fixture's cluster and its fred clients
//! belong to one tokio runtime, so tests with runtimes of their own could not share it.

use crate::support;

use std::time::Duration;

use ferrisson::{Attempt, Error, MultiLock, Owner, PublishMode, RedLock, WokenBy};
use fred::prelude::*;
use fred::types::Message;
use support::cluster::{keyslot, RedisCluster};
use support::redis_state::{poll_until, POLL_INTERVAL};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

/// How long a waiter gets to park (subscribe and make its first attempt) before the release.
const PARK: Duration = Duration::from_millis(300);
/// How long a woken waiter may take to acquire (a liveness bound, not a speed assertion).
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

struct Family {
    cluster: RedisCluster,
    raw: fred::clients::Client,
    /// Two clients (two client ids, two connection sets), both `PublishMode::Auto` (= `Both`).
    a: ferrisson::Client,
    b: ferrisson::Client,
}

impl Family {
    /// The master serving `key`'s slot.
    async fn master_of(&self, key: &str) -> usize {
        self.cluster.master_of_slot(keyslot(&self.raw, key).await)
    }

    /// One name per master for `kind`: plain names on masters 0 and 2, a `{tag}` name on
    /// master 1 (or `tagged: false`: plain names only).
    async fn names_on_every_master(&self, kind: &str, tagged: bool) -> Vec<String> {
        let mut names = Vec::new();
        for master in 0..self.cluster.masters.len() {
            let tag = tagged && master == 1;
            let mut i = 0;
            // Placed by the server's own hashing (CLUSTER KEYSLOT), not the client's.
            let name = loop {
                let name = if tag {
                    format!("{{{kind}{i}}}:c")
                } else {
                    format!("{kind}:c:{i}")
                };
                if self.master_of(&name).await == master {
                    break name;
                }
                i += 1;
            };
            names.push(name);
        }
        names
    }

    /// Whether `key` exists (the cluster client routes to its master).
    async fn exists(&self, key: &str) -> bool {
        self.raw.exists::<i64, _>(key).await.expect("EXISTS") == 1
    }

    /// Asserts `key` is stored on the master of `name`'s slot, checked on that master directly.
    async fn stored_with(&self, key: &str, name: &str) {
        let master = self.master_of(name).await;
        assert_eq!(
            self.master_of(key).await,
            master,
            "`{key}` is not in the slot of `{name}`"
        );
        let on_master: i64 = self.cluster.master_clients[master]
            .exists(key)
            .await
            .expect("EXISTS");
        assert_eq!(on_master, 1, "`{key}` is not on master {master}");
    }
}

/// `task`'s output within [`WOKEN_WITHIN`], panicking with `what` otherwise.
async fn woken<T>(task: JoinHandle<T>, what: &str) -> T {
    timeout(WOKEN_WITHIN, task)
        .await
        .unwrap_or_else(|_| panic!("{what}: not woken within {WOKEN_WITHIN:?}"))
        .expect("task")
}

fn field_of(client: &ferrisson::Client, owner: Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

/// Waits until the fair queue of `name` is as long as `expected`, then asserts it is that.
async fn wait_fair_queue(raw: &fred::clients::Client, name: &str, expected: &[&str]) {
    let key = format!("redisson_lock_queue:{}", tagged(name));
    let llen = || async { raw.llen::<usize, _>(&key).await.expect("LLEN") };
    let length = poll_until(Duration::from_secs(10), POLL_INTERVAL, llen, |len| {
        *len == expected.len()
    })
    .await;
    assert_eq!(length, Ok(expected.len()), "{name}: queue length");
    let queue: Vec<String> = raw.lrange(&key, 0, -1).await.expect("LRANGE");
    assert_eq!(queue, expected, "{name}: queue in arrival order");
}

/// Redisson's T(N): the name when it has a `{`, `{N}` otherwise.
fn tagged(name: &str) -> String {
    if name.contains('{') {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    }
}

/// The sharded messages `rx` received within `within` (classic ones on Redis 6.2), as
/// (channel, payload).
async fn messages_within(
    rx: &mut tokio::sync::broadcast::Receiver<Message>,
    within: Duration,
) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    let end = tokio::time::Instant::now() + within;
    // Redis 6.2: the observer subscribed classically (see `fair_lock`).
    let kind = if support::server_binary().has_7_0_features() {
        fred::types::MessageKind::SMessage
    } else {
        fred::types::MessageKind::Message
    };
    while let Ok(Ok(message)) = tokio::time::timeout_at(end, rx.recv()).await {
        if message.kind == kind {
            let payload: String = message.value.convert().expect("text payload");
            seen.push((message.channel.to_string(), payload));
        }
    }
    seen
}

/// The fair guard of a waiter woken by a release: by a message, which went to its own
/// `channel` only.
async fn handed_to(
    waiter: JoinHandle<ferrisson::Result<ferrisson::FairGuard>>,
    rx: &mut tokio::sync::broadcast::Receiver<Message>,
    name: &str,
    channel: String,
) -> ferrisson::FairGuard {
    let guard = woken(waiter, &format!("{name}: waiter on {channel}"))
        .await
        .expect("the waiter acquires");
    assert_eq!(guard.acquisition().woken_by, WokenBy::Message, "{name}");
    assert_eq!(
        messages_within(rx, Duration::from_millis(300)).await,
        [(channel, "0".to_owned())],
        "{name}: only the queue's head is told, on its own channel"
    );
    guard
}

/// Two waiters of two clients queue behind a holder; each release wakes the queue's head on its
/// own channel (in the name's slot, where the queue and timeout set are too), in arrival order.
async fn fair_lock(f: &Family) {
    for name in f.names_on_every_master("fair", true).await {
        let holder = f.a.fair_lock(&name).with_owner(Owner::new());
        let held = holder.lock().await.expect("the holder locks");
        let (o1, o2) = (Owner::new(), Owner::new());
        let (f1, f2) = (field_of(&f.b, o1), field_of(&f.a, o2));
        let channel = |field: &str| format!("redisson_lock__channel:{}:{field}", tagged(&name));
        let subscriber = f.cluster.raw().await;
        let mut rx = subscriber.message_rx();
        for field in [&f1, &f2] {
            // `Auto` publishes both ways; Redis 6.2 has the classic way only.
            if support::server_binary().has_7_0_features() {
                subscriber
                    .ssubscribe(channel(field))
                    .await
                    .expect("SSUBSCRIBE");
            } else {
                subscriber
                    .subscribe(channel(field))
                    .await
                    .expect("SUBSCRIBE");
            }
        }

        let first = {
            let lock = f.b.fair_lock(&name).with_owner(o1);
            tokio::spawn(async move { lock.lock().await })
        };
        wait_fair_queue(&f.raw, &name, &[&f1]).await;
        let second = {
            let lock = f.a.fair_lock(&name).with_owner(o2);
            tokio::spawn(async move { lock.lock().await })
        };
        wait_fair_queue(&f.raw, &name, &[&f1, &f2]).await;
        let queue = format!("redisson_lock_queue:{}", tagged(&name));
        let deadlines = format!("redisson_lock_timeout:{}", tagged(&name));
        for key in [&name, &queue, &deadlines] {
            f.stored_with(key, &name).await;
        }
        for field in [&f1, &f2] {
            assert_eq!(
                keyslot(&f.raw, &channel(field)).await,
                keyslot(&f.raw, &name).await,
                "{name}: the waiter channel is in the name's slot"
            );
        }

        held.unlock().await.expect("the holder releases");
        let first = handed_to(first, &mut rx, &name, channel(&f1)).await;
        assert!(!second.is_finished(), "{name}: the second waiter overtook");
        first.unlock().await.expect("release");
        let second = handed_to(second, &mut rx, &name, channel(&f2)).await;
        second.unlock().await.expect("release");
        for key in [&name, &queue, &deadlines] {
            assert!(!f.exists(key).await, "{name}: `{key}` left behind");
        }
        subscriber.quit().await.ok();
    }
}

/// A waiter of one client parked on a semaphore is woken by a release in the other.
async fn semaphore(f: &Family) {
    for name in f.names_on_every_master("sem", true).await {
        let sem = f.a.semaphore(&name);
        assert!(sem.try_set_permits(1).await.expect("set permits"));
        let permits = sem.acquire(1).await.expect("the holder acquires");
        let waiter = {
            let sem = f.b.semaphore(&name);
            tokio::spawn(async move { sem.acquire(1).await })
        };
        support::wait_parked(&f.b, &name, 1).await;
        assert!(!waiter.is_finished(), "{name}: acquired a taken permit");
        f.stored_with(&name, &name).await;
        permits.release().await.expect("release");
        let got = woken(waiter, &name).await.expect("the waiter acquires");
        assert_eq!(got.acquisition().woken_by, WokenBy::Message, "{name}");
        got.release().await.expect("release");
        assert_eq!(sem.available_permits().await.expect("permits"), 1);
        assert!(sem.delete().await.expect("delete"));
    }
}

/// Waiters of two clients are released when `count_down` brings the latch to 0 (not before).
/// Only plain names: the latch channel wraps the whole name in braces, so a `{tag}` name's
/// channel hashes elsewhere (see [`refused_names`]).
async fn count_down_latch(f: &Family) {
    for name in f.names_on_every_master("latch", false).await {
        let latch = f.a.count_down_latch(&name);
        assert!(latch.try_set_count(2).await.expect("set count"));
        let waiters: Vec<_> = [&f.a, &f.b]
            .into_iter()
            .map(|client| {
                let latch = client.count_down_latch(&name);
                tokio::spawn(async move { latch.wait_for(Duration::from_secs(20)).await })
            })
            .collect();
        sleep(PARK).await;
        f.b.count_down_latch(&name)
            .count_down()
            .await
            .expect("count down");
        sleep(PARK).await;
        assert!(
            waiters.iter().all(|waiter| !waiter.is_finished()),
            "{name}: released at count 1"
        );
        f.stored_with(&name, &name).await;
        latch.count_down().await.expect("count down");
        for waiter in waiters {
            assert!(
                woken(waiter, &name).await.expect("wait"),
                "{name}: the wait ran out instead"
            );
        }
        assert!(!f.exists(&name).await, "{name}: a latch at 0 is deleted");
    }
}

/// A waiter of one client is woken when the other releases the only permit by its id.
async fn permit_expirable_semaphore(f: &Family) {
    for name in f.names_on_every_master("psem", true).await {
        let sem = f.a.permit_expirable_semaphore(&name);
        assert!(sem.try_set_permits(1).await.expect("set permits"));
        let id = sem
            .acquire(None)
            .await
            .expect("the holder acquires")
            .forget();
        let waiter = {
            let sem = f.b.permit_expirable_semaphore(&name);
            tokio::spawn(async move { sem.acquire(None).await })
        };
        support::wait_parked(&f.b, &name, 1).await;
        assert!(!waiter.is_finished(), "{name}: acquired a taken permit");
        f.stored_with(&name, &name).await;
        f.stored_with(&format!("{}:timeout", tagged(&name)), &name)
            .await;
        sem.release(&id).await.expect("release by id");
        let got = woken(waiter, &name).await.expect("the waiter acquires");
        assert_eq!(got.acquisition().woken_by, WokenBy::Message, "{name}");
        assert_ne!(got.id(), id);
        got.release().await.expect("release");
        assert!(sem.delete().await.expect("delete"));
    }
}

/// For each name of `$kind` on every master: a lock of client `a` (built by `$method`) keeps
/// client `b`'s out, and its release lets `b`'s waiter in, woken `$woken_by`. A macro, as the
/// lock types share no trait.
macro_rules! exclusion_across_clients {
    ($f:expr, $kind:literal, $method:ident, $woken_by:expr) => {
        for name in $f.names_on_every_master($kind, true).await {
            let held = $f.a.$method(&name).with_owner(Owner::new());
            let guard = held.lock().await.expect("the holder locks");
            $f.stored_with(&name, &name).await;
            let other = $f.b.$method(&name).with_owner(Owner::new());
            assert!(
                matches!(other.try_lock().await.expect("try_lock"), Attempt::Busy),
                "{name}: both clients hold the {}",
                $kind
            );
            let waiter =
                tokio::spawn(async move { other.try_lock_within(Duration::from_secs(10)).await });
            if $woken_by == WokenBy::Message {
                support::wait_parked(&$f.b, &name, 1).await;
            } else {
                // A spin waiter never parks: it polls, and is woken by its back-off pause.
                sleep(PARK).await;
            }
            assert!(!waiter.is_finished(), "{name}: the waiter got in");
            guard.unlock().await.expect("release");
            let got = woken(waiter, &name)
                .await
                .expect("try_lock_within")
                .acquired()
                .expect("the other client acquires");
            assert_eq!(got.acquisition().woken_by, $woken_by, "{name}");
            got.unlock().await.expect("release");
            assert!(!$f.exists(&name).await, "{name}: not released");
        }
    };
}

/// Spin and non-reentrant locks exclude the other client while held; a release lets it in (a
/// spin waiter polls, so its back-off pause is what ends its wait).
async fn spin_and_non_reentrant(f: &Family) {
    exclusion_across_clients!(f, "spin", spin_lock, WokenBy::BackOff);
    exclusion_across_clients!(f, "nonreentrant", non_reentrant_lock, WokenBy::Message);
}

/// MultiLock and RedLock over parts in different slots (one per master): all parts taken on
/// their masters, a composite of the other client sharing a part is kept out, all released.
async fn multi_and_red_lock(f: &Family) {
    for kind in ["multi", "red"] {
        let names = f.names_on_every_master(kind, true).await;
        let build = |client: &ferrisson::Client, names: &[String]| {
            let locks: Vec<_> = names.iter().map(|name| client.lock(name)).collect();
            if kind == "multi" {
                Composite::Multi(MultiLock::new(locks).expect("MultiLock"))
            } else {
                Composite::Red(RedLock::new(locks).expect("RedLock"))
            }
        };
        let held = build(&f.a, &names).lock(Owner::new()).await;
        for name in &names {
            f.stored_with(name, name).await;
        }
        if kind == "multi" {
            // A MultiLock of the other client sharing one part (and two free ones) needs all.
            let mut others = f.names_on_every_master("multix", true).await;
            others[0].clone_from(&names[2]);
            assert!(
                !build(&f.b, &others).try_lock(Owner::new()).await,
                "{kind}: a held part was taken by the other client"
            );
        }
        let other_whole = build(&f.b, &names);
        assert!(
            !other_whole.try_lock(Owner::new()).await,
            "{kind}: both clients hold the composite"
        );
        held.unlock().await.expect("release");
        for name in &names {
            assert!(!f.exists(name).await, "{kind}: `{name}` not released");
        }
        let again = other_whole.lock(Owner::new()).await;
        again.unlock().await.expect("release");
    }
}

enum Composite {
    Multi(MultiLock),
    Red(RedLock),
}

impl Composite {
    async fn lock(&self, owner: Owner) -> ferrisson::MultiGuard {
        match self {
            Composite::Multi(lock) => lock.with_owner(owner).lock().await,
            Composite::Red(lock) => lock.with_owner(owner).lock().await,
        }
        .expect("the composite locks")
    }

    /// Whether a single attempt acquired (released at once if so).
    async fn try_lock(&self, owner: Owner) -> bool {
        let attempt = match self {
            Composite::Multi(lock) => lock.with_owner(owner).try_lock().await,
            Composite::Red(lock) => lock.with_owner(owner).try_lock().await,
        }
        .expect("try_lock");
        match attempt.acquired() {
            Some(guard) => {
                guard.unlock().await.expect("release");
                true
            }
            None => false,
        }
    }
}

/// Names whose channel (or other key) hashes to another slot than the name are refused with
/// `InvalidArgument` by each primitive that checks, and nothing is written.
async fn refused_names(f: &Family) {
    fn refused<T: std::fmt::Debug>(what: &str, name: &str, result: ferrisson::Result<T>) {
        match result {
            Err(Error::InvalidArgument(message)) => {
                assert!(
                    message.contains("cluster"),
                    "{what} `{name}`: the message does not say why: {message}"
                )
            }
            other => panic!("{what} `{name}`: not refused: {other:?}"),
        }
    }
    for name in ["a}b", "a{b"] {
        let owner = Owner::new();
        refused(
            "fair lock",
            name,
            f.a.fair_lock(name).with_owner(owner).lock().await,
        );
        refused(
            "spin lock",
            name,
            f.a.spin_lock(name).with_owner(owner).lock().await,
        );
        refused(
            "non-reentrant lock",
            name,
            f.a.non_reentrant_lock(name).with_owner(owner).lock().await,
        );
        refused(
            "semaphore",
            name,
            f.a.semaphore(name).try_set_permits(1).await,
        );
        refused("semaphore", name, f.a.semaphore(name).acquire(1).await);
        let permits = f.a.permit_expirable_semaphore(name);
        refused("permit semaphore", name, permits.try_set_permits(1).await);
        refused("permit semaphore", name, permits.acquire(None).await);
        let free = f.names_on_every_master("multi:ok", false).await;
        let parts = vec![f.a.lock(&free[0]), f.a.lock(name), f.a.lock(&free[1])];
        // A composite checks its parts' names when it is built.
        refused("MultiLock", name, MultiLock::new(parts.clone()).map(drop));
        refused("RedLock", name, RedLock::new(parts).map(drop));
        for part in &free {
            assert!(
                !f.exists(part).await,
                "a refused MultiLock left `{part}` held"
            );
        }
        assert!(!f.exists(name).await, "`{name}` was written");
    }
    // The latch channel is `redisson_countdownlatch__channel__{` + N + `}` (protocol §12.1):
    // of a `{tag}` name it hashes `{tag`, not the name's `tag`; of `a}b`, `a`. (Of `a{b` it
    // hashes `a{b`, as the name does, so that name is usable.)
    for name in ["a}b", "{order}:latch", "user:{7}:latch"] {
        let latch = f.a.count_down_latch(name);
        refused("latch", name, latch.try_set_count(1).await);
        refused("latch", name, latch.count_down().await);
        refused(
            "latch",
            name,
            latch.wait_for(Duration::from_millis(10)).await,
        );
        assert!(!f.exists(name).await, "`{name}` was written");
    }
}

/// Deadlock detection across masters: two owners in opposite orders on names of two masters.
/// With `Record`, `find_deadlocks` (a `SCAN` of every master) names the cycle; with `Detect`,
/// exactly one wait gives way and the other proceeds.
async fn deadlock(f: &Family) {
    use ferrisson::DeadlockDetection;
    let names = f.names_on_every_master("dl", true).await;
    let (x, y) = (&names[0], &names[1]);
    let connect = |mode: DeadlockDetection| async move {
        let mut config = ferrisson::Config::new(f.cluster.url());
        config.deadlock_detection = mode;
        ferrisson::Client::new(config).await.expect("connect")
    };
    let recording = DeadlockDetection::Record {
        after: Duration::from_millis(50),
    };
    let detecting = DeadlockDetection::Detect {
        threshold: Duration::from_millis(300),
    };
    for mode in [recording, detecting] {
        let (one, two) = (connect(mode).await, connect(mode).await);
        let (first, second) = (Owner::new(), Owner::new());
        let held_x = one.lock(x).with_owner(first).lock().await.expect("x");
        let held_y = two.lock(y).with_owner(second).lock().await.expect("y");
        let wait = Duration::from_secs(3);
        let one_waits = tokio::spawn({
            let lock = one.lock(y).with_owner(first);
            async move { lock.try_lock_within(wait).await.map(|a| a.is_busy()) }
        });
        support::wait_waits_recorded(&one, 1).await;
        let two_waits = tokio::spawn({
            let lock = two.lock(x).with_owner(second);
            async move { lock.try_lock_within(wait).await.map(|a| a.is_busy()) }
        });
        if mode == recording {
            let found = poll_until(
                Duration::from_secs(5),
                POLL_INTERVAL,
                || async { f.a.find_deadlocks().await.expect("find_deadlocks") },
                |found| found.len() == 1,
            )
            .await
            .expect("the cycle is found across masters");
            assert_eq!(found[0].steps.len(), 2, "{}", found[0]);
            assert_eq!(
                &found[0].victim().lock,
                x,
                "the younger wait is two's, for x"
            );
            assert!(one_waits.await.expect("join").expect("Record fails nobody"));
            assert!(two_waits.await.expect("join").expect("Record fails nobody"));
            held_y.unlock().await.expect("unlock");
        } else {
            let gave_way = two_waits.await.expect("join");
            assert!(
                matches!(&gave_way, Err(Error::Deadlock { name, .. }) if name == x),
                "{gave_way:?}"
            );
            held_y.unlock().await.expect("the victim releases");
            let busy = one_waits.await.expect("join").expect("the other proceeds");
            assert!(!busy, "the older wait acquires");
        }
        held_x.unlock().await.expect("unlock");
        one.shutdown().await;
        two.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_family_works_in_a_cluster() {
    let cluster = RedisCluster::start(3, 0).await;
    let raw = cluster.raw().await;
    let connect = || async {
        let mut config = ferrisson::Config::new(cluster.url());
        config.publish_mode = PublishMode::Auto;
        ferrisson::Client::new(config).await.expect("connect")
    };
    let (a, b) = (connect().await, connect().await);
    let family = Family { raw, a, b, cluster };
    fair_lock(&family).await;
    semaphore(&family).await;
    count_down_latch(&family).await;
    permit_expirable_semaphore(&family).await;
    spin_and_non_reentrant(&family).await;
    multi_and_red_lock(&family).await;
    deadlock(&family).await;
    refused_names(&family).await;
}
