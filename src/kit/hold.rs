//! One hold of a hash-based lock as the lease table knows it: what every guard of such a
//! primitive shares. It releases now ([`Hold::release`]) or, when dropped, in the background
//! (the janitor), reports the lease's loss ([`Hold::lost`], [`Hold::is_lost`]) and can be kept
//! without a guard ([`Hold::detach`]). A primitive's guard wraps a `Hold` and adds its own
//! operations (the reentrant lock's `reenter`, say).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::janitor::{Job, Release};
use super::release::{release_unknown, Sent};
use super::{Acquisition, ClientInner};
use crate::error::{Error, Result};
use crate::lease::watchdog::{HoldKey, Lease, Ticket};
use crate::transport::script::ReleaseScript;

pub(crate) struct Hold {
    client: Arc<ClientInner>,
    /// Its key is the lock's name and the holder field.
    ticket: Ticket,
    /// When this hold's fixed lease ends, measured from before the acquire was sent. The lease
    /// table keeps the key's end (`lease_end`), which the owner's later acquires and releases
    /// move; `is_lost` and `lost` go by whichever comes first.
    lease_ends: Option<Instant>,
    /// A placeholder until the wait loop reports how the acquisition went.
    pub(crate) acquisition: Acquisition,
    /// The primitive's own release script (`None`: `RELEASE`).
    release_by: Option<&'static ReleaseScript>,
    /// Set once the hold is released or detached, so that `Drop` does nothing.
    done: bool,
}

impl Hold {
    /// Records a hold of `key` just taken (by an acquire sent at `sent_at`, or handed over by a
    /// local releaser) in the lease table and wraps it; also tells whether it re-entered a hold
    /// the owner had. Synchronous, so nothing can drop the hold unseen. The hold is released
    /// with `release_by`, the primitive's own release script (`None`: `RELEASE`).
    pub(crate) fn acquired(
        client: Arc<ClientInner>,
        key: &HoldKey,
        lease: Lease,
        sent_at: Instant,
        release_by: Option<&'static ReleaseScript>,
    ) -> (Hold, bool) {
        let (ticket, reentered) = client.leases.acquired(key, lease, sent_at);
        let lease_ends = match ticket.lease {
            Lease::Fixed(ms) => sent_at.checked_add(Duration::from_millis(ms)),
            Lease::Watchdog => None,
        };
        let hold = Hold {
            client,
            ticket,
            lease_ends,
            acquisition: Acquisition::immediate(1),
            release_by,
            done: false,
        };
        (hold, reentered)
    }

    /// Releases the hold now, with the outcomes that [`Guard::unlock`](super::Guard::unlock)
    /// documents; with `settle`, bounded by the hold's proven lease end, settling a release of
    /// unknown outcome as [`Guard::unlock_settled`](super::Guard::unlock_settled) documents.
    /// Cancel safe: once sent, the janitor finishes the release; before that, dropping the
    /// future drops the hold, which releases.
    ///
    /// A plain fn around an `async move` block rather than an `async fn`, which would keep the
    /// hold twice (as passed and as moved into its body); the settling paths are boxed. This
    /// future is part of every task that locks and unlocks in a loop, whose size while parked
    /// in the lock is its largest state's (see the test
    /// `a_task_parked_in_lock_fits_a_768_byte_task_cell` in `lock::reentrant`).
    #[allow(clippy::manual_async_fn)] // on purpose: see above
    pub(crate) fn release(mut self, settle: bool) -> impl Future<Output = Result<()>> + Send {
        async move {
            self.done = true;
            self.client.ensure_open()?;
            // Read before the release: a hold whose key is past its proven end never reports
            // `Ok`. That end is the key's as this client last set its TTL
            // (`LeaseTable::lease_end`), not this hold's own lease: a re-entry resets the TTL to
            // its own lease, so a hold past its own fixed lease may still be on the server, and
            // then the server's reply is the word.
            let proven_until = self.client.leases.lease_end(&self.ticket);
            // Registered before the lease table counts the hold released (see `doubt.rs`).
            let call = self.client.leases.doubts.enter();
            let released = self.client.leases.released(&self.ticket);
            if released.lost {
                return Err(self.lease_lost());
            }
            let release = Release::of(&self.ticket.key, released.rearm_ms, self.release_by);
            let send = super::release::send_release(&self.client, &release, call);
            match proven_until {
                Some(end) if settle => Box::pin(self.settle(send, end)).await,
                _ => self.read_reply(send.await?, proven_until.is_none()),
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

    /// Keeps the hold on the server without a guard (Redisson's style of holding).
    pub(crate) fn detach(mut self) {
        self.done = true;
    }

    /// Resolves when the lease is lost or can no longer be proven (see `LockGuard::lost`): when
    /// `is_lost` turns true. Besides the lost token, it wakes at the key's end as the lease
    /// table keeps it, which renewals and re-entries move, and checks again.
    pub(crate) fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let token = self.client.leases.lost_token(&self.ticket);
        // Weak: the future may outlive the client, and must not keep its table.
        let leases = Arc::downgrade(&self.client.leases);
        let ticket = self.ticket.clone();
        let own_end = self.lease_ends;
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

    pub(crate) fn lost_token(&self) -> CancellationToken {
        self.client.leases.lost_token(&self.ticket)
    }

    /// Read from the clock too (the key's end, and this hold's own fixed lease), so that a
    /// holder that was paused knows at once when it resumes.
    pub(crate) fn is_lost(&self) -> bool {
        self.client.leases.is_lost(&self.ticket)
            || self.lease_ends.is_some_and(|end| Instant::now() >= end)
    }

    /// Records that the hold's key had its TTL set again on the server, to `lease_ms` by a
    /// command sent at `sent_at`, so that `is_lost`, `lost` and a partial release's re-arm use
    /// the new end. Generic: for any primitive that resets the TTL of holds it took (the
    /// MultiLock's "lease recalculation", say). A watchdog hold keeps its lease kind: the
    /// watchdog keeps renewing it (before the new end, if that is sooner).
    pub(crate) fn relet(&mut self, lease_ms: u64, sent_at: Instant) {
        // The key's TTL is the table's business whatever this hold's lease.
        self.client.leases.relet(&self.ticket, lease_ms, sent_at);
        if self.ticket.lease == Lease::Watchdog {
            return;
        }
        self.lease_ends = sent_at.checked_add(Duration::from_millis(lease_ms));
        self.ticket.lease = Lease::Fixed(lease_ms);
    }

    pub(crate) fn field(&self) -> &str {
        &self.ticket.key.field
    }

    pub(crate) fn lease(&self) -> Lease {
        self.ticket.lease
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let call = self.client.leases.doubts.enter();
        let released = self.client.leases.dropped(&self.ticket);
        if released.lost {
            return;
        }
        let release = Release::of(&self.ticket.key, released.rearm_ms, self.release_by);
        self.client
            .janitor
            .submit(Job::Release(release, Some(call)));
    }
}
