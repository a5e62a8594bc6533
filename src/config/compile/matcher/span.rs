//! [`Span`]: what the rules look at in a span, as the index and the linear scan read
//! it; under test, the rule semantics written plainly, the reference both agree with.

use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;

#[cfg(test)]
use crate::config::model::Rule;
use crate::sampler::Origin;

/// What the rules look at in a span.
#[derive(Clone, Copy)]
pub(super) struct Span<'a> {
    pub(super) origin: Origin,
    pub(super) name: &'a str,
    pub(super) kind: &'a SpanKind,
    pub(super) attributes: &'a [KeyValue],
}

#[cfg(test)]
/// The rule semantics written plainly: every condition, first attribute of a name.
pub(super) fn reference(
    r: &Rule,
    origin: Origin,
    name: &str,
    kind: &SpanKind,
    kvs: &[KeyValue],
) -> bool {
    r.parent.is_none_or(|p| p == origin)
        && r.kind.as_ref().is_none_or(|k| k == kind)
        && r.span_name.as_ref().is_none_or(|p| p.is_match(name))
        && r.attributes.iter().all(|(key, p)| {
            kvs.iter()
                .find(|kv| kv.key.as_str() == key)
                .is_some_and(|kv| p.matches_value(&kv.value))
        })
}
