//! Loading a rule file of many services (`SamplingConfig::from_toml_str`,
//! `from_jaeger_json_str`), beside the parse alone of the same text by the crate that
//! reads it (`toml::Table`, `serde_json::Value`): what the loader's checks and model
//! cost on top of the parse. Issue 11's target: 200 000 services from TOML in under a
//! second; this bench uses 20 000 so that a sample takes well under a second, and
//! loading is linear (`tests/config/model.rs` loads the 200 000).

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use otel_rate_sampler::SamplingConfig;

const SERVICES: usize = 20_000;

/// The file of the 200 000-service test, smaller: a default rule every service
/// inherits, then one rate per service.
fn toml_text() -> String {
    let mut text = String::from(
        "[[default.rule]]\nname = \"health\"\nspan_name = \"*health*\"\nprobability = 0.0\n",
    );
    for i in 0..SERVICES {
        text.push_str(&format!("[[service]]\nname = \"s{i}\"\nrate = 2.0\n"));
    }
    text
}

fn json_text() -> String {
    let services: Vec<String> = (0..SERVICES)
        .map(|i| format!("{{\"service\": \"s{i}\", \"type\": \"ratelimiting\", \"param\": 2}}"))
        .collect();
    format!("{{\"service_strategies\": [{}]}}", services.join(","))
}

fn bench(c: &mut Criterion) {
    let toml_text = toml_text();
    let json_text = json_text();
    let mut group = c.benchmark_group(format!("load_{SERVICES}_services"));
    group.sample_size(10);
    group.bench_function("toml_Table_parse_only", |b| {
        b.iter(|| toml::from_str::<toml::Table>(&toml_text).unwrap())
    });
    group.bench_function("SamplingConfig_from_toml_str", |b| {
        b.iter(|| SamplingConfig::from_toml_str(&toml_text, "bench.toml").unwrap())
    });
    group.bench_function("serde_json_Value_parse_only", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(&json_text).unwrap())
    });
    group.bench_function("SamplingConfig_from_jaeger_json_str", |b| {
        b.iter(|| SamplingConfig::from_jaeger_json_str(&json_text, "bench.json").unwrap())
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
