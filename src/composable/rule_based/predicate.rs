//! `Predicate`: the configuration schema's rule conditions.

use opentelemetry::trace::{Link, SpanKind, TraceId};
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
        _: TraceId,
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
