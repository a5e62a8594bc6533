//! [`RuleSet::decide`]: the first rule that matches (else the default), its verdict,
//! then the cap, counting the outcome in the rule's counters. The refusal path
//! allocates nothing.

use opentelemetry::trace::{SpanKind, TraceId, TraceState};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult};

use super::compiled::{Action, Compiled};
use super::RuleSet;
use crate::clock::Clock;
use crate::config::compile::permit::{Made, Permit};
use crate::config::compile::rule_limiter::RuleLimiter;
use crate::sampler::attributes::{RuleAttributes, SAMPLER_KEY_PROBABILITY};
use crate::sampler::{decide_consistent, drop_span, erase_threshold, Kept, Origin, Verdict};
use crate::stats::{DropReason, Event};

/// A rule's keep: the consistent keep (`None` for a limit's keep, which has no known
/// probability: `th` goes), the attributes the span records and, under `fair_by`, its
/// key's probability in the window.
type Keep<'a> = (Option<Kept>, &'a RuleAttributes, Option<f64>);

/// The span a decision is for, as the key of `fair_by` reads it.
#[derive(Clone, Copy)]
struct Span<'a> {
    name: &'a str,
    attributes: &'a [KeyValue],
}

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
        let span = Span { name, attributes };
        match self.keep(chosen, origin, trace_id, parent_state, span) {
            Some((consistent, kept_attributes, key_probability)) => {
                // The trace state first, then the `Vec` straight into the result (see
                // `drop_span`).
                let trace_state = match consistent {
                    Some(kept) => kept.trace_state(parent_state),
                    None => erase_threshold(parent_state),
                };
                let mut attributes = kept_attributes.to_vec();
                if let Some(p) = key_probability {
                    attributes.push(KeyValue::new(SAMPLER_KEY_PROBABILITY, p));
                }
                SamplingResult {
                    decision: SamplingDecision::RecordAndSample,
                    attributes,
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
        span: Span<'_>,
    ) -> Option<Keep<'a>> {
        let Some(chosen) = chosen.or(self.default.as_ref()) else {
            self.unmatched
                .record(Event::dropped(DropReason::NoRule, origin.into()));
            return None;
        };
        let (keep, permit) = chosen.verdict(origin, trace_id, parent_state, span)?;
        let Some((cap, cap_probability)) = self.within_cap(chosen, span) else {
            // Not kept: the rule's permit goes back, so its limit counts kept spans only
            // (a rule of N under a cap that refuses some keeps N when offered enough).
            permit.release();
            chosen
                .counters
                .record(Event::dropped(DropReason::ServiceCap, origin.into()));
            return None;
        };
        if !permit.confirm() {
            // A sliding log's room, found before the cap was asked, taken by another
            // call meanwhile: the cap's permit goes back.
            cap.give_back();
            chosen
                .counters
                .record(Event::dropped(DropReason::RateLimit, origin.into()));
            return None;
        }
        chosen.counters.record(Event::kept(origin.into()));
        // Kept by the rule's shares and the cap's: the product of the two.
        let (kept, attributes, rule_probability) = keep;
        let probability = match (rule_probability, cap_probability) {
            (None, None) => None,
            (r, c) => Some(r.unwrap_or(1.0) * c.unwrap_or(1.0)),
        };
        Some((kept, attributes, probability))
    }

    /// The cap's permit (`Made(None)` without a cap) for a span `chosen` kept: the
    /// rule's reserved floor first, then the shared pool (by the span's key under the
    /// cap's `fair_by`, with the key's probability: a permit not given back); `None`
    /// if it refuses.
    #[inline]
    fn within_cap<'a>(
        &'a self,
        chosen: &'a Compiled<C>,
        span: Span<'_>,
    ) -> Option<(Made<'a, C>, Option<f64>)> {
        if self.cap.is_none() {
            return Some((Made(None), None));
        }
        if let Some(made) = chosen.floor.as_ref().and_then(RuleLimiter::admit) {
            return Some((made, None));
        }
        match &self.shared_fair {
            Some(fair) => fair
                .acquire(span.name, span.attributes)
                .map(|p| (Made(None), Some(p))),
            None => self
                .shared
                .as_ref()
                .and_then(RuleLimiter::admit)
                .map(|made| (made, None)),
        }
    }
}

impl<C: Clock> Compiled<C> {
    /// Whether the rule keeps the span, before the cap, with the permit the keep took
    /// (to give back if the cap refuses it); a refusal is counted here. A probability's
    /// keep carries its threshold (raised to a capped remote parent's, never lowered).
    #[inline]
    fn verdict(
        &self,
        origin: Origin,
        trace_id: TraceId,
        parent: &TraceState,
        span: Span<'_>,
    ) -> Option<(Keep<'_>, Permit<'_, C>)> {
        let second_stage = origin == Origin::Remote;
        let consistent = |threshold| decide_consistent(threshold, trace_id, parent, second_stage);
        let (refusal, keep) = match &self.action {
            // Under `fair_by`, the key's shares: an admission made at once (not given
            // back if the cap then refuses the span).
            Action::Limit(l) => (
                DropReason::RateLimit,
                match &self.fair {
                    Some(fair) => fair
                        .acquire(span.name, span.attributes)
                        .map(|p| ((None, &self.attributes, Some(p)), Permit::none())),
                    None => l.take().map(|p| ((None, &self.attributes, None), p)),
                },
            ),
            // A lower bound only adds to what the probability keeps: every refusal
            // below is the probability's.
            Action::Probability(threshold) => (
                DropReason::Probability,
                match consistent(*threshold) {
                    Verdict::Keep(kept) => {
                        Some(((Some(kept), &self.attributes, None), Permit::none()))
                    }
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
                        let permit = lower_bound.take().unwrap_or_else(Permit::none);
                        Some(((Some(kept), &self.attributes, None), permit.optional()))
                    }
                    // Refused by probability: kept like a rate-limited trace if the
                    // bound admits it (no `th`: it was not sampled at the rule's
                    // probability).
                    Verdict::Drop => lower_bound
                        .take()
                        .map(|p| ((None, bound_attributes, None), p)),
                },
            ),
            Action::Adaptive { adaptive, .. } => {
                // Every decision of this rule was offered to it.
                let threshold = adaptive.threshold(|| self.counters.snapshot().total());
                match consistent(threshold) {
                    Verdict::Keep(kept) => match Permit::take(adaptive.cap()) {
                        Some(p) => return Some(((Some(kept), &self.attributes, None), p)),
                        // Kept by the probability, refused by the adaptive rule's own cap.
                        None => (DropReason::RateLimit, None),
                    },
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
