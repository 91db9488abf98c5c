//! The primitives, one file each, built on the lock kit (`src/kit/`): the reentrant lock
//! ([`Lock`], [`LockGuard`]), the fenced lock ([`FencedLock`], [`FencedGuard`]) and the fair
//! lock ([`FairLock`], [`FairGuard`]).

mod fair;
mod fenced;
mod guard;
mod read_write;
mod reentrant;

pub use fair::{FairGuard, FairLock};
pub use fenced::{FencedGuard, FencedLock};
pub use guard::LockGuard;
pub use read_write::{ReadGuard, ReadLock, ReadWriteLock, WriteGuard, WriteLock};
pub use reentrant::{Lock, RemainingTtl};
