//! YAML rule files and OpenTelemetry declarative configuration files (feature `yaml`):
//! the YAML example gives the TOML example's rules, errors carry their positions, the
//! loader is chosen by extension and content, and a declarative file's sampler works
//! inside a real SDK pipeline.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use opentelemetry::trace::{Tracer as _, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use otel_rate_sampler::env::{OTEL_CONFIG_FILE, OTEL_SERVICE_NAME};
use otel_rate_sampler::{ConfigErrorKind, DeclarativeSampler, RuleBasedSampler, SamplingConfig};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

/// A file of `text` under a fresh directory, removed when the test ends.
struct TempFile {
    dir: PathBuf,
    path: PathBuf,
}

impl TempFile {
    fn new(name: &str, text: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "otel-rate-sampler-formats-{}-{}",
            std::process::id(),
            name.replace(['/', '.'], "-")
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        Self { dir, path }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn the_yaml_example_gives_the_same_effective_rules_as_the_toml_example() {
    let toml = SamplingConfig::from_path(example("sampling.toml")).unwrap();
    let yaml = SamplingConfig::from_path(example("sampling.yaml")).unwrap();
    assert_eq!(
        toml.services().collect::<Vec<_>>(),
        yaml.services().collect::<Vec<_>>()
    );
    for service in toml.services().chain(["not-listed"]) {
        assert_eq!(
            toml.describe(service).to_string(),
            yaml.describe(service).to_string(),
            "service {service:?}"
        );
    }
}

#[test]
fn yaml_errors_name_the_file_line_column_and_key() {
    // A check shared with TOML: the value's own position, the full key path.
    let err = SamplingConfig::from_yaml_str(
        "default:\n  rate: 1\nservice:\n  - name: a\n    rule:\n      - span_name: x\n        rate: -2\n",
        "s.yaml",
    )
    .unwrap_err();
    assert_eq!(
        (err.kind(), err.line(), err.column(), err.key()),
        (
            ConfigErrorKind::InvalidLimit,
            7,
            15,
            "service[0].rule[0].rate"
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("s.yaml:7:15: service[0].rule[0].rate: "),
        "{err}"
    );
    // An unknown key (a typo is never ignored).
    let err = SamplingConfig::from_yaml_str("default:\n  rate: 1\n  probabilty: 0.5\n", "s.yaml")
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.line(), err.column(), err.key()),
        (ConfigErrorKind::UnknownKey, 3, 3, "default.probabilty"),
        "{err}"
    );
    // A value of the wrong type (named by its full path, as in TOML), and broken YAML.
    let err = SamplingConfig::from_yaml_str("default:\n  rate: fast\n", "s.yaml").unwrap_err();
    assert_eq!(
        (err.kind(), err.line(), err.key()),
        (ConfigErrorKind::Syntax, 2, "default.rate"),
        "{err}"
    );
    let err = SamplingConfig::from_yaml_str("default: [\n", "s.yaml").unwrap_err();
    assert_eq!(err.kind(), ConfigErrorKind::Syntax, "{err}");
    // Columns count characters, not bytes.
    let err = SamplingConfig::from_yaml_str(
        "default:\n  rate: 1\nservice:\n  - { name: \"café\", rate: 0 }\n",
        "s.yaml",
    )
    .unwrap_err();
    assert_eq!(
        (err.line(), err.column(), err.key()),
        (4, 27, "service[0].rate"),
        "{err}"
    );
    // A key given twice.
    let err =
        SamplingConfig::from_yaml_str("default:\n  rate: 1\n  rate: 2\n", "s.yaml").unwrap_err();
    assert_eq!(
        (err.kind(), err.line()),
        (ConfigErrorKind::Syntax, 3),
        "{err}"
    );
}

#[test]
fn hostile_yaml_is_refused_without_blowing_up() {
    // A "billion laughs" of aliases: refused by the parser's budget, not expanded.
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    text.push_str("default:\n  rate: 1\n");
    let err = SamplingConfig::from_yaml_str(&text, "bomb.yaml").unwrap_err();
    assert!(err.line() >= 1, "{err}");
    // Deep nesting.
    let deep = format!("default: {}1{}\n", "[".repeat(10_000), "]".repeat(10_000));
    assert!(SamplingConfig::from_yaml_str(&deep, "deep.yaml").is_err());
}

#[test]
fn the_loader_is_chosen_by_extension_and_content() {
    let rules = "default:\n  rate: 2.0\nservice:\n  - name: a\n    rate: 1.0\n";
    for name in ["rules.yaml", "rules.yml", "RULES.YML"] {
        let file = TempFile::new(name, rules);
        let config = SamplingConfig::from_path(&file.path).unwrap();
        assert_eq!(config.services().collect::<Vec<_>>(), ["a"], "{name}");
    }
    // A declarative file: the rules of its rate_limiting sampler.
    let config = SamplingConfig::from_path(example("otel-config.yaml")).unwrap();
    assert_eq!(config.services().collect::<Vec<_>>(), ["checkout"]);
    // A declarative file without one is an error, not an empty rule set.
    let file = TempFile::new(
        "no-plugin.yaml",
        "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    always_on:\n",
    );
    let err = SamplingConfig::from_path(&file.path).unwrap_err();
    assert_eq!(
        (err.kind(), err.line(), err.key()),
        (ConfigErrorKind::MissingKey, 4, "tracer_provider.sampler"),
        "{err}"
    );
    // The file name is in every error.
    let file = TempFile::new("bad.yml", "default:\n  rate: 0\n");
    let err = SamplingConfig::from_path(&file.path).unwrap_err();
    assert_eq!(err.file(), file.path.display().to_string());
    assert_eq!((err.line(), err.column()), (2, 9), "{err}");
}

#[test]
fn otel_config_file_names_the_declarative_file() {
    let path = example("otel-config.yaml");
    let path = path.to_str().unwrap();
    let s = DeclarativeSampler::from_lookup(
        "",
        env(&[(OTEL_CONFIG_FILE, path), (OTEL_SERVICE_NAME, "checkout")]),
    )
    .unwrap()
    .expect("OTEL_CONFIG_FILE is set");
    assert!(
        s.to_string()
            .starts_with("parent_based(root: rate_limiting, remote_parent_sampled: always_on, remote_parent_not_sampled: trace_id_ratio_based(0.1)"),
        "{s}"
    );
    // Empty is unset.
    assert!(
        DeclarativeSampler::from_lookup("a", env(&[(OTEL_CONFIG_FILE, "")]))
            .unwrap()
            .is_none()
    );
    assert!(DeclarativeSampler::from_lookup("a", env(&[]))
        .unwrap()
        .is_none());
    // A file that cannot be read.
    let err = DeclarativeSampler::from_lookup("a", env(&[(OTEL_CONFIG_FILE, "/nonexistent.yaml")]))
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.file()),
        (ConfigErrorKind::Io, "/nonexistent.yaml")
    );
    // The rule-file variable takes a declarative file too.
    let rules = RuleBasedSampler::from_lookup(
        "checkout",
        env(&[(otel_rate_sampler::env::OTEL_RATE_SAMPLER_CONFIG, path)]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(rules.service(), "checkout");
}

#[test]
fn a_declarative_sampler_limits_traces_in_an_sdk_pipeline() {
    let file = TempFile::new(
        "otel.yaml",
        "file_format: \"1.0\"
tracer_provider:
  sampler:
    parent_based:
      root:
        rate_limiting:
          default: { limit: 1, window: 1h }
",
    );
    let sampler = DeclarativeSampler::from_path(&file.path, "svc").unwrap();
    let spans = three_traces(sampler);
    // One trace of two spans: the root through the rate limiter, its child through the
    // local-parent branch.
    let names: Vec<_> = spans.iter().map(|s| s.name.to_string()).collect();
    assert_eq!(names, ["child", "root"]);
    assert_eq!(
        spans[0].span_context.trace_id(),
        spans[1].span_context.trace_id()
    );
    assert!(spans[1]
        .attributes
        .iter()
        .any(|kv| kv.key.as_str() == "sampler.type"));
}

#[test]
fn the_lenient_reader_of_otel_config_file_warns_and_falls_back_to_the_default_rate() {
    let file = TempFile::new(
        "typo.yaml",
        "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    always_of:\n",
    );
    let mut warnings = Vec::new();
    let s = DeclarativeSampler::from_lookup_lossy(
        "svc",
        env(&[(OTEL_CONFIG_FILE, file.path.to_str().unwrap())]),
        |e| warnings.push(e.to_string()),
    )
    .expect("a fallback sampler");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(":4:5: tracer_provider.sampler.always_of: "),
        "{warnings:?}"
    );
    assert_eq!(s.to_string(), "rate_limiting");
    let mut warned = 0;
    assert!(DeclarativeSampler::from_lookup_lossy("svc", env(&[]), |_| warned += 1).is_none());
    assert_eq!(warned, 0);
}

#[test]
fn a_yaml_rule_file_reloads_like_a_toml_one() {
    let file = TempFile::new("reload.yaml", "default:\n  limit: 2\n  window: 1h\n");
    let config = SamplingConfig::from_path(&file.path).unwrap();
    let sampler = RuleBasedSampler::new(&config, "svc").unwrap();
    // The permits of the limiters in force (no decision needed).
    let permits = |s: &RuleBasedSampler| {
        let stats = s.stats();
        let mut permits: Vec<u32> = stats
            .rules
            .iter()
            .filter_map(|r| r.window.map(|w| w.permits))
            .collect();
        permits.sort_unstable();
        (permits, stats.reloads.succeeded, stats.reloads.failed)
    };
    assert_eq!(permits(&sampler), (vec![2], 0, 0));
    std::fs::write(&file.path, "default:\n  limit: 4\n  window: 1h\n").unwrap();
    sampler.reload_from_path(&file.path).unwrap();
    assert_eq!(permits(&sampler), (vec![4], 1, 0));
    // A broken save keeps the rules in force, and says where.
    std::fs::write(&file.path, "default:\n  limit: [\n").unwrap();
    let err = sampler.reload_from_path(&file.path).unwrap_err();
    assert_eq!(err.line(), 2, "{err}");
    assert_eq!(permits(&sampler), (vec![4], 1, 1));
}

#[test]
fn at_least_reads_the_same_in_yaml_and_toml() {
    use otel_rate_sampler::summary::RulePolicy;
    let toml = SamplingConfig::from_toml_str(
        r#"
[default]
probability = 0.001
at_least = 0.5
[[service]]
name = "api"
[[service.rule]]
name = "health"
span_name = "GET /health"
probability = 0.0
at_least = 2
"#,
        "s.toml",
    )
    .unwrap();
    let yaml = SamplingConfig::from_yaml_str(
        "default:\n  probability: 0.001\n  at_least: 0.5\nservice:\n  - name: api\n    rule:\n      - name: health\n        span_name: GET /health\n        probability: 0.0\n        at_least: 2\n",
        "s.yaml",
    )
    .unwrap();
    for service in ["api", "other"] {
        assert_eq!(
            toml.effective_rules(service),
            yaml.effective_rules(service),
            "{service}"
        );
        assert_eq!(
            toml.describe(service).to_string(),
            yaml.describe(service).to_string()
        );
    }
    let rules = yaml.effective_rules("api");
    match rules.rules()[0].policy() {
        RulePolicy::AtLeast {
            probability,
            lower_bound,
        } => {
            assert_eq!(probability, 0.0);
            assert_eq!(lower_bound.per_second_rate(), 2.0);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        rules.default(),
        Some(RulePolicy::AtLeast { probability, .. }) if probability == 0.001
    ));
    // A YAML error is placed as a TOML one.
    let err = SamplingConfig::from_yaml_str("default:\n  rate: 1\n  at_least: 2\n", "s.yaml")
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.line(), err.column(), err.key()),
        (ConfigErrorKind::ConflictingKeys, 3, 13, "default.at_least"),
        "{err}"
    );
}

/// A 1.1 file, named by `OTEL_CONFIG_FILE` and read through the lookup (its `${LIMIT}`
/// too): a composite sampler in an SDK pipeline keeps one trace an hour, whole, and
/// its spans carry the threshold.
#[cfg(feature = "composable")]
#[test]
fn a_composite_sampler_from_a_1_1_file_in_an_sdk_pipeline() {
    let file = TempFile::new(
        "composite.yaml",
        "file_format: \"1.1\"
tracer_provider:
  sampler:
    composite/development:
      parent_threshold:
        root:
          rate_limiting/otel_rate_sampler:
            limit: ${LIMIT}
            window: ${WINDOW:-1h}
            sampler:
              rule_based:
                rules:
                  - span_kinds: [internal]
                    sampler:
                      probability:
                        ratio: ${RATIO:-1}
",
    );
    let path = file.path.to_str().unwrap();
    let lookup = env(&[(OTEL_CONFIG_FILE, path), ("LIMIT", "1")]);
    let sampler = DeclarativeSampler::from_lookup("svc", lookup)
        .unwrap()
        .unwrap();
    let spans = three_traces(sampler);
    let names: Vec<_> = spans.iter().map(|s| s.name.to_string()).collect();
    assert_eq!(names, ["child", "root"]);
    for span in &spans {
        assert_eq!(span.span_context.trace_state().get("ot"), Some("th:0"));
    }
    // Without the variable the limit is empty (null): a missing key, at its block.
    let err = DeclarativeSampler::from_lookup("svc", env(&[(OTEL_CONFIG_FILE, path)])).unwrap_err();
    assert_eq!(
        (err.kind(), err.line(), err.key()),
        (
            ConfigErrorKind::MissingKey,
            7,
            "tracer_provider.sampler.composite/development.parent_threshold.root.rate_limiting/otel_rate_sampler.limit"
        ),
        "{err}"
    );
    assert!(err.to_string().starts_with(&format!("{path}:7:")), "{err}");
}

/// Three traces of a root and its child through `sampler`, and the spans exported.
fn three_traces(sampler: DeclarativeSampler) -> Vec<opentelemetry_sdk::trace::SpanData> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("test");
    for _ in 0..3 {
        tracer.in_span("root", |_cx| {
            tracer.in_span("child", |_cx| {});
        });
    }
    exporter.get_finished_spans().unwrap()
}
