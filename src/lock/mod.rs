//! The primitives, one file each, built on the lock kit (`src/kit/`): the reentrant lock
//! ([`Lock`], [`LockGuard`]) and the fenced lock ([`FencedLock`], [`FencedGuard`]).

mod fenced;
mod guard;
mod reentrant;

pub use fenced::{FencedGuard, FencedLock};
pub use guard::LockGuard;
pub use reentrant::{Lock, RemainingTtl};
