//! How [`SkipDropped`] learns a span's fate: from the context the inner layer attaches
//! on enter (no lookup), else from the span's mark, else by having the inner layer
//! start the span through the dispatcher; and a link to a dropped trace.

use opentelemetry::trace::{SpanId, TraceContextExt as _};
use opentelemetry::Context as OtelContext;
use tracing::dispatcher::WeakDispatch;
use tracing::span::Id;
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::{LookupSpan, SpanRef};

use super::entered;
use super::layer::SkipDropped;
use super::mark::{Known, Mark};

impl<L> SkipDropped<L> {
    /// Has the inner layer start `id`'s OpenTelemetry span if it has not yet, and reads
    /// whether it records. A span the inner layer does not know is `Kept`: everything
    /// of it is forwarded, as without this layer.
    pub(super) fn start_and_read(&self, id: &Id) -> Mark {
        let Some(dispatch) = self.dispatch.get().and_then(WeakDispatch::upgrade) else {
            return Mark::Kept;
        };
        tracing_opentelemetry::get_otel_context(id, &dispatch)
            .map_or(Mark::Kept, |cx| Mark::of_started(&cx))
    }

    /// Records `span`'s fate read after its enter: `mark` replaces any mark it had.
    pub(super) fn mark<S>(span: &SpanRef<'_, S>, mark: Mark)
    where
        S: for<'a> LookupSpan<'a>,
    {
        let mut extensions = span.extensions_mut();
        match extensions.get_mut::<Mark>() {
            Some(slot) => *slot = mark,
            None => extensions.insert(mark),
        }
    }

    /// The enter of `id` handed to the inner layer first: a span the inner layer knows
    /// attaches its started context (context activation, its default), whose sampled
    /// flag tells a kept span with no lookup. Looks the span up only when that context
    /// does not record, or when nothing was attached.
    pub(super) fn enter_forwarding_first<S>(&self, id: &Id, ctx: Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        L: Layer<S>,
    {
        let before = current_span_id();
        self.inner.on_enter(id, ctx.clone());
        let started = OtelContext::map_current(|cx| {
            let span = cx.span();
            let span_cx = span.span_context();
            if span_cx.span_id() == before {
                None
            } else if span_cx.is_sampled() {
                Some(Mark::Kept)
            } else {
                Some(Mark::of_started(cx))
            }
        });
        let dropped = match started {
            Some(Mark::Kept) => None,
            Some(mark) => {
                let dropped = mark.dropped().cloned();
                if let Some(span) = ctx.span(id) {
                    Self::mark(&span, mark);
                }
                dropped
            }
            // Nothing attached: a skipped span (the inner layer found nothing to
            // enter), one the inner layer does not know, or context activation off.
            None => match ctx.span(id) {
                Some(span) => match self.known(&span) {
                    Known::Skipped(cx) => {
                        return entered::enter_skipped(self.key, id, &cx);
                    }
                    Known::Forwarded(dropped) => dropped,
                },
                None => None,
            },
        };
        entered::enter_forwarded(self.key, id, dropped);
    }

    /// What the layer knows of `span`, reading its decision if it has none yet (the
    /// inner layer starts the span if it has not).
    pub(super) fn known<S>(&self, span: &SpanRef<'_, S>) -> Known
    where
        S: for<'a> LookupSpan<'a>,
    {
        let mark = span.extensions().get::<Mark>().cloned();
        let mark = match mark {
            Some(Mark::Skipped(cx)) => return Known::Skipped(cx),
            Some(mark) => mark,
            None => {
                let mark = self.start_and_read(&span.id());
                Self::mark(span, mark.clone());
                mark
            }
        };
        Known::Forwarded(mark.dropped().cloned())
    }

    /// Links `id`'s OpenTelemetry span to the dropped trace of `cx`.
    pub(super) fn link(&self, id: &Id, cx: &OtelContext) {
        let Some(dispatch) = self.dispatch.get().and_then(WeakDispatch::upgrade) else {
            return;
        };
        if let Some(span_cx) = tracing_opentelemetry::get_otel_context(id, &dispatch) {
            span_cx
                .span()
                .add_link(cx.span().span_context().clone(), Vec::new());
        }
    }
}

/// The span id of the current OpenTelemetry context (invalid when it has no span).
pub(super) fn current_span_id() -> SpanId {
    OtelContext::map_current(|cx| cx.span().span_context().span_id())
}
