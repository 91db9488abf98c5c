//! The primitives, one file each, built on the lock kit (`src/kit/`): the reentrant lock
//! ([`Lock`], [`LockGuard`]) and the fenced lock ([`FencedLock`], [`FencedGuard`]).

mod fenced;
mod guard;
mod read_write;
mod reentrant;

pub use fenced::{FencedGuard, FencedLock};
pub use guard::LockGuard;
pub use read_write::{ReadGuard, ReadLock, ReadWriteLock, WriteGuard, WriteLock};
pub use reentrant::{Lock, RemainingTtl};
