//! What one collection reports, read from a sampler's stats.

use std::sync::Arc;

use opentelemetry::KeyValue;

use crate::clock::Clock;
use crate::limiter::RateLimiter;
use crate::sampler::{AdaptiveSampler, RateLimitingSampler};
use crate::stats::{DecisionStats, SamplerStats, WindowFill};

/// The attribute keys an observation writes; `SamplerMetrics` publishes them as its
/// `RULE` and `LIMITER`.
pub(super) mod key {
    /// The configured name of the rule that decided.
    pub(crate) const RULE: &str = "otel_rate_sampler.rule";
    /// Which limiter a window belongs to (`sampler`, `rule`, `floor`, `cap`).
    pub(crate) const LIMITER: &str = "otel_rate_sampler.limiter";
}

/// Reload outcomes and the generation in force.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reloads {
    pub(super) succeeded: u64,
    pub(super) failed: u64,
    pub(super) generation: u64,
}

/// Everything the instruments report for one sampler, at one collection.
#[derive(Debug, Default)]
pub(super) struct Observation {
    /// `service.name`, for the rule-based sampler.
    pub(super) service: Option<KeyValue>,
    /// Decisions, each with the attributes of who made them (the rule).
    pub(super) decisions: Vec<(Vec<KeyValue>, DecisionStats)>,
    /// Windows, each with the attributes of its limiter.
    pub(super) windows: Vec<(Vec<KeyValue>, WindowFill)>,
    /// Under `fair_by`: the calls of keys past `max_keys` (the overflow key's), each
    /// with the attributes of its limiter (never a key: keys come from spans).
    pub(super) overflow: Vec<(Vec<KeyValue>, u64)>,
    /// Reload outcomes and the generation in force (rule-based sampler).
    pub(super) reloads: Option<Reloads>,
}

/// Reads a sampler's numbers at each collection.
pub(super) type Source = Arc<dyn Fn() -> Observation + Send + Sync>;

pub(super) fn of_sampler<L: RateLimiter + 'static>(sampler: &RateLimitingSampler<L>) -> Source {
    let sampler = sampler.clone();
    of_stats(move || sampler.stats())
}

pub(super) fn of_adaptive<C: Clock, L: RateLimiter + 'static>(
    sampler: &AdaptiveSampler<C, L>,
) -> Source {
    let sampler = sampler.clone();
    of_stats(move || sampler.stats())
}

/// A sampler with one set of counters and one window (its limiter's, or its cap's).
fn of_stats(stats: impl Fn() -> SamplerStats + Send + Sync + 'static) -> Source {
    Arc::new(move || {
        let stats = stats();
        Observation {
            service: None,
            decisions: vec![(Vec::new(), stats.decisions)],
            windows: stats
                .window
                .map(|w| (vec![KeyValue::new(key::LIMITER, "sampler")], w))
                .into_iter()
                .collect(),
            overflow: stats
                .fair
                .map(|f| {
                    (
                        vec![KeyValue::new(key::LIMITER, "sampler")],
                        f.overflow_offered,
                    )
                })
                .into_iter()
                .collect(),
            reloads: None,
        }
    })
}

#[cfg(feature = "config")]
pub(super) fn of_rules<C: crate::clock::Clock + Clone>(
    sampler: &crate::config::RuleBasedSampler<C>,
) -> Source {
    let sampler = sampler.clone();
    Arc::new(move || {
        let stats = sampler.stats();
        let rule = |name: &str| KeyValue::new(key::RULE, name.to_owned());
        let mut decisions = vec![(Vec::new(), stats.unmatched)];
        let mut windows = Vec::new();
        let mut overflow = Vec::new();
        for r in &stats.rules {
            if let Some(f) = r.fair {
                let who = vec![KeyValue::new(key::LIMITER, "rule"), rule(&r.name)];
                overflow.push((who, f.overflow_offered));
            }
            decisions.push((vec![rule(&r.name)], r.decisions));
            if let Some(w) = r.window {
                windows.push((vec![KeyValue::new(key::LIMITER, "rule"), rule(&r.name)], w));
            }
            if let Some(w) = r.floor {
                windows.push((vec![KeyValue::new(key::LIMITER, "floor"), rule(&r.name)], w));
            }
        }
        if let Some(cap) = stats.cap {
            windows.push((vec![KeyValue::new(key::LIMITER, "cap")], cap.window));
            if let Some(f) = cap.fair {
                overflow.push((vec![KeyValue::new(key::LIMITER, "cap")], f.overflow_offered));
            }
        }
        Observation {
            service: Some(KeyValue::new("service.name", stats.service)),
            decisions,
            windows,
            overflow,
            reloads: Some(Reloads {
                succeeded: stats.reloads.succeeded,
                failed: stats.reloads.failed,
                generation: stats.generation,
            }),
        }
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use opentelemetry::trace::{SpanKind, TraceId};
    use opentelemetry_sdk::trace::ShouldSample;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limit::Limit;
    use crate::stats::{DropReason, ParentOrigin};

    #[test]
    fn an_adaptive_samplers_observation_is_its_stats_and_its_caps_window() {
        // Unpaced: the five calls come at one instant.
        let limit = Limit::per_window(2, Duration::from_secs(1))
            .unwrap()
            .unpaced();
        let sampler = AdaptiveSampler::builder(limit)
            .clock(ManualClock::new())
            .build();
        for id in 1..=5u128 {
            sampler.should_sample(None, TraceId::from(id), "op", &SpanKind::Server, &[], &[]);
        }
        let seen = of_adaptive(&sampler)();
        let [(attrs, decisions)] = seen.decisions.as_slice() else {
            panic!("one set of decisions: {seen:?}");
        };
        assert!(attrs.is_empty());
        // The first window has p = 1: the cap keeps 2 and refuses 3.
        assert_eq!(decisions.kept_from(ParentOrigin::Root), 2);
        assert_eq!(decisions.dropped_for(DropReason::RateLimit), 3);
        let [(limiter, fill)] = seen.windows.as_slice() else {
            panic!("one window: {seen:?}");
        };
        assert_eq!(limiter, &vec![KeyValue::new(key::LIMITER, "sampler")]);
        assert_eq!((fill.used, fill.permits), (2, 2));
        assert!(seen.reloads.is_none() && seen.service.is_none());
    }
}
