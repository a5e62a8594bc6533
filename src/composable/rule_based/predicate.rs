//! `Predicate`: the configuration schema's rule conditions.

use opentelemetry::trace::{Link, SpanKind};
use opentelemetry::{Array, Context, Key, KeyValue, Value};

use crate::composable::parent::{origin, with_span_context};
use crate::composable::rule_based::SamplingPredicate;
use crate::composable::ComposableError;
use crate::pattern::Pattern;
use crate::stats::ParentOrigin;

/// The conditions of a rule of the declarative configuration schema's `rule_based`
/// composite sampler (`span_kinds`, `parent`, `attribute_values`,
/// `attribute_patterns`), as a [`SamplingPredicate`]. Ours: the specification leaves
/// predicates to implementations; the semantics are the schema's.
///
/// A span matches when every condition set matches; with none set, every span does.
///
/// * [`span_kinds`](Self::span_kinds): the span's kind is one of these.
/// * [`parents`](Self::parents): the parent is one of these origins (`none` for a root,
///   `local`, `remote`).
/// * [`attribute_values`](Self::attribute_values): the attribute is present and its
///   value, as text, equals one of these (exactly, case-sensitive).
/// * [`attribute_patterns`](Self::attribute_patterns): the attribute is present and its
///   value, as text, matches an `included` pattern (all are included when none is
///   given) and no `excluded` one. Patterns: `*` any run of characters, `?` one
///   character, everything else itself.
///
/// Values that are not strings are matched as text (`404`, `true`, `0.5`); an array
/// matches when any of its items does. A float is written as Rust writes it (`1` for
/// `1.0`). Matching allocates nothing (except for a float whose text exceeds 40
/// bytes).
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct Predicate {
    span_kinds: Vec<SpanKind>,
    parents: Vec<ParentOrigin>,
    attributes: Vec<AttributeCondition>,
}

/// One attribute condition: its key, the patterns a value must match (any; all values
/// when empty) and those it must not.
#[derive(Clone, Debug)]
struct AttributeCondition {
    key: Key,
    included: Vec<Pattern>,
    excluded: Vec<Pattern>,
}

impl Predicate {
    /// Matches every span (until conditions are added).
    pub fn new() -> Self {
        Self::default()
    }

    /// Only spans of one of these kinds.
    pub fn span_kinds(mut self, kinds: impl IntoIterator<Item = SpanKind>) -> Self {
        self.span_kinds.extend(kinds);
        self
    }

    /// Only spans whose parent has one of these origins.
    pub fn parents(mut self, origins: impl IntoIterator<Item = ParentOrigin>) -> Self {
        self.parents.extend(origins);
        self
    }

    /// Only spans whose attribute `key` equals, as text, one of `values`. (Each call
    /// adds a condition; all must hold.)
    pub fn attribute_values<V: AsRef<str>>(
        mut self,
        key: impl Into<Key>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.attributes.push(AttributeCondition {
            key: key.into(),
            included: values
                .into_iter()
                .map(|v| Pattern::literal(v.as_ref()))
                .collect(),
            excluded: Vec::new(),
        });
        self
    }

    /// Only spans whose attribute `key` matches one of `included` (any value when it is
    /// empty) and none of `excluded`. (Each call adds a condition; all must hold.)
    ///
    /// # Errors
    ///
    /// [`ComposableError::InvalidPattern`] for a pattern that does not compile (none
    /// of the schema's syntax fails; kept so that the error can grow).
    pub fn attribute_patterns<I: AsRef<str>, E: AsRef<str>>(
        mut self,
        key: impl Into<Key>,
        included: impl IntoIterator<Item = I>,
        excluded: impl IntoIterator<Item = E>,
    ) -> Result<Self, ComposableError> {
        let key = key.into();
        let compile = |p: &str| {
            Pattern::wildcard(p).map_err(|e| ComposableError::InvalidPattern {
                key: key.as_str().to_owned(),
                pattern: p.to_owned(),
                reason: e.to_string(),
            })
        };
        let included = included
            .into_iter()
            .map(|p| compile(p.as_ref()))
            .collect::<Result<_, _>>()?;
        let excluded = excluded
            .into_iter()
            .map(|p| compile(p.as_ref()))
            .collect::<Result<_, _>>()?;
        self.attributes.push(AttributeCondition {
            key,
            included,
            excluded,
        });
        Ok(self)
    }
}

impl SamplingPredicate for Predicate {
    fn matches(
        &self,
        parent: Option<&Context>,
        _: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        _: &[Link],
    ) -> bool {
        (self.span_kinds.is_empty() || self.span_kinds.contains(kind))
            && (self.parents.is_empty()
                || with_span_context(parent, |sc| self.parents.contains(&origin(sc))))
            && self.attributes.iter().all(|c| c.matches(attributes))
    }
}

impl AttributeCondition {
    fn matches(&self, attributes: &[KeyValue]) -> bool {
        attributes
            .iter()
            .find(|kv| kv.key == self.key)
            .is_some_and(|kv| any_item(&kv.value, |item| self.matches_item(item)))
    }

    fn matches_item(&self, item: Item<'_>) -> bool {
        (self.included.is_empty() || self.included.iter().any(|p| item.matched_by(p)))
            && !self.excluded.iter().any(|p| item.matched_by(p))
    }
}

/// One scalar of an attribute value: a string borrowed, or a number or boolean
/// (copied: no allocation).
#[derive(Clone, Copy)]
enum Item<'a> {
    Text(&'a str),
    Bool(bool),
    I64(i64),
    F64(f64),
    Other(&'a Value),
}

impl Item<'_> {
    fn matched_by(self, pattern: &Pattern) -> bool {
        match self {
            Item::Text(s) => pattern.is_match(s),
            Item::Bool(b) => pattern.matches_value(&Value::Bool(b)),
            Item::I64(i) => pattern.matches_value(&Value::I64(i)),
            Item::F64(f) => pattern.matches_value(&Value::F64(f)),
            Item::Other(v) => pattern.matches_value(v),
        }
    }
}

/// Whether `test` holds for the value, or for any item of an array.
fn any_item(value: &Value, mut test: impl FnMut(Item<'_>) -> bool) -> bool {
    match value {
        Value::String(s) => test(Item::Text(s.as_str())),
        Value::Bool(b) => test(Item::Bool(*b)),
        Value::I64(i) => test(Item::I64(*i)),
        Value::F64(f) => test(Item::F64(*f)),
        Value::Array(Array::String(items)) => items.iter().any(|s| test(Item::Text(s.as_str()))),
        Value::Array(Array::Bool(items)) => items.iter().any(|b| test(Item::Bool(*b))),
        Value::Array(Array::I64(items)) => items.iter().any(|i| test(Item::I64(*i))),
        Value::Array(Array::F64(items)) => items.iter().any(|f| test(Item::F64(*f))),
        other => test(Item::Other(other)),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use opentelemetry::trace::{SpanContext, TraceContextExt};
    use opentelemetry::StringValue;

    use super::*;
    use crate::composable::test_support::parent;

    fn m(p: &Predicate, parent: Option<&Context>, kind: SpanKind, attrs: &[KeyValue]) -> bool {
        p.matches(parent, "span", &kind, attrs, &[])
    }

    fn server(p: &Predicate, attrs: &[KeyValue]) -> bool {
        m(p, None, SpanKind::Server, attrs)
    }

    #[test]
    fn no_condition_matches_everything() {
        assert!(server(&Predicate::new(), &[]));
        assert!(m(
            &Predicate::new(),
            Some(&parent(false, true, "")),
            SpanKind::Producer,
            &[]
        ));
    }

    #[test]
    fn span_kinds_match_any_listed() {
        let p = Predicate::new().span_kinds([SpanKind::Server, SpanKind::Consumer]);
        assert!(m(&p, None, SpanKind::Consumer, &[]));
        assert!(!m(&p, None, SpanKind::Client, &[]));
        assert!(!m(&p, None, SpanKind::Internal, &[]));
    }

    #[test]
    fn parents_match_by_origin() {
        let local = parent(true, false, "");
        let remote = parent(false, true, "");
        let invalid = Context::new().with_remote_span_context(SpanContext::empty_context());
        let none = Predicate::new().parents([ParentOrigin::Root]);
        let remote_only = Predicate::new().parents([ParentOrigin::Remote]);
        let local_only = Predicate::new().parents([ParentOrigin::Local]);
        assert!(m(&none, None, SpanKind::Server, &[]));
        assert!(
            m(&none, Some(&invalid), SpanKind::Server, &[]),
            "an invalid parent is a root"
        );
        assert!(!m(&none, Some(&local), SpanKind::Server, &[]));
        assert!(m(&remote_only, Some(&remote), SpanKind::Server, &[]));
        assert!(!m(&remote_only, Some(&local), SpanKind::Server, &[]));
        assert!(m(&local_only, Some(&local), SpanKind::Server, &[]));
        assert!(!m(&local_only, None, SpanKind::Server, &[]));
    }

    #[test]
    fn attribute_values_match_exactly_as_text_and_any_array_item() {
        let p = Predicate::new().attribute_values("code", ["404", "true", "0.5", "GET"]);
        for yes in [
            KeyValue::new("code", 404),
            KeyValue::new("code", true),
            KeyValue::new("code", 0.5),
            KeyValue::new("code", "GET"),
            KeyValue::new(
                "code",
                Value::Array(vec![StringValue::from("x"), StringValue::from("GET")].into()),
            ),
            KeyValue::new("code", Value::Array(vec![1i64, 404].into())),
        ] {
            assert!(
                server(&p, &[KeyValue::new("other", 1), yes.clone()]),
                "{yes:?}"
            );
        }
        for no in [
            KeyValue::new("code", 4040),
            KeyValue::new("code", "get"),
            KeyValue::new("code", "GET "),
            KeyValue::new("code", Value::Array(vec![false].into())),
            KeyValue::new("other", "GET"),
        ] {
            assert!(!server(&p, std::slice::from_ref(&no)), "{no:?}");
        }
        assert!(!server(&p, &[]), "an absent attribute does not match");
        // Glob syntax in a value is literal.
        let star = Predicate::new().attribute_values("k", ["a*"]);
        assert!(server(&star, &[KeyValue::new("k", "a*")]));
        assert!(!server(&star, &[KeyValue::new("k", "ab")]));
    }

    #[test]
    fn attribute_patterns_include_then_exclude() {
        let p = Predicate::new()
            .attribute_patterns("url.path", ["/api/*"], ["/api/health?"])
            .unwrap();
        let path = |v: &str| [KeyValue::new("url.path", v.to_owned())];
        assert!(server(&p, &path("/api/users")));
        assert!(server(&p, &path("/api/health")), "? needs one character");
        assert!(!server(&p, &path("/api/healthz")), "excluded");
        assert!(!server(&p, &path("/web/users")), "not included");
        assert!(!server(&p, &[]), "absent");
        // Included omitted: every value but the excluded.
        let all_but = Predicate::new()
            .attribute_patterns("code", [""; 0], ["4*"])
            .unwrap();
        assert!(server(&all_but, &[KeyValue::new("code", 503)]));
        assert!(!server(&all_but, &[KeyValue::new("code", 404)]));
        assert!(!server(&all_but, &[]));
        // Arrays: any item that is included and not excluded.
        let tags = Value::Array(vec![StringValue::from("b-1"), StringValue::from("a-2")].into());
        let p = Predicate::new()
            .attribute_patterns("tags", ["a-*"], ["b*"])
            .unwrap();
        assert!(server(&p, &[KeyValue::new("tags", tags)]));
    }

    #[test]
    fn every_condition_must_hold() {
        let p = Predicate::new()
            .span_kinds([SpanKind::Server])
            .parents([ParentOrigin::Root])
            .attribute_values("a", ["1"])
            .attribute_patterns("b", ["x*"], [""; 0])
            .unwrap();
        let both = [KeyValue::new("a", 1), KeyValue::new("b", "xy")];
        assert!(server(&p, &both));
        assert!(!server(&p, &both[..1]));
        assert!(!m(&p, None, SpanKind::Client, &both));
        assert!(!m(
            &p,
            Some(&parent(true, true, "")),
            SpanKind::Server,
            &both
        ));
    }
}
