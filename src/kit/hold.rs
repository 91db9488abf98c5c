//! One hold of a hash-based lock as the lease table knows it: what every guard of such a
//! primitive shares. Its guard releases it now ([`Hold::release`]) or, when dropped, in the
//! background ([`Hold::dropped`], through the janitor); it reports the lease's loss
//! ([`Hold::lost`], [`Hold::is_lost`]) and can be kept without a guard ([`Hold::detach`]). A
//! primitive's guard wraps a `Hold` and adds its own operations (the reentrant lock's
//! `reenter`, say).
//!
//! A hold keeps only what its guard's handle does not (the client and the lock's name are
//! there): every held lock pays for its guard, so the methods take that handle. What a release
//! needs is gathered when it starts ([`Leaving`]).

use arcstr::ArcStr;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use futures::future::Either;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::handle::Handle;
use super::janitor::{Job, Release};
use super::protocol::Protocol;
use super::release::{release_unknown, Sent};
use super::{Acquisition, ClientInner};
use crate::error::{Error, Result};
use crate::lease::watchdog::{HoldKey, Lease, Ticket};
use crate::transport::script::ReleaseScript;

pub(crate) struct Hold {
    /// The holder field; taken once the hold is released or detached, so that the guard's
    /// `Drop` does nothing.
    field: Option<ArcStr>,
    /// Tells this hold's entry in the lease table from a later one of the same owner.
    generation: u64,
    lease: HoldLease,
    /// How the acquisition went (a placeholder until the wait loop reports it).
    acquisition: Acquisition,
}

/// The lease a hold was taken with, and, for a fixed one, when it ends.
#[derive(Clone, Copy, Debug)]
enum HoldLease {
    Watchdog,
    /// `ends`: when this hold's fixed lease ends, measured from before the acquire was sent.
    /// The lease table keeps the key's end (`lease_end`), which the owner's later acquires and
    /// releases move; `is_lost` and `lost` go by whichever comes first.
    Fixed {
        ms: u64,
        ends: Option<Instant>,
    },
}

impl HoldLease {
    fn new(lease: Lease, sent_at: Instant) -> HoldLease {
        match lease {
            Lease::Watchdog => HoldLease::Watchdog,
            Lease::Fixed(ms) => HoldLease::Fixed {
                ms,
                ends: sent_at.checked_add(Duration::from_millis(ms)),
            },
        }
    }

    fn lease(self) -> Lease {
        match self {
            HoldLease::Watchdog => Lease::Watchdog,
            HoldLease::Fixed { ms, .. } => Lease::Fixed(ms),
        }
    }

    fn ends(self) -> Option<Instant> {
        match self {
            HoldLease::Watchdog => None,
            HoldLease::Fixed { ends, .. } => ends,
        }
    }
}

/// A hold on its way out, with what its release needs: owned, so that the release's future is
/// `'static`, and built only then, so that a held lock does not keep its client and name twice
/// (its guard's handle has them).
struct Leaving {
    client: Arc<ClientInner>,
    ticket: Ticket,
    release_by: Option<&'static ReleaseScript>,
    /// Until the release starts: dropped before, it releases in the background.
    armed: bool,
}

impl Hold {
    /// Records a hold of `key` just taken (by an acquire sent at `sent_at`, or handed over by a
    /// local releaser) in the lease table and wraps it; also tells whether it re-entered a hold
    /// the owner had. Synchronous, so nothing can drop the hold unseen. Its guard releases it
    /// with the primitive's own release script (`Protocol::RELEASE`).
    pub(crate) fn acquired(
        client: &ClientInner,
        key: &HoldKey,
        lease: Lease,
        sent_at: Instant,
    ) -> (Hold, bool) {
        let (ticket, reentered) = client.leases.acquired(key, lease, sent_at);
        let hold = Hold {
            field: Some(ArcStr::clone(&key.field)),
            generation: ticket.generation,
            lease: HoldLease::new(ticket.lease, sent_at),
            acquisition: Acquisition::immediate(1),
        };
        (hold, reentered)
    }

    /// The lease table's ticket of this hold in lock `name`.
    fn ticket(&self, name: &ArcStr) -> Ticket {
        Ticket {
            key: HoldKey {
                name: ArcStr::clone(name),
                field: self.field.clone().unwrap_or_default(),
            },
            generation: self.generation,
            lease: self.lease.lease(),
        }
    }

    /// Takes the hold out for its release (the guard's `Drop` then does nothing).
    fn leave<P: Protocol>(&mut self, lock: &Handle<P>) -> Option<Leaving> {
        let ticket = Ticket {
            key: HoldKey {
                name: lock.name_arc(),
                field: self.field.take()?,
            },
            generation: self.generation,
            lease: self.lease.lease(),
        };
        Some(Leaving {
            client: lock.client_arc(),
            ticket,
            release_by: P::RELEASE,
            armed: true,
        })
    }

    /// Releases the hold now (see [`Leaving::release`]); `lock` is the guard's handle. A
    /// released hold releases nothing more.
    pub(crate) fn release<P: Protocol>(
        &mut self,
        lock: &Handle<P>,
        settle: bool,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        match self.leave(lock) {
            Some(leaving) => Either::Left(leaving.release(settle)),
            None => Either::Right(std::future::ready(Ok(()))),
        }
    }

    /// Keeps the hold on the server without a guard (Redisson's style of holding).
    pub(crate) fn detach(&mut self) {
        self.field = None;
    }

    /// Hands the hold's release to the janitor (the guard was dropped unreleased).
    pub(crate) fn dropped<P: Protocol>(&mut self, lock: &Handle<P>) {
        drop(self.leave(lock));
    }

    /// Resolves when the lease is lost or can no longer be proven (see `LockGuard::lost`): when
    /// `is_lost` turns true. Besides the lost token, it wakes at the key's end as the lease
    /// table keeps it, which renewals and re-entries move, and checks again.
    pub(crate) fn lost<P: Protocol>(
        &self,
        lock: &Handle<P>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let ticket = self.ticket(lock.name_ref());
        let token = lock.client().leases.lost_token(&ticket);
        // Weak: the future may outlive the client, and must not keep its table.
        let leases = Arc::downgrade(&lock.client().leases);
        let own_end = self.lease.ends();
        async move {
            loop {
                let key_end = match leases.upgrade() {
                    Some(leases) => match leases.lease_end(&ticket) {
                        Some(end) => Some(end),
                        None => return, // lost
                    },
                    None => None, // the client is gone: its holds end as their leases say
                };
                let Some(end) = [key_end, own_end].into_iter().flatten().min() else {
                    token.cancelled().await;
                    return;
                };
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep_until(end) => {}
                }
                if own_end.is_some_and(|own| Instant::now() >= own) {
                    return;
                }
            }
        }
    }

    pub(crate) fn lost_token<P: Protocol>(&self, lock: &Handle<P>) -> CancellationToken {
        lock.client()
            .leases
            .lost_token(&self.ticket(lock.name_ref()))
    }

    /// Read from the clock too (the key's end, and this hold's own fixed lease), so that a
    /// holder that was paused knows at once when it resumes.
    pub(crate) fn is_lost<P: Protocol>(&self, lock: &Handle<P>) -> bool {
        lock.client().leases.is_lost(&self.ticket(lock.name_ref()))
            || self.lease.ends().is_some_and(|end| Instant::now() >= end)
    }

    /// Records that the hold's key had its TTL set again on the server, to `lease_ms` by a
    /// command sent at `sent_at`, so that `is_lost`, `lost` and a partial release's re-arm use
    /// the new end. Generic: for any primitive that resets the TTL of holds it took (the
    /// MultiLock's "lease recalculation", say). A watchdog hold keeps its lease kind: the
    /// watchdog keeps renewing it (before the new end, if that is sooner).
    pub(crate) fn relet<P: Protocol>(&mut self, lock: &Handle<P>, lease_ms: u64, sent_at: Instant) {
        // The key's TTL is the table's business whatever this hold's lease.
        let ticket = self.ticket(lock.name_ref());
        lock.client().leases.relet(&ticket, lease_ms, sent_at);
        if let HoldLease::Fixed { .. } = self.lease {
            self.lease = HoldLease::new(Lease::Fixed(lease_ms), sent_at);
        }
    }

    pub(crate) fn field(&self) -> &str {
        self.field.as_deref().unwrap_or_default()
    }

    pub(crate) fn lease(&self) -> Lease {
        self.lease.lease()
    }

    /// How the acquisition went.
    pub(crate) fn acquisition(&self) -> &Acquisition {
        &self.acquisition
    }

    /// Records how the acquisition went (the wait loop knows it once the hold is built).
    pub(crate) fn set_acquisition(&mut self, acquisition: Acquisition) {
        self.acquisition = acquisition;
    }
}

impl Leaving {
    /// Releases the hold now, with the outcomes that [`Guard::unlock`](super::Guard::unlock)
    /// documents; with `settle`, bounded by the hold's proven lease end, settling a release of
    /// unknown outcome as [`Guard::unlock_settled`](super::Guard::unlock_settled) documents.
    /// Cancel safe: once sent, the janitor finishes the release; dropped before, it releases
    /// in the background as a dropped guard does.
    ///
    /// This future is part of every task that locks and unlocks in a loop, whose size while
    /// parked in the lock is its largest state's (see the test
    /// `a_task_parked_in_lock_fits_a_768_byte_task_cell` in `lock::reentrant`): the settling
    /// paths are boxed.
    #[allow(clippy::manual_async_fn)] // on purpose: an `async fn` would keep `self` twice
    fn release(mut self, settle: bool) -> impl Future<Output = Result<()>> + Send + 'static {
        async move {
            let leaving = &mut self;
            leaving.armed = false;
            leaving.client.ensure_open()?;
            // Read before the release: a hold whose key is past its proven end never reports
            // `Ok`. That end is the key's as this client last set its TTL
            // (`LeaseTable::lease_end`), not this hold's own lease: a re-entry resets the TTL to
            // its own lease, so a hold past its own fixed lease may still be on the server, and
            // then the server's reply is the word.
            let leases = &leaving.client.leases;
            let proven_until = leases.lease_end(&leaving.ticket);
            // Registered before the lease table counts the hold released (see `doubt.rs`).
            let call = leases.doubts.enter();
            let released = leases.released(&leaving.ticket);
            if released.lost {
                return Err(leaving.lease_lost());
            }
            let release = Release::of(&leaving.ticket.key, released.rearm_ms, leaving.release_by);
            let send = super::release::send_release(&leaving.client, &release, call);
            match proven_until {
                Some(end) if settle => Box::pin(leaving.settle(send, end)).await,
                _ => leaving.read_reply(send.await?, proven_until.is_none()),
            }
        }
    }

    /// What the reply to an unsettled release says (`ended`: the key was past its proven end
    /// before the release was sent).
    fn read_reply(&self, sent: Sent, ended: bool) -> Result<()> {
        match sent {
            Sent::Reply(_) if ended => Err(self.lease_lost()),
            Sent::Reply(Value::Null) => Err(self.lease_lost()),
            Sent::Reply(_) => Ok(()),
            Sent::Unknown { .. } if ended => Err(self.lease_lost()),
            Sent::Unknown { cause, .. } => Err(release_unknown(self.name(), true, cause)),
        }
    }

    /// A settling release of a hold proven until `end`: the whole release is bounded by that
    /// end, as a reply after it could not show that the hold lasted (a dropped release is
    /// finished by the janitor, and a failure of unknown outcome settled by the reconciler).
    async fn settle(&self, send: impl Future<Output = Result<Sent>>, end: Instant) -> Result<()> {
        let started = Instant::now();
        let sent = match tokio::time::timeout_at(end, send).await {
            Ok(sent) => sent?,
            Err(_) => {
                let waited = Error::Timeout(end.saturating_duration_since(started));
                return Err(release_unknown(self.name(), true, Some(waited)));
            }
        };
        match sent {
            Sent::Reply(Value::Null) => Err(self.lease_lost()),
            Sent::Reply(_) => Ok(()),
            Sent::Unknown { cause, settlement } => {
                let settled = tokio::time::timeout_at(end, settlement.wait())
                    .await
                    .ok()
                    .flatten();
                match settled {
                    Some(true) => Ok(()),
                    Some(false) => Err(release_unknown(self.name(), false, cause)),
                    None => Err(release_unknown(self.name(), true, cause)),
                }
            }
        }
    }

    fn name(&self) -> &str {
        &self.ticket.key.name
    }

    fn lease_lost(&self) -> Error {
        Error::LeaseLost {
            name: self.ticket.key.name.to_string(),
        }
    }
}

impl Drop for Leaving {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let leases = &self.client.leases;
        let call = leases.doubts.enter();
        let released = leases.dropped(&self.ticket);
        if released.lost {
            return;
        }
        let release = Release::of(&self.ticket.key, released.rearm_ms, self.release_by);
        let dropped = leases.doubts.dropped_release(&self.ticket.key);
        self.client
            .janitor
            .submit(Job::Release(release, Some(call), Some(dropped)));
    }
}
