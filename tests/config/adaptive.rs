//! The `adaptive` policy: its forms in TOML, its errors, and a rule-based sampler that
//! keeps about, and at most, its limit with `th` on every kept span.

use std::time::Duration;

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::attributes::{ADAPTIVE, SAMPLER_PARAM, SAMPLER_RULE, SAMPLER_TYPE};
use otel_rate_sampler::stats::DropReason;
use otel_rate_sampler::summary::RulePolicy;
use otel_rate_sampler::{
    ConfigErrorKind as K, Limit, ManualClock, RuleBasedSampler, SamplingConfig,
};

fn config(text: &str) -> SamplingConfig {
    SamplingConfig::from_toml_str(text, "a.toml").unwrap()
}

#[test]
fn adaptive_takes_a_rate_or_a_limit_per_window() {
    let text = r#"
[default]
adaptive = 100

[[service]]
name = "table"
adaptive = { limit = 20, window = "2s" }

[[service.rule]]
name = "fractional"
span_name = "slow*"
adaptive = { rate = 0.5 }
"#;
    let c = config(text);
    let second = Duration::from_secs(1);
    assert_eq!(
        c.effective_rules("other").default(),
        Some(RulePolicy::Adaptive {
            limit: Limit::per_window(100, second).unwrap()
        })
    );
    let table = c.effective_rules("table");
    assert_eq!(
        table.default(),
        Some(RulePolicy::Adaptive {
            limit: Limit::per_window(20, 2 * second).unwrap()
        })
    );
    assert_eq!(
        table.rules()[0].policy(),
        RulePolicy::Adaptive {
            limit: Limit::per_second(0.5).unwrap()
        }
    );
    // Its cap is a limiter each process builds (a fixed window), listed as a limit.
    let limits: Vec<(&str, u32)> = table.limits().map(|(n, l)| (n, l.permits())).collect();
    assert_eq!(limits, [("fractional", 1), ("default", 20)]);
    let described = c.describe("table").to_string();
    assert!(
        described
            .contains("otherwise: keep about 20 per 2s (10/s) by an adaptive probability, capped"),
        "{described}"
    );
}

#[track_caller]
fn refused(text: &str, kind: K, key: &str, says: &str) {
    let err = SamplingConfig::from_toml_str(text, "a.toml").expect_err("must fail");
    let msg = err.to_string();
    assert_eq!(err.kind(), kind, "{msg}");
    assert_eq!(err.key(), key, "{msg}");
    assert!(msg.contains(says), "{msg:?} should say {says:?}");
}

#[test]
fn adaptive_refuses_other_policy_keys_bad_limits_and_a_cap() {
    refused(
        "[default]\nadaptive = 10\nrate = 5.0\n",
        K::ConflictingKeys,
        "default.rate",
        "takes no `rate`",
    );
    refused(
        "[default]\nadaptive = 10\nscope = \"fleet\"\n",
        K::ConflictingKeys,
        "default.scope",
        "local to each process",
    );
    refused(
        "[default]\nprobability = 0.5\nadaptive = 10\n",
        K::ConflictingKeys,
        "default.probability",
        "takes no `probability`",
    );
    refused(
        "[default]\nadaptive = 0\n",
        K::InvalidLimit,
        "default.adaptive",
        "",
    );
    refused(
        "[default]\nadaptive = { limit = 5, rate = 2.0 }\n",
        K::ConflictingKeys,
        "default.adaptive.limit",
        "not both",
    );
    refused(
        "[default]\nadaptive = {}\n",
        K::MissingKey,
        "default.adaptive",
        "needs its cap",
    );
    refused(
        "[default]\nadaptive = { limit = 5, window = \"0s\" }\n",
        K::InvalidLimit,
        "default.adaptive.window",
        "shorter than the minimum",
    );
    refused(
        "[default]\nrate = 1.0\ncap = { adaptive = 5 }\n",
        K::UnknownKey,
        "default.cap.adaptive",
        "takes no `adaptive`",
    );
}

#[test]
fn an_adaptive_rule_keeps_about_and_at_most_its_limit_with_th() {
    let text = r#"
[default]
probability = 0.0

[[default.rule]]
name = "api"
span_name = "GET *"
adaptive = { limit = 1000, window = "1s" }
"#;
    let clock = ManualClock::new();
    let s = RuleBasedSampler::with_clock(&config(text), "svc", clock.clone()).unwrap();
    let offered = 10_000u64;
    let step = 1_000_000_000 / offered;
    let mut id = 0x1234_5678_9abc_def0u128;
    for window in 0..6u64 {
        let (mut kept, mut weighted) = (0u64, 0.0f64);
        for i in 0..offered {
            clock.set(window * 1_000_000_000 + i * step);
            // A 128-bit LCG: well-spread low bits.
            id = id
                .wrapping_mul(0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645)
                .wrapping_add(0x5851_f42d_4c95_7f2d_1405_7b7e_f767_814f);
            let r = s.should_sample(
                None,
                TraceId::from(id),
                "GET /x",
                &SpanKind::Server,
                &[],
                &[],
            );
            if r.decision == SamplingDecision::RecordAndSample {
                kept += 1;
                assert!(r
                    .attributes
                    .contains(&KeyValue::new(SAMPLER_TYPE, ADAPTIVE)));
                assert!(r.attributes.contains(&KeyValue::new(SAMPLER_PARAM, 1000.0)));
                assert!(r.attributes.contains(&KeyValue::new(SAMPLER_RULE, "api")));
                let ot = r.trace_state.get("ot").expect("th on every kept span");
                let th = ot.strip_prefix("th:").expect("th");
                let t = u64::from_str_radix(&format!("{th:0<14}"), 16).unwrap();
                weighted += (1u64 << 56) as f64 / ((1u64 << 56) - t) as f64;
            }
        }
        assert!(kept <= 1000, "window {window}: {kept}");
        if window > 0 {
            // p = 1000 / 10 000 from the second window on: Binomial(10 000, 0.1),
            // 30 standard deviation, under the cap of 1000.
            assert!(kept >= 900, "window {window}: {kept}");
            let error = (weighted - offered as f64).abs() / offered as f64;
            assert!(error <= 0.10, "window {window}: weighted {weighted}");
        }
    }
    let stats = s.stats();
    let api = stats.rule("api").unwrap();
    assert_eq!(api.decisions.total(), 6 * offered);
    assert!(api.decisions.dropped_for(DropReason::Probability) > 0);
    assert!(api.window.is_some(), "the cap's window");
}

#[test]
fn a_reload_keeps_an_unchanged_adaptive_rules_estimate_and_cap() {
    let text = "[default]\nadaptive = { limit = 10, window = \"1s\" }\n";
    let clock = ManualClock::new();
    // In the last tenth of each window: the paced cap has released all 10 by then.
    clock.set(950_000_000);
    let s = RuleBasedSampler::with_clock(&config(text), "svc", clock.clone()).unwrap();
    let kept = |from: u128, n: u128| {
        (from..from + n)
            .filter(|i| {
                let id = TraceId::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
                s.should_sample(None, id, "op", &SpanKind::Server, &[], &[])
                    .decision
                    == SamplingDecision::RecordAndSample
            })
            .count()
    };
    assert_eq!(kept(0, 1_000), 10, "window 0: p = 1, the cap keeps 10");
    clock.advance(Duration::from_secs(1));
    let in_window_1 = kept(1_000, 500);
    assert!(in_window_1 <= 10);
    // Window 0 was seen from 950 ms on only: 1000 offered in 50 ms is 20 000 per
    // second, so p = 10 / 20 000 in window 1. The same rule again: the cap's window
    // count and that p stay, so the rest of this window keeps at most what the cap has
    // left, and p does not reset to 1.
    s.reload(&config(text)).unwrap();
    let total = in_window_1 + kept(1_500, 100);
    // About 0.3 at p = 1/2000: room is left (p = 1 would have filled the cap).
    assert!(total < 10, "{total}");
    // A trace every threshold keeps: kept with p = 10 / 20 000, not th:0.
    let r = s.should_sample(
        None,
        TraceId::from(u128::MAX),
        "op",
        &SpanKind::Server,
        &[],
        &[],
    );
    assert_eq!(r.trace_state.header(), "ot=th:ffdf3b645a1cac");
}
