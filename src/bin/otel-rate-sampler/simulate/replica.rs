//! One replica: its own sampler and, for a limit or a lower bound, the twin of the
//! deciding limiter, offered its arrivals tick by tick.

use std::num::NonZeroU32;

use opentelemetry::trace::TraceId;

use otel_rate_sampler::stats::DropReason;
use otel_rate_sampler::{
    Algorithm, AnyLimiter, ManualClock, RateLimiter, RuleBasedSampler, SamplingConfig,
};

use super::decider::Decider;
use super::spans::{Span, KEEP_ID, REFUSE_ID};
use crate::failure::Failure;

/// One replica: its own sampler and, for a limit rule, the twin of the rule's limiter.
pub(super) struct Replica {
    sampler: RuleBasedSampler<ManualClock>,
    twin: Option<AnyLimiter<ManualClock>>,
    /// Offered R/K per second at times `(k + phase) / (R/K)`, k = 0, 1, …: the
    /// replicas' arrivals interleave into the fleet's evenly spaced R per second.
    per_second: f64,
    phase: f64,
    /// Arrivals before the current tick.
    pub(super) offered: u64,
    /// The traces a probability has passed so far: `floor(offered × p)`.
    passed: u64,
    pub(super) kept: u64,
}

impl Replica {
    pub(super) fn new(
        config: &SamplingConfig,
        service: &str,
        clock: &ManualClock,
        decider: &Decider,
        (index, replicas): (u32, NonZeroU32),
        fleet_rate: f64,
    ) -> Result<Self, Failure> {
        let twin = match decider {
            Decider::Limit(_, limit, algorithm) => {
                Some(AnyLimiter::with_clock(*algorithm, *limit, clock.clone()))
            }
            Decider::AtLeast(_, _, bound) => Some(AnyLimiter::with_clock(
                Algorithm::FixedWindow,
                *bound,
                clock.clone(),
            )),
            _ => None,
        };
        Ok(Self {
            sampler: RuleBasedSampler::with_clock(config, service, clock.clone())?,
            twin,
            per_second: fleet_rate / f64::from(replicas.get()),
            phase: f64::from(index) / f64::from(replicas.get()),
            offered: 0,
            passed: 0,
            kept: 0,
        })
    }

    /// The arrivals before `nanos`: `ceil(r·t − phase)`.
    fn arrivals_before(&self, nanos: u64) -> u64 {
        let due = self.per_second * (nanos as f64 / 1e9) - self.phase;
        // Saturating, and monotone in `nanos`.
        due.ceil().max(0.0) as u64
    }

    /// Offers the arrivals of the tick ending at `end`; returns (offered, admitted by
    /// the rule, kept).
    pub(super) fn tick(
        &mut self,
        end: u64,
        decider: &Decider,
        span: &Span,
        capped: bool,
    ) -> Result<[u64; 3], Failure> {
        let arrived = self.arrivals_before(end).max(self.offered);
        let n = arrived - self.offered;
        self.offered = arrived;
        let (admitted, kept) = self.offer(n, decider, span, capped)?;
        self.kept += kept;
        Ok([n, admitted, kept])
    }

    /// Offers `n` arrivals at once; returns (admitted by the rule, kept).
    fn offer(
        &mut self,
        n: u64,
        decider: &Decider,
        span: &Span,
        capped: bool,
    ) -> Result<(u64, u64), Failure> {
        match decider {
            Decider::Drop => Ok((0, 0)),
            Decider::Limit(rule, ..) => self.offer_to_limit(n, rule, span, capped),
            Decider::Probability(_, p) => {
                let passed = self.passed_by(*p, n);
                Ok((passed, self.offer_passed(passed, span, capped)))
            }
            Decider::AtLeast(_, p, _) => self.offer_to_lower_bound(*p, n, span, capped),
        }
    }

    /// A limit rule (`rule`): its spans are offered one by one until one is refused
    /// (at one instant nothing frees a permit, so the rest would be refused alike), and
    /// its twin spends a permit per span kept, as the rule does (a span the cap refuses
    /// gives the rule's permit back). When the cap refused, the rule admitted the rest
    /// too; when the rule did, its twin refuses as well.
    fn offer_to_limit(
        &self,
        n: u64,
        rule: &str,
        span: &Span,
        capped: bool,
    ) -> Result<(u64, u64), Failure> {
        let twin = self.twin()?;
        let cap_refusals = || {
            self.sampler
                .stats()
                .rule(rule)
                .map_or(0, |r| r.decisions.dropped_for(DropReason::ServiceCap))
        };
        let before = if capped { cap_refusals() } else { 0 };
        let kept = (0..n)
            .take_while(|_| span.kept(&self.sampler, KEEP_ID))
            .count() as u64;
        let by_cap = kept < n && capped && cap_refusals() > before;
        if admits(twin, kept) != kept || (kept < n && !by_cap && admits(twin, 1) != 0) {
            return Err(internal(
                "the sampler and the twin of its rule's limiter disagree",
            ));
        }
        Ok((if by_cap { n } else { kept }, kept))
    }

    /// A probability with a lower bound: the probability's keeps spend the lower
    /// bound's permits first; the other arrivals take what is left.
    fn offer_to_lower_bound(
        &mut self,
        p: f64,
        n: u64,
        span: &Span,
        capped: bool,
    ) -> Result<(u64, u64), Failure> {
        let passed = self.passed_by(p, n);
        let twin = self.twin()?;
        let spending = admits(twin, passed);
        let extra = admits(twin, n - passed);
        let kept_spending = self.offer_each(spending, span, KEEP_ID);
        let kept_passed = self.offer_passed(passed - spending, span, capped);
        let kept_extra = self.offer_each(extra, span, REFUSE_ID);
        let (admitted, kept) = (passed + extra, kept_spending + kept_passed + kept_extra);
        if !capped && kept != admitted {
            return Err(internal(
                "the sampler and the twin of its rule's lower bound disagree",
            ));
        }
        Ok((admitted, kept))
    }

    /// The twin of the deciding limiter.
    fn twin(&self) -> Result<&AnyLimiter<ManualClock>, Failure> {
        self.twin
            .as_ref()
            .ok_or_else(|| internal("no twin limiter"))
    }

    /// Offers `n` spans with trace id `id`, each one; returns how many are kept.
    fn offer_each(&self, n: u64, span: &Span, id: TraceId) -> u64 {
        (0..n).filter(|_| span.kept(&self.sampler, id)).count() as u64
    }

    /// How many of `n` arrivals a probability `p` passes: from the running total
    /// `floor(offered × p)`, so that no rounding accumulates.
    fn passed_by(&mut self, p: f64, n: u64) -> u64 {
        let due = (self.offered as f64 * p).floor() as u64;
        let passed = due.saturating_sub(self.passed).min(n);
        self.passed += passed;
        passed
    }

    /// Offers `passed` spans the probability keeps (at one instant, nothing else
    /// changing): under a cap until it refuses one, else one stands for all. Returns
    /// how many are kept.
    fn offer_passed(&self, passed: u64, span: &Span, capped: bool) -> u64 {
        if capped {
            (0..passed)
                .take_while(|_| span.kept(&self.sampler, KEEP_ID))
                .count() as u64
        } else if passed > 0 && span.kept(&self.sampler, KEEP_ID) {
            passed
        } else {
            0
        }
    }
}

/// How many of `n` arrivals `twin` admits, asked until it refuses.
fn admits(twin: &AnyLimiter<ManualClock>, n: u64) -> u64 {
    (0..n).take_while(|_| twin.try_acquire()).count() as u64
}

/// An error of `simulate` itself, not of the file.
pub(super) fn internal(what: &str) -> Failure {
    Failure::File(format!(
        "otel-rate-sampler: internal error in simulate: {what}"
    ))
}
