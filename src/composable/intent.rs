//! `SamplingIntent`: what a composable sampler would do, before the decision.

use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::TraceState;
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SamplingDecision;

use crate::composable::admission::{Admission, Ticketed};
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
/// "The sampler calls the received `trace_state_provider` function passing the parent
/// `Tracestate` and the final sampling `Decision` to get the new `Tracestate` to be
/// associated with the `Span`" (the specification's `CompositeSampler`): it is called
/// for a kept span and for a dropped one, `decision` says which (`RecordAndSample` or
/// `Drop`).
///
/// "ComposableSamplers MUST NOT modify the OpenTelemetry TraceState (i.e., the `ot`
/// sub-key of TraceState)": the [`CompositeSampler`](crate::CompositeSampler) writes or
/// erases `th` in `ot` after it, and explicit randomness (`rv`) is never changed.
pub trait TraceStateUpdater: fmt::Debug + Send + Sync {
    /// The trace state given `trace_state`, the parent's, and the final `decision`.
    fn update(&self, trace_state: TraceState, decision: SamplingDecision) -> TraceState;
}

/// A composable sampler's preference for a span (the specification's `SamplingIntent`,
/// "the sampler's preference for sampling a Span, without actually making the final
/// decision"):
///
/// * [`threshold`](Self::threshold): "The sampling threshold value. A lower threshold
///   increases the likelihood of sampling." None: the span is dropped.
/// * [`adjusted_count_reliable`](Self::adjusted_count_reliable): "A boolean indicating
///   if the threshold can be reliably used for Span-to-Metrics estimation". When it is
///   `true` the [`CompositeSampler`](crate::CompositeSampler) compares the threshold
///   with the trace's randomness and writes it as `th`; when `false`, with a fresh
///   random value, and erases `th`.
/// * [`attributes_provider`](Self::attributes_provider): "An optional provider of
///   attributes to be added to the span if it is sampled."
/// * [`trace_state_updater`](Self::trace_state_updater): "An optional provider of a
///   modified TraceState."
///
/// A decorator changes its delegate's intent (as the built-ins do) rather than build a
/// new one: an intent from [`ComposableRateLimiting`](crate::ComposableRateLimiting)
/// also carries its hard cap, which the `CompositeSampler` applies after the threshold.
///
/// Built from constants and shared providers: making, cloning and dropping an intent
/// allocates nothing (a provider is an [`Arc`], cloned by a reference count).
///
/// The lifetime `'a` is the sampler's that made the intent: an intent may borrow from
/// it (our cap does, so that carrying it writes nothing shared) and lives no longer
/// than the call that asked for it. An intent made of constants and providers alone is
/// a `SamplingIntent<'static>`; `-> SamplingIntent` in an implementation of
/// [`ComposableSampler`](crate::ComposableSampler) elides it to the sampler's.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct SamplingIntent<'a> {
    threshold: Option<Threshold>,
    adjusted_count_reliable: bool,
    attributes: Option<Arc<dyn AttributesProvider>>,
    trace_state: Option<Arc<dyn TraceStateUpdater>>,
    admission: Option<Ticketed<'a>>,
}

impl<'a> SamplingIntent<'a> {
    /// Drops the span: no threshold, not reliable (what
    /// [`ComposableAlwaysOff`](crate::ComposableAlwaysOff) and an unmatched
    /// [`ComposableRuleBased`](crate::ComposableRuleBased) return).
    pub const NON_SAMPLING: Self = Self::new(None, false);

    /// An intent with this threshold and `adjusted_count_reliable`, no attributes and no
    /// trace-state change.
    pub const fn new(threshold: Option<Threshold>, adjusted_count_reliable: bool) -> Self {
        Self {
            threshold,
            adjusted_count_reliable,
            attributes: None,
            trace_state: None,
            admission: None,
        }
    }

    /// This intent with `provider` for the attributes of a kept span (replacing any).
    #[inline]
    pub fn with_attributes(mut self, provider: Arc<dyn AttributesProvider>) -> Self {
        self.attributes = Some(provider);
        self
    }

    /// This intent with `updater` for the span's trace state (replacing any).
    #[inline]
    pub fn with_trace_state_updater(mut self, updater: Arc<dyn TraceStateUpdater>) -> Self {
        self.trace_state = Some(updater);
        self
    }

    /// The rejection threshold; `None` drops the span.
    #[inline]
    pub fn threshold(&self) -> Option<Threshold> {
        self.threshold
    }

    /// Whether the threshold "can be reliably used for Span-to-Metrics estimation": the
    /// [`CompositeSampler`](crate::CompositeSampler) then compares it with the trace's
    /// randomness and writes it as `th` on a kept span; otherwise it compares it with a
    /// fresh random value and erases `th`.
    #[inline]
    pub fn adjusted_count_reliable(&self) -> bool {
        self.adjusted_count_reliable
    }

    /// The former name of [`adjusted_count_reliable`](Self::adjusted_count_reliable)
    /// (the specification's first draft called the flag `threshold_reliable`).
    #[deprecated(note = "the specification names it `adjusted_count_reliable`; use that")]
    pub fn threshold_reliable(&self) -> bool {
        self.adjusted_count_reliable
    }

    /// The attributes a kept span gets, if any.
    #[inline]
    pub fn attributes_provider(&self) -> Option<&Arc<dyn AttributesProvider>> {
        self.attributes.as_ref()
    }

    /// The change to the span's trace state, if any.
    #[inline]
    pub fn trace_state_updater(&self) -> Option<&Arc<dyn TraceStateUpdater>> {
        self.trace_state.as_ref()
    }

    /// Whether the threshold keeps a trace with this randomness: a threshold that keeps
    /// it. (A hard cap the intent carries may still drop the span: the
    /// [`CompositeSampler`](crate::CompositeSampler) makes the decision.)
    #[inline]
    pub fn keeps(&self, randomness: u64) -> bool {
        self.threshold.is_some_and(|t| t.keeps(randomness))
    }

    /// This intent with another threshold (providers, admission and reliability kept).
    #[inline]
    pub(crate) fn with_threshold(mut self, threshold: Option<Threshold>) -> Self {
        self.threshold = threshold;
        self
    }

    /// What the `CompositeSampler` asks after the threshold, if anything.
    #[inline]
    pub(crate) fn admission(&self) -> Option<&Ticketed<'a>> {
        self.admission.as_ref()
    }

    /// This intent with `admission` asked after the threshold, with `ticket` (after the
    /// one it has, if any: both must admit a span).
    #[inline]
    pub(crate) fn with_admission(mut self, admission: &'a dyn Admission, ticket: u64) -> Self {
        let ours = Ticketed::One(admission, ticket);
        self.admission = Some(match self.admission.take() {
            None => ours,
            Some(theirs) => Ticketed::Both(Arc::new((theirs, ours))),
        });
        self
    }

    /// The attributes provider, taken out (for a decorator that extends it).
    #[inline]
    pub(crate) fn take_attributes(&mut self) -> Option<Arc<dyn AttributesProvider>> {
        self.attributes.take()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    #[allow(deprecated)]
    fn the_deprecated_name_answers_as_adjusted_count_reliable() {
        for reliable in [false, true] {
            let i = SamplingIntent::new(Some(Threshold::ALWAYS), reliable);
            assert_eq!(i.adjusted_count_reliable(), reliable);
            assert_eq!(i.threshold_reliable(), reliable);
        }
    }
}
