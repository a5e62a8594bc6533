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

/// Issue 17, item 4, through a rule file: a process that starts part-way into a window
/// keeps its kept traces spread from the second whole window on, with every `algorithm`
/// a rule can name (before, `sliding-log` and `bucketed` replayed their first catch-up
/// in every window: from 0.55 W, 70 of every 100 in two tenths).
#[test]
fn a_start_part_way_into_a_window_stays_spread_for_every_algorithm() {
    const W: u64 = 1_000_000_000;
    for name in ["fixed", "sliding", "sliding-log", "bucketed"] {
        for phase in [0.0, 0.35, 0.55, 0.95] {
            let text = format!("[default]\nlimit = 100\nwindow = \"1s\"\nalgorithm = \"{name}\"\n");
            let config = SamplingConfig::from_toml_str(&text, "p.toml").unwrap();
            let clock = ManualClock::new();
            let s = RuleBasedSampler::with_clock(&config, "svc", clock.clone()).unwrap();
            let start = 2 * W + (phase * W as f64) as u64;
            // One root every millisecond: 10 × N per window, for six windows.
            let kept: Vec<u64> = (0..6_000u64)
                .map(|ms| start + ms * 1_000_000)
                .filter(|&now| {
                    clock.set(now);
                    let id = TraceId::from(u128::from(now));
                    s.should_sample(None, id, "op", &SpanKind::Server, &[], &[])
                        .decision
                        == SamplingDecision::RecordAndSample
                })
                .collect();
            for k in start.div_ceil(W) + 1..start / W + 6 {
                let mut tenths = [0u32; 10];
                for t in kept.iter().filter(|&&t| t / W == k) {
                    tenths[((t % W) / (W / 10)) as usize] += 1;
                }
                assert_eq!(tenths, [10; 10], "{name} from phase {phase}: window {k}");
            }
        }
    }
}
