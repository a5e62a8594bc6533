//! The plain-rate environment entry points, in the default build (no `config`
//! feature): `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` as the specification
//! reads them, through a lookup function (tests never mutate the process environment).

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::env::{
    DEFAULT_TRACES_PER_SECOND, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG,
};
use otel_rate_sampler::{RateLimiter as _, RateLimitingSampler, RemoteParents};

fn env(pairs: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    let pairs = pairs.to_vec();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

fn rate(s: &RateLimitingSampler) -> f64 {
    s.limiter().limit().per_second_rate()
}

#[test]
fn sampler_names_are_case_insensitive() {
    for (value, remote) in [
        ("ratelimiting", RemoteParents::Cap),
        ("RATELIMITING", RemoteParents::Cap),
        (" RateLimiting ", RemoteParents::Cap),
        ("parentbased_ratelimiting", RemoteParents::Follow),
        ("PARENTBASED_RATELIMITING", RemoteParents::Follow),
    ] {
        let s = RateLimitingSampler::from_lookup(env(&[
            (OTEL_TRACES_SAMPLER, value),
            (OTEL_TRACES_SAMPLER_ARG, "2.5"),
        ]))
        .unwrap()
        .unwrap_or_else(|| panic!("{value:?} chooses the rate limiter"));
        assert_eq!((s.remote_parents(), rate(&s)), (remote, 2.5), "{value:?}");
    }
}

#[test]
fn empty_or_other_sampler_values_leave_the_choice_to_the_sdk() {
    for value in [
        "",
        "  ",
        "always_on",
        "parentbased_traceidratio",
        "ratelimiting2",
    ] {
        let s = RateLimitingSampler::from_lookup(env(&[
            (OTEL_TRACES_SAMPLER, value),
            (OTEL_TRACES_SAMPLER_ARG, "not read"),
        ]));
        assert!(matches!(s, Ok(None)), "{value:?}");
    }
    assert!(matches!(
        RateLimitingSampler::from_lookup(env(&[])),
        Ok(None)
    ));
}

#[test]
fn an_empty_or_unset_argument_means_the_default_rate() {
    for pairs in [
        &[(OTEL_TRACES_SAMPLER, "ratelimiting")][..],
        &[
            (OTEL_TRACES_SAMPLER, "ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, ""),
        ],
        &[
            (OTEL_TRACES_SAMPLER, "ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, " \t"),
        ],
    ] {
        let s = RateLimitingSampler::from_lookup(env(pairs))
            .unwrap()
            .unwrap();
        assert_eq!(rate(&s), DEFAULT_TRACES_PER_SECOND, "{pairs:?}");
    }
}

#[test]
fn a_bad_argument_is_an_error_naming_the_variable_and_the_value() {
    for arg in ["fast", "-1", "0", "NaN", "inf", "1e300"] {
        let err = RateLimitingSampler::from_lookup(env(&[
            (OTEL_TRACES_SAMPLER, "parentbased_ratelimiting"),
            (OTEL_TRACES_SAMPLER_ARG, arg),
        ]))
        .unwrap_err();
        assert_eq!(
            (err.variable(), err.value()),
            (OTEL_TRACES_SAMPLER_ARG, arg)
        );
        assert!(
            err.to_string()
                .starts_with(&format!("OTEL_TRACES_SAMPLER_ARG={arg:?}: ")),
            "{err}"
        );
    }
}

#[test]
fn the_lenient_reader_warns_once_and_keeps_the_asked_parent_policy() {
    let mut warnings = Vec::new();
    let s = RateLimitingSampler::from_lookup_lossy(
        env(&[
            (OTEL_TRACES_SAMPLER, "RateLimiting"),
            (OTEL_TRACES_SAMPLER_ARG, "-3"),
        ]),
        |e| warnings.push(e.to_string()),
    )
    .unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("-3"), "{warnings:?}");
    assert_eq!(
        (s.remote_parents(), rate(&s)),
        (RemoteParents::Cap, DEFAULT_TRACES_PER_SECOND)
    );
    // Remote sampled parents count against the cap under `ratelimiting`.
    let remote = Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from(7u128),
        SpanId::from(9u64),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ));
    let decision = s
        .should_sample(
            Some(&remote),
            TraceId::from(7u128),
            "op",
            &opentelemetry::trace::SpanKind::Server,
            &[],
            &[],
        )
        .decision;
    assert_eq!(decision, SamplingDecision::RecordAndSample);
    assert_eq!(s.stats().window.map(|w| w.used), Some(1));
    // Nothing asked: no sampler and no warning.
    let mut warned = 0;
    assert!(RateLimitingSampler::from_lookup_lossy(env(&[]), |_| warned += 1).is_none());
    assert_eq!(warned, 0);
}
