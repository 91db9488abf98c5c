//! `ferrisson run NAME -- CMD [ARGS...]`: flock(1) on a Redisson lock.

use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use ferrisson::{Attempt, Guard, Handle, Owner, Protocol};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::args::{Connection, RunArgs};
use crate::output::{self, humane, millis};
use crate::{connect, exit, Failure, Outcome};

/// Events printed on stderr with `--json`.
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Event<'a> {
    Acquired {
        name: &'a str,
        field: &'a str,
        waited_ms: u64,
        woken_by: &'static str,
    },
    NotAcquired {
        name: &'a str,
        waited_ms: u64,
    },
    Interrupted {
        name: &'a str,
        signal: i32,
    },
    Lost {
        name: &'a str,
        /// ferrisson's exit status, whatever CMD's: its work was not protected.
        exit_status: u8,
    },
    Exited {
        name: &'a str,
        code: Option<i32>,
        signal: Option<i32>,
    },
    Released {
        name: &'a str,
    },
    /// The release did not show that the lock lasted until CMD ended: it failed, or its
    /// outcome stayed unknown. A `lost` event follows (unless one came already).
    ReleaseFailed {
        name: &'a str,
        /// Whether the lock may still be held (by this run's hold) until its lease runs out.
        may_remain: bool,
        error: ErrorJson<'a>,
    },
}

/// An error in an event.
#[derive(Serialize)]
struct ErrorJson<'a> {
    kind: &'static str,
    message: &'a str,
}

/// Prints events as JSON lines or as `ferrisson: ...` messages on stderr.
struct Reporter<'a> {
    name: &'a str,
    conn: &'a Connection,
    json: bool,
    verbose: bool,
}

impl Reporter<'_> {
    fn json(&self, event: &Event<'_>) {
        output::stderr_line(&output::json(event));
    }

    fn say(&self, message: &str) {
        output::stderr_line(&format!("ferrisson: {message}"));
    }

    fn acquired<P: Protocol>(&self, guard: &Guard<P>) {
        let acquisition = guard.acquisition();
        if self.json {
            self.json(&Event::Acquired {
                name: self.name,
                field: guard.holder_field(),
                waited_ms: millis(acquisition.waited),
                woken_by: output::woken_by(acquisition.woken_by),
            });
        } else if self.verbose {
            let how = match acquisition.woken_by {
                ferrisson::WokenBy::Immediate => "at once".to_owned(),
                ferrisson::WokenBy::Message => format!(
                    "after {}, woken by the holder's unlock message",
                    humane(acquisition.waited)
                ),
                ferrisson::WokenBy::Ttl => format!(
                    "after {}, when the holder's lease ran out",
                    humane(acquisition.waited)
                ),
                ferrisson::WokenBy::BackOff => format!(
                    "after {}, retrying after a back-off pause",
                    humane(acquisition.waited)
                ),
                ferrisson::WokenBy::Keyspace => format!(
                    "after {}, woken by the key's deletion or expiry event",
                    humane(acquisition.waited)
                ),
                _ => format!("after {}", humane(acquisition.waited)),
            };
            self.say(&format!(
                "acquired `{}` {how} (holder field {})",
                self.name,
                guard.holder_field()
            ));
        }
    }

    fn not_acquired(&self, wait: Duration, waited: Duration, holders: Option<String>) {
        if self.json {
            self.json(&Event::NotAcquired {
                name: self.name,
                waited_ms: millis(waited),
            });
        } else {
            let by = holders.map(|h| format!(" by {h}")).unwrap_or_default();
            let within = if wait.is_zero() {
                "(--wait 0 tries once)".to_owned()
            } else {
                format!("within --wait {}", humane(wait))
            };
            self.say(&format!(
                "error: `{}` is locked{by}; not acquired {within}",
                self.name
            ));
        }
    }

    fn interrupted(&self, signal: Signal) {
        if self.json {
            self.json(&Event::Interrupted {
                name: self.name,
                signal: signal as i32,
            });
        } else {
            self.say(&format!(
                "{} while waiting for `{}`; not running the command",
                signal.as_str(),
                self.name
            ));
        }
    }

    fn lost(&self, when: Lost) {
        if self.json {
            self.json(&Event::Lost {
                name: self.name,
                exit_status: exit::LOST,
            });
            return;
        }
        let then = match when {
            Lost::WhileRunning { kill: true } => "sending the command SIGTERM (--kill-on-lost)",
            Lost::WhileRunning { kill: false } => "the command keeps running without it",
            Lost::AtRelease => "the command's work was not protected",
        };
        self.say(&format!(
            "warning: lost the lock `{}` (its lease ran out or it was force-unlocked); {then}; \
             exit status {}",
            self.name,
            exit::LOST
        ));
    }

    fn forwarding(&self, signal: Signal, pid: Pid) {
        if self.verbose && !self.json {
            self.say(&format!(
                "forwarding {} to the command (pid {pid})",
                signal.as_str()
            ));
        }
    }

    fn exited(&self, status: ExitStatus) {
        if self.json {
            self.json(&Event::Exited {
                name: self.name,
                code: status.code(),
                signal: status.signal(),
            });
        }
    }

    /// The release did not show that the lock lasted until CMD ended (`err`, not
    /// `LeaseLost`): the lock counts as lost. `lost_reported`: whether the loss was told already.
    fn release_failed(&self, err: &ferrisson::Error, lost_reported: bool) {
        use ferrisson::Error;
        let may_remain = match err {
            Error::ReleaseUnknown { may_remain, .. } => *may_remain,
            // The key is no lock of ours any more.
            Error::WrongType { .. } => false,
            // The release did not run (the server refused it, or the client is gone).
            _ => true,
        };
        let describe = |err: &Error| crate::error::describe(err, self.conn);
        let message = match err {
            Error::ReleaseUnknown { cause, .. } => {
                let cause = cause.as_deref().map_or_else(
                    || "left to the settling of an earlier call of unknown outcome".to_owned(),
                    describe,
                );
                let then = if may_remain {
                    "Redis was not reached again before the lease end: the lock may stay held \
                     until its lease runs out"
                } else {
                    "the lock was no longer held when Redis was reached again"
                };
                format!(
                    "the release of `{}` has an unknown outcome ({cause}), and {then}",
                    self.name
                )
            }
            err => format!(
                "could not release `{}`: {}{}",
                self.name,
                describe(err),
                if may_remain {
                    "; it stays held until its lease runs out"
                } else {
                    ""
                }
            ),
        };
        if self.json {
            self.json(&Event::ReleaseFailed {
                name: self.name,
                may_remain,
                error: ErrorJson {
                    kind: crate::error::kind(err),
                    message: &message,
                },
            });
            if !lost_reported {
                self.json(&Event::Lost {
                    name: self.name,
                    exit_status: exit::LOST,
                });
            }
            return;
        }
        let status = if lost_reported {
            String::new()
        } else {
            format!("; exit status {}", exit::LOST)
        };
        self.say(&format!(
            "warning: {message}; it cannot be shown that the lock was held until the command \
             ended, so the command's work was not protected{status}"
        ));
    }

    fn released(&self) {
        if self.json {
            self.json(&Event::Released { name: self.name });
        } else if self.verbose {
            self.say(&format!("released `{}`", self.name));
        }
    }
}

/// When the loss of the lock was found.
#[derive(Clone, Copy)]
enum Lost {
    /// While the command ran; `kill`: `--kill-on-lost`.
    WhileRunning { kill: bool },
    /// When releasing it after the command ended.
    AtRelease,
}

/// SIGINT, SIGTERM and SIGHUP, as one stream. Installing it replaces their default action
/// (terminate), so every path from here on must end the program itself.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Signal::SIGINT,
            Some(()) = self.terminate.recv() => Signal::SIGTERM,
            Some(()) = self.hangup.recv() => Signal::SIGHUP,
            else => std::future::pending().await,
        }
    }
}

/// Takes the lock, runs the command, releases, and returns the command's exit status.
pub async fn run(conn: &Connection, json: bool, args: RunArgs) -> Outcome {
    let signals = Signals::install().map_err(Failure::signals)?;
    let mut config = conn.config()?;
    if let Some(timeout) = args.watchdog_timeout {
        config.watchdog_timeout = timeout;
    }
    let client = connect(conn, config).await?;
    // An owner of its own: the holder field (a token lock's token) is `<client uuid>:<fresh id>`.
    if args.token {
        let lock = client.token_lock(&args.name).with_owner(Owner::new());
        run_holding(conn, json, &args, &client, &lock, signals).await
    } else if args.shared {
        let lock = (client.read_write_lock(&args.name).with_owner(Owner::new())).read_lock();
        run_holding(conn, json, &args, &client, &lock, signals).await
    } else {
        let lock = client.lock(&args.name).with_owner(Owner::new());
        run_holding(conn, json, &args, &client, &lock, signals).await
    }
}

/// [`run`] with `lock`, a lock of `client`.
async fn run_holding<P: Protocol>(
    conn: &Connection,
    json: bool,
    args: &RunArgs,
    client: &ferrisson::Client,
    lock: &Handle<P>,
    mut signals: Signals,
) -> Outcome {
    let name = args.name.as_str();
    let report = Reporter {
        name,
        conn,
        json,
        verbose: args.verbose,
    };
    let started = Instant::now();
    let wait = if args.nonblock {
        Some(Duration::ZERO)
    } else {
        args.wait
    };
    let acquire = async {
        match (wait, args.lease) {
            (Some(wait), Some(lease)) => lock.try_lock_within_with_lease(wait, lease).await,
            (Some(wait), None) => lock.try_lock_within(wait).await,
            (None, Some(lease)) => lock.lock_with_lease(lease).await.map(Attempt::Acquired),
            (None, None) => lock.lock().await.map(Attempt::Acquired),
        }
    };
    let acquired = tokio::select! {
        acquired = acquire => acquired,
        signal = signals.recv() => {
            // Acquires are cancel safe: a lock taken as the signal arrived is released.
            report.interrupted(signal);
            client.shutdown().await;
            return Ok(128 + signal as u8);
        }
    };
    let guard = match acquired {
        Ok(Attempt::Acquired(guard)) => guard,
        Ok(Attempt::Busy) => {
            let holders = client
                .inspect(name)
                .await
                .ok()
                .filter(|info| !info.holders.is_empty())
                .map(|info| output::holders_text(&info));
            report.not_acquired(wait.unwrap_or_default(), started.elapsed(), holders);
            client.shutdown().await;
            return Ok(args.conflict_exit_code.unwrap_or(exit::TEMPFAIL));
        }
        Err(err) => {
            let failure = match err {
                ferrisson::Error::WrongType { .. } => {
                    let info = client.inspect(name).await.ok().map(output::classify);
                    let what = info.as_ref().and_then(output::not_lockable);
                    let token = info
                        .as_ref()
                        .is_some_and(|info| info.kind == ferrisson::inspect::LockKind::TokenLock);
                    if token {
                        Failure::not_a_lock(
                            name,
                            "token lock (SET NX PX) of redis-py, redsync, node redlock or rslock",
                            "take it with `run --token`",
                        )
                    } else {
                        Failure::not_a_lock(
                            name,
                            what.as_deref().unwrap_or("value of another type"),
                            "nothing to acquire",
                        )
                    }
                }
                err => Failure::from_lib(&format!("cannot acquire `{name}`"), &err, conn),
            };
            client.shutdown().await;
            return Err(failure);
        }
    };
    report.acquired(&guard);

    // flock's -c: the command line goes to `sh -c`, as flock gives it to $SHELL -c.
    let (program, arguments): (&OsStr, Vec<&OsStr>) =
        match (&args.shell_command, args.command.split_first()) {
            (Some(line), _) => (OsStr::new("sh"), vec![OsStr::new("-c"), line.as_os_str()]),
            (None, Some((program, rest))) => {
                (program, rest.iter().map(OsString::as_os_str).collect())
            }
            // clap requires CMD without -c.
            (None, None) => {
                release(&report, guard, false).await;
                client.shutdown().await;
                let message = "no command to run: give CMD after `--`, or -c".to_owned();
                return Err(Failure::new(exit::USAGE, "invalid_argument", message));
            }
        };
    let spawned = tokio::process::Command::new(program)
        .args(arguments)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            release(&report, guard, false).await;
            client.shutdown().await;
            let (code, kind) = if err.kind() == ErrorKind::NotFound {
                (exit::NOT_FOUND, "command_not_found")
            } else {
                (exit::CANNOT_EXECUTE, "cannot_execute")
            };
            return Err(Failure::new(
                code,
                kind,
                format!("cannot run `{}`: {err}", program.to_string_lossy()),
            ));
        }
    };
    // Some until the child has been reaped, which happens only in `wait` below.
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);

    let lost = guard.lost();
    tokio::pin!(lost);
    let mut lost_reported = false;
    let waited = loop {
        tokio::select! {
            status = child.wait() => break status,
            signal = signals.recv() => {
                if let Some(pid) = pid {
                    report.forwarding(signal, pid);
                    let _ = kill(pid, signal);
                }
            }
            () = &mut lost, if !lost_reported => {
                lost_reported = true;
                report.lost(Lost::WhileRunning { kill: args.kill_on_lost });
                if args.kill_on_lost {
                    if let Some(pid) = pid {
                        let _ = kill(pid, Signal::SIGTERM);
                    }
                }
            }
        }
    };

    if let Ok(status) = &waited {
        report.exited(*status);
    }
    let lost = release(&report, guard, lost_reported).await;
    client.shutdown().await;
    let status = waited.map_err(|err| {
        Failure::new(
            exit::FAILURE,
            "internal",
            format!("lost track of the command: {err}"),
        )
    })?;
    // A lost lock overrides CMD's status: whatever CMD did, it did unprotected.
    Ok(if lost { exit::LOST } else { exit_code(status) })
}

/// Releases the hold, reporting the release, or the loss if it was not reported yet. Returns
/// whether the lock counts as lost: whether the release failed to show that the hold lasted
/// until now. A release whose outcome is unknown (its reply was lost) is settled first: the
/// library reads, within the lease's proven end, whether the server still had the hold (and
/// then releases it); if it did not, or Redis was not reached in time, nothing shows that the
/// lock was held until CMD ended, and the run exits 76 as for a loss.
async fn release<P: Protocol>(report: &Reporter<'_>, guard: Guard<P>, lost_reported: bool) -> bool {
    match guard.unlock_settled().await {
        Ok(()) => {
            report.released();
            lost_reported
        }
        Err(ferrisson::Error::LeaseLost { .. }) => {
            if !lost_reported {
                report.lost(Lost::AtRelease);
            }
            true
        }
        Err(err) => {
            report.release_failed(&err, lost_reported);
            true
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed the command.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(signal)) => 128u8.saturating_add((signal & 0x7f) as u8),
        (None, None) => exit::FAILURE,
    }
}
