//! Which policy key needs or rules out which (`src/config/formats/rule_file/keys.rs`):
//! each rule's error, kind and key, and which is reported when several are broken.

use otel_rate_sampler::ConfigErrorKind::{self, ConflictingKeys, MissingKey, UnknownKey};
use otel_rate_sampler::SamplingConfig;

/// The error of `[default]` (or the service `a`) holding `keys`, as (kind, key, message).
fn error(block: &str, keys: &str) -> (ConfigErrorKind, String, String) {
    let text = match block {
        "default" => format!("[default]\n{keys}\n"),
        _ => format!("[[service]]\nname = \"a\"\nrate = 1.0\n{keys}\n"),
    };
    let e = SamplingConfig::from_toml_str(&text, "keys.toml").expect_err(&text);
    let shown = e.to_string();
    let (_, message) = shown.split_once(&format!(" {}: ", e.key())).unwrap();
    (e.kind(), e.key().to_owned(), message.to_owned())
}

fn expect(block: &str, keys: &str, kind: ConfigErrorKind, key: &str, message: &str) {
    let want = (kind, key.to_owned(), message.to_owned());
    assert_eq!(error(block, keys), want, "{keys}");
}

#[test]
fn each_row_of_the_tables_is_its_error_at_its_key() {
    let d = "default";
    expect(
        d,
        "rate = 1.0\nlimit = 5",
        ConflictingKeys,
        "default.limit",
        "set `rate` (per second, fractional) or `limit` (per `window`), not both",
    );
    expect(
        d,
        "rate = 1.0\nwindow = \"2s\"",
        ConflictingKeys,
        "default.window",
        "`window` goes with `limit`; a `rate` is per second",
    );
    expect(
        d,
        "window = \"2s\"",
        MissingKey,
        "default.window",
        "`window` needs a `limit` beside it",
    );
    expect(
        d,
        "algorithm = \"fixed\"",
        MissingKey,
        "default.algorithm",
        "`algorithm` needs a `rate` or a `limit` beside it",
    );
    expect(
        d,
        "scope = \"local\"",
        MissingKey,
        "default.scope",
        "`scope` needs a `rate` or a `limit` beside it",
    );
    expect(
        d,
        "paced = false",
        MissingKey,
        "default.paced",
        "`paced` needs a `rate` or a `limit` beside it",
    );
    expect(d, "rate = 1.0\nat_least = 1.0", ConflictingKeys, "default.at_least", "`at_least` is the lower bound of a `probability`; a limit (`rate` or `limit`) has none: remove one of the two");
    expect(d, "at_least = 1.0", MissingKey, "default.at_least", "`at_least` needs a `probability` beside it: keep with that probability, but at least this many traces per second");
    expect(
        d,
        "limit = 5\nprobability = 0.5",
        ConflictingKeys,
        "default.probability",
        "a block sets a limit (`rate` or `limit`) or a `probability`, not both",
    );
    expect(d, "probability = 0.5\nscope = \"local\"", ConflictingKeys, "default.scope", "`scope` applies to a limit; a `probability` is decided on the trace id, the same in every replica");
    expect(
        d,
        "probability = 0.5\nalgorithm = \"fixed\"",
        ConflictingKeys,
        "default.algorithm",
        "`algorithm` applies to a limit; a `probability` has none",
    );
    expect(
        d,
        "probability = 0.5\npaced = false",
        ConflictingKeys,
        "default.paced",
        "`paced` applies to a limit; a `probability` keeps traces whenever they come",
    );
}

#[test]
fn the_first_broken_row_is_the_error() {
    let d = "default";
    // A limit's keys are read before a probability's.
    expect(
        d,
        "rate = 1.0\nlimit = 5\nat_least = 1.0",
        ConflictingKeys,
        "default.limit",
        "set `rate` (per second, fractional) or `limit` (per `window`), not both",
    );
    expect(
        d,
        "paced = false\nalgorithm = \"fixed\"\nscope = \"local\"",
        MissingKey,
        "default.algorithm",
        "`algorithm` needs a `rate` or a `limit` beside it",
    );
    expect(d, "probability = 0.5\npaced = false\nat_least = 1.0\nrate = 1.0", ConflictingKeys, "default.at_least", "`at_least` is the lower bound of a `probability`; a limit (`rate` or `limit`) has none: remove one of the two");
    // A bad value of a limit key is found after its keys are.
    expect(
        d,
        "rate = -1.0\nwindow = \"2s\"",
        ConflictingKeys,
        "default.window",
        "`window` goes with `limit`; a `rate` is per second",
    );
}

#[test]
fn a_cap_takes_no_key_of_the_other_policies_adaptive_named_first() {
    let s = "service";
    expect(
        s,
        "cap = { rate = 5.0, probability = 0.5, adaptive = 2.0 }",
        UnknownKey,
        "service[0].cap.adaptive",
        "a cap is a limit and takes no `adaptive`; use `rate`, or `limit` with `window`",
    );
    expect(
        s,
        "cap = { rate = 5.0, probability = 0.5, at_least = 1.0 }",
        UnknownKey,
        "service[0].cap.at_least",
        "a cap is a limit and takes no `at_least`; use `rate`, or `limit` with `window`",
    );
    expect(
        s,
        "cap = { rate = 5.0, probability = 0.5 }",
        UnknownKey,
        "service[0].cap.probability",
        "a cap is a limit and takes no `probability`; use `rate`, or `limit` with `window`",
    );
}
