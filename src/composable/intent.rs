//! `SamplingIntent`: what a composable sampler would do, before the decision.

use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::TraceState;
use opentelemetry::KeyValue;

use crate::composable::Threshold;

/// The specification's `attributes_provider`: the attributes a kept span gets. Asked
/// only when the span is kept, so a drop never builds them.
pub trait AttributesProvider: fmt::Debug + Send + Sync {
    /// Appends the attributes to `attributes`.
    fn provide(&self, attributes: &mut Vec<KeyValue>);
}

impl AttributesProvider for Vec<KeyValue> {
    fn provide(&self, attributes: &mut Vec<KeyValue>) {
        attributes.extend_from_slice(self);
    }
}

impl AttributesProvider for [KeyValue] {
    fn provide(&self, attributes: &mut Vec<KeyValue>) {
        attributes.extend_from_slice(self);
    }
}

/// The specification's `trace_state_provider`: a change to the span's trace state.
///
/// It MUST NOT change the `ot` entry (the specification's rule): the
/// [`CompositeSampler`](crate::CompositeSampler) writes or erases `th` in `ot` after it,
/// and explicit randomness (`rv`) is never changed.
pub trait TraceStateUpdater: fmt::Debug + Send + Sync {
    /// The trace state given `trace_state`, the parent's.
    fn update(&self, trace_state: TraceState) -> TraceState;
}

/// A composable sampler's preference for a span (the specification's `SamplingIntent`):
/// an optional rejection [`Threshold`] (none: drop), whether that threshold is
/// reliable (may be written as `th` and used for adjusted counts), an optional
/// [`AttributesProvider`] and an optional [`TraceStateUpdater`].
///
/// Built from constants and shared providers: making, cloning and dropping an intent
/// allocates nothing (a provider is an [`Arc`], cloned by a reference count).
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct SamplingIntent {
    threshold: Option<Threshold>,
    threshold_reliable: bool,
    attributes: Option<Arc<dyn AttributesProvider>>,
    trace_state: Option<Arc<dyn TraceStateUpdater>>,
}

impl SamplingIntent {
    /// Drops the span: no threshold, not reliable (what
    /// [`ComposableAlwaysOff`](crate::ComposableAlwaysOff) and an unmatched
    /// [`ComposableRuleBased`](crate::ComposableRuleBased) return).
    pub const NON_SAMPLING: SamplingIntent = SamplingIntent::new(None, false);

    /// An intent with this threshold and reliability, no attributes and no trace-state
    /// change.
    pub const fn new(threshold: Option<Threshold>, threshold_reliable: bool) -> Self {
        Self {
            threshold,
            threshold_reliable,
            attributes: None,
            trace_state: None,
        }
    }

    /// This intent with `provider` for the attributes of a kept span (replacing any).
    pub fn with_attributes(mut self, provider: Arc<dyn AttributesProvider>) -> Self {
        self.attributes = Some(provider);
        self
    }

    /// This intent with `updater` for the span's trace state (replacing any).
    pub fn with_trace_state_updater(mut self, updater: Arc<dyn TraceStateUpdater>) -> Self {
        self.trace_state = Some(updater);
        self
    }

    /// The rejection threshold; `None` drops the span.
    pub fn threshold(&self) -> Option<Threshold> {
        self.threshold
    }

    /// Whether the threshold may be written as `th` and used to estimate counts.
    pub fn threshold_reliable(&self) -> bool {
        self.threshold_reliable
    }

    /// The attributes a kept span gets, if any.
    pub fn attributes_provider(&self) -> Option<&Arc<dyn AttributesProvider>> {
        self.attributes.as_ref()
    }

    /// The change to the span's trace state, if any.
    pub fn trace_state_updater(&self) -> Option<&Arc<dyn TraceStateUpdater>> {
        self.trace_state.as_ref()
    }

    /// Whether a trace with this randomness is kept: a threshold that keeps it.
    #[inline]
    pub fn keeps(&self, randomness: u64) -> bool {
        self.threshold.is_some_and(|t| t.keeps(randomness))
    }

    /// This intent with another threshold and reliability (providers kept).
    pub(crate) fn with_threshold(mut self, threshold: Option<Threshold>, reliable: bool) -> Self {
        self.threshold = threshold;
        self.threshold_reliable = reliable;
        self
    }

    /// The attributes provider, taken out (for a decorator that extends it).
    pub(crate) fn take_attributes(&mut self) -> Option<Arc<dyn AttributesProvider>> {
        self.attributes.take()
    }
}
