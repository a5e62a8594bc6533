//! The file formats: every example file parses, and Jaeger strategy files written from
//! the documented format load into the same model (fractional rates honoured).

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::{ConfigErrorKind, ManualClock, RuleBasedSampler, SamplingConfig};

#[test]
fn every_example_file_parses() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let extension = path.extension().and_then(|e| e.to_str());
        let yaml = cfg!(feature = "yaml") && matches!(extension, Some("yaml" | "yml"));
        if yaml || matches!(extension, Some("toml" | "json")) {
            if yaml && declarative_without_rules(&path) {
                seen += 1;
                continue;
            }
            let config = match SamplingConfig::from_path(&path) {
                Ok(config) => config,
                // A fleet-scoped example needs the `redis` feature, and says so.
                Err(e)
                    if !cfg!(feature = "redis") && e.kind() == ConfigErrorKind::MissingFeature =>
                {
                    seen += 1;
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            // Fleet limiters build at once, without reaching the example's Redis.
            for service in config.services() {
                RuleBasedSampler::new(&config, service).unwrap();
            }
            seen += 1;
        }
    }
    assert!(seen >= 2, "examples/ should hold a TOML and a Jaeger file");
}

/// Whether `path` is a declarative file without a rule file (a composite sampler, say),
/// after checking it loads (or, without feature `composable`, that it says so).
#[cfg(feature = "yaml")]
fn declarative_without_rules(path: &std::path::Path) -> bool {
    match otel_rate_sampler::DeclarativeSampler::from_path_if_declarative(path, "checkout") {
        Ok(Some(sampler)) => !sampler.has_rules(),
        Ok(None) => false,
        Err(e) if !cfg!(feature = "composable") && e.kind() == ConfigErrorKind::MissingFeature => {
            true
        }
        Err(e) => panic!("{e}"),
    }
}

#[cfg(not(feature = "yaml"))]
fn declarative_without_rules(_: &std::path::Path) -> bool {
    false
}

#[test]
fn the_configuration_guide_s_file_parses() {
    let guide = include_str!("../../docs/configuration.md");
    let start = guide.find("```toml\n").expect("a TOML block") + "```toml\n".len();
    let end = start + guide[start..].find("```").unwrap();
    let config = SamplingConfig::from_toml_str(&guide[start..end], "configuration.md")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.services().collect::<Vec<_>>(), ["checkout"]);
}

/// The example in Jaeger's documentation, with fractional and per-operation rate limits.
const JAEGER: &str = r#"{
  "service_strategies": [
    {
      "service": "foo",
      "type": "probabilistic",
      "param": 0.8,
      "operation_strategies": [
        {"operation": "op1", "type": "probabilistic", "param": 0.2},
        {"operation": "op2", "type": "ratelimiting", "param": 0.5}
      ]
    },
    {"service": "bar", "type": "ratelimiting", "param": 5}
  ],
  "default_strategy": {
    "type": "probabilistic",
    "param": 0.5,
    "operation_strategies": [
      {"operation": "/health", "type": "probabilistic", "param": 0.0},
      {"operation": "/metrics", "type": "ratelimiting", "param": 2.5}
    ]
  }
}"#;

fn kept(s: &impl ShouldSample, op: &str, n: u128) -> usize {
    (0..n)
        .filter(|i| {
            let id = TraceId::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
            s.should_sample(None, id, op, &SpanKind::Server, &[], &[])
                .decision
                == SamplingDecision::RecordAndSample
        })
        .count()
}

#[test]
fn jaeger_strategies_load_with_fractional_and_per_operation_rate_limits() {
    let config = SamplingConfig::from_jaeger_json_str(JAEGER, "strategies.json").unwrap();
    assert_eq!(config.services().collect::<Vec<_>>(), ["foo", "bar"]);
    let clock = ManualClock::new();
    let foo = RuleBasedSampler::with_clock(&config, "foo", clock.clone()).unwrap();
    // op2: 0.5 per second is one per two seconds, not zero (Jaeger truncates it).
    assert_eq!(kept(&foo, "op2", 100), 1);
    clock.advance(std::time::Duration::from_secs(2));
    assert_eq!(kept(&foo, "op2", 100), 1);
    // op1: probability 0.2; the service's 0.8 for others; the default's operations
    // are inherited where the service does not name them.
    let op1 = kept(&foo, "op1", 10_000);
    assert!((1_840..=2_160).contains(&op1), "{op1}"); // 4 sigma
    let other = kept(&foo, "other", 10_000);
    assert!((7_840..=8_160).contains(&other), "{other}");
    assert_eq!(kept(&foo, "/health", 1_000), 0);
    // The default's fractional rate limit per operation: 2.5/s = 3 per 1.2 s.
    assert_eq!(kept(&foo, "/metrics", 100), 3);
    // bar: 5 per second, all released by the last tenth of the window (paced).
    clock.advance(std::time::Duration::from_millis(900));
    let bar = RuleBasedSampler::with_clock(&config, "bar", clock.clone()).unwrap();
    assert_eq!(kept(&bar, "anything", 100), 5);
    // Unlisted: the default strategy.
    let baz = RuleBasedSampler::with_clock(&config, "baz", clock).unwrap();
    assert_eq!(kept(&baz, "/health", 100), 0);
    let half = kept(&baz, "x", 10_000);
    assert!((4_800..=5_200).contains(&half), "{half}");
    let text = config.describe("foo").to_string();
    assert!(text.contains("op2") && text.contains("0.5/s"), "{text}");
}

#[test]
fn jaeger_errors_name_the_key_and_position() {
    let check = |text: &str, kind, line, column, key: &str, says: &str| {
        let err = SamplingConfig::from_jaeger_json_str(text, "s.json").unwrap_err();
        let msg = err.to_string();
        assert_eq!(err.kind(), kind, "{msg}");
        assert_eq!(
            (err.line(), err.column(), err.key()),
            (line, column, key),
            "{msg}"
        );
        assert!(
            msg.starts_with(&format!("s.json:{line}:{column}: ")) && msg.contains(says),
            "{msg}"
        );
    };
    check(
        "{\"default_strategy\": {\"type\": \"adaptive\", \"param\": 1}}",
        ConfigErrorKind::UnknownType,
        1,
        31,
        "default_strategy.type",
        "\"ratelimiting\"",
    );
    check(
        "{\"default_strategy\": {\"type\": \"probabilistic\",\n \"param\": 2}}",
        ConfigErrorKind::InvalidProbability,
        2,
        11,
        "default_strategy.param",
        "[0, 1]",
    );
    check("{\"service_strategies\": [\n {\"service\": \"a\", \"type\": \"ratelimiting\", \"param\": 0}]}", ConfigErrorKind::InvalidLimit, 2, 52, "service_strategies[0].param", "positive");
    check(
        "{\"service_strategies\": [{\"service\": \"a\"},\n {\"service\": \"a\"}]}",
        ConfigErrorKind::DuplicateService,
        2,
        14,
        "service_strategies[1].service",
        "twice",
    );
    check(
        "{\"service_strategies\": [{\"service\": \"\"}]}",
        ConfigErrorKind::EmptyName,
        1,
        37,
        "service_strategies[0].service",
        "empty",
    );
    check("{\"service_strategies\": [{\"service\": \"a\", \"operation_strategies\": [{\"operation\": \"\", \"type\": \"probabilistic\", \"param\": 1}]}]}", ConfigErrorKind::EmptyName, 1, 81, "service_strategies[0].operation_strategies[0].operation", "empty");
    check(
        "{\"default_strategy\": {\"typo\": 1}}",
        ConfigErrorKind::UnknownKey,
        1,
        28,
        "default_strategy.typo",
        "expected one of",
    );
    check(
        "{\"default_strategy\": ",
        ConfigErrorKind::Syntax,
        1,
        21,
        "",
        "EOF",
    );
}

#[cfg(not(feature = "yaml"))]
#[test]
fn a_yaml_file_without_the_yaml_feature_says_so() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sampling.yaml");
    let err = SamplingConfig::from_path(path).unwrap_err();
    assert_eq!(err.kind(), ConfigErrorKind::MissingFeature, "{err}");
    assert!(err.to_string().contains("`yaml` feature"), "{err}");
}

/// The composable guide's 1.1 file is the composite example's, comments aside: the same
/// sampler tree and limits.
#[cfg(all(feature = "yaml", feature = "composable"))]
#[test]
fn the_composable_guide_s_file_is_the_example_s() {
    use otel_rate_sampler::DeclarativeSampler;

    let guide = include_str!("../../docs/composable.md");
    let open = "```yaml\nfile_format: \"1.1\"\n";
    let start = guide.find(open).expect("a 1.1 YAML block") + "```yaml\n".len();
    let end = start + guide[start..].find("```").unwrap();
    let from_guide =
        DeclarativeSampler::from_yaml_str(&guide[start..end], "composable.md", "checkout")
            .unwrap_or_else(|e| panic!("{e}"));
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/otel-config-composite.yaml"
    );
    let example = DeclarativeSampler::from_path(path, "checkout").unwrap();
    assert_eq!(from_guide.to_string(), example.to_string());
    assert_eq!(from_guide.composite_limits(), example.composite_limits());
    assert!(from_guide
        .to_string()
        .contains("rate_limiting/otel_rate_sampler"));
}
