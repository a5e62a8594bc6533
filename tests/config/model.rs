//! One rule model across formats: default rules inherited by listed services (with an
//! opt-out), `[default]` optional, rules that could never decide refused, a memory
//! budget for one service's limiters, loading linear in the file.

use std::time::Instant;

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::summary::RulePolicy;
use otel_rate_sampler::{ConfigErrorKind as K, ManualClock, RuleBasedSampler, SamplingConfig};

fn kept(sampler: &impl ShouldSample, name: &str) -> bool {
    let result = sampler.should_sample(
        Some(&Context::new()),
        TraceId::from(7u128),
        name,
        &SpanKind::Server,
        &[],
        &[],
    );
    result.decision == SamplingDecision::RecordAndSample
}

fn names(config: &SamplingConfig, service: &str) -> Vec<String> {
    config
        .effective_rules(service)
        .rules()
        .iter()
        .map(|r| r.name().to_owned())
        .collect()
}

const TOML: &str = r#"
[default]
rate = 10.0
[[default.rule]]
name = "health"
span_name = "*health*"
probability = 0.0
[[default.rule]]
span_name = "GET /metrics"
probability = 0.0

[[service]]
name = "listed"
rate = 5.0
[[service.rule]]
span_name = "POST /pay"
rate = 1.0

[[service]]
name = "replaces"
[[service.rule]]
name = "health"
span_name = "GET /healthz"
rate = 1.0

[[service]]
name = "opted-out"
inherit_default_rules = false
"#;

const JSON: &str = r#"{
  "default_strategy": {"type": "ratelimiting", "param": 10,
    "operation_strategies": [
      {"operation": "GET /health", "type": "probabilistic", "param": 0},
      {"operation": "GET /metrics", "type": "probabilistic", "param": 0}]},
  "service_strategies": [
    {"service": "listed", "type": "ratelimiting", "param": 5,
     "operation_strategies": [{"operation": "POST /pay", "type": "ratelimiting", "param": 1}]},
    {"service": "replaces",
     "operation_strategies": [{"operation": "GET /health", "type": "ratelimiting", "param": 1}]},
    {"service": "opted-out", "inherit_default_rules": false}
  ]
}"#;

#[test]
fn listed_services_inherit_the_default_rules_in_toml_and_jaeger_alike() {
    let toml = SamplingConfig::from_toml_str(TOML, "s.toml").unwrap();
    // Before: a listed TOML service had none of [default]'s rules.
    assert_eq!(
        names(&toml, "listed"),
        ["rule-1", "health", "default-rule-2"]
    );
    // A rule of the service's own, of the same name, replaces the inherited one.
    assert_eq!(names(&toml, "replaces"), ["health", "default-rule-2"]);
    assert_eq!(names(&toml, "opted-out"), Vec::<String>::new());
    assert_eq!(names(&toml, "unlisted"), ["health", "default-rule-2"]);

    let json = SamplingConfig::from_jaeger_json_str(JSON, "s.json").unwrap();
    assert_eq!(
        names(&json, "listed"),
        ["POST /pay", "GET /health", "GET /metrics"]
    );
    assert_eq!(names(&json, "replaces"), ["GET /health", "GET /metrics"]);
    assert_eq!(names(&json, "opted-out"), Vec::<String>::new());

    // The sampler applies what the summary says.
    for config in [&toml, &json] {
        let listed = RuleBasedSampler::with_clock(config, "listed", ManualClock::new()).unwrap();
        assert!(!kept(&listed, "GET /health"));
        assert!(kept(&listed, "POST /pay"));
        let out = RuleBasedSampler::with_clock(config, "opted-out", ManualClock::new()).unwrap();
        assert!(kept(&out, "GET /health"));
        assert!(config
            .effective_rules("listed")
            .rules()
            .iter()
            .skip(1)
            .all(|r| matches!(r.policy(), RulePolicy::Probability(p) if p == 0.0)));
    }
    let text = toml.describe("listed").to_string();
    assert!(text.contains("(inherited from [default])"), "{text}");
}

#[test]
fn default_is_optional_and_its_absence_hides_no_other_error() {
    let config = SamplingConfig::from_toml_str("[[service]]\nname = \"a\"\n", "s.toml").unwrap();
    // The built-in default: 100 per second, for listed services without a policy too.
    let builtin = config.effective_rules("anyone");
    assert!(matches!(
        builtin.default(),
        Some(RulePolicy::Limit { limit, .. }) if limit.permits() == 100 && limit.window().as_secs() == 1
    ));
    assert_eq!(config.effective_rules("a").default(), builtin.default());
    // A [default] with rules and no policy keeps the built-in policy.
    let config = SamplingConfig::from_toml_str(
        "[[default.rule]]\nspan_name = \"x\"\nprobability = 0.0\n",
        "s.toml",
    )
    .unwrap();
    assert_eq!(config.effective_rules("b").default(), builtin.default());
    // Before: "the file needs a [default] block" at 1:1, hiding the real mistake.
    let err = SamplingConfig::from_toml_str("[[service]]\nname = \"a\"\nrate = -1.0\n", "s.toml")
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.key(), err.line()),
        (K::InvalidLimit, "service[0].rate", 3)
    );
}

#[test]
fn a_rule_with_no_condition_before_others_is_refused() {
    let err = SamplingConfig::from_toml_str(
        "[[service]]\nname = \"a\"\n[[service.rule]]\nrate = 1.0\n[[service.rule]]\nname = \"late\"\nspan_name = \"x\"\nrate = 2.0\n",
        "s.toml",
    )
    .unwrap_err();
    assert_eq!(err.kind(), K::UnreachableRule, "{err}");
    assert_eq!(
        (err.line(), err.column(), err.key()),
        (3, 1, "service[0].rule[0]")
    );
    // Last in its own rules, but inherited rules would follow it.
    let err = SamplingConfig::from_toml_str(
        "[[default.rule]]\nname = \"health\"\nspan_name = \"*health*\"\nprobability = 0.0\n[[service]]\nname = \"a\"\n[[service.rule]]\nname = \"all\"\nrate = 1.0\n",
        "s.toml",
    )
    .unwrap_err();
    assert_eq!(err.kind(), K::UnreachableRule, "{err}");
    assert_eq!(err.key(), "service[0].rule[0]");
    assert!(
        err.to_string().contains("inherit_default_rules = false"),
        "{err}"
    );
    // ... which the opt-out allows, as does a catch-all that is last.
    SamplingConfig::from_toml_str(
        "[[default.rule]]\nname = \"health\"\nspan_name = \"*health*\"\nprobability = 0.0\n[[service]]\nname = \"a\"\ninherit_default_rules = false\n[[service.rule]]\nname = \"all\"\nrate = 1.0\n",
        "s.toml",
    )
    .unwrap();
}

#[test]
fn inherited_floors_must_fit_in_the_service_cap() {
    let head = "[default]\nrate = 1.0\ncap = { limit = 10 }\n[[default.rule]]\nname = \"pay\"\nspan_name = \"POST /pay\"\nrate = 5.0\nfloor = 4\n";
    let err =
        SamplingConfig::from_toml_str(&format!("{head}[[service]]\nname = \"a\"\n"), "s.toml")
            .unwrap_err();
    assert_eq!(
        (err.kind(), err.key()),
        (K::MissingKey, "service[0].cap"),
        "{err}"
    );
    let err = SamplingConfig::from_toml_str(
        &format!("{head}[[service]]\nname = \"a\"\ncap = {{ limit = 3 }}\n"),
        "s.toml",
    )
    .unwrap_err();
    assert_eq!(
        (err.kind(), err.key(), err.line()),
        (K::InvalidLimit, "service[0].cap", 11),
        "{err}"
    );
    let config = SamplingConfig::from_toml_str(
        &format!("{head}[[service]]\nname = \"a\"\ncap = {{ limit = 8 }}\n"),
        "s.toml",
    )
    .unwrap();
    assert_eq!(config.effective_rules("a").rules()[0].floor(), 4);
}

#[test]
fn a_hostile_file_of_huge_sliding_logs_is_refused_before_anything_is_allocated() {
    // 16 sliding logs of Limit::MAX_PERMITS: 1 GiB of limiters from a 1.4 KB file.
    let mut text = String::from("[[service]]\nname = \"victim\"\n");
    for i in 0..16 {
        text.push_str(&format!(
            "[[service.rule]]\nname = \"r{i}\"\nspan_name = \"op{i}\"\nlimit = 4194303\nalgorithm = \"sliding-log\"\n"
        ));
    }
    let err = SamplingConfig::from_toml_str(&text, "s.toml").unwrap_err();
    assert_eq!(err.kind(), K::MemoryBudget, "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("s.toml:3:1: service[0].rule[0]: service \"victim\""),
        "{msg}"
    );
    assert!(msg.contains("over the memory budget of 128.0 MiB"), "{msg}");
    assert!(
        msg.contains("rule \"r0\", sliding-log 4194303 per 1s: 64.0 MiB"),
        "{msg}"
    );
    // One such log fits the default budget; a budget of the file's own can allow more
    // (or less).
    let one = "[default]\nlimit = 4194303\nalgorithm = \"sliding-log\"\n";
    SamplingConfig::from_toml_str(one, "s.toml").unwrap();
    let err = SamplingConfig::from_toml_str(
        &format!("[limits]\nmemory_budget = \"16MiB\"\n{one}"),
        "s.toml",
    )
    .unwrap_err();
    assert_eq!(
        (err.kind(), err.key()),
        (K::MemoryBudget, "default"),
        "{err}"
    );
    SamplingConfig::from_toml_str(
        &format!("[limits]\nmemory_budget = \"2GiB\"\n{text}"),
        "s.toml",
    )
    .unwrap();
    let err = SamplingConfig::from_toml_str("[limits]\nmemory_budget = \"lots\"\n", "s.toml")
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.key(), err.line()),
        (K::InvalidLimit, "limits.memory_budget", 2)
    );
    // Inherited rules count toward the service that inherits them.
    let err = SamplingConfig::from_toml_str(
        "[limits]\nmemory_budget = 100000\n[[default.rule]]\nname = \"log\"\nspan_name = \"x\"\nlimit = 10000\nalgorithm = \"sliding-log\"\n[[service]]\nname = \"a\"\n",
        "s.toml",
    )
    .unwrap_err();
    assert_eq!(err.key(), "default.rule[0]", "{err}");
}

#[test]
fn two_hundred_thousand_services_load_in_linear_time() {
    const N: usize = 200_000;
    let mut toml = String::from(
        "[[default.rule]]\nname = \"health\"\nspan_name = \"*health*\"\nprobability = 0.0\n",
    );
    let mut json = String::from("{\"service_strategies\": [");
    for i in 0..N {
        toml.push_str(&format!("[[service]]\nname = \"s{i}\"\nrate = 2.0\n"));
        if i > 0 {
            json.push(',');
        }
        json.push_str(&format!(
            "{{\"service\": \"s{i}\", \"type\": \"ratelimiting\", \"param\": 2}}"
        ));
    }
    json.push_str("]}");
    let start = Instant::now();
    let config = SamplingConfig::from_toml_str(&toml, "big.toml").unwrap();
    let toml_time = start.elapsed();
    assert_eq!(config.services().count(), N);
    let start = Instant::now();
    let lints = config.lints(std::num::NonZeroU32::MIN);
    let lint_time = start.elapsed();
    assert_eq!(lints, []);
    let start = Instant::now();
    let jaeger = SamplingConfig::from_jaeger_json_str(&json, "big.json").unwrap();
    let json_time = start.elapsed();
    assert_eq!(jaeger.services().count(), N);
    assert_eq!(names(&config, "s199999"), ["health"]);
    // Reported, never asserted (speed belongs in benches): see the report of this change.
    eprintln!("{N} services: TOML {toml_time:?}, lints {lint_time:?}, Jaeger JSON {json_time:?}");
}

#[test]
fn a_window_shorter_than_the_clock_resolution_is_refused_not_silently_changed() {
    use otel_rate_sampler::{CachedClock, PreciseClock};
    let text = "[[service]]\nname = \"a\"\n[[service.rule]]\nname = \"fast\"\nspan_name = \"x\"\nlimit = 1\nwindow = \"1ms\"\n";
    let config = SamplingConfig::from_toml_str(text, "s.toml").unwrap();
    // A real clock whose readings move in 4 ms steps. Before: the rule enforced 251/s.
    let coarse = CachedClock::start(std::time::Duration::from_millis(4)).unwrap();
    let err = RuleBasedSampler::with_clock(&config, "a", coarse.clone()).unwrap_err();
    assert_eq!(err.kind(), K::WindowBelowClockResolution, "{err}");
    assert_eq!(
        (err.line(), err.column(), err.key()),
        (7, 10, "service[0].rule[0].window"),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(
            "rule \"fast\": window 1ms is shorter than the resolution of the sampler's clock, 4ms"
        ),
        "{msg}"
    );
    // A finer clock serves it; so does a window of the clock's resolution.
    RuleBasedSampler::with_clock(&config, "a", PreciseClock::new()).unwrap();
    let ok = SamplingConfig::from_toml_str(&text.replace("1ms", "4ms"), "s.toml").unwrap();
    RuleBasedSampler::with_clock(&ok, "a", coarse.clone()).unwrap();
    // The cap and inherited rules are checked too, and named by their own keys.
    let cap = SamplingConfig::from_toml_str(
        "[[default.rule]]\nname = \"d\"\nspan_name = \"y\"\nlimit = 1\nwindow = \"2ms\"\n[[service]]\nname = \"a\"\ncap = { limit = 5, window = \"3ms\" }\n",
        "s.toml",
    )
    .unwrap();
    let err = RuleBasedSampler::with_clock(&cap, "a", coarse.clone()).unwrap_err();
    assert_eq!(err.key(), "default.rule[0].window", "{err}");
    let err = RuleBasedSampler::with_clock(&cap, "other", coarse.clone()).unwrap_err();
    assert_eq!(err.key(), "default.rule[0].window", "{err}");
    let cap = SamplingConfig::from_toml_str(
        "[[service]]\nname = \"a\"\ncap = { limit = 5, window = \"3ms\" }\n",
        "s.toml",
    )
    .unwrap();
    let err = RuleBasedSampler::with_clock(&cap, "a", coarse).unwrap_err();
    assert_eq!(
        (err.key(), err.line()),
        ("service[0].cap.window", 3),
        "{err}"
    );
    assert!(err.to_string().contains("the cap: window 3ms"), "{err}");
}

#[test]
fn check_says_what_the_sampler_does_when_floors_squeeze_the_default() {
    use otel_rate_sampler::lint::LintKind;
    // A cap of 10 per second, 9 of them reserved for "pay": the default's 5 per second
    // get the one permit left. Before: `check` said nothing of it.
    let config = SamplingConfig::from_toml_str(
        "[[service]]\nname = \"s\"\nlimit = 5\ncap = { limit = 10 }\n[[service.rule]]\nname = \"pay\"\nspan_name = \"POST /pay\"\nrate = 9.0\nfloor = 9\n",
        "s.toml",
    )
    .unwrap();
    let clock = ManualClock::new();
    let sampler = RuleBasedSampler::with_clock(&config, "s", clock.clone()).unwrap();
    for _ in 0..3 {
        // Offered through the whole window (a paced limiter spreads its permits), the
        // default first in each step so the rule never takes the pool from it.
        let (mut kept_default, mut kept_pay) = (0, 0);
        for _ in 0..10 {
            kept_default += (0..5).filter(|_| kept(&sampler, "GET /")).count();
            kept_pay += (0..9).filter(|_| kept(&sampler, "POST /pay")).count();
            clock.advance(std::time::Duration::from_millis(100));
        }
        assert_eq!(kept_default, 1);
        assert!(kept_default + kept_pay <= 10, "{kept_pay}");
    }
    let lints = config.lints(std::num::NonZeroU32::MIN);
    assert_eq!(lints.len(), 1, "{lints:?}");
    assert_eq!(lints[0].kind(), LintKind::SharedPoolBelowDefault);
    assert!(
        lints[0]
            .to_string()
            .contains("keep at most 1 per cap window"),
        "{}",
        lints[0]
    );
    let text = config.describe("s").to_string();
    assert!(text.contains("cap shared pool: 1 per 1s"), "{text}");
}

#[test]
fn a_service_policy_behind_a_rule_that_matches_everything_is_refused() {
    // Before: the service's `rate = 2.0` was silently never used.
    let err = SamplingConfig::from_toml_str(
        "[[service]]\nname = \"a\"\nrate = 2.0\n[[service.rule]]\nname = \"all\"\nrate = 1.0\n",
        "s.toml",
    )
    .unwrap_err();
    assert_eq!(
        (err.kind(), err.line(), err.column(), err.key()),
        (K::UnreachableRule, 3, 8, "service[0].rate"),
        "{err}"
    );
    // Through an inherited rule too.
    let err = SamplingConfig::from_toml_str(
        "[[default.rule]]\nname = \"rest\"\nprobability = 0.1\n[[service]]\nname = \"a\"\nprobability = 0.5\n",
        "s.toml",
    )
    .unwrap_err();
    assert_eq!(
        (err.kind(), err.key()),
        (K::UnreachableRule, "service[0].probability"),
        "{err}"
    );
    assert!(err.to_string().contains("\"rest\""), "{err}");
    // Without a policy of its own, nothing is lost.
    SamplingConfig::from_toml_str(
        "[[default.rule]]\nname = \"rest\"\nprobability = 0.1\n[[service]]\nname = \"a\"\n",
        "s.toml",
    )
    .unwrap();
}
