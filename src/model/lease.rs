//! Checks of the lease layer's concurrent state: the doubt epochs (`lease/doubt.rs`) and the
//! lease table's generations (`lease/watchdog.rs`), under the same scheduler and harness as the
//! lock checks (`checks.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use shuttle::future;
use tokio_util::sync::CancellationToken;

use super::checks::{check, failure_of, iterations};
use crate::lease::doubt::Doubts;
use crate::lease::watchdog::HoldKey;

fn key(name: &str) -> HoldKey {
    HoldKey {
        name: name.into(),
        field: "client:1".into(),
    }
}

/// A scheduling point for the code under test: an atomic operation of shuttle's, which its
/// schedulers (PCT included) treat as a place to switch tasks.
fn switch_point() -> (
    Arc<shuttle::sync::atomic::AtomicUsize>,
    Box<dyn Fn() + Send + Sync>,
) {
    let counter = Arc::new(shuttle::sync::atomic::AtomicUsize::new(0));
    let switch = {
        let counter = Arc::clone(&counter);
        Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
    };
    (counter, switch)
}

/// Lock-changing calls (two tasks, two calls each) and the reconciler's rounds (a doubt put on
/// a field, then the drain of the calls that may not have seen it) cross each other. The
/// property the reconciler relies on before it reads the client's count: once `drain` returns,
/// no call that looked for the doubt and did not find it is still in flight (its reply not yet
/// handled). Each round uses another field, so that the two epoch slots are reused.
/// `register_first` is the real order (a call registers, then looks); the other order is the
/// defect the epochs exist to rule out.
async fn epochs(register_first: bool) {
    let (counter, switch) = switch_point();
    let doubts = Doubts::with_switch(CancellationToken::new(), switch);
    let fields = [key("orders:1"), key("orders:2")];
    // Per round: calls in flight that did not see that round's doubt.
    let unseen: Arc<[AtomicUsize; 2]> = Arc::new(Default::default());
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let (doubts, fields, unseen) =
                (Arc::clone(&doubts), fields.clone(), Arc::clone(&unseen));
            let counter = Arc::clone(&counter);
            future::spawn(async move {
                for _ in 0..2 {
                    let mut call = register_first.then(|| doubts.enter());
                    let seen = fields.clone().map(|field| doubts.contains(&field));
                    for (round, seen) in seen.iter().enumerate() {
                        if !seen {
                            unseen[round].fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    if call.is_none() {
                        call = Some(doubts.enter());
                    }
                    // The call's round trip: the reconciler may run meanwhile.
                    counter.fetch_add(1, Ordering::SeqCst);
                    for (round, seen) in seen.iter().enumerate() {
                        if !seen {
                            unseen[round].fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                    drop(call);
                }
            })
        })
        .collect();
    let reconciler = {
        let (doubts, unseen) = (Arc::clone(&doubts), Arc::clone(&unseen));
        future::spawn(async move {
            for (round, field) in fields.iter().enumerate() {
                doubts.mark(field);
                doubts.drain().await;
                assert_eq!(
                    unseen[round].load(Ordering::SeqCst),
                    0,
                    "round {round}: the drain ended while a call that did not see the doubt \
                     was in flight"
                );
            }
        })
    };
    for caller in callers {
        caller.await.expect("a caller");
    }
    reconciler.await.expect("the reconciler");
}

/// The doubt epochs: a drain waits for every call that may not have seen the doubt.
#[test]
fn a_drain_outlasts_every_call_that_missed_the_doubt() {
    check(7, iterations(), || epochs(true));
}

/// The check can fail: with calls that look for a doubt before they register, some schedule
/// ends a drain while such a call is in flight.
#[test]
fn the_model_finds_a_call_that_looks_before_it_registers() {
    let message = failure_of(
        || check(7, iterations(), || epochs(false)),
        "no schedule ended a drain under a call that missed the doubt",
    );
    assert!(message.contains("the drain ended"), "{message}");
}

/// How the watchdog's "not held" reply reaches the table in [`generations`].
#[derive(Clone, Copy)]
enum Reply {
    /// As the watchdog does: for the generation the renewal was sent for.
    OfItsGeneration,
    /// The defect generations rule out: for whatever holds the key when the reply arrives.
    OfTheKeyNow,
}

/// An owner releases its hold and takes the lock again (a new registration of the same key),
/// while the watchdog's renewal of a hold it was told to track is in flight and comes back
/// "not held" (the server lost it: a force unlock, a restart). The reply concerns the hold it
/// was sent for: a later hold of the same key is neither lost by it nor released twice, and
/// every hold is counted once (each release finds exactly the hold it registered, lost only if
/// the reply was about that very hold).
async fn generations(reply: Reply) {
    let doubts = Doubts::new(CancellationToken::new());
    let table = crate::lease::watchdog::LeaseTable::detached(30_000, doubts);
    let (counter, _) = switch_point();
    let switch = {
        let counter = Arc::clone(&counter);
        move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    };
    let field = key("orders:42");
    // The generation the watchdog's reply was about (0: none yet).
    let told = Arc::new(AtomicUsize::new(0));
    let holder = {
        let (table, field, told) = (Arc::clone(&table), field.clone(), Arc::clone(&told));
        future::spawn(async move {
            for _ in 0..2 {
                let lease = crate::lease::watchdog::Lease::Watchdog;
                let (ticket, reentered) =
                    table.acquired(&field, lease, tokio::time::Instant::now());
                assert!(!reentered, "a hold after a release is a fresh one");
                switch();
                let released = table.released(&ticket);
                let ours = told.load(Ordering::SeqCst) == ticket.generation as usize;
                assert_eq!(
                    released.lost,
                    ours,
                    "hold {}: lost by the reply about hold {}",
                    ticket.generation,
                    told.load(Ordering::SeqCst)
                );
                switch();
            }
            assert!(
                table.holds_of("orders:42").is_empty(),
                "nothing left counted"
            );
        })
    };
    let watchdog = {
        let (table, field) = (Arc::clone(&table), field.clone());
        future::spawn(async move {
            // Told at a grid tick after some acquire (the latest hold, if it was told of two).
            let generation = loop {
                if let Some(generation) = table.take_tracked().into_iter().last() {
                    break generation;
                }
                future::yield_now().await;
            };
            // The renewal's round trip.
            counter.fetch_add(1, Ordering::SeqCst);
            told.store(generation as usize, Ordering::SeqCst);
            match reply {
                Reply::OfItsGeneration => table.renewal_not_held(&field, generation),
                Reply::OfTheKeyNow => table.lost_on_server(&field),
            }
        })
    };
    watchdog.await.expect("the watchdog");
    holder.await.expect("the holder");
}

/// The lease table's generations: a reply about one hold never touches a later hold of the key.
#[test]
fn a_renewal_reply_concerns_only_the_hold_it_was_sent_for() {
    check(11, iterations(), || generations(Reply::OfItsGeneration));
}

/// The check can fail: a "not held" applied to whatever holds the key when it arrives loses, in
/// some schedule, the owner's next hold.
#[test]
fn the_model_finds_a_reply_applied_to_a_later_hold() {
    let message = failure_of(
        || check(11, iterations(), || generations(Reply::OfTheKeyNow)),
        "no schedule let a reply reach a later hold",
    );
    assert!(message.contains("lost by the reply"), "{message}");
}
