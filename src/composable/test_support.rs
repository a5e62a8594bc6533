//! Parents and decisions for the composables' unit tests.

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingResult, ShouldSample};

use super::{ComposableSampler, CompositeSampler, SamplingIntent};

/// A trace id whose low 56 bits (its randomness) are `r`.
pub(crate) fn id(r: u64) -> TraceId {
    TraceId::from(u128::from(r) | (0xabcd_u128 << 64))
}

/// A parent context: `sampled`, `remote`, with the trace-state header `state`, in a
/// trace whose randomness is 1.
pub(crate) fn parent(sampled: bool, remote: bool, state: &str) -> Context {
    parent_in(1, sampled, remote, state)
}

/// A parent context as [`parent`]'s, in the trace `id(r)`.
pub(crate) fn parent_in(r: u64, sampled: bool, remote: bool, state: &str) -> Context {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let state: TraceState = state.parse().unwrap();
    Context::new().with_remote_span_context(SpanContext::new(
        id(r),
        SpanId::from(7u64),
        flags,
        remote,
        state,
    ))
}

/// The intent for a server span with these attributes.
pub(crate) fn intent<'a>(
    s: &'a impl ComposableSampler,
    parent: Option<&Context>,
    attributes: &[KeyValue],
) -> SamplingIntent<'a> {
    s.sampling_intent(parent, "span", &SpanKind::Server, attributes, &[])
}

/// The composite decision for a server span with these attributes.
pub(crate) fn decide<C: ComposableSampler + Clone + 'static>(
    s: &C,
    parent: Option<&Context>,
    r: u64,
    attributes: &[KeyValue],
) -> SamplingResult {
    CompositeSampler::new(s.clone()).should_sample(
        parent,
        id(r),
        "span",
        &SpanKind::Server,
        attributes,
        &[],
    )
}
