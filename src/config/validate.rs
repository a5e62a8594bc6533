//! Checks shared by every format: each returns what was wrong and what is accepted, and
//! the format adds the file, the position and the key.

use std::time::Duration;

use opentelemetry::trace::SpanKind;

use super::error::{ConfigError, ConfigErrorKind, Pos};
use super::pattern::Pattern;
use crate::limit::{Limit, LimitError};
use crate::limiter::Algorithm;
use crate::sampler::{Origin, RemoteParents};

/// A value that failed a check, before its location is known.
#[derive(Debug)]
pub(crate) struct Invalid {
    kind: ConfigErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Invalid {
    pub(crate) fn new(kind: ConfigErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    fn limit(e: LimitError) -> Self {
        Self {
            kind: ConfigErrorKind::InvalidLimit,
            message: e.to_string(),
            source: Some(Box::new(e)),
        }
    }

    pub(crate) fn at(self, file: &str, pos: Pos, key: &str) -> ConfigError {
        let mut err = ConfigError::new(self.kind, file, pos, key, self.message);
        if let Some(source) = self.source {
            err = err.with_source(BoxedSource(source));
        }
        err
    }
}

/// Carries a boxed error as a `source()`.
#[derive(Debug)]
struct BoxedSource(Box<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for BoxedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BoxedSource {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// A fractional rate per second.
pub(crate) fn rate(rate: f64) -> Result<Limit, Invalid> {
    Limit::per_second(rate).map_err(Invalid::limit)
}

/// `permits` per `window`.
pub(crate) fn per_window(permits: i64, window: Duration) -> Result<Limit, Invalid> {
    let permits = u32::try_from(permits).map_err(|_| {
        Invalid::new(
            ConfigErrorKind::InvalidLimit,
            format!(
                "limit {permits} is not a permit count; use a whole number from 1 to {}",
                Limit::MAX_PERMITS
            ),
        )
    })?;
    Limit::per_window(permits, window).map_err(Invalid::limit)
}

/// A window such as `1s`, `500ms`, `2.5s`, `1m` or `1h`.
pub(crate) fn window(text: &str) -> Result<Duration, Invalid> {
    let bad = || {
        Invalid::new(
            ConfigErrorKind::InvalidLimit,
            format!("window {text:?} is not a duration; use a positive number and a unit: \"500ms\", \"1s\", \"2.5s\", \"1m\", \"1h\""),
        )
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit.trim() {
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(bad()),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| bad())
}

/// A probability in `[0, 1]`.
pub(crate) fn probability(p: f64) -> Result<f64, Invalid> {
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(Invalid::new(
            ConfigErrorKind::InvalidProbability,
            format!("probability {p} is not in [0, 1]; use a number such as 0.25"),
        ))
    }
}

/// An algorithm name.
pub(crate) fn algorithm(name: &str) -> Result<Algorithm, Invalid> {
    name.parse::<Algorithm>().map_err(|e| Invalid {
        kind: ConfigErrorKind::UnknownAlgorithm,
        message: e.to_string(),
        source: Some(Box::new(e)),
    })
}

/// A glob.
pub(crate) fn glob(glob: &str) -> Result<Pattern, Invalid> {
    if let Some(group) = single_option_brace_group(glob) {
        // `{id}` is glob alternation with one option: it matches `id`, not `{id}`. In a
        // route template (`/orders/{id}`) that is never what was meant, and the rule
        // would silently never match.
        return Err(Invalid {
            kind: ConfigErrorKind::BadGlob,
            message: format!(
                "{glob:?} has the brace group {group:?} with one option, which matches its text \
                 without the braces; write `\\{{` and `\\}}` to match braces (a route \
                 template), or `{{a,b}}` for alternatives"
            ),
            source: None,
        });
    }
    Pattern::glob(glob).map_err(|e| Invalid {
        kind: ConfigErrorKind::BadGlob,
        message: format!("{glob:?} is not a valid glob ({}); use `*`, `?`, `[abc]`, `{{a,b}}`, and `\\` to escape", e.kind()),
        source: Some(Box::new(e)),
    })
}

/// The first unescaped `{...}` group of `glob` that has no top-level comma, if any
/// (braces inside a `[...]` class or after `\\` are literal).
fn single_option_brace_group(glob: &str) -> Option<&str> {
    let bytes = glob.as_bytes();
    let (mut i, mut class, mut open): (usize, bool, Vec<(usize, bool)>) = (0, false, Vec::new());
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'[' if !class => class = true,
            b']' if class => class = false,
            b'{' if !class => open.push((i, false)),
            b',' if !class => {
                if let Some(top) = open.last_mut() {
                    top.1 = true;
                }
            }
            b'}' if !class => {
                if let Some((start, comma)) = open.pop() {
                    if !comma {
                        return Some(&glob[start..=i]);
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// A span kind name.
pub(crate) fn span_kind(name: &str) -> Result<SpanKind, Invalid> {
    Ok(match name {
        "internal" => SpanKind::Internal,
        "server" => SpanKind::Server,
        "client" => SpanKind::Client,
        "producer" => SpanKind::Producer,
        "consumer" => SpanKind::Consumer,
        _ => return Err(Invalid::new(
            ConfigErrorKind::UnknownValue,
            format!("unknown span kind {name:?}; expected one of \"internal\", \"server\", \"client\", \"producer\", \"consumer\""),
        )),
    })
}

/// A parent origin a rule may match.
pub(crate) fn parent(name: &str) -> Result<Origin, Invalid> {
    match name {
        "none" => Ok(Origin::Root),
        "remote" => Ok(Origin::Remote),
        "local" => Err(Invalid::new(
            ConfigErrorKind::UnknownValue,
            "parent \"local\" never matches: spans with a local parent follow their parent's decision; expected \"none\" or \"remote\"",
        )),
        _ => Err(Invalid::new(
            ConfigErrorKind::UnknownValue,
            format!("unknown parent origin {name:?}; expected \"none\" (roots) or \"remote\" (remote parents, with remote_parents = \"cap\")"),
        )),
    }
}

/// A remote-parent policy.
pub(crate) fn remote_parents(name: &str) -> Result<RemoteParents, Invalid> {
    match name {
        "follow" => Ok(RemoteParents::Follow),
        "cap" => Ok(RemoteParents::Cap),
        _ => Err(Invalid::new(
            ConfigErrorKind::UnknownValue,
            format!("unknown remote-parent policy {name:?}; expected \"follow\" or \"cap\""),
        )),
    }
}

/// A name that must not be empty.
pub(crate) fn name(what: &str, name: &str) -> Result<(), Invalid> {
    if name.trim().is_empty() {
        Err(Invalid::new(
            ConfigErrorKind::EmptyName,
            format!("{what} is empty; give a non-empty name"),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_option_brace_groups_are_refused_and_escaped_braces_are_not() {
        assert_eq!(single_option_brace_group("/orders/{id}"), Some("{id}"));
        assert_eq!(single_option_brace_group("{a,{b}}"), Some("{b}"));
        assert_eq!(single_option_brace_group("GET /{users,orders}/*"), None);
        assert_eq!(single_option_brace_group("/orders/\\{id\\}"), None);
        assert_eq!(single_option_brace_group("[{]id[}]"), None);
        let err = glob("/orders/{id}").err().unwrap();
        assert!(
            err.message.contains("\"{id}\"") && err.message.contains("\\{"),
            "{}",
            err.message
        );
        assert!(glob("/orders/\\{id\\}").unwrap().is_match("/orders/{id}"));
    }

    #[test]
    fn windows_parse_with_units() {
        assert_eq!(window("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(window("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(window("2.5s").unwrap(), Duration::from_millis(2500));
        assert_eq!(window("1m").unwrap(), Duration::from_secs(60));
        for bad in ["", "s", "1", "1 fortnight", "-1s", "1e999s"] {
            assert!(window(bad).is_err(), "{bad}");
        }
    }
}
