//! The names of the environment variables the rule layer reads, and the readers the
//! environment entry points and the declarative file share. Public through
//! [`env`](crate::env).

use crate::config::error::{ConfigError, ConfigErrorKind, Pos};
use crate::sampler::env::{service_name, var, EnvError};

/// This crate's variable naming a rule file: TOML, Jaeger JSON (`.json`), or with
/// feature `yaml` YAML (`.yaml`, `.yml`) or an OpenTelemetry declarative configuration
/// file (recognised by its `file_format`). Empty is the same as unset.
pub const OTEL_RATE_SAMPLER_CONFIG: &str = "OTEL_RATE_SAMPLER_CONFIG";
/// This crate's variable naming the Redis server that fleet-scoped limits
/// (`scope = "fleet"` in the rule file) are shared through: `redis://host:6379`, or the
/// comma-separated seed nodes of a Redis Cluster. When set, it replaces the rule file's
/// `[fleet] redis` (the file's other `[fleet]` settings stay), so one file serves every
/// environment. Read by [`RuleBasedSampler::from_env`](crate::RuleBasedSampler::from_env)
/// only; a fleet-scoped limit with no URL in the file or here is a [`ConfigError`].
pub const OTEL_RATE_SAMPLER_REDIS: &str = "OTEL_RATE_SAMPLER_REDIS";

/// The standard variable naming an OpenTelemetry declarative configuration file
/// (`file_format: "1.0"`), read by `DeclarativeSampler::from_env` (feature `yaml`).
/// Empty is the same as unset.
pub const OTEL_CONFIG_FILE: &str = "OTEL_CONFIG_FILE";

/// The Redis URLs of [`OTEL_RATE_SAMPLER_REDIS`] (`None`: unset or empty).
pub(crate) fn redis_urls(lookup: &dyn Fn(&str) -> Option<String>) -> Option<Vec<String>> {
    var(lookup, OTEL_RATE_SAMPLER_REDIS)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|urls| !urls.is_empty())
}

/// `service`, or the environment's service name when `service` is empty.
pub(crate) fn resolve_service(
    service: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    if !service.is_empty() {
        return Ok(service.to_owned());
    }
    service_name(lookup).map_err(|e| from_env_error(ConfigErrorKind::Syntax, e))
}

pub(crate) fn env_error(kind: ConfigErrorKind, variable: &str, message: String) -> ConfigError {
    ConfigError::new(kind, "environment", Pos::default(), variable, message)
}

/// The sampler layer's [`EnvError`] as a [`ConfigError`] of `kind`.
pub(crate) fn from_env_error(kind: ConfigErrorKind, e: EnvError) -> ConfigError {
    env_error(
        kind,
        e.variable(),
        format!("{:?}: {}", e.value(), e.message()),
    )
    .with_source(e)
}
