//! The memory budget covers a whole declarative configuration file: every
//! `rate_limiting` block's sampler is built, so their limiters are summed, for the
//! service the file is built for, before any is built.

use otel_rate_sampler::{ConfigErrorKind as K, DeclarativeSampler, SamplingConfig};

const BRANCHES: [&str; 5] = [
    "root",
    "remote_parent_sampled",
    "remote_parent_not_sampled",
    "local_parent_sampled",
    "local_parent_not_sampled",
];

/// Five `parent_based` branches, each a `rate_limiting` block whose default is a sliding
/// log of `permits` per second.
fn five_logs(permits: u32) -> String {
    BRANCHES.iter().fold(
        "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    parent_based:\n".to_owned(),
        |text, branch| {
            text + &format!(
                "      {branch}:\n        rate_limiting:\n          default: {{ limit: {permits}, algorithm: sliding-log }}\n"
            )
        },
    )
}

/// What one block's sampler takes, as the budget counts it.
fn block_bytes(permits: u32) -> usize {
    let text = format!("default: {{ limit: {permits}, algorithm: sliding-log }}\n");
    let config = SamplingConfig::from_yaml_str(&text, "block.yaml").unwrap();
    config
        .effective_rules("svc")
        .limiters()
        .iter()
        .map(|l| l.bytes())
        .sum()
}

#[test]
fn five_branches_each_under_the_budget_are_refused_together_at_the_largest() {
    // Before: each 64 MiB log passed the budget alone, and the five took 334 MB.
    let text = five_logs(4_194_303);
    let err = DeclarativeSampler::from_yaml_str(&text, "otel.yaml", "svc").unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.kind(), K::MemoryBudget, "{msg}");
    // The largest (the first of five equals): the root's default, at its limit.
    assert_eq!(
        (err.line(), err.column(), err.key()),
        (
            7,
            29,
            "tracer_provider.sampler.parent_based.root.rate_limiting.default"
        ),
        "{msg}"
    );
    assert!(
        msg.starts_with("otel.yaml:7:29: tracer_provider.sampler.parent_based.root.rate_limiting.default: the file's 5 samplers for service \"svc\" would take 320.0 MiB"),
        "{msg}"
    );
    assert!(msg.contains("over the memory budget of 128.0 MiB"), "{msg}");
    // Each block alone is within the budget.
    assert!(block_bytes(4_194_303) < SamplingConfig::DEFAULT_MEMORY_BUDGET);
}

#[test]
fn five_branches_just_under_the_budget_together_are_built_and_one_permit_more_is_not() {
    let fixed = block_bytes(1) - 16;
    let budget = SamplingConfig::DEFAULT_MEMORY_BUDGET;
    let permits = u32::try_from((budget / 5 - fixed) / 16).unwrap();
    assert!(5 * block_bytes(permits) <= budget);
    assert!(5 * block_bytes(permits + 1) > budget);
    DeclarativeSampler::from_yaml_str(&five_logs(permits), "otel.yaml", "svc").unwrap();
    let err =
        DeclarativeSampler::from_yaml_str(&five_logs(permits + 1), "otel.yaml", "svc").unwrap_err();
    assert_eq!(err.kind(), K::MemoryBudget, "{err}");
}

#[test]
fn the_sum_is_of_the_samplers_built_for_the_service() {
    // Two blocks whose logs are listed for different services: built for one service,
    // each block gives its sampler for that service, so only one log is built.
    let text = "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    parent_based:\n      root:\n        rate_limiting:\n          service:\n            - name: a\n              limit: 4194303\n              algorithm: sliding-log\n      local_parent_sampled:\n        rate_limiting:\n          service:\n            - name: b\n              limit: 4194303\n              algorithm: sliding-log\n      remote_parent_sampled:\n        rate_limiting:\n          service:\n            - name: a\n              limit: 4194303\n              algorithm: sliding-log\n";
    DeclarativeSampler::from_yaml_str(text, "otel.yaml", "b").unwrap();
    let err = DeclarativeSampler::from_yaml_str(text, "otel.yaml", "a").unwrap_err();
    assert_eq!(
        (err.kind(), err.line(), err.key()),
        (
            K::MemoryBudget,
            9,
            "tracer_provider.sampler.parent_based.root.rate_limiting.service[0]"
        ),
        "{err}"
    );
}

/// A 1.1 file: a `rate_limiting` block at the root (its budget `budget`) and, for remote
/// parents, a composite sampler whose rules each hold a composite rate limiter, `n` of
/// them.
#[cfg(feature = "composable")]
fn composite_limiters(budget: &str, n: usize) -> String {
    let rule = "            - sampler: { rate_limiting/otel_rate_sampler: { limit: 10 } }\n";
    format!(
        "file_format: \"1.1\"\ntracer_provider:\n  sampler:\n    parent_based:\n      root:\n        rate_limiting:\n          limits: {{ memory_budget: {budget} }}\n          default: {{ limit: 10 }}\n      remote_parent_sampled:\n        composite/development:\n          rule_based:\n            rules:\n{}",
        rule.repeat(n)
    )
}

#[cfg(feature = "composable")]
#[test]
fn composite_rate_limiters_are_held_to_the_budget_with_the_blocks_one_past_it_refused() {
    let budget = 1 << 20;
    let text = composite_limiters("1MiB", 1000);
    let err = DeclarativeSampler::from_yaml_str(&text, "otel.yaml", "svc").unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.kind(), K::MemoryBudget, "{msg}");
    let fit: usize = msg
        .split_once("; the first ")
        .and_then(|(_, rest)| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{msg}"));
    // Each takes its decision counters, a row of 16 cells of 8 bytes for each of 64
    // thread slots (8 KiB), and its limiter (cap, estimate, clock: about 1.5 KiB more);
    // the block a little.
    let each = (budget - block_bytes(10)) / fit;
    assert!(
        (8 << 10..10 << 10).contains(&each),
        "{each} bytes each: {msg}"
    );
    // The one that crosses it is named: the rule past the last that fits, at its line.
    let key = format!("tracer_provider.sampler.parent_based.remote_parent_sampled.composite/development.rule_based.rules[{fit}].sampler.rate_limiting/otel_rate_sampler");
    assert_eq!(
        (err.line(), err.column(), err.key()),
        (13 + fit, 24, key.as_str()),
        "{msg}"
    );
    assert!(
        msg.contains("the file's 1000 composite rate limiters"),
        "{msg}"
    );
    // Just under: built; one more: refused.
    let sampler =
        DeclarativeSampler::from_yaml_str(&composite_limiters("1MiB", fit), "otel.yaml", "svc")
            .unwrap();
    assert_eq!(sampler.composite_limits().len(), fit);
    let err =
        DeclarativeSampler::from_yaml_str(&composite_limiters("1MiB", fit + 1), "otel.yaml", "svc")
            .unwrap_err();
    assert_eq!(
        (err.kind(), err.line()),
        (K::MemoryBudget, 13 + fit),
        "{err}"
    );
}
