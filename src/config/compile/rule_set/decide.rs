//! [`RuleSet::decide`]: the first rule that matches (else the default), its verdict,
//! then the cap, counting the outcome in the rule's counters. The refusal path
//! allocates nothing.

use opentelemetry::trace::{SpanKind, TraceId, TraceState};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult};

use super::compiled::{Action, Compiled};
use super::RuleSet;
use crate::clock::Clock;
use crate::limiter::RateLimiter;
use crate::sampler::attributes::RuleAttributes;
use crate::sampler::{decide_consistent, drop_span, erase_threshold, Kept, Origin, Verdict};
use crate::stats::{DropReason, Event};

/// A rule's keep: the consistent keep (`None` for a limit's keep, which has no known
/// probability: `th` goes) and the attributes the span records.
type Keep<'a> = (Option<Kept>, &'a RuleAttributes);

impl<C: Clock> RuleSet<C> {
    /// The decision for a span this process decides (a root, or a capped remote
    /// parent). The reject path allocates nothing.
    #[inline]
    pub(crate) fn decide(
        &self,
        origin: Origin,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        parent_state: &TraceState,
    ) -> SamplingResult {
        let chosen = self
            .matchers
            .first_match(origin, name, kind, attributes)
            .map(|i| &self.rules[i]);
        match self.keep(chosen, origin, trace_id, parent_state) {
            Some((consistent, kept_attributes)) => {
                // The trace state first, then the `Vec` straight into the result (see
                // `drop_span`).
                let trace_state = match consistent {
                    Some(kept) => kept.trace_state(parent_state),
                    None => erase_threshold(parent_state),
                };
                SamplingResult {
                    decision: SamplingDecision::RecordAndSample,
                    attributes: kept_attributes.to_vec(),
                    trace_state,
                }
            }
            None => drop_span(parent_state),
        }
    }

    /// Whether the span is kept, by the rule `chosen` (else the default): the rule's
    /// verdict, then the cap, counted in the rule's counters.
    #[inline]
    fn keep<'a>(
        &'a self,
        chosen: Option<&'a Compiled<C>>,
        origin: Origin,
        trace_id: TraceId,
        parent_state: &TraceState,
    ) -> Option<Keep<'a>> {
        let Some(chosen) = chosen.or(self.default.as_ref()) else {
            self.unmatched
                .record(Event::dropped(DropReason::NoRule, origin.into()));
            return None;
        };
        let keep = chosen.verdict(origin, trace_id, parent_state)?;
        if !self.within_cap(chosen) {
            chosen
                .counters
                .record(Event::dropped(DropReason::ServiceCap, origin.into()));
            return None;
        }
        chosen.counters.record(Event::kept(origin.into()));
        Some(keep)
    }

    /// The cap (if any) admits a span `chosen` kept: the rule's reserved floor first,
    /// then the shared pool.
    #[inline]
    fn within_cap(&self, chosen: &Compiled<C>) -> bool {
        self.cap.is_none()
            || chosen.floor.as_ref().is_some_and(|f| f.try_acquire())
            || self.shared.as_ref().is_some_and(|s| s.try_acquire())
    }
}

impl<C: Clock> Compiled<C> {
    /// Whether the rule keeps the span, before the cap; a refusal is counted here.
    /// A probability's keep carries its threshold (raised to a capped remote parent's,
    /// never lowered).
    #[inline]
    fn verdict(&self, origin: Origin, trace_id: TraceId, parent: &TraceState) -> Option<Keep<'_>> {
        let second_stage = origin == Origin::Remote;
        let consistent = |threshold| decide_consistent(threshold, trace_id, parent, second_stage);
        let (refusal, keep) = match &self.action {
            Action::Limit(l) => (
                DropReason::RateLimit,
                l.try_acquire().then_some((None, &self.attributes)),
            ),
            // A lower bound only adds to what the probability keeps: every refusal
            // below is the probability's.
            Action::Probability(threshold) => (
                DropReason::Probability,
                match consistent(*threshold) {
                    Verdict::Keep(kept) => Some((Some(kept), &self.attributes)),
                    Verdict::Drop => None,
                },
            ),
            Action::AtLeast {
                threshold,
                lower_bound,
                bound_attributes,
            } => (
                DropReason::Probability,
                match consistent(*threshold) {
                    // Kept by probability: it also spends a permit of the lower bound
                    // if one is left, so the bound adds traces only while the
                    // probability keeps fewer than it.
                    Verdict::Keep(kept) => {
                        let _ = lower_bound.try_acquire();
                        Some((Some(kept), &self.attributes))
                    }
                    // Refused by probability: kept like a rate-limited trace if the
                    // bound admits it (no `th`: it was not sampled at the rule's
                    // probability).
                    Verdict::Drop => lower_bound
                        .try_acquire()
                        .then_some((None, bound_attributes)),
                },
            ),
            Action::Adaptive { adaptive, .. } => {
                // Every decision of this rule was offered to it.
                let threshold = adaptive.threshold(|| self.counters.snapshot().total());
                match consistent(threshold) {
                    Verdict::Keep(kept) if adaptive.admit() => {
                        return Some((Some(kept), &self.attributes))
                    }
                    // Kept by the probability, refused by the adaptive rule's own cap.
                    Verdict::Keep(_) => (DropReason::RateLimit, None),
                    Verdict::Drop => (DropReason::Probability, None),
                }
            }
        };
        if keep.is_none() {
            self.counters.record(Event::dropped(refusal, origin.into()));
        }
        keep
    }
}
