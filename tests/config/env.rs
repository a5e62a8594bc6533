//! The environment entry points, with a lookup function instead of the process
//! environment (tests never mutate it).

use std::collections::HashMap;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};
use otel_rate_sampler::env::{
    OTEL_RATE_SAMPLER_CONFIG, OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER,
    OTEL_TRACES_SAMPLER_ARG, UNKNOWN_SERVICE,
};
use otel_rate_sampler::{ConfigErrorKind, RuleBasedSampler};

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

fn sample(s: &RuleBasedSampler, parent: Option<&Context>) -> SamplingResult {
    s.should_sample(
        parent,
        TraceId::from(1u128),
        "op",
        &opentelemetry::trace::SpanKind::Server,
        &[],
        &[],
    )
}

fn remote_sampled() -> Context {
    let sc = SpanContext::new(
        TraceId::from(7u128),
        SpanId::from(9u64),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Context::new().with_remote_span_context(sc)
}

#[test]
fn ratelimiting_values_set_the_rate_and_the_remote_parent_policy() {
    let s = RuleBasedSampler::from_lookup(
        "svc",
        env(&[
            (OTEL_TRACES_SAMPLER, "parentbased_ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, "0.5"),
        ]),
    )
    .unwrap()
    .unwrap();
    let r = sample(&s, None);
    assert!(r
        .attributes
        .contains(&KeyValue::new("sampler.param", Value::F64(0.5))));
    assert_eq!(sample(&s, None).decision, SamplingDecision::Drop);
    // Remote parents are followed...
    assert_eq!(
        sample(&s, Some(&remote_sampled())).decision,
        SamplingDecision::RecordAndSample
    );
    // ...but capped under plain `ratelimiting`.
    let capped = RuleBasedSampler::from_lookup(
        "svc",
        env(&[
            (OTEL_TRACES_SAMPLER, "ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, "1"),
        ]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        sample(&capped, Some(&remote_sampled())).decision,
        SamplingDecision::RecordAndSample
    );
    assert_eq!(
        sample(&capped, Some(&remote_sampled())).decision,
        SamplingDecision::Drop
    );
    // No argument: the default rate.
    let default =
        RuleBasedSampler::from_lookup("svc", env(&[(OTEL_TRACES_SAMPLER, "ratelimiting")]))
            .unwrap()
            .unwrap();
    assert!(sample(&default, None)
        .attributes
        .contains(&KeyValue::new("sampler.param", Value::F64(100.0))));
}

#[test]
fn other_samplers_are_left_to_the_sdk() {
    assert!(RuleBasedSampler::from_lookup("svc", env(&[]))
        .unwrap()
        .is_none());
    assert!(RuleBasedSampler::from_lookup(
        "svc",
        env(&[
            (OTEL_TRACES_SAMPLER, "always_on"),
            (OTEL_TRACES_SAMPLER_ARG, "x")
        ])
    )
    .unwrap()
    .is_none());
}

#[test]
fn a_config_file_variable_loads_the_rules() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sampling.toml");
    let s = RuleBasedSampler::from_lookup("search", env(&[(OTEL_RATE_SAMPLER_CONFIG, path)]))
        .unwrap()
        .unwrap();
    assert_eq!(s.service(), "search");
    let r = s.should_sample(
        None,
        TraceId::from(1u128),
        "GET /search",
        &opentelemetry::trace::SpanKind::Server,
        &[],
        &[],
    );
    assert!(
        r.attributes
            .contains(&KeyValue::new("sampler.rule", "rule-1")),
        "{:?}",
        r.attributes
    );
}

#[test]
fn strict_entry_points_report_bad_values() {
    let bad_arg = RuleBasedSampler::from_lookup(
        "svc",
        env(&[
            (OTEL_TRACES_SAMPLER, "ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, "fast"),
        ]),
    )
    .unwrap_err();
    assert_eq!(
        (bad_arg.kind(), bad_arg.key(), bad_arg.file()),
        (
            ConfigErrorKind::InvalidLimit,
            OTEL_TRACES_SAMPLER_ARG,
            "environment"
        )
    );
    assert!(
        bad_arg.to_string().contains("\"fast\": not a number"),
        "{bad_arg}"
    );
    let negative = RuleBasedSampler::from_lookup(
        "svc",
        env(&[
            (OTEL_TRACES_SAMPLER, "ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, "-1"),
        ]),
    )
    .unwrap_err();
    assert!(negative.to_string().contains("positive"), "{negative}");
    let both = RuleBasedSampler::from_lookup(
        "svc",
        env(&[
            (OTEL_TRACES_SAMPLER, "ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, "5"),
            (OTEL_RATE_SAMPLER_CONFIG, "x.toml"),
        ]),
    )
    .unwrap_err();
    assert_eq!(both.kind(), ConfigErrorKind::ConflictingKeys);
    // On main the file silently won over another sampler.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sampling.toml");
    for other in ["always_off", "parentbased_traceidratio"] {
        let conflict = RuleBasedSampler::from_lookup(
            "svc",
            env(&[
                (OTEL_TRACES_SAMPLER, other),
                (OTEL_RATE_SAMPLER_CONFIG, path),
            ]),
        )
        .unwrap_err();
        assert_eq!(
            (conflict.kind(), conflict.key()),
            (ConfigErrorKind::ConflictingKeys, OTEL_TRACES_SAMPLER),
            "{conflict}"
        );
        assert!(conflict.to_string().contains(other), "{conflict}");
    }
    for ours in ["parentbased_ratelimiting", "RATELIMITING"] {
        let s = RuleBasedSampler::from_lookup(
            "svc",
            env(&[
                (OTEL_TRACES_SAMPLER, ours),
                (OTEL_RATE_SAMPLER_CONFIG, path),
            ]),
        );
        assert!(s.unwrap().is_some(), "{ours}");
    }
    let missing = RuleBasedSampler::from_lookup(
        "svc",
        env(&[(OTEL_RATE_SAMPLER_CONFIG, "/nonexistent.toml")]),
    )
    .unwrap_err();
    assert_eq!(
        (missing.kind(), missing.file()),
        (ConfigErrorKind::Io, "/nonexistent.toml")
    );
}

#[test]
fn lenient_entry_points_warn_and_fall_back() {
    let mut warnings = Vec::new();
    let s = RuleBasedSampler::from_lookup_lossy(
        "svc",
        env(&[
            (OTEL_TRACES_SAMPLER, "ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, "NaN"),
        ]),
        |e| warnings.push(e.to_string()),
    )
    .unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains(OTEL_TRACES_SAMPLER_ARG),
        "{warnings:?}"
    );
    assert!(sample(&s, None)
        .attributes
        .contains(&KeyValue::new("sampler.param", Value::F64(100.0))));
    // Capped remote parents are kept as asked, the fallback is only for the rate.
    assert_eq!(
        sample(&s, Some(&remote_sampled())).decision,
        SamplingDecision::RecordAndSample
    );
    let mut warned = 0;
    let none = RuleBasedSampler::from_lookup_lossy("svc", env(&[]), |_| warned += 1);
    assert!(none.is_none() && warned == 0);
}

#[test]
fn sampler_names_are_case_insensitive() {
    let s = RuleBasedSampler::from_lookup(
        "svc",
        env(&[
            (OTEL_TRACES_SAMPLER, "RATELIMITING"),
            (OTEL_TRACES_SAMPLER_ARG, "1"),
        ]),
    )
    .unwrap()
    .expect("RATELIMITING chooses this crate's sampler");
    // Capped remote parents: `ratelimiting`, not the parent-based form.
    assert_eq!(
        sample(&s, Some(&remote_sampled())).decision,
        SamplingDecision::RecordAndSample
    );
    assert_eq!(
        sample(&s, Some(&remote_sampled())).decision,
        SamplingDecision::Drop
    );
}

#[test]
fn empty_variables_count_as_unset() {
    // An empty file variable is no file: the rate applies, with no conflict.
    let s = RuleBasedSampler::from_lookup(
        "svc",
        env(&[
            (OTEL_RATE_SAMPLER_CONFIG, ""),
            (OTEL_TRACES_SAMPLER, "ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, "0.5"),
        ]),
    )
    .unwrap()
    .unwrap();
    assert!(sample(&s, None)
        .attributes
        .contains(&KeyValue::new("sampler.param", Value::F64(0.5))));
    // An empty argument is the default rate, also beside a file (no conflict).
    let s = RuleBasedSampler::from_lookup(
        "svc",
        env(&[
            (OTEL_TRACES_SAMPLER, "parentbased_ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, ""),
        ]),
    )
    .unwrap()
    .unwrap();
    assert!(sample(&s, None)
        .attributes
        .contains(&KeyValue::new("sampler.param", Value::F64(100.0))));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sampling.toml");
    let s = RuleBasedSampler::from_lookup(
        "search",
        env(&[
            (OTEL_RATE_SAMPLER_CONFIG, path),
            (OTEL_TRACES_SAMPLER, "ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, " "),
        ]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(s.service(), "search");
    // Everything empty: nothing chosen.
    assert!(RuleBasedSampler::from_lookup(
        "svc",
        env(&[(OTEL_RATE_SAMPLER_CONFIG, ""), (OTEL_TRACES_SAMPLER, "")])
    )
    .unwrap()
    .is_none());
}

#[test]
fn with_no_service_given_the_environment_names_it() {
    let chosen = [(OTEL_TRACES_SAMPLER, "ratelimiting")];
    let with = |extra: &[(&'static str, &'static str)]| {
        let pairs: Vec<_> = chosen.iter().chain(extra).copied().collect();
        RuleBasedSampler::from_lookup("", env(&pairs))
    };
    let s = with(&[
        (OTEL_SERVICE_NAME, "checkout"),
        (OTEL_RESOURCE_ATTRIBUTES, "service.name=other"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(s.service(), "checkout");
    let s = with(&[
        (OTEL_SERVICE_NAME, ""),
        (
            OTEL_RESOURCE_ATTRIBUTES,
            "host.name=a,service.name=check%20out",
        ),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(s.service(), "check out");
    assert_eq!(with(&[]).unwrap().unwrap().service(), UNKNOWN_SERVICE);
    // A given name wins over the environment.
    let s = RuleBasedSampler::from_lookup(
        "given",
        env(&[
            (OTEL_TRACES_SAMPLER, "ratelimiting"),
            (OTEL_SERVICE_NAME, "checkout"),
        ]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(s.service(), "given");
    // The file's rules are those of the environment's service.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sampling.toml");
    let s = RuleBasedSampler::from_lookup(
        "",
        env(&[
            (OTEL_RATE_SAMPLER_CONFIG, path),
            (OTEL_SERVICE_NAME, "search"),
        ]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(s.service(), "search");
}

#[test]
fn resource_attributes_that_do_not_decode_are_an_error_or_a_warning() {
    let vars = [
        (OTEL_TRACES_SAMPLER, "ratelimiting"),
        (OTEL_RESOURCE_ATTRIBUTES, "service.name=a%zz"),
    ];
    let err = RuleBasedSampler::from_lookup("", env(&vars)).unwrap_err();
    assert_eq!(err.key(), OTEL_RESOURCE_ATTRIBUTES);
    assert!(err.to_string().contains("percent"), "{err}");
    // Not read when the application names the service.
    assert!(RuleBasedSampler::from_lookup("svc", env(&vars)).is_ok());
    let mut warnings = Vec::new();
    let s = RuleBasedSampler::from_lookup_lossy("", env(&vars), |e| warnings.push(e.to_string()))
        .unwrap();
    assert_eq!(s.service(), UNKNOWN_SERVICE);
    assert!(!warnings.is_empty(), "{warnings:?}");
}
