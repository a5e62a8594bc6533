//! Feature `metrics` for the rule-based sampler: per-rule decisions with `service.name`,
//! the cap's window, reloads by result and the generation, read back from an in-memory
//! exporter.

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::ShouldSample;
use otel_rate_sampler::{ManualClock, RuleBasedSampler, SamplerMetrics, SamplingConfig};

const RULES: &str = r#"
[default]
limit = 1
paced = false
[[service]]
name = "shop"
limit = 10
paced = false
cap = { limit = 2, paced = false }
[[service.rule]]
name = "checkout"
span_name = "checkout"
limit = 5
paced = false
"#;

/// Every point of `name` as (attributes, value), from the last collection.
fn points(exporter: &InMemoryMetricExporter, name: &str) -> Vec<(Vec<KeyValue>, u64)> {
    let all = exporter.get_finished_metrics().unwrap();
    let metric = all
        .iter()
        .flat_map(|rm| rm.scope_metrics())
        .flat_map(|sm| sm.metrics())
        .filter(|m| m.name() == name)
        .fold(None, |_, m| Some(m))
        .unwrap_or_else(|| panic!("no {name}"));
    match metric.data() {
        AggregatedMetrics::U64(MetricData::Sum(sum)) => sum
            .data_points()
            .map(|p| (p.attributes().cloned().collect(), p.value()))
            .collect(),
        AggregatedMetrics::U64(MetricData::Gauge(gauge)) => gauge
            .data_points()
            .map(|p| (p.attributes().cloned().collect(), p.value()))
            .collect(),
        other => panic!("{name}: {other:?}"),
    }
}

fn value_of(points: &[(Vec<KeyValue>, u64)], filter: &[(&'static str, &'static str)]) -> u64 {
    points
        .iter()
        .filter(|(attrs, _)| {
            filter.iter().all(|(k, v)| {
                attrs
                    .iter()
                    .any(|kv| kv.key.as_str() == *k && kv.value == Value::from(*v))
            })
        })
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn rule_based_decisions_reloads_and_generation_are_reported() {
    let exporter = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let config = SamplingConfig::from_toml_str(RULES, "m.toml").unwrap();
    let sampler = RuleBasedSampler::with_clock(&config, "shop", ManualClock::new()).unwrap();
    SamplerMetrics::with_meter(meters.meter("test")).register_rules(&sampler);

    let root = Context::new();
    for name in ["checkout", "checkout", "checkout", "browse"] {
        sampler.should_sample(
            Some(&root),
            TraceId::from(1u128),
            name,
            &SpanKind::Server,
            &[],
            &[],
        );
    }
    sampler.reload(&config).unwrap();
    assert!(sampler.reload_from_path("/nonexistent.toml").is_err());
    meters.force_flush().unwrap();

    let decisions = points(&exporter, SamplerMetrics::DECISIONS);
    let shop = ("service.name", "shop");
    let checkout = ("otel_rate_sampler.rule", "checkout");
    let kept = ("otel.span.sampling_result", "RECORD_AND_SAMPLE");
    let dropped = ("otel.span.sampling_result", "DROP");
    assert_eq!(value_of(&decisions, &[shop, checkout, kept]), 2);
    assert_eq!(
        value_of(
            &decisions,
            &[
                shop,
                checkout,
                dropped,
                ("otel_rate_sampler.reason", "service_cap")
            ]
        ),
        1
    );
    assert_eq!(
        value_of(
            &decisions,
            &[
                shop,
                ("otel_rate_sampler.rule", "default"),
                dropped,
                ("otel_rate_sampler.reason", "service_cap")
            ]
        ),
        1
    );
    // Attribute values come from the configuration only: two rules, plus "no rule".
    let rules: std::collections::BTreeSet<String> = decisions
        .iter()
        .filter_map(|(attrs, _)| {
            attrs
                .iter()
                .find(|kv| kv.key.as_str() == "otel_rate_sampler.rule")
                .map(|kv| kv.value.to_string())
        })
        .collect();
    assert_eq!(
        rules.into_iter().collect::<Vec<_>>(),
        ["checkout", "default"]
    );

    let windows = points(&exporter, SamplerMetrics::WINDOW_USED);
    assert_eq!(
        value_of(&windows, &[shop, ("otel_rate_sampler.limiter", "cap")]),
        2
    );
    let reloads = points(&exporter, SamplerMetrics::RELOADS);
    assert_eq!(value_of(&reloads, &[shop, ("result", "success")]), 1);
    assert_eq!(value_of(&reloads, &[shop, ("result", "failure")]), 1);
    let generation = points(&exporter, SamplerMetrics::CONFIG_GENERATION);
    assert_eq!(value_of(&generation, &[shop]), 1);
    meters.shutdown().unwrap();
}

/// Under `fair_by`, the overflow key's calls per limiter: never a key as an attribute.
#[test]
fn fair_by_reports_its_overflow_count_and_no_key() {
    let exporter = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let text = r#"
[default]
limit = 100
fair_by = ["http.route"]
max_keys = 2
cap = { limit = 100, fair_by = ["http.route"], max_keys = 3 }
"#;
    let config = SamplingConfig::from_toml_str(text, "f.toml").unwrap();
    let sampler = RuleBasedSampler::with_clock(&config, "shop", ManualClock::new()).unwrap();
    SamplerMetrics::with_meter(meters.meter("test")).register_rules(&sampler);
    let root = Context::new();
    // Five routes: two keys told apart by the default, three by the cap (which sees
    // only what the default kept).
    for route in ["/a", "/b", "/c", "/d", "/e"] {
        let route = [KeyValue::new("http.route", route)];
        sampler.should_sample(
            Some(&root),
            TraceId::from(1u128),
            "GET",
            &SpanKind::Server,
            &route,
            &[],
        );
    }
    meters.force_flush().unwrap();
    let overflow = points(&exporter, SamplerMetrics::FAIR_OVERFLOW);
    let shop = ("service.name", "shop");
    let rule = [
        shop,
        ("otel_rate_sampler.limiter", "rule"),
        ("otel_rate_sampler.rule", "default"),
    ];
    assert_eq!(value_of(&overflow, &rule), 3);
    let cap = [shop, ("otel_rate_sampler.limiter", "cap")];
    assert_eq!(value_of(&overflow, &cap), 2);
    assert_eq!(overflow.len(), 2, "{overflow:?}");
    for (attrs, _) in &overflow {
        assert!(
            attrs.iter().all(|kv| kv.key.as_str() != "http.route"),
            "{attrs:?}"
        );
    }
}
