//! What the layer knows of a span's trace: a [`Mark`] in the span's extensions.

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::Context as OtelContext;

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
    /// A root whose OpenTelemetry span does not record: the inner layer keeps its exit
    /// and close (to end that span and detach its context), nothing else of the trace.
    DroppedRoot(OtelContext),
    /// A span below a dropped root: the inner layer never sees it. Its context is the
    /// dropped root's, which propagates the trace id with the sampled flag off.
    Skipped(OtelContext),
}

impl Mark {
    /// The mark of a root whose OpenTelemetry span was started in `cx`.
    pub(super) fn of_started(cx: &OtelContext) -> Self {
        if cx.has_active_span() && !cx.span().is_recording() {
            Mark::DroppedRoot(cx.clone())
        } else {
            Mark::Kept
        }
    }

    /// The context of the dropped trace this span belongs to, if it was dropped.
    pub(super) fn dropped(&self) -> Option<&OtelContext> {
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
