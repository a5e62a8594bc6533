use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

use super::attributes::{self, RATELIMITING};
use super::parent::{self, drop_span, RemoteParents};
use super::trace_state::erase_threshold;
use crate::clock::{Clock, MonotonicClock};
use crate::limit::{Limit, LimitError};
use crate::limiter::{Algorithm, AnyLimiter, RateLimiter};

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
/// Clones share one limiter, so one budget.
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
}

impl RateLimitingSampler {
    /// A builder for a sampler on one of the crate's limiters.
    pub fn builder(limit: Limit) -> RateLimitingSamplerBuilder {
        RateLimitingSamplerBuilder {
            limit,
            algorithm: Algorithm::default(),
            clock: MonotonicClock::new(),
            remote_parents: RemoteParents::default(),
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
        let param = limiter.limit().per_second_rate();
        Self {
            inner: Arc::new(Inner {
                limiter,
                remote_parents,
                param,
            }),
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

    /// The decision for a trace this sampler decides itself (a root, or a capped remote
    /// parent): ask the limiter.
    #[inline]
    fn decide(&self, parent_state: &TraceState) -> SamplingResult {
        if self.inner.limiter.try_acquire() {
            SamplingResult {
                decision: SamplingDecision::RecordAndSample,
                attributes: attributes::kept(RATELIMITING, self.inner.param),
                trace_state: erase_threshold(parent_state),
            }
        } else {
            drop_span(parent_state)
        }
    }
}

impl<L: RateLimiter + 'static> ShouldSample for RateLimitingSampler<L> {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        _trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        parent::apply(parent_context, self.inner.remote_parents, |_, state| {
            self.decide(state)
        })
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
    limit: Limit,
    algorithm: Algorithm,
    clock: C,
    remote_parents: RemoteParents,
}

impl<C: Clock> RateLimitingSamplerBuilder<C> {
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
        }
    }

    /// Builds the sampler.
    pub fn build(self) -> RateLimitingSampler<AnyLimiter<C>> {
        let limiter = AnyLimiter::with_clock(self.algorithm, self.limit, self.clock);
        RateLimitingSampler::with_remote_parents(limiter, self.remote_parents)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags};
    use opentelemetry::Value;

    use super::*;
    use crate::attributes::{SAMPLER_PARAM, SAMPLER_TYPE};
    use crate::ManualClock;

    fn sampler(
        permits: u32,
        remote: RemoteParents,
    ) -> RateLimitingSampler<AnyLimiter<ManualClock>> {
        RateLimitingSampler::builder(Limit::per_window(permits, Duration::from_secs(1)).unwrap())
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
}
