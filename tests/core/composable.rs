//! The composable samplers inside a real `SdkTracerProvider` with an in-memory exporter
//! and a deterministic id generator: which traces are exported, and the `th` their
//! spans carry (feature `composable`).
//!
//! The tree is the specification's example: `ComposableParentThreshold` over a
//! `ComposableRuleBased` root (health checks off, server spans at 1/2 and annotated,
//! anything else always on). Then `ComposableRateLimiting` (ours) in the provider; its
//! seeded simulation is in `composable_rate.rs`.

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
