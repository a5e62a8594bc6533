//! `ComposableRuleBased`: the first rule whose predicate matches decides.

mod predicate;

use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind};
use opentelemetry::{Context, KeyValue};

use crate::composable::{ComposableSampler, SamplingIntent};

pub use predicate::Predicate;

/// Whether a rule applies to a span (the specification's rule "Predicate", "a function
/// that evaluates whether a rule applies"): the inputs of
/// [`ComposableSampler::sampling_intent`], so no trace id. (OTEP 250 listed one; the
/// specification's amendment and Java's implementation drop it: a predicate must not
/// depend on the trace id, which often carries the trace's randomness, any more than a
/// threshold may.) [`Predicate`] is the configuration schema's conditions; any other
/// test can implement this.
pub trait SamplingPredicate: fmt::Debug + Send + Sync {
    /// Whether the span about to start matches.
    fn matches(
        &self,
        parent: Option<&Context>,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> bool;
}

type Rule = (Arc<dyn SamplingPredicate>, Arc<dyn ComposableSampler>);

/// Rules in order (the specification's `ComposableRuleBased`): "Evaluates a series of
/// rules based on predicates and returns the `SamplingIntent` from the first matching
/// sampler"; "If no rules match, returns a non-sampling intent" (dropped).
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
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingIntent<'_> {
        self.rules
            .iter()
            .find(|(predicate, _)| predicate.matches(parent, name, kind, attributes, links))
            .map_or(SamplingIntent::NON_SAMPLING, |(_, sampler)| {
                sampler.sampling_intent(parent, name, kind, attributes, links)
            })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use opentelemetry_sdk::trace::SamplingDecision::{Drop, RecordAndSample};
    use opentelemetry_sdk::trace::ShouldSample;

    use super::*;
    use crate::composable::test_support::{decide, intent, parent};
    use crate::composable::CompositeSampler;
    use crate::composable::{ComposableAlwaysOff, ComposableAlwaysOn, ComposableProbability};
    use crate::stats::ParentOrigin;

    #[test]
    fn the_first_matching_rule_decides() {
        let s = ComposableRuleBased::builder()
            .rule(
                Predicate::new().attribute_values("path", ["/health"]),
                ComposableAlwaysOff,
            )
            .rule(
                Predicate::new().span_kinds([SpanKind::Server]),
                ComposableAlwaysOn,
            )
            .rule(Predicate::new(), ComposableAlwaysOff)
            .build();
        assert_eq!(s.len(), 3);
        let health = [KeyValue::new("path", "/health")];
        assert_eq!(
            decide(&s, None, 0, &health).decision,
            Drop,
            "rule 1 before rule 2"
        );
        let other = [KeyValue::new("path", "/users")];
        let kept = decide(&s, None, 0, &other);
        assert_eq!(
            (kept.decision, kept.trace_state.header()),
            (RecordAndSample, "ot=th:0".into())
        );
        let client = CompositeSampler::new(s.clone()).should_sample(
            None,
            crate::composable::test_support::id(0),
            "x",
            &SpanKind::Client,
            &other,
            &[],
        );
        assert_eq!(client.decision, Drop, "rule 3");
    }

    #[test]
    fn no_rule_matching_is_a_non_sampling_intent() {
        let empty = ComposableRuleBased::builder().build();
        assert!(empty.is_empty());
        let i = intent(&empty, None, &[]);
        assert_eq!((i.threshold(), i.adjusted_count_reliable()), (None, false));
        let s = ComposableRuleBased::builder()
            .rule(
                Predicate::new().parents([ParentOrigin::Remote]),
                ComposableAlwaysOn,
            )
            .build();
        assert_eq!(decide(&s, None, (1 << 56) - 1, &[]).decision, Drop);
    }

    #[test]
    fn the_matched_delegates_intent_is_returned_whole() {
        let s = ComposableRuleBased::builder()
            .rule(Predicate::new(), ComposableProbability::new(0.5).unwrap())
            .build();
        let i = intent(&s, None, &[]);
        assert_eq!(i.threshold().map(|t| t.value()), Some(1 << 55));
        assert!(i.adjusted_count_reliable());
        let roots_only = ComposableRuleBased::builder()
            .rule(
                Predicate::new().parents([ParentOrigin::Root]),
                ComposableAlwaysOn,
            )
            .build();
        let p = parent(true, false, "");
        assert_eq!(decide(&roots_only, Some(&p), 0, &[]).decision, Drop);
        assert_eq!(decide(&roots_only, None, 0, &[]).decision, RecordAndSample);
    }
}
