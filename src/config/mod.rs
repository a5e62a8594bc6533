//! The rule layer: per-service sampling rules by operation and attribute, loaded from
//! TOML or Jaeger strategy files and the environment, compiled into the
//! [`RuleBasedSampler`] on top of the sampler layer, and inspected by the lints and
//! summaries the `otel-rate-sampler` command prints.

pub mod env;
mod error;
mod from_jaeger;
mod from_toml;
mod handover;
pub mod lint;
mod log;
mod matcher;
mod model;
mod pattern;
mod rule_based;
mod rule_limiter;
mod rule_set;
pub mod summary;
mod validate;
#[cfg(feature = "reload")]
mod watch;

pub use error::{ConfigError, ConfigErrorKind};
pub use model::SamplingConfig;
pub use rule_based::RuleBasedSampler;
#[cfg(feature = "reload")]
pub use watch::{ConfigWatcher, WatchOptions};
