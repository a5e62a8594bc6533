//! What the composables read from the parent context: its span context, its trace
//! state and where it came from.

use opentelemetry::trace::{SpanContext, TraceContextExt, TraceState};
use opentelemetry::Context;

use crate::stats::ParentOrigin;

/// Runs `f` on the parent's span context (`None` without a parent context; the SDK
/// passes one whose span context is invalid for a root).
#[inline]
pub(crate) fn with_span_context<R>(
    parent: Option<&Context>,
    f: impl FnOnce(Option<&SpanContext>) -> R,
) -> R {
    match parent {
        None => f(None),
        Some(cx) => {
            let span = cx.span();
            f(Some(span.span_context()))
        }
    }
}

/// The empty trace state, borrowed for a span without a parent context.
static EMPTY: TraceState = TraceState::NONE;

/// The parent's trace state: the empty one without a parent.
#[inline]
pub(crate) fn trace_state(span_context: Option<&SpanContext>) -> &TraceState {
    span_context.map_or(&EMPTY, SpanContext::trace_state)
}

/// Where the parent came from: none for a missing or invalid span context.
#[inline]
pub(crate) fn origin(span_context: Option<&SpanContext>) -> ParentOrigin {
    match span_context {
        Some(sc) if sc.is_valid() && sc.is_remote() => ParentOrigin::Remote,
        Some(sc) if sc.is_valid() => ParentOrigin::Local,
        _ => ParentOrigin::Root,
    }
}
