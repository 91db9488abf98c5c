//! The lease layer: which holds this client has and for how long ([`watchdog::LeaseTable`]),
//! their renewal by the watchdog, and the settling of calls whose outcome is unknown
//! ([`doubt`]). It builds on the transport and knows nothing of the lock kit or the primitives.

pub(crate) mod doubt;
pub(crate) mod watchdog;
