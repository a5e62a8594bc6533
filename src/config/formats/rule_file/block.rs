//! A block (`[default]` or a `[[service]]`) and its rules, lowered and checked.

use std::collections::HashSet;
use std::ops::Range;

use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::formats::rule_file::ctx::{Ctx, Path};
use crate::config::formats::rule_file::file::policy_key;
use crate::config::formats::rule_file::raw::{RawBlock, RawCap, RawRule};
use crate::config::formats::spanned::Spanned;
use crate::config::model::values::{self, Invalid};
use crate::config::model::{
    fleet_cap_key, fleet_key, LimitSpec, Policy, Rule, Scope, ServiceConfig,
};
use crate::sampler::RemoteParents;

impl Ctx<'_> {
    pub(super) fn block(
        &self,
        raw: &Spanned<RawBlock>,
        path: Path<'_>,
        is_default: bool,
    ) -> Result<ServiceConfig, ConfigError> {
        let span = raw.span();
        let raw = raw.get_ref();
        let key = |k: &'static str| Path::Key(&path, k);
        let name = self.block_name(raw, span.clone(), path, is_default)?;
        let mut policy = self.policy(&raw.policy_keys(), path)?;
        if is_default {
            // A [default] that sets no policy keeps the built-in one.
            policy = policy.or(ServiceConfig::builtin_default().policy);
        }
        let inherit_default_rules = match (&raw.inherit_default_rules, is_default) {
            (Some(i), true) => return Err(self.new_error(
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
            Some(c) => Some(self.cap(c, path)?),
            None => None,
        };
        let remote_parents = match &raw.remote_parents {
            Some(r) => self.check(r, key("remote_parents"), |r| values::remote_parents(r))?,
            None => RemoteParents::default(),
        };
        let (rules, catch_all) = self.rules(raw, path, is_default, cap.as_ref(), remote_parents)?;
        if let (false, Some(all), Some((span, k))) = (is_default, catch_all, policy_key(raw)) {
            return Err(self.unreachable_policy(span, &key(k).to_string(), &rules[all].name, ""));
        }
        self.fleet_keys(raw, path, policy.as_ref(), cap.as_ref(), &rules)?;
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
        &self,
        raw: &RawBlock,
        span: Range<usize>,
        path: Path<'_>,
        is_default: bool,
    ) -> Result<String, ConfigError> {
        let key = |k: &'static str| Path::Key(&path, k);
        Ok(match (&raw.name, is_default) {
            (Some(n), true) => {
                return Err(self.new_error(
                    ConfigErrorKind::UnknownKey,
                    n.span(),
                    key("name"),
                    "[default] applies to every service not listed and takes no `name`; list a service with [[service]]".into(),
                ))
            }
            (None, true) => String::new(),
            (Some(n), false) => {
                self.check(n, key("name"), |n| values::name("service name", n))?;
                n.get_ref().clone()
            }
            (None, false) => {
                return Err(self.new_error(
                    ConfigErrorKind::MissingKey,
                    span,
                    key("name"),
                    "a [[service]] needs a `name`: the service.name it applies to".into(),
                ))
            }
        })
    }

    /// A block's `cap`: a limit only.
    fn cap(&self, c: &Spanned<Box<RawCap>>, path: Path<'_>) -> Result<LimitSpec, ConfigError> {
        let key = |k: &'static str| Path::Key(&path, k);
        let cap_path = key("cap");
        let cr = c.get_ref();
        if let Some(a) = &cr.adaptive {
            return Err(self.new_error(
                ConfigErrorKind::UnknownKey,
                a.span(),
                format!("{cap_path}.adaptive"),
                "a cap is a limit and takes no `adaptive`; use `rate`, or `limit` with `window`"
                    .into(),
            ));
        }
        if let Some(l) = &cr.at_least {
            return Err(self.new_error(
                ConfigErrorKind::UnknownKey,
                l.span(),
                format!("{cap_path}.at_least"),
                "a cap is a limit and takes no `at_least`; use `rate`, or `limit` with `window`"
                    .into(),
            ));
        }
        if let Some(p) = &cr.probability {
            return Err(self.new_error(
                ConfigErrorKind::UnknownKey,
                p.span(),
                format!("{cap_path}.probability"),
                "a cap is a limit and takes no `probability`; use `rate`, or `limit` with `window`"
                    .into(),
            ));
        }
        let spec = self.limit(&cr.policy_keys(), cap_path)?;
        spec.ok_or_else(|| {
            self.new_error(
                ConfigErrorKind::MissingKey,
                c.span(),
                cap_path,
                "a cap needs a `rate` or a `limit` (with `window`)".into(),
            )
        })
    }

    /// A block's rules, checked together (distinct names, no rule after one that
    /// matches every span, floors that fit in the cap), with the position of the first
    /// rule that matches every span.
    fn rules(
        &self,
        raw: &RawBlock,
        path: Path<'_>,
        is_default: bool,
        cap: Option<&LimitSpec>,
        remote_parents: RemoteParents,
    ) -> Result<(Vec<Rule>, Option<usize>), ConfigError> {
        let mut rules: Vec<Rule> = Vec::with_capacity(raw.rule.len());
        let mut names: HashSet<String> = HashSet::with_capacity(raw.rule.len());
        let mut floors = 0u64;
        // Unnamed rules are named by position, those of [default] apart from a
        // service's so that neither replaces the other when inherited.
        let unnamed = if is_default { "default-rule" } else { "rule" };
        // The first rule with no condition: no rule may follow it.
        let mut catch_all: Option<usize> = None;
        for (i, r) in raw.rule.iter().enumerate() {
            let rule_path = Path::Rule(&path, i);
            let rule = self.rule(r, rule_path, i, unnamed, remote_parents)?;
            if let Some(all) = catch_all {
                return Err(self.new_error(
                    ConfigErrorKind::UnreachableRule,
                    raw.rule[all].span(),
                    format!("{path}.rule[{all}]"),
                    format!(
                        "rule {:?} has no condition (no `span_name`, `kind`, `parent` or `attributes`) and matches every span, so rule {:?} after it never decides; give it a condition, move it last, or make it the block's own policy",
                        rules[all].name, rule.name
                    ),
                ));
            }
            if !names.insert(rule.name.clone()) {
                let span = r.get_ref().name.as_ref().map_or(r.span(), |n| n.span());
                return Err(self.new_error(
                    ConfigErrorKind::DuplicateRule,
                    span,
                    format!("{rule_path}.name"),
                    format!(
                        "rule name {:?} is used twice in this service; rule names must be unique",
                        rule.name
                    ),
                ));
            }
            if rule.floor > 0 {
                let floor = r.get_ref().floor.as_ref().map_or(r.span(), |f| f.span());
                let Some(cap) = cap else {
                    return Err(self.new_error(
                        ConfigErrorKind::MissingKey,
                        floor,
                        format!("{rule_path}.floor"),
                        format!("a `floor` reserves permits in the service cap; add `{path}.cap`"),
                    ));
                };
                floors += u64::from(rule.floor);
                if floors > u64::from(cap.limit.permits()) {
                    return Err(self.new_error(
                        ConfigErrorKind::InvalidLimit,
                        floor,
                        format!("{rule_path}.floor"),
                        format!(
                            "the rules' floors add up to {floors}, more than the cap's {} permits per window; floors must fit in the cap",
                            cap.limit.permits()
                        ),
                    ));
                }
            }
            if rule.matches_everything() {
                catch_all = Some(i);
            }
            rules.push(rule);
        }
        Ok((rules, catch_all))
    }

    /// Checks that the fleet-scoped limits of a block get valid, distinct fleet keys.
    fn fleet_keys(
        &self,
        raw: &RawBlock,
        path: Path<'_>,
        policy: Option<&Policy>,
        cap: Option<&LimitSpec>,
        rules: &[Rule],
    ) -> Result<(), ConfigError> {
        let fleet_policy = |p: &Policy| matches!(p, Policy::Limit(s) if s.scope == Scope::Fleet);
        let cap_fleet = cap.is_some_and(|c| c.scope == Scope::Fleet);
        let any = cap_fleet
            || policy.is_some_and(fleet_policy)
            || rules.iter().any(|r| fleet_policy(&r.policy));
        if !any {
            return Ok(());
        }
        // The file default's keys take the service name at run time.
        if let Some(n) = &raw.name {
            self.fleet_name(n, &format!("{path}.name"))?;
        }
        for (i, (rule, r)) in rules.iter().zip(&raw.rule).enumerate() {
            let fleet = fleet_policy(&rule.policy);
            if !(fleet || cap_fleet && rule.floor > 0) {
                continue;
            }
            let name_key = format!("{path}.rule[{i}].name");
            let span = r.get_ref().name.as_ref().map_or(r.span(), |n| n.span());
            if let Some(n) = &r.get_ref().name {
                self.fleet_name(n, &name_key)?;
            }
            let other = match rule.name.as_str() {
                "cap" if cap_fleet => Some(fleet_cap_key("<service>")),
                "default" if policy.is_some_and(fleet_policy) => {
                    Some(fleet_key("<service>", "default"))
                }
                _ => None,
            };
            if let (true, Some(other)) = (fleet, other) {
                return Err(self.new_error(
                    ConfigErrorKind::DuplicateRule,
                    span,
                    &name_key,
                    format!(
                        "a fleet-scoped rule named {:?} would share the Redis key {other:?} with the service's own fleet-scoped {}; rename the rule",
                        rule.name, rule.name
                    ),
                ));
            }
        }
        Ok(())
    }

    fn rule(
        &self,
        raw: &Spanned<RawRule>,
        path: Path<'_>,
        index: usize,
        unnamed: &str,
        remote_parents: RemoteParents,
    ) -> Result<Rule, ConfigError> {
        let span = raw.span();
        let raw = raw.get_ref();
        let key = |k: &'static str| Path::Key(&path, k);
        let name = match &raw.name {
            Some(n) => {
                self.check(n, key("name"), |n| values::name("rule name", n))?;
                n.get_ref().clone()
            }
            None => format!("{unnamed}-{}", index + 1),
        };
        let span_name = match &raw.span_name {
            Some(g) => Some(self.check(g, key("span_name"), |g| values::glob(g))?),
            None => None,
        };
        let kind = match &raw.kind {
            Some(k) => Some(self.check(k, key("kind"), |k| values::span_kind(k))?),
            None => None,
        };
        let parent = match &raw.parent {
            Some(p) => {
                let origin = self.check(p, key("parent"), |p| values::parent(p))?;
                if origin == crate::sampler::Origin::Remote && remote_parents != RemoteParents::Cap
                {
                    return Err(self.new_error(
                        ConfigErrorKind::ConflictingKeys,
                        p.span(),
                        key("parent"),
                        "parent = \"remote\" never matches while remote parents are followed; set remote_parents = \"cap\" on the service".into(),
                    ));
                }
                Some(origin)
            }
            None => None,
        };
        let mut attributes = Vec::with_capacity(raw.attributes.len());
        for (k, v) in &raw.attributes {
            let attr_key = Path::Attribute(&path, k.get_ref());
            self.check(k, attr_key, |k| values::name("attribute key", k))?;
            attributes.push((
                k.get_ref().clone(),
                self.check(v, attr_key, |v| values::glob(v))?,
            ));
        }
        let policy = self.policy(&raw.policy_keys(), path)?.ok_or_else(|| {
            self.new_error(
                ConfigErrorKind::MissingKey,
                span.clone(),
                path,
                "a rule needs a `rate`, a `limit` (with `window`), a `probability` (with an optional `at_least`) or `adaptive`"
                    .into(),
            )
        })?;
        let floor = self.floor(raw, path)?;
        Ok(Rule {
            name,
            span_name,
            kind,
            parent,
            attributes,
            policy,
            floor,
            inherited: false,
        })
    }

    /// A rule's `floor`: permits reserved for it in the service cap.
    fn floor(&self, raw: &RawRule, path: Path<'_>) -> Result<u32, ConfigError> {
        let key = |k: &'static str| Path::Key(&path, k);
        Ok(match &raw.floor {
            Some(f) => self.check(f, key("floor"), |f| {
                u32::try_from(*f).map_err(|_| {
                    Invalid::new(
                        ConfigErrorKind::InvalidLimit,
                        format!("floor {f} is not a permit count; use a whole number from 0 up to the cap's permits"),
                    )
                })
            })?,
            None => 0,
        })
    }
}
