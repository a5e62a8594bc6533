//! [`SamplingConfig`]'s loaders: its public constructors from a file or a text, each a
//! call down into its reader in `formats/`, so the type's whole API is read in `model/`.
//!
//! The data model is below the readers (they build it), so this file, although it sits
//! beside the type, is above them in the rooms' order: it imports `formats/`, and
//! nothing below `formats/` imports it (`.ci/imports` holds it to that).

use std::path::Path;

use crate::config::error::ConfigError;
#[cfg(feature = "yaml")]
use crate::config::formats::yaml;
use crate::config::formats::{self, jaeger, toml};
use crate::config::model::SamplingConfig;

impl SamplingConfig {
    /// Loads a file, choosing the format by the name's extension and the content:
    ///
    /// * `.json`: Jaeger sampling strategies;
    /// * `.yaml` / `.yml` (feature `yaml`): an OpenTelemetry declarative configuration
    ///   file if it has a top-level `file_format` (the rules of its first
    ///   `rate_limiting` sampler, see [`DeclarativeSampler`](crate::DeclarativeSampler)),
    ///   else a rule file in YAML ([`from_yaml_str`](Self::from_yaml_str));
    /// * anything else: TOML.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the file, line, column and key of the first mistake.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Self::from_path_with(path.as_ref(), None)
    }

    /// [`from_path`](Self::from_path), with `redis` (from the environment), when given,
    /// replacing a TOML file's `[fleet] redis`.
    pub(crate) fn from_path_with(
        path: &Path,
        redis: Option<&[String]>,
    ) -> Result<Self, ConfigError> {
        formats::from_path_with(path, redis)
    }

    /// The file at `path` as [`from_path_with`](Self::from_path_with) reads it, from
    /// `text`, its contents already read.
    #[cfg_attr(not(feature = "reload"), allow(dead_code))] // a watcher's reload
    pub(crate) fn from_file_text(
        path: &Path,
        text: &str,
        redis: Option<&[String]>,
    ) -> Result<Self, ConfigError> {
        formats::from_file_text(path, text, redis)
    }

    /// Parses a TOML configuration; `file` names it in errors.
    ///
    /// ```
    /// use otel_rate_sampler::SamplingConfig;
    ///
    /// let config = SamplingConfig::from_toml_str(r#"
    ///     [default]
    ///     rate = 10.0
    ///
    ///     [[service]]
    ///     name = "checkout"
    ///     cap = { rate = 50.0 }
    ///
    ///     [[service.rule]]
    ///     name = "health"
    ///     span_name = "GET /health*"
    ///     probability = 0.0
    /// "#, "sampling.toml")?;
    /// assert_eq!(config.services().collect::<Vec<_>>(), ["checkout"]);
    /// # Ok::<(), otel_rate_sampler::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming `file`, the line, column and key of the first mistake.
    pub fn from_toml_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        toml::load(text, file, None)
    }

    #[cfg(feature = "yaml")]
    /// Parses a YAML configuration (feature `yaml`); `file` names it in errors.
    ///
    /// The keys are those of the TOML format: a `default` mapping, a `service` list whose
    /// entries have a `rule` list, and a `fleet` mapping.
    ///
    /// ```
    /// use otel_rate_sampler::SamplingConfig;
    ///
    /// let config = SamplingConfig::from_yaml_str("
    /// default:
    ///   rate: 10.0
    /// service:
    ///   - name: checkout
    ///     cap: { rate: 50.0 }
    ///     rule:
    ///       - name: health
    ///         span_name: GET /health*
    ///         probability: 0.0
    /// ", "sampling.yaml")?;
    /// assert_eq!(config.services().collect::<Vec<_>>(), ["checkout"]);
    /// # Ok::<(), otel_rate_sampler::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming `file`, the line, column (in characters) and key of the
    /// first mistake: YAML syntax, a key the model does not know, a value of the wrong
    /// type, or any check the TOML loader makes.
    pub fn from_yaml_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        yaml::load(text, file, None)
    }

    /// Parses a Jaeger sampling strategies file; `file` names it in errors.
    ///
    /// ```
    /// use otel_rate_sampler::SamplingConfig;
    ///
    /// let config = SamplingConfig::from_jaeger_json_str(r#"{
    ///   "default_strategy": {"type": "probabilistic", "param": 0.5},
    ///   "service_strategies": [
    ///     {"service": "bar", "type": "ratelimiting", "param": 0.5,
    ///      "operation_strategies": [{"operation": "GET /", "type": "ratelimiting", "param": 2.5}]}
    ///   ]
    /// }"#, "strategies.json")?;
    /// assert_eq!(config.services().collect::<Vec<_>>(), ["bar"]);
    /// # Ok::<(), otel_rate_sampler::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming `file`, the line, column and key of the first mistake.
    pub fn from_jaeger_json_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        jaeger::load(text, file)
    }
}
