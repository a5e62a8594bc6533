//! Paced admission: the schedule by which a window's permits become available.
//!
//! A window of `W` nanoseconds and `N` permits is cut into `B` steps (sub-windows) of
//! `s = ⌊W/B⌋` nanoseconds, the last one taking the remainder (under `B` nanoseconds).
//! By the end of step `i` at most `a(i) = ⌈N·(i+1)/B⌉` admissions may be counted in the
//! window. Put the other way round: the admission that finds `c` already counted (`c < N`)
//! may be made from offset `earliest(c) = ⌊c·B/N⌋·s` into the window on, because
//! `c < a(i)` ⟺ `c·B < N·(i+1)` ⟺ `⌊c·B/N⌋ ≤ i`.
//!
//! The hot path computes `⌊c·B/N⌋` without a division: `c·B < 2^28` (`c < 2^22`,
//! `B ≤ 64`), and for any numerator below 2^32 and divisor `d < 2^32`,
//! `⌊a/d⌋ = ⌊a·M/2^64⌋` with `M = ⌈2^64/d⌉` (Lemire, Kaser and Kurz, "Faster remainder by
//! direct computation", 2019, theorem 1 with F = 64 ≥ 32 + ⌈log2 d⌉). So one
//! multiplication by a precomputed `M` and one by `s`. Unpaced (`B = 1`), `M` is 0 and
//! every admission may be made from offset 0.

use crate::limit::Limit;

/// The pacing schedule of one limit (immutable, computed once).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pacer {
    /// `B`, the steps (1: unpaced).
    steps: u64,
    /// `s = ⌊W/B⌋`, the length of every step but the last.
    step_len: u64,
    /// `⌈2^64/N⌉` when `B > 1` (then `N ≥ B ≥ 2`, so it fits in 64 bits), else 0.
    magic: u64,
    permits: u64,
}

impl Pacer {
    /// The schedule of `limit`: [`Limit::pacing_steps`] steps over its window.
    pub(crate) fn new(limit: Limit) -> Self {
        Self::with_steps(limit, limit.pacing_steps())
    }

    /// The schedule of `limit` with `steps` steps (at most its permits; 1 = unpaced).
    pub(crate) fn with_steps(limit: Limit, steps: u32) -> Self {
        let permits = u64::from(limit.permits());
        let steps = u64::from(steps.clamp(1, limit.permits()));
        let magic = if steps > 1 {
            // N ≥ 2: the quotient is below 2^63, the sum fits.
            u64::MAX / permits + 1
        } else {
            0
        };
        Self {
            steps,
            step_len: limit.window_nanos() / steps,
            magic,
            permits,
        }
    }

    /// Whether admissions are paced at all (more than one step).
    #[inline]
    pub(crate) fn is_paced(&self) -> bool {
        self.steps > 1
    }

    /// The offset into its window from which the admission that finds `count` (below
    /// the permits) already counted may be made: `⌊count·B/N⌋·s`.
    #[inline]
    pub(crate) fn earliest(&self, count: u64) -> u64 {
        debug_assert!(count < self.permits);
        let quotient = (u128::from(count * self.steps) * u128::from(self.magic)) >> 64;
        // Below B (count < N), so the product is below W.
        quotient as u64 * self.step_len
    }

    /// The step holding `offset` and `a(i)`, the most admissions the window may have
    /// counted by its end. Divides (for the limiters that cannot count the window's
    /// admissions in one word: the sliding log); where the step starts and its own
    /// share are [`Step::start`] and [`Step::share`], a division more, left to the
    /// callers that need them (a refusal by the allowance does not).
    #[inline]
    pub(crate) fn step_at(&self, offset: u64) -> Step {
        let index = (offset / self.step_len).min(self.steps - 1);
        Step {
            index,
            allowance: (self.permits * (index + 1)).div_ceil(self.steps),
        }
    }
}

/// One step of a [`Pacer`]'s schedule (see [`Pacer::step_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    /// `i`, its place in the window.
    pub(crate) index: u64,
    /// `a(i)`: the most admissions counted in the window by the step's end.
    pub(crate) allowance: u64,
}

impl Step {
    /// Its offset into the window under `pacer`.
    #[inline]
    pub(crate) fn start(self, pacer: &Pacer) -> u64 {
        self.index * pacer.step_len
    }

    /// `a(i) − a(i − 1)`: what `pacer`'s schedule releases in this step alone.
    #[inline]
    pub(crate) fn share(self, pacer: &Pacer) -> u64 {
        self.allowance - (pacer.permits * self.index).div_ceil(pacer.steps)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;

    fn pacer(permits: u32, window: u64, steps: u32) -> Pacer {
        let limit = Limit::per_window(permits, Duration::from_nanos(window)).unwrap();
        Pacer::with_steps(limit, steps)
    }

    /// The reference: the step that holds `offset`, and whether `count` is under its
    /// allowance, with divisions.
    fn allowed(p: &Pacer, count: u64, offset: u64) -> bool {
        let step = (offset / p.step_len).min(p.steps - 1);
        count * p.steps < p.permits * (step + 1)
    }

    #[test]
    fn earliest_matches_the_division_for_every_count_of_small_limits() {
        for permits in 1..=200u32 {
            for steps in [1, 2, 3, 7, 10, 64] {
                let p = pacer(permits, 1_000_000_007, steps);
                for count in 0..u64::from(permits) {
                    let steps = p.steps;
                    let expect = count * steps / u64::from(permits) * p.step_len;
                    assert_eq!(p.earliest(count), expect, "N={permits} B={steps} c={count}");
                }
            }
        }
    }

    #[test]
    fn earliest_matches_the_division_at_the_largest_limits() {
        for permits in [
            Limit::MAX_PERMITS,
            Limit::MAX_PERMITS - 1,
            1 << 21,
            3_000_017,
        ] {
            let p = pacer(permits, 1_000_000_000, 64);
            for count in (0..u64::from(permits))
                .step_by(997)
                .chain([u64::from(permits) - 1])
            {
                assert_eq!(
                    p.earliest(count),
                    count * 64 / u64::from(permits) * p.step_len
                );
            }
        }
    }

    #[test]
    fn unpaced_admits_from_the_start() {
        let p = pacer(100, 1_000_000_000, 1);
        assert!(!p.is_paced());
        assert_eq!(p.earliest(99), 0);
        assert_eq!(p.step_at(0).allowance, 100);
        // One permit: nothing to pace.
        assert!(!pacer(1, 1_000_000_000, 10).is_paced());
    }

    #[test]
    fn a_hundred_per_second_is_ten_per_tenth_cumulatively() {
        let p = pacer(100, 1_000_000_000, 10);
        assert_eq!(p.earliest(9), 0);
        assert_eq!(p.earliest(10), 100_000_000);
        assert_eq!(p.earliest(99), 900_000_000);
        let first = p.step_at(0);
        assert_eq!(
            (first.start(&p), first.allowance, first.share(&p)),
            (0, 10, 10)
        );
        let last = p.step_at(999_999_999);
        assert_eq!(
            (last.start(&p), last.allowance, last.share(&p)),
            (900_000_000, 100, 10)
        );
        // The last step takes the remainder of a window that B does not divide.
        let odd = pacer(10, 1_000_000_009, 10);
        assert_eq!(odd.step_at(1_000_000_008).allowance, 10);
        assert_eq!(odd.step_at(1_000_000_008).start(&odd), 900_000_000);
        // Shares of a limit that B does not divide: 2, 1, 2, 1, ...
        let uneven = pacer(15, 1_000_000_000, 10);
        let shares: Vec<u64> = (0..10)
            .map(|i| uneven.step_at(i * 100_000_000).share(&uneven))
            .collect();
        assert_eq!(shares, [2, 1, 2, 1, 2, 1, 2, 1, 2, 1]);
    }

    proptest! {
        /// `earliest` and `step_at` are the same schedule: the admission after
        /// `count` may be made at `offset` iff `count` is under the allowance there, for
        /// every count of limits up to [`Limit::MAX_PERMITS`].
        #[test]
        fn earliest_and_allowance_agree(
            permits in prop_oneof![1u32..5000, 1u32..=Limit::MAX_PERMITS],
            steps in 1u32..=Limit::MAX_SUB_WINDOWS,
            window in 1_000_000u64..10_000_000_000,
            count in any::<u64>(),
            offset_frac in 0.0f64..1.0,
        ) {
            let p = pacer(permits, window, steps);
            let count = count % u64::from(permits);
            let offset = ((window as f64 * offset_frac) as u64).min(window - 1);
            let by_earliest = offset >= p.earliest(count);
            prop_assert_eq!(by_earliest, allowed(&p, count, offset));
            prop_assert_eq!(by_earliest, count < p.step_at(offset).allowance);
        }
    }
}
