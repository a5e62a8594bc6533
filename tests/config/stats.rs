//! `RuleBasedSampler::stats`: every reason and origin on a manual clock, the cap and the
//! windows, and counters that survive reloads by rule name. (`no_rule` needs a rule set
//! without a default, which no file can give: it is tested beside `RuleSet`.)

use std::time::Duration;

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::stats::{DropReason as R, ParentOrigin as O};
use otel_rate_sampler::{ManualClock, RuleBasedSampler, SamplingConfig};

use crate::rule_sampler::parent;

fn config(text: &str) -> SamplingConfig {
    SamplingConfig::from_toml_str(text, "stats.toml").unwrap()
}

fn decide(s: &impl ShouldSample, parent: &Context, name: &str, trace: u128) -> SamplingDecision {
    s.should_sample(
        Some(parent),
        TraceId::from(trace),
        name,
        &SpanKind::Server,
        &[],
        &[],
    )
    .decision
}

const RULES: &str = r#"
[default]
limit = 1
paced = false

[[service]]
name = "shop"
remote_parents = "cap"
cap = { limit = 3, paced = false }
limit = 10
paced = false

[[service.rule]]
name = "limited"
span_name = "limited"
limit = 1
paced = false

[[service.rule]]
name = "never"
span_name = "never"
probability = 0.0

[[service.rule]]
name = "hot"
span_name = "hot"
limit = 100
paced = false
floor = 1
"#;

#[test]
fn every_reason_and_origin_is_counted_where_it_happened() {
    let clock = ManualClock::new();
    let s = RuleBasedSampler::with_clock(&config(RULES), "shop", clock.clone()).unwrap();
    let root = Context::new();
    assert_eq!(
        decide(&s, &root, "limited", 1),
        SamplingDecision::RecordAndSample
    );
    assert_eq!(decide(&s, &root, "limited", 2), SamplingDecision::Drop); // rate limit
    assert_eq!(decide(&s, &root, "never", 3), SamplingDecision::Drop); // probability
                                                                       // The cap (3): "limited" took one, "hot" gets its floor and the last shared permit.
    for trace in 0..4 {
        decide(&s, &root, "hot", 10 + trace);
    }
    // A sampled remote parent is decided by the rules (remote_parents = "cap").
    assert_eq!(
        decide(&s, &parent(true, true), "hot", 20),
        SamplingDecision::Drop
    );
    assert_eq!(
        decide(&s, &parent(true, false), "hot", 21),
        SamplingDecision::Drop
    );
    assert_eq!(
        decide(&s, &parent(false, true), "x", 22),
        SamplingDecision::RecordAndSample
    );
    assert_eq!(
        decide(&s, &parent(false, false), "x", 23),
        SamplingDecision::Drop
    );

    let stats = s.stats();
    assert_eq!(stats.service, "shop");
    let limited = stats.rule("limited").unwrap().decisions;
    assert_eq!(limited.kept_from(O::Root), 1);
    assert_eq!(limited.dropped_for_from(R::RateLimit, O::Root), 1);
    let never = stats.rule("never").unwrap();
    assert_eq!(never.decisions.dropped_for_from(R::Probability, O::Root), 1);
    assert_eq!(never.window, None, "a probability has no window");
    let hot = stats.rule("hot").unwrap();
    assert_eq!(hot.decisions.kept_from(O::Root), 2);
    assert_eq!(hot.decisions.dropped_for_from(R::ServiceCap, O::Root), 2);
    assert_eq!(hot.decisions.dropped_for_from(R::ServiceCap, O::Remote), 1);
    // Its window counts the spans kept: the three the cap refused gave their permits
    // back (before, it counted 5).
    assert_eq!(hot.window.map(|w| (w.used, w.permits)), Some((2, 100)));
    assert_eq!(hot.floor.map(|w| (w.used, w.permits)), Some((1, 1)));
    let cap = stats.cap.unwrap();
    assert_eq!(cap.dropped, 3);
    assert_eq!((cap.window.used, cap.window.permits), (3, 3));
    // The parent policy's decisions: no rule made them.
    assert_eq!(stats.unmatched.kept_from(O::Local), 1);
    assert_eq!(stats.unmatched.dropped_for_from(R::Parent, O::Local), 1);
    assert_eq!(stats.unmatched.dropped_for_from(R::Parent, O::Remote), 1);
    let total = stats.total();
    assert_eq!((total.kept(), total.dropped()), (4, 7));
    assert_eq!(stats.generation, 0);

    // A new window empties the windows, not the counts.
    clock.advance(Duration::from_secs(1));
    let later = s.stats();
    assert_eq!(later.cap.unwrap().window.used, 0);
    assert_eq!(later.total(), total);
}

#[test]
fn counters_survive_reloads_by_rule_name_and_reloads_are_counted() {
    let before = r#"
[default]
limit = 5
paced = false
[[default.rule]]
name = "a"
span_name = "a"
limit = 1
paced = false
[[default.rule]]
name = "b"
span_name = "b"
limit = 1
paced = false
"#;
    // "a" unchanged, "b" changed, "c" new; the default kept.
    let after = r#"
[default]
limit = 5
paced = false
[[default.rule]]
name = "a"
span_name = "a"
limit = 1
paced = false
[[default.rule]]
name = "b"
span_name = "b"
limit = 2
paced = false
[[default.rule]]
name = "c"
span_name = "c"
limit = 1
paced = false
"#;
    let s = RuleBasedSampler::with_clock(&config(before), "svc", ManualClock::new()).unwrap();
    let root = Context::new();
    for name in ["a", "a", "b", "z"] {
        decide(&s, &root, name, 1);
    }
    s.reload(&config(after)).unwrap();
    assert!(s.reload_from_path("/nonexistent/rules.toml").is_err());
    let stats = s.stats();
    assert_eq!(stats.generation, 1);
    assert_eq!((stats.reloads.succeeded, stats.reloads.failed), (1, 1));
    let a = stats.rule("a").unwrap().decisions;
    assert_eq!((a.kept(), a.dropped()), (1, 1));
    assert_eq!(stats.rule("b").unwrap().decisions.kept(), 1);
    assert_eq!(stats.rule("c").unwrap().decisions.total(), 0);
    assert_eq!(stats.rule("default").unwrap().decisions.kept(), 1);
    // Removed by a reload: its counters go with it.
    s.reload(&config(before)).unwrap();
    let stats = s.stats();
    assert!(stats.rule("c").is_none());
    assert_eq!(stats.generation, 2);
}
