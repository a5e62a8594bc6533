//! [`Linear`]: the rules' conditions packed in one array scanned rule by rule: per rule
//! a bitmask of the span kinds and of the parent origins it accepts (the cheapest
//! tests, run first), its name glob, then its attribute conditions. The path of rule
//! sets the [`Index`](super::index::Index) does not take.

use opentelemetry::trace::SpanKind;
use opentelemetry::{KeyValue, Value};

use super::span::Span;
use crate::config::model::Rule;
use crate::pattern::{bytes_eq, Pattern};
use crate::sampler::Origin;

/// The conditions of every rule of a service, in rule order.
pub(super) struct Linear {
    rules: Box<[Matcher]>,
}

struct Matcher {
    /// Bit `kind_bit(k)` set for each accepted span kind.
    kinds: u8,
    /// Bit `origin_bit(o)` set for each accepted parent origin.
    origins: u8,
    span_name: Option<Pattern>,
    /// (key, the pattern its value must match).
    attributes: Box<[(Box<str>, Pattern)]>,
}

const ALL: u8 = u8::MAX;

fn kind_bit(kind: &SpanKind) -> u8 {
    match kind {
        SpanKind::Client => 1,
        SpanKind::Server => 2,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 8,
        SpanKind::Internal => 16,
    }
}

fn origin_bit(origin: Origin) -> u8 {
    match origin {
        Origin::Root => 1,
        Origin::Remote => 2,
    }
}

impl Linear {
    pub(super) fn new(rules: &[&Rule]) -> Self {
        let rules = rules
            .iter()
            .map(|r| Matcher {
                kinds: r.kind.as_ref().map_or(ALL, kind_bit),
                origins: r.parent.map_or(ALL, origin_bit),
                span_name: r.span_name.clone(),
                attributes: r
                    .attributes
                    .iter()
                    .map(|(key, pattern)| (key.as_str().into(), pattern.clone()))
                    .collect(),
            })
            .collect();
        Self { rules }
    }

    /// The index of the first rule matching the span, if any.
    #[inline]
    pub(super) fn first_match(&self, span: &Span<'_>) -> Option<usize> {
        let (origin, kind) = (origin_bit(span.origin), kind_bit(span.kind));
        self.rules.iter().position(|m| {
            m.origins & origin != 0
                && m.kinds & kind != 0
                && m.span_name.as_ref().is_none_or(|p| p.is_match(span.name))
                && (m.attributes.is_empty() || m.attributes_match(span.attributes))
        })
    }
}

/// Rules with up to this many attribute conditions check them all for presence first,
/// without allocating.
const MAX_FAST_ATTRIBUTES: usize = 8;

impl Matcher {
    /// Whether every attribute condition holds: every key present before any value is
    /// matched (a missing attribute is the common way a rule fails, and costs no glob).
    #[inline]
    fn attributes_match(&self, attributes: &[KeyValue]) -> bool {
        if self.attributes.len() > MAX_FAST_ATTRIBUTES {
            return self.attributes.iter().all(|(key, pattern)| {
                find(attributes, key).is_some_and(|v| pattern.matches_value(v))
            });
        }
        let mut found: [Option<&Value>; MAX_FAST_ATTRIBUTES] = [None; MAX_FAST_ATTRIBUTES];
        for ((key, _), slot) in self.attributes.iter().zip(found.iter_mut()) {
            match find(attributes, key) {
                Some(v) => *slot = Some(v),
                None => return false,
            }
        }
        self.attributes
            .iter()
            .zip(found)
            .all(|((_, pattern), v)| v.is_some_and(|v| pattern.matches_value(v)))
    }
}

/// The first attribute named `key`.
#[inline]
fn find<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .find(|kv| bytes_eq(kv.key.as_str().as_bytes(), key.as_bytes()))
        .map(|kv| &kv.value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::compile::matcher::index::Index;
    use crate::config::compile::matcher::span::reference;
    use crate::config::model::SamplingConfig;

    #[test]
    fn first_match_agrees_with_the_plain_semantics() {
        let text = r#"
[default]
rate = 1.0
remote_parents = "cap"
[[default.rule]]
span_name = "GET /health*"
rate = 1.0
[[default.rule]]
kind = "client"
parent = "remote"
rate = 1.0
[[default.rule]]
span_name = "*/admin/*"
attributes = { "http.status_code" = "5*" }
rate = 1.0
[[default.rule]]
attributes = { "region" = "us-*", "http.method" = "GET" }
rate = 1.0
[[default.rule]]
kind = "server"
span_name = "GET /{a,b}/*"
attributes = { "flag" = "true", "ratio" = "0.*" }
rate = 1.0
[[default.rule]]
parent = "none"
attributes = { "http.method" = "POST" }
rate = 1.0
"#;
        let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
        let rules = config.service("any").rules;
        let rules: Vec<&Rule> = rules.iter().collect();
        let linear = Linear::new(&rules);
        let index = Index::new(&rules).unwrap();
        let names = [
            "GET /health",
            "GET /a/admin/x",
            "x/admin/",
            "GET /b/1",
            "POST /x",
            "",
        ];
        let kinds = [SpanKind::Client, SpanKind::Server, SpanKind::Internal];
        let attribute_sets = [
            vec![],
            vec![
                KeyValue::new("http.status_code", 503),
                KeyValue::new("region", "us-east"),
            ],
            vec![
                KeyValue::new("region", "us-east"),
                KeyValue::new("http.method", "GET"),
            ],
            // The first of a repeated name counts.
            vec![
                KeyValue::new("http.method", "POST"),
                KeyValue::new("http.method", "GET"),
            ],
            vec![
                KeyValue::new("flag", true),
                KeyValue::new("ratio", 0.25),
                KeyValue::new("http.status_code", 200),
            ],
        ];
        let mut matched = 0;
        for origin in [Origin::Root, Origin::Remote] {
            for name in names {
                for kind in &kinds {
                    for kvs in &attribute_sets {
                        let want = rules
                            .iter()
                            .position(|r| reference(r, origin, name, kind, kvs));
                        let span = Span {
                            origin,
                            name,
                            kind,
                            attributes: kvs,
                        };
                        let got = linear.first_match(&span);
                        assert_eq!(got, want, "{origin:?} {name:?} {kind:?} {kvs:?}");
                        let indexed = index.first_match(&span);
                        assert_eq!(indexed, want, "{origin:?} {name:?} {kind:?} {kvs:?}");
                        matched += usize::from(got.is_some());
                    }
                }
            }
        }
        assert!(matched > 20, "{matched}");
    }
}
