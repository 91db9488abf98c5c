//! The crate's modules form a stack, each layer using only the layers below it (see
//! `docs/architecture.md`, "Layers"):
//!
//! 0. base: `config`, `error`, `metrics`, `name`, `owner`, `shown`;
//! 1. transport (`src/transport/`): connections, scripts, dispatcher, pub/sub, sentinel, TLS;
//! 2. leases (`src/lease/`): the lease table, the watchdog, calls in doubt;
//! 3. the lock kit (`src/kit/`): shared client state, wait loop, in-flight calls, releases;
//! 4. primitives (`src/lock/`, `src/inspect.rs`): one file each;
//! 5. the top: `client` (connecting), `blocking`, and `lib.rs`.
//!
//! This test reads the sources and fails on any `crate::` path that reaches up a layer, or on a
//! module the map below does not place (so a new module must be given its layer).

use std::path::{Path, PathBuf};

/// The layer of a top-level module of the crate (`crate::<name>`).
fn layer_of_module(name: &str) -> Option<u8> {
    Some(match name {
        "config" | "error" | "metrics" | "name" | "owner" | "shown" => 0,
        "transport" => 1,
        "lease" => 2,
        "kit" => 3,
        "lock" | "inspect" | "multi" | "sync" => 4,
        "client" | "blocking" => 5,
        // The model checks (tests only), which drive the kit and the transport.
        "model" => 5,
        // The re-exported crate, not a module of ours.
        "fred" => 0,
        // Items re-exported at the crate root, by the layer that defines them.
        "Config" | "ConfigBuilder" | "PublishMode" | "SyncedWrites" | "WhenUnavailable"
        | "TlsOptions" | "Error" | "Result" | "Owner" => 0,
        "Client" | "Acquisition" | "Attempt" | "WokenBy" => 3,
        "Lock" | "LockGuard" | "RemainingTtl" | "Holder" | "LockInfo" | "LockKind"
        | "FencedLock" | "FencedGuard" | "FairLock" | "FairGuard" => 4,
        "Primitive" | "QueuedWaiter" | "ExpirablePermit" | "PermitIdFormat" => 4,
        "PermitExpirableSemaphore" | "Permit" => 4,
        "ReadWriteLock" | "ReadLock" | "WriteLock" | "ReadGuard" | "WriteGuard" => 4,
        "Semaphore" | "SemaphorePermits" | "CountDownLatch" => 4,
        "MultiLock" | "MultiGuard" | "RedLock" => 4,
        "SpinLock" | "SpinGuard" | "BackOff" | "NonReentrantLock" | "NonReentrantGuard"
        | "Guard" => 4,
        _ => return None,
    })
}

/// The layer of a source file, from its path under `src/`.
fn layer_of_file(relative: &Path) -> u8 {
    let first = relative
        .components()
        .next()
        .and_then(|part| part.as_os_str().to_str())
        .unwrap_or_default();
    if first == "lib.rs" {
        return 6;
    }
    let module = first.strip_suffix(".rs").unwrap_or(first);
    layer_of_module(module).unwrap_or_else(|| {
        panic!(
            "src/{} is in no layer: add it to the map",
            relative.display()
        )
    })
}

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            // The command-line tool is a separate binary that uses only the public API.
            if !path.ends_with("bin") {
                sources(&path, found);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// Every `crate::<module>` in `code`, outside comments.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut paths = Vec::new();
    for (number, line) in code.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                paths.push((number + 1, name));
            }
            rest = after;
        }
    }
    paths
}

#[test]
fn no_module_reaches_up_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 20, "found only {} sources", files.len());
    let mut violations = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src/");
        let own = layer_of_file(relative);
        let code = std::fs::read_to_string(file).expect("read source");
        for (line, module) in crate_paths(&code) {
            match layer_of_module(&module) {
                Some(used) if used <= own => {}
                Some(used) => violations.push(format!(
                    "src/{}:{line}: layer {own} uses crate::{module} (layer {used})",
                    relative.display()
                )),
                None => violations.push(format!(
                    "src/{}:{line}: crate::{module} is in no layer",
                    relative.display()
                )),
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn the_checker_sees_an_upward_path() {
    let paths = crate_paths("use crate::kit::Client; // crate::lock in a comment\n");
    assert_eq!(paths, vec![(1, "kit".to_owned())]);
    assert!(layer_of_module("kit") > layer_of_module("transport"));
}
