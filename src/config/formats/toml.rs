//! The TOML format (primary): `[default]`, `[[service]]`, `[[service.rule]]`, read into
//! the rule file's wire types and lowered as YAML rule files are. See
//! `examples/sampling.toml` for a complete commented file.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::formats::key_path::KeyPath;
use crate::config::formats::rule_file::{self, Ctx, RawFile};
use crate::config::model::SamplingConfig;

/// [`SamplingConfig::from_toml_str`], with `redis` (from the environment), when
/// given, replacing the `[fleet]` table's Redis URLs.
pub(crate) fn load(
    text: &str,
    file: &str,
    redis: Option<&[String]>,
) -> Result<SamplingConfig, ConfigError> {
    // A UTF-8 byte order mark (some Windows editors write one) is not part of the
    // text, nor counted in columns.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let ctx = Ctx::new(text, file);
    let raw: RawFile = toml::from_str(text).map_err(|e| toml_error(&ctx, &e))?;
    rule_file::config(&ctx, &raw, redis)
}

/// A TOML syntax or shape error, with its kind worked out from serde's message.
fn toml_error(ctx: &Ctx<'_>, e: &toml::de::Error) -> ConfigError {
    let span = e.span().unwrap_or(0..0);
    let message = e.message().trim().to_owned();
    let (kind, key) = if let Some(rest) = message.strip_prefix("unknown field `") {
        // serde names the bare key; the other errors name its full path.
        let key = key_path(ctx.text, &span)
            .unwrap_or_else(|| rest.split('`').next().unwrap_or_default().to_owned());
        (ConfigErrorKind::UnknownKey, key)
    } else if let Some(rest) = message.strip_prefix("missing field `") {
        let key = rest.split('`').next().unwrap_or_default().to_owned();
        (ConfigErrorKind::MissingKey, key)
    } else {
        let key = key_path(ctx.text, &span).unwrap_or_else(|| key_before(ctx.text, span.start));
        (ConfigErrorKind::Syntax, key)
    };
    kind.error(ctx.file, message)
        .at(ctx.pos(span), key)
        .with_source(e.clone())
}

/// The full path (`service[0].rule[1].rat`) of the key spelled at `span`, or whose value
/// is at `span`, found in the document parsed again with spans (only on this error path).
fn key_path(text: &str, span: &Range<usize>) -> Option<String> {
    fn in_table(table: &DeTable<'_>, span: &Range<usize>, path: &KeyPath<'_>) -> Option<String> {
        table.iter().find_map(|(key, value)| {
            let path = path.key(key.get_ref());
            // The key itself (an unknown key), or its value (a value of the wrong type).
            if key.span() == *span || value.span() == *span {
                return Some(path.to_string());
            }
            in_value(value.get_ref(), span, &path)
        })
    }
    fn in_value(value: &DeValue<'_>, span: &Range<usize>, path: &KeyPath<'_>) -> Option<String> {
        match value {
            DeValue::Table(t) => in_table(t, span, path),
            DeValue::Array(a) => a
                .iter()
                .enumerate()
                .find_map(|(i, v)| in_value(v.get_ref(), span, &path.index(i))),
            _ => None,
        }
    }
    in_table(DeTable::parse(text).ok()?.get_ref(), span, &KeyPath::Root)
}

/// The `key` of a `key = value` line that holds byte `offset` (best effort).
fn key_before(text: &str, offset: usize) -> String {
    let before = text.get(..offset).unwrap_or_default();
    let line = before.rsplit('\n').next().unwrap_or_default();
    match line.rsplit_once('=') {
        Some((k, _)) => k
            .rsplit([',', '{'])
            .next()
            .unwrap_or_default()
            .trim()
            .trim_matches('"')
            .to_owned(),
        None => String::new(),
    }
}
