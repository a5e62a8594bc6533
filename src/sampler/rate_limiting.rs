use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

use super::attributes::{self, RATELIMITING};
use super::fair_by::FairBy;
use super::parent::{self, drop_span, Origin, RemoteParents};
use super::trace_state::erase_threshold;
use crate::clock::{Clock, MonotonicClock};
use crate::limit::{Limit, LimitError};
use crate::limiter::{Algorithm, AnyLimiter, FairAdmission, FairStats, RateLimiter};
use crate::stats::{self, Counters, DropReason, Event, SamplerStats, WindowFill};

/// An OpenTelemetry sampler that keeps at most `N` traces per window.
///
/// * A **root** span (no valid parent) asks the limiter: kept spans are
///   `RecordAndSample` and carry [`sampler.type`](crate::attributes::SAMPLER_TYPE)` =
///   "ratelimiting"` and [`sampler.param`](crate::attributes::SAMPLER_PARAM)` = <traces
///   per second>`; refused ones are `Drop` (never
///   `RecordOnly`, which a `BatchSpanProcessor` would still export).
/// * A span with a **local** parent follows the parent's sampled flag, so a kept trace
///   is kept whole and costs one permit.
/// * A span with a **remote** parent follows its sampled flag too, or asks the limiter
///   under [`RemoteParents::Cap`].
///
/// The sampler is its own parent policy (do not wrap it in `Sampler::ParentBased`, which
/// throws away a delegate's attributes and trace state). On the spans it keeps by its
/// own decision it erases the OTEP 235 `ot=th` threshold from the trace state: a hard
/// cap has no known sampling probability. The reject path allocates nothing.
///
/// Clones share one limiter, so one budget, and one set of counters: [`stats`](Self::stats)
/// says what was kept and what was dropped, and why, for a nanosecond or so per decision
/// (per-thread counters, no write another thread makes; see `BENCHMARKS.md`).
///
/// ```
/// use opentelemetry::trace::{Tracer, TracerProvider};
/// use opentelemetry_sdk::trace::SdkTracerProvider;
/// use otel_rate_sampler::{Limit, RateLimitingSampler};
///
/// let sampler = RateLimitingSampler::builder(Limit::per_second(100.0)?).build();
/// let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
/// provider.tracer("app").in_span("root", |_cx| { /* at most 100 such traces a second */ });
/// # Ok::<(), otel_rate_sampler::LimitError>(())
/// ```
pub struct RateLimitingSampler<L = AnyLimiter> {
    inner: Arc<Inner<L>>,
}

struct Inner<L> {
    limiter: L,
    remote_parents: RemoteParents,
    /// `limiter.limit().per_second_rate()`, computed once.
    param: f64,
    /// The decision counters (`None`: counting turned off).
    counters: Option<Counters>,
    /// Fair shares per key (`fair_by`): what makes the key, and the limiter's keyed
    /// calls (set where `L` is a [`FairLimiter`](crate::FairLimiter)).
    fair: Option<Fair<L>>,
}

/// A fair sampler's keys and its limiter's keyed calls.
pub(super) struct Fair<L> {
    pub(super) by: FairBy,
    pub(super) acquire: fn(&L, u64) -> Option<FairAdmission>,
    pub(super) stats: fn(&L) -> FairStats,
}

impl RateLimitingSampler {
    /// A builder for a sampler on one of the crate's limiters.
    pub fn builder(limit: Limit) -> RateLimitingSamplerBuilder {
        RateLimitingSamplerBuilder {
            limit,
            algorithm: Algorithm::default(),
            clock: MonotonicClock::new(),
            remote_parents: RemoteParents::default(),
            count_decisions: true,
        }
    }

    /// A fixed-window sampler keeping at most `rate` traces per second (fractional rates
    /// allowed, see [`Limit::per_second`]).
    ///
    /// # Errors
    ///
    /// The [`LimitError`] of [`Limit::per_second`].
    pub fn per_second(rate: f64) -> Result<Self, LimitError> {
        Ok(Self::builder(Limit::per_second(rate)?).build())
    }
}

impl<L: RateLimiter> RateLimitingSampler<L> {
    /// A sampler asking `limiter`, following remote parents.
    pub fn new(limiter: L) -> Self {
        Self::with_remote_parents(limiter, RemoteParents::default())
    }

    /// A sampler asking `limiter`, treating remote parents as `remote_parents` says.
    pub fn with_remote_parents(limiter: L, remote_parents: RemoteParents) -> Self {
        Self::with_options(limiter, remote_parents, true, None)
    }

    pub(super) fn with_options(
        limiter: L,
        remote_parents: RemoteParents,
        count_decisions: bool,
        fair: Option<Fair<L>>,
    ) -> Self {
        let param = limiter.limit().per_second_rate();
        Self {
            inner: Arc::new(Inner {
                limiter,
                remote_parents,
                param,
                counters: count_decisions.then(Counters::new),
                fair,
            }),
        }
    }

    /// What this sampler (with all its clones) decided so far, and how full the
    /// limiter's current window is.
    ///
    /// A snapshot, cheap to take (it sums a few hundred counters and reads the limiter's
    /// state, writing nothing): exact when no decision runs meanwhile; otherwise each
    /// counter is individually exact but they are not read at one instant (see
    /// [`DecisionStats`](crate::stats::DecisionStats)).
    ///
    /// ```
    /// use opentelemetry::trace::{SpanKind, TraceId};
    /// use opentelemetry::Context;
    /// use opentelemetry_sdk::trace::ShouldSample;
    /// use otel_rate_sampler::stats::{DropReason, ParentOrigin};
    /// use otel_rate_sampler::RateLimitingSampler;
    ///
    /// let sampler = RateLimitingSampler::per_second(1.0)?;
    /// for _ in 0..3 {
    ///     let root = Context::new();
    ///     sampler.should_sample(Some(&root), TraceId::from(1), "op", &SpanKind::Server, &[], &[]);
    /// }
    /// let stats = sampler.stats();
    /// assert_eq!(stats.decisions.kept_from(ParentOrigin::Root), 1);
    /// assert_eq!(stats.decisions.dropped_for(DropReason::RateLimit), 2);
    /// assert_eq!(stats.window.map(|w| (w.used, w.permits)), Some((1, 1)));
    /// # Ok::<(), otel_rate_sampler::LimitError>(())
    /// ```
    pub fn stats(&self) -> SamplerStats {
        let limiter = &self.inner.limiter;
        SamplerStats {
            decisions: self
                .inner
                .counters
                .as_ref()
                .map(Counters::snapshot)
                .unwrap_or_default(),
            window: limiter.count_in_window().map(|used| WindowFill {
                used,
                permits: limiter.limit().permits(),
            }),
            fair: self.inner.fair.as_ref().map(|fair| (fair.stats)(limiter)),
        }
    }

    /// The limiter this sampler (and every clone of it) asks.
    pub fn limiter(&self) -> &L {
        &self.inner.limiter
    }

    /// How remote parents are treated.
    pub fn remote_parents(&self) -> RemoteParents {
        self.inner.remote_parents
    }

    /// What makes a key, if it keeps fair shares per key.
    pub fn fair_by(&self) -> Option<&FairBy> {
        self.inner.fair.as_ref().map(|fair| &fair.by)
    }

    /// The decision for a trace this sampler decides itself (a root, or a capped remote
    /// parent): ask the limiter (for the span's key, with `fair_by`).
    #[inline]
    fn decide(
        &self,
        origin: Origin,
        parent_state: &TraceState,
        name: &str,
        span_attributes: &[KeyValue],
    ) -> SamplingResult {
        let counters = self.inner.counters.as_ref();
        // `None`: refused; `Some(None)`: kept; `Some(Some(p))`: kept with its key's
        // probability.
        let kept = match &self.inner.fair {
            None => self.inner.limiter.try_acquire().then_some(None),
            Some(fair) => {
                let key = fair.by.key_of(name, span_attributes);
                (fair.acquire)(&self.inner.limiter, key).map(|a| Some(a.probability()))
            }
        };
        if let Some(probability) = kept {
            stats::record(counters, Event::kept(origin.into()));
            SamplingResult {
                decision: SamplingDecision::RecordAndSample,
                attributes: match probability {
                    None => attributes::kept(RATELIMITING, self.inner.param),
                    Some(p) => attributes::kept_fair(self.inner.param, p),
                },
                trace_state: erase_threshold(parent_state),
            }
        } else {
            stats::record(
                counters,
                Event::dropped(DropReason::RateLimit, origin.into()),
            );
            drop_span(parent_state)
        }
    }
}

impl<L: RateLimiter + 'static> ShouldSample for RateLimitingSampler<L> {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        _trace_id: TraceId,
        name: &str,
        _span_kind: &SpanKind,
        attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        parent::apply(
            parent_context,
            self.inner.remote_parents,
            self.inner.counters.as_ref(),
            |origin, state| self.decide(origin, state, name, attributes),
        )
    }
}

impl<L> Clone for RateLimitingSampler<L> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<L: fmt::Debug> fmt::Debug for RateLimitingSampler<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitingSampler")
            .field("limiter", &self.inner.limiter)
            .field("remote_parents", &self.inner.remote_parents)
            .field("fair_by", &self.inner.fair.as_ref().map(|fair| &fair.by))
            .finish()
    }
}

/// Builds a [`RateLimitingSampler`] on one of the crate's limiters.
///
/// ```
/// use std::time::Duration;
/// use otel_rate_sampler::{Algorithm, Limit, ManualClock, RateLimitingSampler, RemoteParents};
///
/// let sampler = RateLimitingSampler::builder(Limit::per_window(10, Duration::from_secs(1))?)
///     .algorithm(Algorithm::SlidingLog)
///     .remote_parents(RemoteParents::Cap)
///     .clock(ManualClock::new())
///     .build();
/// # Ok::<(), otel_rate_sampler::LimitError>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct RateLimitingSamplerBuilder<C = MonotonicClock> {
    pub(super) limit: Limit,
    pub(super) algorithm: Algorithm,
    pub(super) clock: C,
    pub(super) remote_parents: RemoteParents,
    pub(super) count_decisions: bool,
}

impl<C: Clock> RateLimitingSamplerBuilder<C> {
    /// Whether the sampler counts its decisions for [`stats`](RateLimitingSampler::stats)
    /// (default `true`). Counting costs about a nanosecond per decision (see
    /// `BENCHMARKS.md`); turned off, `stats` reports zero decisions (and still the
    /// window).
    pub fn count_decisions(mut self, count: bool) -> Self {
        self.count_decisions = count;
        self
    }

    /// The limiting algorithm (default [`Algorithm::FixedWindow`]).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// How spans with a remote parent are treated (default [`RemoteParents::Follow`]).
    pub fn remote_parents(mut self, remote_parents: RemoteParents) -> Self {
        self.remote_parents = remote_parents;
        self
    }

    /// The clock the limiter reads (default [`MonotonicClock`]).
    pub fn clock<C2: Clock>(self, clock: C2) -> RateLimitingSamplerBuilder<C2> {
        RateLimitingSamplerBuilder {
            limit: self.limit,
            algorithm: self.algorithm,
            clock,
            remote_parents: self.remote_parents,
            count_decisions: self.count_decisions,
        }
    }

    /// Builds the sampler.
    pub fn build(self) -> RateLimitingSampler<AnyLimiter<C>> {
        let limiter = AnyLimiter::with_clock(self.algorithm, self.limit, self.clock);
        RateLimitingSampler::with_options(limiter, self.remote_parents, self.count_decisions, None)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags};
    use opentelemetry::Value;

    use super::*;
    use crate::attributes::{SAMPLER_PARAM, SAMPLER_TYPE};
    use crate::clock::ManualClock;

    fn sampler(
        permits: u32,
        remote: RemoteParents,
    ) -> RateLimitingSampler<AnyLimiter<ManualClock>> {
        RateLimitingSampler::builder(
            Limit::per_window(permits, Duration::from_secs(1))
                .unwrap()
                .unpaced(),
        )
        .remote_parents(remote)
        .clock(ManualClock::new())
        .build()
    }

    fn sample(s: &impl ShouldSample, parent: Option<&Context>) -> SamplingResult {
        s.should_sample(
            parent,
            TraceId::from(1u128),
            "op",
            &SpanKind::Internal,
            &[],
            &[],
        )
    }

    fn parent(remote: bool, sampled: bool, state: &str) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let sc = SpanContext::new(
            TraceId::from(7u128),
            SpanId::from(9u64),
            flags,
            remote,
            state.parse().unwrap(),
        );
        Context::new().with_remote_span_context(sc)
    }

    #[test]
    fn roots_ask_the_limiter_and_refusals_are_drop() {
        let s = sampler(2, RemoteParents::Follow);
        let root = Context::new();
        let kept = sample(&s, Some(&root));
        assert_eq!(kept.decision, SamplingDecision::RecordAndSample);
        assert_eq!(
            kept.attributes,
            vec![
                KeyValue::new(SAMPLER_TYPE, "ratelimiting"),
                KeyValue::new(SAMPLER_PARAM, Value::F64(2.0))
            ]
        );
        assert_eq!(sample(&s, None).decision, SamplingDecision::RecordAndSample);
        let refused = sample(&s, Some(&root));
        assert_eq!(refused.decision, SamplingDecision::Drop);
        assert!(refused.attributes.is_empty());
    }

    #[test]
    fn clones_share_one_budget() {
        let s = sampler(1, RemoteParents::Follow);
        let c = s.clone();
        assert_eq!(sample(&s, None).decision, SamplingDecision::RecordAndSample);
        assert_eq!(sample(&c, None).decision, SamplingDecision::Drop);
    }

    #[test]
    fn children_follow_their_parent_without_spending_permits() {
        let s = sampler(1, RemoteParents::Follow);
        let local_kept = parent(false, true, "a=1");
        let local_dropped = parent(false, false, "");
        for _ in 0..10 {
            let r = sample(&s, Some(&local_kept));
            assert_eq!(r.decision, SamplingDecision::RecordAndSample);
            assert_eq!(r.trace_state.header(), "a=1");
            assert_eq!(
                sample(&s, Some(&local_dropped)).decision,
                SamplingDecision::Drop
            );
        }
        // The permit is still there for a root.
        assert_eq!(sample(&s, None).decision, SamplingDecision::RecordAndSample);
    }

    #[test]
    fn remote_parents_follow_by_default_and_are_capped_on_request() {
        let follow = sampler(1, RemoteParents::Follow);
        let cap = sampler(1, RemoteParents::Cap);
        let remote_kept = parent(true, true, "ot=th:8;rv:01,b=2");
        for _ in 0..3 {
            let r = sample(&follow, Some(&remote_kept));
            assert_eq!(r.decision, SamplingDecision::RecordAndSample);
            // Followed: the upstream's threshold still describes this trace.
            assert_eq!(r.trace_state.header(), "ot=th:8;rv:01,b=2");
        }
        let first = sample(&cap, Some(&remote_kept));
        assert_eq!(first.decision, SamplingDecision::RecordAndSample);
        // Kept by our cap: the probability is unknown, `th` goes.
        assert_eq!(first.trace_state.header(), "ot=rv:01,b=2");
        assert_eq!(first.attributes.len(), 2);
        assert_eq!(
            sample(&cap, Some(&remote_kept)).decision,
            SamplingDecision::Drop
        );
        let remote_dropped = parent(true, false, "");
        let cap2 = sampler(5, RemoteParents::Cap);
        assert_eq!(
            sample(&cap2, Some(&remote_dropped)).decision,
            SamplingDecision::Drop
        );
    }

    #[test]
    fn sampler_param_is_the_fractional_rate() {
        let s = RateLimitingSampler::per_second(0.5).unwrap();
        let r = sample(&s, None);
        assert!(r.attributes.contains(&KeyValue::new(SAMPLER_PARAM, 0.5)));
    }

    #[test]
    fn stats_count_every_origin_and_reason() {
        use crate::stats::{DropReason as R, ParentOrigin as O};
        let follow = sampler(1, RemoteParents::Follow);
        let root = Context::new();
        sample(&follow, Some(&root)); // kept, root
        sample(&follow, None); // rate limit, root
        sample(&follow, Some(&root)); // rate limit, root
        sample(&follow, Some(&parent(false, true, ""))); // kept, local
        sample(&follow, Some(&parent(false, false, ""))); // parent, local
        sample(&follow, Some(&parent(true, true, ""))); // kept, remote (followed)
        sample(&follow, Some(&parent(true, false, ""))); // parent, remote
        let d = follow.stats().decisions;
        assert_eq!((d.kept(), d.dropped(), d.total()), (3, 4, 7));
        assert_eq!(
            O::ALL.map(|o| d.kept_from(o)),
            [1, 1, 1],
            "kept: root, local, remote"
        );
        assert_eq!(d.dropped_for_from(R::RateLimit, O::Root), 2);
        assert_eq!(d.dropped_for_from(R::Parent, O::Local), 1);
        assert_eq!(d.dropped_for_from(R::Parent, O::Remote), 1);
        for reason in [R::ServiceCap, R::Probability, R::NoRule] {
            assert_eq!(d.dropped_for(reason), 0, "{reason:?}");
        }
        // `iter` lists every possible pair once, and adds up.
        assert_eq!(d.iter().count(), 3 + 2 * 5);
        assert_eq!(d.iter().map(|(_, _, n)| n).sum::<u64>(), 7);

        let cap = sampler(1, RemoteParents::Cap);
        sample(&cap, Some(&parent(true, true, ""))); // kept, remote (ours)
        sample(&cap, Some(&parent(true, true, ""))); // rate limit, remote
        sample(&cap, Some(&parent(true, false, ""))); // parent, remote
        let d = cap.stats().decisions;
        assert_eq!(d.kept_from(O::Remote), 1);
        assert_eq!(d.dropped_for_from(R::RateLimit, O::Remote), 1);
        assert_eq!(d.dropped_for_from(R::Parent, O::Remote), 1);
        assert_eq!(d.total(), 3);
    }

    #[test]
    fn stats_report_the_window_and_clones_share_the_counters() {
        let clock = ManualClock::new();
        let s = RateLimitingSampler::builder(
            Limit::per_window(3, Duration::from_secs(1))
                .unwrap()
                .unpaced(),
        )
        .clock(clock.clone())
        .build();
        let c = s.clone();
        sample(&s, None);
        sample(&c, None);
        let stats = c.stats();
        assert_eq!(stats.decisions.kept(), 2);
        let window = stats.window.unwrap();
        assert_eq!((window.used, window.permits), (2, 3));
        clock.advance(Duration::from_secs(1));
        assert_eq!(s.stats().window.unwrap().used, 0, "a new window");
        assert_eq!(s.stats().decisions.kept(), 2, "counts are not per window");
    }

    #[test]
    fn counting_can_be_turned_off() {
        let s = RateLimitingSampler::builder(Limit::per_window(1, Duration::from_secs(1)).unwrap())
            .clock(ManualClock::new())
            .count_decisions(false)
            .build();
        sample(&s, None);
        sample(&s, None);
        let stats = s.stats();
        assert_eq!(stats.decisions.total(), 0);
        assert_eq!(stats.window.unwrap().used, 1);
    }
}
