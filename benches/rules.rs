//! A root decision with 5 attributes against 10 rules (`RuleBasedSampler`), beside the
//! single-limiter `RateLimitingSampler`, on the admit and on the reject path.
//! Target: the rule-based decision within 2x of the single limiter with 10 rules, 1.2x
//! with one.

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::ShouldSample;
use otel_rate_sampler::{Limit, RateLimitingSampler, RuleBasedSampler, SamplingConfig};

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
            "GET /orders/42",
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
        let _ = (decide(&single), decide(&rule_based), decide(&no_rules));
        let _ = decide(&one_rule);
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

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
