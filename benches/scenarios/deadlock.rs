//! The deadlock scenario (issue 29): what distributed deadlock detection costs
//! (`Config::deadlock_detection`): `DeadlockDetection::Off` against `Detect { threshold: 1 s }`
//! ([`THRESHOLD`]) in one run, on the run's server, each measurement on a client of its own
//! with the side's setting.
//!
//! * **Timed**, in turns (`deadlock_rounds` rounds of `duration / deadlock_rounds`, off first
//!   in odd rounds, as in the synced and cluster scenarios): the uncontended loop at T = 1 (one
//!   task, one name) and at the uncontended scenario's summary T, and the hot loop at the hot
//!   scenario's summary T (`ferrisson.rs`). Each side's rate is the mean of its turns, its
//!   acquire p50 and p99 the medians of theirs; on ÷ off is given for the rates and, as the
//!   median and range of the rounds' own ratios, round by round.
//! * **Counted**: the costs scenario's uncontended cycle of every primitive (`costs.rs`), with
//!   detection off and on; what on adds per cycle (script runs, messages, commands) is what the
//!   regression gate holds at its baseline, zero (`gate.rs`).
//! * **Parked**: W waiters (one client, each its own owner, arriving as in the waiters
//!   scenario) parked on a lock that another owner of the client holds with a 60 s lease, for
//!   `deadlock_hold` after they parked: their waits are written at `threshold / 2`, the hash
//!   renewed every `threshold / 4`, and each wait looks for a cycle from `threshold` on. Then
//!   the holder releases and every waiter takes the lock once and leaves (the drain), until the
//!   waits hash is gone. `INFO commandstats` is reset before the waiters come, when they have
//!   parked, and when the holder releases, so that three phases are counted: the park (their
//!   attempts), the hold (no lock traffic: every command is the keeper's; its writes are the
//!   wait_edges script's runs, each ending in the one `PEXPIRE` of the window, the holder's
//!   lease being fixed, and its walks' reads the other script runs) and the drain (the
//!   hand-offs, and the keeper's removals). Per waiter, the live heap growth of this process
//!   (the counting allocator, as in the waiters scenario) once they parked (their waits in the
//!   client's table, none written yet), at the end of the hold, and the least over the hold's
//!   second half (no write in flight); the RSS growth at the end of the hold; `MEMORY USAGE` of
//!   the waits hash (`SAMPLES 0`: every field) ÷ W and its fields (`HLEN`); and the client's
//!   CPU over the hold. `min(compare_rounds, 2)` rounds in turns: the table gives their means,
//!   `deadlock.json` every round.
//!
//! Commands counted leave out the bench's own `CONFIG`, `INFO`, `MEMORY` and `CLUSTER`; the park
//! phase's count of all commands includes the parking check's `PUBSUB NUMSUB` polls, so only its
//! script runs and writes are shown.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrisson::{Client, Config, DeadlockDetection, Owner};
use fred::clients::Client as RawClient;
use fred::interfaces::ClientLike;
use serde::Serialize;
use tokio::time::Instant;

use crate::cluster::Kind;
use crate::costs::{self, Cost, Costs};
use crate::measure::{self, Start, Throughput};
use crate::support::redis_state::{channel_of, command_stats, reset_stats};
use crate::synced::{combined, Side};
use crate::Plan;

type Res<T> = Result<T, String>;

/// The detecting side's threshold.
pub const THRESHOLD: Duration = Duration::from_secs(1);

/// The two sides, in the order of [`measure::in_turns`].
const SIDES: [&str; 2] = ["off", "on"];

fn detection(side: usize) -> DeadlockDetection {
    match side {
        0 => DeadlockDetection::Off,
        _ => DeadlockDetection::Detect {
            threshold: THRESHOLD,
        },
    }
}

async fn client(url: &str, side: usize) -> Res<Client> {
    let mut config = Config::new(url);
    config.deadlock_detection = detection(side);
    Client::new(config)
        .await
        .map_err(|e| format!("connect: {e}"))
}

/// One loop and size, both sides (a hot row's `pairs_per_s` counts acquisitions).
#[derive(Serialize)]
pub struct TimedRow {
    pub kind: Kind,
    pub tasks: usize,
    pub off: Res<Side>,
    pub on: Res<Side>,
    /// on ÷ off of each round's rates (rounds where both turns ran).
    pub round_ratios: Vec<f64>,
}

/// One primitive's uncontended cycle, both sides.
#[derive(Serialize)]
pub struct CountedRow {
    pub primitive: &'static str,
    /// Whether the gate holds it (as in the costs scenario).
    pub gated: bool,
    pub off: Res<Cost>,
    pub on: Res<Cost>,
}

impl CountedRow {
    /// What detection on adds per cycle.
    pub fn added(&self) -> Option<Cost> {
        let (off, on) = (self.off.as_ref().ok()?, self.on.as_ref().ok()?);
        Some(Cost {
            scripts: on.scripts - off.scripts,
            messages: on.messages - off.messages,
            commands: on.commands - off.commands,
        })
    }
}

/// Commands the server ran over one phase of the parked case.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Phase {
    /// Every command (a script's own included), the bench's own left out.
    pub commands: f64,
    /// `EVALSHA` + `EVAL`.
    pub scripts: f64,
    pub hset: f64,
    pub hdel: f64,
    pub pexpire: f64,
}

impl Phase {
    fn of(stats: &HashMap<String, u64>) -> Phase {
        let mut phase = Phase::default();
        for (command, &calls) in stats {
            let calls = calls as f64;
            match command.split('|').next().unwrap_or_default() {
                "config" | "info" | "cluster" | "memory" => continue,
                "evalsha" | "eval" => phase.scripts += calls,
                "hset" => phase.hset += calls,
                "hdel" => phase.hdel += calls,
                "pexpire" => phase.pexpire += calls,
                _ => {}
            }
            phase.commands += calls;
        }
        phase
    }

    async fn read(raw: &RawClient) -> Phase {
        Phase::of(&command_stats(raw).await)
    }

    /// Each count ÷ `n`.
    fn per(self, n: f64) -> Phase {
        Phase {
            commands: self.commands / n,
            scripts: self.scripts / n,
            hset: self.hset / n,
            hdel: self.hdel / n,
            pexpire: self.pexpire / n,
        }
    }
}

/// One round of the parked case on one side, per waiter.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Parked {
    pub waiters: usize,
    /// Seconds until all W were parked.
    pub park_s: f64,
    /// The hold's length, seconds (from parked to the holder's release).
    pub hold_s: f64,
    /// Per waiter, over the park, the hold and the drain.
    pub park: Phase,
    pub hold: Phase,
    pub drain: Phase,
    /// Live heap growth of this process per waiter once they parked: before the keeper's first
    /// write (at `threshold / 2` of the first wait) if they parked by then (`park_s`).
    pub heap_parked_bytes_per_waiter: f64,
    /// Live heap and RSS growth of this process per parked waiter, at the end of the hold.
    pub heap_bytes_per_waiter: f64,
    /// The least live heap growth per parked waiter over the hold's second half (read every
    /// 10 ms): without a keeper write in flight.
    pub heap_least_bytes_per_waiter: f64,
    pub rss_bytes_per_waiter: f64,
    /// `MEMORY USAGE` of the waits hash ÷ W at the end of the hold (0: no hash).
    pub redis_bytes_per_waiter: f64,
    /// `HLEN` of the waits hash at the end of the hold: W waits and the `ttl` field.
    pub hash_fields: f64,
    /// The client process's CPU over the hold, % of one core.
    pub cpu_pct: f64,
    /// Seconds from the holder's release until every waiter took the lock once and the waits
    /// hash was gone.
    pub drain_s: f64,
}

/// The scenario's outcome.
#[derive(Serialize)]
pub struct Outcome {
    #[serde(serialize_with = "crate::millis")]
    pub threshold: Duration,
    pub rounds: u32,
    pub timed: Vec<TimedRow>,
    pub counted: Res<Vec<CountedRow>>,
    pub parked_rounds: u32,
    /// Off's rounds and on's; a failed round fails its side.
    pub parked: [Res<Vec<Parked>>; 2],
}

impl Outcome {
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for row in &self.timed {
            for (side, result) in SIDES.iter().zip([&row.off, &row.on]) {
                if let Err(e) = result {
                    failures.push(format!(
                        "deadlock {} T={} {side}: {e}",
                        row.kind.name(),
                        row.tasks
                    ));
                }
            }
        }
        match &self.counted {
            Ok(rows) => {
                for row in rows {
                    for (side, result) in SIDES.iter().zip([&row.off, &row.on]) {
                        if let Err(e) = result {
                            failures.push(format!("deadlock costs {} {side}: {e}", row.primitive));
                        }
                    }
                }
            }
            Err(e) => failures.push(format!("deadlock costs: {e}")),
        }
        for (side, result) in SIDES.iter().zip(&self.parked) {
            if let Err(e) = result {
                failures.push(format!("deadlock parked {side}: {e}"));
            }
        }
        failures
    }

    /// What detection on adds per uncontended cycle, by gated primitive (the gate's figures).
    pub fn added(&self) -> BTreeMap<String, Cost> {
        added(&self.counted)
    }
}

fn added(counted: &Res<Vec<CountedRow>>) -> BTreeMap<String, Cost> {
    let rows = counted.as_ref().map(Vec::as_slice).unwrap_or_default();
    rows.iter()
        .filter(|row| row.gated)
        .filter_map(|row| Some((row.primitive.to_owned(), row.added()?)))
        .collect()
}

/// The whole scenario on the server at `url` (`raw` a client of it, for the statistics).
pub async fn run(plan: &Plan, url: &str, raw: &RawClient, progress: impl Fn(String)) -> Outcome {
    let rounds = plan.deadlock_rounds.max(1);
    let turn_length = plan.duration / rounds;
    let progress = &progress;
    let sizes = [
        (Kind::Uncontended, 1),
        (Kind::Uncontended, plan.uncontended_summary),
        (Kind::Hot, plan.hot_summary),
    ];
    let mut timed = Vec::new();
    for (kind, tasks) in sizes {
        let [off, on] = measure::in_turns(rounds, |side, round| async move {
            let result = crate::bounded(
                plan.scenario_timeout(),
                turn(kind, url, side, tasks, plan.warmup, turn_length),
            )
            .await;
            progress(format!(
                "deadlock: {} T={tasks}, round {round}/{rounds}, detection {}: {}",
                kind.name(),
                SIDES[side],
                crate::show(&result, |t| format!(
                    "{} {}, acquire p50 {} p99 {}",
                    crate::report::rate(t.pairs_per_s),
                    kind.unit(),
                    crate::report::us(t.p50_us),
                    crate::report::us(t.p99_us)
                ))
            ));
            result
        })
        .await;
        let round_ratios = off
            .iter()
            .zip(&on)
            .filter_map(|(off, on)| match (off, on) {
                (Ok(off), Ok(on)) => Some(on.pairs_per_s / off.pairs_per_s.max(f64::MIN_POSITIVE)),
                _ => None,
            })
            .collect();
        timed.push(TimedRow {
            kind,
            tasks,
            off: combined(off),
            on: combined(on),
            round_ratios,
        });
    }

    let counted = crate::bounded(plan.scenario_timeout(), counted(url, raw)).await;
    progress(format!(
        "deadlock: per uncontended cycle, detection on adds {}",
        match &counted {
            Ok(_) => added_line(&added(&counted)),
            Err(e) => format!("n/a ({e})"),
        }
    ));

    let parked_rounds = plan.compare_rounds.clamp(1, 2);
    let (waiters, hold) = (plan.deadlock_waiters, plan.deadlock_hold);
    let parked_turns = measure::in_turns(parked_rounds, |side, round| async move {
        let result = crate::bounded(
            plan.scenario_timeout(),
            parked(url, raw, side, waiters, hold),
        )
        .await;
        progress(format!(
            "deadlock: W={waiters} parked, round {round}/{parked_rounds}, detection {}: {}",
            SIDES[side],
            crate::show(&result, parked_line)
        ));
        result
    })
    .await;
    let parked = parked_turns.map(|rounds| rounds.into_iter().collect());
    Outcome {
        threshold: THRESHOLD,
        rounds,
        timed,
        counted,
        parked_rounds,
        parked,
    }
}

/// One turn of `kind` at T = `tasks` on a client of `side`.
async fn turn(
    kind: Kind,
    url: &str,
    side: usize,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
) -> Res<Throughput> {
    let client = client(url, side).await?;
    match kind {
        Kind::Uncontended => {
            crate::ferrisson::uncontended_on(client, tasks, warmup, duration).await
        }
        Kind::Hot => {
            let name = format!("ferrisson-bench:deadlock:hot:{tasks}");
            let hot =
                crate::ferrisson::hot_on(&client, &name, tasks, Start::After(warmup), duration)
                    .await;
            client.shutdown().await;
            let (hot, _) = hot?;
            Ok(Throughput {
                pairs_per_s: hot.acq_per_s,
                p50_us: hot.p50_us,
                p99_us: hot.p99_us,
            })
        }
    }
}

/// Every primitive's uncontended cycle counted with detection off, then on.
async fn counted(url: &str, raw: &RawClient) -> Res<Vec<CountedRow>> {
    let servers = std::slice::from_ref(raw);
    let mut sides: Vec<Costs> = Vec::new();
    for side in 0..2 {
        sides.push(costs::run_on(client(url, side).await?, servers).await);
    }
    let on = sides.pop().unwrap_or_default();
    let off = sides.pop().unwrap_or_default();
    Ok(off
        .into_iter()
        .zip(on)
        .map(|(off, on)| CountedRow {
            primitive: off.primitive,
            gated: off.gated,
            off: off.cost,
            on: on.cost,
        })
        .collect())
}

/// One round of the parked case on a client of `side`.
async fn parked(
    url: &str,
    raw: &RawClient,
    side: usize,
    waiters: usize,
    hold: Duration,
) -> Res<Parked> {
    let client = client(url, side).await?;
    let name = format!(
        "ferrisson-bench:deadlock:parked:{}",
        uuid::Uuid::new_v4().simple()
    );
    let waits_key = format!("ferrisson_waits:{{{}}}", client.id());
    let base = client.lock(name.clone());
    let holder = match base
        .with_owner(Owner::new())
        .lock_with_lease(Duration::from_secs(60))
        .await
    {
        Ok(holder) => holder,
        Err(e) => {
            client.shutdown().await;
            return Err(format!("holder lock: {e}"));
        }
    };
    reset_stats(raw).await;
    let (heap0, rss0) = (measure::heap_bytes(), crate::ferrisson::trimmed_rss());
    let arrived = Arc::new(AtomicU64::new(0));
    let parking_started = Instant::now();
    let handles = crate::ferrisson::spawn_in_chunks(waiters, || {
        let lock = base.with_owner(Owner::new());
        let arrived = Arc::clone(&arrived);
        tokio::spawn(async move {
            arrived.fetch_add(1, Ordering::SeqCst);
            let guard = lock.lock().await.map_err(|e| format!("lock: {e}"))?;
            guard.unlock().await.map_err(|e| format!("unlock: {e}"))
        })
    })
    .await;
    let n = waiters as f64;
    let outcome = async {
        crate::ferrisson::wait_parked(raw, &channel_of(&name), waiters, &arrived)
            .await
            .map_err(|(attempts, subscribers)| {
                format!("waiters did not park: {attempts} attempts, {subscribers} subscribers")
            })?;
        let park_s = parking_started.elapsed().as_secs_f64();
        let heap_parked = measure::heap_bytes();
        let park = Phase::read(raw).await;
        reset_stats(raw).await;
        let (cpu0, held) = (measure::cpu_time(), Instant::now());
        // The least live heap over the hold's second half: what stays between the keeper's
        // writes, whose arguments are on the heap while one is in flight.
        tokio::time::sleep(hold / 2).await;
        let mut heap_least = u64::MAX;
        while held.elapsed() < hold {
            heap_least = heap_least.min(measure::heap_bytes());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let hold_phase = Phase::read(raw).await;
        let cpu = measure::cpu_time().saturating_sub(cpu0);
        let hold_s = held.elapsed().as_secs_f64();
        let (heap1, rss1) = (measure::heap_bytes(), crate::ferrisson::trimmed_rss());
        let hash_fields: u64 = raw
            .custom(fred::cmd!("HLEN"), vec![waits_key.as_str()])
            .await
            .map_err(|e| format!("HLEN: {e}"))?;
        let at_release = Parked {
            waiters,
            park_s,
            hold_s,
            park: park.per(n),
            hold: hold_phase.per(n),
            drain: Phase::default(),
            heap_parked_bytes_per_waiter: heap_parked.saturating_sub(heap0) as f64 / n,
            heap_bytes_per_waiter: heap1.saturating_sub(heap0) as f64 / n,
            heap_least_bytes_per_waiter: heap_least.min(heap1).saturating_sub(heap0) as f64 / n,
            rss_bytes_per_waiter: rss1.saturating_sub(rss0) as f64 / n,
            redis_bytes_per_waiter: memory_usage(raw, &waits_key).await? as f64 / n,
            hash_fields: hash_fields as f64,
            cpu_pct: cpu.as_secs_f64() / hold_s.max(f64::MIN_POSITIVE) * 100.0,
            drain_s: 0.0,
        };
        if let Some(finished) = handles.iter().position(|h| h.is_finished()) {
            return Err(format!("waiter {finished} ended while parked"));
        }
        reset_stats(raw).await;
        let released = Instant::now();
        holder
            .unlock()
            .await
            .map_err(|e| format!("holder unlock: {e}"))?;
        Ok((at_release, released))
    }
    .await;
    let result = match outcome {
        Ok((at_release, released)) => drain(raw, handles, &waits_key, at_release, released).await,
        Err(e) => {
            handles.iter().for_each(|h| h.abort());
            Err(e)
        }
    };
    client.shutdown().await;
    result
}

/// The drain: every waiter of `handles` takes the lock once and leaves, then the keeper removes
/// the last waits (the drain ends when their hash is gone).
async fn drain(
    raw: &RawClient,
    handles: Vec<tokio::task::JoinHandle<Res<()>>>,
    waits_key: &str,
    mut parked: Parked,
    released: Instant,
) -> Res<Parked> {
    for joined in futures::future::join_all(handles).await {
        joined.map_err(|e| format!("waiter task failed: {e}"))??;
    }
    // MEMORY USAGE is the bench's own, left out of the counts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while memory_usage(raw, waits_key).await? > 0 {
        if Instant::now() >= deadline {
            return Err("the waits hash outlived the waits by 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    parked.drain_s = released.elapsed().as_secs_f64();
    parked.drain = Phase::read(raw).await.per(parked.waiters as f64);
    Ok(parked)
}

/// `MEMORY USAGE key SAMPLES 0` (every field counted); 0 for no key.
async fn memory_usage(raw: &RawClient, key: &str) -> Res<u64> {
    let bytes: Option<u64> = raw
        .custom(fred::cmd!("MEMORY"), vec!["USAGE", key, "SAMPLES", "0"])
        .await
        .map_err(|e| format!("MEMORY USAGE: {e}"))?;
    Ok(bytes.unwrap_or(0))
}

fn parked_line(p: &Parked) -> String {
    format!(
        "parked in {:.2} s; over the {:.2} s hold per waiter {:.2} commands, {:.3} script runs, {:.2} HSET; \
         heap {:.0} B, RSS {:.0} B, Redis {:.0} B per waiter ({} fields); CPU {:.2} %; drained in {:.2} s, \
         {:.2} commands, {:.2} HSET, {:.2} HDEL per waiter",
        p.park_s,
        p.hold_s,
        p.hold.commands,
        p.hold.scripts,
        p.hold.hset,
        p.heap_bytes_per_waiter,
        p.rss_bytes_per_waiter,
        p.redis_bytes_per_waiter,
        p.hash_fields,
        p.cpu_pct,
        p.drain_s,
        p.drain.commands,
        p.drain.hset,
        p.drain.hdel,
    )
}

fn added_line(added: &BTreeMap<String, Cost>) -> String {
    let rows: Vec<String> = added
        .iter()
        .map(|(kind, c)| {
            format!(
                "{kind} {:+.2}/{:+.2}/{:+.2}",
                c.scripts, c.messages, c.commands
            )
        })
        .collect();
    format!("(script runs/messages/commands): {}", rows.join(", "))
}

/// The table: the timed rows, what on adds per cycle, the parked case.
pub fn render(outcome: &Outcome) -> String {
    use crate::report::{rate, us};
    let mut out = format!(
        "deadlock detection (Off against Detect {{ threshold: {:?} }}, one server; {} rounds of turns)\n\
         {:<12} {:>4}  {:>28}  {:>28}  {:>7}  {:>26}\n",
        outcome.threshold,
        outcome.rounds,
        "loop",
        "T",
        "off: rate p50 p99",
        "on: rate p50 p99",
        "× rate",
        "× rate by round: median (range)"
    );
    let side = |s: &Res<Side>| match s {
        Ok(s) => format!(
            "{:>10} {:>8} {:>8}",
            rate(s.pairs_per_s),
            us(s.p50_us),
            us(s.p99_us)
        ),
        Err(_) => format!("{:>28}", "failed"),
    };
    for row in &outcome.timed {
        let ratio = match (&row.off, &row.on) {
            (Ok(off), Ok(on)) => format!(
                "{:>7.2}",
                on.pairs_per_s / off.pairs_per_s.max(f64::MIN_POSITIVE)
            ),
            _ => format!("{:>7}", "-"),
        };
        let by_round = match round_spread(&row.round_ratios) {
            Some((median, low, high)) => format!("{median:.2} ({low:.2}–{high:.2})"),
            None => "-".to_owned(),
        };
        out.push_str(&format!(
            "{:<12} {:>4}  {}  {}  {ratio}  {by_round:>26}\n",
            row.kind.name(),
            row.tasks,
            side(&row.off),
            side(&row.on)
        ));
    }
    match &outcome.counted {
        Ok(_) => out.push_str(&format!(
            "per uncontended cycle, what detection on adds {}\n",
            added_line(&outcome.added())
        )),
        Err(e) => out.push_str(&format!("per uncontended cycle: n/a ({e})\n")),
    }
    let [off, on] = &outcome.parked;
    let waiters = [off, on]
        .iter()
        .find_map(|rounds| Some(rounds.as_ref().ok()?.first()?.waiters))
        .unwrap_or(0);
    out.push_str(&format!(
        "parked: {waiters} waiters on a held lock, counted over their park, the hold after it and the drain (means of {} rounds)\n{:<52} {:>12} {:>12} {:>12}\n",
        outcome.parked_rounds, "", "off", "on", "on − off"
    ));
    type Field = fn(&Parked) -> f64;
    let rows: Vec<(&str, Field, usize)> = vec![
        ("parked in, s", |p| p.park_s, 2),
        ("park: script runs per waiter", |p| p.park.scripts, 3),
        ("park: HSET per waiter", |p| p.park.hset, 3),
        ("hold, s", |p| p.hold_s, 2),
        ("hold: commands per waiter", |p| p.hold.commands, 3),
        ("hold: script runs per waiter", |p| p.hold.scripts, 3),
        (
            "hold: keeper writes (PEXPIRE), in all",
            |p| p.hold.pexpire * p.waiters as f64,
            0,
        ),
        ("hold: HSET per waiter", |p| p.hold.hset, 3),
        (
            "hold: HSET per keeper write ÷ W",
            |p| p.hold.hset / p.hold.pexpire.max(f64::MIN_POSITIVE) / p.waiters as f64,
            3,
        ),
        ("hold: waits hash fields (HLEN)", |p| p.hash_fields, 0),
        ("hold: client CPU, % of a core", |p| p.cpu_pct, 2),
        ("drain, s", |p| p.drain_s, 2),
        ("drain: commands per waiter", |p| p.drain.commands, 3),
        ("drain: script runs per waiter", |p| p.drain.scripts, 3),
        ("drain: HSET per waiter", |p| p.drain.hset, 3),
        ("drain: HDEL per waiter", |p| p.drain.hdel, 3),
        (
            "client heap per waiter once parked, B",
            |p| p.heap_parked_bytes_per_waiter,
            0,
        ),
        (
            "client heap per parked waiter, B",
            |p| p.heap_bytes_per_waiter,
            0,
        ),
        (
            "client heap per parked waiter, least over the hold, B",
            |p| p.heap_least_bytes_per_waiter,
            0,
        ),
        (
            "client RSS per parked waiter, B",
            |p| p.rss_bytes_per_waiter,
            0,
        ),
        (
            "Redis: MEMORY USAGE of the waits hash ÷ W, B",
            |p| p.redis_bytes_per_waiter,
            0,
        ),
    ];
    for (label, field, digits) in rows {
        // The mean over the side's rounds; `None`: it failed.
        let mean = |rounds: &Res<Vec<Parked>>| {
            let rounds = rounds.as_ref().ok().filter(|rounds| !rounds.is_empty())?;
            Some(rounds.iter().map(field).sum::<f64>() / rounds.len() as f64)
        };
        let cell = |rounds| match mean(rounds) {
            Some(value) => format!("{value:>12.digits$}"),
            None => format!("{:>12}", "failed"),
        };
        let diff = match (mean(off), mean(on)) {
            (Some(off), Some(on)) => format!("{:>+12.digits$}", on - off),
            _ => format!("{:>12}", "-"),
        };
        out.push_str(&format!("{label:<52} {} {} {diff}\n", cell(off), cell(on)));
    }
    out
}

/// The median, least and greatest of the rounds' ratios; `None` for none.
fn round_spread(ratios: &[f64]) -> Option<(f64, f64, f64)> {
    let low = ratios.iter().copied().reduce(f64::min)?;
    let high = ratios.iter().copied().reduce(f64::max)?;
    Some((measure::median(ratios.to_vec()), low, high))
}
