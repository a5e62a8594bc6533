//! `ComposableAnnotating`.

use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind};
use opentelemetry::{Context, KeyValue};

use crate::composable::{AttributesProvider, ComposableSampler, SamplingIntent};

/// Adds attributes to the spans its delegate keeps (the specification's
/// `ComposableAnnotating`): "Delegates the sampling decision to another sampler but adds
/// attributes to sampled spans", "Returns a `SamplingIntent` that combines the
/// delegate's threshold with additional attributes": the delegate's intent (threshold,
/// `adjusted_count_reliable`, trace-state updater) with these attributes after the
/// delegate's own.
///
/// Allocates nothing when the delegate has no attributes of its own (the intent shares
/// these) or no threshold (the span is dropped); when it has both, the two are chained,
/// one small allocation. (The intent is made without the trace's randomness, so it
/// cannot tell a keep from a drop.)
#[derive(Clone, Debug)]
pub struct ComposableAnnotating<D> {
    attributes: Arc<dyn AttributesProvider>,
    delegate: D,
}

impl<D: ComposableSampler> ComposableAnnotating<D> {
    /// Adds `attributes` to what `delegate` keeps.
    pub fn new(attributes: impl Into<Vec<KeyValue>>, delegate: D) -> Self {
        Self::with_provider(Arc::new(attributes.into()), delegate)
    }

    /// Adds what `provider` provides to what `delegate` keeps.
    pub fn with_provider(provider: Arc<dyn AttributesProvider>, delegate: D) -> Self {
        Self {
            attributes: provider,
            delegate,
        }
    }

    /// The delegate.
    pub fn delegate(&self) -> &D {
        &self.delegate
    }
}

impl<D: ComposableSampler> ComposableSampler for ComposableAnnotating<D> {
    fn sampling_intent(
        &self,
        parent: Option<&Context>,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingIntent {
        let mut intent = self
            .delegate
            .sampling_intent(parent, name, kind, attributes, links);
        let own = Arc::clone(&self.attributes);
        match intent.take_attributes() {
            None => intent.with_attributes(own),
            // No threshold: dropped, no attributes asked.
            Some(theirs) if intent.threshold().is_none() => intent.with_attributes(theirs),
            Some(theirs) => intent.with_attributes(Arc::new(Chain(theirs, own))),
        }
    }
}

/// The delegate's attributes, then the annotator's.
#[derive(Debug)]
struct Chain(Arc<dyn AttributesProvider>, Arc<dyn AttributesProvider>);

impl AttributesProvider for Chain {
    fn provide(&self, attributes: &mut Vec<KeyValue>) {
        self.0.provide(attributes);
        self.1.provide(attributes);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use opentelemetry_sdk::trace::SamplingDecision::{Drop, RecordAndSample};

    use super::*;
    use crate::composable::test_support::{decide, intent};
    use crate::composable::{ComposableAlwaysOff, ComposableProbability, Threshold};

    #[test]
    fn adds_attributes_to_what_the_delegate_keeps_and_keeps_its_threshold() {
        let s = ComposableAnnotating::new(
            [KeyValue::new("sampler", "half")],
            ComposableProbability::new(0.5).unwrap(),
        );
        let i = intent(&s, None, &[]);
        assert_eq!(i.threshold(), Threshold::from_value(1 << 55));
        assert!(i.adjusted_count_reliable());
        let kept = decide(&s, None, 1 << 55, &[]);
        assert_eq!(kept.decision, RecordAndSample);
        assert_eq!(kept.attributes, vec![KeyValue::new("sampler", "half")]);
        assert_eq!(kept.trace_state.header(), "ot=th:8");
        let dropped = decide(&s, None, (1 << 55) - 1, &[]);
        assert_eq!(dropped.decision, Drop);
        assert!(
            dropped.attributes.is_empty(),
            "attributes only on kept spans"
        );
        let off = ComposableAnnotating::new([KeyValue::new("k", 1)], ComposableAlwaysOff);
        assert!(decide(&off, None, (1 << 56) - 1, &[]).attributes.is_empty());
    }

    #[test]
    fn nested_annotators_add_the_delegates_attributes_first() {
        let inner = ComposableAnnotating::new(
            [KeyValue::new("a", 1)],
            ComposableProbability::new(0.5).unwrap(),
        );
        let outer = ComposableAnnotating::new(vec![KeyValue::new("b", 2)], inner);
        let kept = decide(&outer, None, 1 << 55, &[]);
        assert_eq!(
            kept.attributes,
            vec![KeyValue::new("a", 1), KeyValue::new("b", 2)]
        );
        assert!(decide(&outer, None, 0, &[]).attributes.is_empty());
    }
}
