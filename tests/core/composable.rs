//! The composable samplers inside a real `SdkTracerProvider` with an in-memory exporter
//! and a deterministic id generator: which traces are exported, and the `th` their
//! spans carry (feature `composable`).
//!
//! The tree is the specification's example: `ComposableParentThreshold` over a
//! `ComposableRuleBased` root (health checks off, server spans at 1/2 and annotated,
//! anything else always on). Then `ComposableRateLimiting` (ours): in the provider, and
//! in a seeded simulation of overload and a load step that checks its "Accuracy" docs.

use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{
    IdGenerator, InMemorySpanExporter, SdkTracer, SdkTracerProvider, SpanData,
};
use otel_rate_sampler::{
    ComposableAlwaysOff, ComposableAlwaysOn, ComposableAnnotating, ComposableParentThreshold,
    ComposableProbability, ComposableRuleBased, CompositeSampler, Predicate,
};

const HALF: u64 = 1 << 55;

/// Trace ids whose low 56 bits walk the randomness range in even steps: trace `i` of
/// `n` has randomness `i · 2^56 / n`.
#[derive(Debug)]
struct Walk {
    next: AtomicU64,
    n: u64,
}

impl IdGenerator for Walk {
    fn new_trace_id(&self) -> TraceId {
        // Relaxed: a counter for ids, no other memory depends on it.
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.n;
        TraceId::from((0x77u128 << 64) | u128::from(i * ((1u64 << 56) / self.n)))
    }

    fn new_span_id(&self) -> SpanId {
        // Relaxed: as above.
        SpanId::from(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

fn randomness(id: TraceId) -> u64 {
    (u128::from_be_bytes(id.to_bytes()) as u64) & ((1 << 56) - 1)
}

fn provider(n: u64) -> (SdkTracer, InMemorySpanExporter, SdkTracerProvider) {
    let root = ComposableRuleBased::builder()
        .rule(
            Predicate::new().attribute_values("url.path", ["/health"]),
            ComposableAlwaysOff,
        )
        .rule(
            Predicate::new().span_kinds([SpanKind::Server]),
            ComposableAnnotating::new(
                [KeyValue::new("sampled.by", "half")],
                ComposableProbability::new(0.5).unwrap(),
            ),
        )
        .rule(Predicate::new(), ComposableAlwaysOn)
        .build();
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_sampler(CompositeSampler::new(ComposableParentThreshold::new(root)))
        .with_id_generator(Walk {
            next: AtomicU64::new(0),
            n,
        })
        .with_simple_exporter(exporter.clone())
        .build();
    (provider.tracer("composable"), exporter, provider)
}

/// A root of `kind` with `path`, and one child of it.
fn trace(tracer: &SdkTracer, kind: SpanKind, path: &str) {
    let root = tracer
        .span_builder("root")
        .with_kind(kind)
        .with_attributes([KeyValue::new("url.path", path.to_owned())])
        .start_with_context(tracer, &Context::new());
    let cx = Context::new().with_span(root);
    tracer.start_with_context("child", &cx);
    cx.span().end();
}

fn th(span: &SpanData) -> Option<String> {
    let ot = span.span_context.trace_state().get("ot")?.to_owned();
    ot.split(';')
        .find_map(|f| f.strip_prefix("th:").map(str::to_owned))
}

#[test]
fn server_roots_at_one_half_keep_the_high_randomness_half_with_th_8_and_children_follow() {
    let n = 64;
    let (tracer, exporter, _provider) = provider(n);
    for _ in 0..n {
        trace(&tracer, SpanKind::Server, "/users");
    }
    let spans = exporter.get_finished_spans().unwrap();
    let roots: Vec<_> = spans.iter().filter(|s| s.name == "root").collect();
    // Ids walk the range evenly: exactly the upper half is kept.
    assert_eq!(roots.len() as u64, n / 2);
    for root in &roots {
        let r = randomness(root.span_context.trace_id());
        assert!(r >= HALF, "kept a root with randomness {r:#x} under th:8");
        assert_eq!(th(root).as_deref(), Some("8"));
        assert!(root
            .attributes
            .contains(&KeyValue::new("sampled.by", "half")));
    }
    for child in spans.iter().filter(|s| s.name == "child") {
        assert_eq!(
            th(child).as_deref(),
            Some("8"),
            "a child keeps its parent's th"
        );
        assert!(
            roots
                .iter()
                .any(|r| r.span_context.trace_id() == child.span_context.trace_id()),
            "a child without its root"
        );
        assert!(!child
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "sampled.by"));
    }
    assert_eq!(spans.len(), 2 * roots.len());
}

#[test]
fn health_checks_are_dropped_and_other_roots_kept_with_th_0() {
    let n = 16;
    let (tracer, exporter, _provider) = provider(n);
    for _ in 0..n {
        trace(&tracer, SpanKind::Server, "/health");
        trace(&tracer, SpanKind::Internal, "/job");
    }
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(
        spans.len() as u64,
        2 * n,
        "every /job trace whole, no /health span"
    );
    for span in &spans {
        assert_eq!(th(span).as_deref(), Some("0"), "{}", span.name);
        assert!(span
            .attributes
            .iter()
            .all(|kv| kv.value.as_str() != "/health"));
    }
}

#[test]
fn a_remote_parents_threshold_and_rv_are_kept_and_an_unsampled_one_drops() {
    let (tracer, exporter, _provider) = provider(4);
    let remote = |flags, state: &str| {
        Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from(0x1234u128),
            SpanId::from(9u64),
            flags,
            true,
            state.parse::<TraceState>().unwrap(),
        ))
    };
    let sampled = remote(TraceFlags::SAMPLED, "ot=th:c;rv:f0000000000000,vendor=x");
    tracer.start_with_context("kept", &sampled);
    let unsampled = remote(TraceFlags::default(), "ot=rv:f0000000000000");
    tracer.start_with_context("dropped", &unsampled);
    let no_th = remote(TraceFlags::SAMPLED, "vendor=y");
    tracer.start_with_context("kept without th", &no_th);
    let spans = exporter.get_finished_spans().unwrap();
    let names: Vec<_> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(names, ["kept", "kept without th"]);
    assert_eq!(
        spans[0].span_context.trace_state().header(),
        "ot=th:c;rv:f0000000000000,vendor=x"
    );
    assert_eq!(spans[1].span_context.trace_state().header(), "vendor=y");
}

/// The rate limiter in the provider, on its default clock: one window (an hour) of 10
/// from 100 roots offered at once, whole traces, the kept roots with `th:0` (window 0 has
/// probability 1 and the cap binds only after them).
#[test]
fn a_rate_limited_composite_exports_at_most_n_whole_traces() {
    use std::time::Duration;

    use otel_rate_sampler::{ComposableRateLimiting, Limit};

    let limit = Limit::per_window(10, Duration::from_secs(3600))
        .unwrap()
        .unpaced();
    let limited = ComposableRateLimiting::new(ComposableAlwaysOn, limit);
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_sampler(CompositeSampler::new(ComposableParentThreshold::new(
            limited.clone(),
        )))
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("composable");
    for _ in 0..100 {
        trace(&tracer, SpanKind::Server, "/users");
    }
    let spans = exporter.get_finished_spans().unwrap();
    let roots: Vec<_> = spans.iter().filter(|s| s.name == "root").collect();
    assert!(
        roots.len() <= 10,
        "{} roots kept under a cap of 10",
        roots.len()
    );
    assert_eq!(
        spans.len(),
        2 * roots.len(),
        "whole traces: children follow their root"
    );
    assert!(spans.iter().all(|s| th(s).as_deref() == Some("0")));
    assert_eq!(
        limited.stats().kept(),
        roots.len() as u64,
        "clones share the budget"
    );
}

/// What `ComposableRateLimiting`'s "Accuracy" table reports, for one limit.
#[derive(Debug)]
struct Run {
    windows_over: usize,
    fewest_settled: u64,
    kept_without_th: u64,
    adjusted_over_offered: f64,
}

/// 120 windows of `n` at 10× load (20× for windows 40 to 59), seeded random trace ids
/// evenly spaced in time; the first 20 windows are not "settled".
fn simulate(n: u32, paced: bool) -> Run {
    use std::time::Duration;

    use otel_rate_sampler::{ComposableRateLimiting, ComposableSampler, Limit, ManualClock};

    let clock = ManualClock::new();
    let limit = Limit::per_window(n, Duration::from_secs(1)).unwrap();
    let limit = if paced { limit } else { limit.unpaced() };
    let s = ComposableRateLimiting::with_clock(ComposableAlwaysOn, limit, clock.clone());
    let mut x = 0x1234_5678_9abc_def1u64; // xorshift64
    let mut run = Run {
        windows_over: 0,
        fewest_settled: u64::MAX,
        kept_without_th: 0,
        adjusted_over_offered: 0.0,
    };
    let (mut adjusted, mut offered) = (0.0, 0u64);
    for window in 0..120u64 {
        let load = u64::from(n) * if (40..60).contains(&window) { 20 } else { 10 };
        let mut kept = 0;
        for _ in 0..load {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = x >> 8;
            let id = TraceId::from(u128::from(r));
            let intent = s.sampling_intent(None, id, "x", &SpanKind::Server, &[], &[]);
            if intent.keeps(r) {
                kept += 1;
                match intent.threshold().filter(|_| intent.threshold_reliable()) {
                    Some(t) if window >= 20 => adjusted += 1.0 / t.probability(),
                    Some(_) => {}
                    None => run.kept_without_th += 1,
                }
            }
            clock.advance(Duration::from_nanos(1_000_000_000 / load));
        }
        run.windows_over += usize::from(kept > u64::from(n));
        if window >= 20 {
            offered += load;
            run.fewest_settled = run.fewest_settled.min(kept);
        }
    }
    run.adjusted_over_offered = adjusted / offered as f64;
    run
}

#[test]
fn the_rate_limiter_never_passes_n_under_overload_and_a_step_and_counts_within_5_percent() {
    for (n, paced) in [(100, false), (100, true), (1000, false), (1000, true)] {
        let run = simulate(n, paced);
        assert_eq!(run.windows_over, 0, "{n} paced {paced}: {run:?}");
        // The step down halves one window (the threshold is still 20×'s).
        assert!(
            run.fewest_settled >= u64::from(n) * 2 / 5,
            "{n} paced {paced}: {run:?}"
        );
        if !paced {
            assert_eq!(run.kept_without_th, 0, "{n}: {run:?}");
            assert!(
                (0.95..=1.0).contains(&run.adjusted_over_offered),
                "{n}: {run:?}"
            );
        }
    }
}
