//! `ComposableRateLimiting` (ours): a delegate's intent under a rate, with a threshold
//! paced across the window by the kept-so-far and the offered rate, and a hard cap
//! behind it.

mod control;
mod estimate;

use std::fmt;
use std::mem::{align_of, size_of};
use std::sync::Arc;

use opentelemetry::trace::{Link, SpanKind};
use opentelemetry::{Context, KeyValue};

use self::control::Plan;
use self::estimate::Estimate;
use crate::clock::{Clock, MonotonicClock};
use crate::composable::admission::Admission;
use crate::composable::parent::{origin, with_span_context};
use crate::composable::{ComposableSampler, SamplingIntent};
use crate::limit::Limit;
use crate::limiter::FixedWindow;
use crate::stats::{Counters, DecisionStats, DropReason, Event, ParentOrigin};

/// At most `N` spans kept per window, by a consistent threshold that adapts within the
/// window, with a hard cap of `N` behind it. Ours: the specification has no
/// rate-limiting composable (OTEP 250 names one and prescribes no algorithm).
///
/// For each span the delegate's intent has a threshold for (the span is *offered*):
///
/// 1. The probability `p` is computed from what is known before the span: the window's
///    kept-so-far `k`, the time left and the offered spans per window `E` (an estimate,
///    see below). The window aims at `T`, a little under `N` (`N − 3` for `N` from 12 to 255,
///    one less per 256 permits more, at most `N/4` under), along the pacing schedule
///    of the [`Limit`]: by the end of pacing step `i` of `B`, `a(i) = ⌈T·(i+1)/B⌉` kept
///    (an unpaced limit has one step, the window). With `d` still due by the step's end
///    and `e` offered spans expected until then, `p = d / e`, at least an eighth of the
///    steady probability `T / E` (never 0), at most 1: a span behind schedule raises `p`, one ahead lowers
///    it, so the kept spans follow the schedule (spread across the window) and the window
///    ends at about `T` whatever the estimate's error.
/// 2. The threshold is `max(delegate's, threshold of p)`, `p` rounded down to 16
///    significant bits (`th` has 5 significant hex digits at `p = 1/10`); a threshold is only
///    ever raised from the delegate's, so processes with the same delegate and the same
///    `p` keep a subset of the same traces. The intent is made without the trace id (the
///    specification's `GetSamplingIntent` is not given it): the threshold cannot depend
///    on the span's randomness. A span whose randomness is below it is dropped by the
///    [`CompositeSampler`](crate::CompositeSampler).
/// 3. A span the threshold keeps asks the hard cap (an unpaced [`FixedWindow`] of `N`)
///    for a permit; without one it is dropped (`th` erased): **at most `N` spans per
///    window are ever kept**, for any load and any change of it. The cap is asked by the
///    `CompositeSampler` after its comparison, through the intent (ours: the
///    specification's intent has no such step), so the intent must reach a
///    `CompositeSampler`: the built-in decorators pass it on; an intent asked for and
///    compared by hand is not capped, nor counted. Once the cap is full for the window,
///    the intent is a non-sampling one at once (every span offered then is counted as
///    refused by the cap, whatever its randomness).
///
/// Every kept span's threshold is the probability it was kept with: `p` depends only on
/// what happened before the span, not on its randomness, so the kept spans weighted by
/// `1/p` (a backend's sum of adjusted counts) estimate the offered count without bias,
/// however `p` moves, as long as the cap has room. `adjusted_count_reliable` is the
/// delegate's (with an unreliable one the `CompositeSampler` compares the threshold
/// with a fresh random value, and `p` is still the probability of the keep). A rate
/// limiter over another keeps a span only if both caps admit it.
///
/// **When the cap binds first** (the estimate is far too low: the first window, or a
/// load stepping up faster than a surge roll can follow): the spans kept before the cap
/// filled keep their `th`, which is still their probability; from then to the window's
/// end nothing is kept (the cap is unpaced and full), and those spans, kept with
/// probability 0, are missing from the window's sum of adjusted counts, which falls
/// short of the offered count by exactly them. No kept span ever carries a wrong `th`,
/// so there is nothing to make reliable again; the estimate counts every span offered,
/// refused ones included, from its next roll. The cap's refusals are counted
/// (`stats().dropped_for(DropReason::RateLimit)`). Until the first measurement (a keep
/// some time after construction) `p` is 1, so a burst at the very start fills the cap
/// this way; under the loads of the table below the cap never bound after that.
///
/// **The estimate** `E` counts the offered spans exactly (each decision counts itself in
/// its thread's own cell for [`stats`](Self::stats)); at a kept span, after a sixteenth of
/// a window, or early after a surge of keeps (twice a sixteenth of `T`, and 2), one
/// caller sums the counters and moves `E` toward the rate since the last sum (a quarter
/// window's smoothing; a surge takes a higher rate at once). A dropped span writes
/// nothing shared.
///
/// # Accuracy
///
/// Measured (`simulate` in `tests/core/composable_rate.rs`, which asserts the guarantees):
/// a [`ManualClock`](crate::ManualClock), seeded random trace ids evenly spaced in time,
/// 20 windows to settle, then 100 windows counted.
///
/// | limit | load | windows over `N` | fewest kept in a settled window (mean) | cap refusals | kept without `th` | adjusted counts / offered (σ) |
/// |---|---|---|---|---|---|---|
/// | 100, unpaced | 10× | 0 | 97 (97.1) | 0 | 0 | 1.000 (0.010) |
/// | 100, paced | 10× | 0 | 97 (97.1) | 0 | 0 | 0.993 (0.013) |
/// | 1000, unpaced | 10× | 0 | 994 (994.1) | 0 | 0 | 0.999 (0.003) |
/// | 1000, paced | 10× | 0 | 994 (994.1) | 0 | 0 | 1.001 (0.003) |
/// | 100, unpaced | 1×, 20× for 20 windows, 1× | 0 | 63 (96.7) | 0 | 0 | 0.980 (0.020) |
/// | 100, paced | same | 0 | 79 (96.9) | 0 | 0 | 0.965 (0.023) |
/// | 1000, unpaced | same | 0 | 564 (989.5) | 0 | 0 | 1.000 (0.006) |
/// | 1000, paced | same | 0 | 792 (992.0) | 0 | 0 | 0.998 (0.006) |
///
/// σ is the standard deviation of the ratio that the kept spans' probabilities imply
/// (`√Σ (1 − p)/p²` over the offered count): the errors are within it or twice it, as an
/// unbiased estimate's are. The fewest kept is the window after the step down, where the
/// estimate is still coming down from 20× (a quarter window's smoothing): it keeps fewer,
/// never more. After a step up, a surge of keeps rolls the estimate at once, before the
/// cap fills. Comparisons with the [`AdaptiveSampler`](crate::AdaptiveSampler) and an
/// exponential-smoothing limiter are in `BENCHMARKS.md`.
///
/// Clones share the budget. A drop allocates nothing and writes only this thread's
/// counter cell (the intent borrows the cap: no reference count is written); a keep
/// also writes the cap's word and, once per roll, the estimate.
pub struct ComposableRateLimiting<D, C: Clock = MonotonicClock> {
    delegate: Arc<D>,
    state: Arc<State<C>>,
}

// Not derived: a clone shares the budget, whatever `D` and `C` are.
impl<D, C: Clock> Clone for ComposableRateLimiting<D, C> {
    fn clone(&self) -> Self {
        Self {
            delegate: Arc::clone(&self.delegate),
            state: Arc::clone(&self.state),
        }
    }
}

/// The budget: what the intents' threshold is paced by, and the cap the
/// `CompositeSampler` asks through them (its [`Admission`]).
struct State<C: Clock> {
    limit: Limit,
    plan: Plan,
    estimate: Estimate,
    cap: FixedWindow<Arc<C>>,
    clock: Arc<C>,
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
        let plan = Plan::new(limit);
        let now = clock.now_nanos();
        Self {
            delegate: Arc::new(delegate),
            state: Arc::new(State {
                limit,
                plan,
                estimate: Estimate::new(plan.window(), plan.target(), now, 0),
                cap: FixedWindow::with_clock(limit.unpaced(), Arc::clone(&clock)),
                clock,
                counters: Counters::new(),
            }),
        }
    }

    /// The limit.
    pub fn limit(&self) -> Limit {
        self.state.limit
    }

    /// The steady probability (before the delegate's): the window's target over the
    /// offered spans per window estimated; 1 before the first estimate. A decision's own
    /// probability moves around it with the window's kept-so-far.
    pub fn probability(&self) -> f64 {
        self.state.plan.steady(self.state.estimate.per_window())
    }

    /// The decisions so far: kept, dropped by the threshold (`probability`) and by the
    /// cap (`rate_limit`), by parent origin, as the
    /// [`CompositeSampler`](crate::CompositeSampler) made them. Spans the delegate drops
    /// are not counted.
    pub fn stats(&self) -> DecisionStats {
        self.state.counters.snapshot()
    }
}

impl<D, C: Clock> ComposableRateLimiting<D, C> {
    /// What one takes on the heap, as [`with_clock`](Self::with_clock) lays it out on
    /// this target: the delegate in its `Arc`, the shared state in its own (the cap,
    /// the estimate, the counters' overflow row), the clock in its `Arc`, and a row of
    /// decision counters per thread slot (about 8 KiB). What a file's memory budget
    /// counts.
    #[cfg_attr(not(feature = "yaml"), allow(dead_code))]
    pub(crate) const HEAP_BYTES: usize =
        arc_bytes::<D>() + arc_bytes::<State<C>>() + arc_bytes::<C>() + Counters::HEAP_BYTES;
}

/// The allocation of an `Arc<T>`: its two counters, then the value at its alignment (a
/// cache-padded value starts a line further on).
#[cfg_attr(not(feature = "yaml"), allow(dead_code))]
pub(crate) const fn arc_bytes<T>() -> usize {
    let align = if align_of::<T>() > align_of::<usize>() {
        align_of::<T>()
    } else {
        align_of::<usize>()
    };
    (2 * size_of::<usize>()).div_ceil(align) * align + size_of::<T>()
}

impl<D: ComposableSampler, C: Clock> ComposableSampler for ComposableRateLimiting<D, C> {
    fn sampling_intent(
        &self,
        parent: Option<&Context>,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingIntent<'_> {
        let intent = self
            .delegate
            .sampling_intent(parent, name, kind, attributes, links);
        let Some(delegates) = intent.threshold() else {
            return intent;
        };
        let state = &*self.state;
        let now = state.clock.now_nanos();
        let kept = state.cap.count_at(now);
        if kept >= u64::from(state.limit.permits()) {
            // The cap is full for this window: dropped whatever the span's randomness.
            let from = with_span_context(parent, origin);
            state
                .counters
                .record(Event::dropped(DropReason::RateLimit, from));
            return SamplingIntent::NON_SAMPLING;
        }
        let p =
            state
                .plan
                .probability(now % state.plan.window(), kept, state.estimate.per_window());
        let threshold = delegates.max(control::threshold(p));
        // Borrowed for the intent's life: no reference count written.
        intent
            .with_threshold(Some(threshold))
            .with_admission(state, now)
    }
}

/// Step 3 of the type's docs, and the counts: the `CompositeSampler` tells each
/// decision on an offered span.
impl<C: Clock> Admission for State<C> {
    /// `now`: the clock reading the intent's threshold was paced at (the same window).
    fn admit(&self, kept: bool, now: u64, origin: ParentOrigin) -> bool {
        if !kept {
            self.counters
                .record(Event::dropped(DropReason::Probability, origin));
            return false;
        }
        let before = self.cap.count_at(now);
        if self.cap.acquire_at(now).is_none() {
            self.counters
                .record(Event::dropped(DropReason::RateLimit, origin));
            return false;
        }
        self.counters.record(Event::kept(origin));
        self.estimate
            .after_keep(now, before + 1, || offered(&self.counters.snapshot()));
        true
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
            .field("delegate", &self.delegate)
            .field("state", &self.state)
            .finish()
    }
}

impl<C: Clock> fmt::Debug for State<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("limit", &self.limit)
            .field("offered_per_window", &self.estimate.per_window())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult};

    use super::*;
    use crate::clock::ManualClock;
    use crate::composable::test_support::{decide, intent};
    use crate::composable::{
        ComposableAlwaysOff, ComposableAlwaysOn, ComposableProbability, Threshold,
    };
    use crate::sampler::{parent_threshold, ParentThreshold};

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

    /// The threshold a decision wrote as `th`, if any.
    fn th(result: &SamplingResult) -> Option<Threshold> {
        match parent_threshold(&result.trace_state) {
            ParentThreshold::Known(t) => Some(Threshold(t)),
            ParentThreshold::Absent | ParentThreshold::Malformed => None,
        }
    }

    /// Offers `n` spans whose randomness walks the range evenly, in a scrambled order,
    /// through a `CompositeSampler`; returns the kept spans' results.
    fn offer<C: ComposableSampler + Clone + 'static>(s: &C, n: u64) -> Vec<SamplingResult> {
        (0..n)
            // The top of slot i of n, so that a tenth of 100 slots is exactly 10 kept.
            .map(|i| {
                ((u128::from(i * 7919 % n) * u128::from(SPAN) + u128::from(SPAN - 1))
                    / u128::from(n)) as u64
            })
            .map(|r| decide(s, None, r, &[]))
            .filter(|d| d.decision == SamplingDecision::RecordAndSample)
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
    fn when_the_cap_binds_first_kept_spans_keep_their_th_and_nothing_more_is_kept() {
        let (s, clock) = sampler(10, false);
        // Window 0, nothing measured and no time passed: p = 1 until the cap binds.
        let kept = offer(&s, 100);
        assert_eq!(kept.len(), 10);
        assert!(kept.iter().all(|r| th(r) == Some(Threshold::ALWAYS)));
        assert_eq!(s.stats().dropped_for(DropReason::RateLimit), 90);
        // Later in the window the cap is full: nothing is kept, whatever the threshold.
        clock.advance(Duration::from_millis(500));
        assert!(offer(&s, 100).is_empty());
        // The next window's first keep measures the 200 offered over a window: from then
        // on p is about T / 200 and every kept span carries the p it was kept with.
        clock.advance(Duration::from_millis(500));
        let mut kept = Vec::new();
        for _ in 0..10 {
            kept.extend(offer(&s, 20));
            clock.advance(Duration::from_millis(100));
        }
        assert!((5..=10).contains(&kept.len()), "{}", kept.len());
        assert!(kept
            .iter()
            .skip(1)
            .all(|r| th(r).is_some_and(|t| t.probability() < 0.5)));
    }

    #[test]
    fn a_kept_span_is_kept_with_the_probability_its_th_says() {
        // Under a steady 10× load the decision of every offered span is `r ≥ th`, where
        // th is the intent's (made without the trace id), and the kept ones carry it.
        let (s, clock) = sampler(100, true);
        // The first window measures the load (and may fill the cap).
        offer(&s, 1000);
        clock.advance(Duration::from_secs(1));
        let refused = s.stats().dropped_for(DropReason::RateLimit);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = x >> 8;
            let i = intent(&s, None, &[]);
            let t = i
                .threshold()
                .expect("the cap has room after the first window");
            assert!(i.adjusted_count_reliable());
            let d = decide(&s, None, r, &[]);
            let kept = d.decision == SamplingDecision::RecordAndSample;
            assert_eq!(kept, t.keeps(r));
            assert_eq!(th(&d), kept.then_some(t));
            clock.advance(Duration::from_micros(1000));
        }
        assert_eq!(s.stats().dropped_for(DropReason::RateLimit), refused);
        assert!(
            (0.05..0.2).contains(&s.probability()),
            "{}",
            s.probability()
        );
    }

    #[test]
    fn the_delegates_threshold_is_only_raised_and_its_drops_pass_through() {
        let limit = Limit::per_window(1000, Duration::from_secs(1))
            .unwrap()
            .unpaced();
        let quarter = ComposableProbability::new(0.25).unwrap();
        let s = ComposableRateLimiting::with_clock(quarter, limit, ManualClock::new());
        let i = intent(&s, None, &[]);
        assert_eq!(
            i.threshold(),
            quarter.threshold(),
            "p = 1 under the delegate's 1/4"
        );
        assert!(i.adjusted_count_reliable());
        let off =
            ComposableRateLimiting::with_clock(ComposableAlwaysOff, limit, ManualClock::new());
        assert_eq!(intent(&off, None, &[]).threshold(), None);
        assert_eq!(
            decide(&off, None, SPAN - 1, &[]).decision,
            SamplingDecision::Drop
        );
        assert_eq!(off.stats().total(), 0, "a delegate's drop is not offered");
    }

    #[test]
    fn the_cap_and_the_counts_are_the_composite_samplers_step() {
        let (s, _clock) = sampler(10, false);
        // Intents alone take no permit and count nothing.
        for _ in 0..100 {
            assert_eq!(intent(&s, None, &[]).threshold(), Some(Threshold::ALWAYS));
        }
        assert_eq!(s.stats().total(), 0);
        // Through a CompositeSampler: the cap's 10, every offered span counted.
        assert_eq!(offer(&s, 100).len(), 10);
        let stats = s.stats();
        assert_eq!(
            (stats.kept(), stats.dropped_for(DropReason::RateLimit)),
            (10, 90)
        );
    }

    #[test]
    fn a_rate_limiter_over_another_keeps_what_both_caps_admit() {
        for (inner, outer) in [(5, 10), (10, 5)] {
            let clock = ManualClock::new();
            let limit = |n| {
                Limit::per_window(n, Duration::from_secs(1))
                    .unwrap()
                    .unpaced()
            };
            let s = ComposableRateLimiting::with_clock(
                ComposableRateLimiting::with_clock(ComposableAlwaysOn, limit(inner), clock.clone()),
                limit(outer),
                clock.clone(),
            );
            // p = 1 in the first window for both: the smaller cap binds.
            assert_eq!(offer(&s, 100).len(), 5, "{inner} under {outer}");
        }
    }
}
