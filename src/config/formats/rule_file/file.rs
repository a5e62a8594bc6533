//! A whole rule file: its blocks, what listed services inherit from `[default]`, the
//! `[fleet]` table and the memory budget.

use std::collections::HashMap;
use std::ops::Range;

use crate::config::check::budget::{self, Culprit, OverBudget};
use crate::config::check::floors::{self, FloorProblem};
use crate::config::check::names::{self, Listed};
use crate::config::check::{fleet_keys, reach};
use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::formats::key_path::KeyPath;
use crate::config::formats::rule_file::block::{block, policy_key, unreachable_policy};
use crate::config::formats::rule_file::ctx::{Ctx, OptOut};
use crate::config::formats::rule_file::policy::fleet_name;
use crate::config::formats::rule_file::raw::{RawBlock, RawBytes, RawFile, RawFleet, RawUrls};
use crate::config::formats::spanned::Spanned;
use crate::config::model::values;
use crate::config::model::{FleetSettings, Rule, SamplingConfig, ServiceConfig};

/// The configuration `raw` describes, checked, with `redis` (from the environment),
/// when given, replacing the file's Redis URLs.
pub(crate) fn config(
    ctx: &Ctx<'_>,
    raw: &RawFile,
    redis: Option<&[String]>,
) -> Result<SamplingConfig, ConfigError> {
    let file = ctx.file;
    let default = match &raw.default {
        Some(d) => block(ctx, d, KeyPath::Key(&KeyPath::Root, "default"), true)?,
        None => ServiceConfig::builtin_default(),
    };
    let (services, index) = services(ctx, raw)?;
    let mut fleet = match &raw.fleet {
        Some(f) => fleet_table(ctx, f.get_ref())?,
        None => FleetSettings::default(),
    };
    if let Some(urls) = redis {
        fleet.urls = urls.to_vec();
    }
    if let Some((span, key)) = ctx.first_fleet.take() {
        if fleet.urls.is_empty() {
            return Err(ctx.new_error(
                ConfigErrorKind::MissingKey,
                span,
                &key,
                format!("scope = \"fleet\" shares the limit through Redis, and no Redis URL is given; add `[fleet]` with `redis = \"redis://host:6379\"`, or set {}", crate::config::vars::OTEL_RATE_SAMPLER_REDIS),
            ));
        }
    }
    let mut config = SamplingConfig::indexed(file, default, services, index, fleet);
    if let Some(limits) = &raw.limits {
        if let Some(b) = &limits.get_ref().memory_budget {
            config.memory_budget = ctx.check(
                b,
                "limits.memory_budget",
                match b.get_ref() {
                    RawBytes::Bytes(n) => budget::budget_bytes(*n),
                    RawBytes::Text(t) => budget::parse_budget(t),
                },
            )?;
        }
    }
    inherited(ctx, &config, raw)?;
    if let Some(over) = budget::over_budget(&config) {
        return Err(over_budget(ctx, &config, &over, raw));
    }
    Ok(config)
}

/// The `[[service]]` blocks, with their index by name (each name listed once).
fn services(
    ctx: &Ctx<'_>,
    raw: &RawFile,
) -> Result<(Vec<ServiceConfig>, HashMap<String, usize>), ConfigError> {
    let services = (raw.service.iter().enumerate())
        .map(|(i, s)| block(ctx, s, KeyPath::Item(&KeyPath::Root, "service", i), false))
        .collect::<Result<Vec<ServiceConfig>, ConfigError>>()?;
    let index = names::index(services.iter().map(|s| s.name.as_str())).map_err(|repeat| {
        let s = &raw.service[repeat.at];
        let span = s.get_ref().name.as_ref().map_or(s.span(), |n| n.span());
        let key = format!(
            "{}.name",
            KeyPath::Item(&KeyPath::Root, "service", repeat.at)
        );
        ctx.err(repeat.problem(Listed::Service), span, key)
    })?;
    Ok((services, index))
}

/// The error for a service over the memory budget, at its largest limiter.
fn over_budget(
    ctx: &Ctx<'_>,
    config: &SamplingConfig,
    over: &OverBudget,
    raw: &RawFile,
) -> ConfigError {
    let (span, key) = match (over.service, over.largest) {
        (_, Culprit::Inherited(j)) | (None, Culprit::Rule(j)) => {
            (rule_span(&raw.default, j), format!("default.rule[{j}]"))
        }
        (Some(i), Culprit::Rule(j)) => (
            raw.service[i].get_ref().rule[j].span(),
            format!("service[{i}].rule[{j}]"),
        ),
        (Some(i), Culprit::Policy) => (raw.service[i].span(), format!("service[{i}]")),
        (Some(i), Culprit::Cap) => (
            raw.service[i]
                .get_ref()
                .cap
                .as_ref()
                .map_or(raw.service[i].span(), |c| c.span()),
            format!("service[{i}].cap"),
        ),
        (None, Culprit::Policy) => (block_span(&raw.default), "default".to_owned()),
        (None, Culprit::Cap) => (block_span(&raw.default), "default.cap".to_owned()),
    };
    ctx.err(over.invalid(config), span, &key)
}

/// The span of `[default]`'s rule `j` (the file's start if there is none).
fn rule_span(default: &Option<Spanned<RawBlock>>, j: usize) -> Range<usize> {
    default
        .as_ref()
        .and_then(|d| d.get_ref().rule.get(j))
        .map_or(0..0, |r| r.span())
}

/// The span of `[default]` (the file's start if there is none).
fn block_span(default: &Option<Spanned<RawBlock>>) -> Range<usize> {
    default.as_ref().map_or(0..0, |d| d.span())
}

/// Checks what each listed service inherits from `[default]`: no inherited rule
/// after a rule of its own that matches every span, and inherited floors that fit
/// in its cap.
fn inherited(ctx: &Ctx<'_>, config: &SamplingConfig, raw: &RawFile) -> Result<(), ConfigError> {
    if config.default.rules.is_empty() {
        return Ok(());
    }
    for (i, own) in config.services.iter().enumerate() {
        let inherited = || config.inherited_rules(own).map(|(_, r)| r);
        let Some(first) = inherited().next() else {
            continue; // it opts out, or replaces every default rule by one of its own
        };
        let opt_out = OptOut(i);
        if let Some(last) = reach::last_catch_all(&own.rules) {
            let j = own.rules.len() - 1;
            return Err(ctx.new_error(
                ConfigErrorKind::UnreachableRule,
                raw.service[i].get_ref().rule[j].span(),
                format!("service[{i}].rule[{j}]"),
                format!(
                    "rule {:?} has no condition and matches every span, so the rules service {:?} inherits from [default] (first {:?}) never decide; give it a condition, make it the service's own policy, or set {opt_out}",
                    last.name, own.name, first.name
                ),
            ));
        }
        let block = raw.service[i].get_ref();
        if let (Some(last), Some((span, k))) =
            (reach::last_catch_all(inherited()), policy_key(block))
        {
            return Err(unreachable_policy(
                ctx,
                span,
                &format!("service[{i}].{k}"),
                &last.name,
                &format!(", or set {opt_out} (the rule is inherited from [default])"),
            ));
        }
        inherited_fleet_keys(ctx, i, own, inherited, &raw.service[i], opt_out)?;
        inherited_floors(ctx, i, own, inherited, &raw.service[i], opt_out)?;
    }
    Ok(())
}

/// Checks that the floors service `i` inherits fit, with its own, in its cap.
fn inherited_floors<'r, I: Iterator<Item = &'r Rule>>(
    ctx: &Ctx<'_>,
    i: usize,
    own: &'r ServiceConfig,
    inherited: impl Fn() -> I,
    block: &Spanned<RawBlock>,
    opt_out: OptOut,
) -> Result<(), ConfigError> {
    let all = || own.rules.iter().chain(inherited());
    match floors::floors(all(), own.cap.as_ref()) {
        Ok(_) => Ok(()),
        Err(FloorProblem::NoCap { rule }) => {
            let floored = all().nth(rule).map_or("", |r| r.name.as_str());
            Err(ctx.new_error(
                ConfigErrorKind::MissingKey,
                block.span(),
                format!("service[{i}].cap"),
                format!(
                    "service {:?} inherits rule {floored:?} from [default], whose `floor` reserves permits in the service cap, and the service has no cap; add `service[{i}].cap`, or set {opt_out}",
                    own.name
                ),
            ))
        }
        Err(FloorProblem::OverCap { total, permits, .. }) => {
            let span = block
                .get_ref()
                .cap
                .as_ref()
                .map_or(block.span(), |c| c.span());
            Err(ctx.new_error(
                ConfigErrorKind::InvalidLimit,
                span,
                format!("service[{i}].cap"),
                format!(
                    "the floors of service {:?}'s rules, with those it inherits from [default], add up to {total}, more than the cap's {permits} permits per window; raise the cap, lower the floors, or set {opt_out}",
                    own.name
                ),
            ))
        }
    }
}

/// Checks that the fleet-scoped rules service `i` inherits get valid Redis keys of
/// its name, distinct from its own fleet-scoped default and cap.
fn inherited_fleet_keys<'r, I: Iterator<Item = &'r Rule>>(
    ctx: &Ctx<'_>,
    i: usize,
    own: &ServiceConfig,
    inherited: impl Fn() -> I,
    raw: &Spanned<RawBlock>,
    opt_out: OptOut,
) -> Result<(), ConfigError> {
    let (policy, cap) = (own.policy.as_ref(), own.cap.as_ref());
    if !inherited().any(|r| fleet_keys::in_fleet(r, cap)) {
        return Ok(());
    }
    if let Some(n) = &raw.get_ref().name {
        fleet_name(ctx, n, &format!("service[{i}].name"))?;
    }
    let clash = inherited().find(|r| fleet_keys::clash(r, policy, cap).is_some());
    if let Some(rule) = clash {
        return Err(ctx.new_error(
            ConfigErrorKind::DuplicateRule,
            raw.span(),
            format!("service[{i}]"),
            format!(
                "service {:?} inherits the fleet-scoped rule {:?} from [default], whose Redis key would be that of the service's own fleet-scoped {}; rename the rule, or set {opt_out}",
                own.name, rule.name, rule.name
            ),
        ));
    }
    Ok(())
}

/// The `[fleet]` table.
fn fleet_table(ctx: &Ctx<'_>, raw: &RawFleet) -> Result<FleetSettings, ConfigError> {
    let urls = match &raw.redis {
        Some(r) => {
            let urls = match r.get_ref() {
                RawUrls::One(u) => vec![u.clone()],
                RawUrls::Many(us) => us.clone(),
            };
            ctx.check(r, "fleet.redis", values::redis_urls(&urls))?;
            urls
        }
        None => Vec::new(),
    };
    let prefix = match &raw.prefix {
        Some(p) => {
            ctx.check(p, "fleet.prefix", values::fleet_key_part(p.get_ref()))?;
            Some(p.get_ref().clone())
        }
        None => None,
    };
    let sync_interval = match &raw.sync_interval {
        Some(i) => Some(ctx.check(i, "fleet.sync_interval", values::sync_interval(i.get_ref()))?),
        None => None,
    };
    let path = |p: &Spanned<String>| std::path::PathBuf::from(p.get_ref());
    let tls_client = match (&raw.tls_client_cert, &raw.tls_client_key) {
        (Some(cert), Some(key)) => Some((path(cert), path(key))),
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => {
            return Err(ctx.new_error(
                ConfigErrorKind::MissingKey,
                one.span(),
                "fleet.tls_client_cert",
                "a client certificate needs both tls_client_cert and tls_client_key (PEM files)"
                    .into(),
            ));
        }
    };
    Ok(FleetSettings {
        urls,
        cluster: raw.cluster.as_ref().is_some_and(|c| *c.get_ref()),
        prefix,
        sync_interval,
        tls_ca_file: raw.tls_ca_file.as_ref().map(path),
        tls_client,
    })
}
