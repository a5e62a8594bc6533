//! A root decision with 5 attributes against 10 rules (`RuleBasedSampler`), beside the
//! single-limiter `RateLimitingSampler`, on the admit and on the reject path.
//! Target: the rule-based decision within 2x of the single limiter with 10 rules, 1.2x
//! with one.
//!
//! `sdk_dropped_root`: the same root span (its 5 attributes, its name and kind) started
//! and ended through an `SdkTracerProvider` with a no-op exporter, dropped by
//! `Sampler::AlwaysOff` and by the 10-rule `RuleBasedSampler` whose limits are spent.
//! Target: `rules_10` within 1.2x of `always_off`.
//!
//! Each case checks once, before it is timed, that it decides what its name says (a
//! kept case keeps, a refusing one refuses), so `cargo test --benches` fails on a case
//! that measures the other path.

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use opentelemetry::trace::{Span, SpanKind, TraceId, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::testing::trace::NoopSpanExporter;
use opentelemetry_sdk::trace::{
    Sampler, SamplingDecision, SdkTracer, SdkTracerProvider, ShouldSample,
};
use otel_rate_sampler::{Limit, RateLimitingSampler, RuleBasedSampler, SamplingConfig};

/// The root span's name: one no rule matches.
const NAME: &str = "GET /orders/42";

/// Ten rules the span below does not match (each fails on a different test, the last
/// few only on an attribute), then the service default: the worst case, every rule
/// is tried.
fn rules(default: &str) -> String {
    rules_of(default, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
}

/// The rules of `which` (by index) of those below: none matches, the default decides.
fn rules_of(default: &str, which: &[usize]) -> String {
    let mut text = format!("[default]\n{default}\n[[service]]\nname = \"bench\"\n{default}\n");
    let rules = [
        r#"span_name = "GET /health*""#,
        r#"span_name = "*/admin/*""#,
        r#"kind = "client""#,
        r#"span_name = "POST /orders/*""#,
        r#"span_name = "GET /users/{a,b}*""#,
        r#"attributes = { "http.status_code" = "5*" }"#,
        r#"attributes = { "user.tier" = "gold" }"#,
        r#"attributes = { "region" = "us-*", "http.method" = "GET" }"#,
        r#"span_name = "GET /orders/*"
attributes = { "http.route" = "/orders/\\{id\\}/items", "net.peer" = "*" }"#,
        r#"span_name = "GET /orders/*"
kind = "server"
attributes = { "http.method" = "POST" }"#,
    ];
    for (i, r) in rules.iter().enumerate().filter(|(i, _)| which.contains(i)) {
        text.push_str(&format!(
            "[[service.rule]]\nname = \"r{i}\"\n{r}\n{default}\n"
        ));
    }
    text
}

fn attributes() -> Vec<KeyValue> {
    vec![
        KeyValue::new("http.method", "GET"),
        KeyValue::new("http.route", "/orders/{id}"),
        KeyValue::new("http.status_code", 200),
        KeyValue::new("user.tier", "silver"),
        KeyValue::new("region", "eu-west-1"),
    ]
}

fn bench(c: &mut Criterion) {
    let root = Context::new();
    let attrs = attributes();
    let decide = |s: &dyn ShouldSample| {
        s.should_sample(
            Some(&root),
            TraceId::from(42u128),
            NAME,
            &SpanKind::Server,
            &attrs,
            &[],
        )
    };
    // Admit: a limit no benchmark can exhaust (4 194 303 per 10 ms; a window above the
    // default clock's resolution, which RuleBasedSampler::new requires).
    // Reject: one trace per hour, spent on the first call.
    for (path, limit, toml) in [
        (
            "admit",
            Limit::per_window(4_194_303, Duration::from_millis(10)).unwrap(),
            "limit = 4194303\nwindow = \"10ms\"",
        ),
        (
            "reject",
            Limit::per_window(1, Duration::from_secs(3600)).unwrap(),
            "limit = 1\nwindow = \"1h\"",
        ),
    ] {
        let single = RateLimitingSampler::builder(limit).build();
        let config = SamplingConfig::from_toml_str(&rules(toml), "bench.toml").unwrap();
        let rule_based = RuleBasedSampler::new(&config, "bench").unwrap();
        // One rule, on an attribute (`http.status_code = "5*"`), not matching.
        let one = SamplingConfig::from_toml_str(&rules_of(toml, &[5]), "bench.toml").unwrap();
        let one_rule = RuleBasedSampler::new(&one, "bench").unwrap();
        let no_rules =
            SamplingConfig::from_toml_str(&format!("[default]\n{toml}\n"), "b.toml").unwrap();
        let no_rules = RuleBasedSampler::new(&no_rules, "bench").unwrap();
        // The first call spends the refusing limits; then every case decides as named.
        let samplers: [&dyn ShouldSample; 4] = [&single, &rule_based, &one_rule, &no_rules];
        for (i, sampler) in samplers.into_iter().enumerate() {
            let _ = decide(sampler);
            let kept = decide(sampler).decision == SamplingDecision::RecordAndSample;
            assert_eq!(kept, path == "admit", "{path}: sampler {i}");
        }
        let mut group = c.benchmark_group(format!("root_5_attributes/{path}"));
        group.bench_function("RateLimitingSampler", |b| b.iter(|| decide(&single)));
        group.bench_function("RuleBasedSampler_10_rules", |b| {
            b.iter(|| decide(&rule_based))
        });
        group.bench_function("RuleBasedSampler_1_rule", |b| b.iter(|| decide(&one_rule)));
        // The same sampler's fixed cost: the rule-set load, the parent policy, one limiter.
        group.bench_function("RuleBasedSampler_no_rules", |b| {
            b.iter(|| decide(&no_rules))
        });
        group.finish();
    }
}

/// A tracer of a provider deciding with `sampler`, exporting (were anything kept) to a
/// no-op exporter.
fn tracer(sampler: impl ShouldSample + 'static) -> (SdkTracerProvider, SdkTracer) {
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_simple_exporter(NoopSpanExporter::new())
        .build();
    let tracer = provider.tracer("bench");
    (provider, tracer)
}

/// Starts and ends the root span (as an instrumented handler would: the builder, its
/// attributes, the span), returning whether it was recorded.
fn root_span(tracer: &SdkTracer, root: &Context, attrs: &[KeyValue]) -> bool {
    let mut span = tracer
        .span_builder(NAME)
        .with_kind(SpanKind::Server)
        .with_attributes(attrs.to_vec())
        .start_with_context(tracer, root);
    let recorded = span.is_recording() || span.span_context().is_sampled();
    span.end();
    recorded
}

fn sdk_dropped_root(c: &mut Criterion) {
    let root = Context::new();
    let attrs = attributes();
    let spent =
        SamplingConfig::from_toml_str(&rules("limit = 1\nwindow = \"1h\""), "b.toml").unwrap();
    let rules_10 = RuleBasedSampler::new(&spent, "bench").unwrap();
    let (_off_provider, always_off) = tracer(Sampler::AlwaysOff);
    let (_rules_provider, by_rules) = tracer(rules_10.clone());
    // The first root spends the one permit; every later one is refused by the default
    // rule, after the 10 rules were tried.
    assert!(root_span(&by_rules, &root, &attrs));
    for tracer in [&always_off, &by_rules] {
        assert!(!root_span(tracer, &root, &attrs), "a timed root was kept");
    }
    let stats = rules_10.stats();
    let default = stats.rule("default").unwrap();
    assert_eq!(
        (default.decisions.kept(), default.decisions.dropped()),
        (1, 1)
    );
    let mut group = c.benchmark_group("sdk_dropped_root");
    group.bench_function("always_off", |b| {
        b.iter(|| root_span(&always_off, &root, &attrs))
    });
    group.bench_function("rules_10", |b| {
        b.iter(|| root_span(&by_rules, &root, &attrs))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench, sdk_dropped_root
}
criterion_main!(benches);
