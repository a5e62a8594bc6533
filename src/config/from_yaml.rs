//! The YAML format (feature `yaml`): the TOML model written in YAML, deserialised into
//! the TOML loader's own structs, so every key, default and check is the same. See
//! `examples/sampling.yaml`, the YAML twin of `examples/sampling.toml`.

use serde::de::DeserializeOwned;

use super::error::{ConfigError, ConfigErrorKind, Pos};
use super::from_toml::{Ctx, RawFile};
use super::model::SamplingConfig;
use super::spanned::{reading, Format};

impl SamplingConfig {
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
        Self::from_yaml_with(text, file, None)
    }

    /// [`from_yaml_str`](Self::from_yaml_str), with `redis` (from the environment), when
    /// given, replacing the `fleet` mapping's Redis URLs.
    pub(crate) fn from_yaml_with(
        text: &str,
        file: &str,
        redis: Option<&[String]>,
    ) -> Result<Self, ConfigError> {
        let raw: RawFile = parse(text, file)?;
        Ctx::new(text, file).config(&raw, redis)
    }
}

/// Deserialises YAML `text` (from `file`) with spans, into the raw structs.
pub(super) fn parse<T: DeserializeOwned>(text: &str, file: &str) -> Result<T, ConfigError> {
    reading(Format::Yaml, || serde_saphyr::from_str(text)).map_err(|e| yaml_error(&e, text, file))
}

/// A serde-saphyr error as a [`ConfigError`]: its position (line and column already in
/// characters), its message without the source snippet, and the key serde names.
fn yaml_error(e: &serde_saphyr::Error, text: &str, file: &str) -> ConfigError {
    let pos = e.location().map_or(Pos::default(), |l| Pos {
        line: usize::try_from(l.line()).unwrap_or(usize::MAX),
        column: usize::try_from(l.column()).unwrap_or(usize::MAX),
    });
    let message = plain_message(e);
    let quoted = |prefix: &str| {
        message
            .split_once(prefix)
            .and_then(|(_, rest)| rest.split('`').next())
            .map(str::to_owned)
    };
    let (kind, key) = if let Some(key) = quoted("unknown field `") {
        (ConfigErrorKind::UnknownKey, key)
    } else if let Some(key) = quoted("missing field `") {
        (ConfigErrorKind::MissingKey, key)
    } else if let Some(value) = quoted("unknown variant `") {
        (ConfigErrorKind::UnknownValue, value)
    } else {
        (ConfigErrorKind::Syntax, key_on_line(text, pos.line))
    };
    ConfigError::new(kind, file, pos, key, message)
}

/// The error's message alone: serde-saphyr's `Display` may add the position and a
/// snippet of the source, which [`ConfigError`] gives its own way.
fn plain_message(e: &serde_saphyr::Error) -> String {
    let text = e.without_snippet().to_string();
    let first = text.lines().next().unwrap_or_default().trim();
    // "... at line 3, column 5" (the position is given separately).
    let first = first
        .rsplit_once(" at line ")
        .map_or(first, |(message, _)| message);
    let first = first.trim_end_matches(':').trim();
    // Advice about the library's options is not for the file's author.
    first
        .split_once(", set DuplicateKeyPolicy")
        .map_or(first, |(message, _)| message)
        .to_owned()
}

/// The key of the `key: value` on line `line` (from 1) of `text`, best effort: the key
/// whose value a type or syntax error is about.
fn key_on_line(text: &str, line: usize) -> String {
    let Some(content) = line.checked_sub(1).and_then(|i| text.lines().nth(i)) else {
        return String::new();
    };
    let content = content.trim_start().trim_start_matches("- ").trim_start();
    match content.split_once(':') {
        Some((key, _)) if !key.contains(['{', '[', '#']) => {
            key.trim().trim_matches(['"', '\'']).to_owned()
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_positions() {
        let cases = [
            "default:\n  rate: 1\n  rat: 2\n",
            "default:\n  rate: fast\n",
            "default: [\n",
            "service:\n  - rule: 3\n",
            "default:\n  rate: 1\ndefault:\n  rate: 2\n",
        ];
        for text in cases {
            let e = SamplingConfig::from_yaml_str(text, "t.yaml").unwrap_err();
            println!("{e}  [{:?}]", e.kind());
        }
    }
}
