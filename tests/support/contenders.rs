//! Contender processes: a test re-runs its own binary, filtered to itself, with an environment
//! variable that makes the copy a contender; each contender prints one `HOLD <numbers...>` line
//! per hold, which the parent collects.

/// The wall clock in microseconds since the epoch: what contenders of one machine compare.
pub fn micros_since_epoch() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_micros()
}

/// Runs `count` copies of this test binary's test `test` (exact name), each with `env` set to
/// `url`, waits for all of them and returns the numbers of every `HOLD ` line they printed, in
/// the order of the contenders. Panics when a contender fails.
pub async fn run(test: &str, env: &str, url: &str, count: usize) -> Vec<Vec<u128>> {
    super::processes::contenders(test, env, url, count, "HOLD ")
        .await
        .into_iter()
        .flatten()
        .map(|report| {
            report
                .split(' ')
                .map(|n| n.parse().expect("a number"))
                .collect()
        })
        .collect()
}
