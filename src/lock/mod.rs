//! The primitives, one file each, built on the lock kit (`src/kit/`): the reentrant lock
//! ([`Lock`], [`LockGuard`]).

mod guard;
mod reentrant;

pub use guard::LockGuard;
pub use reentrant::{Lock, RemainingTtl};
