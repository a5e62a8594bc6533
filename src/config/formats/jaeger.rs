//! The Jaeger sampling strategies file (`default_strategy`, `service_strategies`,
//! `operation_strategies`; types `probabilistic` and `ratelimiting`), loaded into the
//! same model as the TOML format.
//!
//! Two departures from the Jaeger backend, both in the user's favour: fractional rate
//! limits are honoured (0.5 is one trace per two seconds, not zero), and operation
//! strategies may be `ratelimiting` too. As in Jaeger (and as `[[default.rule]]` in
//! TOML), a listed service's operations come first, then the default strategy's
//! operations it does not name itself; a service strategy may opt out with
//! `"inherit_default_rules": false` (an extension, which Jaeger itself ignores).
//!
//! The file format has no lower bound (a strategy is a `type` and a `param`; the
//! `defaultLowerBoundTracesPerSecond` of Jaeger's remote sampling answers is not one of
//! its keys), so a file's probabilities have none; write `at_least` in a TOML or YAML
//! rule file for one.

use std::collections::HashSet;

use serde::Deserialize;

use crate::config::error::{ConfigError, ConfigErrorKind, Pos};
use crate::config::model::pattern::Pattern;
use crate::config::model::values::{self, Invalid};
use crate::config::model::{FleetSettings, LimitSpec, Policy, Rule, SamplingConfig, ServiceConfig};
use crate::limiter::Algorithm;
use crate::sampler::RemoteParents;

/// Jaeger's default when a file has no `default_strategy`.
const JAEGER_DEFAULT_PROBABILITY: f64 = 0.001;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    default_strategy: Option<RawStrategy>,
    #[serde(default)]
    service_strategies: Vec<RawStrategy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStrategy {
    service: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    param: Option<f64>,
    #[serde(default)]
    operation_strategies: Vec<RawOperation>,
    inherit_default_rules: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperation {
    operation: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    param: Option<f64>,
}

/// One step of a path into a JSON document.
#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

struct Ctx<'a> {
    text: &'a str,
    file: &'a str,
}

impl Ctx<'_> {
    fn err(&self, invalid: Invalid, path: &[Step<'_>]) -> ConfigError {
        let pos =
            locate(self.text, path).map_or_else(Pos::default, |o| Pos::of_offset(self.text, o));
        invalid.at(self.file, pos, &path_string(path))
    }

    fn policy(&self, kind: &str, param: f64, at: &[Step<'_>]) -> Result<Policy, ConfigError> {
        let with = |last: &'static str| [at, &[Step::Key(last)]].concat();
        match kind {
            "probabilistic" => values::probability(param)
                .map(Policy::Probability)
                .map_err(|e| self.err(e, &with("param"))),
            "ratelimiting" => values::rate(param)
                .map(|limit| {
                    // Jaeger strategies have no notion of a fleet: each process's own.
                    Policy::Limit(LimitSpec::local(limit, Algorithm::FixedWindow))
                })
                .map_err(|e| self.err(e, &with("param"))),
            other => Err(self.err(
                Invalid::new(
                    ConfigErrorKind::UnknownType,
                    format!("unknown strategy type {other:?}; expected \"probabilistic\" or \"ratelimiting\""),
                ),
                &with("type"),
            )),
        }
    }

    /// A strategy's own policy (`None` if it sets neither `type` nor `param`).
    fn strategy_policy(
        &self,
        raw: &RawStrategy,
        at: &[Step<'_>],
    ) -> Result<Option<Policy>, ConfigError> {
        match (&raw.kind, raw.param) {
            (Some(kind), Some(param)) => self.policy(kind, param, at).map(Some),
            (None, None) => Ok(None),
            (Some(_), None) | (None, Some(_)) => {
                let missing = if raw.kind.is_none() { "type" } else { "param" };
                Err(self.err(
                    Invalid::new(
                        ConfigErrorKind::MissingKey,
                        format!("`type` and `param` go together; add `{missing}`"),
                    ),
                    at,
                ))
            }
        }
    }

    fn operations(&self, raw: &RawStrategy, at: &[Step<'_>]) -> Result<Vec<Rule>, ConfigError> {
        let mut rules: Vec<Rule> = Vec::with_capacity(raw.operation_strategies.len());
        let mut names: HashSet<&str> = HashSet::with_capacity(raw.operation_strategies.len());
        for (i, op) in raw.operation_strategies.iter().enumerate() {
            let here = [at, &[Step::Key("operation_strategies"), Step::Index(i)]].concat();
            let key = [here.as_slice(), &[Step::Key("operation")]].concat();
            let missing = |name: &str| {
                self.err(
                    Invalid::new(
                        ConfigErrorKind::MissingKey,
                        format!("an operation strategy needs `operation`, `type` and `param`; add `{name}`"),
                    ),
                    &here,
                )
            };
            let (Some(operation), Some(kind), Some(param)) = (&op.operation, &op.kind, op.param)
            else {
                let name = match (&op.operation, &op.kind) {
                    (None, _) => "operation",
                    (_, None) => "type",
                    _ => "param",
                };
                return Err(missing(name));
            };
            values::name("operation", operation).map_err(|e| self.err(e, &key))?;
            if !names.insert(operation) {
                return Err(self.err(
                    Invalid::new(
                        ConfigErrorKind::DuplicateRule,
                        format!(
                            "operation {operation:?} is listed twice in this strategy; list it once"
                        ),
                    ),
                    &key,
                ));
            }
            rules.push(Rule {
                name: operation.clone(),
                span_name: Some(Pattern::literal(operation)),
                kind: None,
                parent: None,
                attributes: Vec::new(),
                policy: self.policy(kind, param, &here)?,
                floor: 0,
                inherited: false,
            });
        }
        Ok(rules)
    }
}

impl SamplingConfig {
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
        // A UTF-8 byte order mark is not part of the JSON, nor counted in columns.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let ctx = Ctx { text, file };
        let raw: RawFile = serde_json::from_str(text).map_err(|e| json_error(text, file, &e))?;
        let default = match &raw.default_strategy {
            Some(d) => {
                let at = [Step::Key("default_strategy")];
                for (given, key) in [
                    (d.service.is_some(), "service"),
                    (d.inherit_default_rules.is_some(), "inherit_default_rules"),
                ] {
                    if given {
                        return Err(ctx.err(
                            Invalid::new(
                                ConfigErrorKind::UnknownKey,
                                format!("the default strategy takes no `{key}`"),
                            ),
                            &[at[0], Step::Key(key)],
                        ));
                    }
                }
                ServiceConfig {
                    policy: Some(
                        ctx.strategy_policy(d, &at)?
                            .unwrap_or(Policy::Probability(JAEGER_DEFAULT_PROBABILITY)),
                    ),
                    rules: ctx.operations(d, &at)?,
                    ..jaeger_default()
                }
            }
            None => jaeger_default(),
        };
        let mut services: Vec<ServiceConfig> = Vec::with_capacity(raw.service_strategies.len());
        let mut names: HashSet<&str> = HashSet::with_capacity(raw.service_strategies.len());
        for (i, s) in raw.service_strategies.iter().enumerate() {
            let at = [Step::Key("service_strategies"), Step::Index(i)];
            let name_key = [at[0], at[1], Step::Key("service")];
            let name = s.service.as_deref().ok_or_else(|| {
                ctx.err(
                    Invalid::new(
                        ConfigErrorKind::MissingKey,
                        "a service strategy needs a `service` name",
                    ),
                    &at,
                )
            })?;
            values::name("service name", name).map_err(|e| ctx.err(e, &name_key))?;
            if !names.insert(name) {
                return Err(ctx.err(
                    Invalid::new(
                        ConfigErrorKind::DuplicateService,
                        format!("service {name:?} is listed twice; list each service once"),
                    ),
                    &name_key,
                ));
            }
            services.push(ServiceConfig {
                name: name.to_owned(),
                policy: ctx.strategy_policy(s, &at)?,
                cap: None,
                remote_parents: RemoteParents::default(),
                rules: ctx.operations(s, &at)?,
                inherit_default_rules: s.inherit_default_rules.unwrap_or(true),
            });
        }
        let config = Self::new(file, default, services, FleetSettings::default());
        if let Some(over) = config.over_budget() {
            let at = match over.service {
                Some(i) => vec![Step::Key("service_strategies"), Step::Index(i)],
                None => vec![Step::Key("default_strategy")],
            };
            return Err(ctx.err(over.invalid(&config), &at));
        }
        Ok(config)
    }
}

/// Jaeger's default strategy when the file has none: probability 0.001.
fn jaeger_default() -> ServiceConfig {
    ServiceConfig {
        name: String::new(),
        policy: Some(Policy::Probability(JAEGER_DEFAULT_PROBABILITY)),
        cap: None,
        remote_parents: RemoteParents::default(),
        rules: Vec::new(),
        inherit_default_rules: true,
    }
}

fn json_error(text: &str, file: &str, e: &serde_json::Error) -> ConfigError {
    let message = e.to_string();
    // serde_json appends " at line L column C"; the position is reported separately.
    let message = message
        .split(" at line ")
        .next()
        .unwrap_or_default()
        .to_owned();
    let pos = json_pos(text, e.line(), e.column());
    // serde names the bare key: the full path is read from the text up to the error.
    let offset = json_offset(text, e.line(), e.column());
    let (kind, key) = if message.starts_with("unknown field `") {
        (ConfigErrorKind::UnknownKey, path_at(text, offset))
    } else if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default();
        let key = match path_at(text, offset) {
            at if at.is_empty() => field.to_owned(),
            at => format!("{at}.{field}"),
        };
        (ConfigErrorKind::MissingKey, key)
    } else if e.is_data() {
        (ConfigErrorKind::Syntax, path_at(text, offset))
    } else {
        (ConfigErrorKind::Syntax, String::new())
    };
    let source = serde_json::Error::io(std::io::Error::other(e.to_string()));
    ConfigError::new(kind, file, pos, key, message).with_source(source)
}

/// serde_json's line and byte column (from 1; column 0 before a line's first byte) as a
/// line and a column in characters.
fn json_pos(text: &str, line: usize, column: usize) -> Pos {
    if line == 0 {
        return Pos::default();
    }
    Pos::of_offset(text, json_offset(text, line, column))
}

/// The byte offset of serde_json's line and byte column.
fn json_offset(text: &str, line: usize, column: usize) -> usize {
    let line_start = match line {
        0 | 1 => 0,
        _ => match memchr::memchr_iter(b'\n', text.as_bytes()).nth(line - 2) {
            Some(newline) => newline + 1,
            None => return text.len(),
        },
    };
    let line_end = memchr::memchr(b'\n', &text.as_bytes()[line_start..])
        .map_or(text.len(), |n| line_start + n);
    (line_start + column.saturating_sub(1)).min(line_end)
}

/// The path (`service_strategies[1].operation_strategies[0].typ`) of the key or value
/// the text is in at byte `offset`: the last key read in each open object, the index in
/// each open array. A scan of the text before `offset`, on the error path only.
fn path_at(text: &str, offset: usize) -> String {
    enum Frame {
        Object(Option<String>),
        Array(usize),
    }
    let bytes = text.as_bytes();
    let end = offset.min(bytes.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut key_next = false;
    let mut i = 0;
    while i < end {
        match bytes[i] {
            b'{' => {
                stack.push(Frame::Object(None));
                key_next = true;
            }
            b'[' => {
                stack.push(Frame::Array(0));
                key_next = false;
            }
            b'}' | b']' => {
                stack.pop();
                key_next = false;
            }
            b',' => match stack.last_mut() {
                Some(Frame::Array(n)) => *n += 1,
                Some(Frame::Object(_)) => key_next = true,
                None => {}
            },
            b'"' => {
                let after = skip_string(bytes, i).unwrap_or(bytes.len());
                if key_next {
                    if let Some(Frame::Object(key)) = stack.last_mut() {
                        *key = text
                            .get(i..after)
                            .and_then(|s| serde_json::from_str(s).ok());
                    }
                    key_next = false;
                }
                i = after;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    let mut out = String::new();
    for frame in &stack {
        match frame {
            Frame::Object(Some(key)) if out.is_empty() => out.push_str(key),
            Frame::Object(Some(key)) => {
                out.push('.');
                out.push_str(key);
            }
            Frame::Object(None) => {}
            Frame::Array(n) => out.push_str(&format!("[{n}]")),
        }
    }
    out
}

fn path_string(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The byte offset of the value at `path` in a JSON document already known to parse
/// (the start of the value, or of the object holding a missing key).
fn locate(text: &str, path: &[Step<'_>]) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = skip_ws(bytes, 0);
    for step in path {
        match (step, bytes.get(at)?) {
            (Step::Key(key), b'{') => {
                let mut i = skip_ws(bytes, at + 1);
                let mut found = None;
                while bytes.get(i) == Some(&b'"') {
                    let end = skip_string(bytes, i)?;
                    let name: String = serde_json::from_str(text.get(i..end)?).ok()?;
                    let value = skip_ws(bytes, skip_ws(bytes, end) + 1);
                    if name == *key {
                        found = Some(value);
                        break;
                    }
                    i = skip_ws(bytes, skip_value(bytes, value)?);
                    if bytes.get(i) == Some(&b',') {
                        i = skip_ws(bytes, i + 1);
                    }
                }
                match found {
                    Some(v) => at = v,
                    None => return Some(at),
                }
            }
            (Step::Index(n), b'[') => {
                let mut i = skip_ws(bytes, at + 1);
                for _ in 0..*n {
                    i = skip_ws(bytes, skip_value(bytes, i)?);
                    if bytes.get(i) == Some(&b',') {
                        i = skip_ws(bytes, i + 1);
                    }
                }
                at = i;
            }
            _ => return Some(at),
        }
    }
    Some(at)
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

/// The offset just past the string starting at `i`.
fn skip_string(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match bytes.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The offset just past the value starting at `i`.
fn skip_value(bytes: &[u8], i: usize) -> Option<usize> {
    match bytes.get(i)? {
        b'"' => skip_string(bytes, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match bytes.get(j)? {
                    b'"' => {
                        j = skip_string(bytes, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while bytes
                .get(j)
                .is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace())
            {
                j += 1;
            }
            Some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_byte_columns_become_character_columns() {
        let text = "{\n  \"é\": 1, \"x\": ]\n}";
        let err = serde_json::from_str::<serde_json::Value>(text).unwrap_err();
        // serde_json counts bytes ("é" is two): the `]` is byte 17, character 16.
        assert_eq!((err.line(), err.column()), (2, 17));
        assert_eq!(
            json_pos(text, err.line(), err.column()),
            Pos {
                line: 2,
                column: 16
            }
        );
        assert_eq!(json_pos(text, 0, 0), Pos::default());
        assert_eq!(json_pos(text, 9, 1), Pos { line: 3, column: 2 });
    }

    #[test]
    fn the_path_at_an_offset_names_every_enclosing_key_and_index() {
        let text = r#"{"a": [1, {"b": "x\",}", "c": {"d": 2}}], "e": 3}"#;
        let at = |needle: &str| path_at(text, text.find(needle).unwrap() + needle.len());
        assert_eq!(at("\"b\""), "a[1].b");
        assert_eq!(at("\"d\": 2"), "a[1].c.d");
        assert_eq!(at("\"e\""), "e");
        assert_eq!(path_at(text, 0), "");
    }

    #[test]
    fn locate_finds_nested_values() {
        let text = "{\"a\": [1, {\"b\": \"x\\\"}\", \"c\": 2}]}";
        let at = locate(text, &[Step::Key("a"), Step::Index(1), Step::Key("c")]).unwrap();
        assert_eq!(&text[at..at + 1], "2");
        assert_eq!(
            path_string(&[Step::Key("a"), Step::Index(1), Step::Key("c")]),
            "a[1].c"
        );
    }
}
