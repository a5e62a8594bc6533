//! Floors and lower bounds against the service cap: floors over the cap or over their
//! rule's own limit, a shared pool they leave empty or below the default's limit, and
//! lower bounds (`at_least`) the cap cannot let through.

use super::finding::Lint;
use super::kind::LintKind;
use crate::config::check;
use crate::config::check::floors::FloorProblem;
use crate::config::diagnostics::summary::RulePolicy;
use crate::config::model::{LimitSpec, Policy, ServiceConfig};

/// Floors over the cap, and floors over their rule's own limit.
pub(super) fn floors(s: &ServiceConfig, out: &mut Vec<Lint>) {
    let Some(cap) = s.cap else { return };
    match check::floors::floors(&s.rules, Some(&cap)) {
        Err(FloorProblem::OverCap { total, permits, .. }) => out.push(Lint::new(
            LintKind::FloorsOverCap,
            &s.name,
            None,
            format!(
                "the rules' floors add up to {total}, more than the cap's {permits} permits per {:?}; lower the floors or raise the cap",
                cap.limit.window()
            ),
        )),
        Ok(total) => shared_pool(s, &cap, total, out),
        Err(FloorProblem::NoCap { .. }) => {}
    }
    for rule in s.rules.iter().filter(|r| r.floor > 0) {
        let RulePolicy::Limit { limit, .. } = rule.policy.into() else {
            continue;
        };
        // floor / cap window > permits / rule window, in whole numbers.
        let reserved = u128::from(rule.floor) * u128::from(limit.window_nanos());
        let allowed = u128::from(limit.permits()) * u128::from(cap.limit.window_nanos());
        if reserved > allowed {
            out.push(Lint::new(
                LintKind::FloorOverLimit,
                &s.name,
                Some(&rule.name),
                format!(
                    "floor {} per cap window ({}/s) is more than the rule's own limit of {limit} ({}/s) lets through; the excess is held back from the shared pool and never used",
                    rule.floor,
                    f64::from(rule.floor) * 1e9 / cap.limit.window_nanos() as f64,
                    limit.per_second_rate()
                ),
            ));
        }
    }
}

/// Lower bounds (`at_least`) over the service cap.
pub(super) fn lower_bounds(s: &ServiceConfig, out: &mut Vec<Lint>) {
    let Some(cap) = s.cap else { return };
    let own = s.rules.iter().map(|r| (r.name.as_str(), r.policy));
    for (name, policy) in own.chain(s.policy.map(|p| ("default", p))) {
        let Policy::AtLeast { lower_bound, .. } = policy else {
            continue;
        };
        let bound = lower_bound.limit;
        // bound / its window > cap / cap window, in whole numbers.
        let asked = u128::from(bound.permits()) * u128::from(cap.limit.window_nanos());
        let allowed = u128::from(cap.limit.permits()) * u128::from(bound.window_nanos());
        if asked > allowed {
            out.push(Lint::new(
                LintKind::LowerBoundOverCap,
                &s.name,
                Some(name),
                format!(
                    "lower bound (at_least) {}/s is more than the service cap lets through, {}/s: the cap keeps fewer than the lower bound asks; lower `at_least` or raise the cap",
                    bound.per_second_rate(),
                    cap.limit.per_second_rate()
                ),
            ));
        }
    }
}

/// A shared pool the floors leave empty, or smaller than the default policy's limit.
fn shared_pool(s: &ServiceConfig, cap: &LimitSpec, floors: u64, out: &mut Vec<Lint>) {
    let Some(default) = s.policy else { return };
    let pool = u64::from(cap.limit.permits()).saturating_sub(floors);
    if floors == 0 {
        return;
    }
    if pool == 0 {
        out.push(Lint::new(
            LintKind::SharedPoolEmpty,
            &s.name,
            Some("default"),
            format!(
                "the floors ({floors}) reserve all of the cap's {} permits per {:?}, so the shared pool is empty and spans no rule matches are never kept (nor those of rules without a floor); lower the floors or raise the cap",
                cap.limit.permits(),
                cap.limit.window()
            ),
        ));
        return;
    }
    let RulePolicy::Limit { limit, .. } = default.into() else {
        return;
    };
    // pool / cap window < permits / default window, in whole numbers.
    let pool_rate = u128::from(pool) * u128::from(limit.window_nanos());
    let default_rate = u128::from(limit.permits()) * u128::from(cap.limit.window_nanos());
    if pool_rate < default_rate {
        out.push(Lint::new(
            LintKind::SharedPoolBelowDefault,
            &s.name,
            Some("default"),
            format!(
                "the cap's shared pool is {pool} per {:?} (the cap's {} less the floors' {floors}), less than the default policy's {limit}: spans no rule matches keep at most {pool} per cap window; lower the floors or raise the cap",
                cap.limit.window(),
                cap.limit.permits()
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::config::diagnostics::lint::finding::lints_of;
    use crate::config::diagnostics::lint::kind::Severity;
    use crate::config::model::{Rule, SamplingConfig};

    #[test]
    fn floors_that_starve_the_default_are_linted_as_the_sampler_applies_them() {
        // A cap of 10 with floors of 9 keeps 1 per window for spans no rule matches.
        let text = |floor: u32| {
            format!(
                "[[service]]\nname = \"s\"\nlimit = 5\ncap = {{ limit = 10 }}\n[[service.rule]]\nname = \"pay\"\nspan_name = \"POST /pay\"\nrate = 9.0\nfloor = {floor}\n"
            )
        };
        let kinds = |floor| {
            let config = SamplingConfig::from_toml_str(&text(floor), "t.toml").unwrap();
            config
                .lints(NonZeroU32::MIN)
                .into_iter()
                .map(|l| {
                    (
                        l.kind(),
                        l.service().to_owned(),
                        l.rule().map(str::to_owned),
                    )
                })
                .collect::<Vec<_>>()
        };
        let s = |kind| (kind, "s".to_owned(), Some("default".to_owned()));
        assert_eq!(kinds(9), [s(LintKind::SharedPoolBelowDefault)]);
        assert_eq!(kinds(5), []);
        // The sampler keeps nothing for the default when the floors take the whole cap.
        let config = SamplingConfig::from_toml_str(
            &text(9)
                .replace("rate = 9.0", "rate = 10.0")
                .replace("floor = 9", "floor = 10"),
            "t.toml",
        )
        .unwrap();
        let lints = config.lints(NonZeroU32::MIN);
        assert_eq!(lints.len(), 1, "{lints:?}");
        assert_eq!(lints[0].kind(), LintKind::SharedPoolEmpty);
        assert_eq!(lints[0].severity(), Severity::Error);
    }

    #[test]
    fn a_floor_over_its_rules_limit_is_a_warning() {
        let text = r#"
[default]
rate = 1.0
cap = { rate = 100.0 }
[[default.rule]]
name = "slow"
span_name = "a"
limit = 5
window = "1s"
floor = 6
[[default.rule]]
name = "fine"
span_name = "b"
limit = 60
window = "1m"
floor = 1
"#;
        let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
        let lints = config.lints(NonZeroU32::MIN);
        assert_eq!(lints.len(), 1, "{lints:?}");
        assert_eq!(lints[0].kind(), LintKind::FloorOverLimit);
        assert_eq!(lints[0].severity(), Severity::Warning);
        assert!(
            lints[0]
                .to_string()
                .starts_with("warning: [default]: rule \"slow\": floor 6"),
            "{}",
            lints[0]
        );
    }

    #[test]
    fn a_lower_bound_over_the_cap_is_a_warning() {
        let text = r#"
[default]
probability = 0.1
at_least = 20.0
cap = { rate = 10.0 }
[[default.rule]]
name = "within"
span_name = "a"
probability = 0.0
at_least = 10.0
[[default.rule]]
name = "over"
span_name = "b"
probability = 0.0
at_least = 11.0
"#;
        let lints = lints_of(text);
        assert_eq!(
            lints,
            [
                (LintKind::LowerBoundOverCap, Some("over".to_owned())),
                (LintKind::LowerBoundOverCap, Some("default".to_owned())),
            ]
        );
        assert_eq!(LintKind::LowerBoundOverCap.severity(), Severity::Warning);
    }

    #[test]
    fn floors_over_the_cap_are_an_error_whatever_loaded_them() {
        let config = SamplingConfig::from_toml_str(
            "[default]\nrate = 1.0\ncap = { limit = 10, window = \"1s\" }\n[[default.rule]]\nspan_name = \"a\"\nprobability = 1.0\nfloor = 10\n",
            "t.toml",
        )
        .unwrap();
        let mut s = config.default.clone();
        s.rules.push(Rule {
            name: "b".into(),
            ..s.rules[0].clone()
        });
        let mut out = Vec::new();
        floors(&s, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].kind(), LintKind::FloorsOverCap);
        assert_eq!(out[0].severity(), Severity::Error);
    }
}
