//! `ComposableAnnotating`.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind};
use opentelemetry::{Context, KeyValue};
use thread_local::ThreadLocal;

use crate::composable::{AttributesProvider, ComposableSampler, SamplingIntent};

/// Adds attributes to the spans its delegate keeps (the specification's
/// `ComposableAnnotating`): "Delegates the sampling decision to another sampler but adds
/// attributes to sampled spans", "Returns a `SamplingIntent` that combines the
/// delegate's threshold with additional attributes": the delegate's intent (threshold,
/// `adjusted_count_reliable`, trace-state updater) with these attributes after the
/// delegate's own.
///
/// Allocates nothing when the delegate has no attributes of its own (the intent shares
/// these) or no threshold (the span is dropped). When it has both, the two are chained
/// (the intent is made without the trace's randomness, so it cannot tell a keep from a
/// drop): the chain is remembered per thread for the delegate's provider, so a delegate
/// that hands out the same provider every time (every sampler of this crate) costs one
/// small allocation per thread, not one per decision.
pub struct ComposableAnnotating<D> {
    attributes: Arc<dyn AttributesProvider>,
    delegate: D,
    /// This thread's last chain: the delegate's provider, then these attributes.
    chains: ThreadLocal<RefCell<Option<Arc<Chain>>>>,
}

impl<D: Clone> Clone for ComposableAnnotating<D> {
    fn clone(&self) -> Self {
        Self {
            attributes: Arc::clone(&self.attributes),
            delegate: self.delegate.clone(),
            chains: ThreadLocal::new(),
        }
    }
}

impl<D: fmt::Debug> fmt::Debug for ComposableAnnotating<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ComposableAnnotating")
            .field("attributes", &self.attributes)
            .field("delegate", &self.delegate)
            .finish_non_exhaustive()
    }
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
            chains: ThreadLocal::new(),
        }
    }

    /// `theirs`, then these attributes: this thread's last chain when it chains the same
    /// provider, else a new one, remembered.
    fn chain(&self, theirs: Arc<dyn AttributesProvider>) -> Arc<Chain> {
        let mut last = self.chains.get_or_default().borrow_mut();
        match &*last {
            Some(chain) if Arc::ptr_eq(&chain.0, &theirs) => Arc::clone(chain),
            _ => {
                let chain = Arc::new(Chain(theirs, Arc::clone(&self.attributes)));
                *last = Some(Arc::clone(&chain));
                chain
            }
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
    ) -> SamplingIntent<'_> {
        let mut intent = self
            .delegate
            .sampling_intent(parent, name, kind, attributes, links);
        match intent.take_attributes() {
            None => intent.with_attributes(Arc::clone(&self.attributes)),
            // No threshold: dropped, no attributes asked.
            Some(theirs) if intent.threshold().is_none() => intent.with_attributes(theirs),
            Some(theirs) => intent.with_attributes(self.chain(theirs)),
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
