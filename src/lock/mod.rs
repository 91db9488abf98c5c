//! The primitives, one file each, built on the lock kit (`src/kit/`): the reentrant lock
//! ([`Lock`], [`LockGuard`]) and the fenced lock ([`FencedLock`], [`FencedGuard`]).

mod fenced;
mod guard;
mod held;
mod non_reentrant;
mod reentrant;
mod spin;

pub use fenced::{FencedGuard, FencedLock};
pub use guard::LockGuard;
pub use held::Guard;
pub use non_reentrant::{NonReentrantGuard, NonReentrantLock};
pub use reentrant::{Lock, RemainingTtl};
pub use spin::{BackOff, SpinGuard, SpinLock};
