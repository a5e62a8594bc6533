//! Handing a changed local limit's window over to its replacement on a reload, so that
//! permits used in a window are never given out again in it.
//!
//! A rule keeps its limiter across a reload when its limit and algorithm did not change
//! (the same object: nothing to hand over). When they changed, a new limiter replaces
//! the old one and must start where the old one was. Two things make that hard:
//!
//! * **The new limiter can hold fewer than were used.** Lowering a limit of 1000 (1000
//!   used) to 500 makes the new limiter absorb 500, its permits, counted whatever its
//!   pacing schedule has released; restoring 1000 in the same window would then carry
//!   500 and re-open 500 used permits. So each local limit
//!   also keeps an *excess*: admissions counted against it in the current window that
//!   its limiter does not hold. What a limit has used in its window is its limiter's
//!   count plus that excess, and that is what the next replacement carries.
//! * **Decisions run during the swap.** The carry-over is read when the new rules are
//!   built; decisions go on admitting through the old limiters meanwhile, and a thread
//!   keeps the rule set it last decided with in its cache (`runtime::rule_based`), so
//!   a decision that read the old rules just before they were replaced reaches the old
//!   limiters after. So, before the new rules are published, the reload
//!   [`settle`](Handover::settle)s each handover: it *closes* the old limiter by its own
//!   atomic state ([`AnyLimiter::close`]: one swap of its word, which freezes its count
//!   and refuses every later decision, as a full limiter refuses), and moves what it
//!   admitted since the snapshot into the new limiter's window (a permit each, what does
//!   not fit into its excess). No decision reaches the new limiter before it is
//!   published, so it needs no closed state of its own, and nothing waits for readers:
//!   a decision on the old rules either admitted before the close (and is carried) or
//!   is refused.
//!
//! A service cap's floors and shared pool are handed over as a whole
//! ([`cap_handover`]): the old ones that the new rules do not keep, also a floor the
//! reload removes or moves to another rule, are closed and what they admitted since
//! the snapshot is spread into the new ones.
//!
//! The guarantee this gives, and what it does not cover, is stated once, on
//! [`RuleBasedSampler::reload`](crate::RuleBasedSampler::reload); here,
//! [`LocalRule::close`] says how exact the frozen count is, and [`unseen`] what a
//! replacement whose window reaches back further counts beyond.

use crate::clock::Clock;
use crate::limiter::AnyLimiter;

use super::local_rule::{LocalRule, Snapshot};
use super::unseen::unseen;

mod forgotten;
#[cfg(all(test, loom))]
mod loom_tests;

pub(crate) use forgotten::Forgotten;

/// `limiter` as the replacement of `old`: it absorbs what `old` has used in its window,
/// and where its own look-back reaches before that, an upper bound of what was admitted
/// there ([`unseen`]; the excess beyond its permits kept aside), and the [`Handover`]
/// that closes `old` and settles what it admitted from now on, before the replacement
/// is published.
pub(crate) fn replacing<C: Clock>(
    limiter: AnyLimiter<C>,
    old: &LocalRule<C>,
) -> (LocalRule<C>, Handover<C>) {
    let now = limiter.clock().now_nanos();
    let unseen = unseen(&old.limiter, old.began(), &limiter, now);
    let (snapshot, mut carried) = old.snapshot_carried();
    // Each admission counted until it has left the old window too, as far as a date
    // at the reload reaches (a shorter new window: see `unseen`'s "not covered").
    let (was, will) = (old.limiter.shape(), limiter.shape());
    carried.raise(|date| {
        let leaves = was.counted_until(date).saturating_sub(1);
        date.max(now.min(will.counted_from(leaves)))
    });
    carried.push(unseen_date(old.limiter.counted_from(now), now), unseen);
    let new = LocalRule::new(limiter).succeeding(now, &carried);
    let handover = Handover::Limit {
        old: old.clone(),
        new: new.clone(),
        snapshot,
    };
    (new, handover)
}

/// The date of what a replacement counts of its lineage before `counted` (what the
/// limiter it goes on from counts begins there): the latest it can have been admitted.
pub(crate) fn unseen_date(counted: u64, now: u64) -> u64 {
    counted.saturating_sub(1).min(now)
}

/// Makes a service cap's new floors and shared pool (`limits`) hold, together, what the
/// old ones used in the window (`was`) or what they carried by identity, whichever is
/// more, filling their windows in order (the first takes what does not fit as excess).
/// So a floor removed, added, resized or moved re-opens nothing of the cap, and a cap
/// lowered below what was used leaves no floor any room.
pub(crate) fn spread<C: Clock>(was: u64, limits: &[&LocalRule<C>]) {
    let excess: u64 = limits.iter().map(|l| l.take_excess()).sum();
    let counted: u64 = limits.iter().map(|l| l.used()).sum();
    fill(was.max(counted + excess) - counted, limits);
}

/// Takes `count` admissions made elsewhere into `limits`' windows, filling each one's
/// room in order; the first takes what does not fit as excess.
fn fill<C: Clock>(mut count: u64, limits: &[&LocalRule<C>]) {
    for limit in limits {
        let take = limit.room().min(count);
        limit.absorb(take);
        count -= take;
    }
    if let Some(first) = limits.first() {
        first.add_excess(count);
    }
}

/// What a reload settles before it publishes the new rules.
pub(crate) enum Handover<C> {
    /// A changed limit's replacement.
    Limit {
        old: LocalRule<C>,
        new: LocalRule<C>,
        /// What `old` had used when `new` absorbed it.
        snapshot: Snapshot,
    },
    /// A limit no new rule goes on from (its rule removed, or made a probability),
    /// kept aside: closed, so a decision on the old rules after the new ones are
    /// published is refused, and what it admitted stays counted in its excess for the
    /// rule brought back (before, one whose window was empty was forgotten open, and
    /// such late admissions were not carried).
    Retire(LocalRule<C>),
    /// A service cap's floors and shared pool, as a whole: the old ones that the new
    /// rules do not keep admit until they are closed, and what they admitted since the
    /// new ones were given the cap's count is spread into the new ones.
    Cap {
        /// Each old floor or pool not kept, with what it had used when the new ones
        /// were given the cap's count.
        late_from: Vec<(LocalRule<C>, Snapshot)>,
        /// The new floors and pool, in the order `spread` fills them.
        into: Vec<LocalRule<C>>,
    },
}

impl<C: Clock> Handover<C> {
    /// Closes the old limiters ([`LocalRule::close`]) and moves what they admitted
    /// since the snapshot into the new ones (a permit of a window each while one has
    /// some, the rest into excess). Run before the new ones are published: no decision
    /// has reached them yet, and none reaches the old ones' permits after.
    pub(crate) fn settle(&self) {
        match self {
            Handover::Limit { old, new, snapshot } => {
                old.close();
                new.absorb(old.used_since(*snapshot));
            }
            Handover::Retire(old) => old.close(),
            Handover::Cap { late_from, into } => {
                late_from.iter().for_each(|(old, _)| old.close());
                let late: u64 = late_from
                    .iter()
                    .map(|(old, snapshot)| old.used_since(*snapshot))
                    .sum();
                let into: Vec<&LocalRule<C>> = into.iter().collect();
                fill(late, &into);
            }
        }
    }
}

/// The cap's handover for a reload: `old` are the previous floors and pool with what
/// each had used when `was` was counted, `new` the new ones (in `spread`'s order). The
/// old ones that are not new ones kept are closed when it is settled.
pub(crate) fn cap_handover<C: Clock>(
    old: &[(&LocalRule<C>, Snapshot)],
    new: &[&LocalRule<C>],
) -> Option<Handover<C>> {
    let late_from: Vec<(LocalRule<C>, Snapshot)> = old
        .iter()
        .filter(|(o, _)| !new.iter().any(|n| n.same(o)))
        .map(|(o, snapshot)| ((*o).clone(), *snapshot))
        .collect();
    if late_from.is_empty() {
        return None;
    }
    Some(Handover::Cap {
        late_from,
        into: new.iter().map(|n| (*n).clone()).collect(),
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limit::Limit;
    use crate::limiter::{Algorithm, RateLimiter};

    fn rule(algorithm: Algorithm, n: u32, clock: &ManualClock) -> AnyLimiter<ManualClock> {
        // Unpaced: these tests spend a window's permits at one instant.
        let limit = Limit::per_window(n, Duration::from_secs(3600))
            .unwrap()
            .unpaced();
        AnyLimiter::with_clock(algorithm, limit, clock.clone())
    }

    #[test]
    fn lowering_then_restoring_a_limit_does_not_reopen_used_permits() {
        for algorithm in Algorithm::ALL {
            let clock = ManualClock::new();
            clock.set(10);
            let first = LocalRule::new(rule(algorithm, 1000, &clock));
            assert_eq!(
                (0..1000).filter(|_| first.limiter.try_acquire()).count(),
                1000
            );
            let (low, h) = replacing(rule(algorithm, 500, &clock), &first);
            h.settle();
            assert_eq!(low.used(), 1000, "{algorithm}");
            let (back, h) = replacing(rule(algorithm, 1000, &clock), &low);
            h.settle();
            assert!(!back.limiter.try_acquire(), "{algorithm}: re-opened");
            // The next window is a fresh one.
            clock.advance(Duration::from_secs(2 * 3600));
            assert!(back.limiter.try_acquire(), "{algorithm}");
            assert_eq!(back.used(), 1, "{algorithm}");
        }
    }

    #[test]
    fn admissions_made_by_the_old_limiter_after_the_snapshot_are_settled() {
        let clock = ManualClock::new();
        let old = LocalRule::new(rule(Algorithm::FixedWindow, 10, &clock));
        assert_eq!((0..4).filter(|_| old.limiter.try_acquire()).count(), 4);
        let (new, h) = replacing(rule(Algorithm::FixedWindow, 10, &clock), &old);
        // A decision still holding the old rules admits 3 more during the swap.
        assert_eq!((0..3).filter(|_| old.limiter.try_acquire()).count(), 3);
        h.settle();
        assert_eq!((0..10).filter(|_| new.limiter.try_acquire()).count(), 3);
        assert_eq!(new.used(), 10);
    }

    /// The handover closes the replaced limiter: a decision that reaches it after (a
    /// thread deciding on its cached old rules) is refused, whatever the algorithm, and
    /// what it admitted before is carried, so the two never exceed the limit. Before,
    /// the reload waited (at most half a second) for the readers of the old rules, and
    /// one descheduled longer admitted a permit nobody carried.
    #[test]
    fn a_replaced_limiter_is_closed_by_its_handover_so_the_two_never_exceed_the_limit() {
        for algorithm in Algorithm::ALL {
            let clock = ManualClock::new();
            clock.set(10);
            let old = LocalRule::new(rule(algorithm, 10, &clock));
            assert_eq!((0..4).filter(|_| old.try_acquire()).count(), 4);
            let (new, h) = replacing(rule(algorithm, 10, &clock), &old);
            // While the new rules are built, decisions on the old ones admit.
            assert_eq!(
                (0..3).filter(|_| old.try_acquire()).count(),
                3,
                "{algorithm}"
            );
            h.settle();
            assert!(old.is_closed() && !new.is_closed(), "{algorithm}");
            assert_eq!(old.used(), 7, "{algorithm}: the frozen count");
            // A stale decision reaching the old limiter, now and windows later.
            assert!(!old.try_acquire(), "{algorithm}");
            assert_eq!(old.acquire_stamped(), None, "{algorithm}");
            assert_eq!(
                (0..10).filter(|_| new.try_acquire()).count(),
                3,
                "{algorithm}"
            );
            assert_eq!(new.used(), 10, "{algorithm}");
            clock.advance(Duration::from_secs(3 * 3600));
            assert!(!old.try_acquire(), "{algorithm}: closed for good");
            assert_eq!(old.used(), 0, "{algorithm}: its window is over");
        }
    }

    #[test]
    fn a_swap_that_straddles_a_window_boundary_carries_the_new_windows_admissions() {
        for algorithm in Algorithm::ALL {
            let clock = ManualClock::new();
            let limit = Limit::per_window(10, Duration::from_secs(1))
                .unwrap()
                .unpaced();
            let any = |l| AnyLimiter::with_clock(algorithm, l, clock.clone());
            clock.set(900_000_000);
            let old = LocalRule::new(any(limit));
            assert_eq!((0..4).filter(|_| old.try_acquire()).count(), 4);
            let (new, h) = replacing(any(limit), &old);
            // The window turns during the swap; a decision on the old rules admits up
            // to 7 in the new window (the sliding kinds still count the first 4).
            clock.set(1_100_000_000);
            let late = (0..7).filter(|_| old.try_acquire()).count();
            h.settle();
            let after = (0..10).filter(|_| new.try_acquire()).count();
            // Whatever the algorithm, no interval of a window holds more than 10.
            assert!(late + after <= 10, "{algorithm}: {late} + {after}");
            if algorithm == Algorithm::FixedWindow {
                // Before: the difference from the snapshot (7 - 4) was carried, and the
                // new limiter gave out 7 more: 14 in a window of 10.
                assert_eq!((late, after), (7, 3));
            }
        }
    }

    /// A sliding log counts what it admitted during the swap by number: admissions that
    /// leave its window meanwhile do not hide as many late ones (before, the count's
    /// difference was carried: 5 left and 5 came, 0 carried, and the replacement gave
    /// out 5 more: 15 in the interval (0.5 s, 1.5 s] of a limit of 10).
    #[test]
    fn a_sliding_log_carries_every_admission_made_during_the_swap() {
        let clock = ManualClock::new();
        let limit = Limit::per_window(10, Duration::from_secs(1))
            .unwrap()
            .unpaced();
        let log = || AnyLimiter::with_clock(Algorithm::SlidingLog, limit, clock.clone());
        let old = LocalRule::new(log());
        for at in [0, 500_000_000] {
            clock.set(at);
            assert_eq!((0..5).filter(|_| old.try_acquire()).count(), 5);
        }
        clock.set(999_000_000);
        let (new, h) = replacing(log(), &old);
        // The 5 of 0 s leave while the new rules are built; 5 more on the old ones.
        clock.set(1_000_000_000);
        assert_eq!((0..5).filter(|_| old.try_acquire()).count(), 5);
        h.settle();
        assert!(!new.try_acquire());
        assert_eq!(new.used(), 10);
        // The 5 of 0.5 s leave at 1.5 s, those of the swap at 2 s.
        clock.set(1_500_000_000);
        assert_eq!((0..10).filter(|_| new.try_acquire()).count(), 5);
    }

    /// A bucketed window's excess lasts while the sub-window it was counted in is in its
    /// window. (Before, it lasted to the aligned window's end: replaced then, at 2 s,
    /// while its sub-window of 1.596 s still counted until 2.05 s, it handed over 1 of
    /// the 3 admissions, and the sliding log after it kept 6 more: 9 in 500 ms under
    /// limits of 1 and 7 per 500 ms.)
    #[test]
    fn a_bucketed_windows_excess_lasts_as_long_as_its_sub_window_counts() {
        let clock = ManualClock::new();
        let any = |algorithm, n, ms| {
            let limit = Limit::per_window(n, Duration::from_millis(ms))
                .unwrap()
                .unpaced();
            AnyLimiter::with_clock(algorithm, limit, clock.clone())
        };
        clock.set(1_596_000_000);
        let fixed = LocalRule::new(any(Algorithm::FixedWindow, 4, 1000));
        assert_eq!((0..3).filter(|_| fixed.try_acquire()).count(), 3);
        let (bucketed, h) = replacing(any(Algorithm::BucketedWindow, 1, 500), &fixed);
        h.settle();
        clock.set(2_000_000_000);
        assert_eq!(bucketed.used(), 3);
        // (A fixed window, whose look-back begins at 2 s: a sliding log's would reach
        // back before the bucketed window began, and count all its permits.)
        let (fixed, h) = replacing(any(Algorithm::FixedWindow, 7, 500), &bucketed);
        h.settle();
        assert_eq!((0..10).filter(|_| fixed.try_acquire()).count(), 4);
    }

    /// An unpaced fixed window of `n` per `ms` on `clock`.
    fn unpaced_fixed(clock: &ManualClock, n: u32, ms: u64) -> AnyLimiter<ManualClock> {
        let limit = Limit::per_window(n, Duration::from_millis(ms))
            .unwrap()
            .unpaced();
        AnyLimiter::with_clock(Algorithm::FixedWindow, limit, clock.clone())
    }

    /// A longer window reaching back before what the old limiter counts counts what the
    /// old limit could have let through there; reaching back before the old limiter
    /// began (another limit decided there), all its permits.
    #[test]
    fn a_longer_window_counts_what_was_let_through_before_the_old_window() {
        let clock = ManualClock::new();
        let fixed = |n, ms| unpaced_fixed(&clock, n, ms);
        clock.set(1_200_000_000);
        // 1 per 500 ms from the start: at most 2 in [0, 1 s), the 2 s window's part
        // the old one no longer counts.
        let short = LocalRule::new(fixed(1, 500));
        clock.set(1_300_000_000);
        let (long, h) = replacing(fixed(4, 2000), &short);
        h.settle();
        assert_eq!((0..9).filter(|_| long.try_acquire()).count(), 2);
        // The same 1 per 500 ms, replacing 9 per 1 s at 1.2 s: before, 9 per 1 s decided.
        clock.set(1_200_000_000);
        let first = LocalRule::new(fixed(9, 1000));
        let (short, h) = replacing(fixed(1, 500), &first);
        h.settle();
        clock.set(1_300_000_000);
        let (long, h) = replacing(fixed(4, 2000), &short);
        h.settle();
        assert!(!long.try_acquire());
        // As much as fills any limiter, the rest beyond its 4 permits as excess: a
        // larger limit replacing it at once gives out nothing of that unknown span.
        assert_eq!(long.used(), u64::from(Limit::MAX_PERMITS));
        let (larger, h) = replacing(fixed(40, 2000), &long);
        h.settle();
        assert!(!larger.try_acquire());
    }

    /// A look-back reaching the very instant the old limiter began reaches what the limit
    /// before it decided then (a reload property case: 2 per 500 ms kept 2 at 0, changed
    /// at 0 to 1 per 1 s, which holds them, then at 1 s to 8 per 1.5 s, whose window
    /// [0, 1.5 s) the 1 per 1 s no longer counts: it counted the 1 of that limit's own
    /// guarantee and gave out 7 more, 9 in a window of 8).
    /// Also with the first limiter created part-way into its windows (at 0.3 s, the
    /// same steps from 1.5 s, the edge of the 8 per 1.5 s window [1.5 s, 3 s); there the
    /// 1 per 1 s holds 4: its window [1 s, 2 s) also counts the 2 the first limit could
    /// have let through in [1 s, 1.5 s), which it no longer counts).
    #[test]
    fn a_look_back_to_the_instant_the_old_limiter_began_counts_what_decided_then() {
        for (created, at, held) in [(0, 0, 2), (300_000_000, 1_500_000_000, 4)] {
            let clock = ManualClock::new();
            clock.set(created);
            let fixed = |n, ms| unpaced_fixed(&clock, n, ms);
            let first = LocalRule::new(fixed(2, 500));
            clock.set(at);
            assert_eq!((0..3).filter(|_| first.try_acquire()).count(), 2);
            let (one, h) = replacing(fixed(1, 1000), &first);
            h.settle();
            assert_eq!(one.used(), held);
            clock.set(at + 1_000_000_000);
            let (eight, h) = replacing(fixed(8, 1500), &one);
            h.settle();
            // Nothing is known of what decided at `at` but that it was admitted then:
            // as much as fills any limiter, until the 1.5 s window from `at` ends.
            assert!(!eight.try_acquire(), "created at {created}");
            clock.set(at + 1_500_000_000);
            assert_eq!((0..9).filter(|_| eight.try_acquire()).count(), 8);
        }
    }

    /// A replacement replaced again while what it carried is in its window hands the
    /// whole bound on, not what its own permits hold (a reload property case: 2 per
    /// 500 ms kept 2 at 0; at 0.5 s 1 per 1 s, then at once 6 per 1 s, which gave out 5
    /// more in [0, 1 s), 7 in all).
    #[test]
    fn a_replacement_replaced_again_hands_on_the_whole_bound() {
        // The 2 kept on the edge of a 500 ms window and part-way into one, in the 1 s
        // window [10 s, 11 s).
        for kept_at in [10_000_000_000, 10_120_000_000] {
            let clock = ManualClock::new();
            clock.set(kept_at);
            let fixed = |n, ms| unpaced_fixed(&clock, n, ms);
            let first = LocalRule::new(fixed(2, 500));
            assert_eq!((0..3).filter(|_| first.try_acquire()).count(), 2);
            clock.set(10_500_000_000);
            let (one, h) = replacing(fixed(1, 1000), &first);
            h.settle();
            assert_eq!(one.used(), 2, "kept at {kept_at}");
            let (six, h) = replacing(fixed(6, 1000), &one);
            h.settle();
            clock.set(10_550_000_000);
            let more = (0..9).filter(|_| six.try_acquire()).count();
            assert_eq!(more, 4, "kept at {kept_at}");
        }
    }

    #[test]
    fn late_admissions_beyond_the_new_permits_go_to_the_excess() {
        let clock = ManualClock::new();
        let old = LocalRule::new(rule(Algorithm::SlidingLog, 10, &clock));
        let (new, h) = replacing(rule(Algorithm::FixedWindow, 4, &clock), &old);
        assert_eq!((0..10).filter(|_| old.limiter.try_acquire()).count(), 10);
        h.settle();
        assert!(!new.limiter.try_acquire());
        assert_eq!(new.used(), 10);
    }
}
