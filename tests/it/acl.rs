//! A least-privilege ACL user (issue 13, section 4). The rule is the one documented in
//! `docs/reliability.md` (read from there, so the documentation cannot drift from what is
//! tested): with it every operation of every primitive of the family works (issue 15: fair,
//! fenced, spin, non-reentrant, read-write, MultiLock, RedLock, both semaphores, the latch and
//! `inspect` besides the reentrant lock), also confined to one service's names by the documented
//! narrowing, and the server's `ACL LOG` records no denial;
//! a user without the rule's permissions gets a clear typed error, never a hang or a leaked
//! lock; and the password never shows in `Debug` output or error messages.

use crate::support;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use ferrisson::inspect::{LockKind, Primitive};
use ferrisson::{BackOff, Config, Error, MultiLock, Owner, RedLock};
use fred::prelude::*;
use support::redis_state::{channel_of, exists, wait_numsub, wait_ttl_reset};
use support::{raw_client, RedisServer};
use tokio::time::timeout;

const PASSWORD: &str = "s3cret-Pa55";

/// The `ACL SETUSER` rule of docs/reliability.md, as arguments, for user `user`: less the
/// sharded pub/sub commands on a server without them (Redis 6.2), as the docs say.
fn documented_rule(user: &str) -> Vec<String> {
    let sharded = support::server_binary().has_7_0_features();
    let docs = include_str!("../../docs/reliability.md");
    let line = docs
        .lines()
        .find(|line| line.trim_start().starts_with("ACL SETUSER ferrisson "))
        .expect("docs/reliability.md documents the ACL rule");
    line.split_whitespace()
        .skip(2) // ACL SETUSER
        .filter(|word| sharded || !matches!(*word, "+ssubscribe" | "+sunsubscribe" | "+spublish"))
        .map(|word| match word {
            "ferrisson" => user.to_owned(),
            ">PASSWORD" => format!(">{PASSWORD}"),
            other => other.to_owned(),
        })
        .collect()
}

async fn set_user(raw: &fred::clients::Client, args: Vec<String>) {
    let _: Value = raw
        .custom(
            fred::cmd!("ACL"),
            [vec!["SETUSER".to_owned()], args].concat(),
        )
        .await
        .expect("ACL SETUSER");
}

/// The denials the server logged since the last reset, as "reason: object" lines.
async fn acl_denials(raw: &fred::clients::Client) -> Vec<String> {
    let log: Vec<Value> = raw
        .custom(fred::cmd!("ACL"), vec!["LOG"])
        .await
        .expect("ACL LOG");
    log.iter()
        .map(|entry| {
            let fields: Vec<Value> = entry.clone().convert().unwrap_or_default();
            let text: Vec<String> = fields
                .iter()
                .filter_map(|value| value.as_string())
                .collect();
            text.join(" ")
        })
        .collect()
}

/// The server logged no ACL denial, and synced writes ran their `WAIT` as the user.
async fn assert_nothing_denied_and_writes_synced(raw: &fred::clients::Client) {
    assert_eq!(acl_denials(raw).await, Vec::<String>::new(), "denied");
    assert!(
        support::redis_state::command_calls(raw, "wait").await > 0,
        "synced writes waited for the replicas"
    );
}

/// Waits for `lock`, then releases it.
async fn take_and_release(lock: ferrisson::Lock) {
    let guard = lock
        .try_lock_within(Duration::from_secs(10))
        .await
        .expect("acquire")
        .acquired()
        .expect("acquired");
    guard.unlock().await.expect("release");
}

/// The watchdog lease of `config_for`: short enough that holds are renewed within the tests (a
/// third of it after they are taken), long enough that no acquire on a loaded machine comes
/// near it. The tests wait for a renewal to show on the server ([`wait_ttl_reset`]) rather than
/// sleeping past the lease.
const LEASE: Duration = Duration::from_secs(3);

fn config_for(server: &RedisServer, user: &str) -> Config {
    let mut config = Config::new(format!(
        "redis://{user}:{PASSWORD}@127.0.0.1:{}",
        server.port()
    ));
    config.watchdog_timeout = LEASE;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_least_privilege_user_can_do_everything_ferrisson_does() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // A replica, so that synced writes (INFO replication, WAIT) run under the rule too.
    let port = server.port().to_string();
    let _replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    support::redis_state::wait_replicas_streaming(&raw, 1).await;
    set_user(&raw, documented_rule("locker")).await;
    let _: Value = raw
        .custom(fred::cmd!("ACL"), vec!["LOG", "RESET"])
        .await
        .expect("ACL LOG RESET");
    // The `WAIT`s counted at the end are the client's, not the readiness check's.
    support::redis_state::reset_stats(&raw).await;
    let mut config = config_for(&server, "locker");
    config.synced_writes = ferrisson::SyncedWrites::Always;
    let holder_client = ferrisson::Client::new(config)
        .await
        .expect("the least-privilege user connects");
    let waiter_client = ferrisson::Client::new(config_for(&server, "locker"))
        .await
        .expect("the least-privilege user connects");
    let name = "acl:orders:42";

    let lock = holder_client.lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    let again = guard.reenter().await.expect("re-enter");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 2);
    assert!(lock.is_locked().await.expect("is_locked"));
    assert!(lock.is_held_by_current_owner().await.expect("held by"));
    lock.remaining_ttl().await.expect("remaining_ttl");
    let info = holder_client.inspect(name).await.expect("inspect");
    assert!(info.is_locked());
    // A waiter in another client, woken by the unlock message; renewals meanwhile.
    let waiter = tokio::spawn({
        let lock = waiter_client.lock(name).with_owner(Owner::new());
        async move { take_and_release(lock).await }
    });
    wait_numsub(&raw, &channel_of(name), 1, Duration::from_secs(5)).await;
    wait_ttl_reset(&raw, name, LEASE).await;
    assert!(!guard.is_lost(), "renewed");
    // Local waiters of the holder's client too (hand-off, giving way).
    let local = tokio::spawn({
        let lock = holder_client.lock(name).with_owner(Owner::new());
        async move { take_and_release(lock).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    again.unlock().await.expect("partial release");
    guard.unlock().await.expect("full release");
    for task in [waiter, local] {
        let Ok(outcome) = timeout(Duration::from_secs(5), task).await else {
            panic!(
                "a waiter was not woken; ACL denials: {:?}",
                acl_denials(&raw).await
            );
        };
        outcome.expect("waiter task");
    }
    // Dropped guards and force unlocks.
    drop(lock.lock().await.expect("lock again"));
    support::redis_state::wait_key_gone(&raw, name, Duration::from_secs(2)).await;
    lock.lock().await.expect("lock again").detach();
    assert!(waiter_client
        .lock(name)
        .force_unlock()
        .await
        .expect("force_unlock"));
    holder_client.shutdown().await;
    waiter_client.shutdown().await;

    assert_nothing_denied_and_writes_synced(&raw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_permissions_gets_a_clear_error_and_leaves_nothing() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    // Can connect and read, nothing else.
    set_user(
        &raw,
        [
            "reader",
            "on",
            &format!(">{PASSWORD}"),
            "~*",
            "&*",
            "+@read",
            "+@connection",
        ]
        .map(str::to_owned)
        .to_vec(),
    )
    .await;
    let client = ferrisson::Client::new(config_for(&server, "reader"))
        .await
        .expect("the reader connects");
    let lock = client.lock("acl:denied").with_owner(Owner::new());
    for result in [
        lock.lock().await.map(drop),
        lock.try_lock().await.map(drop),
        lock.try_lock_within(Duration::from_millis(200))
            .await
            .map(drop),
    ] {
        let err = result.expect_err("the reader cannot run the lock scripts");
        assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("permission"), "{text}");
        assert!(!text.contains(PASSWORD), "{text}");
    }
    assert_eq!(exists(&raw, "acl:denied").await, 0);

    // The documented rule narrowed to the `orders:` locks (their channels are passed to the
    // release script as keys, so their pattern stays): a lock outside gets the same clear error.
    let rule: Vec<String> = documented_rule("narrow")
        .into_iter()
        .flat_map(|word| match word.as_str() {
            "~*" => vec![
                "~orders:*".to_owned(),
                "~redisson_lock__channel:*".to_owned(),
            ],
            _ => vec![word],
        })
        .collect();
    set_user(&raw, rule).await;
    let narrow = ferrisson::Client::new(config_for(&server, "narrow"))
        .await
        .expect("the narrow user connects");
    let inside = narrow.lock("orders:1").with_owner(Owner::new());
    inside
        .lock()
        .await
        .expect("a lock inside the pattern")
        .unlock()
        .await
        .expect("release");
    let err = narrow
        .lock("invoices:1")
        .with_owner(Owner::new())
        .lock()
        .await
        .expect_err("a lock outside the key pattern");
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    assert_eq!(exists(&raw, "invoices:1").await, 0);
}

/// Every log line of this process, at every level (ferrisson's `tracing` events and, through
/// the `log` bridge, fred's): the global subscriber, installed only in the own process of
/// `passwords_stay_out_of_logs` (where no other test logs into it or is slowed down by it).
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || LogSink(sink.clone()))
            .try_init()
            .expect("the only subscriber of this process");
        logs
    })
    .clone()
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_stay_out_of_logs() {
    let me = support::processes::test_name(module_path!(), "passwords_stay_out_of_logs");
    if !support::processes::in_own_process(&me).await {
        return;
    }
    let logs = captured_logs();
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    set_user(&raw, documented_rule("logged")).await;
    let client = ferrisson::Client::new(config_for(&server, "logged"))
        .await
        .expect("connects");
    let guard = client.lock("acl:logged").lock().await.expect("lock");
    guard.unlock().await.expect("release");
    client.shutdown().await;
    let _ = ferrisson::Client::new(config_for(&server, "nobody")).await;
    let text = String::from_utf8_lossy(&logs.lock()).into_owned();
    assert!(
        text.contains("ferrisson client connected"),
        "the capture works: {text}"
    );
    assert!(
        text.contains("logged:***@"),
        "the URL is logged, masked: {text}"
    );
    assert!(!text.contains(PASSWORD), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_stay_out_of_debug_output_and_errors() {
    let server = RedisServer::start();
    let config = config_for(&server, "nobody");
    assert!(!format!("{config:?}").contains(PASSWORD));
    let err = ferrisson::Client::new(config)
        .await
        .expect_err("no such user");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(!err.to_string().contains(PASSWORD), "{err}");
    assert!(!format!("{err:?}").contains(PASSWORD), "{err:?}");
}

/// Behind Sentinel the documented rule is enough as well: fred checks `ROLE` on the master the
/// sentinels name, and synced writes, on by default there, read `INFO replication` and send
/// `WAIT`. The sentinels themselves need no user: the URL's credentials are the data nodes'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rule_is_enough_behind_sentinel() {
    let fixture = support::sentinel::RedisSentinel::start().await;
    for index in 0..fixture.nodes.len() {
        let node = fixture.node_client(index).await;
        set_user(&node, documented_rule("locker")).await;
        let _: Value = node
            .custom(fred::cmd!("ACL"), vec!["LOG", "RESET"])
            .await
            .expect("ACL LOG RESET");
    }
    let url = fixture.url().replacen(
        "redis-sentinel://",
        &format!("redis-sentinel://locker:{PASSWORD}@"),
        1,
    );
    let client = ferrisson::Client::new(Config::new(url))
        .await
        .expect("the least-privilege user connects through the sentinels");
    let waiter_client = ferrisson::Client::new(client.config().clone())
        .await
        .expect("a second client connects");
    let name = "acl:sentinel";
    let guard = support::hold(&client, name).await;
    let waiter = tokio::spawn({
        let lock = waiter_client.lock(name).with_owner(Owner::new());
        async move { take_and_release(lock).await }
    });
    let master = fixture.master_client().await;
    wait_numsub(&master, &channel_of(name), 1, Duration::from_secs(5)).await;
    guard.unlock().await.expect("release");
    timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is woken")
        .expect("waiter task");
    client.shutdown().await;
    waiter_client.shutdown().await;

    assert_nothing_denied_and_writes_synced(&master).await;
}

// Every primitive -------------------------------------------------------------------------------

/// The narrowing of docs/reliability.md (keys and channels of `orders:` names only), as
/// arguments, for user `user`.
fn documented_confinement(user: &str) -> Vec<String> {
    let docs = include_str!("../../docs/reliability.md");
    let line = docs
        .lines()
        .find(|line| {
            line.trim_start()
                .starts_with("ACL SETUSER ferrisson resetkeys ")
        })
        .expect("docs/reliability.md documents how to confine a service");
    line.split_whitespace()
        .skip(2)
        .map(|word| match word {
            "ferrisson" => user.to_owned(),
            other => other.to_owned(),
        })
        .collect()
}

/// A server with user `user` under `rules` (applied in order), its ACL log reset, and two
/// clients of that user (watchdog leases of [`LEASE`], so that renewals happen within the
/// test).
struct Setup {
    _server: RedisServer,
    raw: fred::clients::Client,
    holder: ferrisson::Client,
    waiter: ferrisson::Client,
}

impl Setup {
    async fn start(user: &str, rules: Vec<Vec<String>>) -> Setup {
        let server = RedisServer::start();
        let raw = raw_client(&server.url()).await;
        for rule in rules {
            set_user(&raw, rule).await;
        }
        let _: Value = raw
            .custom(fred::cmd!("ACL"), vec!["LOG", "RESET"])
            .await
            .expect("ACL LOG RESET");
        let connect = |config| async {
            ferrisson::Client::new(config)
                .await
                .expect("the least-privilege user connects")
        };
        // One local hand-off per budget: the holder's releases soon hand over conditionally,
        // counting the channel's listeners (`PUBSUB NUMSUB`, `NUMPAT` in lua/release.lua).
        // Deadlock detection on: waits that last are recorded under the rule too.
        let detecting = |server: &RedisServer| {
            let mut config = config_for(server, user);
            config.deadlock_detection = ferrisson::DeadlockDetection::Detect {
                threshold: Duration::from_millis(300),
            };
            config
        };
        let mut config = detecting(&server);
        config.max_local_handoffs = 1;
        let holder = connect(config).await;
        let waiter = connect(detecting(&server)).await;
        Setup {
            _server: server,
            raw,
            holder,
            waiter,
        }
    }

    /// Waits until a waiter subscribed to `channel`.
    async fn parked(&self, channel: &str) {
        wait_numsub(&self.raw, channel, 1, Duration::from_secs(5)).await;
    }

    /// Waits until the watchdog renewed the lock `key` (its TTL was reset).
    async fn renewed(&self, key: &str) {
        wait_ttl_reset(&self.raw, key, LEASE).await;
    }

    /// `inspect_as`'s count of a semaphore or latch.
    async fn count_as(&self, name: &str, primitive: Primitive) -> Option<i64> {
        let info = self.holder.inspect_as(name, primitive).await;
        info.expect("inspect_as").count
    }

    async fn shutdown_and_assert_nothing_denied(self) {
        self.holder.shutdown().await;
        self.waiter.shutdown().await;
        assert_eq!(acl_denials(&self.raw).await, Vec::<String>::new(), "denied");
    }
}

/// Awaits a waiter task, within 5 s.
async fn woken<T>(task: tokio::task::JoinHandle<T>, what: &str) -> T {
    timeout(Duration::from_secs(5), task)
        .await
        .unwrap_or_else(|_| panic!("{what} was not woken"))
        .unwrap_or_else(|err| panic!("{what}: {err}"))
}

/// In a task of its own: awaits `$acquire`, then releases.
macro_rules! waiter {
    ($acquire:expr) => {
        tokio::spawn(async move {
            let guard = $acquire.await.expect("the waiter acquires");
            guard.unlock().await.expect("the waiter releases");
        })
    };
}

/// Releases `$guard`s in order, awaits `$waiter` (woken by the last release), then locks
/// `$lock` again, detaches the guard and force-unlocks it.
macro_rules! release_wake_and_force {
    ($lock:expr, [$($guard:expr),+], $waiter:expr, $what:expr) => {{
        $($guard.unlock().await.expect("release");)+
        woken($waiter, $what).await;
        $lock.lock().await.expect("lock").detach();
        assert!($lock.force_unlock().await.expect("force_unlock"));
    }};
}

/// Every primitive of the family, at once (so the renewal waits overlap), on names starting
/// with `prefix`. Boxed: ten such futures side by side overflow a test thread's stack.
async fn use_every_primitive(setup: &Setup, prefix: &str) {
    // A denied call can leave a waiter waiting (a fair waiter that could not leave the queue
    // blocks the next one until its deadline): bounded, and reported with the denials.
    let every = use_every_primitive_unbounded(setup, prefix);
    if timeout(Duration::from_secs(30), every).await.is_err() {
        panic!("stuck; ACL denials: {:?}", acl_denials(&setup.raw).await);
    }
}

async fn use_every_primitive_unbounded(setup: &Setup, prefix: &str) {
    let name = |kind: &str| format!("{prefix}{kind}");
    let names = [
        name("reentrant"),
        name("fair"),
        name("fenced"),
        name("spin"),
        name("non-reentrant"),
        name("read-write"),
        name("multi"),
        name("semaphore"),
        name("permits"),
        name("latch"),
        name("token"),
        name("deadlock-a"),
        name("deadlock-b"),
    ];
    tokio::join!(
        Box::pin(use_reentrant(setup, &names[0])),
        Box::pin(use_fair(setup, &names[1])),
        Box::pin(use_fenced(setup, &names[2])),
        Box::pin(use_spin(setup, &names[3])),
        Box::pin(use_non_reentrant(setup, &names[4])),
        Box::pin(use_read_write(setup, &names[5])),
        Box::pin(use_multi(setup, &names[6])),
        Box::pin(use_semaphore(setup, &names[7])),
        Box::pin(use_permit_semaphore(setup, &names[8])),
        Box::pin(use_latch(setup, &names[9])),
        Box::pin(use_token(setup, &names[10])),
        Box::pin(use_deadlock_detection(setup, &names[11], &names[12])),
    );
}

/// Deadlock detection: two owners take `a` and `b` in opposite orders; the younger wait gives
/// way (its edges written, renewed and removed, the walk's reads), then `find_deadlocks` and
/// `recorded_waits` scan for every client's edges.
async fn use_deadlock_detection(setup: &Setup, a: &str, b: &str) {
    let (first, second) = (Owner::new(), Owner::new());
    let held_a = setup.holder.lock(a).with_owner(first).lock().await;
    let held_b = setup.waiter.lock(b).with_owner(second).lock().await;
    let (held_a, held_b) = (held_a.expect("a"), held_b.expect("b"));
    let older = tokio::spawn({
        let lock = setup.holder.lock(b).with_owner(first);
        async move { lock.lock().await.map(|guard| guard.detach()) }
    });
    support::wait_waits_recorded(&setup.holder, 1).await;
    let younger = setup.waiter.lock(a).with_owner(second).lock().await;
    assert!(
        matches!(&younger, Err(Error::Deadlock { .. })),
        "{younger:?}"
    );
    held_b.unlock().await.expect("the victim releases");
    woken(older, "the older wait")
        .await
        .expect("the older wait acquires");
    setup
        .holder
        .lock(b)
        .with_owner(first)
        .unlock()
        .await
        .expect("unlock");
    held_a.unlock().await.expect("unlock");
    assert!(setup
        .holder
        .find_deadlocks()
        .await
        .expect("find")
        .is_empty());
    setup.waiter.recorded_waits().await.expect("recorded_waits");
}

async fn use_reentrant(setup: &Setup, name: &str) {
    let lock = setup.holder.lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    let again = guard.reenter().await.expect("re-enter");
    let waiter = setup.waiter.lock(name).with_owner(Owner::new());
    let waiter = waiter!(waiter.lock());
    setup.parked(&channel_of(name)).await;
    setup.renewed(name).await;
    assert!(!guard.is_lost(), "renewed");
    assert!(setup
        .holder
        .inspect(name)
        .await
        .expect("inspect")
        .is_locked());
    again.unlock().await.expect("partial release");
    guard.unlock().await.expect("release");
    woken(waiter, "the reentrant waiter").await;
    // Local waiters of the holder's client, handed the lock in turn.
    let guard = lock.lock().await.expect("lock");
    let locals: Vec<_> = (0..3)
        .map(|_| {
            let local = setup.holder.lock(name).with_owner(Owner::new());
            waiter!(local.lock())
        })
        .collect();
    setup.parked(&channel_of(name)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.unlock().await.expect("release");
    for local in locals {
        woken(local, "a local waiter").await;
    }
    lock.lock().await.expect("lock").detach();
    assert!(lock.force_unlock().await.expect("force_unlock"));
}

/// The channel a fair-lock waiter of `client`'s `owner` parks on.
fn fair_channel(client: &ferrisson::Client, name: &str, owner: Owner) -> String {
    format!(
        "redisson_lock__channel:{{{name}}}:{}:{}",
        client.id(),
        owner.id()
    )
}

async fn use_fair(setup: &Setup, name: &str) {
    let lock = setup.holder.fair_lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    let again = lock.lock().await.expect("re-enter");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 2);
    // A waiter that gives up (lua/fair_give_up.lua) with another queued behind it, whose
    // deadline moves up.
    let (first, second) = (Owner::new(), Owner::new());
    let gives_up = setup.waiter.fair_lock(name).with_owner(first);
    let gives_up = tokio::spawn(async move {
        let wait = Duration::from_secs(1);
        let attempt = gives_up.try_lock_within(wait).await;
        attempt.expect("try_lock_within").acquired().is_none()
    });
    setup
        .parked(&fair_channel(&setup.waiter, name, first))
        .await;
    let waiter = setup.waiter.fair_lock(name).with_owner(second);
    let waiter = waiter!(waiter.lock());
    setup
        .parked(&fair_channel(&setup.waiter, name, second))
        .await;
    assert!(woken(gives_up, "the waiter that gives up").await, "gave up");
    setup.renewed(name).await;
    assert!(!guard.is_lost(), "renewed");
    let info = setup.holder.inspect(name).await.expect("inspect");
    assert_eq!(info.kind, LockKind::Fair);
    assert!(lock.is_held_by_current_owner().await.expect("held by"));
    lock.remaining_ttl().await.expect("remaining_ttl");
    release_wake_and_force!(lock, [again, guard], waiter, "the fair waiter");
    lock.delete().await.expect("delete");
}

async fn use_fenced(setup: &Setup, name: &str) {
    let lock = setup.holder.fenced_lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    let again = lock.lock().await.expect("re-enter");
    assert!(
        again.token() > guard.token(),
        "a re-entry takes a new token"
    );
    let waiter = setup.waiter.fenced_lock(name).with_owner(Owner::new());
    let waiter = waiter!(waiter.lock());
    setup.parked(&channel_of(name)).await;
    setup.renewed(name).await;
    assert!(!guard.is_lost(), "renewed");
    assert_eq!(lock.token().await.expect("token"), Some(again.token()));
    let info = setup.holder.inspect(name).await.expect("inspect");
    assert_eq!(info.kind, LockKind::Fenced);
    release_wake_and_force!(lock, [again, guard], waiter, "the fenced waiter");
    lock.delete().await.expect("delete");
}

async fn use_spin(setup: &Setup, name: &str) {
    let backoff = BackOff::constant(Duration::from_millis(50)).expect("back-off");
    let lock = setup.holder.spin_lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    let again = lock.lock().await.expect("re-enter");
    assert_eq!(lock.hold_count().await.expect("hold_count"), 2);
    let waiter = setup.waiter.spin_lock(name).with_owner(Owner::new());
    let waiter = waiter.with_backoff(backoff);
    let waiter = waiter!(waiter.lock());
    setup.renewed(name).await;
    assert!(!guard.is_lost(), "renewed");
    release_wake_and_force!(lock, [again, guard], waiter, "the spinning waiter");
}

async fn use_token(setup: &Setup, name: &str) {
    let backoff = BackOff::constant(Duration::from_millis(50)).expect("back-off");
    let lock = setup.holder.token_lock(name).with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    assert!(lock.is_held_by_current_owner().await.expect("held"));
    let waiter = setup.waiter.token_lock(name).with_owner(Owner::new());
    let waiter = waiter.with_backoff(backoff);
    let waiter = waiter!(waiter.lock());
    setup.renewed(name).await;
    assert!(!guard.is_lost(), "renewed");
    release_wake_and_force!(lock, [guard], waiter, "the token lock's waiter");
}

async fn use_non_reentrant(setup: &Setup, name: &str) {
    let lock = setup
        .holder
        .non_reentrant_lock(name)
        .with_owner(Owner::new());
    let guard = lock.lock().await.expect("lock");
    let waiter = setup
        .waiter
        .non_reentrant_lock(name)
        .with_owner(Owner::new());
    let waiter = waiter!(waiter.lock());
    setup.parked(&channel_of(name)).await;
    setup.renewed(name).await;
    assert!(!guard.is_lost(), "renewed");
    assert!(lock.is_held_by_current_owner().await.expect("held by"));
    release_wake_and_force!(lock, [guard], waiter, "the non-reentrant waiter");
}

async fn use_read_write(setup: &Setup, name: &str) {
    let owner = setup.holder.read_write_lock(name).with_owner(Owner::new());
    let write = owner.write_lock().lock().await.expect("write");
    let read = owner.read_lock().lock().await.expect("downgrade");
    let again = owner.read_lock().lock().await.expect("re-enter");
    assert!(owner.write_lock().is_locked().await.expect("is_locked"));
    assert_eq!(owner.read_lock().hold_count().await.expect("count"), 2);
    let other = setup.waiter.read_write_lock(name).with_owner(Owner::new());
    let waiter = other.write_lock();
    let waiter = waiter!(waiter.lock());
    setup.parked(&format!("redisson_rwlock:{{{name}}}")).await;
    setup.renewed(name).await;
    assert!(!read.is_lost(), "renewed");
    let info = setup.holder.inspect(name).await.expect("inspect");
    assert!(matches!(info.kind, LockKind::ReadWrite { .. }), "{info:?}");
    write.unlock().await.expect("write release");
    again.unlock().await.expect("partial read release");
    read.unlock().await.expect("last read release");
    woken(waiter, "the writer").await;
    owner.read_lock().lock().await.expect("read").detach();
    assert!(owner.read_lock().force_unlock().await.expect("force"));
    owner.write_lock().lock().await.expect("write").detach();
    assert!(owner.write_lock().force_unlock().await.expect("force"));
}

async fn use_multi(setup: &Setup, name: &str) {
    let parts = |client: &ferrisson::Client| {
        ["a", "b", "c"].map(|part| client.lock(format!("{name}:{part}")))
    };
    let multi = MultiLock::new(parts(&setup.holder)).expect("MultiLock");
    let multi = multi.with_owner(Owner::new());
    let guard = multi.lock().await.expect("lock");
    let waiter = MultiLock::new(parts(&setup.waiter)).expect("MultiLock");
    let waiter = waiter.with_owner(Owner::new());
    let waiter = waiter!(waiter.lock());
    let (a, b, c) = (
        format!("{name}:a"),
        format!("{name}:b"),
        format!("{name}:c"),
    );
    tokio::join!(setup.renewed(&a), setup.renewed(&b), setup.renewed(&c));
    assert!(!guard.is_lost(), "renewed");
    assert!(multi.is_held_by_current_owner().await.expect("held by"));
    guard.unlock().await.expect("release");
    woken(waiter, "the MultiLock waiter").await;
    let red = RedLock::new(parts(&setup.holder)).expect("RedLock");
    let guard = red.with_owner(Owner::new()).lock().await.expect("RedLock");
    guard.unlock().await.expect("release");
}

async fn use_semaphore(setup: &Setup, name: &str) {
    let semaphore = setup.holder.semaphore(name);
    assert!(semaphore.try_set_permits(1).await.expect("try_set_permits"));
    let permits = semaphore.acquire(1).await.expect("acquire");
    let waiter = setup.waiter.semaphore(name);
    let waiter = tokio::spawn(async move {
        let permits = waiter.acquire(1).await.expect("the waiter acquires");
        permits.release().await.expect("the waiter releases");
    });
    setup.parked(&format!("redisson_sc:{{{name}}}")).await;
    assert_eq!(setup.count_as(name, Primitive::Semaphore).await, Some(0));
    permits.release().await.expect("release");
    woken(waiter, "the semaphore waiter").await;
    semaphore.add_permits(2).await.expect("add_permits");
    assert_eq!(semaphore.available_permits().await.expect("available"), 3);
    assert_eq!(semaphore.drain_permits().await.expect("drain"), 3);
    assert!(semaphore.delete().await.expect("delete"));
    let ttl = Duration::from_secs(10);
    assert!(semaphore
        .try_set_permits_with_ttl(1, ttl)
        .await
        .expect("with ttl"));
    assert!(semaphore
        .try_acquire(1)
        .await
        .expect("try_acquire")
        .acquired()
        .is_some());
}

async fn use_permit_semaphore(setup: &Setup, name: &str) {
    let semaphore = setup.holder.permit_expirable_semaphore(name);
    assert!(semaphore.try_set_permits(1).await.expect("try_set_permits"));
    let lease = Some(Duration::from_secs(10));
    let mut permit = semaphore.acquire(lease).await.expect("acquire");
    let waiter = setup.waiter.permit_expirable_semaphore(name);
    let waiter = tokio::spawn(async move {
        let permit = waiter.acquire(None).await.expect("the waiter acquires");
        permit.release().await.expect("the waiter releases");
    });
    setup.parked(&format!("redisson_sc:{{{name}}}")).await;
    assert!(permit.update_lease(None).await.expect("update_lease"));
    let info = setup.holder.inspect(name).await.expect("inspect");
    assert_eq!(info.kind, LockKind::PermitSemaphore);
    permit.release().await.expect("release");
    woken(waiter, "the permit waiter").await;
    // A permit whose lease runs out is taken back by the next acquire.
    let short = Some(Duration::from_millis(100));
    let forgotten = semaphore.acquire(short).await.expect("acquire").forget();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let wait = Duration::from_secs(5);
    let attempt = semaphore.try_acquire_for(wait, None).await.expect("again");
    let permit = attempt
        .acquired()
        .expect("the expired permit was taken back");
    assert!(!semaphore
        .try_release(&forgotten)
        .await
        .expect("try_release"));
    semaphore.add_permits(1).await.expect("add_permits");
    assert_eq!(semaphore.available_permits().await.expect("available"), 1);
    permit.release().await.expect("release");
    assert!(semaphore.delete().await.expect("delete"));
}

async fn use_latch(setup: &Setup, name: &str) {
    let latch = setup.holder.count_down_latch(name);
    assert!(latch.try_set_count(1).await.expect("try_set_count"));
    let waiter = setup.waiter.count_down_latch(name);
    let waiter = tokio::spawn(async move { waiter.wait().await.expect("the latch opens") });
    setup
        .parked(&format!("redisson_countdownlatch__channel__{{{name}}}"))
        .await;
    assert_eq!(
        setup.count_as(name, Primitive::CountDownLatch).await,
        Some(1)
    );
    assert_eq!(latch.count().await.expect("count"), 1);
    latch.count_down().await.expect("count_down");
    woken(waiter, "the latch waiter").await;
    assert!(latch
        .wait_for(Duration::from_millis(10))
        .await
        .expect("open"));
    assert!(latch.try_set_count(1).await.expect("again"));
    assert!(latch.delete().await.expect("delete"));
}

/// Every primitive of the family works as the documented user, with no denial in `ACL LOG`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_least_privilege_user_can_use_every_primitive() {
    let setup = Setup::start("family", vec![documented_rule("family")]).await;
    use_every_primitive(&setup, "acl:").await;
    setup.shutdown_and_assert_nothing_denied().await;
}

/// The documented confinement to `orders:` names: every primitive works on them, with no
/// denial; a name outside gets a clear typed error and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_confined_to_its_names_can_use_every_primitive_on_them_only() {
    let rules = vec![documented_rule("orders"), documented_confinement("orders")];
    let setup = Setup::start("orders", rules).await;
    use_every_primitive(&setup, "orders:").await;
    assert_eq!(
        acl_denials(&setup.raw).await,
        Vec::<String>::new(),
        "denied"
    );

    let client = &setup.holder;
    let outside = [
        client.fair_lock("invoices:1").lock().await.map(drop),
        client
            .semaphore("invoices:2")
            .try_set_permits(1)
            .await
            .map(drop),
        client
            .count_down_latch("invoices:3")
            .try_set_count(1)
            .await
            .map(drop),
        client.inspect("invoices:4").await.map(drop),
    ];
    for result in outside {
        let err = result.expect_err("a name outside the key patterns");
        assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    }
    for name in ["invoices:1", "invoices:2", "invoices:3"] {
        assert_eq!(exists(&setup.raw, name).await, 0, "{name}");
    }
    setup.holder.shutdown().await;
    setup.waiter.shutdown().await;
}

/// Without `+scan`, the tools that look for every client's edges get a clear typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_deadlocks_without_scan_is_permission_denied() {
    let rule: Vec<String> = documented_rule("noscan")
        .into_iter()
        .filter(|word| word != "+scan")
        .collect();
    let setup = Setup::start("noscan", vec![rule]).await;
    for result in [
        setup.holder.find_deadlocks().await.map(drop),
        setup.holder.recorded_waits().await.map(drop),
    ] {
        let err = result.expect_err("SCAN is refused");
        assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    }
    setup.holder.shutdown().await;
    setup.waiter.shutdown().await;
}

/// A command refused inside a script is a permission error, not what the script would make of
/// another failure: the fenced acquire runs `INCR` of its token key under `pcall` (to name a
/// token key of another type), and without `+incr` it reports `PermissionDenied`, not
/// `WrongType`, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_refused_inside_a_script_is_permission_denied() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let rule: Vec<String> = documented_rule("noincr")
        .into_iter()
        .filter(|word| word != "+incr")
        .collect();
    set_user(&raw, rule).await;
    let client = ferrisson::Client::new(config_for(&server, "noincr"))
        .await
        .expect("connects");
    let err = client
        .fenced_lock("acl:fenced")
        .try_lock()
        .await
        .expect_err("INCR is refused");
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    assert_eq!(exists(&raw, "acl:fenced").await, 0, "nothing written");
    client.shutdown().await;
}

/// A user given the rule as documented before `inspect` read a string's length (without
/// `+strlen`) still reads strings: the script falls back to reading the value, and a long one
/// is still no token lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_strings_without_strlen_as_the_rule_before_it() {
    let server = RedisServer::start();
    let raw = raw_client(&server.url()).await;
    let rule: Vec<String> = documented_rule("older")
        .into_iter()
        .filter(|word| word != "+strlen")
        .collect();
    set_user(&raw, rule).await;
    let _: () = raw
        .set("older:big", "x".repeat(4096), None, None, false)
        .await
        .expect("SET");
    let token = "6fd1c9a26ba24c1f8ba1f6ad3bfb11a0";
    let _: () = raw
        .set(
            "older:token",
            token,
            Some(Expiration::PX(60_000)),
            None,
            false,
        )
        .await
        .expect("SET");
    let client = ferrisson::Client::new(config_for(&server, "older"))
        .await
        .expect("connect");
    let big = client.inspect("older:big").await.expect("inspect");
    assert_eq!(
        (big.kind, big.string_len),
        (
            LockKind::Other {
                redis_type: "string".into()
            },
            Some(4096)
        )
    );
    let lock = client.inspect("older:token").await.expect("inspect");
    assert_eq!(lock.kind, LockKind::TokenLock);
    assert_eq!(lock.holders[0].field, token);
    client.shutdown().await;
}
