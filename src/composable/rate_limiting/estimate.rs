//! The offered rate estimate: spans offered per window, measured from the decision
//! counters by a *roll* made on the keep path only (a dropped span writes nothing shared).
//!
//! A roll is due at a kept span when a sixteenth of a window has passed since the last
//! one, or early when the window has kept a surge's worth since (the estimate is too low:
//! a load step up, or the first window). One caller wins the roll word's
//! compare-exchange and sums the counters (about a thousand relaxed loads), so a window
//! pays for at most a few dozen sums whatever the load. A regular roll moves the estimate
//! a share of the way (`elapsed / (W/4)`) to the rate measured since the last roll; an
//! early roll takes the measured rate when it is higher. The offered count is exact (each
//! decision counts itself in its thread's own cell anyway, for `stats()`), so the
//! estimate owes nothing to the spans' randomness.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// The set bit of [`Estimate::rolled`] while its winner computes the new estimate.
const ROLLING: u64 = 1 << 63;
/// Regular rolls per window.
const ROLLS: u64 = 16;
/// The smoothing time of a regular roll, in windows' quarters.
const SMOOTHING: u64 = 4;

pub(super) struct Estimate {
    /// The roll index (`now / (W/16)`) of the last roll, with [`ROLLING`] set while one
    /// caller computes the next estimate. Only moves forward.
    rolled: CachePadded<AtomicU64>,
    /// The offered spans per window, as `f64` bits (0: not measured yet).
    per_window: AtomicU64,
    /// The window's kept count from which a roll is due early.
    surge_at: AtomicU64,
    /// The clock reading and the offered total at the last roll: written and read only
    /// by roll winners.
    at: AtomicU64,
    offered_at: AtomicU64,
    window: u64,
    roll_len: u64,
    /// Keeps since the last roll that make a surge: twice a roll's share of the target
    /// and two more.
    surge: u64,
}

impl Estimate {
    /// No estimate yet, at clock reading `now`, with `offered_now` offered so far.
    pub(super) fn new(window: u64, target: u64, now: u64, offered_now: u64) -> Self {
        let roll_len = (window / ROLLS).max(1);
        let surge = 2 * target.div_ceil(ROLLS) + 2;
        Self {
            rolled: CachePadded::new(AtomicU64::new(now / roll_len)),
            per_window: AtomicU64::new(0f64.to_bits()),
            surge_at: AtomicU64::new(surge),
            at: AtomicU64::new(now),
            offered_at: AtomicU64::new(offered_now),
            window,
            roll_len,
            surge,
        }
    }

    /// The offered spans per window expected (0 before the first measurement).
    #[inline]
    pub(super) fn per_window(&self) -> f64 {
        // Relaxed: every value stored is a whole estimate; a decision that reads the
        // previous one for a moment decides with it, as it would have a moment earlier.
        f64::from_bits(self.per_window.load(Ordering::Relaxed))
    }

    /// After a keep at `now` that left `kept` kept in its window: rolls if one is due,
    /// taking the offered total from `offered_total` (called by the roll's winner only).
    #[inline]
    pub(super) fn after_keep(&self, now: u64, kept: u64, offered_total: impl FnOnce() -> u64) {
        // Acquire: pairs with the Release ending the last roll, so a roll started from
        // this value sees that roll's `at` and `offered_at`.
        let current = self.rolled.load(Ordering::Acquire);
        if current & ROLLING != 0 {
            return;
        }
        let index = now / self.roll_len;
        // Relaxed: a hint when to roll; a stale one makes a roll early or late by a keep.
        let surge = kept >= self.surge_at.load(Ordering::Relaxed);
        if index > current || surge {
            self.roll(current, index.max(current), now, kept, surge, offered_total);
        }
    }

    #[cold]
    fn roll(
        &self,
        from: u64,
        to: u64,
        now: u64,
        kept: u64,
        surge: bool,
        offered_total: impl FnOnce() -> u64,
    ) {
        // Acquire on success: as the load in `after_keep`. Relaxed on failure: another
        // caller rolls (or rolled); this keep leaves it to them.
        if self
            .rolled
            .compare_exchange(from, to | ROLLING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // Relaxed (these four): only roll winners touch them, ordered by the roll
        // word's Acquire/Release.
        let at = self.at.load(Ordering::Relaxed);
        if now > at {
            let total = offered_total();
            let offered = total.wrapping_sub(self.offered_at.swap(total, Ordering::Relaxed));
            self.at.store(now, Ordering::Relaxed);
            let elapsed = now - at;
            let rate = offered as f64 * self.window as f64 / elapsed as f64;
            let old = self.per_window();
            let share = (elapsed as f64 * SMOOTHING as f64 / self.window as f64).min(1.0);
            let new = if old <= 0.0 || (surge && rate > old) {
                rate
            } else {
                old + (rate - old) * share
            };
            // Relaxed: see `per_window`.
            self.per_window.store(new.to_bits(), Ordering::Relaxed);
        }
        // Relaxed: see `after_keep`.
        self.surge_at.store(kept + self.surge, Ordering::Relaxed);
        // Release: publishes `at` and `offered_at` to the next roll's winner.
        self.rolled.store(to, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const W: u64 = 1_600_000_000; // rolls of 100 ms

    #[test]
    fn the_first_roll_measures_and_later_ones_smooth_toward_the_rate() {
        let e = Estimate::new(W, 100, 0, 0);
        assert_eq!(e.per_window(), 0.0);
        // Not due inside the first roll's interval below a surge (2·7 + 2 = 16 keeps).
        e.after_keep(W / 32, 15, || unreachable!("not due"));
        assert_eq!(e.per_window(), 0.0);
        // Due at the next interval: 1000 offered in a tenth of a window: 10 000 a window.
        e.after_keep(W / 10, 15, || 1000);
        assert_eq!(e.per_window(), 10_000.0);
        // A tenth of a window later, 500 more (5000 a window): moved 0.4 of the way.
        e.after_keep(2 * W / 10, 30, || 1500);
        assert!((e.per_window() - 8000.0).abs() < 1e-6, "{}", e.per_window());
    }

    #[test]
    fn a_surge_of_keeps_rolls_early_and_takes_a_higher_rate_at_once() {
        let e = Estimate::new(W, 100, 0, 0);
        e.after_keep(W / 10, 1, || 1000);
        assert_eq!(e.per_window(), 10_000.0);
        // Within the same interval: 16 keeps more make a surge; 2000 offered in 1/100.
        e.after_keep(W / 10 + W / 100, 16, || unreachable!("no surge yet"));
        e.after_keep(W / 10 + W / 100, 17, || 3000);
        assert_eq!(e.per_window(), 200_000.0);
        // A lower rate at a surge is smoothed like a regular roll.
    }

    #[test]
    fn a_roll_at_the_same_instant_keeps_the_estimate() {
        let e = Estimate::new(W, 100, 5, 0);
        e.after_keep(5, 16, || {
            unreachable!("no time has passed: nothing to measure")
        });
        assert_eq!(e.per_window(), 0.0);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;
    use loom::thread;

    use super::*;
    use crate::limiter::loom_support::model;

    const W: u64 = 1_600;

    /// Two keeps roll at once (one into the next interval, one by a surge, or both by
    /// time): the counters are summed only by winners, the roll word ends unlocked on the
    /// furthest interval rolled to, and the estimate is one a winner computed.
    #[test]
    fn concurrent_rolls_are_made_by_their_winners_alone_and_leave_a_whole_estimate() {
        for (a, b) in [((100, 1), (100, 1)), ((100, 1), (150, 40))] {
            model(2, move || {
                let e = Arc::new(Estimate::new(W, 100, 0, 0));
                let sums = Arc::new(AtomicUsize::new(0));
                let workers: Vec<_> = [a, b]
                    .into_iter()
                    .map(|(now, kept)| {
                        let (e, sums) = (Arc::clone(&e), Arc::clone(&sums));
                        thread::spawn(move || {
                            e.after_keep(now, kept, || {
                                sums.fetch_add(1, Ordering::Relaxed);
                                now * 10
                            })
                        })
                    })
                    .collect();
                for w in workers {
                    w.join().unwrap();
                }
                let rolled = e.rolled.load(Ordering::Acquire);
                assert_eq!(rolled & ROLLING, 0, "the roll word is left unlocked");
                let sums = sums.load(Ordering::Relaxed);
                assert!((1..=2).contains(&sums), "{sums} sums");
                // Offered 10 per nanosecond in every roll: 16 000 a window.
                assert_eq!(e.per_window(), 16_000.0);
                assert_eq!(
                    e.offered_at.load(Ordering::Relaxed),
                    e.at.load(Ordering::Relaxed) * 10
                );
            });
        }
    }
}
