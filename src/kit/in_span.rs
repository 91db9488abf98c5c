//! An acquire's future inside its `ferrisson.acquire` span, at 8 bytes of the future rather than
//! the 40 of `tracing`'s `Instrumented`: every parked waiter's task keeps this wrapper, and most
//! services run with the span disabled (`debug`), which then costs nothing at all.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tracing::Span;

pin_project_lite::pin_project! {
    /// `inner`, polled inside `span` (absent when the span is disabled). Unlike `Instrumented`,
    /// dropping the future does not enter the span.
    pub(crate) struct InSpan<F> {
        #[pin]
        inner: F,
        span: Option<Box<Span>>,
    }
}

/// `inner` polled inside `span`.
pub(crate) fn in_span<F: Future>(inner: F, span: Span) -> InSpan<F> {
    InSpan {
        inner,
        span: (!span.is_disabled()).then(|| Box::new(span)),
    }
}

impl<F: Future> Future for InSpan<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.as_deref().map(Span::enter);
        this.inner.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::in_span;

    /// An event logged while the future is polled is inside the span; a disabled span is not
    /// kept at all.
    #[test]
    fn the_inner_future_runs_inside_the_span() {
        let recorder = Recorder::default();
        let seen = Arc::clone(&recorder.seen);
        tracing::subscriber::with_default(recorder, || {
            tracing::info!("before");
            let fut = in_span(
                async { tracing::info!("inside") },
                tracing::info_span!("outer"),
            );
            futures::executor::block_on(fut);
            tracing::info!("after");
        });
        let seen = seen.lock().map(|seen| seen.clone()).unwrap_or_default();
        assert_eq!(seen, ["out:before", "in:inside", "out:after"]);
        let disabled = in_span(std::future::ready(()), tracing::Span::none());
        assert!(disabled.span.is_none());
    }

    /// Records each event's message, marked `in` while a span is entered.
    #[derive(Default)]
    struct Recorder {
        seen: Arc<Mutex<Vec<String>>>,
        entered: Mutex<bool>,
    }

    impl tracing::Subscriber for Recorder {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut message = String::new();
            event.record(
                &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                    if field.name() == "message" {
                        message = format!("{value:?}");
                    }
                },
            );
            let entered = self.entered.lock().map(|entered| *entered).unwrap_or(false);
            let place = if entered { "in" } else { "out" };
            if let Ok(mut seen) = self.seen.lock() {
                seen.push(format!("{place}:{message}"));
            }
        }
        fn enter(&self, _: &tracing::span::Id) {
            if let Ok(mut entered) = self.entered.lock() {
                *entered = true;
            }
        }
        fn exit(&self, _: &tracing::span::Id) {
            if let Ok(mut entered) = self.entered.lock() {
                *entered = false;
            }
        }
    }
}
