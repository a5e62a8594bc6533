//! A block (`[default]` or a `[[service]]`) and its rules, lowered and checked.

use std::ops::Range;

use crate::config::check::floors::{self, FloorProblem};
use crate::config::check::names::{self, Listed};
use crate::config::check::{fleet_keys, reach};
use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::formats::key_path::KeyPath;
use crate::config::formats::rule_file::ctx::Ctx;
use crate::config::formats::rule_file::policy::{fleet_name, limit, policy};
use crate::config::formats::rule_file::raw::{RawBlock, RawCap};
use crate::config::formats::rule_file::rule::rule;
use crate::config::formats::spanned::Spanned;
use crate::config::model::values;
use crate::config::model::{fleet_cap_key, fleet_key, LimitSpec, Policy, Rule, ServiceConfig};
use crate::sampler::RemoteParents;

pub(super) fn block(
    ctx: &Ctx<'_>,
    raw: &Spanned<RawBlock>,
    path: KeyPath<'_>,
    is_default: bool,
) -> Result<ServiceConfig, ConfigError> {
    let span = raw.span();
    let raw = raw.get_ref();
    let key = |k: &'static str| path.key(k);
    let name = block_name(ctx, raw, span.clone(), path, is_default)?;
    let mut policy = policy(ctx, &raw.policy_keys(), path)?;
    if is_default {
        // A [default] that sets no policy keeps the built-in one.
        policy = policy.or(ServiceConfig::builtin_default().policy);
    }
    let inherit_default_rules =
        match (&raw.inherit_default_rules, is_default) {
            (Some(i), true) => return Err(ctx.new_error(
                ConfigErrorKind::UnknownKey,
                i.span(),
                key("inherit_default_rules"),
                "`inherit_default_rules` is set on a [[service]], to opt out of [default]'s rules"
                    .into(),
            )),
            (Some(i), false) => *i.get_ref(),
            (None, _) => true,
        };
    let cap = match &raw.cap {
        Some(c) => Some(cap(ctx, c, path)?),
        None => None,
    };
    let remote_parents = match &raw.remote_parents {
        Some(r) => ctx.check(
            r,
            key("remote_parents"),
            values::remote_parents(r.get_ref()),
        )?,
        None => RemoteParents::default(),
    };
    let rules = rules(ctx, raw, path, is_default, cap.as_ref(), remote_parents)?;
    let last = reach::last_catch_all(&rules);
    if let (false, Some(last), Some((span, k))) = (is_default, last, policy_key(raw)) {
        return Err(unreachable_policy(
            ctx,
            span,
            &key(k).to_string(),
            &last.name,
            "",
        ));
    }
    distinct_fleet_keys(ctx, raw, path, policy.as_ref(), cap.as_ref(), &rules)?;
    Ok(ServiceConfig {
        name,
        policy,
        cap,
        remote_parents,
        rules,
        inherit_default_rules,
    })
}

/// A block's `name`: none for `[default]`, required for a `[[service]]`.
fn block_name(
    ctx: &Ctx<'_>,
    raw: &RawBlock,
    span: Range<usize>,
    path: KeyPath<'_>,
    is_default: bool,
) -> Result<String, ConfigError> {
    let key = |k: &'static str| path.key(k);
    Ok(match (&raw.name, is_default) {
        (Some(n), true) => {
            return Err(ctx.new_error(
                ConfigErrorKind::UnknownKey,
                n.span(),
                key("name"),
                "[default] applies to every service not listed and takes no `name`; list a service with [[service]]".into(),
            ))
        }
        (None, true) => String::new(),
        (Some(n), false) => {
            ctx.check(n, key("name"), values::name("service name", n.get_ref()))?;
            n.get_ref().clone()
        }
        (None, false) => {
            return Err(ctx.new_error(
                ConfigErrorKind::MissingKey,
                span,
                key("name"),
                "a [[service]] needs a `name`: the service.name it applies to".into(),
            ))
        }
    })
}

/// A block's `cap`: a limit only.
fn cap(
    ctx: &Ctx<'_>,
    c: &Spanned<Box<RawCap>>,
    path: KeyPath<'_>,
) -> Result<LimitSpec, ConfigError> {
    let key = |k: &'static str| path.key(k);
    let cap_path = key("cap");
    let cr = c.get_ref();
    // A cap takes none of a rule's other policies' keys (named in this order).
    let spans = cr.policy_keys().spans();
    let refused = ["adaptive", "at_least", "probability"];
    if let Some((k, span)) = refused.into_iter().find_map(|k| Some((k, spans.of(k)?))) {
        return Err(ctx.new_error(
            ConfigErrorKind::UnknownKey,
            span,
            format!("{cap_path}.{k}"),
            format!("a cap is a limit and takes no `{k}`; use `rate`, or `limit` with `window`"),
        ));
    }
    let spec = limit(ctx, &cr.policy_keys(), cap_path)?;
    spec.ok_or_else(|| {
        ctx.new_error(
            ConfigErrorKind::MissingKey,
            c.span(),
            cap_path,
            "a cap needs a `rate` or a `limit` (with `window`)".into(),
        )
    })
}

/// A block's rules, checked together: no rule after one that matches every span,
/// distinct names, floors that fit in the cap.
fn rules(
    ctx: &Ctx<'_>,
    raw: &RawBlock,
    path: KeyPath<'_>,
    is_default: bool,
    cap: Option<&LimitSpec>,
    remote_parents: RemoteParents,
) -> Result<Vec<Rule>, ConfigError> {
    // Unnamed rules are named by position, those of [default] apart from a
    // service's so that neither replaces the other when inherited.
    let unnamed = if is_default { "default-rule" } else { "rule" };
    let rules = (raw.rule.iter().enumerate())
        .map(|(i, r)| rule(ctx, r, path.item("rule", i), i, unnamed, remote_parents))
        .collect::<Result<Vec<Rule>, ConfigError>>()?;
    if let Some(all) = reach::hiding_catch_all(&rules) {
        return Err(ctx.new_error(
            ConfigErrorKind::UnreachableRule,
            raw.rule[all].span(),
            format!("{path}.rule[{all}]"),
            format!(
                "rule {:?} has no condition (no `span_name`, `kind`, `parent` or `attributes`) and matches every span, so rule {:?} after it never decides; give it a condition, move it last, or make it the block's own policy",
                rules[all].name, rules[all + 1].name
            ),
        ));
    }
    if let Err(repeat) = names::distinct(rules.iter().map(|r| r.name.as_str())) {
        let r = &raw.rule[repeat.at];
        let span = r.get_ref().name.as_ref().map_or(r.span(), |n| n.span());
        let key = format!("{}.name", path.item("rule", repeat.at));
        return Err(ctx.err(repeat.problem(Listed::Rule), span, key));
    }
    let floor = |i: usize| {
        let r = &raw.rule[i];
        let span = r.get_ref().floor.as_ref().map_or(r.span(), |f| f.span());
        (span, format!("{}.floor", path.item("rule", i)))
    };
    match floors::floors(&rules, cap) {
        Ok(_) => Ok(rules),
        Err(FloorProblem::NoCap { rule }) => {
            let (span, key) = floor(rule);
            Err(ctx.new_error(
                ConfigErrorKind::MissingKey,
                span,
                key,
                format!("a `floor` reserves permits in the service cap; add `{path}.cap`"),
            ))
        }
        Err(FloorProblem::OverCap {
            rule,
            total,
            permits,
        }) => {
            let (span, key) = floor(rule);
            Err(ctx.new_error(
                ConfigErrorKind::InvalidLimit,
                span,
                key,
                format!("the rules' floors add up to {total}, more than the cap's {permits} permits per window; floors must fit in the cap"),
            ))
        }
    }
}

/// Checks that the fleet-scoped limits of a block get valid, distinct fleet keys.
fn distinct_fleet_keys(
    ctx: &Ctx<'_>,
    raw: &RawBlock,
    path: KeyPath<'_>,
    policy: Option<&Policy>,
    cap: Option<&LimitSpec>,
    rules: &[Rule],
) -> Result<(), ConfigError> {
    if !fleet_keys::any_fleet(policy, cap, rules.iter()) {
        return Ok(());
    }
    // The file default's keys take the service name at run time.
    if let Some(n) = &raw.name {
        fleet_name(ctx, n, &format!("{path}.name"))?;
    }
    for (i, (rule, r)) in rules.iter().zip(&raw.rule).enumerate() {
        if !fleet_keys::in_fleet(rule, cap) {
            continue;
        }
        let name_key = format!("{path}.rule[{i}].name");
        if let Some(n) = &r.get_ref().name {
            fleet_name(ctx, n, &name_key)?;
        }
        let Some(own) = fleet_keys::clash(rule, policy, cap) else {
            continue;
        };
        let other = match own {
            "cap" => fleet_cap_key("<service>"),
            _ => fleet_key("<service>", own),
        };
        let span = r.get_ref().name.as_ref().map_or(r.span(), |n| n.span());
        return Err(ctx.new_error(
            ConfigErrorKind::DuplicateRule,
            span,
            &name_key,
            format!(
                "a fleet-scoped rule named {:?} would share the Redis key {other:?} with the service's own fleet-scoped {own}; rename the rule",
                rule.name
            ),
        ));
    }
    Ok(())
}

/// The span and name of the key that sets a block's own policy, if any.
pub(super) fn policy_key(raw: &RawBlock) -> Option<(Range<usize>, &'static str)> {
    raw.rate
        .as_ref()
        .map(|r| (r.span(), "rate"))
        .or_else(|| raw.limit.as_ref().map(|l| (l.span(), "limit")))
        .or_else(|| raw.probability.as_ref().map(|p| (p.span(), "probability")))
}

/// A service's own policy that no span can reach: `rule` matches every span first.
pub(super) fn unreachable_policy(
    ctx: &Ctx<'_>,
    span: Range<usize>,
    key: &str,
    rule: &str,
    hint: &str,
) -> ConfigError {
    ctx.new_error(
        ConfigErrorKind::UnreachableRule,
        span,
        key,
        format!("the service's own policy never decides: its last rule, {rule:?}, has no condition and matches every span first; remove one of the two, or give the rule a condition{hint}"),
    )
}
