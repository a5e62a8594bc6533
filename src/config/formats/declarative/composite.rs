//! `composite/development` (declarative configuration schema 1.1): the composable
//! samplers, read with the schema's keys (`always_on`, `always_off`, `probability:
//! {ratio}`, `parent_threshold: {root}`, `rule_based: {rules: [{attribute_values,
//! attribute_patterns, span_kinds, parent, sampler}]}`) and this crate's plugin
//! component [`RATE_LIMITING_KEY`] (`{limit, window, paced, sampler}`), built (feature
//! `composable`) into a `CompositeSampler`.

#[cfg(feature = "composable")]
use crate::clock::Clock;
use crate::config::error::ConfigError;
use crate::config::formats::rule_file::Ctx;
use crate::config::formats::spanned::Spanned;

use super::raw::RawComposable;
#[cfg(feature = "composable")]
use super::raw::{RawRateLimiting, RawRatio, RawRule, RawRuleBased};

/// The plugin component name of `ComposableRateLimiting`
/// under `composite/development` (ours; the schema has no rate limiter).
#[cfg_attr(not(feature = "composable"), allow(dead_code))]
pub(crate) const RATE_LIMITING_KEY: &str = "rate_limiting/otel_rate_sampler";

/// The keys a composable sampler may have, for error messages.
pub(crate) const COMPOSABLE_KEYS: &str =
    "always_on, always_off, probability, parent_threshold, rule_based or rate_limiting/otel_rate_sampler";

/// A built composite sampler and its description (`Display` of the sampler tree).
#[cfg(feature = "composable")]
#[derive(Clone, Debug)]
pub(crate) struct Composite {
    pub(crate) sampler: crate::composable::CompositeSampler<Built>,
    pub(crate) description: String,
    /// The limits of its rate limiters, in document order.
    pub(crate) limits: Vec<crate::limit::Limit>,
}

/// What building a composite's rate limiters takes and leaves: the clock they read,
/// and their limits as they are built.
#[cfg(feature = "composable")]
struct Limiters<'a, C> {
    clock: &'a C,
    limits: std::cell::RefCell<Vec<crate::limit::Limit>>,
}

/// A built composable sampler, shared.
#[cfg(feature = "composable")]
pub(crate) type Built = std::sync::Arc<dyn crate::composable::ComposableSampler>;

/// Builds `raw` (at `path`) into a [`Composite`], its rate limiters timed by `clock`.
#[cfg(feature = "composable")]
pub(crate) fn build<C: Clock + Clone>(
    ctx: &Ctx<'_>,
    raw: &Spanned<RawComposable>,
    path: &str,
    clock: &C,
) -> Result<Composite, ConfigError> {
    let limiters = Limiters {
        clock,
        limits: Default::default(),
    };
    let (sampler, description) = composable(ctx, raw, path, &limiters)?;
    Ok(Composite {
        sampler: crate::composable::CompositeSampler::new(sampler),
        description: format!("composite/development({description})"),
        limits: limiters.limits.into_inner(),
    })
}

/// Without feature `composable`: the typed error naming the feature.
#[cfg(not(feature = "composable"))]
pub(crate) fn missing_feature(
    ctx: &Ctx<'_>,
    raw: &Spanned<RawComposable>,
    path: &str,
) -> ConfigError {
    ctx.new_error(
        crate::config::error::ConfigErrorKind::MissingFeature,
        raw.span(),
        path,
        "composite samplers need this crate's `composable` feature (with `yaml`); build with `--features yaml,composable`".into(),
    )
}

#[cfg(feature = "composable")]
fn composable<C: Clock + Clone>(
    ctx: &Ctx<'_>,
    raw: &Spanned<RawComposable>,
    path: &str,
    limiters: &Limiters<'_, C>,
) -> Result<(Built, String), ConfigError> {
    use std::sync::Arc;

    use crate::composable::{ComposableAlwaysOff, ComposableAlwaysOn, ComposableParentThreshold};

    Ok(match raw.get_ref() {
        RawComposable::AlwaysOn(_) => (Arc::new(ComposableAlwaysOn), "always_on".into()),
        RawComposable::AlwaysOff(_) => (Arc::new(ComposableAlwaysOff), "always_off".into()),
        RawComposable::Probability(r) => probability(ctx, raw, r.as_ref(), path)?,
        RawComposable::ParentThreshold(p) => {
            let (root, text) = composable(
                ctx,
                &p.root,
                &format!("{path}.parent_threshold.root"),
                limiters,
            )?;
            (
                Arc::new(ComposableParentThreshold::new(root)),
                format!("parent_threshold(root: {text})"),
            )
        }
        RawComposable::RuleBased(r) => rule_based(ctx, r.as_ref(), path, limiters)?,
        RawComposable::RateLimiting(r) => rate_limiting(ctx, raw, r, path, limiters)?,
    })
}

/// `probability: {ratio}` (the schema's default ratio: 1).
#[cfg(feature = "composable")]
fn probability(
    ctx: &Ctx<'_>,
    raw: &Spanned<RawComposable>,
    r: Option<&RawRatio>,
    path: &str,
) -> Result<(Built, String), ConfigError> {
    use crate::composable::ComposableProbability;
    use crate::config::error::ConfigErrorKind;

    let key = format!("{path}.probability.ratio");
    let (ratio, span) = match r.and_then(|r| r.ratio.as_ref()) {
        Some(ratio) => (*ratio.get_ref(), ratio.span()),
        None => (1.0, raw.span()),
    };
    let sampler = ComposableProbability::new(ratio).map_err(|e| {
        ctx.new_error(
            ConfigErrorKind::InvalidProbability,
            span,
            &key,
            e.to_string(),
        )
    })?;
    Ok((
        std::sync::Arc::new(sampler),
        format!("probability({ratio})"),
    ))
}

/// `rule_based: {rules: [...]}`, first match wins.
#[cfg(feature = "composable")]
fn rule_based<C: Clock + Clone>(
    ctx: &Ctx<'_>,
    r: Option<&RawRuleBased>,
    path: &str,
    limiters: &Limiters<'_, C>,
) -> Result<(Built, String), ConfigError> {
    use crate::composable::ComposableRuleBased;

    let mut builder = ComposableRuleBased::builder();
    let mut texts = Vec::new();
    let rules = r.and_then(|r| r.rules.as_deref()).unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("{path}.rule_based.rules[{i}]");
        let predicate = predicate(ctx, rule, &path)?;
        let (sampler, text) = composable(
            ctx,
            &rule.get_ref().sampler,
            &format!("{path}.sampler"),
            limiters,
        )?;
        builder = builder.rule(predicate, sampler);
        texts.push(format!("{} => {text}", conditions(rule.get_ref())));
    }
    Ok((
        std::sync::Arc::new(builder.build()),
        format!("rule_based([{}])", texts.join(", ")),
    ))
}

/// One rule's conditions for people: `span_kinds ["SERVER"], parent ["none"], http.route in
/// ["/a"], url.path ~ ["/api/*"] but not ["/api/health"]`, or `any span`.
#[cfg(feature = "composable")]
fn conditions(raw: &RawRule) -> String {
    let texts =
        |v: &[Spanned<String>]| format!("{:?}", v.iter().map(|s| s.get_ref()).collect::<Vec<_>>());
    let mut parts = Vec::new();
    if let Some(kinds) = &raw.span_kinds {
        parts.push(format!("span_kinds {}", texts(kinds)));
    }
    if let Some(parents) = &raw.parent {
        parts.push(format!("parent {}", texts(parents)));
    }
    if let Some(v) = &raw.attribute_values {
        parts.push(format!("{} in {:?}", v.key, v.values));
    }
    if let Some(p) = &raw.attribute_patterns {
        let included = p.included.as_deref().unwrap_or_default();
        let excluded = p.excluded.as_deref().unwrap_or_default();
        parts.push(match excluded {
            [] => format!("{} ~ {included:?}", p.key),
            _ => format!("{} ~ {included:?} but not {excluded:?}", p.key),
        });
    }
    if parts.is_empty() {
        "any span".into()
    } else {
        parts.join(", ")
    }
}

/// One rule's conditions: span kinds, parents, attribute values and patterns.
#[cfg(feature = "composable")]
fn predicate(
    ctx: &Ctx<'_>,
    rule: &Spanned<RawRule>,
    path: &str,
) -> Result<crate::composable::Predicate, ConfigError> {
    use crate::config::error::ConfigErrorKind;
    use crate::config::model::values;
    use crate::stats::ParentOrigin;

    let raw = rule.get_ref();
    let mut predicate = crate::composable::Predicate::new();
    if let Some(kinds) = &raw.span_kinds {
        let kinds = kinds
            .iter()
            .map(|k| {
                ctx.check(
                    k,
                    format!("{path}.span_kinds"),
                    values::span_kind(k.get_ref()),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        predicate = predicate.span_kinds(kinds);
    }
    if let Some(parents) = &raw.parent {
        let parents = parents
            .iter()
            .map(|p| match p.get_ref().as_str() {
                "none" => Ok(ParentOrigin::Root),
                "remote" => Ok(ParentOrigin::Remote),
                "local" => Ok(ParentOrigin::Local),
                other => Err(ctx.new_error(
                    ConfigErrorKind::UnknownValue,
                    p.span(),
                    format!("{path}.parent"),
                    format!("unknown parent {other:?}; expected \"none\", \"remote\" or \"local\""),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        predicate = predicate.parents(parents);
    }
    if let Some(v) = &raw.attribute_values {
        predicate = predicate.attribute_values(v.key.clone(), &v.values);
    }
    if let Some(p) = &raw.attribute_patterns {
        let none = Vec::new();
        predicate = predicate
            .attribute_patterns(
                p.key.clone(),
                p.included.as_ref().unwrap_or(&none),
                p.excluded.as_ref().unwrap_or(&none),
            )
            .map_err(|e| {
                ctx.new_error(
                    ConfigErrorKind::BadGlob,
                    rule.span(),
                    format!("{path}.attribute_patterns"),
                    e.to_string(),
                )
            })?;
    }
    Ok(predicate)
}

/// Ours: `rate_limiting/otel_rate_sampler: {limit, window, paced, sampler}`, paced
/// (as every limit is) unless `paced: false`.
#[cfg(feature = "composable")]
fn rate_limiting<C: Clock + Clone>(
    ctx: &Ctx<'_>,
    raw: &Spanned<RawComposable>,
    r: &RawRateLimiting,
    path: &str,
    limiters: &Limiters<'_, C>,
) -> Result<(Built, String), ConfigError> {
    use crate::composable::{ComposableAlwaysOn, ComposableRateLimiting};
    use crate::config::error::ConfigErrorKind;
    use crate::config::model::values;

    let path = format!("{path}.{RATE_LIMITING_KEY}");
    let window = match &r.window {
        Some(w) => ctx.check(
            w,
            format!("{path}.window"),
            values::limit_window(w.get_ref()),
        )?,
        None => std::time::Duration::from_secs(1),
    };
    // As a rule file's limit is (`check::resolution`): the limiter would see time move
    // in steps of the clock's resolution and enforce another rate.
    let resolution = limiters.clock.resolution();
    if let Some(w) = r.window.as_ref().filter(|_| window < resolution) {
        return Err(ctx.new_error(
            ConfigErrorKind::WindowBelowClockResolution,
            w.span(),
            format!("{path}.window"),
            format!(
                "window {window:?} is shorter than the resolution of the sampler's clock, {resolution:?}: the limiter would see time move in steps of {resolution:?}; use a window of at least {resolution:?}, or a finer clock"
            ),
        ));
    }
    let Some(limit) = &r.limit else {
        return Err(ctx.new_error(
            ConfigErrorKind::MissingKey,
            raw.span(),
            format!("{path}.limit"),
            "a rate limiter needs `limit`, the most spans kept per window (a whole number from 1)"
                .into(),
        ));
    };
    let limit = ctx.check(
        limit,
        format!("{path}.limit"),
        values::per_window(*limit.get_ref(), window),
    )?;
    let limit = match r.paced.as_ref().map(|p| *p.get_ref()) {
        Some(false) => limit.unpaced(),
        _ => limit,
    };
    // Document order: this limiter's before its delegate's.
    limiters.limits.borrow_mut().push(limit);
    let (delegate, text) = match &r.sampler {
        Some(s) => composable(ctx, s, &format!("{path}.sampler"), limiters)?,
        None => (
            std::sync::Arc::new(ComposableAlwaysOn) as Built,
            "always_on".into(),
        ),
    };
    Ok((
        std::sync::Arc::new(ComposableRateLimiting::with_clock(
            delegate,
            limit,
            limiters.clock.clone(),
        )),
        format!(
            "{RATE_LIMITING_KEY}(limit: {} per {:?}, sampler: {text})",
            limit.permits(),
            limit.window()
        ),
    ))
}
