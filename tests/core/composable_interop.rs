//! Interoperability of the composable samplers' `th` and `rv` (feature `composable`):
//! what they read and write against the specification's tables
//! (`trace/tracestate-probability-sampling.md`, "Converting floating-point probability
//! to threshold value"; `trace/tracestate-handling.md`) and the encodings other
//! implementations write (Go's SDK writes 4 significant digits, `th:aaab` for 1/3;
//! Java's composable samplers and the Collector write the exact threshold,
//! `th:fd70a3d70a3d71` for 1 %); and whole traces: a child under a
//! `ComposableParentThreshold` keeps its parent's threshold, and two services built
//! apart with one probability keep the same traces.

use crate::seeded_ids::Seeded;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, SamplingDecision, SamplingResult, SdkTracerProvider, ShouldSample,
};
use opentelemetry_sdk::Resource;
use otel_rate_sampler::{
    ComposableAlwaysOff, ComposableParentThreshold, ComposableProbability, CompositeSampler,
    Threshold,
};
use std::collections::BTreeSet;

/// `2^56`.
const MAX: u64 = 1 << 56;

/// The specification's table: 1-in-N, then the thresholds at precision 3, 4 and 5 and
/// the probability each keeps with (the table's "Actual probability" column).
const TABLE: [(u64, [(&str, f64); 3]); 12] = [
    (1, [("0", 1.0), ("0", 1.0), ("0", 1.0)]),
    (2, [("8", 0.5), ("8", 0.5), ("8", 0.5)]),
    (
        3,
        [
            ("aab", 0.333251953125),
            ("aaab", 0.3333282470703125),
            ("aaaab", 0.33333301544189453),
        ],
    ),
    (4, [("c", 0.25), ("c", 0.25), ("c", 0.25)]),
    (
        5,
        [
            ("ccd", 0.199951171875),
            ("cccd", 0.1999969482421875),
            ("ccccd", 0.19999980926513672),
        ],
    ),
    (8, [("e", 0.125), ("e", 0.125), ("e", 0.125)]),
    (
        10,
        [
            ("e66", 0.10009765625),
            ("e666", 0.100006103515625),
            ("e6666", 0.10000038146972656),
        ],
    ),
    (16, [("f", 0.0625), ("f", 0.0625), ("f", 0.0625)]),
    (
        100,
        [
            ("fd71", 0.0099945068359375),
            ("fd70a", 0.010000228881835938),
            ("fd70a4", 0.009999990463256836),
        ],
    ),
    (
        1000,
        [
            ("ffbe7", 0.0010004043579101562),
            ("ffbe77", 0.0009999871253967285),
            ("ffbe76d", 0.000999998301267624),
        ],
    ),
    (
        10000,
        [
            ("fff972", 0.00010001659393310547),
            ("fff9724", 0.00010000169277191162),
            ("fff97247", 0.00010000006295740604),
        ],
    ),
    (
        100000,
        [
            ("ffff584", 9.998679161071777e-06),
            ("ffff583a", 1.00000761449337e-05),
            ("ffff583a5", 1.0000003385357559e-05),
        ],
    ),
];

/// A `th` value as the specification decodes it: extended with zeros to 14 digits.
fn decode(th: &str) -> u64 {
    let padded = format!("{th:0<14}");
    u64::from_str_radix(&padded, 16).unwrap()
}

/// The `th` of a trace state's `ot` entry.
fn th_of(state: &TraceState) -> Option<String> {
    let ot = state.get("ot")?.to_owned();
    ot.split(';')
        .find_map(|f| f.strip_prefix("th:").map(str::to_owned))
}

/// A sampled or unsampled remote parent with trace state `state`.
fn remote(sampled: bool, state: &str) -> Context {
    remote_in(TraceId::from(0x77u128 << 64), sampled, state)
}

/// A remote parent as [`remote`]'s, in trace `trace_id` (a child's own: where a parent
/// without `rv` has its randomness).
fn remote_in(trace_id: TraceId, sampled: bool, state: &str) -> Context {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    Context::new().with_remote_span_context(SpanContext::new(
        trace_id,
        SpanId::from(9u64),
        flags,
        true,
        state.parse::<TraceState>().unwrap(),
    ))
}

fn decide(sampler: &impl ShouldSample, parent: Option<&Context>, id: TraceId) -> SamplingResult {
    sampler.should_sample(parent, id, "op", &SpanKind::Server, &[], &[])
}

/// A trace id whose low 56 bits (its randomness) are `r`.
fn id(r: u64) -> TraceId {
    TraceId::from((0xabcd_u128 << 64) | u128::from(r))
}

#[test]
fn every_threshold_of_the_specification_s_table_is_read_as_written_and_kept_by_a_child() {
    let child = CompositeSampler::new(ComposableParentThreshold::new(ComposableAlwaysOff));
    for (n, columns) in TABLE {
        for (th, probability) in columns {
            let t = decode(th);
            assert_eq!(
                Threshold::from_value(t).unwrap().probability(),
                probability,
                "1 in {n}: th:{th}"
            );
            // The parent was kept at this threshold (its rv at the threshold itself):
            // the child keeps the same `th`, character for character.
            let rv = format!("{t:014x}");
            let parent = remote(true, &format!("ot=th:{th};rv:{rv},vendor=x"));
            let result = decide(&child, Some(&parent), id(0));
            assert_eq!(
                result.decision,
                SamplingDecision::RecordAndSample,
                "th:{th}"
            );
            assert_eq!(th_of(&result.trace_state).as_deref(), Some(th), "1 in {n}");
            assert_eq!(
                result.trace_state.get("vendor"),
                Some("x"),
                "other vendors' entries are kept"
            );
        }
    }
}

#[test]
fn written_thresholds_agree_with_the_table_to_each_of_its_precisions() {
    for (n, columns) in TABLE {
        let sampler = CompositeSampler::new(ComposableProbability::new(1.0 / n as f64).unwrap());
        // The largest randomness: kept at every probability.
        let result = decide(&sampler, None, id(MAX - 1));
        let written = th_of(&result.trace_state).expect("a kept root carries th");
        // What is written is what decides: 1 to 14 hex digits, no trailing zeros.
        assert!(written == "0" || !written.ends_with('0'), "{written}");
        let ours = decode(&written);
        let kept =
            |r: u64| decide(&sampler, None, id(r)).decision == SamplingDecision::RecordAndSample;
        assert!(kept(ours), "1 in {n}: th:{written}");
        assert!(ours == 0 || !kept(ours - 1), "1 in {n}: th:{written}");
        for (th, _) in columns {
            // The table's threshold is ours rounded to its digits: within half of its
            // last digit's unit.
            let digits = th.len() as u32;
            let half_unit = (MAX >> (4 * digits)) / 2;
            assert!(
                ours.abs_diff(decode(th)) <= half_unit.max(1) || th == "0",
                "1 in {n}: ours th:{written}, the table's th:{th}"
            );
        }
    }
}

#[test]
fn exact_thresholds_are_those_java_and_the_collector_write() {
    for (ratio, th) in [
        (1.0, "0"),
        (0.5, "8"),
        (0.25, "c"),
        (0.1, "e6666666666666"),
        (0.01, "fd70a3d70a3d71"),
        (1.0 / 3.0, "aaaaaaaaaaaaac"),
    ] {
        let sampler = CompositeSampler::new(ComposableProbability::new(ratio).unwrap());
        let result = decide(&sampler, None, id(MAX - 1));
        assert_eq!(th_of(&result.trace_state).as_deref(), Some(th), "{ratio}");
    }
}

#[test]
fn an_explicit_rv_decides_and_is_passed_on_unchanged() {
    let one_percent = CompositeSampler::new(ComposableProbability::new(0.01).unwrap());
    // The Collector's probabilistic sampler test: rv at the exact 1 % threshold is kept
    // with th:fd70a3d70a3d71, the rv passed on as it came (upper case included).
    let parent = remote(false, "ot=rv:FD70A3D70A3D71");
    let result = decide(&one_percent, Some(&parent), id(0));
    assert_eq!(result.decision, SamplingDecision::RecordAndSample);
    let ot = result.trace_state.get("ot").unwrap().to_owned();
    let fields: BTreeSet<&str> = ot.split(';').collect();
    assert_eq!(
        fields,
        BTreeSet::from(["rv:FD70A3D70A3D71", "th:fd70a3d70a3d71"]),
        "{ot}"
    );
    // One below: dropped, although the trace id's own randomness is the largest.
    let parent = remote(false, "ot=rv:fd70a3d70a3d70");
    let result = decide(&one_percent, Some(&parent), id(MAX - 1));
    assert_eq!(result.decision, SamplingDecision::Drop);
    // The specification's rv example (tracestate-handling.md) under 1/2: below th:8.
    let half = CompositeSampler::new(ComposableProbability::new(0.5).unwrap());
    let parent = remote(false, "ot=rv:6e6d1a75832a2f");
    assert_eq!(
        decide(&half, Some(&parent), id(MAX - 1)).decision,
        SamplingDecision::Drop
    );
}

#[test]
fn a_parent_whose_th_contradicts_its_sampled_flag_is_followed_without_th() {
    let child = CompositeSampler::new(ComposableParentThreshold::new(ComposableAlwaysOff));
    // Sampled, but rv < th: the threshold is apparently inconsistent, so it is erased
    // and the child still follows the parent's decision (the trace stays whole).
    let parent = remote(true, "ot=th:c;rv:10000000000000,vendor=x");
    let result = decide(&child, Some(&parent), id(MAX - 1));
    assert_eq!(result.decision, SamplingDecision::RecordAndSample);
    assert_eq!(th_of(&result.trace_state), None);
    assert_eq!(result.trace_state.header(), "ot=rv:10000000000000,vendor=x");
    // Without rv, the trace id's randomness is what the threshold is checked against
    // (the parent's: the trace's).
    let at = id(0xc0_0000_0000_0000);
    let kept = decide(&child, Some(&remote_in(at, true, "ot=th:c")), at);
    assert_eq!(th_of(&kept.trace_state).as_deref(), Some("c"));
    let under = id(0xbf_ffff_ffff_ffff);
    let below = decide(&child, Some(&remote_in(under, true, "ot=th:c")), under);
    assert_eq!(below.decision, SamplingDecision::RecordAndSample);
    assert_eq!(th_of(&below.trace_state), None);
}

/// The trace ids (as numbers) and `th`s a service keeps of `n` roots (and a child
/// each), with its own provider, `service.name` and sampler at `ratio`.
fn service_keeps(name: &'static str, ratio: f64, n: usize) -> BTreeSet<(u128, String)> {
    let exporter = InMemorySpanExporter::default();
    let sampler = CompositeSampler::new(ComposableParentThreshold::new(
        ComposableProbability::new(ratio).unwrap(),
    ));
    let provider = SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(name).build())
        .with_sampler(sampler)
        .with_id_generator(Seeded::new(42))
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer(name);
    for _ in 0..n {
        let root = tracer.start_with_context("root", &Context::new());
        let cx = Context::new().with_span(root);
        tracer.start_with_context("child", &cx);
        cx.span().end();
    }
    let spans = exporter.get_finished_spans().unwrap();
    let kept: BTreeSet<_> = spans
        .iter()
        .map(|s| {
            let th = th_of(s.span_context.trace_state()).expect("every kept span has th");
            (
                u128::from_be_bytes(s.span_context.trace_id().to_bytes()),
                th,
            )
        })
        .collect();
    // Whole traces: a root and its child for every kept trace id.
    assert_eq!(spans.len(), 2 * kept.len(), "{name}");
    kept
}

#[test]
fn two_services_built_apart_with_one_probability_keep_the_same_traces() {
    let n = 2000;
    let checkout = service_keeps("checkout", 0.3, n);
    let search = service_keeps("search", 0.3, n);
    assert_eq!(checkout, search);
    // Binomial(2000, 0.3): mean 600, standard deviation 20.5; five of them either side.
    assert!((498..=702).contains(&checkout.len()), "{}", checkout.len());
    // A lower probability keeps a subset, with its own threshold.
    let fewer = service_keeps("billing", 0.1, n);
    let ids = |set: &BTreeSet<(u128, String)>| -> BTreeSet<u128> {
        set.iter().map(|(id, _)| *id).collect()
    };
    assert!(ids(&fewer).is_subset(&ids(&checkout)));
    assert!(ids(&fewer).len() < ids(&checkout).len());
    assert!(fewer.iter().all(|(_, th)| th == "e6666666666666"));
    let th = th_of_ratio(0.3);
    assert!(checkout.iter().all(|(_, t)| *t == th), "{th}");
}

/// The `th` of `ratio` as the specification converts it exactly,
/// `2^56 − round(ratio · 2^56)` without trailing zero digits.
fn th_of_ratio(ratio: f64) -> String {
    let t = MAX - (ratio * MAX as f64).round() as u64;
    let text = format!("{t:014x}");
    match text.trim_end_matches('0') {
        "" => "0".to_owned(),
        th => th.to_owned(),
    }
}
