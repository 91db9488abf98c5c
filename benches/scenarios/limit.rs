//! The physical limit, measured in the same run: the acquire script run by `redis-benchmark`
//! at the same concurrency (with and without pipelining), and single-connection PING latency
//! (from this process through fred, and from `redis-benchmark`, a C client with no runtime),
//! and, as the floor under every round trip, two threads taking turns through a socket pair.
//!
//! `redis-benchmark` (Redis 7.0 flags: `-c`, `-P`, `-n`, `-r`, `--csv`) runs
//! `EVALSHA <sha of lua/acquire.lua> 1 bench:limit:<run id>:__rand_int__ 30000 <uuid>:1`, where
//! `-r 1000000` replaces `__rand_int__` with a random 12-digit number on every call: nearly every
//! call creates a fresh lock (HINCRBY + PEXPIRE), an occasional repeat re-enters it; both are
//! the acquire path. It has no duration flag, so calibration runs (a few thousand requests, then
//! about a tenth of `duration` if that was much shorter) measure the rate and the request count
//! of the real run is set from it to last about `duration`; a run that already lasted that long
//! is the measurement. The
//! keys are deleted afterwards by SCAN MATCH + UNLINK of this run's own prefix (never FLUSHDB:
//! the server may be a user's).

use crate::measure::fred_client;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fred::prelude::*;

use crate::measure;

/// The acquire script under test, exactly as ferrisson sends it (src/transport/script.rs's `ACQUIRE`).
const ACQUIRE_LUA: &str = concat!(
    include_str!("../../lua/acquire.lua"),
    "return acquire(KEYS[1], ARGV[1], ARGV[2])\n"
);
/// The lease argument of the benchmarked acquire (ms).
const LEASE_MS: &str = "30000";
/// Random key space of `-r`.
const KEYSPACE: &str = "1000000";
/// Bounds of the calibration run's request count.
const CALIBRATION_MIN: usize = 2_000;
const CALIBRATION_MAX: usize = 20_000;

/// Acquire-script executions per second by `redis-benchmark` with `clients` connections and
/// `pipeline` commands in flight per connection, for about `duration`.
pub fn redis_benchmark_acquire(
    port: u16,
    clients: usize,
    pipeline: usize,
    duration: Duration,
) -> Result<f64, String> {
    let clients = clients.max(1);
    let pipeline = pipeline.max(1);
    let url = format!("redis://127.0.0.1:{port}");
    let prefix = format!("bench:limit:{}", uuid::Uuid::new_v4().simple());
    let sha = on_own_runtime(async {
        let client = fred_client(&url).await?;
        let sha: Result<String, String> = client
            .script_load(ACQUIRE_LUA)
            .await
            .map_err(|e| format!("SCRIPT LOAD of lua/acquire.lua on {url}: {e}"));
        let _ = client.quit().await;
        sha
    })?;
    let field = format!("{}:1", uuid::Uuid::new_v4());
    let key = format!("{prefix}:__rand_int__");
    let run = |requests: usize| -> Result<(f64, Duration), String> {
        run_redis_benchmark(port, clients, pipeline, requests, &sha, &key, &field)
    };

    let measured = (|| {
        let long_enough = |took: Duration| took >= duration.mul_f64(0.8);
        // Calibration: a short run, then (if that was much shorter than a tenth of `duration`,
        // where connection setup still weighs) one sized to about a tenth; then the real run.
        let first = (clients * pipeline * 4).clamp(CALIBRATION_MIN, CALIBRATION_MAX);
        let (mut rate, took) = run(first)?;
        if long_enough(took) || rate <= 0.0 {
            return Ok(rate);
        }
        let tenth = (rate * duration.as_secs_f64() / 10.0).ceil() as usize;
        if took < duration / 20 && tenth > 2 * first {
            let took;
            (rate, took) = run(tenth)?;
            if long_enough(took) || rate <= 0.0 {
                return Ok(rate);
            }
        }
        let requests =
            ((rate * duration.as_secs_f64()).ceil() as usize).max(clients * pipeline * 4);
        run(requests).map(|(rate, _)| rate)
    })();

    let cleaned = on_own_runtime(async {
        let client = fred_client(&url).await?;
        let deleted = delete_by_prefix(&client, &prefix).await;
        let _ = client.quit().await;
        deleted
    });
    let rate = measured?;
    cleaned.map_err(|e| {
        format!("redis-benchmark ran, but deleting its keys {prefix}:* failed: {e}")
    })?;
    Ok(rate)
}

/// p50 of sequential PINGs on one connection, in microseconds.
pub async fn ping_us(url: &str, samples: usize) -> Result<(f64, f64), String> {
    let client = fred_client(url).await?;
    let result = async {
        // Warm up the connection (and the allocator, and the server's client buffers).
        for _ in 0..samples.clamp(10, 1_000) / 10 {
            let _: String = client.ping(None).await.map_err(|e| format!("PING: {e}"))?;
        }
        let mut latency = measure::histogram();
        for _ in 0..samples.max(1) {
            let t0 = Instant::now();
            let _: String = client.ping(None).await.map_err(|e| format!("PING: {e}"))?;
            measure::record(&mut latency, t0.elapsed());
        }
        let (p50, p99, _) = measure::percentiles(&latency);
        Ok((p50, p99))
    }
    .await;
    let _ = client.quit().await;
    result
}

/// A T = 2 hand-off with no lock in it: two tasks take turns on one connection, each sending
/// one PING once the other's reply arrived, for `duration`. Returns the p50, p99 and max of
/// the time from one task's reply to the next one's (a task wake and a round trip, as a local
/// hand-off is a release script's round trip and the heir's wake), in microseconds: the floor
/// under the hot scenario's T = 2 figures, on this machine, in the same run.
pub async fn ping_relay(url: &str, duration: Duration) -> Result<(f64, f64, f64), String> {
    let client = fred_client(url).await?;
    let (to_first, first_turn) = tokio::sync::mpsc::channel::<Instant>(1);
    let (to_second, second_turn) = tokio::sync::mpsc::channel::<Instant>(1);
    let deadline = Instant::now() + duration;
    let start = to_first.clone();
    let first = tokio::spawn(relay_turns(client.clone(), first_turn, to_second, deadline));
    let second = tokio::spawn(relay_turns(client.clone(), second_turn, to_first, deadline));
    let started = start.send(Instant::now()).await;
    drop(start);
    let joined = (first.await, second.await);
    let _ = client.quit().await;
    started.map_err(|_| "the relay ended before it started".to_owned())?;
    let mut hops = measure::histogram();
    for task in [joined.0, joined.1] {
        let task = task.map_err(|e| format!("relay task: {e}"))??;
        hops.add(task)
            .map_err(|e| format!("merging histograms: {e}"))?;
    }
    Ok(measure::percentiles(&hops))
}

/// One side of [`ping_relay`]: on each turn, PING, record since the turn was passed, pass it on.
/// Ends after `deadline` (dropping `next` ends the other side too).
async fn relay_turns(
    client: fred::clients::Client,
    mut turn: tokio::sync::mpsc::Receiver<Instant>,
    next: tokio::sync::mpsc::Sender<Instant>,
    deadline: Instant,
) -> Result<hdrhistogram::Histogram<u64>, String> {
    let mut hops = measure::histogram();
    while let Some(passed_at) = turn.recv().await {
        let _: String = client.ping(None).await.map_err(|e| format!("PING: {e}"))?;
        let now = Instant::now();
        measure::record(&mut hops, now - passed_at);
        if now >= deadline || next.send(now).await.is_err() {
            break;
        }
    }
    Ok(hops)
}

/// Sequential PINGs on one connection by `redis-benchmark` (`-c 1`), for about `duration`
/// (`p50_hint_us`: a PING p50 measured just before, to size the run): its p50, p99 and max in
/// microseconds. A C client with no async runtime, no task wakes and no allocation per call,
/// so its max over a hot scenario's window shows how long this machine stalls a bare round
/// trip, independently of fred and tokio.
pub fn redis_benchmark_ping(
    port: u16,
    duration: Duration,
    p50_hint_us: Option<f64>,
) -> Result<(f64, f64, f64), String> {
    let per_second = 1e6 / p50_hint_us.filter(|p50| *p50 > 0.0).unwrap_or(100.0);
    let requests = ((per_second * duration.as_secs_f64()).ceil() as usize).clamp(1_000, 1_000_000);
    let stdout = redis_benchmark(
        port,
        &[
            "-c",
            "1",
            "-n",
            &requests.to_string(),
            "--precision",
            "3",
            "--csv",
            "PING",
        ],
    )?;
    let column = |index| {
        parse_csv_column(&stdout, index)
            .map(|ms| ms * 1_000.0)
            .ok_or_else(|| {
                format!("cannot find column {index} in redis-benchmark's output: {stdout:?}")
            })
    };
    Ok((
        column(CSV_P50_MS)?,
        column(CSV_P99_MS)?,
        column(CSV_MAX_MS)?,
    ))
}

/// Two threads of this process taking turns through a Unix socket pair for `duration`, one
/// byte each way: the p50, p99 and max of a round trip in microseconds. No Redis, no network
/// stack, no async runtime: two thread wakes by the kernel, as every round trip to Redis has.
/// Its max shows how long this machine's scheduler (here a VM's) can leave a woken thread
/// waiting, which no client can do anything about.
pub fn thread_relay(duration: Duration) -> Result<(f64, f64, f64), String> {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    let (mut near, mut far) =
        UnixStream::pair().map_err(|e| format!("cannot create a socket pair: {e}"))?;
    // Echoes until `near` is closed (read returns 0 bytes or fails).
    let echo = std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        while matches!(far.read(&mut byte), Ok(1)) {
            if far.write_all(&byte).is_err() {
                break;
            }
        }
    });
    let mut round_trips = measure::histogram();
    let deadline = Instant::now() + duration;
    let result = (|| {
        let mut byte = [0u8; 1];
        loop {
            let started = Instant::now();
            near.write_all(&byte)
                .and_then(|()| near.read_exact(&mut byte))
                .map_err(|e| format!("socket pair round trip: {e}"))?;
            let now = Instant::now();
            measure::record(&mut round_trips, now - started);
            if now >= deadline {
                return Ok(());
            }
        }
    })();
    drop(near);
    let _ = echo.join();
    result.map(|()| measure::percentiles(&round_trips))
}

/// Runs `redis-benchmark` against 127.0.0.1:`port` with `args` and returns its standard output.
fn redis_benchmark(port: u16, args: &[&str]) -> Result<String, String> {
    let output = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                "redis-benchmark was not found on PATH (it ships with redis-server, e.g. the \
                 Debian package redis-tools)"
                    .to_string()
            } else {
                format!("cannot run redis-benchmark: {e}")
            }
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "redis-benchmark failed ({}): {} {}",
            output.status,
            stdout.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(stdout)
}

/// One `redis-benchmark` run of `requests` acquires: (requests/s it reports, wall time).
fn run_redis_benchmark(
    port: u16,
    clients: usize,
    pipeline: usize,
    requests: usize,
    sha: &str,
    key: &str,
    field: &str,
) -> Result<(f64, Duration), String> {
    let started = Instant::now();
    let stdout = redis_benchmark(
        port,
        &[
            "-c",
            &clients.to_string(),
            "-P",
            &pipeline.to_string(),
            "-n",
            &requests.to_string(),
            "-r",
            KEYSPACE,
            "--csv",
            "EVALSHA",
            sha,
            "1",
            key,
            LEASE_MS,
            field,
        ],
    )?;
    let took = started.elapsed();
    let rate = parse_csv_column(&stdout, CSV_RPS).ok_or_else(|| {
        format!("cannot find the requests/s in redis-benchmark's output: {stdout:?}")
    })?;
    Ok((rate, took))
}

/// Columns of `redis-benchmark --csv` (Redis 7.0): `"test","rps","avg_latency_ms",
/// "min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"`.
const CSV_RPS: usize = 1;
const CSV_P50_MS: usize = 4;
const CSV_P99_MS: usize = 6;
const CSV_MAX_MS: usize = 7;

/// Column `index` of the data row of `redis-benchmark --csv`:
/// `"test","rps",...` then `"EVALSHA ...","44247.79",...`.
fn parse_csv_column(csv: &str, index: usize) -> Option<f64> {
    csv.lines()
        .map(str::trim)
        .find(|line| line.starts_with('"') && !line.starts_with("\"test\""))
        .and_then(|line| {
            // The test name may contain commas only inside its quotes; split on `","`.
            line.split("\",\"").nth(index)
        })
        .and_then(|value| value.trim_matches('"').parse::<f64>().ok())
}

/// SCAN MATCH `<prefix>:*` + UNLINK, page by page.
async fn delete_by_prefix(client: &fred::clients::Client, prefix: &str) -> Result<(), String> {
    let pattern = format!("{prefix}:*");
    let mut cursor = "0".to_string();
    loop {
        let (next, keys): (String, Vec<String>) = client
            .scan_page(cursor.as_str(), pattern.as_str(), Some(1_000), None)
            .await
            .map_err(|e| format!("SCAN: {e}"))?;
        if !keys.is_empty() {
            let _: i64 = client
                .unlink(keys)
                .await
                .map_err(|e| format!("UNLINK: {e}"))?;
        }
        if next == "0" {
            return Ok(());
        }
        cursor = next;
    }
}

/// Runs `future` to completion on a private current-thread runtime in a helper thread, so that
/// this synchronous function works whether or not its caller is inside a tokio runtime.
fn on_own_runtime<T: Send>(
    future: impl std::future::Future<Output = Result<T, String>> + Send,
) -> Result<T, String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start a tokio runtime: {e}"))?
                    .block_on(future)
            })
            .join()
            .map_err(|_| "the redis helper thread panicked".to_string())?
    })
}
