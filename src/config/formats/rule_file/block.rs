//! A block (`[default]` or a `[[service]]`) and its rules, lowered and checked.

use std::ops::Range;

use crate::config::check::floors::{self, FloorProblem};
use crate::config::check::names::{self, Listed};
use crate::config::check::{fleet_keys, reach};
use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::formats::rule_file::ctx::{Ctx, Path};
use crate::config::formats::rule_file::file::policy_key;
use crate::config::formats::rule_file::raw::{RawBlock, RawCap, RawRule};
use crate::config::formats::spanned::Spanned;
use crate::config::model::values::{self, Invalid};
use crate::config::model::{fleet_cap_key, fleet_key, LimitSpec, Policy, Rule, ServiceConfig};
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
        let rules = self.rules(raw, path, is_default, cap.as_ref(), remote_parents)?;
        let last = reach::last_catch_all(&rules);
        if let (false, Some(last), Some((span, k))) = (is_default, last, policy_key(raw)) {
            return Err(self.unreachable_policy(span, &key(k).to_string(), &last.name, ""));
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

    /// A block's rules, checked together: no rule after one that matches every span,
    /// distinct names, floors that fit in the cap.
    fn rules(
        &self,
        raw: &RawBlock,
        path: Path<'_>,
        is_default: bool,
        cap: Option<&LimitSpec>,
        remote_parents: RemoteParents,
    ) -> Result<Vec<Rule>, ConfigError> {
        // Unnamed rules are named by position, those of [default] apart from a
        // service's so that neither replaces the other when inherited.
        let unnamed = if is_default { "default-rule" } else { "rule" };
        let rules = (raw.rule.iter().enumerate())
            .map(|(i, r)| self.rule(r, Path::Rule(&path, i), i, unnamed, remote_parents))
            .collect::<Result<Vec<Rule>, ConfigError>>()?;
        if let Some(all) = reach::hiding_catch_all(&rules) {
            return Err(self.new_error(
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
            let key = format!("{}.name", Path::Rule(&path, repeat.at));
            return Err(self.err(repeat.problem(Listed::Rule), span, key));
        }
        let floor = |i: usize| {
            let r = &raw.rule[i];
            let span = r.get_ref().floor.as_ref().map_or(r.span(), |f| f.span());
            (span, format!("{}.floor", Path::Rule(&path, i)))
        };
        match floors::floors(&rules, cap) {
            Ok(_) => Ok(rules),
            Err(FloorProblem::NoCap { rule }) => {
                let (span, key) = floor(rule);
                Err(self.new_error(
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
                Err(self.new_error(
                    ConfigErrorKind::InvalidLimit,
                    span,
                    key,
                    format!("the rules' floors add up to {total}, more than the cap's {permits} permits per window; floors must fit in the cap"),
                ))
            }
        }
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
        if !fleet_keys::any_fleet(policy, cap, rules.iter()) {
            return Ok(());
        }
        // The file default's keys take the service name at run time.
        if let Some(n) = &raw.name {
            self.fleet_name(n, &format!("{path}.name"))?;
        }
        for (i, (rule, r)) in rules.iter().zip(&raw.rule).enumerate() {
            if !fleet_keys::in_fleet(rule, cap) {
                continue;
            }
            let name_key = format!("{path}.rule[{i}].name");
            if let Some(n) = &r.get_ref().name {
                self.fleet_name(n, &name_key)?;
            }
            let Some(own) = fleet_keys::clash(rule, policy, cap) else {
                continue;
            };
            let other = match own {
                "cap" => fleet_cap_key("<service>"),
                _ => fleet_key("<service>", own),
            };
            let span = r.get_ref().name.as_ref().map_or(r.span(), |n| n.span());
            return Err(self.new_error(
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
            named: raw.name.is_some(),
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
