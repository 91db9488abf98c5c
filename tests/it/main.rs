//! The integration tests, in one test binary (`it`): one module per area, all sharing the
//! real-Redis fixture in [`support`]. The fixture is compiled, and the library linked, once
//! for all of them, where a binary per file did so 38 times.
//!
//! ```text
//! cargo test --all-features --test it                  # all of them
//! cargo test --all-features --test it acl::            # one module
//! cargo test --all-features --test it -- --exact acl::passwords_stay_out_of_logs
//! ```
//!
//! The modules of the optional features compile only with them (`cli`, `tls`, `metrics`), so
//! `cargo test` without features still builds the rest. The tests of every module run side by
//! side in this one process (libtest's threads, one per core by default): a test that needs the
//! process to itself (a global `tracing` subscriber, the `metrics` recorder) runs in a child
//! process of its own (`support::processes::in_own_process`), and a test that re-runs this
//! binary names itself with its module's path (`support::processes::test_name`).
//!
//! Not here: `tests/soak.rs`, the mutual-exclusion checker, a binary of its own without libtest
//! (`harness = false`: its own `main`, flags such as `--duration` and `--bypass`, and worker
//! processes).

mod support;

mod acl;
mod architecture;
mod batching;
mod blocking;
mod cancellation;
#[cfg(feature = "cli")]
mod cli;
mod cluster;
mod cluster_family;
mod config;
mod connect_errors;
mod count_down_latch;
mod deadlock;
mod doubt_family;
mod examples;
mod exit_release;
mod fair_lock;
mod faults;
mod fenced_lock;
mod fixture;
mod handoff;
mod hostile_input;
mod inspect_family;
mod interop_java;
mod interop_node;
mod interop_redsync;
mod lease_loss;
#[cfg(feature = "metrics")]
mod metrics;
mod msrv;
mod multi_lock;
mod non_reentrant_fair_lock;
mod non_reentrant_lock;
mod outage;
mod permit_expirable_semaphore;
mod read_write_lock;
mod red_lock;
mod reentrant_lock;
mod semaphore;
mod sentinel;
mod spin_lock;
mod stress;
mod synced_writes;
#[cfg(feature = "tls")]
mod tls;
mod token_interop;
mod token_lock;
mod token_peers_smoke;
mod token_red_lock;
mod typed_errors;
mod unavailable;
mod wakeups;
mod watchdog;
