//! The `ComposableSampler` trait.

use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind};
use opentelemetry::{Context, KeyValue};

use crate::composable::SamplingIntent;

/// A sampler that states an intent rather than a decision (the specification's
/// `ComposableSampler`, operation `GetSamplingIntent`), to be composed with others and
/// decided by a [`CompositeSampler`](crate::CompositeSampler).
///
/// The specification's arguments: "All of the original Sampler API parameters except
/// `traceId` are included": those of
/// [`ShouldSample`](opentelemetry_sdk::trace::ShouldSample) but the trace id (the SDK
/// passes a parent context for a root too, whose span context is invalid). The trace id
/// often carries the trace's randomness, and the threshold must not depend on it; the
/// `CompositeSampler` alone compares the two.
///
/// "ComposableSamplers MUST NOT modify the parameters passed to delegate
/// GetSamplingIntent methods, as they are considered read-only state", and MUST NOT
/// change the `ot` trace-state entry (see [`TraceStateUpdater`](crate::TraceStateUpdater)).
pub trait ComposableSampler: fmt::Debug + Send + Sync {
    /// The intent for the span about to start (the specification's
    /// `GetSamplingIntent`).
    fn sampling_intent(
        &self,
        parent: Option<&Context>,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingIntent<'_>;
}

macro_rules! forward {
    ($($ty:ty),*) => {$(
        impl<T: ComposableSampler + ?Sized> ComposableSampler for $ty {
            #[inline]
            fn sampling_intent(
                &self,
                parent: Option<&Context>,
                name: &str,
                kind: &SpanKind,
                attributes: &[KeyValue],
                links: &[Link],
            ) -> SamplingIntent<'_> {
                (**self).sampling_intent(parent, name, kind, attributes, links)
            }
        }
    )*};
}

forward!(Arc<T>, Box<T>, &T);
