//! The parent policy both samplers share: roots (and, under [`RemoteParents::Cap`],
//! sampled remote parents) are decided by the sampler; every other span follows its
//! parent's sampled flag. Refusals are always `Drop`.

use opentelemetry::trace::{SpanContext, TraceContextExt, TraceState};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult};

use crate::stats::{self, Counters, DropReason, Event, ParentOrigin};

/// What the sampler does with a span whose parent came from another process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemoteParents {
    /// Follow the parent's sampled flag (the default): traces that cross services stay
    /// whole, and the upstream's sampler decides how many of them there are. This
    /// process's cap then bounds only the traces that start here.
    #[default]
    Follow,
    /// Ask this process's limiter for every sampled remote parent as well, so the cap
    /// holds for all traces this process exports, wherever they started. The cost: a
    /// trace the upstream kept and this service refuses arrives at the backend broken
    /// (the upstream's spans without this service's). Unsampled remote parents are still
    /// dropped.
    Cap,
}

/// Where the span being sampled comes from, for a span the sampler decides itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// No valid parent: a root.
    Root,
    /// A sampled parent from another process, capped by [`RemoteParents::Cap`].
    Remote,
}

impl From<Origin> for ParentOrigin {
    #[inline]
    fn from(origin: Origin) -> Self {
        match origin {
            Origin::Root => ParentOrigin::Root,
            Origin::Remote => ParentOrigin::Remote,
        }
    }
}

/// Applies the parent policy: `decide(origin, parent_trace_state)` runs only for a span
/// this process decides (and counts it); the others follow their parent or are dropped,
/// and are counted in `counters` (if counting is on).
#[inline]
pub(crate) fn apply(
    parent_context: Option<&Context>,
    remote_parents: RemoteParents,
    counters: Option<&Counters>,
    decide: impl FnOnce(Origin, &TraceState) -> SamplingResult,
) -> SamplingResult {
    let span = parent_context.map(|cx| cx.span());
    let Some(parent) = span.as_ref().map(|s| s.span_context()) else {
        return decide(Origin::Root, &TraceState::NONE);
    };
    if !parent.is_valid() {
        // A root: the SDK passes a context whose span context is invalid.
        return decide(Origin::Root, parent.trace_state());
    }
    let origin = if parent.is_remote() {
        ParentOrigin::Remote
    } else {
        ParentOrigin::Local
    };
    match (parent.is_remote(), remote_parents) {
        (false, _) | (true, RemoteParents::Follow) => {
            let result = follow(parent);
            let event = match result.decision {
                SamplingDecision::RecordAndSample => Event::kept(origin),
                _ => Event::dropped(DropReason::Parent, origin),
            };
            stats::record(counters, event);
            result
        }
        (true, RemoteParents::Cap) if parent.is_sampled() => {
            decide(Origin::Remote, parent.trace_state())
        }
        (true, RemoteParents::Cap) => {
            stats::record(counters, Event::dropped(DropReason::Parent, origin));
            drop_span(parent.trace_state())
        }
    }
}

/// A refusal: `Drop` (never `RecordOnly`), no attributes, the parent's trace state.
#[inline]
pub(crate) fn drop_span(parent_state: &TraceState) -> SamplingResult {
    // A clone of an empty trace state (every root's) does not allocate. Cloned before
    // the result is built: built first, the empty `Vec` was kept on the stack for the
    // clone's unwinding and copied out in halves of what was written in words, a
    // store-forwarding stall measured at ~5 ns per refusal.
    let trace_state = parent_state.clone();
    SamplingResult {
        decision: SamplingDecision::Drop,
        attributes: Vec::new(),
        trace_state,
    }
}

#[inline]
fn follow(parent: &SpanContext) -> SamplingResult {
    if parent.is_sampled() {
        SamplingResult {
            decision: SamplingDecision::RecordAndSample,
            attributes: Vec::new(),
            trace_state: parent.trace_state().clone(),
        }
    } else {
        drop_span(parent.trace_state())
    }
}
