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

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;

    use opentelemetry::trace::TraceState;
    use opentelemetry::KeyValue;
    use opentelemetry_sdk::trace::SamplingDecision::{Drop, RecordAndSample};

    use super::*;
    use crate::composable::test_support::{decide as composite, id, parent};
    use crate::composable::{Threshold, TraceStateUpdater};

    /// A composable sampler returning a fixed intent.
    #[derive(Clone, Debug)]
    struct Fixed(SamplingIntent);

    impl ComposableSampler for Fixed {
        fn sampling_intent(
            &self,
            _: Option<&Context>,
            _: TraceId,
            _: &str,
            _: &SpanKind,
            _: &[KeyValue],
            _: &[Link],
        ) -> SamplingIntent {
            self.0.clone()
        }
    }

    fn half(reliable: bool) -> Fixed {
        Fixed(SamplingIntent::new(
            Threshold::from_value(1 << 55),
            reliable,
        ))
    }

    #[test]
    fn keeps_iff_the_trace_id_randomness_reaches_the_threshold_and_writes_th() {
        let at = 1u64 << 55;
        let kept = composite(&half(true), None, at, &[]);
        assert_eq!(kept.decision, RecordAndSample);
        assert_eq!(kept.trace_state.header(), "ot=th:8");
        let dropped = composite(&half(true), None, at - 1, &[]);
        assert_eq!(dropped.decision, Drop);
        assert_eq!(dropped.trace_state, TraceState::NONE);
        assert!(dropped.attributes.is_empty());
        // The trace id's high bits are not randomness.
        let high = TraceId::from((1u128 << 127) | u128::from(at - 1));
        let s = CompositeSampler::new(half(true));
        let r = s.should_sample(None, high, "x", &SpanKind::Internal, &[], &[]);
        assert_eq!(r.decision, Drop);
    }

    #[test]
    fn rv_in_the_parent_trace_state_overrides_the_trace_id() {
        // The trace id says keep (all ones); rv says 0x7f...: below 1/2's threshold.
        let p = parent(true, true, "ot=rv:7fffffffffffff;x:1,v=2");
        assert_eq!(
            composite(&half(true), Some(&p), u64::MAX >> 8, &[]).decision,
            Drop
        );
        let p = parent(true, true, "ot=rv:80000000000000;x:1,v=2");
        let kept = composite(&half(true), Some(&p), 0, &[]);
        assert_eq!(kept.decision, RecordAndSample);
        // th written first in ot; rv, other sub-keys and vendors kept.
        assert_eq!(
            kept.trace_state.header(),
            "ot=th:8;rv:80000000000000;x:1,v=2"
        );
    }

    #[test]
    fn an_unreliable_threshold_is_kept_without_th_and_th_is_erased() {
        let p = parent(true, true, "ot=th:c;rv:ffffffffffffff,v=2");
        let kept = composite(&half(false), Some(&p), 0, &[]);
        assert_eq!(kept.decision, RecordAndSample);
        assert_eq!(kept.trace_state.header(), "ot=rv:ffffffffffffff,v=2");
        // A drop erases th too.
        let p = parent(true, true, "ot=th:0;rv:00000000000001");
        let dropped = composite(&half(true), Some(&p), 0, &[]);
        assert_eq!(dropped.decision, Drop);
        assert_eq!(dropped.trace_state.header(), "ot=rv:00000000000001");
    }

    #[test]
    fn no_threshold_drops_even_the_highest_randomness() {
        let none = Fixed(SamplingIntent::new(None, true));
        assert_eq!(composite(&none, None, (1 << 56) - 1, &[]).decision, Drop);
        let never = Fixed(SamplingIntent::new(Threshold::from_value(1 << 56), true));
        assert_eq!(composite(&never, None, (1 << 56) - 1, &[]).decision, Drop);
    }

    #[derive(Debug)]
    struct AddVendor;

    impl TraceStateUpdater for AddVendor {
        fn update(&self, state: TraceState) -> TraceState {
            state.insert("vendor", "seen").unwrap()
        }
    }

    #[test]
    fn attributes_only_for_a_kept_span_and_the_updater_before_th() {
        let attrs: Arc<dyn crate::composable::AttributesProvider> =
            Arc::new(vec![KeyValue::new("k", "v")]);
        let s = Fixed(
            SamplingIntent::new(Threshold::from_value(1 << 55), true)
                .with_attributes(attrs)
                .with_trace_state_updater(Arc::new(AddVendor)),
        );
        let kept = composite(&s, None, 1 << 55, &[]);
        assert_eq!(kept.attributes, vec![KeyValue::new("k", "v")]);
        assert_eq!(kept.trace_state.header(), "ot=th:8,vendor=seen");
        let dropped = composite(&s, None, 0, &[]);
        assert!(dropped.attributes.is_empty());
        assert_eq!(dropped.trace_state.header(), "vendor=seen");
        let _ = id(0);
    }
}
