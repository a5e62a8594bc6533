//! `CompositeSampler`: a composable sampler's intent turned into the SDK's decision.

use std::borrow::Cow;

use opentelemetry::trace::{Link, SpanKind, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

use crate::composable::parent::{trace_state, with_span_context};
use crate::composable::{ComposableSampler, SamplingIntent};
use crate::sampler::{erase_threshold, randomness, with_threshold};

/// The [`ShouldSample`] over a [`ComposableSampler`] (the specification's
/// `CompositeSampler`). For each span it:
///
/// 1. asks the delegate for its [`SamplingIntent`];
/// 2. reads the trace's randomness: the `rv` sub-key of the parent's `ot` trace-state
///    entry when it is 14 hex digits, else the low 56 bits of the trace id;
/// 3. keeps the span (`RecordAndSample`) iff the intent has a threshold and the
///    randomness is at least that threshold; otherwise drops it (`Drop`, never
///    `RecordOnly`);
/// 4. gives a kept span the intent's attributes, and the parent's trace state passed
///    through the intent's updater, with `th` set to the threshold when the threshold
///    is reliable and erased when it is not (`rv` and other sub-keys and vendors'
///    entries stay);
/// 5. gives a dropped span no attributes and the parent's trace state (through the
///    updater, if the intent has one) with `th` erased.
///
/// A drop allocates nothing when the parent's trace state is empty (every root) and
/// the intent has no trace-state updater (no built-in has one): the intent is made of
/// constants and shared providers, and the attributes provider is not asked. A
/// non-empty parent trace state is cloned into the result, as for any sampler.
///
/// ```
/// use opentelemetry_sdk::trace::SdkTracerProvider;
/// use otel_rate_sampler::{
///     ComposableParentThreshold, ComposableProbability, CompositeSampler,
/// };
///
/// let root = ComposableProbability::new(0.25)?;
/// let sampler = CompositeSampler::new(ComposableParentThreshold::new(root));
/// let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
/// # Ok::<(), otel_rate_sampler::ComposableError>(())
/// ```
#[derive(Clone, Debug)]
pub struct CompositeSampler<C> {
    delegate: C,
}

impl<C: ComposableSampler> CompositeSampler<C> {
    /// A sampler deciding by `delegate`'s intents.
    pub const fn new(delegate: C) -> Self {
        Self { delegate }
    }

    /// The composable sampler this one asks.
    pub fn delegate(&self) -> &C {
        &self.delegate
    }
}

impl<C: ComposableSampler + Clone + 'static> ShouldSample for CompositeSampler<C> {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let intent = self.delegate.sampling_intent(
            parent_context,
            trace_id,
            name,
            span_kind,
            attributes,
            links,
        );
        with_span_context(parent_context, |sc| {
            decide(&intent, trace_id, trace_state(sc))
        })
    }
}

/// Steps 2 to 5 of [`CompositeSampler`]'s docs.
#[inline]
pub(crate) fn decide(
    intent: &SamplingIntent,
    trace_id: TraceId,
    parent_state: &TraceState,
) -> SamplingResult {
    let kept = intent
        .threshold()
        .filter(|t| t.keeps(randomness(trace_id, parent_state)));
    let Some(threshold) = kept else {
        return SamplingResult {
            decision: SamplingDecision::Drop,
            attributes: Vec::new(),
            trace_state: erase_threshold(&updated(intent, parent_state)),
        };
    };
    let mut attributes = Vec::new();
    if let Some(provider) = intent.attributes_provider() {
        provider.provide(&mut attributes);
    }
    let state = updated(intent, parent_state);
    let trace_state = if intent.threshold_reliable() {
        with_threshold(&state, threshold.0)
    } else {
        erase_threshold(&state)
    };
    SamplingResult {
        decision: SamplingDecision::RecordAndSample,
        attributes,
        trace_state,
    }
}

/// The parent's trace state after the intent's updater (borrowed when there is none).
fn updated<'a>(intent: &SamplingIntent, parent_state: &'a TraceState) -> Cow<'a, TraceState> {
    match intent.trace_state_updater() {
        Some(updater) => Cow::Owned(updater.update(parent_state.clone())),
        None => Cow::Borrowed(parent_state),
    }
}

// Its tests decide through the test support's composite sampler, so they sit apart.
#[cfg(all(test, not(loom)))]
mod tests;
