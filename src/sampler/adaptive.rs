//! Adaptive consistent probability under a hard cap: each window's probability is set
//! from the previous window's offered count, and a fixed window of N backs it up.
//!
//! The estimate's state (one window word, one threshold word, one offered total) is
//! written once per window, by the one caller that wins the window word's
//! compare-exchange; every other decision only loads it. The offered count itself is
//! the decision counters' per-thread cells (`crate::stats`): counting a refusal writes
//! only the calling thread's own cell.

use std::fmt;
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use opentelemetry::trace::{Link, SpanKind, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

use super::attributes::{self, ADAPTIVE};
use super::consistent::{self, Threshold, Verdict};
use super::parent::{self, drop_span, Origin, RemoteParents};
use crate::clock::{Clock, MonotonicClock};
use crate::limit::{Limit, LimitError};
use crate::limiter::{FixedWindow, RateLimiter};
use crate::stats::{
    Counters, DecisionStats, DropReason, Event, ParentOrigin, SamplerStats, WindowFill,
};
use crate::sync::{AtomicU64, Ordering};

/// An OpenTelemetry sampler that keeps about `N` traces per window by a **consistent
/// probability** it adapts to the offered load, and **never more than `N`** (a hard cap).
///
/// # How it decides
///
/// * At the first decision of each window the sampler takes the number of traces
///   offered in the previous window (`offered`: the roots, and the remote parents it
///   decides under [`RemoteParents::Cap`]) and sets this window's probability to
///   `p = min(1, N / offered)` (over several idle windows, the average per window; after
///   a first window the sampler saw only part of, the rate over that part). The very
///   first window, with nothing measured, has `p = 1`.
/// * A trace is kept iff its 56 random bits (OTEP 235: the `rv` sub-key of the `ot`
///   trace-state entry, else the low 56 bits of the trace id) are at least the rejection
///   threshold of `p` **and** a fixed-window limiter of `N` per window admits it. Kept
///   spans are `RecordAndSample`, carry `ot=th:<threshold>` in their trace state (other
///   `ot` sub-keys and vendors' entries kept), `sampler.type = "adaptive"` and
///   `sampler.param = <N per second>`. Refusals are `Drop` and allocate nothing.
/// * Children follow their parent (as in [`RateLimitingSampler`](crate::RateLimitingSampler));
///   a capped remote parent's `th` is raised, never lowered, and a sampled remote parent
///   without `th` keeps no `th` (its probability is unknown).
///
/// # Guarantees
///
/// * **At most `N` kept per window**, whatever the estimate does: the cap is a
///   [`FixedWindow`] from the [builder](Self::builder), or your own limiter through
///   [`with_cap`](Self::with_cap); its guarantee is this sampler's.
/// * Under steady load, the kept traces are spread over the window like the offered ones
///   (a probability does not favour the window's start), and two services with the same
///   `p` keep the same traces. A window keeps `min(N, Binomial(offered, p))`: about `N`,
///   less one binomial spread (`√N`) in a bad window, so at least 90 % of `N` per window
///   is the rule for `N` of a thousand or more (three spreads), not for `N = 100`
///   (100 ± 10).
/// * **Weighting.** Each kept span's `th` gives its `p`; the kept spans of a window
///   weighted by `1/p` estimate the offered count without bias while the cap does not cut
///   in. When the load grows, the cap cuts in and the threshold of the **next** window
///   rises at once (it is computed from the last window alone, not smoothed). The
///   weighted count of a window the cap cut is `N / p` instead of about `offered`: it
///   falls short by the factor `N / (p × offered)`, which is `previous offered / this
///   offered` (a load stepping up tenfold is estimated at a tenth in the step's window,
///   and correctly from the next). Under steady load only the binomial excess over `N`
///   is lost, on average about `0.4·√N` spans per window (1.3 % at `N = 1000`, 4 % at
///   `N = 100`).
///
/// # Costs
///
/// A decision reads the clock, loads two words (the window and the threshold), counts
/// itself in its thread's own cell and, for a trace the threshold keeps, asks the cap.
/// Once per window one caller sums the counters (about a thousand relaxed loads).
/// Nothing shared is written per refusal.
///
/// Clones share the estimate, the cap and the counters ([`stats`](Self::stats)).
///
/// ```
/// use opentelemetry_sdk::trace::SdkTracerProvider;
/// use otel_rate_sampler::{AdaptiveSampler, Limit};
///
/// let sampler = AdaptiveSampler::builder(Limit::per_second(100.0)?).build();
/// let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
/// # Ok::<(), otel_rate_sampler::LimitError>(())
/// ```
pub struct AdaptiveSampler<C = MonotonicClock, L = FixedWindow<C>> {
    inner: Arc<Inner<C, L>>,
}

struct Inner<C, L> {
    adaptive: Adaptive<C, L>,
    remote_parents: RemoteParents,
    /// What a kept span records, built once.
    attributes: Vec<KeyValue>,
    counters: Counters,
}

impl AdaptiveSampler {
    /// A builder for an adaptive sampler keeping at most `limit` (about `limit` under
    /// load).
    pub fn builder(limit: Limit) -> AdaptiveSamplerBuilder {
        AdaptiveSamplerBuilder {
            limit,
            clock: MonotonicClock::new(),
            remote_parents: RemoteParents::default(),
        }
    }

    /// An adaptive sampler keeping about, and at most, `rate` traces per second.
    ///
    /// # Errors
    ///
    /// The [`LimitError`] of [`Limit::per_second`].
    pub fn per_second(rate: f64) -> Result<Self, LimitError> {
        Ok(Self::builder(Limit::per_second(rate)?).build())
    }
}

impl<C: Clock, L: RateLimiter> AdaptiveSampler<C, L> {
    /// An adaptive sampler over a cap of your own: `cap` (a
    /// [`FleetLimiter`](https://docs.rs/otel-rate-sampler/latest/otel_rate_sampler/struct.FleetLimiter.html),
    /// a limiter that records its admissions, ...) keeps at most its limit's `N` per
    /// window, and `clock` times the windows of the estimate: they start on multiples
    /// of the limit's window, as the crate's limiters' do, so `cap` should count in the
    /// same windows of the same clock.
    ///
    /// The estimate is this process's: a cap shared by several processes (a fleet) is
    /// still respected, but each process aims at the whole `N`, so the cap cuts in
    /// every window and the weighted counts fall short as the type's docs say.
    pub fn with_cap(cap: L, clock: C, remote_parents: RemoteParents) -> Self {
        let limit = cap.limit();
        Self {
            inner: Arc::new(Inner {
                attributes: attributes::kept(ADAPTIVE, limit.per_second_rate()),
                adaptive: Adaptive::new(cap, clock, 0),
                remote_parents,
                counters: Counters::new(),
            }),
        }
    }

    /// What this sampler (with all its clones) decided so far, and how full the cap's
    /// current window is. Refusals by the probability count as
    /// [`DropReason::Probability`], by the cap as [`DropReason::RateLimit`].
    pub fn stats(&self) -> SamplerStats {
        SamplerStats {
            decisions: self.inner.counters.snapshot(),
            window: self.inner.adaptive.window_fill(),
        }
    }

    /// The probability this window's decisions keep a trace with (before the cap).
    pub fn probability(&self) -> f64 {
        self.inner.adaptive.probability()
    }

    /// The cap: at most this many kept per window.
    pub fn limit(&self) -> Limit {
        self.inner.adaptive.limit()
    }

    /// The cap's limiter.
    pub fn cap(&self) -> &L {
        self.inner.adaptive.cap()
    }

    /// How remote parents are treated.
    pub fn remote_parents(&self) -> RemoteParents {
        self.inner.remote_parents
    }

    #[inline]
    fn decide(
        &self,
        origin: Origin,
        trace_id: TraceId,
        parent_state: &TraceState,
    ) -> SamplingResult {
        let inner = &*self.inner;
        let cap_remote = inner.remote_parents == RemoteParents::Cap;
        let threshold = inner
            .adaptive
            .threshold(|| offered(&inner.counters.snapshot(), cap_remote));
        let second_stage = origin == Origin::Remote;
        let event = match consistent::decide(threshold, trace_id, parent_state, second_stage) {
            Verdict::Keep(kept) if inner.adaptive.admit() => {
                inner.counters.record(Event::kept(origin.into()));
                return SamplingResult {
                    decision: SamplingDecision::RecordAndSample,
                    attributes: inner.attributes.clone(),
                    trace_state: kept.trace_state(parent_state),
                };
            }
            Verdict::Keep(_) => Event::dropped(DropReason::RateLimit, origin.into()),
            Verdict::Drop => Event::dropped(DropReason::Probability, origin.into()),
        };
        inner.counters.record(event);
        drop_span(parent_state)
    }
}

/// The traces offered to the sampler's own decision: roots, and remote parents when it
/// decides them (under `Follow` the remote ones it counts only followed their parent).
fn offered(stats: &DecisionStats, cap_remote: bool) -> u64 {
    let decided = |o: ParentOrigin| {
        stats.kept_from(o)
            + stats.dropped_for_from(DropReason::Probability, o)
            + stats.dropped_for_from(DropReason::RateLimit, o)
    };
    decided(ParentOrigin::Root)
        + if cap_remote {
            decided(ParentOrigin::Remote)
        } else {
            0
        }
}

impl<C: Clock, L: RateLimiter + 'static> ShouldSample for AdaptiveSampler<C, L> {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        parent::apply(
            parent_context,
            self.inner.remote_parents,
            Some(&self.inner.counters),
            |origin, state| self.decide(origin, trace_id, state),
        )
    }
}

impl<C, L> Clone for AdaptiveSampler<C, L> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C: Clock, L: RateLimiter> fmt::Debug for AdaptiveSampler<C, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveSampler")
            .field("limit", &self.inner.adaptive.limit())
            .field("probability", &self.inner.adaptive.probability())
            .field("remote_parents", &self.inner.remote_parents)
            .finish()
    }
}

/// Builds an [`AdaptiveSampler`].
///
/// ```
/// use std::time::Duration;
/// use otel_rate_sampler::{AdaptiveSampler, Limit, ManualClock, RemoteParents};
///
/// let sampler = AdaptiveSampler::builder(Limit::per_window(100, Duration::from_secs(1))?)
///     .remote_parents(RemoteParents::Cap)
///     .clock(ManualClock::new())
///     .build();
/// assert_eq!(sampler.probability(), 1.0, "nothing measured yet");
/// # Ok::<(), otel_rate_sampler::LimitError>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct AdaptiveSamplerBuilder<C = MonotonicClock> {
    limit: Limit,
    clock: C,
    remote_parents: RemoteParents,
}

impl<C: Clock + Clone> AdaptiveSamplerBuilder<C> {
    /// How spans with a remote parent are treated (default [`RemoteParents::Follow`]).
    pub fn remote_parents(mut self, remote_parents: RemoteParents) -> Self {
        self.remote_parents = remote_parents;
        self
    }

    /// The clock the estimate and the cap read (default [`MonotonicClock`]).
    pub fn clock<C2: Clock>(self, clock: C2) -> AdaptiveSamplerBuilder<C2> {
        AdaptiveSamplerBuilder {
            limit: self.limit,
            clock,
            remote_parents: self.remote_parents,
        }
    }

    /// Builds the sampler.
    pub fn build(self) -> AdaptiveSampler<C> {
        let cap = FixedWindow::with_clock(self.limit, self.clock.clone());
        AdaptiveSampler::with_cap(cap, self.clock, self.remote_parents)
    }
}

/// The set bit of [`Adaptive::window`] while its winner computes the new threshold.
const ROLLING: u64 = 1 << 63;

/// The adaptive probability and its cap, without a parent policy or counters of its
/// own: the [`AdaptiveSampler`] and the rule layer's `adaptive` policy share it.
pub(crate) struct Adaptive<C, L = FixedWindow<C>> {
    clock: C,
    cap: L,
    /// The index of the window whose threshold `threshold` holds, with [`ROLLING`] set
    /// while one caller computes the next one. Only moves forward.
    window: CachePadded<AtomicU64>,
    /// This window's rejection threshold (a [`Threshold`]'s value).
    threshold: AtomicU64,
    /// The offered total (as the caller's counters give it) at the last roll; written
    /// only by a roll's winner.
    offered_at_roll: AtomicU64,
    /// The clock reading at construction: the first window is measured from here.
    started: u64,
}

impl<C: Clock, L: RateLimiter> Adaptive<C, L> {
    /// An adaptive probability capped by `cap`, its windows timed by `clock`, starting
    /// at `p = 1`; `offered_now` is the offered total the caller's counters hold now
    /// (non-zero when a reload reuses a rule's counters).
    pub(crate) fn new(cap: L, clock: C, offered_now: u64) -> Self {
        let started = clock.now_nanos();
        let window = started / cap.limit().window_nanos();
        Self {
            started,
            clock,
            cap,
            window: CachePadded::new(AtomicU64::new(window)),
            threshold: AtomicU64::new(Threshold::ALWAYS.value()),
            offered_at_roll: AtomicU64::new(offered_now),
        }
    }

    /// This window's threshold. The first call of a window computes it from
    /// `offered_total()` (the total offered so far, over the sampler's life).
    #[inline]
    pub(crate) fn threshold(&self, offered_total: impl FnOnce() -> u64) -> Threshold {
        self.threshold_at(self.clock.now_nanos(), offered_total)
    }

    /// [`threshold`](Self::threshold) at clock reading `now`.
    #[inline]
    fn threshold_at(&self, now: u64, offered_total: impl FnOnce() -> u64) -> Threshold {
        let window = now / self.cap.limit().window_nanos();
        // Acquire: pairs with the Release store ending the last roll, so a roll started
        // from this value sees that roll's `offered_at_roll`.
        let current = self.window.load(Ordering::Acquire);
        if current & ROLLING == 0 && window > current {
            self.roll(current, window, offered_total);
        }
        // Relaxed: every value ever stored is a valid threshold; a caller that reads the
        // previous window's for a moment is still capped by `cap`.
        Threshold::from_value(self.threshold.load(Ordering::Relaxed))
    }

    #[cold]
    fn roll(&self, from: u64, to: u64, offered_total: impl FnOnce() -> u64) {
        // Acquire on success: as the load in `threshold`. Relaxed on failure: another
        // caller rolls (or rolled) this window; this one keeps the threshold it finds.
        if self
            .window
            .compare_exchange(from, to | ROLLING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let total = offered_total();
        // Relaxed: only roll winners touch it, ordered by the window word's
        // Acquire/Release.
        let offered = total.wrapping_sub(self.offered_at_roll.swap(total, Ordering::Relaxed));
        // Everything counted since the last roll was offered in window `from` (a later
        // window would have rolled), or in its part after construction: the rate per
        // window over the time since then, idle windows included.
        let window_nanos = self.cap.limit().window_nanos();
        let covered = u128::from(to) * u128::from(window_nanos)
            - u128::from(self.started.max(from * window_nanos));
        let per_window = (u128::from(offered) * u128::from(window_nanos)).div_ceil(covered.max(1));
        let per_window = u64::try_from(per_window).unwrap_or(u64::MAX);
        let permits = u64::from(self.cap.limit().permits());
        let threshold = Threshold::from_ratio(permits, per_window);
        // Relaxed: see `threshold`.
        self.threshold.store(threshold.value(), Ordering::Relaxed);
        // Release: publishes `offered_at_roll` to the next roll's winner.
        self.window.store(to, Ordering::Release);
    }

    /// One permit from the cap.
    #[inline]
    pub(crate) fn admit(&self) -> bool {
        self.cap.try_acquire()
    }

    pub(crate) fn probability(&self) -> f64 {
        // Relaxed: a reading for display.
        Threshold::from_value(self.threshold.load(Ordering::Relaxed)).probability()
    }

    pub(crate) fn limit(&self) -> Limit {
        self.cap.limit()
    }

    pub(crate) fn cap(&self) -> &L {
        &self.cap
    }

    /// How full the cap's current window is, if the cap can tell.
    pub(crate) fn window_fill(&self) -> Option<WindowFill> {
        self.cap.count_in_window().map(|used| WindowFill {
            used,
            permits: self.cap.limit().permits(),
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags};

    use super::*;
    use crate::ManualClock;

    /// A splitmix64 stream: well-spread trace ids, the same on every run.
    struct Ids(u64);

    impl Ids {
        fn next(&mut self) -> TraceId {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            TraceId::from(u128::from(z ^ (z >> 31)) | (1 << 64))
        }
    }

    fn sampler(permits: u32) -> (AdaptiveSampler<ManualClock>, ManualClock) {
        let clock = ManualClock::new();
        let limit = Limit::per_window(permits, Duration::from_secs(1)).unwrap();
        let s = AdaptiveSampler::builder(limit).clock(clock.clone()).build();
        (s, clock)
    }

    /// The `th` of a kept span's trace state, as a probability.
    fn probability_of(state: &TraceState) -> f64 {
        let ot = state.get("ot").expect("an ot entry");
        let th = ot
            .split(';')
            .find_map(|f| f.strip_prefix("th:"))
            .expect("a th sub-key");
        let padded = format!("{th:0<14}");
        let t = u64::from_str_radix(&padded, 16).unwrap();
        ((1u64 << 56) - t) as f64 / (1u64 << 56) as f64
    }

    /// One window of `offered` roots spread evenly over it: (kept, weighted kept).
    fn run_window(
        s: &AdaptiveSampler<ManualClock>,
        clock: &ManualClock,
        ids: &mut Ids,
        offered: u64,
    ) -> (u64, f64) {
        let step = 1_000_000_000 / offered;
        let start = clock.now_nanos();
        let (mut kept, mut weighted) = (0, 0.0);
        for i in 0..offered {
            clock.set(start + i * step);
            let r = s.should_sample(None, ids.next(), "op", &SpanKind::Server, &[], &[]);
            if r.decision == SamplingDecision::RecordAndSample {
                kept += 1;
                weighted += 1.0 / probability_of(&r.trace_state);
            } else {
                assert_eq!(r.decision, SamplingDecision::Drop);
            }
        }
        clock.set(start + 1_000_000_000);
        (kept, weighted)
    }

    #[test]
    fn steady_overload_keeps_nine_tenths_of_n_or_more_and_never_more_than_n() {
        let n = 1_000;
        let (s, clock) = sampler(n);
        let mut ids = Ids(1);
        let offered = 20_000;
        let (first, _) = run_window(&s, &clock, &mut ids, offered);
        assert!(first <= u64::from(n));
        let (mut all_kept, mut all_weighted) = (0, 0.0);
        for window in 1..=10 {
            let (kept, weighted) = run_window(&s, &clock, &mut ids, offered);
            assert!(kept <= u64::from(n), "window {window}: {kept}");
            assert!(kept * 10 >= u64::from(n) * 9, "window {window}: {kept}");
            let error = (weighted - offered as f64).abs() / offered as f64;
            assert!(error <= 0.10, "window {window}: weighted {weighted}");
            all_kept += kept;
            all_weighted += weighted;
        }
        assert!((s.probability() - 0.05).abs() < 1e-9, "{}", s.probability());
        assert!(all_kept <= 10 * u64::from(n));
        let error = (all_weighted - 10.0 * offered as f64).abs() / (10.0 * offered as f64);
        assert!(error <= 0.10, "all windows: weighted {all_weighted}");
        let d = s.stats().decisions;
        assert_eq!(d.total(), 11 * offered);
        assert_eq!(d.kept(), first + all_kept);
    }

    #[test]
    fn a_load_step_up_is_capped_at_once_and_the_next_window_adapts() {
        let n = 1_000;
        let (s, clock) = sampler(n);
        let mut ids = Ids(7);
        run_window(&s, &clock, &mut ids, 2_000);
        let (kept, _) = run_window(&s, &clock, &mut ids, 2_000);
        assert!((900..=1_000).contains(&kept), "{kept}");
        // Ten times the load: p is still 1/2 for this window, the cap holds.
        let (kept, weighted) = run_window(&s, &clock, &mut ids, 20_000);
        assert!(kept <= u64::from(n), "{kept}");
        // The shortfall the docs state: N / p instead of about `offered`.
        assert!(weighted <= f64::from(n) / 0.5 + 1e-6, "{weighted}");
        // The next window's threshold rose at once: 1 000 / 20 000.
        let (kept, weighted) = run_window(&s, &clock, &mut ids, 20_000);
        assert!((s.probability() - 0.05).abs() < 1e-9);
        assert!((900..=1_000).contains(&kept), "{kept}");
        assert!((weighted - 20_000.0).abs() <= 2_000.0, "{weighted}");
        // And back down: a light load is kept whole with th:0.
        run_window(&s, &clock, &mut ids, 100);
        let (kept, weighted) = run_window(&s, &clock, &mut ids, 100);
        assert_eq!((kept, weighted), (100, 100.0));
        assert_eq!(s.probability(), 1.0);
    }

    #[test]
    fn kept_roots_carry_th_and_the_adaptive_attributes() {
        let (s, clock) = sampler(10);
        let mut ids = Ids(3);
        run_window(&s, &clock, &mut ids, 40);
        // 10 of 40: th = (1 − 1/4) × 2^56, "c".
        let kept: Vec<SamplingResult> = (0..40)
            .map(|_| s.should_sample(None, ids.next(), "op", &SpanKind::Server, &[], &[]))
            .filter(|r| r.decision == SamplingDecision::RecordAndSample)
            .collect();
        assert!(!kept.is_empty());
        for r in &kept {
            assert_eq!(r.trace_state.header(), "ot=th:c");
            assert_eq!(
                r.attributes,
                vec![
                    KeyValue::new(attributes::SAMPLER_TYPE, "adaptive"),
                    KeyValue::new(attributes::SAMPLER_PARAM, 10.0)
                ]
            );
        }
    }

    #[test]
    fn idle_windows_average_the_estimate_and_clones_share_state() {
        let (s, clock) = sampler(10);
        let c = s.clone();
        let mut ids = Ids(5);
        run_window(&s, &clock, &mut ids, 40);
        // Three idle windows: 40 over 4 windows is 10 a window, p = 1.
        clock.advance(Duration::from_secs(3));
        s.should_sample(None, ids.next(), "op", &SpanKind::Server, &[], &[]);
        assert_eq!(c.probability(), 1.0);
        assert_eq!(c.stats().decisions.total(), 41);
    }

    proptest::proptest! {
        /// Any sequence of pauses and bursts: never more than N kept in a window, and
        /// every kept span's `th` is the probability in force.
        #[test]
        fn any_load_keeps_at_most_n_per_window_with_the_th_in_force(
            steps in proptest::collection::vec((0u64..300, 0usize..40), 1..60),
            seed in 0u64..1000,
        ) {
            let clock = ManualClock::new();
            let limit = Limit::per_window(5, Duration::from_millis(100)).unwrap();
            let s = AdaptiveSampler::builder(limit).clock(clock.clone()).build();
            let mut ids = Ids(seed);
            let mut kept = std::collections::BTreeMap::<u64, u32>::new();
            for (pause_ms, calls) in steps {
                clock.advance(Duration::from_millis(pause_ms));
                for _ in 0..calls {
                    let r = s.should_sample(None, ids.next(), "op", &SpanKind::Server, &[], &[]);
                    if r.decision == SamplingDecision::RecordAndSample {
                        *kept.entry(clock.now_nanos() / 100_000_000).or_default() += 1;
                        let p = probability_of(&r.trace_state);
                        proptest::prop_assert!((p - s.probability()).abs() < 1e-12);
                    }
                }
            }
            for (window, n) in kept {
                proptest::prop_assert!(n <= 5, "window {}: {}", window, n);
            }
        }
    }

    #[test]
    fn a_first_window_seen_in_part_is_measured_as_a_rate() {
        let clock = ManualClock::new();
        clock.set(750_000_000);
        let limit = Limit::per_window(10, Duration::from_secs(1)).unwrap();
        let s = AdaptiveSampler::builder(limit).clock(clock.clone()).build();
        let mut ids = Ids(11);
        // 100 in the last quarter of window 0: 400 a window.
        for _ in 0..100 {
            s.should_sample(None, ids.next(), "op", &SpanKind::Server, &[], &[]);
        }
        clock.set(1_000_000_000);
        s.should_sample(None, ids.next(), "op", &SpanKind::Server, &[], &[]);
        assert!(
            (s.probability() - 10.0 / 400.0).abs() < 1e-12,
            "{}",
            s.probability()
        );
    }

    #[test]
    fn children_follow_and_capped_remote_parents_keep_a_raised_th() {
        let clock = ManualClock::new();
        let limit = Limit::per_window(100, Duration::from_secs(1)).unwrap();
        let s = AdaptiveSampler::builder(limit)
            .clock(clock.clone())
            .remote_parents(RemoteParents::Cap)
            .build();
        let mut ids = Ids(9);
        run_window(&s, &clock, &mut ids, 400); // p = 1/4 from now on
        let parent = |remote: bool, state: &str| {
            let sc = SpanContext::new(
                TraceId::from(1u128),
                SpanId::from(2u64),
                TraceFlags::SAMPLED,
                remote,
                state.parse().unwrap(),
            );
            Context::new().with_remote_span_context(sc)
        };
        let sample = |cx: &Context| {
            s.should_sample(
                Some(cx),
                TraceId::from(1u128),
                "op",
                &SpanKind::Server,
                &[],
                &[],
            )
        };
        // A local child follows, th untouched.
        let r = sample(&parent(false, "ot=th:8"));
        assert_eq!(r.decision, SamplingDecision::RecordAndSample);
        assert_eq!(r.trace_state.header(), "ot=th:8");
        // A remote parent kept at 1/2 with high rv: raised to 1/4's "c".
        let r = sample(&parent(true, "ot=th:8;rv:f0000000000000"));
        assert_eq!(r.trace_state.header(), "ot=th:c;rv:f0000000000000");
        // rv between the two thresholds: dropped.
        let r = sample(&parent(true, "ot=th:8;rv:a0000000000000"));
        assert_eq!(r.decision, SamplingDecision::Drop);
        let d = s.stats().decisions;
        assert_eq!(d.kept_from(ParentOrigin::Local), 1);
        assert_eq!(d.kept_from(ParentOrigin::Remote), 1);
        assert_eq!(
            d.dropped_for_from(DropReason::Probability, ParentOrigin::Remote),
            1
        );
    }

    #[test]
    fn threads_racing_over_window_edges_never_keep_more_than_n() {
        let n = 50u32;
        let (s, clock) = sampler(n);
        let kept_per_window: Vec<u64> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4u64)
                .map(|t| {
                    let s = s.clone();
                    let clock = clock.clone();
                    scope.spawn(move || {
                        let mut ids = Ids(t + 100);
                        let mut kept = vec![0u64; 8];
                        for i in 0..40_000u64 {
                            // Each thread walks the same 8 windows; the clock is shared
                            // and only moves forward.
                            let at = i * 200_000;
                            if at > clock.now_nanos() {
                                clock.set(at);
                            }
                            let r = s.should_sample(
                                None,
                                ids.next(),
                                "op",
                                &SpanKind::Server,
                                &[],
                                &[],
                            );
                            if r.decision == SamplingDecision::RecordAndSample {
                                let w = (clock.now_nanos() / 1_000_000_000) as usize;
                                kept[w.min(7)] += 1;
                            }
                        }
                        kept
                    })
                })
                .collect();
            let mut total = vec![0u64; 8];
            for h in handles {
                for (t, k) in total.iter_mut().zip(h.join().unwrap()) {
                    *t += k;
                }
            }
            total
        });
        // Attribution by a second clock read can shift a span across an edge, so the
        // bound is checked on the sum, which is exact.
        let total: u64 = kept_per_window.iter().sum();
        assert!(total <= 8 * u64::from(n), "{kept_per_window:?}");
        assert_eq!(s.stats().decisions.kept(), total);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;
    use loom::thread;

    use super::*;
    use crate::limiter::loom_support::model;
    use crate::ManualClock;

    const W: u64 = 1_000_000_000;

    /// Two callers cross into windows 1 and 2 at once (one each, or both into 1): every
    /// roll is made by one caller, the window word ends unlocked on a window one of them
    /// rolled to, and the threshold and offered total are those of the last roll.
    #[test]
    fn concurrent_rolls_are_made_once_and_leave_a_consistent_state() {
        for nows in [[W, W], [W, 2 * W]] {
            model(2, move || {
                let limit = Limit::per_window(10, std::time::Duration::from_nanos(W)).unwrap();
                let clock = ManualClock::new();
                let a = Arc::new(Adaptive::new(
                    FixedWindow::with_clock(limit, clock.clone()),
                    clock,
                    0,
                ));
                // Each caller's offered total: 40 by window 1's roll, 100 by window 2's.
                let rolls = Arc::new(AtomicUsize::new(0));
                let workers: Vec<_> = nows
                    .iter()
                    .map(|&now| {
                        let (a, rolls) = (Arc::clone(&a), Arc::clone(&rolls));
                        thread::spawn(move || {
                            a.threshold_at(now, || {
                                rolls.fetch_add(1, Ordering::Relaxed);
                                if now == W {
                                    40
                                } else {
                                    100
                                }
                            })
                        })
                    })
                    .collect();
                let seen: Vec<Threshold> = workers.into_iter().map(|w| w.join().unwrap()).collect();
                let window = a.window.load(Ordering::Acquire);
                assert_eq!(window & ROLLING, 0, "the window word is left unlocked");
                let rolls = rolls.load(Ordering::Relaxed);
                let total = a.offered_at_roll.load(Ordering::Relaxed);
                let threshold = Threshold::from_value(a.threshold.load(Ordering::Relaxed));
                match window {
                    // Only window 1 was rolled to: once, 40 offered in window 0.
                    1 => {
                        assert_eq!((rolls, total), (1, 40));
                        assert_eq!(threshold, Threshold::from_ratio(10, 40));
                    }
                    // Window 2 was rolled to last (from 1: 60 more in one window; from
                    // 0: 100 over two windows, 50 a window).
                    2 => {
                        assert!((1..=2).contains(&rolls));
                        assert_eq!(total, 100);
                        let per_window = if rolls == 2 { 60 } else { 50 };
                        assert_eq!(threshold, Threshold::from_ratio(10, per_window));
                    }
                    other => panic!("window {other}"),
                }
                // What a caller saw is p = 1 (before any roll) or a rolled threshold.
                for t in seen {
                    assert!(t == Threshold::ALWAYS || t.probability() < 1.0, "{t:?}");
                }
            });
        }
    }
}
