//! The examples of the `ferrisson` package, which tests run. The tests are a package of their
//! own (`tests/Cargo.toml`), in the same workspace and target directory.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Example `name`'s binary, next to this test's (`target/<profile>/examples/NAME`). The first
/// call of the process builds every example, in one `cargo build --all-features --examples` of
/// the workspace, unless this one is already there. `cargo test --all-targets` builds the
/// examples only as test harnesses (`examples/NAME-<hash>`), so `./dev test` pays this once; a
/// build of the workspace with the same features as the tests' reuses every library they built
/// (8 examples in 19 s on 2 cores), where one `--package ferrisson --example NAME` build per
/// example, with the test's environment, rebuilt ring, rustls, fred and the library (about
/// 250 s inside the test run, and the next top-level build rebuilt them again).
pub fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let binary = profile_dir.join("examples").join(name);
    if !binary.exists() {
        BUILT.get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut build = Command::new(&cargo);
            // Cargo set these for this test process (`CARGO_MANIFEST_DIR` is `tests/`): a build
            // script that reruns when one changes (ring's names several) would see them changed
            // and rebuild its crate and all above it, here and again in the next top-level build.
            for (key, _) in std::env::vars_os() {
                let key = key.to_string_lossy();
                let set_for_tests = [
                    "CARGO_PKG_",
                    "CARGO_MANIFEST_",
                    "CARGO_BIN_",
                    "CARGO_CRATE_",
                ]
                .iter()
                .any(|prefix| key.starts_with(prefix))
                    || ["CARGO_TARGET_TMPDIR", "CARGO_PRIMARY_PACKAGE", "OUT_DIR"].contains(&&*key);
                if set_for_tests {
                    build.env_remove(&*key);
                }
            }
            build
                .arg("build")
                .arg("--manifest-path")
                .arg(super::workspace_root().join("Cargo.toml"))
                .args(["--all-features", "--examples"]);
            if !cfg!(debug_assertions) {
                build.arg("--release");
            }
            let status = build.status().expect("run cargo build");
            assert!(
                status.success(),
                "cargo build --all-features --examples failed"
            );
        });
    }
    binary
}
