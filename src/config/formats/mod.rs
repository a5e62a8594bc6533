//! One reader per format, each decoding its own wire types into the model: TOML (the
//! primary format, whose raw structures and lowering YAML and declarative files share),
//! YAML, Jaeger JSON and the OpenTelemetry declarative configuration file.

#[cfg(feature = "yaml")]
pub(crate) mod declarative;
pub(crate) mod jaeger;
pub(crate) mod key_path;
pub(crate) mod rule_file;
pub(crate) mod spanned;
pub(crate) mod toml;
#[cfg(feature = "yaml")]
pub(crate) mod yaml;
#[cfg(feature = "yaml")]
pub(crate) mod yaml_tree;

use std::path::Path;

use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::model::SamplingConfig;

/// [`SamplingConfig::from_path`], with `redis` (from the environment), when given,
/// replacing a TOML file's `[fleet] redis`.
pub(crate) fn from_path_with(
    path: &Path,
    redis: Option<&[String]>,
) -> Result<SamplingConfig, ConfigError> {
    let file = path.display().to_string();
    let text = read_file(path, &file)?;
    from_file_text(path, &text, redis)
}

/// The file at `path` as [`from_path_with`] reads it, from
/// `text`, its contents already read.
pub(crate) fn from_file_text(
    path: &Path,
    text: &str,
    redis: Option<&[String]>,
) -> Result<SamplingConfig, ConfigError> {
    let file = path.display().to_string();
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    if extension.eq_ignore_ascii_case("json") {
        jaeger::load(text, &file)
    } else if is_yaml_path(path) {
        from_yaml_file(text, &file, redis)
    } else {
        toml::load(text, &file, redis)
    }
}

/// A `.yaml` / `.yml` file: a declarative configuration file (it has a
/// `file_format`), whose first `rate_limiting` sampler holds the rules, or a rule
/// file in YAML.
#[cfg(feature = "yaml")]
fn from_yaml_file(
    text: &str,
    file: &str,
    redis: Option<&[String]>,
) -> Result<SamplingConfig, ConfigError> {
    if declarative::is_declarative(text) {
        declarative::rate_limiting_config(text, file, redis)
    } else {
        yaml::load(text, file, redis)
    }
}

/// A `.yaml` / `.yml` file in a build without the `yaml` feature: refused.
#[cfg(not(feature = "yaml"))]
fn from_yaml_file(
    _: &str,
    file: &str,
    _: Option<&[String]>,
) -> Result<SamplingConfig, ConfigError> {
    Err(ConfigErrorKind::MissingFeature.error(file, "a YAML file needs the `yaml` feature of otel-rate-sampler; build with it, or write the rules in TOML"))
}

/// Whether `path` names a YAML file, by its extension (`.yaml`, `.yml`, any case).
pub(crate) fn is_yaml_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

/// The text of the file at `path` (named `file` in errors).
pub(crate) fn read_file(path: &Path, file: &str) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| unreadable(file, e))
}

/// The error of a file (named `file`) that cannot be read.
pub(crate) fn unreadable(file: &str, e: std::io::Error) -> ConfigError {
    ConfigErrorKind::Io
        .error(file, format!("cannot read the file: {e}"))
        .with_source(e)
}
