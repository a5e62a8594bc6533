//! Every sampler of the crate through the layer, and a foreign one: kept traces arrive
//! whole, dropped ones send nothing, and nothing below a dropped root reaches the
//! wrapped layer, whether the sampler drops by limit, by probability or by rule.

use std::time::Duration;

use opentelemetry_sdk::trace::{Sampler, ShouldSample};
use otel_rate_sampler::{
    AdaptiveSampler, Algorithm, Limit, ManualClock, RateLimitingSampler, SkipDropped,
};
use tracing_subscriber::layer::SubscriberExt as _;

use crate::counting::{Counting, Counts};
use crate::pipeline::{assert_kept_whole, Provider};
use crate::shapes::{request, SPANS};

const TRACES: i64 = 40;

/// `TRACES` requests through the layer with `sampler`, checked at the exporter and at
/// the wrapped layer; the number kept. `advance` runs between requests (a clock).
fn through_the_layer(sampler: impl ShouldSample + 'static, advance: impl Fn(i64)) -> usize {
    let provider = Provider::new(sampler);
    let counts = Counts::default();
    let layer = SkipDropped::new(Counting {
        inner: provider.layer(),
        counts: counts.clone(),
    });
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let decisions: Vec<_> = (0..TRACES)
        .map(|n| {
            advance(n);
            tracing::dispatcher::with_default(&dispatch, || request(n))
        })
        .collect();
    assert_kept_whole(&provider.spans(), &decisions, SPANS);
    let kept = decisions.iter().filter(|d| d.1).count();
    assert!(
        kept > 0 && kept < TRACES as usize,
        "{kept} kept: both paths taken"
    );
    assert_eq!(counts.get("new_span", "request"), TRACES as usize);
    assert_eq!(
        counts.get("new_span", "step"),
        kept * 3,
        "children of dropped roots"
    );
    assert_eq!(counts.get("enter", "query"), kept * 3);
    assert_eq!(counts.get("event", "work"), kept * 3);
    kept
}

#[test]
fn rate_limiting_samplers_of_every_kind() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::BucketedWindow,
    ] {
        let clock = ManualClock::new();
        // Part-way into a window, then a quarter window per request: 4 kept per window.
        clock.advance(Duration::from_millis(370));
        let sampler =
            RateLimitingSampler::builder(Limit::per_window(4, Duration::from_secs(1)).unwrap())
                .algorithm(algorithm)
                .clock(clock.clone())
                .build();
        let kept = through_the_layer(sampler, |_| clock.advance(Duration::from_millis(100)));
        assert!(kept <= 4 * 5, "{algorithm:?}: {kept} kept in about 4 s");
    }
}

#[test]
fn the_adaptive_sampler() {
    let clock = ManualClock::new();
    let sampler = AdaptiveSampler::builder(Limit::per_window(5, Duration::from_secs(1)).unwrap())
        .clock(clock.clone())
        .build();
    through_the_layer(sampler, |_| clock.advance(Duration::from_millis(50)));
}

#[test]
fn a_foreign_sampler_by_trace_id_ratio_and_parent() {
    through_the_layer(
        Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(0.5))),
        |_| (),
    );
}

#[cfg(feature = "config")]
#[test]
fn the_rule_based_sampler_through_a_reload() {
    use otel_rate_sampler::{RuleBasedSampler, SamplingConfig};

    let file = |limit: u32| {
        format!(
            "[[service]]\nname = \"api\"\nlimit = 100\nwindow = \"1h\"\n\
             [[service.rule]]\nname = \"items\"\nspan_name = \"request\"\n\
             attributes = {{ \"http.route\" = \"/items/*\" }}\nlimit = {limit}\nwindow = \"1h\"\npaced = false\n"
        )
    };
    let config = |limit| SamplingConfig::from_toml_str(&file(limit), "rules.toml").unwrap();
    let clock = ManualClock::new();
    let sampler = RuleBasedSampler::with_clock(&config(3), "api", clock).unwrap();
    let reloaded = sampler.clone();
    let kept = through_the_layer(sampler, |n| {
        if n == TRACES / 2 {
            reloaded.reload(&config(6)).unwrap();
        }
    });
    // 3 before the reload, 3 more after it raised the limit to 6 in the same hour.
    assert_eq!(kept, 6);
}

#[cfg(feature = "composable")]
#[test]
fn the_composite_sampler() {
    use otel_rate_sampler::{
        ComposableAlwaysOn, ComposableParentThreshold, ComposableRateLimiting, CompositeSampler,
    };

    let limit = Limit::per_window(7, Duration::from_secs(3600))
        .unwrap()
        .unpaced();
    let limited = ComposableRateLimiting::with_clock(ComposableAlwaysOn, limit, ManualClock::new());
    let kept = through_the_layer(
        CompositeSampler::new(ComposableParentThreshold::new(limited)),
        |_| (),
    );
    assert!(kept <= 7);
}
