//! `ComposableAnnotating`.

use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};

use crate::composable::parent::trace_randomness;
use crate::composable::{AttributesProvider, ComposableSampler, SamplingIntent};

/// Adds attributes to the spans its delegate keeps (the specification's
/// `ComposableAnnotating`): the delegate's intent (threshold, reliability, trace-state
/// updater) with these attributes after the delegate's own.
///
/// Allocates nothing for a span that will be dropped: when the delegate has no
/// attributes of its own, the intent shares these; when it has, the two are chained
/// (one small allocation) only if the intent keeps the span.
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
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingIntent {
        let mut intent = self
            .delegate
            .sampling_intent(parent, trace_id, name, kind, attributes, links);
        let own = Arc::clone(&self.attributes);
        match intent.take_attributes() {
            None => intent.with_attributes(own),
            // The randomness the CompositeSampler will compare: chain only for a keep.
            Some(theirs) if intent.keeps(trace_randomness(parent, trace_id)) => {
                intent.with_attributes(Arc::new(Chain(theirs, own)))
            }
            Some(theirs) => intent.with_attributes(theirs),
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
