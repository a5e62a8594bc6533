//! `CompositeSampler`: a composable sampler's intent turned into the SDK's decision.

use std::borrow::Cow;

use opentelemetry::trace::{Link, SpanContext, SpanKind, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

use crate::composable::fresh;
use crate::composable::parent::{origin, trace_state, with_span_context};
use crate::composable::{ComposableSampler, SamplingIntent};
use crate::sampler::{erase_threshold, randomness, with_threshold};

/// The [`ShouldSample`] over a [`ComposableSampler`] (the specification's
/// `CompositeSampler`). For each span it takes the specification's steps, in order
/// (each quoted, and checked by a test of that name in `composite/tests.rs`):
///
/// 1. "The sampler calls `GetSamplingIntent` on the delegate": its
///    [`sampling_intent`](ComposableSampler::sampling_intent), without the trace id.
/// 2. "If the received THRESHOLD value is `null`, the sampling decision is `DROP`".
/// 3. "The sampler checks the received `adjusted_count_reliable`, and in case of `true`
///    derives the Randomness value R from the TraceState or TraceId": the `rv` sub-key
///    of the parent's `ot` trace-state entry when it is 14 hex digits, else the low 56
///    bits of the trace id; "and in case of `false` it generates a new Randomness value
///    R by hex-encoding a new random 56-bit number" (a thread's own stream: no shared
///    write).
/// 4. "The sampler compares [...] the received THRESHOLD value with the Randomness
///    value R to arrive at the final sampling `Decision`": kept (`RecordAndSample`) iff
///    R ≥ THRESHOLD, else dropped (`Drop`, never `RecordOnly`). Ours, after the
///    comparison: a hard cap the intent carries (from
///    [`ComposableRateLimiting`](crate::ComposableRateLimiting)) may still drop a span
///    the threshold keeps.
/// 5. "The sampler calls the received `trace_state_provider` function passing the parent
///    `Tracestate` and the final sampling `Decision`" (the intent's
///    [`TraceStateUpdater`](crate::TraceStateUpdater), kept or dropped).
/// 6. "In case of positive sampling decision": the intent's attributes, and "if the
///    `adjusted_count_reliable` is `true` it modifies the `th` value for the `ot` key in
///    the `Tracestate` according to the received THRESHOLD; if the returned value was
///    `false`, it removes the `th` value" (`rv`, the other sub-keys and vendors'
///    entries stay).
/// 7. "In case of negative sampling decision, it removes the `th` value for the `ot`
///    key from the `Tracestate`"; no attributes.
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
        // Step 1: no trace id for the delegate.
        let intent =
            self.delegate
                .sampling_intent(parent_context, name, span_kind, attributes, links);
        with_span_context(parent_context, |sc| decide(&intent, trace_id, sc))
    }
}

/// Steps 2 to 7 of [`CompositeSampler`]'s docs, under the parent's span context `sc`.
#[inline]
fn decide(intent: &SamplingIntent, trace_id: TraceId, sc: Option<&SpanContext>) -> SamplingResult {
    let parent_state = trace_state(sc);
    let reliable = intent.adjusted_count_reliable();
    // Step 2: no threshold, no randomness read.
    let kept = intent.threshold().is_some_and(|threshold| {
        // Step 3.
        let r = if reliable {
            randomness(trace_id, parent_state)
        } else {
            fresh::randomness()
        };
        // Step 4.
        threshold.keeps(r)
    });
    let kept = match intent.admission() {
        Some(admission) => admission.admit(kept, origin(sc)),
        None => kept,
    };
    // A threshold, when kept: an admission never keeps what the threshold dropped.
    let threshold = match intent.threshold() {
        Some(threshold) if kept => threshold,
        _ => {
            // Steps 5 and 7.
            let state = updated(intent, parent_state, SamplingDecision::Drop);
            return SamplingResult {
                decision: SamplingDecision::Drop,
                attributes: Vec::new(),
                trace_state: erase_threshold(&state),
            };
        }
    };
    // Step 5.
    let state = updated(intent, parent_state, SamplingDecision::RecordAndSample);
    // Step 6.
    let mut attributes = Vec::new();
    if let Some(provider) = intent.attributes_provider() {
        provider.provide(&mut attributes);
    }
    let trace_state = if reliable {
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

/// The parent's trace state after the intent's updater, told the final `decision`
/// (borrowed when there is none).
fn updated<'a>(
    intent: &SamplingIntent,
    parent_state: &'a TraceState,
    decision: SamplingDecision,
) -> Cow<'a, TraceState> {
    match intent.trace_state_updater() {
        Some(updater) => Cow::Owned(updater.update(parent_state.clone(), decision)),
        None => Cow::Borrowed(parent_state),
    }
}

// Its tests decide through the test support's composite sampler, so they sit apart.
#[cfg(all(test, not(loom)))]
mod tests;
