//! The `rate_limiting` blocks of a declarative configuration file: each rule file read
//! with where it sits, and the memory budget of all of them together (a file builds
//! every block's sampler, so five blocks each under the budget can be five times over).

use crate::config::check::budget::over_budget_together;
use crate::config::error::{ConfigError, Pos};
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

/// Checks that the samplers of `found`, every `rate_limiting` block of a file (`file`),
/// built for `service`, fit in the memory budget together, before any is built.
///
/// # Errors
///
/// A [`MemoryBudget`](crate::ConfigErrorKind::MemoryBudget) error at the largest
/// limiter: its position and full key
/// (`tracer_provider.sampler.parent_based.root.rate_limiting.default.rule[0]`).
pub(crate) fn check_budget(found: &[&Block], file: &str, service: &str) -> Result<(), ConfigError> {
    let configs: Vec<&SamplingConfig> = found.iter().map(|b| &b.config).collect();
    let Some(over) = over_budget_together(&configs, service) else {
        return Ok(());
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
