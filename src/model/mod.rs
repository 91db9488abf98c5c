//! Model checks of the client's in-process state machines (issue 24 §1), run by
//! `cargo test --lib model::` (and `cargo test --release --test model`, which runs these).
//!
//! `shuttle` runs a scenario's async tasks on one thread under a scheduler that picks which
//! task runs next at every await that yields, and repeats the scenario under many schedules.
//! Chosen over `loom` because the code under test is async: loom explores threads and
//! atomics (how tokio checks its own primitives), shuttle explores the order of tasks, which is
//! where this crate's races are (a message, a hand-off and a retry crossing each other). The
//! tokio primitives inside (`Notify`, `Semaphore`, `Mutex`, `broadcast`) run as they are.
//!
//! The code under test is the crate's own: the wait loop (`kit/wait.rs`), the local lines and
//! hand-off slots (`kit/handoff.rs`), giving way (`kit/give_way.rs`), and the subscription
//! shares, their reference counts and unsubscribe task, and the message loop
//! (`transport/pubsub.rs`). In place of Redis: `transport/model_server.rs`, an in-memory server with the lock's
//! acquire and release steps, pub/sub delivered as fred delivers it (a SUBSCRIBE done for the
//! caller once written, applied by the server later), and a yield on each side
//! of every request, so that the scheduler interleaves round trips. [`client`] adds the
//! attempt and a release in `kit/release.rs`'s order.
//!
//! Time never passes for the tasks: every timer is made in a runtime that never runs, and the
//! task that fires the local lines' timers (`kit/handoff.rs`, `run_timers`) is not started, so a
//! lock's TTL bound never ends a wait. A waiter therefore gets the lock only through an unlock
//! message or a hand-off, and one that is parked with neither on its way leaves every task
//! blocked: the scheduler fails the check with "deadlock" and the schedule that led there.
//!
//! Properties, each a checked assertion:
//! * no lost wake-up: every scenario ends (no deadlock), with the lock free on the server;
//! * a hand-off reaches exactly one waiter, never a cancelled one: whoever returns from
//!   `lock` is the server's holder and alone in the critical section; an aborted waiter's
//!   hold (handed over, or its own) is released by the janitor, so the lock ends free;
//! * a subscription is never dropped while a waiter relies on it: a waiter whose share was
//!   unsubscribed would hear no release, and deadlock;
//! * a hold is counted once: the server panics on a release of a field that does not hold
//!   the lock, the local count on a release it did not count, and a re-entry must show 2.
//!
//! [`lease`] checks the lease layer on its own: the doubt epochs (a reconciler's drain outlasts
//! every call that missed the doubt) and the lease table's generations (a watchdog reply loses
//! only the hold it was about). Each property also has a check on a defect put in on purpose,
//! which must fail, so that a check that cannot fail shows.
//!
//! Not modelled here (tested against real Redis only): the watchdog's timing wheel and
//! batches, the reconciler's script, connection faults, and the primitives other than the
//! reentrant lock and the count-down latch's wait (whose `0` wakes every waiter at once).

mod checks;
mod client;
mod lease;
