//! Sampling rules by service, operation and attribute, from TOML or Jaeger strategy
//! files and the environment.

mod error;
mod from_jaeger;
mod from_toml;
mod model;
mod pattern;
mod validate;

pub use error::{ConfigError, ConfigErrorKind};
pub use model::SamplingConfig;

pub(crate) use model::{LimitSpec, Policy, Rule, ServiceConfig};
