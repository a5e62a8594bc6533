//! `paced = false` on any table that carries a limit opts it out of pacing; the key
//! anywhere else is an error that says why.

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::{ConfigErrorKind as K, ManualClock, RuleBasedSampler, SamplingConfig};

fn kept(s: &impl ShouldSample, span: &str, n: u128) -> usize {
    (1..=n)
        .filter(|&i| {
            s.should_sample(None, TraceId::from(i), span, &SpanKind::Server, &[], &[])
                .decision
                == SamplingDecision::RecordAndSample
        })
        .count()
}

fn sampler(text: &str) -> RuleBasedSampler<ManualClock> {
    let config = SamplingConfig::from_toml_str(text, "p.toml").unwrap();
    RuleBasedSampler::with_clock(&config, "svc", ManualClock::new()).unwrap()
}

#[test]
fn limits_are_paced_unless_a_table_says_paced_false() {
    // A burst at the start of a window: a tenth paced, everything unpaced.
    assert_eq!(kept(&sampler("[default]\nlimit = 50\n"), "op", 100), 5);
    assert_eq!(
        kept(
            &sampler("[default]\nlimit = 50\npaced = false\n"),
            "op",
            100
        ),
        50
    );
    assert_eq!(
        kept(&sampler("[default]\nlimit = 50\npaced = true\n"), "op", 100),
        5
    );
    // On a rule, and on a cap (whose floors and shared pool follow it).
    let text = r#"
[default]
rate = 1.0
[[service]]
name = "svc"
rate = 1000.0
cap = { limit = 20, paced = false }
[[service.rule]]
span_name = "hot"
limit = 40
paced = false
floor = 4
[[service.rule]]
span_name = "calm"
limit = 40
"#;
    let s = sampler(text);
    assert_eq!(
        kept(&s, "calm", 100),
        4,
        "a paced rule under an unpaced cap"
    );
    assert_eq!(
        kept(&s, "hot", 100),
        16,
        "its floor and the rest of the pool"
    );
}

#[test]
fn paced_without_a_limit_with_a_probability_or_on_a_fleet_limit_is_an_error() {
    for (text, kind, key, says) in [
        (
            "[default]\npaced = false\n",
            K::MissingKey,
            "default.paced",
            "needs a `rate` or a `limit`",
        ),
        (
            "[default]\nprobability = 0.5\npaced = false\n",
            K::ConflictingKeys,
            "default.paced",
            "applies to a limit",
        ),
        (
            "[fleet]\nredis = \"redis://127.0.0.1:1\"\n[default]\nrate = 5.0\nscope = \"fleet\"\npaced = true\n",
            K::ConflictingKeys,
            "default.paced",
            "not paced",
        ),
    ] {
        let err = SamplingConfig::from_toml_str(text, "p.toml").expect_err(text);
        let msg = err.to_string();
        assert_eq!((err.kind(), err.key()), (kind, key), "{msg}");
        assert!(msg.contains(says), "{msg:?} should say {says:?}");
    }
    // `paced = "no"` is a type error, not ignored.
    assert!(
        SamplingConfig::from_toml_str("[default]\nrate = 1.0\npaced = \"no\"\n", "p.toml").is_err()
    );
}
