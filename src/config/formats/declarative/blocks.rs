//! The `rate_limiting` blocks of a declarative configuration file: each rule file read
//! with where it sits, and the memory budget of all of them together (a file builds
//! every block's sampler, so five blocks each under the budget can be five times over),
//! with the rate limiters of its composite samplers.

#[cfg(feature = "composable")]
use super::composite;
#[cfg(feature = "composable")]
use super::raw::RawComposable;
use crate::config::check::budget::{footprint_together, human, over_budget_together};
use crate::config::error::{ConfigError, ConfigErrorKind, Pos};
#[cfg(feature = "composable")]
use crate::config::formats::{rule_file::Ctx, spanned::Spanned};
use crate::config::model::values::Invalid;
use crate::config::model::SamplingConfig;

/// One `rate_limiting` block, read.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub(crate) config: SamplingConfig,
    /// Its key (`tracer_provider.sampler.parent_based.root.rate_limiting`).
    key: String,
    /// Where the block starts.
    at: Pos,
}

impl Block {
    pub(crate) fn new(config: SamplingConfig, key: String, at: Pos) -> Self {
        Self { config, key, at }
    }
}

/// The rate limiters of a file's composite samplers, found before any is built: each
/// one's key and position, and what each takes once built.
pub(crate) struct Composites {
    pub(crate) found: Vec<(String, Pos)>,
    pub(crate) each: usize,
}

/// What one composite rate limiter takes on the heap once built, timed by a `C`:
/// the sampler's own (see `ComposableRateLimiting::HEAP_BYTES`) and the `Arc` the
/// tree shares it through.
#[cfg(feature = "composable")]
pub(crate) const fn rate_limiter_bytes<C: crate::clock::Clock>() -> usize {
    use crate::composable::{arc_bytes, ComposableRateLimiting};

    ComposableRateLimiting::<composite::Built, C>::HEAP_BYTES
        + arc_bytes::<ComposableRateLimiting<composite::Built, C>>()
}

/// Every rate limiter under `raw` (at `path`), its key and position in document order
/// (the order the composite
/// builds them in), into `found`; reads only the raw tree.
#[cfg(feature = "composable")]
pub(crate) fn rate_limiters(
    ctx: &Ctx<'_>,
    raw: &Spanned<RawComposable>,
    path: &str,
    found: &mut Vec<(String, Pos)>,
) {
    match raw.get_ref() {
        RawComposable::ParentThreshold(p) => {
            rate_limiters(
                ctx,
                &p.root,
                &format!("{path}.parent_threshold.root"),
                found,
            );
        }
        RawComposable::RuleBased(r) => {
            let rules = r
                .as_ref()
                .and_then(|r| r.rules.as_deref())
                .unwrap_or_default();
            for (i, rule) in rules.iter().enumerate() {
                let path = format!("{path}.rule_based.rules[{i}].sampler");
                rate_limiters(ctx, &rule.get_ref().sampler, &path, found);
            }
        }
        RawComposable::RateLimiting(r) => {
            let key = format!("{path}.{}", composite::RATE_LIMITING_KEY);
            let delegate = format!("{key}.sampler");
            // Document order: this limiter before its delegate's.
            found.push((key, ctx.pos(raw.span())));
            if let Some(s) = &r.sampler {
                rate_limiters(ctx, s, &delegate, found);
            }
        }
        _ => {}
    }
}

/// Checks that the samplers of `found`, every `rate_limiting` block of a file (`file`),
/// built for `service`, and the rate limiters of its composite samplers fit in the
/// memory budget together, before any is built.
///
/// # Errors
///
/// A [`MemoryBudget`](crate::ConfigErrorKind::MemoryBudget) error at the blocks'
/// largest limiter when the blocks alone are over: its position and full key
/// (`tracer_provider.sampler.parent_based.root.rate_limiting.default.rule[0]`); else at
/// the composite rate limiter that crosses the budget, in document order.
pub(crate) fn check_budget(
    found: &[&Block],
    composites: &Composites,
    file: &str,
    service: &str,
) -> Result<(), ConfigError> {
    let configs: Vec<&SamplingConfig> = found.iter().map(|b| &b.config).collect();
    let Some(over) = over_budget_together(&configs, service) else {
        return check_composites(&configs, composites, file, service);
    };
    let block = found[over.sampler];
    let key = match over.key(&block.config, service) {
        key if key.is_empty() => block.key.clone(),
        key => format!("{}.{key}", block.key),
    };
    let at = match over.largest_spec.at {
        Pos { line: 0, .. } => block.at,
        at => at,
    };
    Err(over.invalid(&block.config, service).at(file, at, &key))
}

/// The composite rate limiters of `composites` on top of the samplers of `configs`
/// (within the budget alone), built for `service`: refused at the first that crosses
/// the budget.
fn check_composites(
    configs: &[&SamplingConfig],
    composites: &Composites,
    file: &str,
    service: &str,
) -> Result<(), ConfigError> {
    let (blocks, budget) = footprint_together(configs, service);
    let fit = budget.saturating_sub(blocks) / composites.each.max(1);
    let Some((key, at)) = composites.found.get(fit) else {
        return Ok(());
    };
    let n = composites.found.len();
    let total = blocks.saturating_add(n.saturating_mul(composites.each));
    let message = format!(
        "the file's {n} composite rate limiters ({} each: decision counters of a row per thread slot, and the limiter) and {} rate_limiting samplers for service {service:?} ({}) would take {} ({total} bytes) together, over the memory budget of {}; the first {fit} fit. Use fewer rate limiters (one shared limiter holds one limit), or raise a rate_limiting block's limits.memory_budget",
        human(composites.each),
        configs.len(),
        human(blocks),
        human(total),
        human(budget),
    );
    Err(Invalid::new(ConfigErrorKind::MemoryBudget, message).at(file, *at, key))
}
