//! `scope = "fleet"` and the `[fleet]` table: what loads, and every way it is refused
//! (with the file, line, column and key like every other error).

use otel_rate_sampler::{ConfigErrorKind as K, SamplingConfig};

/// Loads `text` and checks the error's kind, position, key and message.
#[track_caller]
fn refused(text: &str, kind: K, line: usize, column: usize, key: &str, says: &str) {
    let err = SamplingConfig::from_toml_str(text, "s.toml").expect_err("must fail");
    let msg = err.to_string();
    assert_eq!(err.kind(), kind, "{msg}");
    assert_eq!(
        (err.line(), err.column(), err.key()),
        (line, column, key),
        "{msg}"
    );
    assert!(
        msg.starts_with(&format!("s.toml:{line}:{column}: {key}: ")),
        "{msg}"
    );
    assert!(msg.contains(says), "{msg:?} should say {says:?}");
}

#[test]
fn an_unknown_scope_names_the_accepted_ones() {
    refused(
        "[default]\nrate = 1.0\nscope = \"global\"\n",
        K::UnknownValue,
        3,
        9,
        "default.scope",
        "expected \"local\"",
    );
    refused(
        "[default]\nrate = 1.0\n[[service]]\nname = \"a\"\ncap = { rate = 5.0, scope = \"cluster\" }\n",
        K::UnknownValue,
        5,
        29,
        "service[0].cap.scope",
        "\"fleet\"",
    );
}

#[test]
fn scope_belongs_to_a_limit() {
    refused(
        "[default]\nrate = 1.0\n[[default.rule]]\nprobability = 0.5\nscope = \"local\"\n",
        K::ConflictingKeys,
        5,
        9,
        "default.rule[0].scope",
        "applies to a limit",
    );
    refused(
        "[default]\nrate = 1.0\n[[service]]\nname = \"a\"\nscope = \"local\"\n",
        K::MissingKey,
        5,
        9,
        "service[0].scope",
        "needs a `rate` or a `limit`",
    );
}

#[test]
fn unknown_keys_of_the_fleet_table_are_refused() {
    refused(
        "[fleet]\nredis = \"redis://h:1\"\nhost = \"h\"\n[default]\nrate = 1.0\n",
        K::UnknownKey,
        3,
        1,
        "fleet.host",
        "expected one of",
    );
    refused(
        "[fleet]\nredis = \"h:1\"\n[default]\nrate = 1.0\n",
        K::UnknownValue,
        2,
        9,
        "fleet.redis",
        "redis://",
    );
    refused(
        "[fleet]\nredis = []\n[default]\nrate = 1.0\n",
        K::MissingKey,
        2,
        9,
        "fleet.redis",
        "no Redis URL",
    );
    refused(
        "[fleet]\nredis = \"redis://h:1\"\nsync_interval = \"soon\"\n[default]\nrate = 1.0\n",
        K::InvalidLimit,
        3,
        17,
        "fleet.sync_interval",
        "not a duration",
    );
    refused(
        "[fleet]\nredis = \"redis://h:1\"\nprefix = \"a b\"\n[default]\nrate = 1.0\n",
        K::InvalidFleetKey,
        3,
        10,
        "fleet.prefix",
        "whitespace",
    );
}

#[test]
fn a_fleet_table_alone_loads_and_changes_nothing() {
    let config = SamplingConfig::from_toml_str(
        "[fleet]\nredis = [\"redis://a:1\", \"redis://b:2\"]\ncluster = true\nprefix = \"p\"\nsync_interval = \"100ms\"\n[default]\nrate = 1.0\n",
        "s.toml",
    )
    .unwrap();
    assert!(!config.describe("x").to_string().contains("fleet"));
    let secret = SamplingConfig::from_toml_str(
        "[fleet]\nredis = \"redis://user:hunter2@h:1\"\n[default]\nrate = 1.0\n",
        "s.toml",
    )
    .unwrap();
    let debug = format!("{secret:?}");
    assert!(
        !debug.contains("hunter2") && debug.contains("redis://***@h:1"),
        "{debug}"
    );
}

#[cfg(not(feature = "redis"))]
#[test]
fn a_fleet_scope_without_the_redis_feature_says_the_feature_is_needed() {
    refused(
        "[fleet]\nredis = \"redis://h:1\"\n[default]\nrate = 1.0\nscope = \"fleet\"\n",
        K::MissingFeature,
        5,
        9,
        "default.scope",
        "`redis` feature",
    );
}

#[cfg(feature = "redis")]
mod with_redis {
    use std::collections::HashMap;

    use opentelemetry::trace::{SpanKind, TraceId};
    use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
    use otel_rate_sampler::env::{OTEL_RATE_SAMPLER_CONFIG, OTEL_RATE_SAMPLER_REDIS};
    use otel_rate_sampler::lint::LintKind;
    use otel_rate_sampler::{RateLimiter, RuleBasedSampler};

    use super::*;

    const FLEET_RULE: &str = "[default]\nrate = 1.0\n[[service]]\nname = \"checkout\"\n\
                              [[service.rule]]\nname = \"pay\"\nspan_name = \"pay\"\n\
                              limit = 5\nscope = \"fleet\"\n";

    #[test]
    fn a_fleet_scope_without_a_redis_url_is_refused_where_it_is_set() {
        refused(
            FLEET_RULE,
            K::MissingKey,
            9,
            9,
            "service[0].rule[0].scope",
            "OTEL_RATE_SAMPLER_REDIS",
        );
        refused(
            "[fleet]\nprefix = \"p\"\n[default]\nrate = 1.0\ncap = { rate = 2.0, scope = \"fleet\" }\n",
            K::MissingKey,
            5,
            29,
            "default.cap.scope",
            "no Redis URL is given",
        );
    }

    #[test]
    fn a_fleet_limit_is_a_fixed_window_and_its_names_must_fit_a_redis_key() {
        let head = "[fleet]\nredis = \"redis://h:1\"\n[default]\nrate = 1.0\n";
        refused(
            &format!(
                "{head}[[default.rule]]\nrate = 1.0\nalgorithm = \"sliding\"\nscope = \"fleet\"\n"
            ),
            K::ConflictingKeys,
            7,
            13,
            "default.rule[0].algorithm",
            "fixed window",
        );
        refused(
            &format!("{head}[[default.rule]]\nname = \"a b\"\nrate = 1.0\nscope = \"fleet\"\n"),
            K::InvalidFleetKey,
            6,
            8,
            "default.rule[0].name",
            "Redis key",
        );
        refused(
            &format!("{head}[[service]]\nname = \"{{svc}}\"\ncap = {{ rate = 1.0, scope = \"fleet\" }}\n"),
            K::InvalidFleetKey,
            6,
            8,
            "service[0].name",
            "Redis key",
        );
        refused(
            &format!("{head}cap = {{ rate = 9.0, scope = \"fleet\" }}\n[[default.rule]]\nname = \"cap\"\nrate = 1.0\nscope = \"fleet\"\n"),
            K::DuplicateRule,
            7,
            8,
            "default.rule[0].name",
            "<service>:cap",
        );
    }

    fn span(s: &RuleBasedSampler, name: &str) -> SamplingDecision {
        s.should_sample(
            None,
            TraceId::from(3u128),
            name,
            &SpanKind::Server,
            &[],
            &[],
        )
        .decision
    }

    #[test]
    fn fleet_and_local_rules_mix_and_building_never_waits_for_redis() {
        // Nothing listens on port 1: the sampler builds at once, the fleet rule admits
        // nothing (no lease yet), the local default keeps its 1 per second.
        let text = FLEET_RULE.replace(
            "[default]",
            "[fleet]\nredis = \"redis://127.0.0.1:1\"\n[default]",
        );
        let config = SamplingConfig::from_toml_str(&text, "s.toml").unwrap();
        let s = RuleBasedSampler::new(&config, "checkout").unwrap();
        assert_eq!(span(&s, "pay"), SamplingDecision::Drop);
        assert_eq!(span(&s, "other"), SamplingDecision::RecordAndSample);
        assert_eq!(span(&s, "other"), SamplingDecision::Drop);
        let fleet = s.fleet_limiter("pay").expect("a fleet rule");
        assert_eq!(fleet.key(), "checkout:pay");
        assert_eq!(fleet.limit().permits(), 5);
        assert!(s.fleet_limiter("default").is_none(), "the default is local");
        let described = config.describe("checkout").to_string();
        assert!(
            described.contains("fleet-wide (key \"checkout:pay\")"),
            "{described}"
        );
    }

    #[test]
    fn the_environment_gives_the_redis_url_where_the_file_has_none() {
        let dir = std::env::temp_dir().join(format!("otel-fleet-scope-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sampling.toml");
        std::fs::write(&path, FLEET_RULE).unwrap();
        let path = path.to_str().unwrap().to_owned();
        let vars: HashMap<&str, String> = [
            (OTEL_RATE_SAMPLER_CONFIG, path.clone()),
            (OTEL_RATE_SAMPLER_REDIS, "redis://127.0.0.1:1".to_owned()),
        ]
        .into();
        let s = RuleBasedSampler::from_lookup("checkout", |n| vars.get(n).cloned())
            .unwrap()
            .unwrap();
        assert!(s.fleet_limiter("pay").is_some());
        // A reload from the file keeps the environment's Redis.
        std::fs::write(&path, FLEET_RULE.replace("limit = 5", "limit = 6")).unwrap();
        s.reload_from_path(&path).unwrap();
        assert_eq!(s.fleet_limiter("pay").unwrap().limit().permits(), 6);
        let err = RuleBasedSampler::from_lookup("checkout", |n| {
            (n == OTEL_RATE_SAMPLER_CONFIG).then(|| path.clone())
        })
        .unwrap_err();
        assert_eq!(err.kind(), K::MissingKey, "{err}");
        assert_eq!((err.line(), err.key()), (9, "service[0].rule[0].scope"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_configuration_guide_s_fleet_file_loads() {
        let guide = include_str!("../../docs/configuration.md");
        let start = guide.find("```toml\n[fleet]").expect("a [fleet] block") + "```toml\n".len();
        let end = start + guide[start..].find("```").unwrap();
        let config = SamplingConfig::from_toml_str(&guide[start..end], "configuration.md")
            .unwrap_or_else(|e| panic!("{e}"));
        let described = config.describe("checkout").to_string();
        assert!(
            described.contains("fleet-wide (key \"checkout:cap\")"),
            "{described}"
        );
        assert!(
            described.contains("fleet-wide (key \"checkout:payments\")"),
            "{described}"
        );
    }

    #[test]
    fn the_replica_split_lint_skips_fleet_limits() {
        let text = "[fleet]\nredis = \"redis://h:1\"\n[default]\nlimit = 1\nwindow = \"4000000h\"\nscope = \"fleet\"\n";
        let config = SamplingConfig::from_toml_str(text, "s.toml").unwrap();
        let lints = config.lints(std::num::NonZeroU32::new(3).unwrap());
        assert!(
            lints.iter().all(|l| l.kind() != LintKind::CannotSplit),
            "{lints:?}"
        );
        let rules = config.effective_rules("any");
        assert!(rules.default_fleet_wide());
        assert_eq!(rules.local_limits().count(), 0);
        assert_eq!(rules.limits().count(), 1);
    }
}

#[cfg(feature = "redis")]
#[test]
fn inherited_fleet_rules_get_keys_of_the_service_that_inherits_them() {
    let head = "[fleet]\nredis = \"redis://127.0.0.1:1\"\n[[default.rule]]\nname = \"default\"\nspan_name = \"x\"\nrate = 1.0\nscope = \"fleet\"\n";
    // Both would be `a:default` in Redis.
    refused(
        &format!("{head}[[service]]\nname = \"a\"\nrate = 2.0\nscope = \"fleet\"\n"),
        K::DuplicateRule,
        8,
        1,
        "service[0]",
        "inherit_default_rules = false",
    );
    // A service name that cannot be part of a Redis key.
    refused(
        &format!("{head}[[service]]\nname = \"a b\"\n"),
        K::InvalidFleetKey,
        9,
        8,
        "service[0].name",
        "Redis key",
    );
    SamplingConfig::from_toml_str(
        &format!("{head}[[service]]\nname = \"a b\"\ninherit_default_rules = false\n"),
        "s.toml",
    )
    .unwrap();
}
