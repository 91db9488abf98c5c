//! What the lease layer runs on the lock family's hashes without knowing their layouts: the
//! watchdog's batched renewal (`src/lease/watchdog.rs`) and the settling of a holder field in
//! doubt (`src/lease/doubt.rs`). The client hands both over at connect.
//!
//! Each is one script for every layout of the reentrant lock's hash (a batch mixes locks of
//! every kind). The renewal also renews a read hold's own timeout keys (a hash with `mode`).
//! The settling serves every layout of the reentrant lock's hash, told apart by what it finds on
//! the server: a hold key is only a name and a field, one owner may hold one hash through
//! several of these locks, and the layout on the server is what the lock's waiters listen by.
//! A hash with `mode` is a read-write lock (its read holds' timeout keys go with them, a hash
//! without live holders is deleted, the rwlock channel is told), a reentrant hash with a fair
//! queue is a fair lock (the queue's head is told on its own channel), any other is the
//! reentrant lock's (`0` on its channel).

use crate::lease::doubt::Settle;
use crate::name;
use crate::transport::script::Script;

/// Batched watchdog renewal (§3.2): `lua/renew.lua`.
pub(crate) static RENEW: Script = Script::new("renew", include_str!("../../lua/renew.lua"));

/// The scripts above, for loading them at connect.
pub(crate) static SCRIPTS: [&Script; 2] = [&RENEW, &RECONCILE];

/// `lua/reconcile.lua` with the parts of the layouts it settles.
static RECONCILE: Script = Script::new(
    "reconcile",
    concat!(
        include_str!("../../lua/lib/publish.lua"),
        include_str!("../../lua/lib/fair_prune.lua"),
        include_str!("../../lua/lib/read_hold_gone.lua"),
        include_str!("../../lua/reconcile.lua")
    ),
);

/// What the client's reconciler runs on a holder field in doubt.
pub(crate) static SETTLE: Settle = Settle {
    script: &RECONCILE,
    keys: |name| vec![name.to_owned(), name::lock_channel(name)],
    // The other layouts' names go as arguments: see the script's header on ACLs.
    layout_args: |name| {
        vec![
            name::rwlock_channel(name),
            name::fair_queue_key(name),
            name::fair_timeout_key(name),
            name::tagged(name),
        ]
    },
};
