//! A lock script in flight that finishes even if its caller goes away.
//!
//! Once a script is written to the connection, dropping the future that awaits its reply does not
//! stop it. `InFlight` owns the reply future; if it is dropped before the reply arrived, it hands
//! the future to the client's background task, which waits for the reply and, for an acquire that
//! turned out successful, releases that hold again. This is what makes every acquire future cancel
//! safe: a dropped acquire never leaves a lock held.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use fred::prelude::Value;
use futures::future::BoxFuture;

use crate::kit::janitor::{Janitor, Job, Release};
use crate::lease::doubt::Call;

/// What to do if an acquire's caller is gone when its reply arrives.
pub(crate) enum Undo {
    /// A hold of a hash-based lock: release `release` when `acquired` reads the reply as an
    /// acquisition (each primitive's script replies its own way).
    Release {
        release: Release,
        acquired: fn(&Value) -> bool,
    },
    /// Anything else a primitive takes (a semaphore's permits): given the reply, the future
    /// that gives it back, or `None` when the script took nothing.
    Run(GiveBack),
}

/// [`Undo::Run`]'s function: from the reply, the future that gives back what the script took.
pub(crate) type GiveBack = Box<dyn FnOnce(&Value) -> Option<BoxFuture<'static, ()>> + Send>;

pub(crate) struct InFlight {
    reply: Option<BoxFuture<'static, Result<Value, fred::error::Error>>>,
    undo: Option<Undo>,
    /// The script's registration as a lock-changing call (`doubt.rs`): kept as long as the
    /// `InFlight` (the caller drops it once it recorded the outcome), or by the janitor until
    /// the reply and the undo are handled.
    call: Option<Call>,
    janitor: Janitor,
    /// Whether the reply future was polled, i.e. the command may have been sent.
    sent: bool,
}

impl InFlight {
    /// Wraps `reply`; `undo` is the release to run if the script acquired but nobody is left
    /// to own the hold (`None` for scripts that need no undo, e.g. a release).
    pub(crate) fn new(
        reply: impl Future<Output = Result<Value, fred::error::Error>> + Send + 'static,
        undo: Option<Undo>,
        call: Option<Call>,
        janitor: Janitor,
    ) -> InFlight {
        InFlight {
            reply: Some(Box::pin(reply)),
            undo,
            call,
            janitor,
            sent: false,
        }
    }
}

impl Future for InFlight {
    type Output = Result<Value, fred::error::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(reply) = self.reply.as_mut() else {
            return Poll::Ready(Err(fred::error::Error::new(
                fred::error::ErrorKind::Unknown,
                "InFlight polled after completion",
            )));
        };
        let result = reply.as_mut().poll(cx);
        self.sent = true;
        let result = futures::ready!(result);
        self.reply = None;
        Poll::Ready(result)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // A reply future never polled never sent its command: nothing to settle.
        if let (Some(reply), true) = (self.reply.take(), self.sent) {
            self.janitor.submit(Job::Settle {
                reply,
                undo: self.undo.take(),
                call: self.call.take(),
            });
        }
    }
}
