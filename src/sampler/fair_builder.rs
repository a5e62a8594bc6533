//! The builder of a [`RateLimitingSampler`] that keeps fair shares per key.

use super::fair_by::FairBy;
use super::rate_limiting::{Fair, RateLimitingSampler, RateLimitingSamplerBuilder};
use crate::clock::{Clock, MonotonicClock};
use crate::limiter::{AnyLimiter, FairError, FairLimiter, DEFAULT_MAX_KEYS};

impl<C: Clock> RateLimitingSamplerBuilder<C> {
    /// Keeps fair shares of the limit per key, the key made of what `by` names (see
    /// [`FairLimiter`] for what is guaranteed). Kept roots then also carry their key's
    /// probability in
    /// [`sampler.key_probability`](crate::attributes::SAMPLER_KEY_PROBABILITY).
    ///
    /// ```
    /// use opentelemetry::trace::{SpanKind, TraceId};
    /// use opentelemetry::{Context, KeyValue};
    /// use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
    /// use otel_rate_sampler::{FairBy, Limit, RateLimitingSampler};
    ///
    /// let sampler = RateLimitingSampler::builder(Limit::per_second(100.0)?)
    ///     .fair_by(FairBy::attributes(["http.route"]))
    ///     .max_keys(200)
    ///     .build()?;
    /// let route = [KeyValue::new("http.route", "/users/{id}")];
    /// let r = sampler.should_sample(None, TraceId::from(1), "GET", &SpanKind::Server, &route, &[]);
    /// assert_eq!(r.decision, SamplingDecision::RecordAndSample);
    /// assert_eq!(sampler.stats().fair.map(|f| f.keys), Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fair_by(self, by: FairBy) -> FairSamplerBuilder<C> {
        FairSamplerBuilder {
            base: self,
            by,
            max_keys: DEFAULT_MAX_KEYS,
        }
    }
}

/// Builds a [`RateLimitingSampler`] keeping fair shares per key: from
/// [`RateLimitingSamplerBuilder::fair_by`].
#[derive(Debug)]
#[must_use]
pub struct FairSamplerBuilder<C = MonotonicClock> {
    base: RateLimitingSamplerBuilder<C>,
    by: FairBy,
    max_keys: usize,
}

impl<C: Clock> FairSamplerBuilder<C> {
    /// The most keys told apart (default [`DEFAULT_MAX_KEYS`], 500); the others share
    /// one overflow key.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Builds the sampler.
    ///
    /// # Errors
    ///
    /// [`FairError::MaxKeys`] when `max_keys` is 0 or above 65 534.
    pub fn build(self) -> Result<RateLimitingSampler<FairLimiter<C>>, FairError> {
        let base = self.base;
        let inner = AnyLimiter::with_clock(base.algorithm, base.limit, base.clock);
        let limiter = FairLimiter::over(inner, self.max_keys)?;
        let fair = Fair {
            by: self.by,
            acquire: FairLimiter::<C>::acquire,
            stats: FairLimiter::<C>::stats,
        };
        Ok(RateLimitingSampler::with_options(
            limiter,
            base.remote_parents,
            base.count_decisions,
            Some(fair),
        ))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use opentelemetry::trace::{SpanKind, TraceId};
    use opentelemetry::{KeyValue, Value};
    use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

    use super::*;
    use crate::attributes::SAMPLER_KEY_PROBABILITY;
    use crate::clock::ManualClock;
    use crate::limit::Limit;

    fn root(s: &impl ShouldSample, route: Option<&str>) -> SamplingResult {
        let attributes: Vec<KeyValue> = route
            .map(|r| KeyValue::new("http.route", r.to_owned()))
            .into_iter()
            .collect();
        s.should_sample(
            None,
            TraceId::from(1),
            "GET",
            &SpanKind::Server,
            &attributes,
            &[],
        )
    }

    fn kept(r: &SamplingResult) -> Option<f64> {
        (r.decision == SamplingDecision::RecordAndSample).then(|| {
            let p = r
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == SAMPLER_KEY_PROBABILITY);
            match p.map(|kv| &kv.value) {
                Some(Value::F64(p)) => *p,
                other => panic!("no probability: {other:?}"),
            }
        })
    }

    #[test]
    fn a_rare_route_and_spans_without_the_route_keep_one_each_beside_a_hot_route() {
        let clock = ManualClock::new();
        let limit = Limit::per_window(10, Duration::from_secs(1))
            .unwrap()
            .unpaced();
        let s = RateLimitingSampler::builder(limit)
            .clock(clock.clone())
            .fair_by(FairBy::attributes(["http.route"]))
            .max_keys(2)
            .build()
            .unwrap();
        for w in 1..=3u64 {
            clock.set(w * 1_000_000_000);
            let hot: Vec<f64> = (0..500)
                .filter_map(|_| kept(&root(&s, Some("/hot"))))
                .collect();
            let rare = kept(&root(&s, Some("/rare")));
            let none = kept(&root(&s, None));
            if w == 3 {
                assert_eq!((hot.len(), rare, none), (8, Some(1.0), Some(1.0)));
                // The hot route's kept roots stand for its 500 calls.
                let adjusted: f64 = hot.iter().map(|p| 1.0 / p).sum();
                assert!((adjusted - 500.0).abs() < 1e-6, "{adjusted}");
            }
        }
        // The third key (no route) is past max_keys = 2: the overflow key.
        let fair = s.stats().fair.unwrap();
        assert_eq!((fair.keys, fair.max_keys, fair.overflow_offered), (2, 2, 3));
        assert_eq!(s.fair_by(), Some(&FairBy::attributes(["http.route"])));
    }

    #[test]
    fn max_keys_out_of_range_is_an_error() {
        let err = RateLimitingSampler::builder(Limit::per_second(1.0).unwrap())
            .fair_by(FairBy::span_name())
            .max_keys(0)
            .build()
            .unwrap_err();
        assert_eq!(err, FairError::MaxKeys { max_keys: 0 });
    }
}
