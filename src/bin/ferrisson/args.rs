//! Command-line arguments (clap derive) and their value parsers.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::Failure;

const ABOUT: &str = "Inspect and use Redisson-compatible Redis locks from the shell";

const LONG_ABOUT: &str = r#"Inspect and use Redisson-compatible Redis locks from the shell.

A lock is the Redis key of the same name, written exactly as Java Redisson's RLock writes it:
`ferrisson run orders:42 -- ...` excludes a Java service holding getLock("orders:42").
`status` and `watch` read every primitive of Redisson's lock family: reentrant, spin,
non-reentrant, fair, fenced and read-write locks, semaphores (also permit-expirable) and
count-down latches."#;

const EXAMPLES: &str = r#"Examples:
  ferrisson status orders:42 jobs:nightly
  ferrisson status --kind latch jobs:done
  ferrisson run --wait 30s nightly-report -- ./make-report.sh --full
  ferrisson watch orders:42
  ferrisson unlock --force orders:42
  ferrisson deadlocks
  REDIS_URL=rediss://app:secret@redis.internal:6380/0 ferrisson status orders:42

Durations are humane: 500ms, 30s, 2m, 1h 30m; a plain number is seconds (10, 2.5), as flock's.

Errors: one line on stderr, `ferrisson: error: <message>`. With --json, also one JSON object
{"error":{"kind":K,"message":M}} as the last line on stdout; for `run`, whose stdout is its
command's, an {"event":"error","name":N,"error":{"kind":K,"message":M}} line in its event stream
on stderr instead. K is stable: invalid_argument, unavailable, timeout, permission_denied,
wrong_type, redis, not_held, not_replicated, release_unknown, command_not_found,
cannot_execute, internal, other.

Exit status: 0 on success; 2 for bad arguments, including a URL the server rejects (scheme,
credentials, database, TLS); 65 when a key is not a lock; 69 when Redis cannot be reached;
77 when its ACL user may not run ferrisson's commands; 3 when `deadlocks` finds one; 1 for
other errors. `run` exits with its command's status, 75 when the lock was not acquired (or
-E's status), 76 when it was lost or its release did not show that it lasted (`ferrisson run --help`).

Settings: besides REDIS_URL, the library's FERRISSON_* variables apply as in
ferrisson::Config::from_env (FERRISSON_PUBLISH_MODE=auto|classic|sharded|both,
FERRISSON_CONNECT_TIMEOUT, FERRISSON_WATCHDOG_TIMEOUT, FERRISSON_RESPONSE_TIMEOUT,
FERRISSON_WHEN_UNAVAILABLE, FERRISSON_SYNCED_WRITES, ...); a flag given on the command line
wins over its variable, and a value a variable cannot take exits 2, as does an unknown
FERRISSON_* variable (FERRISSON_IGNORE_UNKNOWN=true ignores those).

Logging: the library's log events go to stderr (JSON lines with --json): by default its
warnings, but for the lost-lease one, which run reports itself
(RUST_LOG=warn,fred=error,ferrisson::lease_lost=off); RUST_LOG=ferrisson=debug for details,
RUST_LOG=off for none."#;

/// The `ferrisson` command line.
#[derive(Debug, Parser)]
#[command(
    name = "ferrisson",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = EXAMPLES,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Where Redis is.
    #[command(flatten)]
    pub connection: Connection,

    /// Print JSON instead of text (formats in each subcommand's --help).
    #[arg(long, global = true)]
    pub json: bool,

    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Options naming the Redis server, shared by every subcommand.
#[derive(Debug, Args)]
pub struct Connection {
    /// Redis URL, redis://[user:password@]host:port[/db]; rediss:// for TLS; redis-cluster://,
    /// redis-sentinel:// (rediss-cluster://, rediss-sentinel://)
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379",
        value_name = "URL",
        help_heading = "Connection"
    )]
    pub url: String,

    /// Give up connecting after this long [default: FERRISSON_CONNECT_TIMEOUT, else 5s]
    #[arg(
        long,
        global = true,
        value_name = "DUR",
        value_parser = positive_duration,
        help_heading = "Connection"
    )]
    pub connect_timeout: Option<Duration>,
}

impl Connection {
    /// The library configuration for this connection: `Config::from_env` (Redisson's defaults
    /// and the `FERRISSON_*` variables, as every service that reads its settings so has them),
    /// then the URL and the flags given. A variable with a bad value exits 2.
    pub fn config(&self) -> Result<ferrisson::Config, Failure> {
        let mut config = ferrisson::Config::from_env()
            .map_err(|err| Failure::from_lib("the environment's settings", &err, self))?;
        config.url = self.url.clone();
        if let Some(timeout) = self.connect_timeout {
            config.connect_timeout = timeout;
        }
        Ok(config)
    }

    /// The URL with its password masked, for messages.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// `text` with every occurrence of the URL replaced by its redacted form: library errors
    /// quote the URL as given, password included.
    pub fn redact(&self, text: &str) -> String {
        // Without credentials there is nothing to mask (and the redacted form may differ in
        // its normalisation only, `http://h` becoming `http://h/`).
        if !self.url.contains('@') {
            return text.to_owned();
        }
        text.replace(&self.url, &self.redacted_url())
    }
}

/// `scheme://user:***@host...`: the library's masking of a URL's credentials.
pub fn redact_url(url: &str) -> String {
    ferrisson::Config::new(url).redacted_url()
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show whether locks are held, by whom, and for how long; semaphores and latches too
    #[command(after_help = STATUS_HELP)]
    Status(StatusArgs),
    /// Run a command while holding a lock (like flock(1))
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Release a lock whoever holds it, waking its waiters
    #[command(after_help = UNLOCK_HELP)]
    Unlock(UnlockArgs),
    /// Follow a lock (or semaphore, latch) live: acquisitions, re-entries, releases, renewals
    #[command(after_help = WATCH_HELP)]
    Watch(WatchArgs),
    /// List the deadlocks among the waits ferrisson clients record (deadlock detection)
    #[command(after_help = DEADLOCKS_HELP)]
    Deadlocks(DeadlocksArgs),
}

const DEADLOCKS_HELP: &str = r#"Reads the wait-for edges that ferrisson clients with deadlock detection on
(ferrisson::Config::deadlock_detection, FERRISSON_DEADLOCK_DETECTION=record:500ms or detect:1s)
record in Redis (one hash ferrisson_waits:{<client uuid>} per client, found with SCAN on every
master), and the holders of the locks they wait for, and prints every cycle: owners that each
wait for a lock the next one holds, which no lease ends while their watchdogs renew. Each cycle
is printed once, with each owner (<client uuid>:<owner id>), the lock it waits for, how long it
has waited, who holds that lock, and the victim: the youngest wait of a client in detect mode,
which that client fails with Error::Deadlock (in a cycle of clients that only record, the
youngest wait, which nobody fails). Waiters that record nothing (Java Redisson, clients with
detection off) are not seen, so no cycle through them is found.

With --json, prints one JSON array with an object per cycle:
  {"steps":[{"owner":..., "lock":..., "held_by":..., "waited_ms":int, "since_ms":int,
             "wait_id":int, "detects":bool, "victim":bool}]}

Exit status: 0 when no deadlock is found; 3 when at least one is; 1 for errors other than
these; 69 when Redis cannot be reached; 77
when its ACL user may not SCAN or read the edges; 2 for bad arguments or a URL the server
rejects.

Examples:
  ferrisson deadlocks
  ferrisson deadlocks --json"#;

pub(crate) const STATUS_HELP: &str = r#"Reads each NAME with every key Redisson keeps for it, in one atomic step: the lock hash, a
fair lock's queue and deadlines, a fenced lock's token, a read-write lock's per-hold timeout
keys, a semaphore's or latch's count, a permit-expirable semaphore's permits out.

Columns: NAME; STATE (locked or free for locks, present or absent for semaphores and latches,
not-a-lock for a key that is no primitive of the family: a list, a string that is not an
integer, a hash whose fields are not holders, ...); KIND (reentrant, fair with its queue
length, fenced with its token, read-write with its mode, semaphore with its permits,
permit-semaphore with permits available and out, latch with its count, token lock, or the
Redis type of a key that is not a lock); TTL (time left); HOLDERS (field=hold count, where a
field is <client uuid>:<thread or owner id>; a token lock's one holder is its token, bytes that
are not printable shown as \xNN). Spin and non-reentrant locks are shown as reentrant: on
Redis they are the same hash. A string is the token lock (SET NX PX) of redis-py, redsync,
pottery, python-redis-lock, node redlock, rslock or ferrisson's TokenLock only when it has a TTL
and the shape of their tokens (docs/compatibility.md), or with --kind token (a peer's lock taken
without a TTL); any other string is shown as not a lock, with its length.

Below the table, the lists behind a row: a fair lock's queue in order with each waiter's
deadline (stale: passed, removed by the next fair-lock call); a read-write lock's readers with
each hold's timeout-key TTL (gone: that hold no longer keeps the lock); a permit-expirable
semaphore's permits out, soonest expiry first, ids in hex whether stored raw (Redisson >= 3.17)
or as hex strings (3.16); the waiters that ferrisson clients with deadlock detection on
(FERRISSON_DEADLOCK_DETECTION) recorded for the name, oldest first, with how long each has
waited; last, one line naming the locks without recorded waiters (other waiters record
nothing: Java Redisson's, ferrisson's with detection off), or saying that the records could
not be read (a user who may not SCAN: a warning on stderr says why, and the rest is printed all
the same). Deadlines are epoch ms of the clients' clocks, compared with this machine's. At
most 100 entries per list are shown.

A semaphore and a count-down latch are both a string integer: without --kind it is shown as
"semaphore or latch" with its value. A string holding an epoch-ms time (years 2000 to 2100) is
shown as the timestamp lock of the SETNX/GETSET recipe, which ferrisson does not support as it
is unsafe (exit 65, as for a key that is not a lock; --kind semaphore or latch reads it as one). --kind reads every NAME as that primitive; a key that
holds another primitive of the family is refused (exit 2); a missing key agrees with every
kind (a missing semaphore or latch counts 0, as Redisson reads it).

With --json, prints one JSON array with an object per NAME:
  {"name":..., "state":"locked"|"free"|"present"|"absent", "locked":bool,
   "kind":"reentrant"|"fair"|"fenced"|"read_write"|"semaphore"|"permit_semaphore"|
          "latch"|"semaphore_or_latch"|"timestamp_lock"|"token_lock"|"not_a_lock"|"unknown"|null,
   "mode":"read"|"write"|null, "redis_type":"hash"|"string"|...|null, "ttl_ms":int|null,
   "holders":[{"field":..., "count":int,
               "read_holds":[{"hold":int, "exists":bool, "ttl_ms":int|null}]}],
   "queued":int,
   "waiters":[{"field":..., "deadline_ms":int|null, "remaining_ms":int|null, "stale":bool}],
   "token":int|null, "count":int|null, "permits_out":int,
   "permits":[{"id":hex, "id_format":"raw"|"hex"|"unknown", "expires_ms":int|null,
               "remaining_ms":int|null, "expired":bool}],
   "recorded_waiters":[{"owner":..., "waited_ms":int, "since_ms":int, "wait_id":int}]|null}
kind is what the key is, null when it does not exist; state is whether it is held: locked or
free for a lock (and a missing key), present or absent for a semaphore or latch, present for a
key that is not a lock. Kinds and states are snake_case and stable (as the error kinds are).
ttl_ms is null for a free lock and for a key without expiry; read_holds is given for the
readers of a read-write lock only; count is null unless the key is a present semaphore or
latch; expires_ms is null for a permit that never expires; recorded_waiters is null when the
clients' records cannot be read (a line on stderr says why), [] when none are recorded.

Exit status: 0 when every NAME is a primitive of the family (held, free, present or absent);
65 when a key is not (every NAME is still printed, and a line per such key on stderr: key `x`
is a list, not a lock); 2 when a key contradicts --kind, for bad arguments or a URL the server
rejects; 69 when Redis cannot be reached; 77 when its ACL user may not read locks.

Examples:
  ferrisson status orders:42
  ferrisson status --kind semaphore pool:db
  ferrisson status --json orders:42 orders:43 | jq -r '.[] | select(.locked) | .name'"#;

const RUN_HELP: &str = r#"Takes the lock NAME, runs CMD with its arguments, releases the lock and exits with CMD's
status. Without --lease the watchdog renews the lock for as long as CMD runs (lease
--watchdog-timeout, renewed every third of it); with --lease the lock expires after that time,
even if CMD is still running.

The lock is Redisson's (a hash, what Java's getLock takes). With --token it is the single-key
lock of redis-py, redsync, node redlock and rslock instead: NAME set to a token of ours with
SET NX PX, released only while it still holds that token; a wait for it wakes on the key's
keyspace events where the server sends them, else polls.

SIGINT, SIGTERM and SIGHUP sent to ferrisson are forwarded to CMD; ferrisson then waits for CMD
to exit, releases the lock and exits with CMD's status. (Ctrl-C in a terminal also reaches CMD
directly: it shares ferrisson's process group.) A signal that arrives while ferrisson is still
waiting for the lock ends the wait (exit 128+signal) without running CMD.

If the lock is lost while CMD runs (its lease ran out, or someone force-unlocked it), ferrisson
says so on stderr and lets CMD run on: as with Redisson there is nothing safe to do
automatically, since another holder may already be inside. --kill-on-lost sends CMD SIGTERM
instead. Either way ferrisson then exits 76, whatever CMD's status, since CMD's work was not
protected by the lock.

The release after CMD must show that the lock was still held: if it fails, or its outcome is
unknown (its reply was lost, say because Redis restarted), ferrisson reconnects within the
lease's proven end and reads whether the lock still held its hold (then releases it); when that
does not show the hold lasted, it exits 76 too, as for a loss.

With --json, events are printed on stderr, one JSON object per line:
  {"event":"acquired","name":...,"field":...,"waited_ms":int,
   "woken_by":"immediate"|"message"|"ttl"|"backoff"|"keyspace"}
  {"event":"not_acquired","name":...,"waited_ms":int}
  {"event":"interrupted","name":...,"signal":int}
  {"event":"lost","name":...,"exit_status":76}
  {"event":"exited","name":...,"code":int|null,"signal":int|null}
  {"event":"released","name":...}
  {"event":"release_failed","name":...,"may_remain":bool,"error":{"kind":...,"message":...}}
     (the release did not show that the lock lasted; "lost" follows unless it came already)
  {"event":"error","name":...,"error":{"kind":...,"message":...}}  (then exits non-zero)
Log events (RUST_LOG) are JSON lines there too, with "level" and "fields" instead of "event".

Exit status: CMD's status, or 128+N when CMD was killed by signal N; 76 when the lock was lost
while CMD ran, or its release did not show that it lasted (even if CMD succeeded); 75 when the
lock was not acquired within --wait; 128+N when signal N ended the wait; 126 when CMD cannot
be executed, 127 when it is not found; 65 when NAME is not a lock (or, without --token, is a
token lock); 69 when Redis cannot be reached; 77 when its ACL user may not take locks; 2 for
bad arguments or a URL the server rejects.

Examples:
  ferrisson run nightly-report -- ./make-report.sh --full
  ferrisson run --wait 0 cron:cleanup -- ./cleanup.sh   # skip if already running (exit 75)
  ferrisson run --wait 2m --lease 10m deploy -- make deploy
  ferrisson run --token reports:daily -- ./report.sh   # shared with redis-py's Lock
  ferrisson run --kill-on-lost --json orders:42 -- ./process-orders"#;

const UNLOCK_HELP: &str = r#"Deletes the lock whoever holds it and publishes the unlock message, so that waiters
(ferrisson or Redisson) wake up and retry at once. Its holders lose the lock; a ferrisson `run`
holding it reports the loss. --force is required, as a reminder that this breaks someone
else's lock.

Each lock is released as its own kind's forceUnlock does (the kind `status` shows): a
reentrant, spin, non-reentrant or fenced lock announces it on redisson_lock__channel:{NAME}; a
fair lock tells the first waiter of its queue on that waiter's own channel; a read-write lock
is released on the side its mode names and announced on redisson_rwlock:{NAME}. A fair lock
without waiters reads as reentrant, which releases it the same way. Semaphores and count-down
latches have no holder to break: they are left alone (exit 65).

Prints whether each lock was held, and exits 0 either way. Names are unlocked in order; the
first failure stops there. A key that is not a lock (another type, or a hash whose fields are
not holders) is left alone (exit 65). With --json, prints one JSON array of
{"name":..., "released":bool}; on failure instead {"error":{...},"results":[...]}, with the
results of the names before it.

Exit status: 0 when every NAME was unlocked or already free; 65 when a key is not a lock; 69
when Redis cannot be reached; 77 when its ACL user may not unlock; 2 for bad arguments or a
URL the server rejects.

Examples:
  ferrisson unlock --force orders:42"#;

const WATCH_HELP: &str = r#"Reads NAME (any primitive `status` reads) whenever the server tells of a change, and every
--interval, and prints a line per change, with a UTC timestamp: the initial state, then
acquired by FIELD, re-entered / partially released (hold count n), holder changed, released,
force-unlocked, expired, a hold that began and ended between two reads, TTL renewed, waiters
queued, a semaphore's or latch's count, a fenced lock's token, permits out. Runs until
interrupted (Ctrl-C or SIGTERM; exit 0) or until --for elapses.

How it hears of changes (the first line on stderr says which):
- Keyspace events, where the server sends them (notify-keyspace-events with K and A, or with
  K, g, x and h; watch never changes that setting): every write to NAME's key. A force unlock
  (a DEL that no release's decrement preceded) is told from a release, and a hold too short
  for a read still shows as held between two reads.
- Else the channels on which the family announces releases (classic, or sharded under
  FERRISSON_PUBLISH_MODE=sharded or both, or in a cluster): every release and force unlock that
  publishes. A force unlock then reads as a release (they send the same message), and an
  acquisition between two reads is seen only by its release. Note that a subscriber counts as a
  listener: a ferrisson client releasing NAME gives way to it for a moment after a release, as
  to another client's waiter. A spin lock publishes nothing.
- Without a subscription (the ACL user may not subscribe), reads every --interval only.

With --json, prints one JSON object per line on stdout, each with "ts" (RFC 3339, UTC), "name"
and "event": state, acquired, reentered, partially_released, holder_changed, released,
force_unlocked, expired, held_between_reads (with "locked": held again at the second read),
renewed, kind_changed, queued, count_changed (a semaphore's or latch's value, with
"count" and "previous"), token_changed (a fenced lock's "token"), permits_out, unavailable or
reconnected. --kind reads NAME as in `status --kind`. A key that is no primitive of the family
is shown as such (state/kind "not_a_lock") and watched on.

Exit status: 0 when interrupted or after --for; 69 when Redis cannot be reached at the start
(later outages are shown and waited out); 77 when its ACL user may not read locks; 2 when
NAME contradicts --kind, for bad arguments or a URL the server rejects.

Examples:
  ferrisson watch orders:42
  ferrisson watch --interval 1s --json orders:42 >> orders-lock.log
  ferrisson watch --kind latch jobs:done"#;

impl Command {
    /// The lock name of a `run`, whose `--json` failures go to its event stream on stderr.
    pub fn run_name(&self) -> Option<&str> {
        match self {
            Command::Run(args) => Some(&args.name),
            _ => None,
        }
    }
}

/// `ferrisson status`
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Read every NAME as this primitive (a semaphore and a latch look alike on Redis)
    /// [default: inferred from what Redis holds]
    #[arg(long, value_name = "KIND")]
    pub kind: Option<Kind>,

    /// Names (Redis keys) of locks, semaphores or latches
    #[arg(required = true, value_name = "NAME", value_parser = lock_name)]
    pub names: Vec<String>,
}

/// `ferrisson deadlocks` takes no arguments of its own.
#[derive(Debug, Args)]
pub struct DeadlocksArgs {}

/// `--kind`: the primitive a name is, when Redis alone cannot tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Reentrant, spin or non-reentrant lock (one hash of holders)
    #[value(alias = "spin", alias = "non-reentrant", alias = "reentrant")]
    Lock,
    /// Fair lock (holders plus a waiter queue)
    Fair,
    /// Fenced lock (holders plus a token counter)
    Fenced,
    /// Read-write lock
    ReadWrite,
    /// Semaphore (a string integer of available permits)
    Semaphore,
    /// Permit-expirable semaphore (available permits plus permits out)
    PermitSemaphore,
    /// Count-down latch (a string integer count)
    Latch,
    /// Token lock: the SET NX PX lock of redis-py, redsync, node redlock, rslock
    Token,
}

impl Kind {
    /// The name given on the command line (`read-write`).
    pub fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .map(|value| value.get_name().to_owned())
            .unwrap_or_default()
    }

    /// The library's name for this kind.
    pub fn primitive(self) -> ferrisson::inspect::Primitive {
        use ferrisson::inspect::Primitive;
        match self {
            Kind::Lock => Primitive::Lock,
            Kind::Fair => Primitive::FairLock,
            Kind::Fenced => Primitive::FencedLock,
            Kind::ReadWrite => Primitive::ReadWriteLock,
            Kind::Semaphore => Primitive::Semaphore,
            Kind::PermitSemaphore => Primitive::PermitExpirableSemaphore,
            Kind::Latch => Primitive::CountDownLatch,
            Kind::Token => Primitive::TokenLock,
        }
    }
}

/// `ferrisson run`
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Lock name (Redis key)
    #[arg(value_name = "NAME", value_parser = lock_name)]
    pub name: String,

    /// Give up after this long with exit 75 (or -E's code); 0 tries once; plain seconds as
    /// flock's -w (10, 2.5) [default: wait forever]
    #[arg(short = 'w', long, visible_alias = "timeout", value_name = "DUR", value_parser = duration)]
    pub wait: Option<Duration>,

    /// Fail at once if the lock is held: --wait 0 (flock's -n)
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub nonblock: bool,

    /// The exit status when the lock is not acquired (flock's -E) [default: 75]
    #[arg(short = 'E', long, value_name = "CODE")]
    pub conflict_exit_code: Option<u8>,

    /// Take the lock shared, as flock's -s: Redisson's read lock, held beside other shared
    /// holders and excluding every exclusive one (a write lock of the same read-write lock)
    #[arg(short = 's', long, conflicts_with = "token")]
    pub shared: bool,

    /// Take the lock exclusive, the default (flock's -x)
    #[arg(short = 'x', long, conflicts_with = "shared")]
    pub exclusive: bool,

    /// Run this command line with `sh -c` instead of CMD (flock's -c)
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STRING",
        conflicts_with = "command"
    )]
    pub shell_command: Option<OsString>,

    /// Fixed lease, not renewed [default: renewed by the watchdog]
    #[arg(long, value_name = "DUR", value_parser = lease)]
    pub lease: Option<Duration>,

    /// Lease the watchdog renews every third of [default: FERRISSON_WATCHDOG_TIMEOUT, else 30s]
    #[arg(long, value_name = "DUR", value_parser = watchdog_timeout, conflicts_with = "lease")]
    pub watchdog_timeout: Option<Duration>,

    /// Send CMD SIGTERM if the lock is lost while it runs
    #[arg(long)]
    pub kill_on_lost: bool,

    /// Take the token lock (SET NAME <token> NX PX) of redis-py, redsync, node redlock and
    /// rslock instead of Redisson's lock
    #[arg(long)]
    pub token: bool,

    /// Report acquisition and release on stderr
    #[arg(short, long)]
    pub verbose: bool,

    /// The command to run, and its arguments (put them after `--`)
    #[arg(
        required_unless_present = "shell_command",
        value_name = "CMD",
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub command: Vec<OsString>,
}

/// `ferrisson unlock`
#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// Required: release the lock even though another process holds it
    #[arg(long, required = true)]
    pub force: bool,

    /// Read each NAME as this primitive, as `status --kind`. A string is released as a token
    /// lock only when it is positively one: a TTL and a peer's token shape (docs/cli.md), or
    /// `--kind token` (a peer's lock without a TTL, or a token of another shape)
    #[arg(long, value_name = "KIND")]
    pub kind: Option<Kind>,

    /// Release a token lock only while it holds TOKEN (as `status` shows it: `\xNN` for a
    /// byte that is not printable, `\\` for a backslash); implies --kind token
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,

    /// Lock names (Redis keys)
    #[arg(required = true, value_name = "NAME", value_parser = lock_name)]
    pub names: Vec<String>,
}

/// `ferrisson watch`
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Name (Redis key) of a lock, semaphore or latch
    #[arg(value_name = "NAME", value_parser = lock_name)]
    pub name: String,

    /// Read NAME as this primitive, as `status --kind` [default: inferred]
    #[arg(long, value_name = "KIND")]
    pub kind: Option<Kind>,

    /// How often to read the lock, besides the reads at each change heard
    #[arg(long, value_name = "DUR", default_value = "100ms", value_parser = positive_duration)]
    pub interval: Duration,

    /// Stop after this long [default: until interrupted]
    #[arg(long = "for", value_name = "DUR", value_parser = duration)]
    pub duration: Option<Duration>,
}

/// A lock name: any non-empty string.
fn lock_name(value: &str) -> Result<String, String> {
    if value.is_empty() {
        Err("a lock name must not be empty".to_owned())
    } else {
        Ok(value.to_owned())
    }
}

/// A humane duration: `500ms`, `30s`, `2m`, `1h 30m`, or plain seconds as flock(1) and
/// timeout(1) take them (`10`, `2.5`, `0`).
pub fn duration(value: &str) -> Result<Duration, String> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err("expected a duration such as 500ms, 30s or 2m".to_owned());
    }
    if trimmed.starts_with(|c: char| c.is_ascii_digit())
        && trimmed.chars().all(|c| c.is_ascii_digit() || c == '.')
    {
        return trimmed
            .parse::<f64>()
            .ok()
            .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
            .ok_or_else(|| format!("`{trimmed}` is not a number of seconds"));
    }
    humantime::parse_duration(trimmed)
        .map_err(|err| format!("not a duration ({err}); write e.g. 500ms, 30s, 2m or 1h 30m"))
}

/// A humane duration that must not be zero.
fn positive_duration(value: &str) -> Result<Duration, String> {
    let parsed = duration(value)?;
    if parsed.is_zero() {
        Err("must be longer than zero".to_owned())
    } else {
        Ok(parsed)
    }
}

/// A lease: Redis counts TTLs in whole milliseconds.
fn lease(value: &str) -> Result<Duration, String> {
    at_least(
        value,
        Duration::from_millis(1),
        "Redis counts leases in milliseconds",
    )
}

/// The watchdog's lease: the library renews it every third, so at least 3 ms.
fn watchdog_timeout(value: &str) -> Result<Duration, String> {
    at_least(
        value,
        Duration::from_millis(3),
        "the watchdog renews the lease every third of it",
    )
}

fn at_least(value: &str, min: Duration, why: &str) -> Result<Duration, String> {
    let parsed = duration(value)?;
    if parsed < min {
        Err(format!("must be at least {}ms: {why}", min.as_millis()))
    } else {
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_are_humane() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert_eq!(duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(duration("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(duration(" 10 "), Ok(Duration::from_secs(10)));
        assert!(duration("1.2.3")
            .unwrap_err()
            .contains("not a number of seconds"));
        assert!(duration("5parsecs").unwrap_err().contains("not a duration"));
        assert!(positive_duration("0s").is_err());
        assert_eq!(lease("1ms"), Ok(Duration::from_millis(1)));
        assert!(lease("999us").unwrap_err().contains("at least 1ms"));
        assert_eq!(watchdog_timeout("3ms"), Ok(Duration::from_millis(3)));
        assert!(watchdog_timeout("2ms")
            .unwrap_err()
            .contains("at least 3ms"));
    }

    #[test]
    fn passwords_are_masked_in_urls() {
        assert_eq!(
            redact_url("rediss://app:s3cret@redis:6380/0"),
            "rediss://app:***@redis:6380/0"
        );
        assert_eq!(redact_url("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact_url("redis://pw@h"), "redis://***@h");
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact_url("nonsense"), "nonsense");
    }
}
