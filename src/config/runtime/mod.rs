//! The samplers the rule layer builds: [`RuleBasedSampler`] and its reload handle, and
//! (feature `yaml`) the sampler tree of a declarative configuration file.

#[cfg(feature = "yaml")]
mod declarative;
pub(crate) mod rule_based;

#[cfg(feature = "yaml")]
pub use declarative::DeclarativeSampler;
pub use rule_based::{ReloadHandle, RuleBasedSampler};
