//! The rule layer: per-service sampling rules by operation and attribute, loaded from
//! TOML, YAML, OpenTelemetry declarative configuration or Jaeger strategy files and the environment, compiled into the
//! [`RuleBasedSampler`] on top of the sampler layer, and inspected by the lints and
//! summaries the `otel-rate-sampler` command prints.

mod budget;
#[cfg(feature = "yaml")]
mod declarative;
pub mod env;
mod error;
mod from_jaeger;
mod from_toml;
#[cfg(feature = "yaml")]
mod from_yaml;
mod handover;
#[cfg(feature = "jaeger-remote")]
mod jaeger_remote;
pub mod lint;
mod log;
mod matcher;
mod model;
mod pattern;
mod rule_based;
mod rule_limiter;
mod rule_set;
mod spanned;
pub mod summary;
mod validate;
#[cfg(feature = "reload")]
mod watch;

#[cfg(feature = "yaml")]
pub use declarative::DeclarativeSampler;
pub use error::{ConfigError, ConfigErrorKind};
#[cfg(feature = "jaeger-remote")]
pub use jaeger_remote::{JaegerRemote, JaegerRemotePoller, RemoteUpdate};
pub use model::SamplingConfig;
pub use rule_based::{ReloadHandle, RuleBasedSampler};
#[cfg(feature = "reload")]
pub use watch::{ConfigWatcher, WatchOptions};
