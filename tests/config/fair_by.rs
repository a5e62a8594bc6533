//! `fair_by` and `max_keys` on a rule file's limits (a rule's, a block's default, a
//! cap's), in TOML and YAML: fair shares per key, each kept root's
//! `sampler.key_probability`, the typed errors, and what a reload keeps.

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::attributes::SAMPLER_KEY_PROBABILITY;
use otel_rate_sampler::{ConfigErrorKind as K, ManualClock, RuleBasedSampler, SamplingConfig};

const SECOND: u64 = 1_000_000_000;

fn sampler(config: &SamplingConfig, clock: &ManualClock) -> RuleBasedSampler<ManualClock> {
    RuleBasedSampler::with_clock(config, "svc", clock.clone()).unwrap()
}

/// One root of `route` (none: no route attribute): `None` when dropped, else the
/// `sampler.key_probability` it carries (`Some(None)`: kept without one).
fn root(s: &impl ShouldSample, name: &str, route: Option<&str>) -> Option<Option<f64>> {
    let attributes: Vec<KeyValue> = route
        .map(|r| KeyValue::new("http.route", r.to_owned()))
        .into_iter()
        .collect();
    let r = s.should_sample(
        None,
        TraceId::from(7),
        name,
        &SpanKind::Server,
        &attributes,
        &[],
    );
    (r.decision == SamplingDecision::RecordAndSample).then(|| {
        r.attributes
            .iter()
            .find(|kv| kv.key.as_str() == SAMPLER_KEY_PROBABILITY)
            .map(|kv| match &kv.value {
                Value::F64(p) => *p,
                other => panic!("a probability is an f64: {other:?}"),
            })
    })
}

/// Window `w` (whole seconds): 500 roots of `/hot` and one of `/rare`, named `name`;
/// returns the hot route's kept probabilities and the rare root's outcome.
fn window(
    s: &impl ShouldSample,
    clock: &ManualClock,
    w: u64,
    name: &str,
) -> (Vec<Option<f64>>, Option<Option<f64>>) {
    clock.set(w * SECOND);
    let hot = (0..500)
        .filter_map(|_| root(s, name, Some("/hot")))
        .collect();
    (hot, root(s, name, Some("/rare")))
}

/// Three windows of a hot and a rare route under a limit of 10: with fair shares the
/// rare route keeps its reserved permit in the third, the hot route the rest, and the
/// hot route's kept roots weigh exactly its 500 calls.
fn assert_fair(config: &SamplingConfig, name: &str) {
    let clock = ManualClock::new();
    let s = sampler(config, &clock);
    for w in 1..=2 {
        let (hot, _) = window(&s, &clock, w, name);
        assert!(hot.len() <= 10);
    }
    let (hot, rare) = window(&s, &clock, 3, name);
    assert_eq!(hot.len(), 9, "the hot route keeps the rest of the 10");
    assert_eq!(rare, Some(Some(1.0)), "the rare route keeps its floor");
    let adjusted: f64 = hot
        .iter()
        .map(|p| 1.0 / p.expect("a key probability"))
        .sum();
    assert!((adjusted - 500.0).abs() < 1e-6, "{adjusted}");
}

const TOML_DEFAULT: &str = r#"
[default]
limit = 10
window = "1s"
paced = false
fair_by = ["http.route"]
"#;

#[test]
fn a_defaults_fair_by_keeps_every_route_and_weighs_its_kept_roots_toml_and_yaml() {
    let toml = SamplingConfig::from_toml_str(TOML_DEFAULT, "f.toml").unwrap();
    assert_fair(&toml, "GET");
    #[cfg(feature = "yaml")]
    {
        let yaml = "default:\n  limit: 10\n  window: 1s\n  paced: false\n  fair_by: [http.route]\n  max_keys: 4\n";
        assert_fair(
            &SamplingConfig::from_yaml_str(yaml, "f.yaml").unwrap(),
            "GET",
        );
    }
    // The same limit without `fair_by`: the hot route takes every permit first, and
    // no kept root carries a key probability.
    let plain = SamplingConfig::from_toml_str(
        "[default]\nlimit = 10\nwindow = \"1s\"\npaced = false\n",
        "p.toml",
    )
    .unwrap();
    let clock = ManualClock::new();
    let s = sampler(&plain, &clock);
    let (hot, rare) = window(&s, &clock, 3, "GET");
    assert_eq!((hot.len(), rare), (10, None));
    assert!(hot.iter().all(Option::is_none));
}

#[test]
fn a_rules_and_a_caps_fair_by_keep_every_route_and_report_their_keys() {
    let rule = r#"
[default]
rate = 1.0
[[service]]
name = "svc"
probability = 1.0
[[service.rule]]
name = "gets"
span_name = "GET"
limit = 10
paced = false
fair_by = ["http.route", "span_name"]
max_keys = 3
"#;
    let config = SamplingConfig::from_toml_str(rule, "r.toml").unwrap();
    assert_fair(&config, "GET");
    let clock = ManualClock::new();
    let s = sampler(&config, &clock);
    window(&s, &clock, 1, "GET");
    // Spans without the route are a key of their own (the third); a fourth key is
    // past max_keys: the overflow key's.
    root(&s, "GET", None);
    let stats = s.stats();
    let gets = stats.rules.iter().find(|r| r.name == "gets").unwrap();
    let fair = gets.fair.expect("the rule's fair stats");
    assert_eq!((fair.keys, fair.max_keys, fair.overflow_offered), (3, 3, 0));
    root(&s, "GET", Some("/fourth"));
    clock.set(2 * SECOND);
    root(&s, "GET", Some("/fifth"));
    let fair = s
        .stats()
        .rules
        .iter()
        .find(|r| r.name == "gets")
        .unwrap()
        .fair;
    assert_eq!(fair.map(|f| f.overflow_offered), Some(2));

    let cap = r#"
[default]
rate = 1.0
[[service]]
name = "svc"
limit = 1000
paced = false
cap = { limit = 10, paced = false, fair_by = ["http.route"] }
"#;
    let config = SamplingConfig::from_toml_str(cap, "c.toml").unwrap();
    assert_fair(&config, "GET");
    let s = sampler(&config, &ManualClock::new());
    root(&s, "GET", Some("/a"));
    assert_eq!(s.stats().cap.and_then(|c| c.fair).map(|f| f.keys), Some(1));
}

/// The error of `[default]` holding `keys`: its kind, key, line and column.
fn error(keys: &str) -> (K, String, usize, usize, String) {
    let text = format!("[default]\n{keys}\n");
    let e = SamplingConfig::from_toml_str(&text, "e.toml").expect_err(&text);
    (
        e.kind(),
        e.key().to_owned(),
        e.line(),
        e.column(),
        e.to_string(),
    )
}

#[test]
fn typos_wrong_types_and_misplaced_keys_are_typed_errors_at_their_position() {
    let l = "limit = 10\n";
    let (kind, _, line, _, _) = error(&format!("{l}fair_bye = [\"a\"]"));
    assert_eq!((kind, line), (K::UnknownKey, 3));
    let (kind, _, line, _, _) = error(&format!("{l}fair_by = \"http.route\""));
    assert_eq!((kind, line), (K::Syntax, 3));
    let (kind, _, line, _, _) = error(&format!("{l}fair_by = [1]"));
    assert_eq!((kind, line), (K::Syntax, 3));
    let (kind, _, line, _, _) = error(&format!("{l}fair_by = [\"a\"]\nmax_keys = \"5\""));
    assert_eq!((kind, line), (K::Syntax, 4));
    for bad in ["0", "-1", "65535"] {
        let (kind, key, line, column, shown) =
            error(&format!("{l}fair_by = [\"a\"]\nmax_keys = {bad}"));
        assert_eq!(
            (kind, key.as_str(), line, column),
            (K::InvalidLimit, "default.max_keys", 4, 12)
        );
        assert!(shown.contains("from 1 to 65534"), "{shown}");
    }
    let (kind, key, ..) = error(&format!("{l}max_keys = 5"));
    assert_eq!((kind, key.as_str()), (K::MissingKey, "default.max_keys"));
    let (kind, key, ..) = error("probability = 0.5\nfair_by = [\"a\"]");
    assert_eq!((kind, key.as_str()), (K::MissingKey, "default.fair_by"));
    let (kind, key, ..) = error("adaptive = 5.0\nfair_by = [\"a\"]");
    assert_eq!(
        (kind, key.as_str()),
        (K::ConflictingKeys, "default.fair_by")
    );
    let (kind, key, ..) = error(&format!("{l}fair_by = []"));
    assert_eq!((kind, key.as_str()), (K::EmptyName, "default.fair_by"));
    let (kind, key, line, column, _) = error(&format!("{l}fair_by = [\"a\", \" \"]"));
    assert_eq!(
        (kind, key.as_str(), line, column),
        (K::EmptyName, "default.fair_by[1]", 3, 17)
    );
    // A rule's and a cap's keys are named by their path.
    let text = "[default]\nrate = 1.0\n[[service]]\nname = \"s\"\nrate = 5.0\ncap = { rate = 5.0, max_keys = 3 }\n";
    let e = SamplingConfig::from_toml_str(text, "c.toml").unwrap_err();
    assert_eq!(
        (e.kind(), e.key()),
        (K::MissingKey, "service[0].cap.max_keys")
    );
}

#[test]
fn fair_by_on_a_fleet_scoped_limit_is_not_supported() {
    let text = "[fleet]\nredis = \"redis://127.0.0.1:1\"\n[default]\nlimit = 10\nscope = \"fleet\"\nfair_by = [\"http.route\"]\n";
    let e = SamplingConfig::from_toml_str(text, "f.toml").unwrap_err();
    assert_eq!(
        (e.kind(), e.key(), e.line()),
        (K::ConflictingKeys, "default.fair_by", 6)
    );
    assert!(
        e.to_string().contains("not supported with fleet scope"),
        "{e}"
    );
    #[cfg(feature = "yaml")]
    {
        let yaml = "fleet:\n  redis: redis://127.0.0.1:1\ndefault:\n  limit: 10\n  scope: fleet\n  fair_by: [http.route]\n";
        let e = SamplingConfig::from_yaml_str(yaml, "f.yaml").unwrap_err();
        assert_eq!(
            (e.kind(), e.key(), e.line()),
            (K::ConflictingKeys, "default.fair_by", 6)
        );
    }
}

#[test]
fn a_reload_keeps_unchanged_fair_shares_and_carries_a_changed_limits_count() {
    let clock = ManualClock::new();
    let config = SamplingConfig::from_toml_str(TOML_DEFAULT, "f.toml").unwrap();
    let s = sampler(&config, &clock);
    window(&s, &clock, 1, "GET");
    window(&s, &clock, 2, "GET");
    let keys = |s: &RuleBasedSampler<ManualClock>| s.stats().rules[0].fair.map(|f| f.keys);
    assert_eq!(keys(&s), Some(2));
    // The same file again: the shares and their keys stay, so the rare route keeps
    // its reserved permit in the next window.
    s.reload(&config).unwrap();
    assert_eq!(keys(&s), Some(2));
    let (hot, rare) = window(&s, &clock, 3, "GET");
    assert_eq!((hot.len(), rare), (9, Some(Some(1.0))));
    // Another `fair_by` over the same limit: new shares (no keys yet), the window's
    // total still 10.
    let other = TOML_DEFAULT.replace("[\"http.route\"]", "[\"http.route\", \"span_name\"]");
    s.reload(&SamplingConfig::from_toml_str(&other, "g.toml").unwrap())
        .unwrap();
    assert_eq!(keys(&s), Some(0));
    assert_eq!(
        root(&s, "GET", Some("/new")),
        None,
        "the window's 10 are spent"
    );
    // A changed limit: its window's count is carried, so 2 more in this window.
    let twelve = TOML_DEFAULT.replace("limit = 10", "limit = 12");
    s.reload(&SamplingConfig::from_toml_str(&twelve, "h.toml").unwrap())
        .unwrap();
    let kept = (0..50)
        .filter(|i| root(&s, "GET", Some(&format!("/r{i}"))).is_some())
        .count();
    assert_eq!(kept, 2);
}

#[test]
fn the_memory_budget_counts_a_fair_limits_keys() {
    let file =
        |fair: &str| format!("[limits]\nmemory_budget = \"1MiB\"\n[default]\nlimit = 10\n{fair}\n");
    SamplingConfig::from_toml_str(&file(""), "b.toml").unwrap();
    SamplingConfig::from_toml_str(&file("fair_by = [\"a\"]"), "b.toml").unwrap();
    // 65 534 keys: their tables (index, demand rows, entries) take megabytes.
    let e = SamplingConfig::from_toml_str(&file("fair_by = [\"a\"]\nmax_keys = 65534"), "b.toml")
        .unwrap_err();
    assert_eq!(e.kind(), K::MemoryBudget, "{e}");
    // What `check` shows as a limiter's memory counts the same tables: about 0.4 KB
    // per key of `max_keys` (index, entries, bookkeeping; the demand rows beside).
    let bytes = |fair: &str| -> usize {
        let text = format!(
            "[default]\nlimit = 10\n{fair}\ncap = {{ limit = 10 {fair_cap} }}\n",
            fair_cap = if fair.is_empty() {
                ""
            } else {
                ", fair_by = [\"a\"], max_keys = 100"
            }
        );
        let config = SamplingConfig::from_toml_str(&text, "m.toml").unwrap();
        config
            .effective_rules("x")
            .limiters()
            .iter()
            .map(|l| l.bytes())
            .sum()
    };
    let plain = bytes("");
    let fair = bytes("fair_by = [\"a\"]\nmax_keys = 1000");
    assert!(fair - plain > 400 * 1100, "{plain} {fair}");
}

/// The declarative 1.0 plugin `rate_limiting` holds a rule file: `fair_by` and
/// `max_keys` there as anywhere, its errors at their key in the file.
#[cfg(feature = "yaml")]
#[test]
fn a_declarative_files_rate_limiting_block_takes_fair_by() {
    use otel_rate_sampler::DeclarativeSampler;
    let file = |fair: &str| {
        format!(
            "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    rate_limiting:\n      default:\n        limit: 10\n{fair}"
        )
    };
    let text = file("        fair_by: [http.route]\n        max_keys: 8\n");
    let s = DeclarativeSampler::from_yaml_str(&text, "otel.yaml", "svc").unwrap();
    // The first window's first call: kept, with its key's probability.
    assert_eq!(root(&s, "GET", Some("/a")), Some(Some(1.0)));
    let bad = file("        fair_by: [http.route]\n        max_keys: 0\n");
    let e = DeclarativeSampler::from_yaml_str(&bad, "otel.yaml", "svc").unwrap_err();
    assert_eq!(e.kind(), K::InvalidLimit, "{e}");
    assert!(e.key().ends_with("default.max_keys"), "{e}");
    assert_eq!(e.line(), 8, "{e}");
}

/// Under a cap, a fair limit's permit is taken at once: when the cap refuses the span,
/// it is not given back (a plain limit's is), so the fair limit counts the spans the
/// cap refused too. What `docs/configuration.md` says.
#[test]
fn under_a_cap_a_fair_limits_permit_is_not_given_back() {
    use otel_rate_sampler::stats::DropReason;
    let run = |fair: &str| {
        let text = format!(
            "[default]\nlimit = 10\npaced = false\n{fair}\ncap = {{ limit = 5, paced = false }}\n"
        );
        let config = SamplingConfig::from_toml_str(&text, "c.toml").unwrap();
        let clock = ManualClock::new();
        let s = sampler(&config, &clock);
        clock.set(SECOND);
        let kept = (0..20)
            .filter(|_| root(&s, "GET", Some("/a")).is_some())
            .count();
        let stats = s.stats();
        let default = &stats.rules[0];
        let d = default.decisions;
        (
            kept,
            default.window.map(|w| w.used),
            d.dropped_for(DropReason::ServiceCap),
            d.dropped_for(DropReason::RateLimit),
        )
    };
    assert_eq!(run(""), (5, Some(5), 15, 0));
    assert_eq!(run("fair_by = [\"http.route\"]"), (5, Some(10), 5, 10));
}
