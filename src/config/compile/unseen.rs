//! What a changed limit's replacement must count on a reload beyond what the old
//! limiter counts: the part of the new limiter's look-back that the old one no longer
//! counts.
//!
//! The old limiter counts what its lineage admitted in its own window, and the
//! replacement absorbs that, dated at the reload. When the new window is as long and of
//! the same shape, that is all the new look-back holds. When its length or kind changed,
//! the new look-back can reach further back (a longer window; 1 s after 1.5 s at
//! 1.5 s, whose aligned window began at 1 s; a sliding window after an aligned one):
//! what the lineage admitted there, the old limiter no longer knows. So the
//! replacement also counts an upper bound of it: what the old limiter lets through of
//! its own in that span by its guarantee (its `N` per window of its own meeting the
//! span), or, when the span reaches back before the old limiter decided alone (a limit
//! before it, of which nothing is known, decided there, also at the very instant the old
//! one began, where what it carried is dated), as much as fills any limiter.
//! The bound is not cut at the replacement's permits (what it cannot hold is its limit's
//! excess, `handover`): a replacement replaced again while the span is in its window
//! hands the whole bound on, where a bound cut at 1 permit would let a next limit of 6
//! give out 5 more of what the lineage had already admitted. It is capped only at
//! [`Limit::MAX_PERMITS`], which fills a limiter of any limit. It is computed once, at
//! the reload, never on the decision path.
//!
//! A rule whose limiter was dropped (its window empty) and that comes back later is the
//! same lineage: its new limiter counts, the same way, what a limiter of the dropped
//! one's shape could have let through before it emptied ([`unseen_before`]).

use crate::clock::Clock;
use crate::limit::Limit;
use crate::limiter::{AnyLimiter, Shape};

/// A count that fills a limiter of any limit: every limit's permits are at most this.
const FILLS_ANY: u64 = Limit::MAX_PERMITS as u64;

/// When a limit that starts deciding for its lineage at `now`, with what it carries
/// dated then, decides alone: the next nanosecond. At `now` itself the limit before it
/// decided too (decisions at a reload's instant run under both files), so a later
/// look-back that reaches `now` reaches admissions the new limit's own guarantee does
/// not bound ([`unseen`] then counts as much as fills any limiter).
pub(crate) fn alone_from(now: u64) -> u64 {
    now.saturating_add(1)
}

/// What `new`, replacing at `now` the limiter `old` that decided alone from `began`
/// (clock nanoseconds; 0 when nothing of its lineage came before it), counts beyond what
/// `old` counts at `now`: at most [`FILLS_ANY`], 0 when `new` looks back no further
/// than `old` counts.
pub(crate) fn unseen<C: Clock>(
    old: &AnyLimiter<C>,
    began: u64,
    new: &AnyLimiter<C>,
    now: u64,
) -> u64 {
    unseen_before(old.shape(), began, old.counted_from(now), new, now)
}

/// What `new`, starting at `now` in the lineage of a limiter of shape `old` that began
/// at `began`, counts of what that lineage admitted before `counted` (from `counted`
/// on, it is counted elsewhere or was nothing): an upper bound of it, at most
/// [`FILLS_ANY`], 0 when `new` looks back no further than `counted`.
pub(crate) fn unseen_before<C: Clock>(
    old: Shape,
    began: u64,
    counted: u64,
    new: &AnyLimiter<C>,
    now: u64,
) -> u64 {
    let from = new.counted_from(now);
    if from >= counted {
        return 0;
    }
    if from < began {
        return FILLS_ANY;
    }
    old.most_in(from, counted).min(FILLS_ANY)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limit::Limit;
    use crate::limiter::Algorithm::{self, *};

    const MS: u64 = 1_000_000;

    fn limiter(algorithm: Algorithm, n: u32, ms: u64) -> AnyLimiter<ManualClock> {
        let limit = Limit::per_window(n, Duration::from_millis(ms)).unwrap();
        AnyLimiter::with_clock(algorithm, limit, ManualClock::new())
    }

    /// `unseen` for a limiter that began long before, at `now` (ms).
    fn at(old: (Algorithm, u32, u64), new: (Algorithm, u32, u64), now: u64) -> u64 {
        let (old, new) = (limiter(old.0, old.1, old.2), limiter(new.0, new.1, new.2));
        unseen(&old, 0, &new, now * MS)
    }

    #[test]
    fn the_same_window_and_kind_or_a_look_back_inside_the_old_one_carry_nothing_more() {
        for kind in Algorithm::ALL {
            assert_eq!(at((kind, 5, 1000), (kind, 9, 1000), 1600), 0, "{kind}");
            // A shorter window of the same kind, cut at the same edges.
            assert_eq!(at((kind, 5, 1000), (kind, 9, 500), 1600), 0, "{kind}");
        }
        // A fixed or aligned window after a sliding one of the same length: its window
        // began after what the sliding one still counts.
        for old in [SlidingLog, BucketedWindow] {
            for new in [FixedWindow, SlidingWindow] {
                assert_eq!(
                    at((old, 5, 1000), (new, 9, 1000), 1600),
                    0,
                    "{old} -> {new}"
                );
            }
        }
    }

    /// Issue 17's example: 1 per 1.5 s changed at 1.5 s to 2 per 1 s, whose window began
    /// at 1 s, in the old window [0, 1.5 s): up to 1 admitted there.
    #[test]
    fn a_window_cut_elsewhere_counts_the_old_n_per_old_window_it_reaches() {
        for new in [FixedWindow, SlidingWindow] {
            assert_eq!(at((FixedWindow, 1, 1500), (new, 2, 1000), 1500), 1, "{new}");
        }
        // 3 per 500 ms to 10 per 2 s at 1.2 s: [0, 1 s) is two old windows, 6.
        assert_eq!(at((FixedWindow, 3, 500), (FixedWindow, 10, 2000), 1200), 6);
        // Not cut at the new permits: what 4 per 2 s cannot hold is its excess, and a
        // replacement of it carries it on.
        assert_eq!(at((FixedWindow, 3, 500), (FixedWindow, 4, 2000), 1200), 6);
    }

    #[test]
    fn a_sliding_window_after_an_aligned_one_counts_the_old_window_before() {
        // At 1.6 s the log looks back to 0.6 s, the bucketed window (100 ms sub-windows)
        // to 0.7 s: the fixed window [0, 1 s) meets both, 5.
        assert_eq!(at((FixedWindow, 5, 1000), (SlidingLog, 9, 1000), 1600), 5);
        assert_eq!(
            at((SlidingWindow, 5, 1000), (BucketedWindow, 9, 1000), 1600),
            5
        );
        // A longer log after a shorter log: [0.1 s, 1.1 s) before the old log's look-back,
        // one old window's length, 5.
        assert_eq!(at((SlidingLog, 5, 1000), (SlidingLog, 9, 2000), 2100), 5);
        // A longer bucketed window after a shorter one (50 ms and 100 ms sub-windows): at
        // 2.06 s the old one counts from 1.6 s, the new one from 1.1 s: 10 sub-windows
        // of 50 ms, one old run, 5.
        assert_eq!(
            at((BucketedWindow, 5, 500), (BucketedWindow, 9, 1000), 2060),
            5
        );
    }

    /// Before the old limiter began, another limit decided: nothing is known of what it
    /// admitted, so the replacement counts as much as fills any limiter.
    #[test]
    fn a_span_before_the_old_limiter_began_fills_any_limiter() {
        let (old, new) = (limiter(FixedWindow, 1, 1500), limiter(FixedWindow, 2, 1000));
        assert_eq!(unseen(&old, 1200 * MS, &new, 1500 * MS), FILLS_ANY);
        assert_eq!(unseen(&old, 1000 * MS, &new, 1500 * MS), 1);
    }
}
