//! Sampling rules by service, operation and attribute, from TOML or Jaeger strategy
//! files and the environment.

mod env;
mod error;
mod from_jaeger;
mod from_toml;
mod lint;
mod model;
mod pattern;
mod summary;
mod validate;
#[cfg(feature = "reload")]
mod watch;

pub use env::{
    DEFAULT_TRACES_PER_SECOND, OTEL_RATE_SAMPLER_CONFIG, OTEL_TRACES_SAMPLER,
    OTEL_TRACES_SAMPLER_ARG, PARENTBASED_RATELIMITING, RATELIMITING,
};
pub use error::{ConfigError, ConfigErrorKind};
pub use lint::{Lint, LintKind, Severity, LARGE_MEMORY_BYTES};
pub use model::SamplingConfig;
pub use summary::{EffectiveRule, EffectiveRules, LimiterMemory, RulePolicy};
#[cfg(feature = "reload")]
pub use watch::ConfigWatcher;

pub(crate) use model::{LimitSpec, Policy, Rule, ServiceConfig};
pub(crate) use pattern::{bytes_eq, Pattern};
