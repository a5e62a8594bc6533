//! The policy keys every block shares (`rate`, `limit`, `window`, `algorithm`, `paced`,
//! `scope`, `fair_by`, `max_keys`, `probability`, `at_least`, `adaptive`), lowered into
//! a policy or a limit.

use crate::config::error::{ConfigError, ConfigErrorKind, Pos};
use crate::config::formats::key_path::KeyPath;
use crate::config::formats::rule_file::ctx::Ctx;
use crate::config::formats::rule_file::keys;
use crate::config::formats::rule_file::raw::{RawAdaptive, RawPolicy};
use crate::config::formats::spanned::Spanned;
use crate::config::model::values;
use crate::config::model::{FairSpec, LimitSpec, Policy, Scope};
use crate::limit::Limit;
use crate::limiter::Algorithm;
use crate::sampler::FairBy;

/// The policy a block sets, if any; `None` when it sets none of the keys.
pub(super) fn policy(
    ctx: &Ctx<'_>,
    raw: &RawPolicy<'_>,
    path: KeyPath<'_>,
) -> Result<Option<Policy>, ConfigError> {
    let key = |k: &'static str| path.key(k);
    if let Some(adaptive) = raw.adaptive {
        return adaptive_policy(ctx, raw, adaptive, path).map(Some);
    }
    let limit = limit(ctx, raw, path)?;
    keys::check(ctx, raw, path, keys::POLICY)?;
    match (limit, raw.probability) {
        (Some(spec), _) => Ok(Some(Policy::Limit(spec))),
        (None, Some(p)) => {
            let p = ctx.check(p, key("probability"), values::probability(*p.get_ref()))?;
            let Some(l) = raw.at_least else {
                return Ok(Some(Policy::Probability(p)));
            };
            let limit = ctx.check(l, key("at_least"), values::rate(*l.get_ref()))?;
            Ok(Some(Policy::AtLeast {
                probability: p,
                lower_bound: LimitSpec {
                    at: ctx.pos(l.span()),
                    ..LimitSpec::local(limit, Algorithm::FixedWindow)
                },
            }))
        }
        (None, None) => Ok(None),
    }
}

/// An `adaptive` policy: alone among the policy keys (its limit is inside it).
fn adaptive_policy(
    ctx: &Ctx<'_>,
    raw: &RawPolicy<'_>,
    adaptive: &Spanned<Box<RawAdaptive>>,
    path: KeyPath<'_>,
) -> Result<Policy, ConfigError> {
    let key = |k: &'static str| path.key(k);
    let mut others = raw.spans().0.into_iter().filter(|(k, _)| *k != "adaptive");
    if let Some((name, Some(span))) = others.find(|(_, s)| s.is_some()) {
        return Err(ctx.new_error(
            ConfigErrorKind::ConflictingKeys,
            span,
            key(name),
            format!("`adaptive` is a whole policy (a consistent probability under its own cap of a fixed window, local to each process); it takes no `{name}` beside it: write `adaptive = <traces per second>` or `adaptive = {{ limit = .., window = .. }}`"),
        ));
    }
    let adaptive_key = key("adaptive");
    let limit = match &**adaptive.get_ref() {
        RawAdaptive::Rate(r) => ctx.check(adaptive, adaptive_key, values::rate(*r))?,
        RawAdaptive::Table(t) => {
            // The limit keys of a block, read as a block's, under `<path>.adaptive`.
            let (no_text, no_probability, no_flag) = (None, None, None);
            let (no_keys, no_count) = (None, None);
            let inner = RawPolicy {
                rate: &t.rate,
                limit: &t.limit,
                window: &t.window,
                algorithm: &no_text,
                paced: &no_flag,
                probability: no_probability,
                at_least: None,
                adaptive: None,
                scope: &no_text,
                fair_by: &no_keys,
                max_keys: &no_count,
            };
            match limit(ctx, &inner, adaptive_key)? {
                Some(spec) => spec.limit,
                None => {
                    return Err(ctx.new_error(
                        ConfigErrorKind::MissingKey,
                        adaptive.span(),
                        adaptive_key,
                        "`adaptive` needs its cap: a `rate`, or a `limit` (with `window`)".into(),
                    ))
                }
            }
        }
    };
    Ok(Policy::Adaptive(limit))
}

/// The limit a block sets (`rate`, or `limit` with an optional `window`).
pub(super) fn limit(
    ctx: &Ctx<'_>,
    raw: &RawPolicy<'_>,
    path: KeyPath<'_>,
) -> Result<Option<LimitSpec>, ConfigError> {
    let key = |k: &'static str| path.key(k);
    let Some(limit) = limit_value(ctx, raw, path)? else {
        return Ok(None);
    };
    let algorithm = match raw.algorithm {
        Some(a) => ctx.check(a, key("algorithm"), values::algorithm(a.get_ref()))?,
        None => Algorithm::default(),
    };
    let scope = match raw.scope {
        Some(sc) => ctx.check(sc, key("scope"), values::scope(sc.get_ref()))?,
        None => Scope::Local,
    };
    if scope == Scope::Fleet {
        if let Some(a) = raw
            .algorithm
            .as_ref()
            .filter(|_| algorithm != Algorithm::FixedWindow)
        {
            return Err(ctx.new_error(
                ConfigErrorKind::ConflictingKeys,
                a.span(),
                key("algorithm"),
                format!("a fleet-scoped limit is a fixed window of Redis time; algorithm {algorithm} is local only: remove it or set \"fixed\""),
            ));
        }
        if let Some(pc) = raw.paced.as_ref().filter(|pc| *pc.get_ref()) {
            return Err(ctx.new_error(
                ConfigErrorKind::ConflictingKeys,
                pc.span(),
                key("paced"),
                "a fleet-scoped limit is a fixed window of Redis time and is not paced: remove `paced` or set it to false".into(),
            ));
        }
        if let Some(sc) = raw.scope {
            ctx.first_fleet
                .borrow_mut()
                .get_or_insert_with(|| (sc.span(), key("scope").to_string()));
        }
    }
    let at = raw
        .window
        .as_ref()
        .map(Spanned::span)
        .or(raw.rate.as_ref().map(Spanned::span))
        .or(raw.limit.as_ref().map(Spanned::span))
        .map_or_else(Pos::default, |span| ctx.pos(span));
    let paced = raw.paced.as_ref().is_none_or(|pc| *pc.get_ref());
    Ok(Some(LimitSpec {
        limit: if paced { limit } else { limit.unpaced() },
        algorithm,
        scope,
        at,
        fair: fair(ctx, raw, path, scope)?,
    }))
}

/// A limit's `fair_by` (with its `max_keys`), if set: attribute keys, and `span_name`
/// for the span name. Not on a fleet-scoped limit (its shares would be per process).
fn fair(
    ctx: &Ctx<'_>,
    raw: &RawPolicy<'_>,
    path: KeyPath<'_>,
    scope: Scope,
) -> Result<Option<FairSpec>, ConfigError> {
    let key = |k: &'static str| path.key(k);
    let Some(list) = raw.fair_by else {
        return Ok(None);
    };
    if scope == Scope::Fleet {
        return Err(ctx.new_error(
            ConfigErrorKind::ConflictingKeys,
            list.span(),
            key("fair_by"),
            "`fair_by` is not supported with fleet scope: its shares are counted in each process; remove `fair_by`, or `scope = \"fleet\"`".into(),
        ));
    }
    if list.get_ref().is_empty() {
        return Err(ctx.new_error(
            ConfigErrorKind::EmptyName,
            list.span(),
            key("fair_by"),
            format!("`fair_by` names nothing; list attribute keys (e.g. [\"http.route\"]) and/or \"{}\" for the span name", FairSpec::SPAN_NAME),
        ));
    }
    let mut by = FairBy::default();
    for (i, name) in list.get_ref().iter().enumerate() {
        ctx.check(
            name,
            path.item("fair_by", i),
            values::name("a `fair_by` key", name.get_ref()),
        )?;
        by = match name.get_ref().as_str() {
            FairSpec::SPAN_NAME => by.and_span_name(),
            attribute => by.and_attribute(attribute.to_owned()),
        };
    }
    let max_keys = match raw.max_keys {
        Some(m) => ctx.check(m, key("max_keys"), values::max_keys(*m.get_ref()))?,
        None => FairSpec::DEFAULT_MAX_KEYS,
    };
    match FairSpec::new(by, max_keys) {
        Some(spec) => Ok(Some(spec)),
        None => Err(ctx.new_error(
            ConfigErrorKind::MemoryBudget,
            list.span(),
            key("fair_by"),
            format!(
                "this process has kept as many distinct `fair_by` lists as it may ({} lists, {} bytes of keys): reuse a list an earlier file named, or restart the process",
                FairSpec::INTERN_MAX_LISTS,
                FairSpec::INTERN_MAX_BYTES,
            ),
        )),
    }
}

/// The limit of a block's `rate`, or `limit` with an optional `window`; `None` when
/// it sets neither (then no key that needs one may be there either).
fn limit_value(
    ctx: &Ctx<'_>,
    raw: &RawPolicy<'_>,
    path: KeyPath<'_>,
) -> Result<Option<Limit>, ConfigError> {
    let key = |k: &'static str| path.key(k);
    keys::check(ctx, raw, path, keys::LIMIT)?;
    match (raw.rate, raw.limit) {
        (Some(r), _) => ctx
            .check(r, key("rate"), values::rate(*r.get_ref()))
            .map(Some),
        (None, Some(l)) => {
            let window = match raw.window {
                Some(w) => ctx.check(w, key("window"), values::limit_window(w.get_ref()))?,
                None => std::time::Duration::from_secs(1),
            };
            ctx.check(l, key("limit"), values::per_window(*l.get_ref(), window))
                .map(Some)
        }
        (None, None) => Ok(None),
    }
}

/// Checks that `name` (a service or rule name) can be part of a fleet key.
pub(super) fn fleet_name(
    ctx: &Ctx<'_>,
    name: &Spanned<String>,
    key: &str,
) -> Result<(), ConfigError> {
    ctx.check(name, key, values::fleet_key_part(name.get_ref()))
}
