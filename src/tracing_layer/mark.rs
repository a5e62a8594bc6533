//! What the layer knows of a span's trace: a [`Mark`] in the span's extensions.

use std::sync::Arc;

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::Context as OtelContext;
use tracing_subscriber::registry::{LookupSpan, SpanRef};

/// A dropped trace's context, shared by the marks and entered spans of the trace: one
/// reference count to move per copy, where the context itself has two.
pub(super) type Dropped = Arc<OtelContext>;

/// A span's place in its trace, as [`SkipDropped`](super::SkipDropped) tracks it.
///
/// Spans of kept traces carry no mark: the layer learns they are kept from the context
/// the inner layer attaches on their enter, with no lookup.
#[derive(Debug, Clone)]
pub(super) enum Mark {
    /// A root whose OpenTelemetry span records (kept, or recorded without being
    /// sampled), or one the inner layer does not know (filtered away from it): the
    /// inner layer sees everything of its trace, as without this layer.
    Kept,
    /// A span the inner layer saw whose OpenTelemetry span does not record (a dropped
    /// trace's root): the inner layer keeps its enters and exits (to start that span
    /// and detach its context), nothing else of the trace.
    DroppedRoot(Dropped),
    /// A span below a dropped root: the inner layer never sees it. Its context is the
    /// dropped root's, which propagates the trace id with the sampled flag off.
    Skipped(Dropped),
}

impl Mark {
    /// The mark of a root whose OpenTelemetry span was started in `cx`.
    pub(super) fn of_started(cx: &OtelContext) -> Self {
        if cx.has_active_span() && !cx.span().is_recording() {
            Mark::DroppedRoot(Arc::new(cx.clone()))
        } else {
            Mark::Kept
        }
    }

    /// The context of the dropped trace this span belongs to, if it was dropped.
    pub(super) fn dropped(&self) -> Option<&Dropped> {
        match self {
            Mark::DroppedRoot(cx) | Mark::Skipped(cx) => Some(cx),
            Mark::Kept => None,
        }
    }

    /// Whether the inner layer must not see this span's records, events and links.
    pub(super) fn is_dropped(&self) -> bool {
        self.dropped().is_some()
    }
}

/// A span's trace as `SkipDropped::known` finds it.
pub(super) enum Known {
    /// Below a dropped root: the inner layer never saw it.
    Skipped(Dropped),
    /// Seen by the inner layer: kept (`None`), or a dropped trace's root.
    Forwarded(Option<Dropped>),
}

/// Whether `span`'s trace was dropped: what the inner layer must not hear about it.
pub(super) fn is_dropped<S: for<'a> LookupSpan<'a>>(span: Option<SpanRef<'_, S>>) -> bool {
    span.is_some_and(|span| {
        span.extensions()
            .get::<Mark>()
            .is_some_and(Mark::is_dropped)
    })
}

/// The dropped trace's context of `span`'s nearest marked ancestor, if it has one and it
/// belongs to a dropped trace: what an unmarked span below it (pending on the thread it
/// was created on) is skipped in.
pub(super) fn dropped_ancestor<S>(span: &SpanRef<'_, S>) -> Option<Dropped>
where
    S: for<'a> LookupSpan<'a>,
{
    let mut ancestor = span.parent();
    while let Some(span) = ancestor {
        if let Some(mark) = span.extensions().get::<Mark>() {
            return mark.dropped().cloned();
        }
        ancestor = span.parent();
    }
    None
}
