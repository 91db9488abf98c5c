//! The synchronizers, one file each, built on the lock kit (`src/kit/`): the permit-expirable
//! semaphore ([`PermitExpirableSemaphore`], [`Permit`]).

mod permit_semaphore;

pub use permit_semaphore::{Permit, PermitExpirableSemaphore, PermitIdFormat};
