//! What a reload carries out of any limiter and into its replacement, dated
//! ([`Carry`]): the sliding log by its stamps, the bucketed window by its sub-windows,
//! the aligned kinds (which count per aligned window) at the reading of the clock.

use super::{AnyLimiter, Inner};
use crate::clock::Clock;
use crate::limiter::carry::Carry;

impl<C: Clock> AnyLimiter<C> {
    /// What it counts in its window now, dated (see [`Carry`]): what a reload carries
    /// into its replacement. Nothing once closed.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn carried(&self) -> Carry {
        let now = self.clock().now_nanos();
        match &self.inner {
            Inner::Log(l) => l.carried_at(now),
            Inner::Bucketed(l) => l.carried_at(now),
            Inner::Fixed(_) | Inner::Sliding(_) => Carry::at(now, self.count_at(now)),
        }
    }

    /// [`close`](Self::close), with what it counted dated as [`carried`](Self::carried)
    /// dates it.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn close_carried(&self) -> Carry {
        let now = self.clock().now_nanos();
        match &self.inner {
            Inner::Log(l) => l.close_carried_at(now),
            Inner::Bucketed(l) => l.close_carried_at(now),
            Inner::Fixed(_) | Inner::Sliding(_) => Carry::at(now, self.close()),
        }
    }

    /// Counts, now, the admissions of `carry` that its window still holds at their
    /// dates (the sliding log in slots stamped with them, the bucketed window in their
    /// sub-windows; the aligned kinds in the current window), as many as fit under
    /// the permits whatever the pacing schedule has released, the newest first; returns
    /// those that did not fit. Dated only in a replacement that has decided nothing yet;
    /// in one that has, as [`absorb`](Self::absorb) (dated now).
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn absorb_carried(&self, carry: &Carry) -> Carry {
        let now = self.clock().now_nanos();
        match &self.inner {
            Inner::Log(l) => l.absorb_carried_at(now, carry),
            Inner::Bucketed(l) => l.absorb_carried_at(now, carry),
            Inner::Fixed(_) | Inner::Sliding(_) => {
                let mut rest = carry.clone();
                rest.retain_from(self.counted_from(now));
                let taken = self.absorb(rest.total());
                rest.split_newest(taken);
                rest
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use crate::clock::ManualClock;
    use crate::limit::Limit;
    use crate::limiter::{Algorithm, AnyLimiter, RateLimiter};

    const MS: u64 = 1_000_000;

    /// A fresh limiter of the same algorithm and limit that takes what one carries
    /// decides as that one would have: it admits again when the admissions carried
    /// leave the window, not a window after the reload (every algorithm, paced or not,
    /// admissions spread over a window and the reload late in it).
    #[test]
    fn a_replacement_of_the_same_shape_decides_as_the_limiter_it_replaces() {
        for algorithm in Algorithm::ALL {
            for paced in [false, true] {
                let clock = ManualClock::new();
                let limit = Limit::per_window(10, Duration::from_secs(1)).unwrap();
                let limit = if paced { limit } else { limit.unpaced() };
                let old = AnyLimiter::with_clock(algorithm, limit, clock.clone());
                let twin = AnyLimiter::with_clock(algorithm, limit, clock.clone());
                for step in 0..9 {
                    clock.set(5_000 * MS + step * 100 * MS);
                    for _ in 0..3 {
                        assert_eq!(old.try_acquire(), twin.try_acquire());
                    }
                }
                clock.set(5_950 * MS);
                let new = AnyLimiter::with_clock(algorithm, limit, clock.clone());
                let carried = old.carried();
                assert_eq!(carried.total(), old.count_in_window().unwrap());
                assert_eq!(new.absorb_carried(&carried).total(), 0);
                for step in 0..30 {
                    clock.set(5_950 * MS + step * 50 * MS);
                    for _ in 0..3 {
                        let case = format!("{algorithm} paced {paced} step {step}");
                        assert_eq!(new.try_acquire(), twin.try_acquire(), "{case}");
                    }
                }
            }
        }
    }

    /// What does not fit a smaller replacement is handed back, the oldest first, and
    /// a closed limiter carries what it counted when closed.
    #[test]
    fn a_smaller_replacement_keeps_the_newest_and_hands_back_the_oldest() {
        for algorithm in [Algorithm::SlidingLog, Algorithm::BucketedWindow] {
            let clock = ManualClock::new();
            let limit = |n| {
                Limit::per_window(n, Duration::from_secs(1))
                    .unwrap()
                    .unpaced()
            };
            let old = AnyLimiter::with_clock(algorithm, limit(10), clock.clone());
            for step in 0..5 {
                clock.set(2_000 * MS + step * 200 * MS);
                assert!(old.try_acquire() && old.try_acquire(), "{algorithm}");
            }
            let carried = old.close_carried();
            assert_eq!(carried.total(), 10, "{algorithm}");
            assert!(
                !old.try_acquire() && old.carried().total() == 0,
                "{algorithm}"
            );
            let small = AnyLimiter::with_clock(algorithm, limit(4), clock.clone());
            let rest = small.absorb_carried(&carried);
            assert_eq!(rest.total(), 6, "{algorithm}");
            // The 6 handed back are those of 2 s to 2.4 s; the 4 kept, 2.6 s and 2.8 s.
            assert_eq!(rest.count_from(2_600 * MS), 0, "{algorithm}");
            clock.set(3_600 * MS);
            assert_eq!(small.count_in_window(), Some(2), "{algorithm}");
        }
    }
}
