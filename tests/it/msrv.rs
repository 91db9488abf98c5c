//! The declared minimum supported Rust version (`rust-version` in Cargo.toml) is true: no crate
//! the library is built from declares a higher `rust-version` of its own. The crates are the
//! ones Cargo.lock resolves, read with `cargo metadata --locked` (no other toolchain can be
//! installed to try the declared one): the library's normal and build dependencies, with every
//! feature, and theirs, transitively, for this platform.
//!
//! Dev-dependencies are left out: they build only this crate's own tests, benches and examples,
//! with the toolchain `rust-toolchain.toml` pins, never a user's build (Cargo does not hold them
//! to `rust-version` either). The test prints the highest `rust-version` among them.
//!
//! `cargo metadata` reads every resolved crate's manifest: it runs `--offline` first, from the
//! local registry cache, which a build with `--all-features` has filled (CI builds first); if
//! that fails (a crate of a feature never built here), it runs again with the network.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// A `rust-version` ("1.89", "1.89.0") as (major, minor, patch).
fn parse_version(text: &str) -> (u64, u64, u64) {
    let mut parts = text.split('.').map(|part| {
        part.parse::<u64>()
            .unwrap_or_else(|_| panic!("a version: {text}"))
    });
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next())
}

/// This toolchain's host platform (`rustc -vV`), for `cargo metadata --filter-platform`: the
/// crates of other platforms are not in the local cache.
fn host() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let output = Command::new(&rustc)
        .arg("-vV")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("run `{rustc} -vV`: {e}"));
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("host: "))
        .unwrap_or_else(|| panic!("no host in `{rustc} -vV`: {text}"))
        .to_owned()
}

/// `cargo metadata --format-version 1 --locked --all-features` of this package, for `host`.
fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let host = host();
    let run = |offline: bool| {
        let mut command = Command::new(&cargo);
        command.args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--all-features",
        ]);
        command.args(["--filter-platform", &host]);
        command.arg("--manifest-path").arg(&manifest);
        if offline {
            command.arg("--offline");
        }
        command
            .output()
            .unwrap_or_else(|e| panic!("run `{cargo} metadata`: {e}"))
    };
    let mut output = run(true);
    if !output.status.success() {
        let offline_error = String::from_utf8_lossy(&output.stderr).into_owned();
        output = run(false);
        assert!(
            output.status.success(),
            "`cargo metadata --locked` failed offline:\n{offline_error}\nand online:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON")
}

/// The resolved crates reachable from the root package through its dependencies of `root_kinds`
/// and, from there on, through normal and build dependencies (what compiling them needs).
fn reachable(metadata: &Value, root_kinds: &[Option<&str>]) -> BTreeSet<String> {
    let resolve = &metadata["resolve"];
    let nodes: HashMap<&str, &Value> = resolve["nodes"]
        .as_array()
        .expect("resolve.nodes")
        .iter()
        .map(|node| (node["id"].as_str().expect("a node's id"), node))
        .collect();
    let deps_of = |id: &str, kinds: &[Option<&str>]| -> Vec<String> {
        nodes[id]["deps"]
            .as_array()
            .expect("a node's deps")
            .iter()
            .filter(|dep| {
                dep["dep_kinds"]
                    .as_array()
                    .expect("dep_kinds")
                    .iter()
                    .any(|kind| kinds.contains(&kind["kind"].as_str()))
            })
            .map(|dep| dep["pkg"].as_str().expect("a dep's id").to_owned())
            .collect()
    };
    let root = resolve["root"].as_str().expect("resolve.root");
    let mut seen = BTreeSet::new();
    let mut stack = deps_of(root, root_kinds);
    while let Some(id) = stack.pop() {
        if seen.insert(id.clone()) {
            stack.extend(deps_of(&id, &[None, Some("build")]));
        }
    }
    seen
}

/// Each package by id: its name, version and declared `rust-version` (if any).
fn packages(metadata: &Value) -> HashMap<String, (String, String, Option<String>)> {
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|package| {
            let text = |key: &str| package[key].as_str().map(str::to_owned);
            (
                text("id").expect("a package's id"),
                (
                    text("name").expect("a package's name"),
                    text("version").expect("a package's version"),
                    text("rust_version"),
                ),
            )
        })
        .collect()
}

#[test]
fn no_crate_the_library_is_built_from_needs_a_newer_rust_than_rust_version() {
    let metadata = metadata();
    let packages = packages(&metadata);
    let root = metadata["resolve"]["root"].as_str().expect("resolve.root");
    let declared = packages[root]
        .2
        .clone()
        .expect("Cargo.toml declares a rust-version");
    let msrv = parse_version(&declared);

    let library = reachable(&metadata, &[None, Some("build")]);
    let named = |ids: &BTreeSet<String>| -> BTreeSet<String> {
        ids.iter().map(|id| packages[id].0.clone()).collect()
    };
    // The walk follows the library's dependencies, not the dev-dependencies.
    let library_names = named(&library);
    for crate_name in ["fred", "tokio", "uuid", "clap", "rustls", "metrics"] {
        assert!(
            library_names.contains(crate_name),
            "{crate_name} is a dependency of the library with all features: {library_names:?}"
        );
    }
    for dev_only in ["criterion", "proptest", "tempfile"] {
        assert!(
            !library_names.contains(dev_only),
            "{dev_only} is a dev-dependency only"
        );
    }

    let too_new: Vec<String> = library
        .iter()
        .filter_map(|id| {
            let (name, version, rust_version) = &packages[id];
            let needs = rust_version.as_deref()?;
            (parse_version(needs) > msrv)
                .then(|| format!("{name} {version} (rust-version {needs})"))
        })
        .collect();
    assert!(
        too_new.is_empty(),
        "Cargo.toml declares rust-version = \"{declared}\", but Cargo.lock resolves dependencies \
         of the library that declare a newer one: {}. Raise rust-version (and the README's \
         requirement) to the highest of them, or hold them back in Cargo.lock \
         (`cargo update -p NAME --precise VERSION`).",
        too_new.join(", ")
    );

    // For information: the dev-dependencies' highest rust-version, and the crates without one.
    let dev_only: BTreeSet<String> = reachable(&metadata, &[Some("dev")])
        .difference(&library)
        .cloned()
        .collect();
    let highest_dev = dev_only
        .iter()
        .filter_map(|id| {
            let (name, version, rust_version) = &packages[id];
            let needs = rust_version.as_deref()?;
            Some((parse_version(needs), format!("{name} {version} ({needs})")))
        })
        .max();
    let undeclared: Vec<&str> = library
        .iter()
        .filter(|id| packages[*id].2.is_none())
        .map(|id| packages[id].0.as_str())
        .collect();
    eprintln!(
        "rust-version {declared}: {} crates of the library checked; {} declare none ({}); \
         highest among the {} dev-only crates: {}",
        library.len(),
        undeclared.len(),
        undeclared.join(", "),
        dev_only.len(),
        highest_dev.map_or("none".to_owned(), |(_, text)| text)
    );
}
