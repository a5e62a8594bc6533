//! `ComposableRuleBased`: the first rule whose predicate matches decides.

mod predicate;

use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};

use crate::composable::{ComposableSampler, SamplingIntent};

pub use predicate::Predicate;

/// Whether a rule applies to a span (the specification's rule "Predicate"): the inputs
/// of [`ComposableSampler::sampling_intent`]. [`Predicate`] is the configuration
/// schema's conditions; any other test can implement this.
pub trait SamplingPredicate: fmt::Debug + Send + Sync {
    /// Whether the span about to start matches.
    fn matches(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> bool;
}

type Rule = (Arc<dyn SamplingPredicate>, Arc<dyn ComposableSampler>);

/// Rules in order (the specification's `ComposableRuleBased`): the intent of the first
/// rule whose predicate matches; with none matching, a non-sampling intent (dropped).
/// Clones share the rules.
///
/// ```
/// use opentelemetry::trace::SpanKind;
/// use otel_rate_sampler::{
///     ComposableAlwaysOff, ComposableParentThreshold, ComposableProbability,
///     ComposableRuleBased, CompositeSampler, Predicate,
/// };
///
/// let root = ComposableRuleBased::builder()
///     .rule(Predicate::new().attribute_values("url.path", ["/health"]), ComposableAlwaysOff)
///     .rule(Predicate::new().span_kinds([SpanKind::Server]), ComposableProbability::new(0.1)?)
///     .build();
/// let sampler = CompositeSampler::new(ComposableParentThreshold::new(root));
/// # Ok::<(), otel_rate_sampler::ComposableError>(())
/// ```
#[derive(Clone, Debug)]
pub struct ComposableRuleBased {
    rules: Arc<[Rule]>,
}

/// Builds a [`ComposableRuleBased`], rule by rule in order.
#[derive(Debug, Default)]
#[must_use]
pub struct ComposableRuleBasedBuilder {
    rules: Vec<Rule>,
}

impl ComposableRuleBased {
    /// A builder without rules.
    pub fn builder() -> ComposableRuleBasedBuilder {
        ComposableRuleBasedBuilder::default()
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there is no rule (every span is dropped).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

impl ComposableRuleBasedBuilder {
    /// Adds a rule: spans matching `predicate` (and no earlier rule) get `sampler`'s
    /// intent.
    pub fn rule(
        mut self,
        predicate: impl SamplingPredicate + 'static,
        sampler: impl ComposableSampler + 'static,
    ) -> Self {
        self.rules.push((Arc::new(predicate), Arc::new(sampler)));
        self
    }

    /// The sampler with the rules added so far.
    pub fn build(self) -> ComposableRuleBased {
        ComposableRuleBased {
            rules: self.rules.into(),
        }
    }
}

impl ComposableSampler for ComposableRuleBased {
    fn sampling_intent(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingIntent {
        self.rules
            .iter()
            .find(|(predicate, _)| {
                predicate.matches(parent, trace_id, name, kind, attributes, links)
            })
            .map_or(SamplingIntent::NON_SAMPLING, |(_, sampler)| {
                sampler.sampling_intent(parent, trace_id, name, kind, attributes, links)
            })
    }
}
