//! The Java Redisson peer (`tests/peers/java`, its main class `JavaPeer.java`): real
//! `org.redisson:redisson` of each version of [`VERSIONS`], driven by JSON lines
//! ([`super::json_lines`]), for the cross-language tests (`tests/it/interop_java/`).
//!
//! Building, once per test process and only when one of its sources is newer: `mvn compile` of
//! the peer (against the oldest version; later versions' methods are reached by reflection;
//! `Bench.java` holds the benchmark loops), then for each version
//! `mvn dependency:build-classpath -Dredisson.version=V` into `target/java-peer/cp-V.txt`. The
//! peer then runs as `java -cp <classes>:<that classpath> ferrisson.peer.JavaPeer`, so that
//! Maven's own output never reaches the JSON stream. `./dev test` runs the same build before the
//! tests (Maven Central, or the local repository it filled, provides the jars); a version that
//! cannot be resolved fails with a message that names it.
//!
//! Failures to build or start come back as [`Unavailable`]; once a peer runs, each call waits a
//! bounded time for its reply and panics (with the peer's stderr) if there is none.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use serde_json::{json, Map, Value};

use super::json_lines::{LinePeer, Pending, Reply};
pub use super::node::Unavailable;

/// A Redisson release of the matrix: the latest patch of each protocol era.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u32, pub u32, pub u32);

/// 3.16.8: hex permit ids, one watchdog timer per lock, classic pub/sub only.
pub const V3_16: Version = Version(3, 16, 8);
/// 3.23.5: the last before the unlock latch; sharded pub/sub in clusters.
pub const V3_23: Version = Version(3, 23, 5);
/// 3.43.0: the last with per-lock watchdog timers.
pub const V3_43: Version = Version(3, 43, 0);
/// 3.52.0: batched watchdog, `WAITAOF`, script cache on.
pub const V3_52: Version = Version(3, 52, 0);
/// 4.7.0: non-reentrant locks, the 4.4 read-renewal change.
pub const V4_7: Version = Version(4, 7, 0);

/// Every version the cross-language tests run on, oldest first.
pub const VERSIONS: [Version; 5] = [V3_16, V3_23, V3_43, V3_52, V4_7];

impl Version {
    /// `RFencedLock` (`getFencedLock`), since 3.19.0.
    pub fn has_fenced_lock(self) -> bool {
        self >= Version(3, 19, 0)
    }

    /// `getNonReentrantLock` and `getNonReentrantFairLock`, since 4.4.0.
    pub fn has_non_reentrant_locks(self) -> bool {
        self >= Version(4, 4, 0)
    }

    /// Permit ids stored as their 32-character hex string (raw 16 bytes from 3.17.0).
    pub fn hex_permit_ids(self) -> bool {
        self < Version(3, 17, 0)
    }

    /// The unlock latch `redisson_unlock_latch:{N}:REQ`, since 3.24.0.
    pub fn has_unlock_latch(self) -> bool {
        self >= Version(3, 24, 0)
    }

    /// The batched watchdog (`LockRenewalScheduler`), since 3.44.0.
    pub fn batches_renewals(self) -> bool {
        self >= Version(3, 44, 0)
    }

    /// An acquisition that no replica acknowledged (`checkLockSyncedSlaves`) is rolled back with
    /// the unlock script (`handleNoSync`), since 3.20.0, except from 3.25.0 to 3.46.x: there
    /// the error's text became "None of slaves were synced. Try to increase ..." while
    /// `handleNoSync` (and `ServiceManager.execute`'s retry) still compared it with `equals`
    /// to "None of slaves were synced", so the hold stays until its lease ends. 3.47.0 throws
    /// and matches a `NoSyncedSlavesException` instead (commit f2b6ad8).
    pub fn rolls_back_unsynced_acquisitions(self) -> bool {
        (Version(3, 20, 0)..Version(3, 25, 0)).contains(&self) || self >= Version(3, 47, 0)
    }

    /// Sharded pub/sub in a cluster when the server has it, since 3.22.0.
    pub fn shards_pubsub(self) -> bool {
        self >= Version(3, 22, 0)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// How long a JVM may take to start and connect its clients.
const STARTUP: Duration = Duration::from_secs(40);
/// The bound on a reply that should come promptly.
pub const REPLY: Duration = Duration::from_secs(15);

const HOW_TO_INSTALL: &str = "`./dev test` installs them with apt when missing; or run `sudo \
     apt-get install openjdk-17-jdk-headless maven`.";

/// `tests/peers/java`: the Maven project.
pub fn project_dir() -> PathBuf {
    super::workspace_root()
        .join("tests")
        .join("peers")
        .join("java")
}

/// `target/java-peer`: the compiled class and the classpath files.
fn build_dir() -> PathBuf {
    super::workspace_root().join("target").join("java-peer")
}

fn classes_dir() -> PathBuf {
    build_dir().join("build").join("classes")
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Whether `output` exists and is newer than every one of `inputs`.
fn fresh(output: &Path, inputs: &[PathBuf]) -> bool {
    let Some(built) = modified(output) else {
        return false;
    };
    inputs
        .iter()
        .all(|input| modified(input).is_some_and(|m| m <= built))
}

/// Maven runs one at a time: the local repository is shared.
static MAVEN: Mutex<()> = Mutex::new(());

fn maven(args: &[String]) -> Result<(), String> {
    let _one = MAVEN.lock().unwrap_or_else(|e| e.into_inner());
    let pom = project_dir().join("pom.xml");
    let out = Command::new("mvn")
        .args(["-q", "-B", "-f"])
        .arg(&pom)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                format!(
                    "Maven (`mvn`) was not found on PATH; it builds the Java Redisson peer \
                     (tests/peers/java). {HOW_TO_INSTALL}"
                )
            } else {
                format!("cannot run mvn: {e}")
            }
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "`mvn -f {} {}` failed ({}):\n{}\n{}",
        pom.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn check_java() -> Result<(), String> {
    match Command::new("java")
        .arg("-version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "`java -version` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(format!(
            "Java (`java`) was not found on PATH; the Java Redisson peer needs a JDK >= 17. \
             {HOW_TO_INSTALL}"
        )),
        Err(e) => Err(format!("cannot run `java -version`: {e}")),
    }
}

/// The peer's class, compiled once per process when its source or the pom changed.
fn compiled() -> Result<PathBuf, Unavailable> {
    static COMPILED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    COMPILED
        .get_or_init(|| {
            check_java()?;
            let project = project_dir();
            let sources = project.join("src/main/java/ferrisson/peer");
            let mut inputs: Vec<PathBuf> = std::fs::read_dir(&sources)
                .map_err(|e| format!("cannot read {}: {e}", sources.display()))?
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .collect();
            inputs.push(project.join("pom.xml"));
            let class = classes_dir().join("ferrisson/peer/JavaPeer.class");
            if !fresh(&class, &inputs) {
                maven(&["compile".into()])?;
            }
            Ok(classes_dir())
        })
        .clone()
        .map_err(Unavailable)
}

/// The classpath of `version` (its jars, resolved by Maven once, then read from
/// `target/java-peer/cp-<version>.txt`), the peer's classes first.
pub fn classpath(version: Version) -> Result<String, Unavailable> {
    static PATHS: OnceLock<Mutex<std::collections::HashMap<Version, Result<String, String>>>> =
        OnceLock::new();
    let classes = compiled()?;
    let paths = PATHS.get_or_init(Default::default);
    let mut paths = paths.lock().unwrap_or_else(|e| e.into_inner());
    paths
        .entry(version)
        .or_insert_with(|| {
            let file = build_dir().join(format!("cp-{version}.txt"));
            if !fresh(&file, &[project_dir().join("pom.xml")]) {
                maven(&[
                    "dependency:build-classpath".into(),
                    format!("-Dredisson.version={version}"),
                    format!("-Dmdep.outputFile={}", file.display()),
                ])
                .map_err(|e| {
                    format!(
                        "Redisson {version} (org.redisson:redisson) cannot be resolved from \
                         Maven Central or the local repository: {e}"
                    )
                })?;
            }
            let jars = std::fs::read_to_string(&file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            Ok(format!("{}:{}", classes.display(), jars.trim()))
        })
        .clone()
        .map_err(Unavailable)
}

/// What a peer's URLs are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Topology {
    /// One Redisson client per URL, each on one server (`useSingleServer`).
    #[default]
    Single,
    /// One client over all the URLs as cluster nodes (`useClusterServers`).
    Cluster,
    /// One client over all the URLs as sentinels monitoring the master of this name
    /// (`useSentinelServers`).
    Sentinel(&'static str),
}

/// How a peer connects.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `Config` setters by name and value (`lockWatchdogTimeout` = `3000`), set by reflection.
    pub settings: Vec<(&'static str, String)>,
    /// What the URLs are: one server per client (the default), or the nodes or sentinels that
    /// one client connects through.
    pub topology: Topology,
    /// JIT and heap settings for measurements, instead of the quick-starting ones of tests.
    pub for_benchmarks: bool,
}

impl Options {
    /// With the watchdog lease `Config.lockWatchdogTimeout` = `watchdog`.
    pub fn watchdog(watchdog: Duration) -> Options {
        Options {
            settings: vec![("lockWatchdogTimeout", watchdog.as_millis().to_string())],
            ..Options::default()
        }
    }
}

/// A running Java Redisson peer; killed when dropped.
pub struct JavaPeer {
    peer: LinePeer,
    version: Version,
    client_ids: Vec<String>,
}

impl JavaPeer {
    /// Starts a peer of `version` with one Redisson client on `url`.
    pub async fn start(version: Version, url: &str) -> Result<JavaPeer, Unavailable> {
        JavaPeer::start_with(version, &[url.to_owned()], Options::default()).await
    }

    /// Starts a peer of `version` over `urls` (one client each, or one cluster client).
    pub async fn start_with(
        version: Version,
        urls: &[String],
        options: Options,
    ) -> Result<JavaPeer, Unavailable> {
        let classpath = classpath(version)?;
        let mut command = tokio::process::Command::new("java");
        if options.for_benchmarks {
            command.args(["-Xms512m", "-Xmx512m", "-XX:+UseG1GC"]);
        } else {
            // Quick to start and small: these processes wait on Redis, they do not compute.
            command.args([
                "-Xms32m",
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-XX:-UsePerfData",
                "-Xshare:auto",
            ]);
        }
        command
            .arg("-cp")
            .arg(&classpath)
            .arg(format!("-Dredisson.version={version}"))
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("ferrisson.peer.JavaPeer");
        match options.topology {
            Topology::Single => {}
            Topology::Cluster => {
                command.arg("--cluster");
            }
            Topology::Sentinel(master) => {
                command.args(["--sentinel", master]);
            }
        }
        for (key, value) in &options.settings {
            command.arg("--set").arg(format!("{key}={value}"));
        }
        command.args(urls);
        let name = format!("Java Redisson {version} peer");
        let peer = LinePeer::spawn(&name, command, STARTUP).await?;
        let client_ids = match peer.ready().fields.get("client_ids") {
            Some(Value::Array(ids)) => ids
                .iter()
                .filter_map(|id| id.as_str().map(str::to_owned))
                .collect(),
            other => return Err(Unavailable(format!("{name}: no client ids in {other:?}"))),
        };
        Ok(JavaPeer {
            peer,
            version,
            client_ids,
        })
    }

    /// The Redisson version this peer runs.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The id of its (first) Redisson client: the prefix of its holder fields.
    pub fn client_id(&self) -> &str {
        &self.client_ids[0]
    }

    /// The ids of its clients, one per URL.
    pub fn client_ids(&self) -> &[String] {
        &self.client_ids
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.peer.pid().expect("a running peer has a pid")
    }

    /// What the JVM wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.peer.stderr()
    }

    /// Sends `op` with `args`; the reply comes through the returned [`Pending`].
    pub async fn send(&self, op: &str, args: Value) -> Pending {
        self.peer.send(op, args).await
    }

    /// Sends `op` with `args` and waits at most [`REPLY`] for the reply.
    pub async fn call(&self, op: &str, args: Value) -> Reply {
        self.peer.call(op, args, REPLY).await
    }

    /// Like [`call`](Self::call), and panics unless the reply is `ok`.
    pub async fn ok(&self, op: &str, args: Value) -> Reply {
        let reply = self.call(op, args.clone()).await;
        assert!(
            reply.ok(),
            "Java {} {op} {args}: {:?}",
            self.version,
            reply.fields
        );
        reply
    }

    /// The Java thread id of `owner` (its own platform thread in the peer).
    pub async fn thread_id(&self, owner: &str) -> u64 {
        self.ok("thread_id", json!({ "owner": owner }))
            .await
            .u64("thread_id")
    }

    /// The holder field `owner` writes: `<client id>:<thread id>`.
    pub async fn field(&self, owner: &str) -> String {
        format!("{}:{}", self.client_id(), self.thread_id(owner).await)
    }

    /// Sends `quit` and waits for the JVM to exit.
    pub async fn quit(self) {
        self.peer.quit().await
    }
}

/// `args` with `kind`, `name` and `owner` added (for the lock ops).
pub fn lock_args(kind: &str, name: &str, owner: &str, more: Value) -> Value {
    let mut fields = Map::new();
    fields.insert("kind".into(), kind.into());
    fields.insert("name".into(), name.into());
    fields.insert("owner".into(), owner.into());
    if let Value::Object(more) = more {
        fields.extend(more);
    }
    Value::Object(fields)
}

/// The `error_class` of a failed reply.
pub fn error_class(reply: &Reply) -> Option<&str> {
    reply.str("error_class")
}
