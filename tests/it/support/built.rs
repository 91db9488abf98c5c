//! The examples of the `ferrisson` package, which tests run. The tests are a package of their
//! own (`tests/Cargo.toml`), in the same workspace and target directory.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root: the `ferrisson` package.
pub fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Example `name`'s binary, next to this test's (`target/<profile>/examples/NAME`), built first
/// if missing (`cargo test` asked for this test target alone). `cargo test --all-targets`, as
/// `./dev test` runs it, builds the examples with the rest: a separate build here would
/// resolve the dependencies' features differently and rebuild the library.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let binary = profile_dir.join("examples").join(name);
    if !binary.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(&cargo);
        build
            .arg("build")
            .arg("--manifest-path")
            .arg(root().join("Cargo.toml"))
            .args([
                "--package",
                "ferrisson",
                "--all-features",
                "--example",
                name,
            ]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "cargo build --example {name} failed");
    }
    binary
}
