//! `ComposableRateLimiting` (ours): a delegate's intent under a rate, with a threshold
//! that adapts to the offered load and a hard cap behind it.

use std::fmt;
use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};

use crate::clock::{Clock, MonotonicClock};
use crate::composable::parent::{origin, trace_state, with_span_context};
use crate::composable::{ComposableSampler, SamplingIntent, Threshold};
use crate::limit::Limit;
use crate::limiter::FixedWindow;
use crate::sampler::{randomness, Adaptive};
use crate::stats::{Counters, DecisionStats, DropReason, Event};
use crate::sync::{AtomicU64, Ordering};

/// At most `N` spans kept per window, by a consistent threshold that adapts to the
/// offered load, with a hard cap of `N` behind it. Ours: the specification has no
/// rate-limiting composable (OTEP 250 names one and prescribes no algorithm).
///
/// For each span the delegate's intent has a threshold for (the span is *offered*):
///
/// 1. The threshold is `max(delegate's, this window's)`: this window's is the
///    threshold of probability `N / offered per window` measured over the previous
///    window (probability 1 in the first window and after an idle one), so the
///    threshold is only ever raised from the delegate's, and every process with the
///    same delegate and the same load keeps a subset of the same traces.
/// 2. A span whose randomness is below that threshold is dropped by the
///    [`CompositeSampler`](crate::CompositeSampler).
/// 3. A span the threshold keeps asks the hard cap (a [`FixedWindow`] of `N` per
///    window, paced as the [`Limit`] says) for a permit. Without one it is dropped
///    (a non-sampling intent): **at most `N` spans per window are ever kept**, for any
///    load and any change of it.
///
/// **When the cap binds before the threshold has adapted** (the load rose within a
/// window, or in the first window): the spans the threshold kept beyond the cap's `N`
/// are dropped, so the window's kept spans are not a sample of the probability the
/// threshold says. From the first refusal on, until the window ends, every span this
/// sampler keeps (a paced cap admits later ones) is kept with `threshold_reliable =
/// false`: the [`CompositeSampler`](crate::CompositeSampler) erases its `th`. Spans kept
/// before the first refusal keep `th` (their decision was made, and written, before the
/// cap bound). The next window's threshold is measured from everything offered, refused
/// spans included, so one window later the threshold keeps about `N` and `th` is
/// reliable again. Otherwise the intent's reliability is the delegate's.
///
/// # Accuracy
///
/// Measured (`simulate` in `tests/core/composable.rs`, which asserts the guarantees):
/// a [`ManualClock`](crate::ManualClock), seeded random trace ids, 120 windows at 10×
/// `N` with a step to 20× `N` for 20 of them, the first 20 windows not counted as
/// settled.
///
/// | limit | windows over `N` | fewest kept in a settled window | windows in which the cap refused | kept without `th` | adjusted counts / offered |
/// |---|---|---|---|---|---|
/// | 100, unpaced | 0 | 41 (the step down) | 63 | 0 | 0.959 |
/// | 1000, unpaced | 0 | 514 (the step down) | 58 | 0 | 0.980 |
/// | 100, paced | 0 | 41 | 100 | 6762 | 0.363 |
/// | 1000, paced | 0 | 514 | 103 | 78750 | 0.307 |
///
/// The threshold aims at `N` per window, so at steady load the sample overruns the cap
/// in about half the windows (by binomial chance), and the cap's refusals are missing
/// from the adjusted counts (about `0.4/√N` low). Once adapted, the threshold already
/// spreads the kept spans across the window: **use an unpaced [`Limit`]**
/// ([`Limit::unpaced`]). A paced cap refuses whenever the kept spans run ahead of its
/// pace, and everything it admits after that in the window loses `th`. In the window
/// after a step down the threshold is still the high load's, so fewer than `N` are
/// kept until it adapts.
///
/// Clones share the budget. A drop allocates nothing; each decision writes only this
/// thread's counter cell (and the cap's word when the threshold keeps the span, and a
/// flag on the window's first refusal).
pub struct ComposableRateLimiting<D, C: Clock = MonotonicClock> {
    inner: Arc<Inner<D, C>>,
}

// Not derived: a clone shares the budget, whatever `D` and `C` are.
impl<D, C: Clock> Clone for ComposableRateLimiting<D, C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<D, C: Clock> {
    delegate: D,
    adaptive: Adaptive<Arc<C>, FixedWindow<Arc<C>>>,
    clock: Arc<C>,
    /// One more than the index of the last window in which the cap refused a span the
    /// threshold kept (0: none yet).
    refused_in: AtomicU64,
    counters: Counters,
}

impl<D: ComposableSampler> ComposableRateLimiting<D> {
    /// At most `limit` of what `delegate` keeps, on the monotonic clock.
    pub fn new(delegate: D, limit: Limit) -> Self {
        Self::with_clock(delegate, limit, MonotonicClock::new())
    }
}

impl<D: ComposableSampler, C: Clock> ComposableRateLimiting<D, C> {
    /// As [`new`](ComposableRateLimiting::new), with windows timed by `clock` (a
    /// [`ManualClock`](crate::ManualClock) in tests).
    pub fn with_clock(delegate: D, limit: Limit, clock: C) -> Self {
        let clock = Arc::new(clock);
        let cap = FixedWindow::with_clock(limit, Arc::clone(&clock));
        Self {
            inner: Arc::new(Inner {
                delegate,
                adaptive: Adaptive::new(cap, Arc::clone(&clock), 0),
                clock,
                refused_in: AtomicU64::new(0),
                counters: Counters::new(),
            }),
        }
    }

    /// The limit.
    pub fn limit(&self) -> Limit {
        self.inner.adaptive.limit()
    }

    /// The probability this window's threshold keeps with (before the delegate's).
    pub fn probability(&self) -> f64 {
        self.inner.adaptive.probability()
    }

    /// The decisions so far: kept, dropped by the threshold (`probability`) and by the
    /// cap (`rate_limit`), by parent origin. Spans the delegate drops are not counted.
    pub fn stats(&self) -> DecisionStats {
        self.inner.counters.snapshot()
    }

    fn window(&self) -> u64 {
        self.inner.clock.now_nanos() / self.limit().window_nanos()
    }
}

impl<D: ComposableSampler, C: Clock> ComposableSampler for ComposableRateLimiting<D, C> {
    fn sampling_intent(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingIntent {
        let inner = &*self.inner;
        let intent = inner
            .delegate
            .sampling_intent(parent, trace_id, name, kind, attributes, links);
        let Some(delegates) = intent.threshold() else {
            return intent;
        };
        let delegate_reliable = intent.threshold_reliable();
        let ours = inner
            .adaptive
            .threshold(|| offered(&inner.counters.snapshot()));
        let threshold = delegates.max(Threshold(ours));
        let (r, from) = with_span_context(parent, |sc| {
            (randomness(trace_id, trace_state(sc)), origin(sc))
        });
        if !threshold.keeps(r) {
            inner
                .counters
                .record(Event::dropped(DropReason::Probability, from));
            return intent.with_threshold(Some(threshold), delegate_reliable);
        }
        let window = self.window();
        if !inner.adaptive.admit() {
            inner
                .counters
                .record(Event::dropped(DropReason::RateLimit, from));
            // Relaxed: a flag for this window's later keeps; a keep that races the
            // refusal on another thread and misses it was decided before it. Written
            // once per window, not per refusal: the reject path reads shared memory only.
            if inner.refused_in.load(Ordering::Relaxed) != window + 1 {
                inner.refused_in.store(window + 1, Ordering::Relaxed);
            }
            return SamplingIntent::NON_SAMPLING;
        }
        inner.counters.record(Event::kept(from));
        // Relaxed: as the store above.
        let cap_bound = inner.refused_in.load(Ordering::Relaxed) == window + 1;
        let reliable = delegate_reliable && !cap_bound;
        intent.with_threshold(Some(threshold), reliable)
    }
}

/// The spans offered to the threshold: kept, or dropped by the threshold or the cap.
fn offered(stats: &DecisionStats) -> u64 {
    stats.kept()
        + stats.dropped_for(DropReason::Probability)
        + stats.dropped_for(DropReason::RateLimit)
}

impl<D: fmt::Debug, C: Clock> fmt::Debug for ComposableRateLimiting<D, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ComposableRateLimiting")
            .field("delegate", &self.inner.delegate)
            .field("limit", &self.inner.adaptive.limit())
            .field("probability", &self.inner.adaptive.probability())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::composable::test_support::intent;
    use crate::composable::{ComposableAlwaysOff, ComposableAlwaysOn, ComposableProbability};

    const SPAN: u64 = 1 << 56;

    fn sampler(
        permits: u32,
        paced: bool,
    ) -> (
        ComposableRateLimiting<ComposableAlwaysOn, ManualClock>,
        ManualClock,
    ) {
        let limit = Limit::per_window(permits, Duration::from_secs(1)).unwrap();
        let limit = if paced { limit } else { limit.unpaced() };
        let clock = ManualClock::new();
        (
            ComposableRateLimiting::with_clock(ComposableAlwaysOn, limit, clock.clone()),
            clock,
        )
    }

    /// Offers `n` spans whose randomness walks the range evenly, in a scrambled order;
    /// returns the intents that keep their span.
    fn offer(s: &impl ComposableSampler, n: u64) -> Vec<SamplingIntent> {
        (0..n)
            // The top of slot i of n, so that a tenth of 100 slots is exactly 10 kept.
            .map(|i| {
                ((u128::from(i * 7919 % n) * u128::from(SPAN) + u128::from(SPAN - 1))
                    / u128::from(n)) as u64
            })
            .filter_map(|r| Some(intent(s, None, r, &[])).filter(|i| i.keeps(r)))
            .collect()
    }

    #[test]
    fn never_more_than_n_per_window_for_any_load_paced_or_not() {
        for paced in [false, true] {
            let (s, clock) = sampler(10, paced);
            // Start part-way into a window, then loads that jump both ways.
            clock.advance(Duration::from_millis(300));
            let mut per_window = std::collections::BTreeMap::<u64, usize>::new();
            for load in [5, 1000, 1000, 10, 0, 5000, 20, 20_000, 3] {
                for step in 0..10 {
                    let kept = offer(&s, load / 10 + u64::from(step < load % 10)).len();
                    *per_window
                        .entry(clock.now_nanos() / 1_000_000_000)
                        .or_default() += kept;
                    clock.advance(Duration::from_millis(100));
                }
            }
            for (window, kept) in per_window {
                assert!(kept <= 10, "paced {paced}: {kept} kept in window {window}");
            }
        }
    }

    #[test]
    fn the_threshold_adapts_one_window_later_and_keeps_n_with_a_reliable_th() {
        let (s, clock) = sampler(10, false);
        // Window 0, probability 1: the cap binds after 10; those 10 keep th:0.
        let kept = offer(&s, 100);
        assert_eq!(kept.len(), 10);
        assert!(kept
            .iter()
            .all(|i| i.threshold() == Some(Threshold::ALWAYS) && i.threshold_reliable()));
        assert_eq!(s.stats().dropped_for(DropReason::RateLimit), 90);
        // Window 1: 1/10 from 100 offered: exactly the top tenth, all with th.
        clock.advance(Duration::from_secs(1));
        let tenth = Threshold::from_ratio(0.1).unwrap();
        let kept = offer(&s, 100);
        assert_eq!(kept.len(), 10);
        assert!(kept
            .iter()
            .all(|i| i.threshold() == Some(tenth) && i.threshold_reliable()));
        assert!((s.probability() - 0.1).abs() < 1e-12);
        // Window 2: a step to 1000; the threshold (1/10) would keep 100, the cap keeps 10.
        clock.advance(Duration::from_secs(1));
        assert_eq!(offer(&s, 1000).len(), 10);
        // Window 3: adapted to 1/100: 10 kept, reliable again.
        clock.advance(Duration::from_secs(1));
        let kept = offer(&s, 1000);
        assert_eq!(kept.len(), 10);
        let hundredth = Threshold::from_ratio(0.01).unwrap();
        assert!(kept
            .iter()
            .all(|i| i.threshold() == Some(hundredth) && i.threshold_reliable()));
    }

    #[test]
    fn keeps_after_the_cap_binds_in_a_window_lose_reliability_until_it_ends() {
        let (s, clock) = sampler(10, true);
        let top = SPAN - 1; // kept by any threshold
                            // At the window's start the paced cap has few permits: ask until one is refused.
        let refused = (0..20).any(|_| !intent(&s, None, top, &[]).keeps(top));
        assert!(refused, "a paced cap refuses a burst at the window's start");
        // Later in the same window it admits again: without a reliable threshold.
        clock.advance(Duration::from_millis(900));
        let late = intent(&s, None, top, &[]);
        assert!(late.keeps(top));
        assert!(
            !late.threshold_reliable(),
            "kept after the cap bound in this window"
        );
        // The next window starts reliable again.
        clock.advance(Duration::from_millis(100));
        let next = intent(&s, None, top, &[]);
        assert!(next.keeps(top) && next.threshold_reliable());
    }

    #[test]
    fn the_delegates_threshold_is_only_raised_and_its_drops_pass_through() {
        let limit = Limit::per_window(1000, Duration::from_secs(1))
            .unwrap()
            .unpaced();
        let quarter = ComposableProbability::new(0.25).unwrap();
        let s = ComposableRateLimiting::with_clock(quarter, limit, ManualClock::new());
        let i = intent(&s, None, 0, &[]);
        assert_eq!(
            i.threshold(),
            quarter.threshold(),
            "p = 1 under the delegate's 1/4"
        );
        assert!(i.threshold_reliable());
        let off =
            ComposableRateLimiting::with_clock(ComposableAlwaysOff, limit, ManualClock::new());
        let i = intent(&off, None, SPAN - 1, &[]);
        assert_eq!(i.threshold(), None);
        assert_eq!(off.stats().total(), 0, "a delegate's drop is not offered");
    }
}
