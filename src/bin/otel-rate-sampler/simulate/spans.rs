//! The root spans offered, and the trace ids that steer a probability's verdict.

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};
use otel_rate_sampler::{ManualClock, RuleBasedSampler};

use super::args::SimulateArgs;

/// A trace id every nonzero probability keeps: its 56 random bits (the low 56, OTEP
/// 235) are all ones, at least any rejection threshold below 2^56.
pub(super) const KEEP_ID: TraceId =
    TraceId::from_bytes([0, 0, 0, 0, 0, 0, 0, 1, 0, 255, 255, 255, 255, 255, 255, 255]);
/// A trace id every probability below 1 refuses: its 56 random bits are all zeros,
/// below any rejection threshold but that of probability 1 (zero).
pub(super) const REFUSE_ID: TraceId =
    TraceId::from_bytes([0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);

/// The spans offered.
pub(super) struct Span {
    pub(super) name: String,
    pub(super) kind: SpanKind,
    pub(super) attributes: Vec<KeyValue>,
}

impl Span {
    /// The spans `simulate` is asked to offer.
    pub(super) fn of(a: &SimulateArgs) -> Self {
        Self {
            name: a.span.clone(),
            kind: a.kind.into(),
            attributes: a
                .attrs
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect(),
        }
    }

    /// Whether `sampler` keeps a root span with this trace id.
    pub(super) fn kept(&self, sampler: &RuleBasedSampler<ManualClock>, id: TraceId) -> bool {
        self.result(sampler, id).decision == SamplingDecision::RecordAndSample
    }

    /// What `sampler` decides for a root span with this trace id.
    pub(super) fn result(&self, sampler: &impl ShouldSample, id: TraceId) -> SamplingResult {
        sampler.should_sample(None, id, &self.name, &self.kind, &self.attributes, &[])
    }
}
