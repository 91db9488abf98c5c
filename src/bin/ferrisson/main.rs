//! `ferrisson`: inspect and use Redisson-compatible Redis locks from the shell.
//!
//! Argument parsing and output only: every operation goes through the `ferrisson` library.

mod args;
mod output;
mod run;
mod status;
mod unlock;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command, Connection};

/// Exit statuses (sysexits.h where one fits).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Any other failure (a Redis error, a key that is not a lock, ...).
    pub const FAILURE: u8 = 1;
    /// Bad arguments (clap's usage errors use it too).
    pub const USAGE: u8 = 2;
    /// EX_UNAVAILABLE: Redis cannot be reached.
    pub const UNAVAILABLE: u8 = 69;
    /// EX_NOPERM: Redis refused a command for the ACL user of the URL.
    pub const NOPERM: u8 = 77;
    /// EX_TEMPFAIL: the lock was not acquired within `--wait`.
    pub const TEMPFAIL: u8 = 75;
    /// CMD was found but could not be executed (as in the shell).
    pub const CANNOT_EXECUTE: u8 = 126;
    /// CMD was not found (as in the shell).
    pub const NOT_FOUND: u8 = 127;
}

/// A failure that ends the program: the message for stderr and the exit status.
#[derive(Debug)]
pub struct Failure {
    /// Exit status.
    pub code: u8,
    /// What went wrong, one line, without the `error: ` prefix.
    pub message: String,
}

impl Failure {
    /// A failure with `code` and `message`.
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// Classifies a library error: unreachable/slow Redis → 69, rejected arguments → 2, an ACL
    /// refusal → 77, anything else → 1. `context` says what was being done ("cannot read `x`").
    pub fn from_lib(context: &str, err: &ferrisson::Error, conn: &Connection) -> Failure {
        use ferrisson::Error;
        let code = match err {
            Error::Unavailable(_) | Error::Timeout(_) => exit::UNAVAILABLE,
            Error::InvalidArgument(_) => exit::USAGE,
            Error::PermissionDenied(_) => exit::NOPERM,
            _ => exit::FAILURE,
        };
        Failure::new(
            code,
            format!("{context}: {}", conn.redact(&err.to_string())),
        )
    }
}

/// What a subcommand returns: its exit status, or a failure to report.
pub type Outcome = Result<u8, Failure>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("ferrisson: error: cannot start the async runtime: {err}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let outcome = runtime.block_on(dispatch(cli));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            output::stderr_line(&format!("ferrisson: error: {}", failure.message));
            ExitCode::from(failure.code)
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
    }
}

/// Connects to Redis with `config`, mapping failures to exit statuses: 69 when the server
/// cannot be reached, 2 for a malformed URL or rejected credentials.
pub async fn connect(
    conn: &Connection,
    config: ferrisson::Config,
) -> Result<ferrisson::Client, Failure> {
    ferrisson::Client::new(config).await.map_err(|err| {
        Failure::from_lib(
            &format!("cannot connect to Redis at {}", conn.redacted_url()),
            &err,
            conn,
        )
    })
}
