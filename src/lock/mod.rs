//! The locks, one file each, built on the lock kit (`src/kit/`). Each lock of the reentrant
//! lock's hash is a [`Protocol`](crate::Protocol) (its acquire, its release, how its waiters
//! wait) that the kit's [`Handle`](crate::Handle) and [`Guard`](crate::Guard) serve: the
//! reentrant lock ([`Lock`], [`LockGuard`]), the fenced lock ([`FencedLock`], [`FencedGuard`]),
//! the fair lock ([`FairLock`], [`FairGuard`]), the spin lock ([`SpinLock`]) and the
//! non-reentrant lock ([`NonReentrantLock`]). The read-write lock ([`ReadWriteLock`]) has its
//! own two sides.

mod fair;
mod fenced;
mod non_reentrant;
mod non_reentrant_fair;
mod read_write;
mod reentrant;
mod spin;
mod token;
pub(crate) mod upkeep;

pub use fair::{Fair, FairGuard, FairLock, Queued};
pub use fenced::{Fenced, FencedGuard, FencedLock};
pub use non_reentrant::{NonReentrant, NonReentrantGuard, NonReentrantLock};
pub use non_reentrant_fair::{NonReentrantFair, NonReentrantFairGuard, NonReentrantFairLock};
pub use read_write::{Read, ReadGuard, ReadLock, ReadWriteLock, Write, WriteGuard, WriteLock};
pub use reentrant::{Lock, LockGuard, Reentrant};
pub use spin::{Spin, SpinGuard, SpinLock};
pub use token::{Token, TokenGuard, TokenLock};
