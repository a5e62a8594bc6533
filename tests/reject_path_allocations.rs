//! The documented promise that a refusal allocates nothing, checked with a counting
//! allocator (`stats_alloc` as this test binary's global allocator).
#![cfg(feature = "config")]

use std::alloc::System;

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::{Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::{ManualClock, RuleBasedSampler, SamplingConfig};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

// The only test in this binary.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[test]
fn refusals_allocate_nothing() {
    let text = r#"
[default]
limit = 1
[[default.rule]]
name = "glob"
span_name = "GET /{users,orders}/*"
attributes = { "http.status_code" = "5*", "ratio" = "0.*", "flag" = "true" }
limit = 1
[[default.rule]]
name = "infix"
span_name = "*orders*"
attributes = { "missing" = "x" }
limit = 1
[[default.rule]]
name = "array"
attributes = { "tags" = "nomatch*" }
limit = 1
"#;
    let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
    let s = RuleBasedSampler::with_clock(&config, "svc", ManualClock::new()).unwrap();
    let attrs = [
        KeyValue::new("http.status_code", 503),
        KeyValue::new("ratio", 0.25),
        KeyValue::new("flag", true),
        KeyValue::new("http.method", "GET"),
        // Matched as text, written on the stack like the numbers.
        KeyValue::new(
            "tags",
            Value::Array(vec![StringValue::from("a"), StringValue::from("b")].into()),
        ),
    ];
    let root = Context::new();
    let decide = |name: &str| {
        s.should_sample(
            Some(&root),
            TraceId::from(9u128),
            name,
            &SpanKind::Server,
            &attrs,
            &[],
        )
    };
    // Spend the permits of both the rule and the default.
    assert_eq!(
        decide("GET /orders/1").decision,
        SamplingDecision::RecordAndSample
    );
    assert_eq!(
        decide("POST /x").decision,
        SamplingDecision::RecordAndSample
    );
    // The counter is global, and the test harness's own thread may allocate now and
    // then while this runs. A refusal that allocated would do so in every one of the
    // 2000 refusals of every attempt, so one clean attempt out of five proves the point.
    let mut changes = Vec::new();
    for _attempt in 0..5 {
        let region = Region::new(GLOBAL);
        for _ in 0..1000 {
            let a = decide("GET /orders/1");
            let b = decide("POST /x");
            assert!(a.decision == SamplingDecision::Drop && b.decision == SamplingDecision::Drop);
        }
        let change = region.change();
        if change.allocations == 0 && change.reallocations == 0 {
            return;
        }
        changes.push(change);
    }
    panic!("every attempt allocated: {changes:?}");
}
