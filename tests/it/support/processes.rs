//! Contenders in separate processes: the test binary re-executes one of its own tests with an
//! environment variable that turns that test into a contender, and collects what each printed.
//!
//! A test re-runs itself by its full libtest name, module path included (`red_lock::NAME` in
//! the `it` binary): [`test_name`] makes it from the caller's `module_path!()`.

use std::process::{Command, Stdio};

/// The name libtest runs the test function `function` of the module `module` under: `module`
/// is the caller's `module_path!()` (`it::red_lock`), whose first part, the crate, libtest
/// leaves out (`red_lock::function`).
pub fn test_name(module: &str, function: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{function}"),
        None => function.to_owned(),
    }
}

/// Panics unless `stdout`, a re-run test binary's output, shows that exactly one test ran and
/// passed: a name that matched no test would otherwise pass with nothing run.
pub fn assert_ran_one_test(test: &str, stdout: &str, stderr: &str) {
    assert!(
        stdout.contains("test result: ok. 1 passed;"),
        "the re-run binary did not run exactly `{test}`, passed:\n{stdout}\n{stderr}"
    );
}

/// The environment variable that tells each contender its number (0, 1, ...).
pub const CONTENDER_INDEX: &str = "FERRISSON_CONTENDER_INDEX";

/// Runs `count` copies of this test binary's test `test` (its full name, see [`test_name`];
/// exactly, with its output shown) with
/// `env` set to `value` and its number in [`CONTENDER_INDEX`], waits for all of them, and returns each one's report lines: the part
/// after `marker` of every line that contains it (libtest prints `test NAME ... ` before the
/// test's own output, on the same line). Panics, with its output, if a contender failed.
pub async fn contenders(
    test: &str,
    env: &str,
    value: &str,
    count: usize,
    marker: &str,
) -> Vec<Vec<String>> {
    let exe = std::env::current_exe().expect("test binary path");
    let children: Vec<_> = (0..count)
        .map(|index| {
            Command::new(&exe)
                .args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(env, value)
                .env(CONTENDER_INDEX, index.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a contender process")
        })
        .collect();
    let mut reports = Vec::with_capacity(count);
    for child in children {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("the contender's output");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "contender failed: {}\n{stdout}\n{stderr}",
            output.status,
        );
        assert_ran_one_test(test, &stdout, &stderr);
        let lines = stdout
            .lines()
            .filter_map(|line| line.split_once(marker).map(|(_, report)| report.to_owned()))
            .collect();
        reports.push(lines);
    }
    reports
}

/// The env variable that runs a test in its own process ([`in_own_process`]): the test's name.
const OWN_PROCESS: &str = "FERRISSON_OWN_PROCESS";

/// For a test that installs process-wide state (the global `tracing` subscriber, the `metrics`
/// recorder), which every other test running in the same process would then write into, and
/// which must see nothing of theirs. `test` is the caller's full name ([`test_name`]).
///
/// In the test's own process (this binary re-run with `test`'s exact name and
/// `FERRISSON_OWN_PROCESS` set to it) returns `true`: the caller goes on with the test there.
/// Otherwise runs that process, waits for it, panics with its output unless the test ran there
/// and passed, and returns `false`: the caller returns, its result is the child's.
pub async fn in_own_process(test: &str) -> bool {
    if std::env::var(OWN_PROCESS).is_ok_and(|name| name == test) {
        return true;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let child = Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(OWN_PROCESS, test)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the test's own process");
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("the test process's output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "`{test}` failed in its own process: {}\n{stdout}\n{stderr}",
        output.status,
    );
    assert_ran_one_test(test, &stdout, &stderr);
    false
}
