//! Contenders in separate processes: the test binary re-executed to run one test alone, told by
//! an environment variable that it is a contender, reporting on its standard output.

/// The environment variable that tells each contender its number (0, 1, ...).
pub const CONTENDER_INDEX: &str = "FERRISSON_CONTENDER_INDEX";

/// Runs `count` processes of this test binary, each running only the test `test` with
/// `var=value` and its number in [`CONTENDER_INDEX`] in its environment, and returns every report line they printed (what follows
/// `HOLD ` on a line). Panics if a process fails.
pub async fn run_contenders(test: &str, var: &str, value: &str, count: usize) -> Vec<String> {
    let exe = std::env::current_exe().expect("test binary path");
    let children: Vec<_> = (0..count)
        .map(|index| {
            std::process::Command::new(&exe)
                .args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(var, value)
                .env(CONTENDER_INDEX, index.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn a contender process")
        })
        .collect();
    let mut reports = Vec::new();
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
        reports.extend(stdout.lines().filter_map(|line| {
            line.split_once("HOLD ")
                .map(|(_, report)| report.to_owned())
        }));
    }
    reports
}

/// Microseconds since the Unix epoch: a clock that processes on one machine share.
pub fn micros_since_epoch() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_micros()
}
