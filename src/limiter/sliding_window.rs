use std::fmt;

use crossbeam_utils::CachePadded;

use super::pacing::Pacer;
use super::packed::{self, count_for, pack, unpack, window_index};
use crate::clock::{Clock, MonotonicClock};
use crate::limit::Limit;
use crate::sync::{AtomicU64, Ordering};

/// A lock-free sliding-window counter: the previous and the current aligned window's
/// counts, with the previous one weighted by how much of it the sliding window still
/// covers. O(1) memory, approximate.
///
/// A call at offset `e` into window `k` is admitted iff
/// `⌊prev · (W − e) / W⌋ + curr + 1 ≤ N`, where `prev` is the count of window `k − 1` and
/// `curr` the count of window `k` (integer arithmetic, no floats, no division). The
/// estimate's fraction is dropped so that a saturated limiter keeps `N` per window,
/// spread over the window, rather than `N − 1` (or, for `N = 1`, one window in two).
///
/// # Guarantee and approximation bound
///
/// * At most `N` admissions in every aligned window (`curr` alone never passes `N`).
/// * In any interval `(t − W, t]` with `t` at offset `e` into window `k`, at most
///   `N + ⌈P · e / W⌉ ≤ 2N` admissions, where `P ≤ N` is the count of window `k − 1`.
///   The estimate assumes window `k − 1`'s admissions were spread evenly; the bound is
///   reached only when they all sat at its very end. With evenly spread traffic the
///   sliding count stays within about one admission of `N`.
/// * Under saturation it keeps `N` per window, spread evenly across the window.
/// * Paced (the default, see [`Limit`]'s "Pacing"), `curr` also follows the schedule: by
///   the end of sub-window `i` of `B`, at most `⌈N·(i+1)/B⌉` are counted in the aligned
///   window. This evens out the first window of a burst, which the weight of an empty
///   previous window does not.
/// * A call whose `now` is older than the newest window is counted in that newest window
///   with the previous window's full weight, which can only refuse more.
///
/// Use [`SlidingLog`](crate::SlidingLog) for an exact sliding guarantee at `16·N` bytes, or
/// [`FixedWindow`](crate::FixedWindow) for the cheapest aligned one. A
/// [`BucketedWindow`](crate::BucketedWindow), a ring of `B` sub-window counts (seed
/// article 4), sits between this counter and the log: within one sub-window (`W/B`) of
/// exact, in `O(B)` memory, for a sum of `B` counts per call.
///
/// # Memory ordering
///
/// The window index and `curr` live in one `AtomicU64` (the layout of
/// [`FixedWindow`](crate::FixedWindow)) changed only by compare-exchange from the word the
/// new value was computed from. The final count of the previous window goes into a
/// second word, tagged with the window it serves, by the call that rolls the window, with
/// `fetch_max` so a late roller can never put back an older tag. A reader whose tag does
/// not match (the roller has not written it yet) assumes `prev = N`, the largest it can
/// be. Both words publish nothing but themselves, so every access is `Relaxed`.
pub struct SlidingWindowCounter<C = MonotonicClock> {
    // Invariant: `state` = (window k, curr ≤ N), the window never decreases.
    state: CachePadded<AtomicU64>,
    // Invariant: (window j, count of window j − 1) with j ≤ k; once j == k the count is
    // final, because window k − 1 can no longer be counted into.
    previous: AtomicU64,
    permits: u64,
    window: u64,
    pacer: Pacer,
    limit: Limit,
    clock: C,
}

impl SlidingWindowCounter {
    /// A sliding-window counter on the default [`MonotonicClock`].
    pub fn new(limit: Limit) -> Self {
        Self::with_clock(limit, MonotonicClock::new())
    }
}

impl<C: Clock> SlidingWindowCounter<C> {
    /// A sliding-window counter reading `clock`.
    pub fn with_clock(limit: Limit, clock: C) -> Self {
        Self {
            state: CachePadded::new(AtomicU64::new(pack(0, 0))),
            // Window 0's previous window (before the origin) saw nothing.
            previous: AtomicU64::new(pack(0, 0)),
            permits: u64::from(limit.permits()),
            window: limit.window_nanos(),
            pacer: Pacer::new(limit),
            limit,
            clock,
        }
    }

    /// The admissions counted in the aligned window that holds `now` (for a `now` older
    /// than the newest window, the newest window's count).
    pub(crate) fn count_at(&self, now: u64) -> u64 {
        // Relaxed: a snapshot for a reload or for stats, see "Memory ordering" on the type.
        count_for(self.state.load(Ordering::Relaxed), now, self.window)
    }

    /// Counts `count` admissions made elsewhere in the aligned window of `now`, as many
    /// as fit under the permits, whatever the pacing schedule has released; returns how
    /// many. Where a replacement limiter takes what the one it replaces admitted. A roll
    /// it makes records the previous window as `acquire_at` would.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn absorb_at(&self, now: u64, count: u64) -> u64 {
        let now_window = window_index(now, self.window);
        let (taken, replaced) = packed::add_count(&self.state, now_window, count, self.permits);
        if let Some(replaced) = replaced {
            let (window, had) = unpack(replaced);
            let prev = if now_window == window + 1 { had } else { 0 };
            // Relaxed: as the roll in `acquire_at` (see "Memory ordering").
            self.previous
                .fetch_max(pack(now_window, prev), Ordering::Relaxed);
        }
        taken
    }

    /// Closes the limiter for good and returns what it counted in the aligned window
    /// of `now` at that instant: one swap of the head word to the closed word
    /// ([`super::closed_word`]), so every admission is either in the count returned or
    /// refused. Where a reload retires a replaced limiter.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn close_at(&self, now: u64) -> u64 {
        super::close_packed(&self.state, self.permits, now, self.window)
    }

    /// Gives back the permit of an admission stamped `stamp` ([`super::give_back_packed`]).
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    pub(crate) fn give_back(&self, stamp: u64) {
        super::give_back_packed(&self.state, stamp, self.window);
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Whether one more admission fits: `⌊prev·(W − e)/W⌋ + curr + 1 ≤ N`, which for
    /// integers is `prev·(W − e) < (N − curr)·W` (and `curr < N`).
    #[inline]
    fn fits(&self, prev: u64, elapsed: u64, curr: u64) -> bool {
        curr < self.permits
            && u128::from(prev) * u128::from(self.window - elapsed)
                < u128::from(self.permits - curr) * u128::from(self.window)
    }

    /// The decision for a call made at `now`: `Some(stamp)` or `None`.
    #[inline]
    pub(crate) fn acquire_at(&self, now: u64) -> Option<u64> {
        // Relaxed throughout: see "Memory ordering" on the type.
        let mut current = self.state.load(Ordering::Relaxed);
        loop {
            let (window, curr) = unpack(current);
            let start = window.saturating_mul(self.window);
            // Bounds first (a multiplication); only a new window pays for the division.
            if now >= start.saturating_add(self.window) {
                let now_window = window_index(now, self.window);
                if now_window > window {
                    // Roll: the word's window becomes the previous one (or nothing, if
                    // more than a window has passed). Only an admitted call rolls.
                    let prev = if now_window == window + 1 { curr } else { 0 };
                    // Below W except past the last window index (139 years at
                    // 1 ms windows), where the clamp keeps the weight defined.
                    let elapsed = (now - now_window * self.window).min(self.window - 1);
                    if !self.fits(prev, elapsed, 0) {
                        return None;
                    }
                    match packed::replace(&self.state, current, pack(now_window, 1)) {
                        Ok(()) => {
                            self.previous
                                .fetch_max(pack(now_window, prev), Ordering::Relaxed);
                            return Some(now);
                        }
                        Err(actual) => {
                            current = actual;
                            continue;
                        }
                    }
                }
            }
            if curr >= self.permits {
                return None;
            }
            // A stale reading (before `start`) counts into the newer window at its start,
            // where the previous window weighs the most.
            let stamp = now.clamp(start, start.saturating_add(self.window - 1));
            let elapsed = stamp - start;
            if elapsed < self.pacer.earliest(curr) {
                return None; // paced: this permit is not released yet
            }
            let (tag, count) = unpack(self.previous.load(Ordering::Relaxed));
            let prev = if tag == window { count } else { self.permits };
            if !self.fits(prev, elapsed, curr) {
                return None;
            }
            match packed::replace(&self.state, current, current + 1) {
                Ok(()) => return Some(stamp),
                Err(actual) => current = actual,
            }
        }
    }
}

super::clocked_rate_limiter!(SlidingWindowCounter);

impl<C: fmt::Debug> fmt::Debug for SlidingWindowCounter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Relaxed: a snapshot for display, nothing is read through it.
        let (window, curr) = unpack(self.state.load(Ordering::Relaxed));
        let (tag, prev) = unpack(self.previous.load(Ordering::Relaxed));
        f.debug_struct("SlidingWindowCounter")
            .field("limit", &self.limit)
            .field("window_index", &window)
            .field("current", &curr)
            .field("previous", &if tag == window { Some(prev) } else { None })
            .field("clock", &self.clock)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::prop_support::{limit, windows, Walk};
    use crate::limiter::RateLimiter;

    const W: u64 = 1_000_000_000;

    /// Unpaced: these tests are about the weighting, not the schedule.
    fn limiter(permits: u32) -> (SlidingWindowCounter<ManualClock>, ManualClock) {
        let clock = ManualClock::new();
        let limit = Limit::per_window(permits, Duration::from_nanos(W)).unwrap();
        (
            SlidingWindowCounter::with_clock(limit.unpaced(), clock.clone()),
            clock,
        )
    }

    #[test]
    fn paced_spreads_the_first_window_of_a_burst() {
        let clock = ManualClock::new();
        let limit = Limit::per_window(100, Duration::from_nanos(W)).unwrap();
        let l = SlidingWindowCounter::with_clock(limit, clock.clone());
        // Unpaced, the first window would give all 100 to its first instant.
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 10);
        clock.set(W / 2);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 50);
        clock.set(W - 1);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 40);
    }

    #[test]
    fn the_worked_example_of_the_survey() {
        // 100 per minute, 86 in the previous window, 12 in this one, 15 s in: 76.5.
        let clock = ManualClock::new();
        let limit = Limit::per_window(100, Duration::from_secs(60)).unwrap();
        let l = SlidingWindowCounter::with_clock(limit.unpaced(), clock.clone());
        clock.set(30 * W);
        assert_eq!((0..86).filter(|_| l.try_acquire()).count(), 86);
        clock.set(75 * W);
        assert_eq!((0..12).filter(|_| l.try_acquire()).count(), 12);
        // ⌊86·0.75⌋ + 12 = 76 (the survey's 76.5, floored): 24 more fit.
        assert_eq!((0..100).filter(|_| l.try_acquire()).count(), 24);
    }

    #[test]
    fn evenly_spread_traffic_stays_within_one_of_n() {
        let (l, clock) = limiter(100);
        // Offer 10 calls every 10 ms for 20 windows; keep the admission stamps.
        let mut stamps = Vec::new();
        for step in 0..2000u64 {
            clock.set(step * W / 100);
            stamps.extend((0..10).filter_map(|_| l.acquire_stamped()));
        }
        for &t in &stamps {
            let inside = stamps.iter().filter(|&&s| s + W > t && s <= t).count();
            assert!(inside <= 101, "{inside} in the window ending at {t}");
        }
    }

    #[test]
    fn saturated_keeps_n_per_window_even_for_n_1() {
        for permits in [1u32, 5, 100] {
            let (l, clock) = limiter(permits);
            // Offer 50 calls every millisecond for 10 windows.
            let mut per_window = [0u32; 10];
            for ms in 0..10_000u64 {
                clock.set(ms * 1_000_000);
                for _ in 0..50 {
                    if let Some(stamp) = l.acquire_stamped() {
                        per_window[(stamp / W) as usize] += 1;
                    }
                }
            }
            assert_eq!(per_window, [permits; 10], "N = {permits}");
        }
    }

    #[test]
    fn clock_stepping_back_counts_into_the_newer_window() {
        let (l, clock) = limiter(2);
        clock.set(5 * W);
        assert!(l.try_acquire());
        clock.set(W);
        assert_eq!(l.acquire_stamped(), Some(5 * W));
        assert_eq!(l.acquire_stamped(), None);
    }

    proptest! {
        /// The documented bound, checked over arbitrary traffic (any window length, a
        /// clock starting part-way and stepping back, paced or not): every aligned
        /// window holds at most N, and every interval (t − W, t] at most
        /// N + ⌈P·e/W⌉ ≤ 2N; paced, by the end of sub-window `i` at most ⌈N·(i+1)/B⌉
        /// are counted in the aligned window.
        #[test]
        fn approximation_bound_holds(
            permits in 1u32..30,
            paced in any::<bool>(),
            sub_windows in 1u32..=Limit::MAX_SUB_WINDOWS,
            w in windows(),
            start in 0u64..10_000_000_000,
            steps in proptest::collection::vec((0u64..300, 0usize..6, any::<bool>()), 1..300),
        ) {
            let mut walk = Walk::new(start, w);
            let limit = limit(permits, w, sub_windows, paced);
            let l = SlidingWindowCounter::with_clock(limit, walk.clock.clone());
            let n = permits as usize;
            let b = u64::from(limit.pacing_steps());
            let mut stamps = Vec::new();
            for (delta, calls, backwards) in steps {
                walk.step(delta, backwards);
                stamps.extend((0..calls).filter_map(|_| l.acquire_stamped()));
            }
            let in_window = |k: u64| stamps.iter().filter(|&&s| s / w == k).count();
            for &t in &stamps {
                let k = t / w;
                prop_assert!(in_window(k) <= n);
                let e = t % w;
                let p = if k == 0 { 0 } else { in_window(k - 1) } as u64;
                let bound = n + (p * e).div_ceil(w) as usize;
                let inside = stamps.iter().filter(|&&s| s + w > t && s <= t).count();
                prop_assert!(inside <= bound, "{} in (t-W, t], bound {}", inside, bound);
                prop_assert!(inside <= 2 * n);
                let step = (e / (w / b)).min(b - 1);
                let by_then = stamps.iter().filter(|&&s| s / w == k && s <= t).count() as u64;
                prop_assert!(by_then <= (u64::from(permits) * (step + 1)).div_ceil(b));
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::loom_support::{
        check_per_window, check_sliding, kept_beside_a_give_back, limit, model, stamps_in_windows,
        stamps_of, W,
    };

    fn run(workers: u64, permits: u32, paced: bool, times: &'static [u64]) {
        model(workers as usize, move || {
            let limit = limit(permits, paced);
            let l = Arc::new(SlidingWindowCounter::with_clock(limit, ManualClock::new()));
            let offset = |i: u64| times.iter().map(|&t| t + i).collect();
            let stamps = stamps_of(&l, workers, offset, SlidingWindowCounter::acquire_at);
            check_per_window(&stamps_in_windows(&stamps, W), permits as usize);
            // Sliding bound: at most 2N in any interval of length W.
            check_sliding(&stamps, 2 * permits as usize);
            assert!(!stamps.is_empty());
            if paced {
                // Two sub-windows (N = 2): at most one stamp in any window's first half.
                let per_first_half = stamps_in_windows(
                    &stamps
                        .iter()
                        .filter(|&&s| s % W < W / 2)
                        .copied()
                        .collect::<Vec<_>>(),
                    W,
                );
                check_per_window(&per_first_half, permits.div_ceil(2) as usize);
            }
        });
    }

    #[test]
    fn two_workers_exhaustive() {
        run(2, 1, false, &[W / 2, 2 * W - 1, 3 * W + W / 2]);
    }

    /// N = 1: a permit of window 0 given back while worker 1 rolls to window 2 (window
    /// 0 no longer weighs) and calls again: window 2 never counts it back.
    #[test]
    fn a_permit_given_back_racing_a_roll_stays_in_its_window() {
        model(2, || {
            let limit = limit(1, false);
            let l = Arc::new(SlidingWindowCounter::with_clock(limit, ManualClock::new()));
            let kept = kept_beside_a_give_back(
                &l,
                W - 1,
                vec![2 * W, 2 * W],
                SlidingWindowCounter::acquire_at,
                |l, stamp| l.give_back(stamp),
                |&stamp| stamp,
            );
            check_per_window(&stamps_in_windows(&kept, W), 1);
        });
    }

    #[test]
    fn three_workers_bounded_preemption() {
        run(3, 2, false, &[W - 10, W + W / 2]);
    }

    #[test]
    fn paced_two_workers_exhaustive() {
        run(2, 2, true, &[W / 4, W / 4, 3 * W / 4]);
    }
}
