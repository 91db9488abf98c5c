//! The regression gate (issue 26): what the run measured that is the same on every run of the
//! same code, held against the baseline committed in `benches/scenarios/baseline.json`.
//!
//! * **Counts** (`costs.rs`): script runs, messages and commands per uncontended cycle of each
//!   primitive, on one server and on a cluster. A count above the baseline fails the run.
//!   Commands are compared only on the server version the baseline was taken on (a script's
//!   commands are the server's to count).
//! * **What deadlock detection adds** (`deadlock.rs`): the same counts per cycle with
//!   `DeadlockDetection::Detect` less those with it `Off`, measured in the same run, by
//!   primitive; the baseline is zero (an uncontended acquire records nothing), so any command
//!   that detection adds to the uncontended path fails the run, on any server version.
//! * **Bytes**: the live heap per parked waiter (`waiters`, its first size: 1,000 in the smoke)
//!   and per held lock (`costs.rs`, 1,000 locks with nothing in flight), from the counting
//!   allocator. They depend on the build profile (an
//!   unoptimised build's futures are larger) and on the sizes run, so they are compared only
//!   when both match the baseline's: the smoke run of `cargo test`, which is CI's. More than
//!   [`BYTES_TOLERANCE`] above the baseline fails the run.
//!
//! Figures below the baseline pass and are shown; a change that lowers them should commit the
//! new baseline, written by `cargo test --all-features --bench scenarios -- --write-baseline`.
//! The bytes move by about 1.5 % between runs: commit the largest of a few runs' figures.
//! Throughput is never gated: it is a benchmark figure, not a test.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::costs::{Cost, Costs};

/// How far above the baseline a byte figure may go (allocator rounding, a hash map's growth).
const BYTES_TOLERANCE: f64 = 0.03;

/// A count's slack: counts are exact ratios over the cycles, so only float rounding.
const COUNT_SLACK: f64 = 1e-6;

/// The gated figures of one run (and the baseline's, in the same shape).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Figures {
    /// `test` (unoptimised, as `cargo test` builds it) or `release`.
    pub profile: String,
    /// The run's mode (`smoke`, `quick`, `full`): the sizes the bytes were taken at.
    pub mode: String,
    /// The server's version (`redis_version` of `INFO server`).
    pub server: String,
    /// Per uncontended cycle, by primitive: on one server, and on a 3-master cluster.
    pub single: BTreeMap<String, Cost>,
    pub cluster: BTreeMap<String, Cost>,
    /// Per uncontended cycle on one server, by primitive: what deadlock detection on adds.
    #[serde(default)]
    pub deadlock_detection_adds: BTreeMap<String, Cost>,
    /// Live heap per parked waiter and per held lock, bytes.
    pub parked_waiter_bytes: Option<f64>,
    pub held_lock_bytes: Option<f64>,
}

impl Figures {
    /// The profile this binary was built with.
    pub fn profile() -> &'static str {
        if cfg!(debug_assertions) {
            "test"
        } else {
            "release"
        }
    }

    /// The gated rows measured: failed rows are the costs scenario's failures, not the gate's.
    pub fn counts(costs: &Costs) -> BTreeMap<String, Cost> {
        costs
            .iter()
            .filter(|row| row.gated)
            .filter_map(|row| Some((row.primitive.to_owned(), *row.cost.as_ref().ok()?)))
            .collect()
    }
}

/// The committed baseline's path.
pub fn baseline_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/baseline.json")
}

/// Writes `figures` as the new baseline.
pub fn write_baseline(figures: &Figures) -> Result<PathBuf, String> {
    let path = baseline_path();
    let json = serde_json::to_string_pretty(figures).map_err(|e| e.to_string())?;
    std::fs::write(&path, json + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The gate's verdict: one line per figure compared (for the report) and the failures.
#[derive(Default)]
pub struct Verdict {
    pub lines: Vec<String>,
    pub failures: Vec<String>,
}

/// Compares `now` against the committed baseline.
pub fn check(now: &Figures) -> Verdict {
    let path = baseline_path();
    let baseline = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str::<Figures>(&text).map_err(|e| e.to_string()));
    match baseline {
        Ok(baseline) => compare(&baseline, now),
        Err(e) => Verdict {
            lines: Vec::new(),
            failures: vec![format!("gate: no baseline at {}: {e}", path.display())],
        },
    }
}

fn compare(base: &Figures, now: &Figures) -> Verdict {
    let mut verdict = Verdict::default();
    let same_server = base.server == now.server;
    for (set, base_set, now_set) in [
        ("single", &base.single, &now.single),
        ("cluster", &base.cluster, &now.cluster),
    ] {
        for (kind, was) in base_set {
            let Some(is) = now_set.get(kind) else {
                continue;
            };
            let mut fields = vec![("script runs", was.scripts, is.scripts)];
            fields.push(("messages", was.messages, is.messages));
            if same_server {
                fields.push(("commands", was.commands, is.commands));
            }
            for (what, was, is) in fields {
                let label = format!("{set} {kind}: {what} per cycle");
                verdict.judge(label, was, is, was + COUNT_SLACK);
            }
        }
    }
    for (kind, was) in &base.deadlock_detection_adds {
        let Some(is) = now.deadlock_detection_adds.get(kind) else {
            continue;
        };
        for (what, was, is) in [
            ("script runs", was.scripts, is.scripts),
            ("messages", was.messages, is.messages),
            ("commands", was.commands, is.commands),
        ] {
            let label = format!("single {kind}: {what} per cycle added by deadlock detection");
            verdict.judge(label, was, is, was + COUNT_SLACK);
        }
    }
    if base.profile == now.profile && base.mode == now.mode {
        for (what, was, is) in [
            (
                "heap per parked waiter, B",
                base.parked_waiter_bytes,
                now.parked_waiter_bytes,
            ),
            (
                "heap per held lock, B",
                base.held_lock_bytes,
                now.held_lock_bytes,
            ),
        ] {
            if let (Some(was), Some(is)) = (was, is) {
                verdict.judge(what.to_owned(), was, is, was * (1.0 + BYTES_TOLERANCE));
            }
        }
    }
    verdict
}

impl Verdict {
    fn judge(&mut self, label: String, was: f64, is: f64, limit: f64) {
        let mark = if is > limit {
            "ABOVE"
        } else if is < was {
            "below"
        } else {
            "ok"
        };
        let line = format!("{label}: {is:.2} (baseline {was:.2}) {mark}");
        if is > limit {
            self.failures.push(format!("gate: {line}"));
        }
        self.lines.push(line);
    }
}

impl Figures {
    /// The gated figures of `run` and its costs and deadlock scenarios (what it did not run
    /// stays empty).
    pub fn of(
        run: &crate::report::Run,
        costs: Option<&crate::costs::Run>,
        deadlock: Option<&crate::deadlock::Outcome>,
    ) -> Figures {
        let counts = |set: Option<&Result<Costs, String>>| {
            set.and_then(|costs| costs.as_ref().ok())
                .map(Figures::counts)
                .unwrap_or_default()
        };
        Figures {
            profile: Figures::profile().to_owned(),
            mode: run.plan.mode.name().to_owned(),
            server: run.machine.redis_version.clone(),
            single: counts(costs.map(|c| &c.single)),
            cluster: counts(costs.map(|c| &c.cluster)),
            deadlock_detection_adds: deadlock
                .map(crate::deadlock::Outcome::added)
                .unwrap_or_default(),
            parked_waiter_bytes: run
                .waiters
                .as_ref()
                .and_then(|rows| rows.first()?.as_ref().ok())
                .map(|w| w.heap_bytes_per_waiter),
            held_lock_bytes: costs.and_then(|c| c.held_lock_bytes.as_ref().ok().copied()),
        }
    }
}
