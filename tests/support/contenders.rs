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
    let exe = std::env::current_exe().expect("test binary path");
    let children: Vec<_> = (0..count)
        .map(|_| {
            std::process::Command::new(&exe)
                .args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(env, url)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn a contender process")
        })
        .collect();
    let mut holds = Vec::new();
    for child in children {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("the contender's output");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "contender failed: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        // libtest prints `test NAME ... ` before the test's own output, on the same line.
        let reports = stdout
            .lines()
            .filter_map(|line| line.split_once("HOLD ").map(|(_, report)| report));
        for report in reports {
            let numbers = report
                .split(' ')
                .map(|n| n.parse().expect("a number"))
                .collect();
            holds.push(numbers);
        }
    }
    holds
}
