//! Rules that never decide: an earlier rule matches every span they match.

use super::finding::Lint;
use super::kind::LintKind;
use crate::config::model::{Rule, ServiceConfig};
use crate::pattern::Pattern;

/// Rules that an earlier rule always matches first.
pub(super) fn shadowed_rules(s: &ServiceConfig, out: &mut Vec<Lint>) {
    for (j, later) in s.rules.iter().enumerate() {
        let Some((i, earlier)) = s.rules[..j]
            .iter()
            .enumerate()
            .find(|(_, earlier)| covers(earlier, later))
        else {
            continue;
        };
        let (kind, why) = if earlier.matches_everything() {
            (LintKind::Unreachable, "matches every span")
        } else {
            (
                LintKind::Shadowed,
                "matches every span this rule matches (its conditions imply this rule's)",
            )
        };
        let fix = if later.inherited {
            "it is inherited from [default]: narrow the earlier rule, or set inherit_default_rules = false on the service"
        } else {
            "move it up or narrow the earlier rule"
        };
        out.push(Lint::new(
            kind,
            &s.name,
            Some(&later.name),
            format!(
                "rule {} never decides: rule {} {:?} before it {why}; {fix}",
                j + 1,
                i + 1,
                earlier.name
            ),
        ));
    }
}

/// Whether every span `b` matches is matched by `a` (conservative: `false` when unsure).
fn covers(a: &Rule, b: &Rule) -> bool {
    a.parent.is_none_or(|p| b.parent == Some(p))
        && a.kind.as_ref().is_none_or(|k| b.kind.as_ref() == Some(k))
        && a.span_name
            .as_ref()
            .is_none_or(|pa| b.span_name.as_ref().is_some_and(|pb| implies(pb, pa)))
        && a.attributes.iter().all(|(key, pa)| {
            b.attributes
                .iter()
                .any(|(kb, pb)| kb == key && implies(pb, pa))
        })
}

const META: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

/// Whether every text `narrow` matches is matched by `wide` (conservative).
fn implies(narrow: &Pattern, wide: &Pattern) -> bool {
    let (n, w) = (narrow.as_str(), wide.as_str());
    if n == w {
        return true;
    }
    if !n.contains(META) {
        // A literal: the one text it matches.
        return wide.is_match(n);
    }
    // Beyond literals, only `*` and `pre*` under a shorter `p*`. Each is checked against
    // the pattern itself, so that a literal with a `*` in it (a Jaeger operation name)
    // is never taken for a glob.
    let any = !w.is_empty() && w.chars().all(|c| c == '*') && wide.is_match("");
    any || match (plain_prefix(n), plain_prefix(w)) {
        (Some(n), Some(w)) => n.starts_with(w) && wide.is_match(n),
        _ => false,
    }
}

/// `p` for a glob `p*` whose `p` has no glob syntax.
fn plain_prefix(glob: &str) -> Option<&str> {
    glob.strip_suffix('*').filter(|p| !p.contains(META))
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::config::diagnostics::lint::finding::lints_of;
    use crate::config::model::SamplingConfig;

    #[test]
    fn a_rule_after_a_catch_all_is_unreachable_whatever_loaded_it() {
        // The loaders refuse this; a configuration made another way is still linted.
        let mut config = SamplingConfig::from_toml_str(
            "[default]\nrate = 1.0\n[[default.rule]]\nname = \"all\"\nkind = \"client\"\nprobability = 0.5\n[[default.rule]]\nname = \"late\"\nkind = \"server\"\nrate = 2.0\n",
            "t.toml",
        )
        .unwrap();
        config.default.rules[0].kind = None;
        let lints: Vec<_> = config
            .lints(NonZeroU32::MIN)
            .into_iter()
            .map(|l| (l.kind(), l.rule().map(str::to_owned)))
            .collect();
        assert_eq!(lints, [(LintKind::Unreachable, Some("late".into()))]);
    }

    #[test]
    fn a_rule_implied_by_an_earlier_one_is_shadowed_and_a_narrower_one_is_not() {
        let lints = lints_of(
            r#"
[default]
rate = 1.0
[[service]]
name = "s"
[[service.rule]]
name = "api"
span_name = "GET /api/*"
rate = 1.0
[[service.rule]]
name = "orders"
span_name = "GET /api/orders*"
kind = "server"
rate = 2.0
[[service.rule]]
name = "exact"
span_name = "GET /api/x"
attributes = { "tier" = "gold" }
rate = 3.0
[[service.rule]]
name = "other"
span_name = "GET /*"
rate = 4.0
[[service.rule]]
name = "gold"
attributes = { "tier" = "{gold,platinum}" }
rate = 5.0
[[service.rule]]
name = "gold-only"
span_name = "POST /"
attributes = { "tier" = "gold", "region" = "eu" }
rate = 6.0
"#,
        );
        assert_eq!(
            lints,
            [
                (LintKind::Shadowed, Some("orders".into())),
                (LintKind::Shadowed, Some("exact".into())),
                (LintKind::Shadowed, Some("gold-only".into())),
            ]
        );
    }

    #[test]
    fn different_kinds_parents_or_attributes_do_not_shadow() {
        let lints = lints_of(
            r#"
[default]
rate = 1.0
remote_parents = "cap"
[[default.rule]]
kind = "client"
rate = 1.0
[[default.rule]]
parent = "remote"
rate = 1.0
[[default.rule]]
attributes = { "a" = "x" }
rate = 1.0
[[default.rule]]
span_name = "x*"
attributes = { "b" = "x" }
rate = 1.0
[[default.rule]]
span_name = "x?"
rate = 1.0
"#,
        );
        assert_eq!(lints, []);
    }

    #[test]
    fn literal_operation_names_with_a_star_are_not_globs() {
        let json = r#"{"default_strategy": {"type": "probabilistic", "param": 0.5,
            "operation_strategies": [
                {"operation": "*", "type": "probabilistic", "param": 0.1},
                {"operation": "a*", "type": "probabilistic", "param": 0.1},
                {"operation": "ab*", "type": "probabilistic", "param": 0.1},
                {"operation": "b", "type": "probabilistic", "param": 0.1}]}}"#;
        let config = SamplingConfig::from_jaeger_json_str(json, "s.json").unwrap();
        assert_eq!(config.lints(NonZeroU32::MIN), []);
    }
}
