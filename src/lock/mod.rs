//! The primitives, one file each, built on the lock kit (`src/kit/`): the reentrant lock
//! ([`Lock`], [`LockGuard`]), the fenced lock ([`FencedLock`], [`FencedGuard`]) and the fair
//! lock ([`FairLock`], [`FairGuard`]).

mod fair;
mod fenced;
mod guard;
mod reentrant;

pub use fair::{FairGuard, FairLock};
pub use fenced::{FencedGuard, FencedLock};
pub use guard::LockGuard;
pub use reentrant::{Lock, RemainingTtl};
