//! The names of the environment variables the rule layer reads, and the readers the
//! environment entry points and the declarative file share. Public through
//! [`env`](crate::env).

use std::path::PathBuf;

use crate::config::error::{ConfigError, ConfigErrorKind};
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

/// This crate's variable naming the CA file (PEM) that a `rediss://` Redis's certificate
/// is checked against, instead of the platform's roots: replaces the rule file's
/// `[fleet] tls_ca_file` where set, as [`OTEL_RATE_SAMPLER_REDIS`] replaces its URLs.
/// Empty is the same as unset.
pub const OTEL_RATE_SAMPLER_REDIS_CA: &str = "OTEL_RATE_SAMPLER_REDIS_CA";
/// This crate's variable naming the client certificate file (PEM) for a `rediss://`
/// Redis that asks for one, with [`OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY`] (both or
/// neither): replaces the rule file's `[fleet] tls_client_cert` and `tls_client_key`.
pub const OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT: &str = "OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT";
/// This crate's variable naming the client key file (PEM) of
/// [`OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT`].
pub const OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY: &str = "OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY";

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

/// What the environment says of the fleet's Redis: its URLs and its TLS files, each
/// replacing the rule file's where set.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FleetEnv {
    /// [`OTEL_RATE_SAMPLER_REDIS`].
    pub(crate) urls: Option<Vec<String>>,
    /// [`OTEL_RATE_SAMPLER_REDIS_CA`].
    pub(crate) tls_ca_file: Option<PathBuf>,
    /// [`OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT`] and [`OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY`].
    pub(crate) tls_client: Option<(PathBuf, PathBuf)>,
}

impl FleetEnv {
    /// The fleet's variables as `lookup` reads them.
    ///
    /// # Errors
    ///
    /// A client certificate without its key, or a key without its certificate.
    pub(crate) fn read(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let path = |name| var(lookup, name).map(PathBuf::from);
        let tls_client = match (
            path(OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT),
            path(OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY),
        ) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (cert, _) => {
                let (set, missing) = if cert.is_some() {
                    (
                        OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT,
                        OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY,
                    )
                } else {
                    (
                        OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY,
                        OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT,
                    )
                };
                return Err(env_error(
                    ConfigErrorKind::MissingKey,
                    missing,
                    format!("{set} is set and {missing} is not: a client certificate needs its key, and a key its certificate"),
                ));
            }
        };
        Ok(Self {
            urls: redis_urls(lookup),
            tls_ca_file: path(OTEL_RATE_SAMPLER_REDIS_CA),
            tls_client,
        })
    }
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
    kind.error("environment", message).on_key(variable)
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
