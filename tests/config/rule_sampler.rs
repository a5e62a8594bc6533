//! The rule-based sampler: rule order, matching, the cap and its floors, the parent
//! policy, and reloads that keep limiter state.

use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};
use otel_rate_sampler::attributes::SAMPLER_RULE;
use otel_rate_sampler::{ManualClock, RuleBasedSampler, SamplingConfig};

fn config(text: &str) -> SamplingConfig {
    SamplingConfig::from_toml_str(text, "test.toml").unwrap()
}

fn sampler(text: &str, service: &str) -> (RuleBasedSampler<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let s = RuleBasedSampler::with_clock(&config(text), service, clock.clone()).unwrap();
    (s, clock)
}

fn root(s: &impl ShouldSample, name: &str, kind: SpanKind, attrs: &[KeyValue]) -> SamplingResult {
    s.should_sample(
        Some(&Context::new()),
        TraceId::from(0x1234u128),
        name,
        &kind,
        attrs,
        &[],
    )
}

fn kept_by(r: &SamplingResult) -> Option<String> {
    if r.decision != SamplingDecision::RecordAndSample {
        assert_eq!(r.decision, SamplingDecision::Drop);
        assert!(r.attributes.is_empty());
        return None;
    }
    r.attributes
        .iter()
        .find(|kv| kv.key.as_str() == SAMPLER_RULE)
        .map(|kv| kv.value.to_string())
}

fn count_kept(s: &impl ShouldSample, name: &str, n: usize) -> usize {
    (0..n)
        .filter(|_| kept_by(&root(s, name, SpanKind::Server, &[])).is_some())
        .count()
}

const RULES: &str = r#"
[default]
rate = 3.0
paced = false

[[default.rule]]
name = "fallback-health"
span_name = "*health*"
probability = 0.0

[[service]]
name = "api"
limit = 2
paced = false
window = "1s"

[[service.rule]]
name = "users"
span_name = "GET /users/*"
kind = "server"
limit = 1
paced = false

[[service.rule]]
name = "errors"
attributes = { "http.status_code" = "5*", "region" = "eu-*" }
limit = 4
paced = false

[[service.rule]]
name = "users-any-kind"
span_name = "GET /users/*"
limit = 5
paced = false

[[service]]
name = "bare"
"#;

#[test]
fn first_matching_rule_wins_then_service_default_then_file_default() {
    let (s, _clock) = sampler(RULES, "api");
    // "users" matches first (server kind); its limit is 1.
    let r = root(&s, "GET /users/7", SpanKind::Server, &[]);
    assert_eq!(kept_by(&r).as_deref(), Some("users"));
    assert!(r
        .attributes
        .contains(&KeyValue::new("sampler.type", "ratelimiting")));
    assert!(r
        .attributes
        .contains(&KeyValue::new("sampler.param", Value::F64(1.0))));
    assert_eq!(
        kept_by(&root(&s, "GET /users/8", SpanKind::Server, &[])),
        None
    );
    // A client span skips "users" and is taken by the next matching rule.
    let r = root(&s, "GET /users/7", SpanKind::Client, &[]);
    assert_eq!(kept_by(&r).as_deref(), Some("users-any-kind"));
    // Unmatched: the service default (2 per second).
    assert_eq!(count_kept(&s, "POST /orders", 10), 2);
    let r = root(&s, "GET /x", SpanKind::Server, &[]);
    assert_eq!(kept_by(&r), None);
    // A listed service without a policy takes the file default's policy (3/s), and
    // inherits the file default's rules (before: health checks were kept by "bare").
    let (bare, _c) = sampler(RULES, "bare");
    assert_eq!(count_kept(&bare, "GET /health", 10), 0);
    assert_eq!(count_kept(&bare, "GET /", 10), 3);
    // "api" inherits them too, after its own rules.
    assert_eq!(count_kept(&s, "GET /health", 10), 0);
    // An unlisted service gets the whole file default: its rules, then its policy.
    let (other, _c) = sampler(RULES, "somebody-else");
    assert_eq!(count_kept(&other, "GET /health", 10), 0);
    assert_eq!(count_kept(&other, "GET /", 10), 3);
}

#[test]
fn attributes_match_as_text_and_all_must_be_present() {
    let (s, _clock) = sampler(RULES, "api");
    let both = [
        KeyValue::new("http.status_code", 503),
        KeyValue::new("region", "eu-west"),
    ];
    assert_eq!(
        kept_by(&root(&s, "op", SpanKind::Server, &both)).as_deref(),
        Some("errors")
    );
    let one = [KeyValue::new("http.status_code", 503)];
    assert_eq!(
        kept_by(&root(&s, "op", SpanKind::Server, &one)).as_deref(),
        Some("default")
    );
    let wrong = [
        KeyValue::new("http.status_code", 200),
        KeyValue::new("region", "eu-west"),
    ];
    assert_eq!(
        kept_by(&root(&s, "op", SpanKind::Server, &wrong)).as_deref(),
        Some("default")
    );
}

#[test]
fn limiters_are_per_rule_not_per_attribute_value() {
    let (s, _clock) = sampler(RULES, "api");
    // Four permits for the rule, however many distinct attribute values arrive.
    let kept = (0..100)
        .filter(|i| {
            let attrs = [
                KeyValue::new("http.status_code", 500 + i),
                KeyValue::new("region", format!("eu-{i}")),
            ];
            kept_by(&root(&s, "op", SpanKind::Server, &attrs)).is_some()
        })
        .count();
    assert_eq!(kept, 4);
}

#[test]
fn windows_refill_with_the_clock() {
    let (s, clock) = sampler(RULES, "api");
    for _ in 0..3 {
        assert_eq!(count_kept(&s, "GET /users/1", 10), 1);
        clock.advance(Duration::from_secs(1));
    }
}

#[test]
fn probability_rules_decide_by_trace_id_and_record_it() {
    let (s, _clock) = sampler("[default]\nprobability = 0.5\n", "x");
    let decide =
        |id: u128| s.should_sample(None, TraceId::from(id), "op", &SpanKind::Internal, &[], &[]);
    // OTEP 235: the low 56 bits of the id against the threshold (1 − 0.5) × 2^56.
    assert_eq!(
        decide(0x80_0000_0000_0000).decision,
        SamplingDecision::RecordAndSample
    );
    assert_eq!(decide(0x7f_ffff_ffff_ffff).decision, SamplingDecision::Drop);
    // The bits above the low 56 play no part.
    assert_eq!(decide(u128::MAX << 56).decision, SamplingDecision::Drop);
    let r = decide(u128::MAX);
    assert!(r
        .attributes
        .contains(&KeyValue::new("sampler.type", "probabilistic")));
    assert!(r.attributes.contains(&KeyValue::new("sampler.param", 0.5)));
    assert_eq!(r.trace_state.header(), "ot=th:8");
}

/// Trace ids from a 128-bit multiplicative sequence: well spread in every bit.
fn spread_ids(n: u128) -> impl Iterator<Item = TraceId> {
    (1..=n).map(|i| TraceId::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)))
}

#[test]
fn two_services_with_the_same_probability_keep_exactly_the_same_traces() {
    // Two services (two processes' samplers), the same probability reached through
    // different files and rules, plus a third with a lower probability.
    let (a, _) = sampler("[default]\nprobability = 0.3\n", "a");
    let (b, _) = sampler(
        "[default]\nrate = 1.0\n[[service]]\nname = \"b\"\n[[service.rule]]\nname = \"all\"\nprobability = 0.3\n",
        "b",
    );
    let (c, _) = sampler("[default]\nprobability = 0.1\n", "c");
    let kept = |s: &RuleBasedSampler<ManualClock>, id: TraceId| {
        let r = s.should_sample(None, id, "op", &SpanKind::Server, &[], &[]);
        (r.decision == SamplingDecision::RecordAndSample).then_some(r.trace_state)
    };
    let n = 100_000u32;
    let (mut in_a, mut in_c) = (0u32, 0u32);
    for id in spread_ids(n.into()) {
        let (ka, kb, kc) = (kept(&a, id), kept(&b, id), kept(&c, id));
        assert_eq!(ka, kb, "{id}: both services decide alike");
        if let Some(state) = &ka {
            in_a += 1;
            // th = 2^56 − round(0.3 × 2^56) = 0xb3333333333334 (14 digits, no trailing zero).
            assert_eq!(state.header(), "ot=th:b3333333333334");
        }
        if let Some(state) = &kc {
            in_c += 1;
            assert!(ka.is_some(), "{id}: a lower probability keeps a subset");
            assert_eq!(state.header(), "ot=th:e6666666666666");
        }
    }
    // Binomial(n, p): inside 5 standard deviations (a false alarm once in ~3.5 million).
    for (got, p) in [(in_a, 0.3), (in_c, 0.1)] {
        let mean = f64::from(n) * p;
        let sd = (mean * (1.0 - p)).sqrt();
        assert!(
            (f64::from(got) - mean).abs() <= 5.0 * sd,
            "{got} kept at p = {p}: expected {mean} ± {}",
            5.0 * sd
        );
    }
}

#[test]
fn probability_rules_honour_rv_and_a_capped_remote_parent_threshold() {
    let text = "[default]\nprobability = 0.5\nremote_parents = \"cap\"\n";
    let (s, _) = sampler(text, "x");
    let with_parent = |state: &str| {
        let sc = SpanContext::new(
            // Low 56 bits all zero: only `rv` can keep it.
            TraceId::from(7u128 << 64),
            SpanId::from(9u64),
            TraceFlags::SAMPLED,
            true,
            state.parse().unwrap(),
        );
        let cx = Context::new().with_remote_span_context(sc);
        s.should_sample(
            Some(&cx),
            TraceId::from(7u128 << 64),
            "op",
            &SpanKind::Server,
            &[],
            &[],
        )
    };
    // The parent kept it at 1/4 (th:c) and rv is high: kept, th stays c (not lowered).
    let r = with_parent("ot=th:c;rv:f0000000000000,v=1");
    assert_eq!(r.decision, SamplingDecision::RecordAndSample);
    assert_eq!(r.trace_state.header(), "ot=th:c;rv:f0000000000000,v=1");
    // The parent kept it at 1 (th:0), rv between: raised to 8, and kept.
    let r = with_parent("ot=th:0;rv:90000000000000");
    assert_eq!(r.trace_state.header(), "ot=th:8;rv:90000000000000");
    // rv below 1/2's threshold: dropped, whatever the parent said.
    assert_eq!(
        with_parent("ot=th:0;rv:70000000000000").decision,
        SamplingDecision::Drop
    );
    // The trace id's bits without rv: dropped.
    assert_eq!(with_parent("").decision, SamplingDecision::Drop);
}

/// A parent context: a span of trace 7, remote or local, sampled or not.
pub(crate) fn parent(remote: bool, sampled: bool) -> Context {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let sc = SpanContext::new(
        TraceId::from(7u128),
        SpanId::from(9u64),
        flags,
        remote,
        TraceState::default(),
    );
    Context::new().with_remote_span_context(sc)
}

#[test]
fn local_children_follow_and_remote_parents_are_capped_on_request() {
    let text = r#"
[default]
limit = 1
paced = false
[[service]]
name = "edge"
remote_parents = "cap"
limit = 1
paced = false
[[service.rule]]
name = "upstream"
parent = "remote"
limit = 2
paced = false
"#;
    let (s, _clock) = sampler(text, "edge");
    let sample = |cx: &Context| {
        s.should_sample(
            Some(cx),
            TraceId::from(1u128),
            "op",
            &SpanKind::Server,
            &[],
            &[],
        )
    };
    for _ in 0..5 {
        assert_eq!(
            sample(&parent(false, true)).decision,
            SamplingDecision::RecordAndSample
        );
        assert!(sample(&parent(false, true)).attributes.is_empty());
        assert_eq!(
            sample(&parent(false, false)).decision,
            SamplingDecision::Drop
        );
        assert_eq!(
            sample(&parent(true, false)).decision,
            SamplingDecision::Drop
        );
    }
    let remote: Vec<_> = (0..5)
        .map(|_| kept_by(&sample(&parent(true, true))))
        .collect();
    assert_eq!(
        remote.iter().flatten().collect::<Vec<_>>(),
        ["upstream", "upstream"]
    );
    assert_eq!(
        kept_by(&sample(&Context::new())).as_deref(),
        Some("default")
    );
    // Under the default policy remote parents are followed.
    let (follow, _c) = sampler(text, "other");
    for _ in 0..5 {
        let r = follow.should_sample(
            Some(&parent(true, true)),
            TraceId::from(1u128),
            "op",
            &SpanKind::Server,
            &[],
            &[],
        );
        assert_eq!(r.decision, SamplingDecision::RecordAndSample);
    }
}

const CAPPED: &str = r#"
[default]
rate = 1.0
paced = false

[[service]]
name = "shop"
limit = 100
paced = false
cap = { limit = 10, paced = false }

[[service.rule]]
name = "hot"
span_name = "hot"
limit = 100
paced = false
floor = 2

[[service.rule]]
name = "rare"
span_name = "rare"
limit = 100
paced = false
floor = 3
"#;

#[test]
fn the_cap_bounds_the_sum_and_floors_keep_a_hot_rule_from_starving_the_others() {
    let (s, clock) = sampler(CAPPED, "shop");
    for _ in 0..3 {
        // The hot operation floods first: its floor (2) plus the shared pool (10 - 5).
        assert_eq!(count_kept(&s, "hot", 1000), 7);
        // The rare one still gets its reserved 3, and no more.
        assert_eq!(count_kept(&s, "rare", 10), 3);
        assert_eq!(count_kept(&s, "other", 10), 0);
        clock.advance(Duration::from_secs(1));
    }
}

#[test]
fn per_rule_limits_and_the_cap_hold_under_concurrent_load() {
    let (s, clock) = sampler(CAPPED, "shop");
    for _window in 0..3 {
        let kept: Vec<(usize, usize, usize)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    let s = s.clone();
                    scope.spawn(move || {
                        (
                            count_kept(&s, "hot", 2000),
                            count_kept(&s, "rare", 2000),
                            count_kept(&s, "other", 2000),
                        )
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let hot: usize = kept.iter().map(|k| k.0).sum();
        let rare: usize = kept.iter().map(|k| k.1).sum();
        let other: usize = kept.iter().map(|k| k.2).sum();
        // The cap is exactly saturated, the floors honoured.
        assert_eq!(hot + rare + other, 10, "{kept:?}");
        assert!(hot >= 2 && rare >= 3, "{kept:?}");
        clock.advance(Duration::from_secs(1));
    }
}

#[test]
fn reload_keeps_unchanged_limiters_and_carries_changed_counts() {
    let v1 = r#"
[default]
limit = 5
paced = false
[[default.rule]]
name = "a"
span_name = "a"
limit = 5
paced = false
[[default.rule]]
name = "b"
span_name = "b"
limit = 5
paced = false
"#;
    let (s, clock) = sampler(v1, "svc");
    clock.set(100_000_000);
    assert_eq!(count_kept(&s, "a", 3), 3);
    assert_eq!(count_kept(&s, "b", 4), 4);
    // Reload under load: "a" unchanged (moved down, new matcher), "b" raised to 6 over
    // a 2 s window, a new rule "c".
    let v2 = r#"
[default]
limit = 5
paced = false
[[default.rule]]
name = "c"
span_name = "c"
limit = 1
paced = false
[[default.rule]]
name = "b"
span_name = "b"
limit = 6
paced = false
window = "2s"
[[default.rule]]
name = "a"
span_name = "a*"
limit = 5
paced = false
"#;
    s.reload(&config(v2)).unwrap();
    // No burst: "a" has 2 left of its 5, "b" 2 left of its new 6 (4 carried over).
    assert_eq!(count_kept(&s, "a", 10), 2);
    assert_eq!(count_kept(&s, "b", 10), 2);
    assert_eq!(count_kept(&s, "c", 10), 1);
    // Reloading the same file again changes nothing.
    s.reload(&config(v2)).unwrap();
    assert_eq!(
        count_kept(&s, "a", 10) + count_kept(&s, "b", 10) + count_kept(&s, "c", 10),
        0
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(count_kept(&s, "a", 10), 5);
    assert_eq!(count_kept(&s, "b", 10), 6);
}

#[test]
fn a_bad_file_keeps_the_old_rules() {
    let dir = std::env::temp_dir().join(format!("ors-bad-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sampling.toml");
    std::fs::write(&path, "[default]\nlimit = 2\npaced = false\n").unwrap();
    let clock = ManualClock::new();
    let s = RuleBasedSampler::with_clock(
        &SamplingConfig::from_path(&path).unwrap(),
        "svc",
        clock.clone(),
    )
    .unwrap();
    assert_eq!(count_kept(&s, "op", 1), 1);
    std::fs::write(&path, "[default]\nlimit = -2\n").unwrap();
    let err = s.reload_from_path(&path).unwrap_err();
    assert_eq!((err.line(), err.key()), (2, "default.limit"));
    // The old limiter, with its state: one permit left this window.
    assert_eq!(count_kept(&s, "op", 10), 1);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sampler_is_clone_and_debug() {
    let (s, _clock) = sampler(RULES, "api");
    let debug = format!("{:?}", s.clone());
    assert!(
        debug.contains("users-any-kind") && debug.contains("api"),
        "{debug}"
    );
}

#[test]
fn reloads_under_concurrent_load_cause_no_burst() {
    let version = |order: bool| {
        let (first, second) = if order { ("a", "b") } else { ("b", "a") };
        format!(
            "[default]\nlimit = 1\npaced = false\n[[default.rule]]\nname = \"{first}\"\nspan_name = \"{first}\"\nlimit = 5\npaced = false\n[[default.rule]]\nname = \"{second}\"\nspan_name = \"{second}*\"\nlimit = 5\npaced = false\n"
        )
    };
    let configs = [config(&version(true)), config(&version(false))];
    let (s, clock) = sampler(&version(true), "svc");
    for _window in 0..3 {
        let kept = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..3)
                .map(|_| {
                    let s = s.clone();
                    scope.spawn(move || count_kept(&s, "a", 3000))
                })
                .collect();
            // Rules reordered and re-matched, limits unchanged: each reload keeps "a"'s
            // limiter, whatever the workers are doing.
            for i in 0..50 {
                s.reload(&configs[i % 2]).unwrap();
            }
            workers
                .into_iter()
                .map(|w| w.join().unwrap())
                .sum::<usize>()
        });
        assert_eq!(kept, 5);
        clock.advance(Duration::from_secs(1));
    }
}

#[test]
fn a_rule_named_default_never_shares_the_defaults_limiter_across_reloads() {
    let text = "[default]\nlimit = 2\npaced = false\n[[default.rule]]\nname = \"default\"\nspan_name = \"x\"\nlimit = 2\npaced = false\n";
    let (s, _clock) = sampler(text, "svc");
    assert_eq!(count_kept(&s, "x", 5), 2);
    s.reload(&config(text)).unwrap();
    assert_eq!(count_kept(&s, "x", 5), 0);
    assert_eq!(count_kept(&s, "y", 5), 2);
}

#[test]
fn a_reload_handle_changes_the_rules_of_a_sampler_owned_by_the_provider() {
    use opentelemetry::trace::{Span as _, Tracer, TracerProvider};
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use otel_rate_sampler::ConfigErrorKind;

    let clock = ManualClock::new();
    let unpaced = |n: u32| {
        config(&format!(
            "[default]\nlimit = {n}\nwindow = \"1h\"\npaced = false\n"
        ))
    };
    let s = RuleBasedSampler::with_clock(&unpaced(2), "svc", clock.clone()).unwrap();
    let handle = s.reload_handle();
    let provider = SdkTracerProvider::builder().with_sampler(s).build();
    let tracer = provider.tracer("test");
    let sampled = |n: usize| {
        (0..n)
            .filter(|_| {
                let span = tracer.start("op");
                span.span_context().is_sampled()
            })
            .count()
    };
    assert_eq!(sampled(10), 2);
    // From another thread, as a config watcher or an admin endpoint would.
    let remote = handle.clone();
    std::thread::spawn(move || remote.reload(&unpaced(5)).unwrap())
        .join()
        .unwrap();
    // The 2 used this hour stay used: 3 more.
    assert_eq!(sampled(10), 3);
    let stats = handle.stats().unwrap();
    assert_eq!((stats.generation, stats.reloads.succeeded), (1, 1));
    assert!(handle.is_alive());
    // A bad file keeps the rules in force and says why.
    let bad = std::env::temp_dir().join(format!("handle-{}.toml", std::process::id()));
    std::fs::write(&bad, "[default]\nrate = -1.0\n").unwrap();
    let err = handle.reload_from_path(&bad).unwrap_err();
    assert_eq!(err.kind(), ConfigErrorKind::InvalidLimit, "{err}");
    // The handle does not keep the sampler alive.
    drop(tracer);
    drop(provider);
    assert!(!handle.is_alive());
    assert_eq!(handle.stats().map(|s| s.generation), None);
    let err = handle.reload(&unpaced(9)).unwrap_err();
    assert_eq!(err.kind(), ConfigErrorKind::SamplerGone, "{err}");
    assert!(err.to_string().contains("has been dropped"), "{err}");
    let err = handle.reload_from_path(&bad).unwrap_err();
    assert_eq!(err.kind(), ConfigErrorKind::SamplerGone, "{err}");
    std::fs::remove_file(bad).unwrap();
}
