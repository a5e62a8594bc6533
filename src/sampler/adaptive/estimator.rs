//! The estimator: the offered rate of the last window, the rejection threshold it
//! derives for this one, and the cap that backs the threshold up.
//!
//! Its state (one window word, one threshold word, one offered total) is written once
//! per window, by the one caller that wins the window word's compare-exchange; every
//! other decision only loads it.

use crossbeam_utils::CachePadded;

use crate::clock::Clock;
use crate::limit::Limit;
use crate::limiter::{FixedWindow, RateLimiter};
use crate::sampler::consistent::Threshold;
use crate::stats::WindowFill;
use crate::sync::{AtomicU64, Ordering};

/// The set bit of [`Adaptive::window`] while its winner computes the new threshold.
const ROLLING: u64 = 1 << 63;

/// The adaptive probability and its cap, without a parent policy or counters of its
/// own: the [`AdaptiveSampler`](super::AdaptiveSampler) and the rule layer's `adaptive`
/// policy share it.
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
        let permits = u64::from(self.cap.limit().permits());
        let threshold = Threshold::from_ratio(permits, self.per_window(offered, from, to));
        // Relaxed: see `threshold`.
        self.threshold.store(threshold.value(), Ordering::Relaxed);
        // Release: publishes `offered_at_roll` to the next roll's winner.
        self.window.store(to, Ordering::Release);
    }

    /// The offered rate per window, rounded up, of `offered` traces counted since the
    /// roll to window `from`. Everything counted since then was offered in window `from`
    /// (a later window would have rolled), or in its part after construction: the rate
    /// per window over the time since then, up to window `to`, idle windows included.
    fn per_window(&self, offered: u64, from: u64, to: u64) -> u64 {
        let window_nanos = self.cap.limit().window_nanos();
        let covered = u128::from(to) * u128::from(window_nanos)
            - u128::from(self.started.max(from * window_nanos));
        let per_window = (u128::from(offered) * u128::from(window_nanos)).div_ceil(covered.max(1));
        u64::try_from(per_window).unwrap_or(u64::MAX)
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

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;
    use loom::thread;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::loom_support::model;

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
