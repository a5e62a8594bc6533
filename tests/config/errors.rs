//! Every kind of configuration error: its kind, file, line, column, key and message.

use otel_rate_sampler::{ConfigError, ConfigErrorKind as K, SamplingConfig};

const HEAD: &str = "[default]\nrate = 1.0\n";

/// Loads `body` (after a valid `[default]` block when `with_head`) and checks the error.
#[track_caller]
fn check(with_head: bool, body: &str, kind: K, line: usize, column: usize, key: &str, says: &str) {
    let text = if with_head {
        format!("{HEAD}{body}")
    } else {
        body.to_owned()
    };
    let err = SamplingConfig::from_toml_str(&text, "s.toml").expect_err("must fail");
    assert_error(&err, "s.toml", (kind, line, column, key), says);
}

/// Checks `err`'s file, kind, position and key, that its message starts with them and
/// says `says`.
#[track_caller]
fn assert_error(err: &ConfigError, file: &str, at: (K, usize, usize, &str), says: &str) {
    let (kind, line, column, key) = at;
    let msg = err.to_string();
    assert_eq!(err.kind(), kind, "{msg}");
    assert_eq!(
        (err.file(), err.line(), err.column(), err.key()),
        (file, line, column, key),
        "{msg}"
    );
    assert!(
        msg.starts_with(&format!("{file}:{line}:{column}: ")),
        "{msg}"
    );
    assert!(msg.contains(says), "{msg:?} should say {says:?}");
}

#[test]
fn unknown_keys_name_the_key_and_the_accepted_ones() {
    check(
        false,
        "[default]\nrate = 1.0\nrat = 2\n",
        K::UnknownKey,
        3,
        1,
        "default.rat",
        "expected one of",
    );
    check(
        true,
        "[[service]]\nname = \"a\"\n[[service.rule]]\nrate = 1.0\nspan = \"x\"\n",
        K::UnknownKey,
        7,
        1,
        "service[0].rule[0].span",
        "span_name",
    );
    check(
        true,
        "[[services]]\nname = \"a\"\n",
        K::UnknownKey,
        3,
        3,
        "services",
        "service",
    );
}

#[test]
fn unknown_keys_are_named_by_their_full_path() {
    // The second rule of the second service, under a `[service.cap]`-style inline table
    // too: serde reports the bare key, the error names where it is.
    let body = "[[service]]\nname = \"a\"\n[[service]]\nname = \"b\"\n\
                [[service.rule]]\nrate = 1.0\n[[service.rule]]\nrate = 1.0\n  rat = 2\n";
    check(
        true,
        body,
        K::UnknownKey,
        11,
        3,
        "service[1].rule[1].rat",
        "unknown field `rat`",
    );
    let err = SamplingConfig::from_toml_str(&format!("{HEAD}{body}"), "s.toml").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("s.toml:11:3: service[1].rule[1].rat: unknown field `rat`"),
        "{err}"
    );
    check(
        true,
        "[[service]]\nname = \"a\"\ncap = { rate = 5.0, burst = 2 }\n",
        K::UnknownKey,
        5,
        21,
        "service[0].cap.burst",
        "unknown field `burst`",
    );
}

#[test]
fn bad_limits_are_refused_with_what_is_accepted() {
    check(
        false,
        "[default]\nrate = 0\n",
        K::InvalidLimit,
        2,
        8,
        "default.rate",
        "positive",
    );
    check(
        false,
        "[default]\nrate = -2.5\n",
        K::InvalidLimit,
        2,
        8,
        "default.rate",
        "positive",
    );
    check(
        false,
        "[default]\nrate = nan\n",
        K::InvalidLimit,
        2,
        8,
        "default.rate",
        "finite",
    );
    check(
        false,
        "[default]\nrate = inf\n",
        K::InvalidLimit,
        2,
        8,
        "default.rate",
        "finite",
    );
    check(
        false,
        "[default]\nlimit = 0\n",
        K::InvalidLimit,
        2,
        9,
        "default.limit",
        "at least 1",
    );
    check(
        false,
        "[default]\nlimit = -3\n",
        K::InvalidLimit,
        2,
        9,
        "default.limit",
        "whole number",
    );
    check(
        false,
        "[default]\nlimit = 5\nwindow = \"1 fortnight\"\n",
        K::InvalidLimit,
        3,
        10,
        "default.window",
        "\"500ms\"",
    );
    check(
        false,
        "[default]\nlimit = 9999999\n",
        K::InvalidLimit,
        2,
        9,
        "default.limit",
        "4194303",
    );
    check(
        true,
        "[[service]]\nname = \"a\"\ncap = { rate = -1.0 }\n",
        K::InvalidLimit,
        5,
        16,
        "service[0].cap.rate",
        "positive",
    );
    check(true, "[[service]]\nname = \"a\"\ncap = { limit = 3 }\n[[service.rule]]\nkind = \"server\"\nrate = 1.0\nfloor = 2\n[[service.rule]]\nrate = 1.0\nfloor = 2\n", K::InvalidLimit, 12, 9, "service[0].rule[1].floor", "floors add up to 4");
}

#[test]
fn bad_probabilities_are_refused() {
    check(
        false,
        "[default]\nprobability = 1.5\n",
        K::InvalidProbability,
        2,
        15,
        "default.probability",
        "[0, 1]",
    );
    check(
        false,
        "[default]\nprobability = nan\n",
        K::InvalidProbability,
        2,
        15,
        "default.probability",
        "[0, 1]",
    );
}

#[test]
fn bad_globs_say_why() {
    check(
        true,
        "[[service]]\nname = \"a\"\n[[service.rule]]\nspan_name = \"GET /[api\"\nrate = 1.0\n",
        K::BadGlob,
        6,
        13,
        "service[0].rule[0].span_name",
        "not a valid glob",
    );
    check(
        true,
        "[[default.rule]]\nattributes = { \"http.route\" = \"{a,b\" }\nrate = 1.0\n",
        K::BadGlob,
        4,
        31,
        "default.rule[0].attributes.\"http.route\"",
        "not a valid glob",
    );
    // A route template copied as is: `{id}` would match `id`, never `{id}`.
    check(
        true,
        "[[default.rule]]\nattributes = { \"http.route\" = \"/orders/{id}\" }\nrate = 1.0\n",
        K::BadGlob,
        4,
        31,
        "default.rule[0].attributes.\"http.route\"",
        "brace group \"{id}\" with one option",
    );
}

#[test]
fn unknown_algorithms_list_the_accepted_ones() {
    check(
        false,
        "[default]\nrate = 1.0\nalgorithm = \"token-bucket\"\n",
        K::UnknownAlgorithm,
        3,
        13,
        "default.algorithm",
        "\"sliding-log\"",
    );
}

#[test]
fn unknown_values_list_the_accepted_ones() {
    check(
        true,
        "[[default.rule]]\nkind = \"serverr\"\nrate = 1.0\n",
        K::UnknownValue,
        4,
        8,
        "default.rule[0].kind",
        "\"server\"",
    );
    check(
        true,
        "[[default.rule]]\nparent = \"local\"\nrate = 1.0\n",
        K::UnknownValue,
        4,
        10,
        "default.rule[0].parent",
        "follow their parent",
    );
    check(
        true,
        "[[service]]\nname = \"a\"\nremote_parents = \"always\"\n",
        K::UnknownValue,
        5,
        18,
        "service[0].remote_parents",
        "\"cap\"",
    );
}

#[test]
fn duplicates_are_refused() {
    check(
        true,
        "[[service]]\nname = \"a\"\n[[service]]\nname = \"a\"\n",
        K::DuplicateService,
        6,
        8,
        "service[1].name",
        "listed twice",
    );
    check(
        true,
        "[[default.rule]]\nname = \"x\"\nkind = \"server\"\nrate = 1.0\n[[default.rule]]\nname = \"x\"\nrate = 2.0\n",
        K::DuplicateRule,
        8,
        8,
        "default.rule[1].name",
        "used twice",
    );
}

#[test]
fn empty_names_are_refused() {
    check(
        true,
        "[[service]]\nname = \"\"\n",
        K::EmptyName,
        4,
        8,
        "service[0].name",
        "empty",
    );
    check(
        true,
        "[[default.rule]]\nname = \" \"\nrate = 1.0\n",
        K::EmptyName,
        4,
        8,
        "default.rule[0].name",
        "empty",
    );
    check(
        true,
        "[[default.rule]]\nattributes = { \"\" = \"x\" }\nrate = 1.0\n",
        K::EmptyName,
        4,
        16,
        "default.rule[0].attributes.\"\"",
        "empty",
    );
}

#[test]
fn missing_and_conflicting_keys_are_refused() {
    check(
        false,
        "[default]\nalgorithm = \"fixed\"\n",
        K::MissingKey,
        2,
        13,
        "default.algorithm",
        "needs a `rate`",
    );
    check(
        true,
        "[[service]]\nrate = 1.0\n",
        K::MissingKey,
        3,
        1,
        "service[0].name",
        "needs a `name`",
    );
    check(
        true,
        "[[default.rule]]\nname = \"x\"\n",
        K::MissingKey,
        3,
        1,
        "default.rule[0]",
        "needs a `rate`",
    );
    check(
        false,
        "[default]\nrate = 1.0\nprobability = 0.5\n",
        K::ConflictingKeys,
        3,
        15,
        "default.probability",
        "not both",
    );
    check(
        false,
        "[default]\nrate = 1.0\nlimit = 5\n",
        K::ConflictingKeys,
        3,
        9,
        "default.limit",
        "not both",
    );
    check(
        true,
        "[[default.rule]]\nrate = 1.0\nfloor = 1\n",
        K::MissingKey,
        5,
        9,
        "default.rule[0].floor",
        "add `default.cap`",
    );
    check(
        true,
        "[[default.rule]]\nparent = \"remote\"\nrate = 1.0\n",
        K::ConflictingKeys,
        4,
        10,
        "default.rule[0].parent",
        "remote_parents = \"cap\"",
    );
}

#[test]
fn syntax_and_type_errors_carry_a_position() {
    check(
        false,
        "[default]\nrate = \"fast\"\n",
        K::Syntax,
        2,
        8,
        "default.rate",
        "invalid type",
    );
    check(false, "[default\n", K::Syntax, 1, 9, "", "");
}

#[test]
fn errors_have_a_source_where_one_exists() {
    use std::error::Error;
    let err = SamplingConfig::from_toml_str("[default]\nrate = -1\n", "s.toml").unwrap_err();
    assert!(err.source().unwrap().to_string().contains("positive"));
    let err = SamplingConfig::from_path("/nonexistent/s.toml").unwrap_err();
    assert_eq!(err.kind(), K::Io);
    assert!(err.source().is_some());
}

#[test]
fn a_cap_takes_no_probability() {
    check(
        true,
        "[[service]]\nname = \"a\"\nrate = 2.0\ncap = { rate = 10.0, probability = 0.5 }\n",
        K::UnknownKey,
        6,
        36,
        "service[0].cap.probability",
        "takes no `probability`",
    );
}

#[test]
fn a_value_of_the_wrong_type_is_named_by_its_full_path() {
    check(
        true,
        "[[service]]\nname = \"a\"\n[[service.rule]]\nrate = \"fast\"\n",
        K::Syntax,
        6,
        8,
        "service[0].rule[0].rate",
        "invalid type",
    );
}

#[test]
fn window_errors_are_blamed_on_the_window() {
    // Before: `default.limit: window 500µs is shorter than the minimum of 1ms`.
    check(
        false,
        "[default]\nlimit = 5\nwindow = \"0.5ms\"\n",
        K::InvalidLimit,
        3,
        10,
        "default.window",
        "shorter than the minimum",
    );
    check(
        true,
        "[[service]]\nname = \"a\"\ncap = { limit = 5, window = \"600000000h\" }\n",
        K::InvalidLimit,
        5,
        29,
        "service[0].cap.window",
        "longer than the maximum",
    );
}

#[test]
fn a_utf8_byte_order_mark_is_accepted_and_not_counted_in_columns() {
    let toml = "\u{feff}[default]\nrate = 5.0\n";
    let config = SamplingConfig::from_toml_str(toml, "bom.toml").unwrap();
    assert_eq!(config.services().count(), 0);
    let err = SamplingConfig::from_toml_str("\u{feff}rate = -1.0\n", "bom.toml").unwrap_err();
    // Before: the BOM was a syntax error at 1:1.
    assert_eq!((err.line(), err.column()), (1, 1), "{err}");
    let json = "\u{feff}{\"default_strategy\": {\"type\": \"probabilistic\", \"param\": 0.5}}";
    SamplingConfig::from_jaeger_json_str(json, "bom.json").unwrap();
    let err = SamplingConfig::from_jaeger_json_str("\u{feff}{]", "bom.json").unwrap_err();
    assert_eq!((err.line(), err.column()), (1, 2), "{err}");
}

#[test]
fn jaeger_syntax_error_columns_count_characters_not_bytes() {
    // "é" and "ü" are two bytes each: serde_json says column 38.
    let json = "{\"service_strategies\": [{\"service\": \"müé\", \"type\": }]}";
    let err = SamplingConfig::from_jaeger_json_str(json, "s.json").unwrap_err();
    assert_eq!(err.kind(), K::Syntax);
    let column = json.find("}]").unwrap() - 2 + 1; // bytes before it, less the 2 extra
    assert_eq!((err.line(), err.column()), (1, column), "{err}");
    assert!(
        err.to_string().starts_with(&format!("s.json:1:{column}: ")),
        "{err}"
    );
    // A checked value after multi-byte text: its column in characters too.
    let json = "{\"service_strategies\": [{\"service\": \"müé\", \"type\": \"ratelimiting\", \"param\": -1}]}";
    let err = SamplingConfig::from_jaeger_json_str(json, "s.json").unwrap_err();
    let column = json.find("-1").unwrap() - 2 + 1;
    assert_eq!(
        (err.line(), err.column(), err.key()),
        (1, column, "service_strategies[0].param"),
        "{err}"
    );
}

#[test]
fn question_mark_in_main_prints_the_message_not_a_struct() {
    let err = SamplingConfig::from_toml_str("[default]\nrate = -1\n", "s.toml").unwrap_err();
    // `fn main() -> Result<(), ConfigError>` prints `Error: {err:?}`.
    assert_eq!(format!("{err:?}"), err.to_string());
    assert!(!format!("{err:?}").contains("ConfigError {"));
    let boxed: Box<dyn std::error::Error> = Box::new(err);
    assert!(format!("{boxed:?}").starts_with("s.toml:2:8: default.rate: "));
    // Without a position, no `:0:0`.
    let err = SamplingConfig::from_path("/nonexistent/s.toml").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/nonexistent/s.toml: cannot read"),
        "{err}"
    );
}

#[test]
fn jaeger_unknown_keys_and_wrong_types_are_named_by_their_full_path() {
    // Before: the bare `typ`, and no key at all for a value of the wrong type.
    let json = "{\"service_strategies\": [{\"service\": \"a\"},\n  {\"service\": \"b\", \"operation_strategies\": [\n    {\"operation\": \"x\", \"typ\": \"probabilistic\", \"param\": 1}]}]}";
    let err = SamplingConfig::from_jaeger_json_str(json, "s.json").unwrap_err();
    assert_eq!(err.kind(), K::UnknownKey, "{err}");
    assert_eq!(
        (err.line(), err.key()),
        (3, "service_strategies[1].operation_strategies[0].typ"),
        "{err}"
    );
    let json = "{\"default_strategy\": {\"type\": \"probabilistic\", \"param\": \"high\"}}";
    let err = SamplingConfig::from_jaeger_json_str(json, "s.json").unwrap_err();
    assert_eq!(
        (err.kind(), err.key()),
        (K::Syntax, "default_strategy.param"),
        "{err}"
    );
    // A missing operation key is named in full, at its object.
    let json = "{\"default_strategy\": {\"operation_strategies\": [{\"operation\": \"x\", \"type\": \"probabilistic\"}]}}";
    let err = SamplingConfig::from_jaeger_json_str(json, "s.json").unwrap_err();
    assert_eq!(
        (err.kind(), err.key(), err.column()),
        (
            K::MissingKey,
            "default_strategy.operation_strategies[0]",
            48
        ),
        "{err}"
    );
    assert!(err.to_string().contains("add `param`"), "{err}");
}

#[test]
fn bad_lower_bounds_are_typed_errors_at_the_at_least_key() {
    let rule = "[[service]]\nname = \"a\"\n[[service.rule]]\nspan_name = \"x\"\n";
    for (bound, says) in [
        ("-1.0", "not positive"),
        ("0", "not positive"),
        ("nan", "finite"),
    ] {
        check(
            true,
            &format!("{rule}probability = 0.5\nat_least = {bound}\n"),
            K::InvalidLimit,
            8,
            12,
            "service[0].rule[0].at_least",
            says,
        );
    }
    // Only beside a probability: with a limit it conflicts, alone it misses one.
    check(
        true,
        "[[service]]\nname = \"a\"\nrate = 1.0\nat_least = 2.0\n",
        K::ConflictingKeys,
        6,
        12,
        "service[0].at_least",
        "lower bound of a `probability`",
    );
    check(
        true,
        &format!("{rule}at_least = 2.0\n"),
        K::MissingKey,
        7,
        12,
        "service[0].rule[0].at_least",
        "needs a `probability` beside it",
    );
    check(
        false,
        "[default]\nadaptive = 5.0\nat_least = 2.0\n",
        K::ConflictingKeys,
        3,
        12,
        "default.at_least",
        "takes no `at_least`",
    );
    check(
        true,
        "[[service]]\nname = \"a\"\nrate = 2.0\ncap = { rate = 10.0, at_least = 1.0 }\n",
        K::UnknownKey,
        6,
        33,
        "service[0].cap.at_least",
        "takes no `at_least`",
    );
}

/// A declarative configuration file's errors name the full key path from the document's
/// root, with the file, line and column, and say what was wrong in words.
#[cfg(feature = "yaml")]
mod declarative {
    use otel_rate_sampler::{ConfigErrorKind as K, DeclarativeSampler};

    const HEAD: &str = "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n";

    #[track_caller]
    fn check(body: &str, kind: K, line: usize, column: usize, key: &str, says: &str) {
        let text = format!("{HEAD}{body}");
        let err =
            DeclarativeSampler::from_yaml_str(&text, "otel.yaml", "svc").expect_err("must fail");
        super::assert_error(&err, "otel.yaml", (kind, line, column, key), says);
        assert!(err.to_string().contains(&format!(": {key}: ")), "{err}");
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named_by_its_full_path() {
        // Before: `otel.yaml:8:20: limit: invalid i64`.
        check(
            "    parent_based:\n      root:\n        rate_limiting:\n          default:\n            limit: abc\n",
            K::Syntax,
            8,
            20,
            "tracer_provider.sampler.parent_based.root.rate_limiting.default.limit",
            "invalid",
        );
        check(
            "    parent_based:\n      root:\n        rate_limiting:\n          service:\n            - name: a\n              rule:\n                - { span_name: x, limit: many }\n",
            K::Syntax,
            10,
            42,
            "tracer_provider.sampler.parent_based.root.rate_limiting.service[0].rule[0].limit",
            "invalid",
        );
        check(
            "    trace_id_ratio_based:\n      ratio: half\n",
            K::Syntax,
            5,
            14,
            "tracer_provider.sampler.trace_id_ratio_based.ratio",
            "invalid",
        );
    }

    #[test]
    fn a_bad_value_is_named_by_its_full_path() {
        check(
            "    parent_based:\n      local_parent_sampled:\n        rate_limiting:\n          default:\n            limit: -5\n",
            K::InvalidLimit,
            8,
            20,
            "tracer_provider.sampler.parent_based.local_parent_sampled.rate_limiting.default.limit",
            "not a permit count",
        );
    }

    #[test]
    fn nesting_too_deep_is_said_in_words_not_a_debug_form() {
        // Before: `budget breached: Depth { depth: 65 }`.
        let mut body = String::new();
        for level in 0..40 {
            let indent = " ".repeat(4 + 4 * level);
            body.push_str(&format!("{indent}parent_based:\n{indent}  root:\n"));
        }
        body.push_str(&format!("{}always_on:\n", " ".repeat(4 + 4 * 40)));
        let err = DeclarativeSampler::from_yaml_str(&format!("{HEAD}{body}"), "otel.yaml", "svc")
            .expect_err("must fail");
        let msg = err.to_string();
        assert_eq!(err.kind(), K::Syntax, "{msg}");
        assert!(msg.starts_with("otel.yaml:"), "{msg}");
        assert!(msg.contains("nested more than 64 deep"), "{msg}");
        assert!(!msg.contains('{') && !msg.contains("Depth"), "{msg}");
    }
}
