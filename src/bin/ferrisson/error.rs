//! Failures: one line for people (`ferrisson: error: ...`), one JSON object with `--json`, and
//! an exit status.

use std::ffi::OsString;
use std::process::ExitCode;

use serde::Serialize;

use crate::args::Connection;
use crate::exit;
use crate::output::{self, humane};

/// A failure that ends the program: exit status, stable kind and message.
#[derive(Debug)]
pub struct Failure {
    /// Exit status.
    pub code: u8,
    /// Stable, machine-readable kind: the library error's variant in snake case
    /// (`unavailable`, `wrong_type`, ...) or one of the tool's own (`command_not_found`, ...).
    pub kind: &'static str,
    /// What went wrong, one line, without the `ferrisson: error: ` prefix.
    pub message: String,
    /// What was done before the failure, for `--json` (`unlock`'s results so far).
    pub results: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct ErrorJson<'a> {
    kind: &'a str,
    message: &'a str,
}

/// `{"error":{...}}` on stdout (status, unlock, watch).
#[derive(Serialize)]
struct ErrorLine<'a> {
    error: ErrorJson<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    results: Option<&'a serde_json::Value>,
}

/// `{"event":"error",...}` in `run --json`'s event stream on stderr.
#[derive(Serialize)]
struct ErrorEvent<'a> {
    event: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    error: ErrorJson<'a>,
}

impl Failure {
    /// A failure with `code`, `kind` and `message`.
    pub fn new(code: u8, kind: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            code,
            kind,
            message: message.into(),
            results: None,
        }
    }

    /// A library error while `context` ("cannot read `x`"): unreachable or slow Redis → 69,
    /// rejected arguments → 2, an ACL refusal → 77, a key that is not a lock → 65, anything
    /// else → 1.
    pub fn from_lib(context: &str, err: &ferrisson::Error, conn: &Connection) -> Failure {
        let (code, kind) = classify(err);
        Failure::new(code, kind, format!("{context}: {}", describe(err, conn)))
    }

    /// A failure of `Client::new`. A URL the server rejects (scheme, credentials, database,
    /// TLS) is told as the library words it, since it names the URL; the rest as "cannot
    /// connect".
    pub fn connect(err: &ferrisson::Error, conn: &Connection) -> Failure {
        if let ferrisson::Error::InvalidArgument(message) = err {
            let message = conn.redact(message);
            let url = conn.redacted_url();
            let text = match message.strip_prefix(&format!("cannot connect to {url}: ")) {
                Some(cause) => format!("cannot connect to Redis at {url}: {}", readable(cause)),
                None => message,
            };
            return Failure::new(exit::USAGE, "invalid_argument", text);
        }
        Failure::from_lib(
            &format!("cannot connect to Redis at {}", conn.redacted_url()),
            err,
            conn,
        )
    }

    /// The signal handlers could not be installed.
    pub fn signals(err: std::io::Error) -> Failure {
        Failure::new(
            exit::FAILURE,
            "internal",
            format!("cannot handle signals: {err}"),
        )
    }

    /// The key `name` exists but holds a `redis_type` value (or a hash that is not a lock).
    pub fn not_a_lock(name: &str, redis_type: &str, consequence: &str) -> Failure {
        Failure::new(
            exit::NOT_A_LOCK,
            "wrong_type",
            format!("{}: {consequence}", not_a_lock(name, redis_type)),
        )
    }

    /// Prints the failure and returns its exit status. Without `--json`: the line on stderr.
    /// With `--json`: the JSON object on stdout and the line on stderr, or for `run` (whose
    /// name is `run_name`) only an `error` event in its event stream on stderr.
    pub fn report(&self, json: bool, run_name: Option<&str>) -> ExitCode {
        let error = ErrorJson {
            kind: self.kind,
            message: &self.message,
        };
        match (json, run_name) {
            (true, Some(name)) => {
                let name = Some(name).filter(|name| !name.is_empty());
                output::stderr_line(&output::json(&ErrorEvent {
                    event: "error",
                    name,
                    error,
                }));
            }
            (true, None) => {
                output::stdout_line(&output::json(&ErrorLine {
                    error,
                    results: self.results.as_ref(),
                }));
                self.print();
            }
            (false, _) => self.print(),
        }
        ExitCode::from(self.code)
    }

    fn print(&self) {
        output::stderr_line(&format!("ferrisson: error: {}", self.message));
    }
}

/// "key `x` is a string, not a lock"
pub fn not_a_lock(name: &str, redis_type: &str) -> String {
    let article = if redis_type.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    if redis_type == "hash" {
        format!(
            "key `{name}` is a hash but not a lock (its fields are not holders with hold counts)"
        )
    } else {
        format!("key `{name}` is {article} {redis_type}, not a lock")
    }
}

/// The stable kind of a library error (`unavailable`, `release_unknown`, ...).
pub fn kind(err: &ferrisson::Error) -> &'static str {
    classify(err).1
}

/// Exit status and kind of a library error.
fn classify(err: &ferrisson::Error) -> (u8, &'static str) {
    use ferrisson::Error;
    match err {
        Error::Unavailable(_) => (exit::UNAVAILABLE, "unavailable"),
        Error::Timeout(_) => (exit::UNAVAILABLE, "timeout"),
        Error::InvalidArgument(_) => (exit::USAGE, "invalid_argument"),
        Error::PermissionDenied(_) => (exit::NOPERM, "permission_denied"),
        Error::WrongType { .. } => (exit::NOT_A_LOCK, "wrong_type"),
        Error::NotHeld { .. } => (exit::FAILURE, "not_held"),
        Error::LeaseLost { .. } => (exit::LOST, "lease_lost"),
        Error::ReleaseUnknown { .. } => (exit::LOST, "release_unknown"),
        Error::Redis(_) => (exit::FAILURE, "redis"),
        Error::NotReplicated { .. } => (exit::FAILURE, "not_replicated"),
        Error::Shutdown => (exit::FAILURE, "shutdown"),
        Error::RuntimeGone => (exit::FAILURE, "runtime_gone"),
        _ => (exit::FAILURE, "other"),
    }
}

/// The cause in words, without fred's kind labels or Rust `Debug` text, with the password
/// masked and the URL not repeated (the context names it).
pub fn describe(err: &ferrisson::Error, conn: &Connection) -> String {
    use ferrisson::Error;
    let text = match err {
        Error::Unavailable(e) => readable(e.details()),
        Error::Timeout(after) => format!("Redis did not answer within {}", humane(*after)),
        Error::Redis(e) => format!("Redis replied: {}", readable(e.details())),
        Error::PermissionDenied(e) => format!(
            "the URL's user is denied by the server's ACL ({}); grant it the least-privilege \
             rule of ferrisson's docs/reliability.md",
            readable(e.details())
        ),
        Error::InvalidArgument(message) => readable(message),
        other => other.to_string(),
    };
    without_url(&conn.redact(&text), &conn.redacted_url())
}

/// `text` without the library's own "cannot connect to URL: " and "... within T" framing.
fn without_url(text: &str, url: &str) -> String {
    if let Some(rest) = text.strip_prefix(&format!("cannot connect to {url}: ")) {
        return rest.to_owned();
    }
    if let Some(rest) = text.strip_prefix(&format!("could not connect to {url} within ")) {
        return format!("no connection within {rest}");
    }
    text.to_owned()
}

/// fred's error details made readable: an I/O error's `Debug` text
/// (`Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }`) becomes its
/// message (`connection refused`); Redis's refusals of credentials get a hint.
fn readable(details: &str) -> String {
    let details = details.trim();
    let io = if let Some((_, rest)) = details.split_once("message: \"") {
        rest.split('"').next()
    } else if let Some((_, rest)) = details.split_once("Custom { kind: ") {
        rest.split_once("error: ")
            .map(|(_, error)| error.trim_end_matches(" }").trim_matches('"'))
    } else {
        None
    };
    if let Some(io) = io.filter(|io| !io.is_empty()) {
        let mut chars = io.chars();
        return chars
            .next()
            .map(|first| first.to_lowercase().chain(chars).collect())
            .unwrap_or_default();
    }
    if details.starts_with("WRONGPASS") {
        return format!("the server refused the URL's credentials ({details})");
    }
    if details.starts_with("NOAUTH") {
        return format!(
            "the server requires a password: put it in the URL, \
             redis://[user]:password@host ({details})"
        );
    }
    details.to_owned()
}

/// Reports a command-line error found by clap (exit 2; `--help` and `--version` exit 0), and
/// with `--json` also as a JSON error object.
pub fn usage(err: clap::Error) -> ExitCode {
    let code = u8::try_from(err.exit_code()).unwrap_or(exit::USAGE);
    let (json, is_run) = json_and_run(std::env::args_os());
    // `run --json`'s stderr is its event stream: only the JSON object goes there.
    if !(err.use_stderr() && json && is_run) {
        let _ = err.print();
    }
    if !err.use_stderr() {
        return ExitCode::from(code); // help or version, printed on stdout
    }
    if json {
        let rendered = err.render().to_string();
        let first = rendered.lines().next().unwrap_or_default();
        let message = first.strip_prefix("error: ").unwrap_or(first);
        let failure = Failure::new(code, "invalid_argument", message);
        let error = ErrorJson {
            kind: failure.kind,
            message: &failure.message,
        };
        if is_run {
            output::stderr_line(&output::json(&ErrorEvent {
                event: "error",
                name: None,
                error,
            }));
        } else {
            output::stdout_line(&output::json(&ErrorLine {
                error,
                results: None,
            }));
        }
    }
    ExitCode::from(code)
}

/// Whether the command line asks for `--json`, and whether its subcommand is `run`, read
/// without clap (which just refused it): options before `--`, the first word that is not an
/// option or the value of `--url`/`--connect-timeout` is the subcommand.
fn json_and_run(args: impl Iterator<Item = OsString>) -> (bool, bool) {
    let (mut json, mut subcommand, mut skip_value) = (false, None, false);
    for arg in args.skip(1) {
        let Some(arg) = arg.to_str() else { continue };
        if arg == "--" {
            break;
        }
        if std::mem::take(&mut skip_value) {
            continue;
        }
        match arg {
            "--json" => json = true,
            "--url" | "--connect-timeout" if subcommand.is_none() => skip_value = true,
            _ if arg.starts_with('-') => {}
            _ => {
                subcommand.get_or_insert_with(|| arg.to_owned());
            }
        }
    }
    (json, subcommand.as_deref() == Some("run"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_read_as_their_message() {
        assert_eq!(
            readable(r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#),
            "connection refused"
        );
        assert_eq!(
            readable(r#"Custom { kind: InvalidData, error: "received corrupt message" }"#),
            "received corrupt message"
        );
        assert_eq!(readable("ERR something"), "ERR something");
    }

    #[test]
    fn the_url_is_not_repeated() {
        let url = "redis://h:1";
        assert_eq!(
            without_url("cannot connect to redis://h:1: connection refused", url),
            "connection refused"
        );
        assert_eq!(
            without_url("could not connect to redis://h:1 within 2s", url),
            "no connection within 2s"
        );
    }

    #[test]
    fn json_and_run_are_found_without_clap() {
        let args = |line: &str| {
            json_and_run(
                std::iter::once(OsString::from("ferrisson"))
                    .chain(line.split(' ').map(OsString::from)),
            )
        };
        assert_eq!(args("--url run --json status x"), (true, false));
        assert_eq!(args("run --json --lease 1ns x -- status"), (true, true));
        assert_eq!(args("status run"), (false, false));
        assert_eq!(args("run x -- --json"), (false, true));
    }

    #[test]
    fn articles_fit_the_type() {
        assert_eq!(not_a_lock("x", "string"), "key `x` is a string, not a lock");
        assert_eq!(not_a_lock("x", "list"), "key `x` is a list, not a lock");
        assert!(not_a_lock("x", "hash").contains("a hash but not a lock"));
    }
}
