//! How a built sampler tree decides: the node for the span's parent, and a rate limiter
//! in a `parent_based` branch deciding as if its span started a trace.

use opentelemetry::trace::{Link, SpanContext, SpanKind, TraceContextExt, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

use crate::clock::Clock;
use crate::config::formats::declarative::Node;
use crate::config::runtime::rule_based::RuleBasedSampler;
use crate::sampler::erase_threshold;

/// What the tree under `node` decides for a span.
pub(super) fn sample<C: Clock>(
    node: &Node<RuleBasedSampler<C>>,
    parent_context: Option<&Context>,
    trace_id: TraceId,
    name: &str,
    span_kind: &SpanKind,
    attributes: &[KeyValue],
    links: &[Link],
) -> SamplingResult {
    match node {
        Node::Sdk(s) => {
            s.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
        }
        Node::RateLimiting(s) => {
            s.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
        }
        #[cfg(feature = "composable")]
        Node::Composite(c) => {
            c.sampler
                .should_sample(parent_context, trace_id, name, span_kind, attributes, links)
        }
        Node::ParentBased(b) => {
            let span = parent_context.map(|cx| cx.span());
            let parent = span
                .as_ref()
                .map(|s| s.span_context())
                .filter(|sc| sc.is_valid());
            let Some(parent) = parent else {
                return sample(
                    &b.root,
                    parent_context,
                    trace_id,
                    name,
                    span_kind,
                    attributes,
                    links,
                );
            };
            let branch = match (parent.is_remote(), parent.is_sampled()) {
                (true, true) => &b.remote_parent_sampled,
                (true, false) => &b.remote_parent_not_sampled,
                (false, true) => &b.local_parent_sampled,
                (false, false) => &b.local_parent_not_sampled,
            };
            sample_in_branch(
                branch,
                parent,
                parent_context,
                trace_id,
                name,
                span_kind,
                attributes,
                links,
            )
        }
    }
}

/// Samples a span with a valid `parent` in a `parent_based` branch: a rate limiter
/// decides it as if it started a trace, keeping the parent's trace state.
#[allow(clippy::too_many_arguments)] // `should_sample`'s own, the node and the parent
fn sample_in_branch<C: Clock>(
    node: &Node<RuleBasedSampler<C>>,
    parent: &SpanContext,
    parent_context: Option<&Context>,
    trace_id: TraceId,
    name: &str,
    span_kind: &SpanKind,
    attributes: &[KeyValue],
    links: &[Link],
) -> SamplingResult {
    match node {
        Node::RateLimiting(s) => {
            let mut result = s.should_sample(None, trace_id, name, span_kind, attributes, links);
            result.trace_state = match result.decision {
                SamplingDecision::RecordAndSample => erase_threshold(parent.trace_state()),
                _ => parent.trace_state().clone(),
            };
            result
        }
        _ => sample(
            node,
            parent_context,
            trace_id,
            name,
            span_kind,
            attributes,
            links,
        ),
    }
}
