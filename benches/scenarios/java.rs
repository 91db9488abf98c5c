//! The Java Redisson scenario (issue 48): Java Redisson's own rows beside ferrisson's, on the
//! same server, the same T and the same loops, in one run.
//!
//! The peer is the test tree's (`tests/peers/java`, its `Bench.java`), Redisson [`VERSION`] in a
//! JVM started for measurements (`-Xms512m -Xmx512m -XX:+UseG1GC`, full JIT) with Redisson's
//! default pools and threads ([`JAVA_SETTINGS`]), one platform thread per task, `RLock.lock()`
//! (the watchdog lease, as ferrisson's `lock()`). The JVM is warmed by [`warm_up`] of the
//! uncontended loop before anything is timed.
//!
//! * Uncontended: T tasks, each its own lock; pairs/s, acquire p50/p99. Java and ferrisson take
//!   turns (`measure::in_turns`, `compare_rounds` rounds).
//! * Hot: T tasks on one lock; acq/s, hand-off p50/p99 (release started by one task → acquired
//!   by another; ferrisson counts the acquisitions that waited, Java those whose previous holder
//!   was another thread).
//! * Cross-language hand-off: one ferrisson and one Java owner take one lock in turn, each
//!   holding it [`HOLD`] and pausing [`GAP`] after its release so that the other, parked, gets
//!   it; a hand-off is the next holder's acquire instant − the previous one's release instant
//!   (epoch µs, one machine), ferrisson → Java and Java → ferrisson, beside two Java owners
//!   doing the same (Java → Java). The hold is longer than the gap so that every hand-off is
//!   a parked waiter's wake-up: with no hold, the other owner was still in its own gap at most
//!   releases, and a "hand-off" timed the rest of that gap (the 1.28 × of the first run).
//!
//! Goals: ferrisson ≥ 1.0 × Java on every uncontended and hot row; a cross-language hand-off
//! p50 within 1.2 × Java → Java. Reported as ratios, not held by the gate; only ferrisson's own
//! failures fail the run (a JVM that cannot start is shown as such).

use std::time::{Duration, SystemTime};

use ferrisson::Owner;
use serde::Serialize;
use serde_json::{json, Value};

use crate::measure::{self, Hot, Throughput};
use crate::support::java::{lock_args, JavaPeer, Options, Version, V4_7};
use crate::{ferrisson as ours, Mode, Plan};

type Res<T> = Result<T, String>;

/// The Redisson version of the Java rows: the newest of the matrix.
pub const VERSION: Version = V4_7;
/// Redisson's own defaults for pools and threads, set explicitly (the peer's test defaults are
/// smaller).
const JAVA_SETTINGS: [(&str, &str); 4] = [
    ("connectionPoolSize", "64"),
    ("connectionMinimumIdleSize", "24"),
    ("threads", "16"),
    ("nettyThreads", "32"),
];
/// The pause after a release in the hand-off loops.
const GAP: Duration = Duration::from_millis(1);
/// How long each owner of the hand-off loops holds the lock: longer than [`GAP`] plus a failed
/// acquire, so that the other owner is parked on the lock's channel when it is released.
const HOLD: Duration = Duration::from_millis(3);

/// One T of the uncontended comparison.
#[derive(Serialize)]
pub struct UncontendedRow {
    pub tasks: usize,
    pub ferrisson: Res<Throughput>,
    pub java: Res<Throughput>,
}

/// One T of the hot comparison.
#[derive(Serialize)]
pub struct HotRow {
    pub tasks: usize,
    pub ferrisson: Res<Hot>,
    pub java: Res<Hot>,
}

/// One direction of hand-offs: p50, p99 in µs, and how many there were.
#[derive(Clone, Debug, Serialize)]
pub struct Handoffs {
    pub p50_us: f64,
    pub p99_us: f64,
    pub count: usize,
}

/// The cross-language hand-offs.
#[derive(Serialize)]
pub struct Cross {
    pub ferrisson_to_java: Res<Handoffs>,
    pub java_to_ferrisson: Res<Handoffs>,
    pub java_to_java: Res<Handoffs>,
}

/// The scenario's outcome.
#[derive(Serialize)]
pub struct Outcome {
    pub version: String,
    pub rounds: u32,
    /// `Err`: why the JVM did not start (no row was measured).
    pub peer: Res<()>,
    pub uncontended: Vec<UncontendedRow>,
    pub hot: Vec<HotRow>,
    pub cross: Option<Cross>,
}

impl Outcome {
    /// ferrisson's own failures (a Java side that failed is shown, not counted).
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for row in &self.uncontended {
            if let Err(e) = &row.ferrisson {
                failures.push(format!("java uncontended T={}: ferrisson: {e}", row.tasks));
            }
        }
        for row in &self.hot {
            if let Err(e) = &row.ferrisson {
                failures.push(format!("java hot T={}: ferrisson: {e}", row.tasks));
            }
        }
        failures
    }
}

/// Which T each part runs at.
fn sizes(mode: Mode) -> (Vec<usize>, Vec<usize>) {
    match mode {
        Mode::Smoke => (vec![1, 4], vec![2]),
        _ => (vec![1, 16, 64], vec![2, 16]),
    }
}

/// How long the JVM is warmed before the first timed turn.
fn warm_up(mode: Mode) -> Duration {
    match mode {
        Mode::Smoke => Duration::from_millis(200),
        _ => Duration::from_secs(3),
    }
}

pub async fn run(plan: &Plan, url: &str, progress: impl Fn(String)) -> Outcome {
    let rounds = plan.compare_rounds.max(1);
    let mut outcome = Outcome {
        version: VERSION.to_string(),
        rounds,
        peer: Ok(()),
        uncontended: Vec::new(),
        hot: Vec::new(),
        cross: None,
    };
    let options = Options {
        settings: JAVA_SETTINGS
            .iter()
            .map(|(key, value)| (*key, (*value).to_owned()))
            .collect(),
        for_benchmarks: true,
        ..Options::default()
    };
    let java = match JavaPeer::start_with(VERSION, &[url.to_owned()], options).await {
        Ok(java) => java,
        Err(e) => {
            progress(format!(
                "java: the Redisson {VERSION} peer did not start: {}",
                e.0
            ));
            outcome.peer = Err(e.0);
            return outcome;
        }
    };
    let warm = warm_up(plan.mode);
    let warmed = java_uncontended(&java, 16, Duration::ZERO, warm).await;
    progress(format!(
        "java: JVM warmed {warm:?} at T=16: {:?}",
        warmed.map(|t| t.pairs_per_s)
    ));

    let (uncontended, hot) = sizes(plan.mode);
    let turn = plan.duration / rounds;
    for tasks in uncontended {
        let [f, j] = measure::in_turns(rounds, |side, _| {
            let java = &java;
            async move {
                if side == 0 {
                    ours::uncontended(url, tasks, plan.warmup, turn).await
                } else {
                    java_uncontended(java, tasks, plan.warmup, turn).await
                }
            }
        })
        .await;
        let row = UncontendedRow {
            tasks,
            ferrisson: combined(f),
            java: combined(j),
        };
        progress(format!(
            "java: uncontended T={tasks}: ferrisson {} / Java {}",
            pairs(&row.ferrisson),
            pairs(&row.java)
        ));
        outcome.uncontended.push(row);
    }
    for tasks in hot {
        let ferrisson = ours::hot(url, tasks, plan.warmup, plan.duration)
            .await
            .map(|(hot, _)| hot);
        let java = java_hot(&java, tasks, plan.warmup, plan.duration).await;
        progress(format!(
            "java: hot T={tasks}: ferrisson {} / Java {} acq/s",
            acq(&ferrisson),
            acq(&java)
        ));
        outcome.hot.push(HotRow {
            tasks,
            ferrisson,
            java,
        });
    }
    outcome.cross = Some(cross(&java, url, plan.duration).await);
    java.quit().await;
    outcome
}

/// A side's turns as one figure: the mean rate and the medians of the turns' latencies (as the
/// synced scenario combines its turns).
fn combined(turns: Vec<Res<Throughput>>) -> Res<Throughput> {
    crate::synced::combined(turns).map(|side| Throughput {
        pairs_per_s: side.pairs_per_s,
        p50_us: side.p50_us,
        p99_us: side.p99_us,
    })
}

fn pairs(t: &Res<Throughput>) -> String {
    t.as_ref().map_or_else(
        |e| format!("failed ({e})"),
        |t| crate::report::rate(t.pairs_per_s),
    )
}

fn acq(t: &Res<Hot>) -> String {
    t.as_ref().map_or_else(
        |e| format!("failed ({e})"),
        |t| crate::report::rate(t.acq_per_s),
    )
}

/// Sends `op` and waits for its reply, at most `bound` past the loop's own time.
async fn call(
    java: &JavaPeer,
    op: &str,
    args: Value,
    bound: Duration,
) -> Res<crate::support::json_lines::Reply> {
    let reply = java
        .send(op, args)
        .await
        .wait(bound + Duration::from_secs(15))
        .await;
    if reply.ok() {
        Ok(reply)
    } else {
        Err(format!("Java {op}: {:?}", reply.fields))
    }
}

fn number(reply: &crate::support::json_lines::Reply, field: &str) -> Res<f64> {
    reply
        .fields
        .get(field)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("no number {field:?} in {:?}", reply.fields))
}

/// Runs the peer's timed loop `op` at `tasks` after `warmup` for `duration`, with `more` fields.
async fn java_loop(
    java: &JavaPeer,
    op: &str,
    (tasks, warmup, duration): (usize, Duration, Duration),
    more: Value,
) -> Res<crate::support::json_lines::Reply> {
    let mut args = json!({
        "tasks": tasks,
        "warmup_ms": warmup.as_millis() as u64,
        "duration_ms": duration.as_millis() as u64,
    });
    if let (Value::Object(args), Value::Object(more)) = (&mut args, more) {
        args.extend(more);
    }
    call(java, op, args, warmup + duration).await
}

async fn java_uncontended(
    java: &JavaPeer,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
) -> Res<Throughput> {
    let prefix = json!({ "prefix": format!("java-bench:uncontended:{tasks}") });
    let reply = java_loop(java, "bench_uncontended", (tasks, warmup, duration), prefix).await?;
    Ok(Throughput {
        pairs_per_s: number(&reply, "pairs_per_s")?,
        p50_us: number(&reply, "p50_us")?,
        p99_us: number(&reply, "p99_us")?,
    })
}

async fn java_hot(java: &JavaPeer, tasks: usize, warmup: Duration, duration: Duration) -> Res<Hot> {
    let name = json!({ "name": format!("java-bench:hot:{tasks}") });
    let reply = java_loop(java, "bench_hot", (tasks, warmup, duration), name).await?;
    Ok(Hot {
        acq_per_s: number(&reply, "acq_per_s")?,
        p50_us: number(&reply, "p50_us")?,
        p99_us: number(&reply, "p99_us")?,
        max_us: number(&reply, "max_us")?,
        handoff_p50_us: number(&reply, "handoff_p50_us")?,
        handoff_p99_us: number(&reply, "handoff_p99_us")?,
        min_per_task: number(&reply, "min_per_task")? as u64,
        max_per_task: number(&reply, "max_per_task")? as u64,
    })
}

/// One hold: acquired and released (epoch µs), and by which side.
#[derive(Clone, Copy)]
struct Hold {
    acquired: u64,
    released: u64,
    java: bool,
    owner: usize,
}

/// The holds a Java `bench_alternate` reply lists.
fn java_holds(reply: &crate::support::json_lines::Reply, owner: usize) -> Res<Vec<Hold>> {
    let holds = reply
        .fields
        .get("holds")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no holds in {:?}", reply.fields))?;
    holds
        .iter()
        .map(|pair| {
            let at = |i: usize| pair.get(i).and_then(Value::as_u64);
            match (at(0), at(1)) {
                (Some(acquired), Some(released)) => Ok(Hold {
                    acquired,
                    released,
                    java: true,
                    owner,
                }),
                _ => Err(format!("a hold that is not [acquired, released]: {pair}")),
            }
        })
        .collect()
}

fn epoch_us() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A ferrisson owner alternating on `name` for `duration` (the Java loop's twin).
async fn ferrisson_alternate(url: &str, name: &str, duration: Duration) -> Res<Vec<Hold>> {
    let client = ours::connect(url).await?;
    let lock = client.lock(name).with_owner(Owner::new());
    let deadline = tokio::time::Instant::now() + duration;
    let mut holds = Vec::new();
    while tokio::time::Instant::now() < deadline {
        let guard = lock
            .lock()
            .await
            .map_err(|e| format!("ferrisson lock: {e}"))?;
        let acquired = epoch_us();
        tokio::time::sleep(HOLD).await;
        let released = epoch_us();
        guard
            .unlock()
            .await
            .map_err(|e| format!("ferrisson unlock: {e}"))?;
        holds.push(Hold {
            acquired,
            released,
            java: false,
            owner: 0,
        });
        tokio::time::sleep(GAP).await;
    }
    client.shutdown().await;
    Ok(holds)
}

/// Hand-offs between consecutive holds of different owners, by (from Java, to Java).
fn handoffs(mut holds: Vec<Hold>, from_java: bool, to_java: bool) -> Res<Handoffs> {
    holds.sort_by_key(|hold| hold.acquired);
    let mut waits: Vec<f64> = holds
        .windows(2)
        .filter(|w| (w[0].java, w[0].owner) != (w[1].java, w[1].owner))
        .filter(|w| w[0].java == from_java && w[1].java == to_java)
        .map(|w| w[1].acquired.saturating_sub(w[0].released) as f64)
        .collect();
    if waits.is_empty() {
        return Err("no hand-off in this direction".into());
    }
    waits.sort_by(f64::total_cmp);
    let at = |q: f64| waits[((q * waits.len() as f64).ceil() as usize).clamp(1, waits.len()) - 1];
    Ok(Handoffs {
        p50_us: at(0.5),
        p99_us: at(0.99),
        count: waits.len(),
    })
}

async fn cross(java: &JavaPeer, url: &str, duration: Duration) -> Cross {
    let alternate = |owner: &str, name: &str| {
        let args = json!({
            "duration_ms": duration.as_millis() as u64,
            "gap_us": GAP.as_micros() as u64,
            "hold_us": HOLD.as_micros() as u64,
        });
        lock_args("lock", name, owner, args)
    };
    let mixed = "java-bench:handoff:mixed";
    let (java_side, ferrisson_side) = tokio::join!(
        call(java, "bench_alternate", alternate("a", mixed), duration),
        ferrisson_alternate(url, mixed, duration),
    );
    let mixed_holds = java_side
        .and_then(|reply| java_holds(&reply, 1))
        .and_then(|mut holds| {
            holds.extend(ferrisson_side?);
            Ok(holds)
        });
    let same = "java-bench:handoff:java";
    let (a, b) = tokio::join!(
        call(java, "bench_alternate", alternate("a", same), duration),
        call(java, "bench_alternate", alternate("b", same), duration),
    );
    let java_holds = a.and_then(|a| {
        let mut holds = java_holds(&a, 1)?;
        holds.extend(java_holds(&b?, 2)?);
        Ok(holds)
    });
    Cross {
        ferrisson_to_java: mixed_holds.clone().and_then(|h| handoffs(h, false, true)),
        java_to_ferrisson: mixed_holds.and_then(|h| handoffs(h, true, false)),
        java_to_java: java_holds.and_then(|h| handoffs(h, true, true)),
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

/// A comparison's lines: per T, each side's (rate, p50 µs, p99 µs) and ferrisson ÷ Java.
fn table<'a, E: 'a>(
    title: &str,
    figures: &str,
    rows: impl Iterator<
        Item = (
            usize,
            Result<(f64, f64, f64), &'a E>,
            Result<(f64, f64, f64), &'a E>,
        ),
    >,
) -> String {
    let side = |cells: &Result<(f64, f64, f64), &E>| match cells {
        Ok((rate, p50, p99)) => format!(
            "{:>10} {:>8} {:>8}",
            crate::report::rate(*rate),
            crate::report::us(*p50),
            crate::report::us(*p99)
        ),
        Err(_) => format!("{:>28}", "failed"),
    };
    let mut out = format!(
        "{title}\n{:>4}  {:>34}  {:>34}  {:>11}\n",
        "T",
        format!("ferrisson {figures}"),
        format!("Java {figures}"),
        "ferr ÷ Java"
    );
    for (tasks, ours, java) in rows {
        let r = match (&ours, &java) {
            (Ok(f), Ok(j)) => ratio(f.0, j.0),
            _ => "-".into(),
        };
        out.push_str(&format!(
            "{tasks:>4}  {:>34}  {:>34}  {r:>11}\n",
            side(&ours),
            side(&java)
        ));
    }
    out
}

/// The scenario's table.
pub fn render(outcome: &Outcome) -> String {
    let mut out = format!(
        "Java Redisson {} beside ferrisson (JVM -Xms512m -Xmx512m G1, Redisson's default pools; {} rounds of turns)\n",
        outcome.version, outcome.rounds
    );
    if let Err(e) = &outcome.peer {
        out.push_str(&format!("not run: {e}\n"));
        return out;
    }
    let uncontended = outcome.uncontended.iter().map(|row| {
        let cells = |t: &Throughput| (t.pairs_per_s, t.p50_us, t.p99_us);
        (
            row.tasks,
            row.ferrisson.as_ref().map(cells),
            row.java.as_ref().map(cells),
        )
    });
    out.push_str(&table("uncontended", "pairs/s p50 p99", uncontended));
    let hot = outcome.hot.iter().map(|row| {
        let cells = |t: &Hot| (t.acq_per_s, t.handoff_p50_us, t.handoff_p99_us);
        (
            row.tasks,
            row.ferrisson.as_ref().map(cells),
            row.java.as_ref().map(cells),
        )
    });
    out.push_str(&table("hot", "acq/s hand-off p50 p99", hot));
    if let Some(cross) = &outcome.cross {
        out.push_str("cross-language hand-off (release → the other owner holds)\n");
        let base = cross.java_to_java.as_ref().ok().map(|h| h.p50_us);
        for (what, h) in [
            ("ferrisson → Java", &cross.ferrisson_to_java),
            ("Java → ferrisson", &cross.java_to_ferrisson),
            ("Java → Java", &cross.java_to_java),
        ] {
            match h {
                Ok(h) => out.push_str(&format!(
                    "  {what:<17} p50 {:>8} p99 {:>8} ({} hand-offs), p50 ÷ Java → Java {}\n",
                    crate::report::us(h.p50_us),
                    crate::report::us(h.p99_us),
                    h.count,
                    base.map_or("-".into(), |b| ratio(h.p50_us, b))
                )),
                Err(e) => out.push_str(&format!("  {what:<17} failed: {e}\n")),
            }
        }
    }
    out
}
