//! Peers measured in the same run against the same server: rslock (Redlock on one server,
//! retry polling), a classic SET NX PX + Lua compare-and-delete spin lock with a 10 ms retry
//! sleep, and node-redisson driven by a Node script. (Owned by the peers work; stubs for now.)

use std::time::Duration;

use crate::measure::{Hot, Throughput};

/// T tasks, each locking and unlocking its own rslock lock for `duration`.
pub async fn rslock_uncontended(_url: &str, _tasks: usize, _duration: Duration) -> Result<Throughput, String> {
    Err("not implemented yet".into())
}

/// T tasks on one rslock lock for `duration`.
pub async fn rslock_hot(_url: &str, _tasks: usize, _duration: Duration) -> Result<Hot, String> {
    Err("not implemented yet".into())
}

/// T tasks, each locking and unlocking its own spin lock for `duration`.
pub async fn spin_uncontended(_url: &str, _tasks: usize, _duration: Duration) -> Result<Throughput, String> {
    Err("not implemented yet".into())
}

/// T tasks on one spin lock for `duration`.
pub async fn spin_hot(_url: &str, _tasks: usize, _duration: Duration) -> Result<Hot, String> {
    Err("not implemented yet".into())
}

/// T concurrent node-redisson workers (in one Node process), each on its own lock.
pub async fn node_uncontended(_url: &str, _tasks: usize, _duration: Duration) -> Result<Throughput, String> {
    Err("not implemented yet".into())
}
