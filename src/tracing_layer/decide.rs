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
use super::mark::{dropped_ancestor, is_dropped, Dropped, Known, Mark};

impl<L> SkipDropped<L> {
    /// Has the inner layer start `id`'s OpenTelemetry span if it has not yet, and reads
    /// whether it records; `None` for a span the inner layer does not know.
    pub(super) fn start_and_read(&self, id: &Id) -> Option<Mark> {
        let dispatch = self.dispatch.get().and_then(WeakDispatch::upgrade)?;
        tracing_opentelemetry::get_otel_context(id, &dispatch).map(|cx| Mark::of_started(&cx))
    }

    /// Marks `id` skipped, in the dropped trace of `cx`.
    pub(super) fn mark_skipped<S>(id: &Id, cx: Dropped, ctx: &Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Mark::Skipped(cx));
        }
    }

    /// Whether `id`'s trace was dropped, so the inner layer must not hear of its records,
    /// events and links: pending on this thread, or marked so. A skipped span pending
    /// on another thread (recorded here while its trace's scope is still open there)
    /// is not known so here: its record reaches the inner layer, which finds nothing of
    /// it and records nothing.
    pub(super) fn is_dropped<S>(&self, id: &Id, ctx: &Context<'_, S>) -> bool
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        entered::is_pending(self.key, id) || is_dropped(ctx.span(id))
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
                        return entered::enter_skipped(self.key, id, cx);
                    }
                    Known::Forwarded(dropped) => dropped,
                },
                None => None,
            },
        };
        entered::enter_forwarded(self.key, id, dropped);
    }

    /// What the layer knows of `span`, reading its decision if it has none yet (the
    /// inner layer starts the span if it has not). An unmarked span the inner layer does
    /// not know is skipped if it is pending on this thread, or if an ancestor is a
    /// dropped trace's (pending on the thread whose scope it was made in), else kept
    /// (filtered away from the inner layer: everything of it is forwarded, as without
    /// this layer).
    pub(super) fn known<S>(&self, span: &SpanRef<'_, S>) -> Known
    where
        S: for<'a> LookupSpan<'a>,
    {
        let mark = span.extensions().get::<Mark>().cloned();
        let mark = match mark {
            Some(Mark::Skipped(cx)) => return Known::Skipped(cx),
            Some(mark) => mark,
            None => {
                if let Some(cx) = entered::pending(self.key, &span.id()) {
                    return Known::Skipped(cx);
                }
                let mark = match self.start_and_read(&span.id()) {
                    Some(mark) => mark,
                    None => match dropped_ancestor(span) {
                        Some(cx) => Mark::Skipped(cx),
                        None => Mark::Kept,
                    },
                };
                Self::mark(span, mark.clone());
                if let Mark::Skipped(cx) = mark {
                    return Known::Skipped(cx);
                }
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
