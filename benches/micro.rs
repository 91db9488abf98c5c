//! Criterion micro-benchmarks of single operations against a private `redis-server`:
//!
//! ```text
//! cargo bench --bench micro [-- FILTER]
//! ```
//!
//! * `lock_unlock/uncontended`: `lock()` + `unlock()` of a free lock, one at a time (two round
//!   trips: the acquire and the release script; `lock()` uses the watchdog lease).
//! * `try_lock/busy`: `try_lock()` on a lock another owner holds (one round trip, `None`).
//! * `owner_current/thread` and `owner_current/task`: [`Owner::current`] outside and inside a
//!   tokio task (no I/O).
//! * `inspect/held`: `client.inspect()` of a held lock (one round trip).
//!
//! Under `cargo test --benches` (or `--all-targets`) criterion runs every benchmark once as a
//! smoke test; the whole target then takes about as long as starting `redis-server`.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use ferrisson::{Client, Owner};

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let server = support::RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let client = runtime.block_on(async {
        Client::connect(&server.url())
            .await
            .expect("ferrisson connects to the benchmark's redis-server")
    });

    lock_unlock(&mut criterion, &runtime, &client);
    try_lock_busy(&mut criterion, &runtime, &client);
    owner_current(&mut criterion, &runtime);
    inspect_held(&mut criterion, &runtime, &client);

    criterion.final_summary();
    runtime.block_on(client.shutdown());
}

fn lock_unlock(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime, client: &Client) {
    let lock = client.lock("ferrisson-micro:uncontended");
    criterion.bench_function("lock_unlock/uncontended", |b| {
        b.to_async(runtime).iter(|| async {
            let guard = lock.lock().await.expect("lock a free lock");
            guard.unlock().await.expect("unlock");
        })
    });
}

fn try_lock_busy(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime, client: &Client) {
    let name = "ferrisson-micro:busy";
    let holder = runtime.block_on(support::hold_with_lease(
        client,
        name,
        Duration::from_secs(600),
    ));
    let lock = client.lock(name);
    criterion.bench_function("try_lock/busy", |b| {
        b.to_async(runtime).iter(|| async {
            let got = lock.try_lock().await.expect("try_lock");
            assert!(got.is_busy(), "the lock is held by another owner");
        })
    });
    runtime.block_on(async {
        holder.unlock().await.expect("release the holder");
    });
}

fn owner_current(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let mut group = criterion.benchmark_group("owner_current");
    group.bench_function("thread", |b| b.iter(|| black_box(Owner::current())));
    group.bench_function("task", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async move {
                tokio::spawn(async move {
                    let started = Instant::now();
                    for _ in 0..iters {
                        black_box(Owner::current());
                    }
                    started.elapsed()
                })
                .await
                .expect("owner_current task")
            })
        })
    });
    group.finish();
}

fn inspect_held(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime, client: &Client) {
    let name = "ferrisson-micro:inspected";
    let holder = runtime.block_on(support::hold_with_lease(
        client,
        name,
        Duration::from_secs(600),
    ));
    criterion.bench_function("inspect/held", |b| {
        b.to_async(runtime).iter(|| async {
            let info = client.inspect(name).await.expect("inspect");
            assert!(info.is_locked(), "the inspected lock is held");
            black_box(info);
        })
    });
    runtime.block_on(async {
        holder.unlock().await.expect("release the holder");
    });
}
