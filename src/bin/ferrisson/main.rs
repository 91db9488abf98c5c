//! `ferrisson`: inspect and use Redisson-compatible Redis locks from the shell.
//!
//! Argument parsing and output only: every operation goes through the `ferrisson` library.

mod args;
mod deadlocks;
mod error;
mod listen;
mod output;
mod run;
mod status;
mod unlock;
mod watch;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use args::{Cli, Command, Connection};
pub use error::Failure;

/// Exit statuses (sysexits.h where one fits).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Any other failure (a Redis error, ...).
    pub const FAILURE: u8 = 1;
    /// `deadlocks`: a deadlock was found (not a failure of the tool: told apart from 1).
    pub const DEADLOCK: u8 = 3;
    /// Bad arguments (clap's usage errors use it too), including a URL the server rejects.
    pub const USAGE: u8 = 2;
    /// EX_DATAERR: a named key exists but is not a lock (a string, a list, ...).
    pub const NOT_A_LOCK: u8 = 65;
    /// EX_UNAVAILABLE: Redis cannot be reached.
    pub const UNAVAILABLE: u8 = 69;
    /// EX_TEMPFAIL: the lock was not acquired within `--wait`.
    pub const TEMPFAIL: u8 = 75;
    /// `run`: the lock was lost while CMD ran, so CMD's work was not protected. Next to 75,
    /// and rare as a command's own status.
    pub const LOST: u8 = 76;
    /// EX_NOPERM: Redis refused a command for the ACL user of the URL.
    pub const NOPERM: u8 = 77;
    /// CMD was found but could not be executed (as in the shell).
    pub const CANNOT_EXECUTE: u8 = 126;
    /// CMD was not found (as in the shell).
    pub const NOT_FOUND: u8 = 127;
}

/// What a subcommand returns: its exit status, or a failure to report.
pub type Outcome = Result<u8, Failure>;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return error::usage(err),
    };
    init_logging(cli.json);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            let failure = Failure::new(
                exit::FAILURE,
                "internal",
                format!("cannot start the async runtime: {err}"),
            );
            return failure.report(cli.json, cli.command.run_name());
        }
    };
    let (json, run_name) = (cli.json, cli.command.run_name().map(str::to_owned));
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(json, run_name.as_deref()),
    }
}

/// Logs (the library's `tracing` events) go to stderr, filtered by `RUST_LOG`; by default
/// warnings only, which include renewal failures and lost leases. fred's own warnings are left
/// out by default: an outage makes it warn per connection, in `Debug` text, about what the
/// tool reports itself. With `--json` they are JSON lines, so that `run --json`'s event stream
/// on stderr stays JSON.
/// A RUST_LOG that does not parse is ignored with a warning: a line of text, or with `--json` a
/// log event (a JSON line, so that stderr stays JSON).
fn init_logging(json: bool) {
    // The lost-lease warning is `run`'s own line (with what it does about it): not twice.
    const DEFAULT: &str = "warn,fred=error,ferrisson::lease_lost=off";
    let (filter, ignored) = match std::env::var("RUST_LOG") {
        Err(_) => (EnvFilter::new(DEFAULT), None),
        Ok(spec) => match EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(err) => (EnvFilter::new(DEFAULT), Some((spec, err))),
        },
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // Installing fails only if a subscriber is already installed: there is none.
    let _ = if json {
        logs.json().try_init()
    } else {
        logs.with_ansi(std::io::stderr().is_terminal()).try_init()
    };
    if let Some((spec, err)) = ignored {
        if json {
            tracing::warn!(rust_log = %spec, error = %err, "ignoring RUST_LOG; using the default, {DEFAULT}");
        } else {
            output::stderr_line(&format!(
                "ferrisson: warning: ignoring RUST_LOG `{spec}` ({err}); using the default, {DEFAULT}"
            ));
        }
    }
}

async fn dispatch(cli: Cli) -> Outcome {
    let conn = cli.connection;
    let json = cli.json;
    match cli.command {
        Command::Status(args) => status::status(&conn, json, args).await,
        Command::Run(args) => run::run(&conn, json, args).await,
        Command::Unlock(args) => unlock::unlock(&conn, json, args).await,
        Command::Watch(args) => watch::watch(&conn, json, args).await,
        Command::Deadlocks(args) => deadlocks::deadlocks(&conn, json, args).await,
    }
}

/// Connects to Redis with `config`, mapping failures to exit statuses: 69 when the server
/// cannot be reached, 2 for a URL it rejects (scheme, credentials, database, TLS), 77 for ACL.
pub async fn connect(
    conn: &Connection,
    config: ferrisson::Config,
) -> Result<ferrisson::Client, Failure> {
    ferrisson::Client::new(config)
        .await
        .map_err(|err| Failure::connect(&err, conn))
}
