//! Checks shared by every format: each returns what was wrong and what is accepted, and
//! the format adds the file, the position and the key.

use std::time::Duration;

use opentelemetry::trace::SpanKind;

use crate::config::error::{ConfigError, ConfigErrorKind, Pos};
use crate::limit::{Limit, LimitError};
use crate::limiter::{Algorithm, DEFAULT_MAX_KEYS, MAX_KEYS};
use crate::pattern::Pattern;
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
        let mut err = self.kind.error(file, self.message).at(pos, key);
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

/// A limit's window: a duration [`Limit`] accepts (from [`Limit::MIN_WINDOW`] to 2^64 − 1
/// ns), checked here so that a bad window is blamed on `window`, not on `limit`.
pub(crate) fn limit_window(text: &str) -> Result<Duration, Invalid> {
    let window = window(text)?;
    Limit::per_window(1, window).map_err(Invalid::limit)?;
    Ok(window)
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

/// A limit's scope.
pub(crate) fn scope(name: &str) -> Result<crate::config::model::Scope, Invalid> {
    use crate::config::model::Scope;
    match name {
        "local" => Ok(Scope::Local),
        "fleet" if cfg!(feature = "redis") => Ok(Scope::Fleet),
        "fleet" => Err(Invalid::new(
            ConfigErrorKind::MissingFeature,
            "scope = \"fleet\" needs otel-rate-sampler's `redis` feature, which this build lacks; enable it (features = [\"config\", \"redis\"]) or use scope = \"local\"",
        )),
        _ => Err(Invalid::new(
            ConfigErrorKind::UnknownValue,
            format!("unknown scope {name:?}; expected \"local\" (each process keeps its own limit, the default) or \"fleet\" (every replica shares one limit through Redis)"),
        )),
    }
}

/// A service name, rule name or prefix that becomes part of a fleet key.
pub(crate) fn fleet_key_part(part: &str) -> Result<(), Invalid> {
    if part.is_empty() || part.contains(['{', '}']) || part.chars().any(char::is_whitespace) {
        Err(Invalid::new(
            ConfigErrorKind::InvalidFleetKey,
            format!("{part:?} becomes part of a Redis key of a fleet-scoped limit and must be non-empty, without '{{', '}}' or whitespace"),
        ))
    } else {
        Ok(())
    }
}

/// The `[fleet]` table's Redis URLs (their syntax is checked when the limiter is built).
pub(crate) fn redis_urls(urls: &[String]) -> Result<(), Invalid> {
    if urls.is_empty() {
        return Err(Invalid::new(
            ConfigErrorKind::MissingKey,
            "no Redis URL given; use redis = \"redis://host:6379\", or a list of a cluster's seed nodes",
        ));
    }
    // The URL itself is not repeated: it may hold a password.
    match urls.iter().position(|u| !u.contains("://")) {
        Some(i) => Err(Invalid::new(
            ConfigErrorKind::UnknownValue,
            format!("URL {} of {} is not a Redis URL; expected redis://[user:password@]host:port[/db] (rediss:// for TLS)", i + 1, urls.len()),
        )),
        None => Ok(()),
    }
}

/// The `[fleet]` table's `sync_interval`.
pub(crate) fn sync_interval(text: &str) -> Result<Duration, Invalid> {
    let interval = window(text)?;
    if interval < Duration::from_millis(1) {
        return Err(Invalid::new(
            ConfigErrorKind::InvalidLimit,
            format!("sync_interval {text:?} is below 1 ms; use a duration such as \"100ms\""),
        ));
    }
    Ok(interval)
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

/// A `fair_by`'s `max_keys` as written: from 1 to [`MAX_KEYS`].
pub(crate) fn max_keys(n: i64) -> Result<u32, Invalid> {
    match u32::try_from(n) {
        Ok(n) if n >= 1 && n as usize <= MAX_KEYS => Ok(n),
        _ => Err(Invalid::new(
            ConfigErrorKind::InvalidLimit,
            format!("max_keys {n} is out of range; use a whole number from 1 to {MAX_KEYS} (default {DEFAULT_MAX_KEYS})"),
        )),
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
