//! The Node.js side shared by the interop tests (`tests/it/interop_node.rs`, `tests/interop/peer.js`)
//! and the scenario benchmark (`benches/scenarios/peers.rs`, `tests/interop/bench.js`): both run
//! scripts in `tests/interop` against the npm packages pinned by its `package-lock.json`.
//!
//! [`install`] runs `npm ci` there once per process, skipped when `node_modules` was already
//! installed from the current lock file (a stamp file holds a copy of it).

use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Why the Node.js side cannot run, as the error a test returns: libtest prints a failed test's
/// error with `Debug`, which here is the plain message (a `String` would print quoted, with its
/// newlines escaped).
pub struct Unavailable(pub String);

impl std::fmt::Debug for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for Unavailable {
    fn from(message: String) -> Unavailable {
        Unavailable(message)
    }
}

/// How to get Node.js and npm, for the messages of a failed [`install`].
const HOW_TO_INSTALL: &str = "`./dev test` installs them with apt when missing; or run \
     `sudo apt-get install nodejs npm` (or see https://nodejs.org).";

/// Written into `node_modules` after a successful `npm ci`: a copy of the lock file it installed.
const STAMP: &str = ".ferrisson-npm-ci.stamp";

/// The Node.js executable.
pub fn node_binary() -> &'static str {
    "node"
}

/// `tests/interop`: the Node scripts, `package.json`, `package-lock.json` and `node_modules`.
pub fn interop_dir() -> PathBuf {
    super::workspace_root().join("tests").join("interop")
}

/// Checks that Node.js is on `PATH` and runs `npm ci` in `tests/interop` once per process,
/// unless `node_modules` was already installed from the current `package-lock.json`. Returns
/// the directory, or a clear message when Node.js or npm is missing or the install fails.
pub fn install() -> Result<PathBuf, String> {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    INSTALLED.get_or_init(install_once).clone()
}

fn install_once() -> Result<PathBuf, String> {
    let dir = interop_dir();
    match Command::new(node_binary()).arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            return Err(format!(
                "`node --version` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(format!(
                "Node.js (`node`) was not found on PATH. The node-redisson scripts in \
                 tests/interop (interop tests and the node-redisson benchmark peer) need \
                 Node.js >= 18 with npm. {HOW_TO_INSTALL}"
            ))
        }
        Err(e) => return Err(format!("cannot run `node --version`: {e}")),
    }
    // The published crate leaves the lock file out (a checkout-only test dependency).
    let lockfile = std::fs::read(dir.join("package-lock.json")).map_err(|e| {
        format!(
            "cannot read tests/interop/package-lock.json ({e}); the node interop tests run \
             from a git checkout of ferrisson"
        )
    })?;
    let modules = dir.join("node_modules");
    let stamp = modules.join(STAMP);
    let up_to_date = std::fs::read(&stamp).is_ok_and(|s| s == lockfile)
        && modules.join("node-redisson/package.json").is_file()
        && modules.join("ioredis/package.json").is_file()
        && modules.join("redlock/package.json").is_file();
    if up_to_date {
        return Ok(dir);
    }
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                format!(
                    "npm was not found on PATH; it is needed to install the node-redisson \
                     scripts (`npm ci` in tests/interop). {HOW_TO_INSTALL}"
                )
            } else {
                format!("cannot run `npm ci`: {e}")
            }
        })?;
    if !out.status.success() {
        return Err(format!(
            "`npm ci` in {} failed ({}); it needs the npm registry (or a cache) and Node.js \
             >= 18:\n{}\n{}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(&stamp, &lockfile)
        .map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    Ok(dir)
}
