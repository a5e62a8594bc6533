//! `CompositeSampler`'s unit tests: a test per step of the specification's algorithm,
//! each quoting the sentence it checks.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use opentelemetry::trace::TraceState;
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SamplingDecision::{Drop, RecordAndSample};

use super::*;
use crate::composable::admission::Admission;
use crate::composable::test_support::{decide as composite, parent};
use crate::composable::{AttributesProvider, Threshold, TraceStateUpdater};
use crate::stats::ParentOrigin;

/// A composable sampler returning a fixed intent, and what it was asked with.
#[derive(Clone, Debug)]
struct Fixed(SamplingIntent<'static>, Arc<Mutex<Vec<String>>>);

impl Fixed {
    fn new(intent: SamplingIntent<'static>) -> Self {
        Self(intent, Arc::default())
    }
}

impl ComposableSampler for Fixed {
    fn sampling_intent(
        &self,
        parent: Option<&Context>,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingIntent<'_> {
        self.1.lock().unwrap().push(format!(
            "{} {name} {kind:?} {attributes:?} {}",
            parent.is_some(),
            links.len()
        ));
        self.0.clone()
    }
}

fn half(reliable: bool) -> Fixed {
    Fixed::new(SamplingIntent::new(
        Threshold::from_value(1 << 55),
        reliable,
    ))
}

/// Records the trace state and decision it is given; adds `vendor=seen`.
#[derive(Debug, Default)]
struct Recording(Mutex<Vec<(String, SamplingDecision)>>);

impl TraceStateUpdater for Recording {
    fn update(&self, state: TraceState, decision: SamplingDecision) -> TraceState {
        self.0.lock().unwrap().push((state.header(), decision));
        state.insert("vendor", "seen").unwrap()
    }
}

/// An admission refusing every span, counting what it is told, and the last ticket.
#[derive(Debug, Default)]
struct Refuse {
    kept: AtomicUsize,
    dropped: AtomicUsize,
    ticket: AtomicU64,
}

impl Admission for Refuse {
    fn admit(&self, kept: bool, ticket: u64, _: ParentOrigin) -> bool {
        self.ticket.store(ticket, Relaxed);
        let counter = if kept { &self.kept } else { &self.dropped };
        counter.fetch_add(1, Relaxed);
        false
    }
}

/// "The sampler calls `GetSamplingIntent` on the delegate": once per span, with the
/// original parameters but the trace id.
#[test]
fn step_1_the_delegate_is_asked_with_the_spans_parameters() {
    let s = half(true);
    let attrs = [KeyValue::new("k", 1)];
    composite(&s, None, 7, &attrs);
    let asked = s.1.lock().unwrap().clone();
    assert_eq!(asked, [format!("false span Server {attrs:?} 0")]);
}

/// "If the received THRESHOLD value is `null`, the sampling decision is `DROP`", even
/// for the highest randomness and an intent that says it is reliable.
#[test]
fn step_2_no_threshold_is_a_drop() {
    let none = Fixed::new(SamplingIntent::new(None, true));
    let dropped = composite(&none, None, (1 << 56) - 1, &[]);
    assert_eq!(dropped.decision, Drop);
    assert_eq!(dropped.trace_state, TraceState::NONE);
    // 2^56 is a threshold that keeps nothing.
    let never = Fixed::new(SamplingIntent::new(Threshold::from_value(1 << 56), true));
    assert_eq!(composite(&never, None, (1 << 56) - 1, &[]).decision, Drop);
}

/// "in case of `true` derives the Randomness value R from the TraceState or TraceId":
/// `rv` when the parent's `ot` has one, else the trace id's low 56 bits.
#[test]
fn step_3_a_reliable_intent_compares_rv_else_the_trace_ids_low_56_bits() {
    let at = 1u64 << 55;
    assert_eq!(
        composite(&half(true), None, at, &[]).decision,
        RecordAndSample
    );
    assert_eq!(composite(&half(true), None, at - 1, &[]).decision, Drop);
    // The trace id's high bits are not randomness.
    let high = TraceId::from((1u128 << 127) | u128::from(at - 1));
    let s = CompositeSampler::new(half(true));
    let r = s.should_sample(None, high, "x", &SpanKind::Internal, &[], &[]);
    assert_eq!(r.decision, Drop);
    // The trace id says keep (all ones); rv says 0x7f...: below 1/2's threshold.
    let p = parent(true, true, "ot=rv:7fffffffffffff;x:1,v=2");
    let dropped = composite(&half(true), Some(&p), u64::MAX >> 8, &[]);
    assert_eq!(dropped.decision, Drop);
    let p = parent(true, true, "ot=rv:80000000000000;x:1,v=2");
    assert_eq!(
        composite(&half(true), Some(&p), 0, &[]).decision,
        RecordAndSample
    );
}

/// "and in case of `false` it generates a new Randomness value R by hex-encoding a new
/// random 56-bit number": the trace's randomness (trace id or `rv`) decides nothing; a
/// threshold of 1/2 keeps about half of the spans of any trace.
#[test]
fn step_3_an_unreliable_intent_compares_a_fresh_random_value() {
    let rv_low = parent(true, true, "ot=rv:00000000000000");
    let rv_high = parent(true, true, "ot=rv:ffffffffffffff");
    for (p, r) in [
        (None, 0),
        (None, (1 << 56) - 1),
        (Some(&rv_low), (1 << 56) - 1),
        (Some(&rv_high), 0),
    ] {
        let kept = (0..10_000)
            .filter(|_| composite(&half(false), p, r, &[]).decision == RecordAndSample)
            .count();
        // 5000 expected; 5 standard deviations (sqrt(10000 / 4) = 50).
        assert!((4750..=5250).contains(&kept), "{p:?} {r:x}: {kept}");
    }
}

/// "The sampler compares [...] the received THRESHOLD value with the Randomness value R
/// to arrive at the final sampling `Decision`": kept iff R ≥ THRESHOLD, as
/// `RecordAndSample`; otherwise `Drop`, never `RecordOnly`.
#[test]
fn step_4_r_at_least_the_threshold_keeps_and_below_it_drops() {
    for t in [0, 1, 1 << 55, (1 << 56) - 1] {
        let s = Fixed::new(SamplingIntent::new(Threshold::from_value(t), true));
        assert_eq!(
            composite(&s, None, t, &[]).decision,
            RecordAndSample,
            "{t:x}"
        );
        if t > 0 {
            assert_eq!(composite(&s, None, t - 1, &[]).decision, Drop, "{t:x}");
        }
    }
}

/// "The sampler calls the received `trace_state_provider` function passing the parent
/// `Tracestate` and the final sampling `Decision`": for a keep, for a drop, and for a
/// span its hard cap (ours) drops after the threshold kept it.
#[test]
fn step_5_the_trace_state_provider_gets_the_parents_state_and_the_final_decision() {
    let updater = Arc::new(Recording::default());
    let s = Fixed::new(
        SamplingIntent::new(Threshold::from_value(1 << 55), true)
            .with_trace_state_updater(updater.clone()),
    );
    let p = parent(true, true, "ot=th:c,v=1");
    composite(&s, Some(&p), 1 << 55, &[]);
    composite(&s, Some(&p), 0, &[]);
    // An intent borrows its admission from its sampler; this one lives as long as the
    // test's fixed intent.
    let refuse: &'static Refuse = Box::leak(Box::default());
    let capped = Fixed::new(s.0.clone().with_admission(refuse, 7));
    let result = composite(&capped, Some(&p), (1 << 56) - 1, &[]);
    assert_eq!(result.decision, Drop);
    assert_eq!(result.trace_state.header(), "vendor=seen,v=1");
    assert!(result.attributes.is_empty());
    assert_eq!(
        *updater.0.lock().unwrap(),
        [
            ("ot=th:c,v=1".to_owned(), RecordAndSample),
            ("ot=th:c,v=1".to_owned(), Drop),
            ("ot=th:c,v=1".to_owned(), Drop),
        ]
    );
    // The admission is told the threshold's verdict, kept or not, with its ticket.
    composite(&capped, Some(&p), 0, &[]);
    assert_eq!(refuse.kept.load(Relaxed), 1);
    assert_eq!(refuse.dropped.load(Relaxed), 1);
    assert_eq!(refuse.ticket.load(Relaxed), 7);
}

/// "In case of positive sampling decision: the sampler calls the received
/// `attributes_provider` function [...]; if the `adjusted_count_reliable` is `true` it
/// modifies the `th` value for the `ot` key in the `Tracestate` according to the
/// received THRESHOLD; if the returned value was `false`, it removes the `th` value".
#[test]
fn step_6_a_kept_span_gets_the_attributes_and_th_only_when_reliable() {
    let attrs: Arc<dyn AttributesProvider> = Arc::new(vec![KeyValue::new("k", "v")]);
    let s = Fixed::new(
        SamplingIntent::new(Threshold::from_value(1 << 55), true)
            .with_attributes(attrs)
            .with_trace_state_updater(Arc::new(Recording::default())),
    );
    let kept = composite(&s, None, 1 << 55, &[]);
    assert_eq!(kept.attributes, vec![KeyValue::new("k", "v")]);
    // The provider's change first, then th.
    assert_eq!(kept.trace_state.header(), "ot=th:8,vendor=seen");
    // th written first in ot; rv, other sub-keys and vendors kept.
    let p = parent(true, true, "ot=rv:80000000000000;x:1,v=2");
    let kept = composite(&half(true), Some(&p), 0, &[]);
    assert_eq!(
        kept.trace_state.header(),
        "ot=th:8;rv:80000000000000;x:1,v=2"
    );
    // Not reliable: kept (threshold 0 keeps any fresh value), th removed, rv kept.
    let zero = Fixed::new(SamplingIntent::new(Some(Threshold::ALWAYS), false));
    let p = parent(true, true, "ot=th:c;rv:ffffffffffffff,v=2");
    let kept = composite(&zero, Some(&p), 0, &[]);
    assert_eq!(kept.decision, RecordAndSample);
    assert_eq!(kept.trace_state.header(), "ot=rv:ffffffffffffff,v=2");
}

/// "In case of negative sampling decision, it removes the `th` value for the `ot` key
/// from the `Tracestate`"; the attributes provider is not asked.
#[test]
fn step_7_a_dropped_span_has_th_removed_and_no_attributes() {
    let attrs: Arc<dyn AttributesProvider> = Arc::new(vec![KeyValue::new("k", "v")]);
    let s = Fixed::new(
        SamplingIntent::new(Threshold::from_value(1 << 55), true).with_attributes(attrs),
    );
    let p = parent(true, true, "ot=th:0;rv:00000000000001");
    let dropped = composite(&s, Some(&p), 0, &[]);
    assert_eq!(dropped.decision, Drop);
    assert_eq!(dropped.trace_state.header(), "ot=rv:00000000000001");
    assert!(dropped.attributes.is_empty());
    let dropped = composite(&s, None, 0, &[]);
    assert_eq!(dropped.trace_state, TraceState::NONE);
}
