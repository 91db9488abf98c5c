//! The model checks' entry point: `cargo test --release --test model`.
//!
//! The checks live beside the code they check (`src/model/`, compiled only for the library's
//! own tests, since they reach its private state machines); this runs them:
//! `cargo test --lib model::` with this build's profile and features. Longer runs:
//! `FERRISSON_MODEL_ITERATIONS=20000 cargo test --release --test model` (the default is 1,000
//! schedules per check). See docs/reliability.md, "Model checks".

use std::process::Command;

#[test]
fn model_checks() {
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["test", "--lib", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"));
    if !cfg!(debug_assertions) {
        cargo.arg("--release");
    }
    let features: Vec<&str> = [
        (cfg!(feature = "cli"), "cli"),
        (cfg!(feature = "tls"), "tls"),
        (cfg!(feature = "metrics"), "metrics"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if !features.is_empty() {
        cargo.arg("--features").arg(features.join(","));
    }
    cargo.arg("model::");
    let status = cargo.status().expect("cargo runs");
    assert!(status.success(), "the model checks failed: {status}");
}
