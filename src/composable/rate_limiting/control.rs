//! The keep probability of one decision: the window's kept-so-far against the pacing
//! schedule of a target a little under `N`, and the offered rate expected in the rest of
//! the schedule's step (a hazard rate: each permit still due is spent at a constant
//! rate over what is left of the step, so on average all of them by its end).
//!
//! Everything it reads is known before the span's randomness (the clock, the cap's count,
//! the offered-rate estimate), so the probability is *predictable*: the kept spans
//! weighted by `1/p` estimate the offered count without bias, however `p` moves.

use crate::composable::Threshold;
use crate::limit::Limit;
use crate::sampler::Threshold as Raw;

/// `2^56`: a threshold's range.
const MAX: u64 = 1 << 56;
/// The significant bits of a threshold's keep count (`2^56 − T`) that a decision keeps:
/// the probability rounded down by at most `2^-15` of itself, so `th` has few significant
/// hex digits (4 for `p` above 1/2, 5 at 1/10, one more per 16 times less) and
/// thresholds repeat across decisions.
const PRECISION_BITS: u32 = 16;
/// The least probability, as a share of the steady one (`target / offered per window`):
/// a span is never kept with probability 0 while the cap has room, so none is missing
/// from the weighted count, and spans kept past the schedule are absorbed by the margin.
const FLOOR: f64 = 0.125;

/// The schedule a window's keeps follow: `a(i) = ⌈T·(i+1)/B⌉` by the end of pacing step
/// `i` of `B` ([`Limit::pacing_steps`]: 1 when unpaced), for a target `T` under `N`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Plan {
    window: u64,
    steps: u64,
    step_len: u64,
    target: u64,
    /// `a(i)` for each step (no division on the decision path).
    due: [u64; Limit::MAX_SUB_WINDOWS as usize],
}

impl Plan {
    pub(super) fn new(limit: Limit) -> Self {
        let window = limit.window_nanos();
        let steps = u64::from(limit.pacing_steps());
        let target = target(u64::from(limit.permits()));
        let mut due = [target; Limit::MAX_SUB_WINDOWS as usize];
        for (i, due) in due.iter_mut().enumerate().take(steps as usize) {
            *due = (target * (i as u64 + 1)).div_ceil(steps);
        }
        Self {
            window,
            steps,
            step_len: window / steps,
            target,
            due,
        }
    }

    /// `T`, what a window under steady overload keeps.
    pub(super) fn target(&self) -> u64 {
        self.target
    }

    /// The window length in nanoseconds.
    pub(super) fn window(&self) -> u64 {
        self.window
    }

    /// The keep probability at `offset` nanoseconds into a window that has kept `kept`,
    /// with `per_window` spans offered per window expected (0: not measured yet, keep
    /// everything the cap admits). One division: `max(d·W, FLOOR·T·r) / (E·r)` for `d`
    /// due and `r` nanoseconds left in the step.
    #[inline]
    pub(super) fn probability(&self, offset: u64, kept: u64, per_window: f64) -> f64 {
        if per_window <= 0.0 {
            return 1.0;
        }
        let (end, due) = if self.steps == 1 {
            (self.window, self.target)
        } else {
            let step = (offset / self.step_len).min(self.steps - 1);
            let end = if step + 1 == self.steps {
                self.window
            } else {
                (step + 1) * self.step_len
            };
            (end, self.due[step as usize])
        };
        let rest = end.saturating_sub(offset).max(1) as f64;
        let remaining = due.saturating_sub(kept) as f64;
        let floor = FLOOR * self.target as f64 * rest;
        ((remaining * self.window as f64).max(floor) / (per_window * rest)).min(1.0)
    }

    /// The steady probability: the target over the offered spans per window.
    pub(super) fn steady(&self, per_window: f64) -> f64 {
        if per_window <= 0.0 {
            return 1.0;
        }
        (self.target as f64 / per_window).min(1.0)
    }
}

/// `T = N − m`: the margin `m` (3, and one more per 256 permits, at most a quarter of
/// `N`) absorbs what the floor keeps past the schedule at a window's end, so the cap
/// rarely binds under a steady load.
fn target(permits: u64) -> u64 {
    permits - (3 + permits / 256).min(permits / 4)
}

/// The threshold of probability `p` (in `(0, 1]`), its keep count `p·2^56` rounded down
/// to [`PRECISION_BITS`] significant bits (`p` at most `2^-15` of itself lower, never
/// 0): a threshold `th` expresses exactly, which is the probability the span is kept
/// with.
#[inline]
pub(super) fn threshold(p: f64) -> Threshold {
    // Exact scaling by a power of two; the cast truncates (rounds down), saturates and
    // maps NaN to 0, and the clamp keeps the least probability above 0.
    let keep = ((p * MAX as f64) as u64).clamp(1, MAX);
    let shift = (u64::BITS - keep.leading_zeros()).saturating_sub(PRECISION_BITS);
    Threshold(Raw::from_value(MAX - (keep >> shift << shift)))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::*;

    fn plan(permits: u32, paced: bool) -> Plan {
        let limit = Limit::per_window(permits, Duration::from_secs(1)).unwrap();
        Plan::new(if paced { limit } else { limit.unpaced() })
    }

    #[test]
    fn the_target_leaves_a_small_margin_under_n() {
        for (n, t) in [
            (1, 1),
            (4, 3),
            (8, 6),
            (100, 97),
            (1000, 994),
            (10_000, 9958),
        ] {
            assert_eq!(plan(n, false).target(), t, "{n}");
        }
    }

    #[test]
    fn on_schedule_the_probability_is_the_steady_one_and_catches_up_when_behind() {
        let p = plan(1000, false); // T = 994
        let half = 500_000_000;
        // Half the window gone, half the target kept, 10 000 offered per window.
        let on = p.probability(half, 497, 10_000.0);
        assert!((on - 0.0994).abs() < 1e-3, "{on}");
        // Behind by half: twice the steady probability; ahead: the floor.
        assert!((p.probability(half, 248, 10_000.0) - 0.1492).abs() < 1e-3);
        assert_eq!(p.probability(half, 994, 10_000.0), FLOOR * 994.0 / 10_000.0);
        // Unmeasured: everything; last instants, behind: everything.
        assert_eq!(p.probability(0, 0, 0.0), 1.0);
        assert_eq!(p.probability(999_999_999, 900, 10_000.0), 1.0);
    }

    #[test]
    fn paced_the_schedule_is_cumulative_by_step() {
        let p = plan(100, true); // T = 97, 10 steps of 100 ms: a(0) = 10, a(4) = 49
        let start = p.probability(0, 0, 1000.0);
        assert!((start - 0.1).abs() < 1e-9, "{start}");
        // Halfway through step 4 with 44 kept: 5 due over 50 expected.
        let mid = p.probability(450_000_000, 44, 1000.0);
        assert!((mid - 0.1).abs() < 1e-9, "{mid}");
    }

    #[test]
    fn thresholds_are_rounded_to_sixteen_significant_bits_of_the_keep_count() {
        assert_eq!(threshold(1.0), Threshold::ALWAYS);
        assert_eq!(threshold(0.5).value(), 1 << 55);
        // th:e6668 (5 hex digits) at 1/10; 4 digits above 1/2.
        assert_eq!(threshold(0.1).value(), 0xe6_6680_0000_0000);
        assert!(threshold(0.7).value().trailing_zeros() >= 40);
        for p in [0.1, 0.0123, 0.98765, 1e-9] {
            let t = threshold(p);
            let keep = MAX - t.value();
            assert!(keep.leading_zeros() + keep.trailing_zeros() >= 64 - PRECISION_BITS);
            assert!(t.probability() <= p && t.probability() >= p * (1.0 - 1.0 / 32768.0));
        }
    }
}
