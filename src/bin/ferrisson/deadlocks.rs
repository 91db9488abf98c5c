//! `ferrisson deadlocks`

use std::time::Duration;

use serde::Serialize;

use crate::args::{Connection, DeadlocksArgs};
use crate::output::{self, humane, millis};
use crate::{connect, exit, Failure, Outcome};

/// One cycle in JSON.
#[derive(Serialize, Debug)]
struct CycleJson {
    /// The waits, in order around the cycle.
    steps: Vec<StepJson>,
}

/// One wait of a cycle in JSON (the text form prints the same).
#[derive(Serialize, Debug)]
struct StepJson {
    /// The waiting owner, `<client uuid>:<owner id>`.
    owner: String,
    /// The lock it waits for.
    lock: String,
    /// The owner that holds it: the next step's.
    held_by: String,
    #[serde(skip)]
    waited: Duration,
    waited_ms: u64,
    since_ms: u64,
    wait_id: u64,
    /// Whether the waiting client breaks deadlocks (detect mode).
    detects: bool,
    /// The wait that gives way: the youngest of a client in detect mode (the youngest of all
    /// when no client of the cycle detects).
    victim: bool,
}

impl CycleJson {
    fn new(deadlock: &ferrisson::Deadlock) -> CycleJson {
        let victim = deadlock.victim();
        let steps = &deadlock.steps;
        let steps = steps
            .iter()
            .enumerate()
            .map(|(i, step)| StepJson {
                owner: step.owner.clone(),
                lock: step.lock.clone(),
                held_by: steps[(i + 1) % steps.len()].owner.clone(),
                waited: step.waited,
                waited_ms: millis(step.waited),
                since_ms: step.since_ms,
                wait_id: step.wait_id,
                detects: step.detects,
                victim: std::ptr::eq(step, victim),
            })
            .collect();
        CycleJson { steps }
    }
}

/// Prints the deadlocks visible now ([`ferrisson::Client::find_deadlocks`]): each cycle, the
/// wait of every owner in it, who holds what it waits for, and the victim. Exits 1 when there
/// is any.
pub async fn deadlocks(conn: &Connection, json: bool, _args: DeadlocksArgs) -> Outcome {
    let client = connect(conn, conn.config()?).await?;
    let found = client.find_deadlocks().await;
    client.shutdown().await;
    let found = found.map_err(|err| Failure::from_lib("cannot look for deadlocks", &err, conn))?;
    let cycles: Vec<CycleJson> = found.iter().map(CycleJson::new).collect();
    if json {
        output::stdout_line(&output::json(&cycles));
    } else if cycles.is_empty() {
        output::stdout_line(
            "no deadlock among the waits recorded by ferrisson clients with deadlock detection on",
        );
    } else {
        for (n, cycle) in cycles.iter().enumerate() {
            if n > 0 {
                output::stdout_line("");
            }
            output::stdout_line(&format!(
                "deadlock {} ({} owners):",
                n + 1,
                cycle.steps.len()
            ));
            let rows: Vec<Vec<String>> = cycle
                .steps
                .iter()
                .map(|step| {
                    let victim = match (step.victim, step.detects) {
                        (true, true) => "victim (youngest wait in detect mode)",
                        (true, false) => "victim (youngest wait)",
                        (false, _) => "",
                    };
                    vec![
                        step.owner.clone(),
                        format!("waits {} for `{}`", humane(step.waited), step.lock),
                        format!("held by {}", step.held_by),
                        victim.to_owned(),
                    ]
                })
                .collect();
            for line in output::table(&rows).lines() {
                output::stdout_line(&format!("  {line}"));
            }
        }
    }
    Ok(if cycles.is_empty() {
        exit::OK
    } else {
        exit::DEADLOCK
    })
}
