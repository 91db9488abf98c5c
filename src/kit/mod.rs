//! The lock kit: what every pub/sub-woken primitive shares, so that a primitive is one file of
//! its own steps:
//! * the client's shared state and the [`Client`](crate::Client) handle ([`shared`]);
//! * the contract a lock primitive fulfils ([`protocol`]), and the handle and guard that give
//!   every primitive the same surface through it ([`handle`], [`guard`]);
//! * the wait loop ([`wait`]: attempt, park on the unlock channel, retry), polling with back-off
//!   for a primitive without a channel ([`poll`]), and the `#[must_use]` [`Attempt`] of bounded
//!   acquires;
//! * the in-flight wrapper that makes script calls cancel safe ([`in_flight`]), and one acquire
//!   script call made cancel safe with it ([`acquire`]);
//! * the hold that every guard of a hash-based lock wraps ([`hold`]: release now or on drop,
//!   lost-lease signals, detach);
//! * the release path with local hand-off ([`release`], [`handoff`], [`give_way`]) and the
//!   janitor that finishes releases in the background ([`janitor`]), and what finishes them
//!   when the runtime under the janitor shuts down ([`exit`]);
//! * what the client knows of a lock locally, for hang reports ([`local_state`]), and an
//!   acquire's tracing span at 8 bytes of its future ([`in_span`]);
//! * this client's waits, for deadlock detection, and the verdict that ends one ([`waits`]).

pub(crate) mod acquire;
pub(crate) mod attempt;
pub(crate) mod exit;
pub(crate) mod give_way;
pub(crate) mod guard;
pub(crate) mod handle;
pub(crate) mod handoff;
pub(crate) mod hold;
pub(crate) mod in_flight;
pub(crate) mod in_span;
pub(crate) mod janitor;
pub(crate) mod local_state;
pub(crate) mod poll;
pub(crate) mod protocol;
pub(crate) mod release;
pub(crate) mod shared;
pub(crate) mod wait;
pub(crate) mod waits;

pub use attempt::Attempt;
pub use guard::Guard;
pub use handle::{Handle, RemainingTtl};
pub use local_state::{LocalHold, LocalState, LocalSubscription, LocalWaiter, LocalWaiterState};
pub use poll::BackOff;
pub use protocol::Protocol;
pub use shared::Client;
pub use wait::{Acquisition, WokenBy};

pub(crate) use in_flight::InFlight;
pub(crate) use shared::ClientInner;
