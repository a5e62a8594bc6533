//! The `ComposableSampler` trait.

use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};

use crate::composable::SamplingIntent;

/// A sampler that states an intent rather than a decision (the specification's
/// `ComposableSampler`, operation `GetSamplingIntent`), to be composed with others and
/// decided by a [`CompositeSampler`](crate::CompositeSampler).
///
/// The inputs are those of [`ShouldSample`](opentelemetry_sdk::trace::ShouldSample)
/// (the SDK passes a parent context for a root too, whose span context is invalid). A
/// composable sampler MUST NOT change what it hands its delegates, and MUST NOT change
/// the `ot` trace-state entry (the specification's rules).
pub trait ComposableSampler: fmt::Debug + Send + Sync {
    /// The intent for the span about to start.
    fn sampling_intent(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingIntent;
}

macro_rules! forward {
    ($($ty:ty),*) => {$(
        impl<T: ComposableSampler + ?Sized> ComposableSampler for $ty {
            #[inline]
            fn sampling_intent(
                &self,
                parent: Option<&Context>,
                trace_id: TraceId,
                name: &str,
                kind: &SpanKind,
                attributes: &[KeyValue],
                links: &[Link],
            ) -> SamplingIntent {
                (**self).sampling_intent(parent, trace_id, name, kind, attributes, links)
            }
        }
    )*};
}

forward!(Arc<T>, Box<T>, &T);
