//! The locks, one file each, built on the lock kit (`src/kit/`): the reentrant lock ([`Lock`],
//! [`LockGuard`]), the fenced lock ([`FencedLock`], [`FencedGuard`]), the fair lock
//! ([`FairLock`], [`FairGuard`]), the read-write lock ([`ReadWriteLock`]), the spin lock
//! ([`SpinLock`]) and the non-reentrant lock ([`NonReentrantLock`]); the guard of those whose hold
//! is nothing but the kit's `Hold` ([`Guard`]).

mod fair;
mod fenced;
mod guard;
mod held;
mod non_reentrant;
mod read_write;
mod reentrant;
mod spin;

pub use fair::{FairGuard, FairLock};
pub use fenced::{FencedGuard, FencedLock};
pub use guard::LockGuard;
pub use held::Guard;
pub use non_reentrant::{NonReentrantGuard, NonReentrantLock};
pub use read_write::{ReadGuard, ReadLock, ReadWriteLock, WriteGuard, WriteLock};
pub use reentrant::{Lock, RemainingTtl};
pub use spin::{BackOff, SpinGuard, SpinLock};
