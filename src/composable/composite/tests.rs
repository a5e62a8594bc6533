//! `CompositeSampler`'s unit tests.

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
