use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::packed::{pack, unpack, window_index};
use crate::clock::{Clock, MonotonicClock};
use crate::limit::Limit;
use crate::sync::{AtomicU64, Ordering};

// An admission given back by the rule layer's cap.
mod admission;
// What a reload carries out of it and into it.
mod carry;

/// A lock-free sliding window kept as a ring of `B` sub-window counters (seed article
/// 4): at most `N` admissions in any `B` consecutive sub-windows, in `O(B)` memory
/// whatever `N`.
///
/// The window `W` is cut into `B` sub-windows of `s = ⌈W/B⌉` nanoseconds (`B` is
/// [`Limit::sub_windows`], 10 by default, lowered so that `s` is at least
/// [`Limit::MIN_WINDOW`], 1 ms), aligned to the clock's origin. A call in sub-window `j`
/// is admitted iff the admissions counted in sub-windows `j − B + 1 ..= j` are fewer than
/// `N` (and, paced, the schedule below allows it).
///
/// # Guarantee and accuracy bound
///
/// * **Intervals aligned to sub-window edges**: any `B` consecutive sub-windows, an
///   interval of length `W' = B·s` (`W` rounded up to a multiple of `B` nanoseconds, so
///   less than `B` ns longer than `W`), hold at most `N` admissions, whatever the number
///   of threads. So does any interval of length at most `W` that starts on a sub-window
///   edge.
/// * **Any interval** `(t − W, t]` lies within `B + 1` consecutive sub-windows, so it
///   holds at most `N + c` where `c` is the count of the oldest sub-window it only partly
///   covers: at most `2N` in the worst case (all of that sub-window's admissions at its
///   very end), about `N + N/B` for evenly spread traffic. The accuracy is one
///   sub-window: `W/B`.
/// * **Paced** (the default, see [`Limit`]'s "Pacing"): the ring's sub-windows are also
///   the steps of the schedule. In each aligned run of `B` sub-windows (sub-windows
///   `k·B ..< (k+1)·B`), by the end of its `i`-th sub-window at most `⌈N·(i+1)/B⌉` are
///   counted (with `B` sub-windows even when `N < B`), and beyond its own share
///   `a(i) − a(i−1)` (`a(i) = ⌈N·(i+1)/B⌉`) sub-window `i` admits only while the
///   previous run and this one hold fewer than `N` together, or the last `B` sub-windows
///   nothing. A run after a quiet one catches up on what its early sub-windows left; a
///   run after a busy one gives each sub-window its share. Without that, permits spent
///   at once (a process starting part-way into a run) would come back exactly `B`
///   sub-windows later and be spent at once again, in every run. Under steady overload,
///   whatever the phase of the first call, every sub-window of every run from the second
///   whole one on keeps exactly its share when `N ≥ B` (10 % of `N` per sub-window at
///   the defaults, ± one when `B` does not divide `N`). Traffic that comes in part of
///   every run only pays for it, as for the [`SlidingLog`](crate::SlidingLog) (see its
///   "Spread": beyond its rate in the second half of every run only, `N`, then `N/2` and
///   `0.9·N` in turn). Unpaced, a burst at any time gets what the last `B` sub-windows
///   left.
/// * A call whose `now` is older than the newest sub-window (a thread descheduled after
///   reading the clock, a clock stepped back) is counted in that newest sub-window,
///   stamped at its start, which can only refuse more.
///
/// Memory: `B + 2` words (the head on its own cache line; the previous run's count):
/// 96 bytes plus a cache line by default, 528 at `B = 64`, whatever `N`. Where the exact
/// [`SlidingLog`](crate::SlidingLog) would take `16·N` bytes (16 MB for `N = 10^6`), this
/// is the sliding choice for large `N`.
///
/// Cost per decision: `B` relaxed loads and a sum, one remainder (the sub-window's place
/// in its run), one more load to catch up beyond a sub-window's share, and a
/// compare-exchange to admit; a division only when a new sub-window starts (and a second
/// sum of the ring when a new run does). A refusal writes nothing.
///
/// # Memory ordering
///
/// The head word packs the newest sub-window's index and count (the layout of
/// [`FixedWindow`](crate::FixedWindow)); every admission is a compare-exchange on it from
/// the exact word its decision read, so the head count is exact. A call that starts a
/// new sub-window first publishes the count of the sub-window it replaces into the ring
/// (`fetch_max`, so a late publisher never lowers a count or puts back an older
/// sub-window), then moves the head with a `Release` compare-exchange; every reader
/// loads the head with `Acquire`. The head's increments are read-modify-writes, so they
/// continue the release sequence of each move: a reader that sees head `j` sees the final
/// count of every earlier head in the ring. Ring slots are then read and written
/// `Relaxed` (their order comes from the head). A sub-window that never was the head
/// has no entry with its index: it counted nothing. A ring entry for the current head
/// (a partial count published by a move that lost its race) is ignored: the head word
/// has the count. A move into a new run publishes the count of the run before it the
/// same way (`fetch_max` on a word tagged with the new run, before the `Release` move);
/// a reader whose tag is not the head's run (a move that lost its race published a later
/// run's) takes it as `N`, which can only refuse more. Only a sub-window catching up
/// beyond its share reads it.
pub struct BucketedWindow<C = MonotonicClock> {
    // Invariant: (sub-window j, count of j ≤ N); j never decreases; every admission
    // counted in (j − B, j] was decided against the exact sum of those counts.
    head: CachePadded<AtomicU64>,
    // Invariant: slot x % B holds (x, final count of x) for every former head x in
    // (j − B, j), published before the head moved past x.
    ring: Box<[AtomicU64]>,
    // (run r, the final count of run r − 1), published before the head moved into run r
    // (a larger word, from a move that lost its race, hides it: read as N).
    previous: AtomicU64,
    /// `B`.
    buckets: u64,
    /// `s = ⌈W/B⌉` nanoseconds.
    sub_window: u64,
    permits: u64,
    /// The schedule: `allowance[i]` admissions by the end of the `i`-th sub-window of a
    /// run (`N` throughout when unpaced).
    allowance: Box<[u64]>,
    limit: Limit,
    clock: C,
}

impl BucketedWindow {
    /// A bucketed sliding window on the default [`MonotonicClock`].
    pub fn new(limit: Limit) -> Self {
        Self::with_clock(limit, MonotonicClock::new())
    }
}

impl<C: Clock> BucketedWindow<C> {
    /// A bucketed sliding window reading `clock`.
    pub fn with_clock(limit: Limit, clock: C) -> Self {
        let (sub_window, buckets) = ring(limit);
        let permits = u64::from(limit.permits());
        let allowance = (0..buckets)
            .map(|i| {
                if limit.is_paced() {
                    (permits * (i + 1)).div_ceil(buckets)
                } else {
                    permits
                }
            })
            .collect();
        Self {
            head: CachePadded::new(AtomicU64::new(pack(0, 0))),
            ring: (0..buckets).map(|_| AtomicU64::new(pack(0, 0))).collect(),
            previous: AtomicU64::new(pack(0, 0)),
            buckets,
            sub_window,
            permits,
            allowance,
            limit,
            clock,
        }
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The sub-windows of the ring (`B`, after the 1 ms floor).
    pub fn sub_windows(&self) -> u32 {
        // At most 64.
        self.buckets as u32
    }

    /// The length of one sub-window (`⌈W/B⌉`).
    pub fn sub_window(&self) -> Duration {
        Duration::from_nanos(self.sub_window)
    }

    /// The counts of the ring's former heads in `(newest − B, newest)` other than
    /// `head`: the sliding sum, and the part of it from sub-window `run_start` on.
    #[inline]
    fn ring_sums(&self, newest: u64, head: u64, run_start: u64) -> (u64, u64) {
        let oldest = newest.saturating_sub(self.buckets - 1);
        let (mut sliding, mut run) = (0, 0);
        for slot in self.ring.iter() {
            // Relaxed: ordered by the Acquire load of the head, see "Memory ordering".
            let (x, count) = unpack(slot.load(Ordering::Relaxed));
            if x >= oldest && x < newest && x != head {
                sliding += count;
                if x >= run_start {
                    run += count;
                }
            }
        }
        (sliding, run)
    }

    /// Whether one more admission fits in sub-window `j`, given the counts of the
    /// sub-windows before it (`others`, the sliding sum, and `in_run`, those of its run),
    /// its own count `own`, and (read only to catch up beyond the sub-window's share) the
    /// count of the run before its run.
    #[inline]
    fn fits(&self, j: u64, own: u64, others: (u64, u64), before: impl FnOnce() -> u64) -> bool {
        let place = (j % self.buckets) as usize;
        let allowance = self.allowance[place];
        if own + others.0 >= self.permits || own + others.1 >= allowance {
            return false;
        }
        let share = allowance - place.checked_sub(1).map_or(0, |p| self.allowance[p]);
        !self.limit.is_paced()
            || own < share
            || own + others.0 == 0
            || before() + others.1 + own < self.permits
    }

    /// The count of the run before the run of head `j`, as published by the move into
    /// it: `N` (no catch-up) if a move that lost its race hides it.
    #[inline]
    fn previous_run(&self, j: u64) -> u64 {
        // Relaxed: ordered by the Acquire load of the head, see "Memory ordering".
        let (run, count) = unpack(self.previous.load(Ordering::Relaxed));
        if run == j / self.buckets {
            count
        } else {
            self.permits
        }
    }

    /// The count of the run before `nj`'s, for a head moving from `j` (count `c`) to `nj`.
    #[inline]
    fn run_before(&self, j: u64, c: u64, nj: u64) -> u64 {
        let (run, next_run) = (j / self.buckets, nj / self.buckets);
        if next_run == run {
            self.previous_run(j)
        } else if next_run == run + 1 {
            c + self.ring_sums(j, j, j - j % self.buckets).1
        } else {
            0
        }
    }

    /// The admissions counted in the `B` sub-windows ending with the one that holds
    /// `now` (for a `now` older than the head, those ending with the head).
    pub(crate) fn count_at(&self, now: u64) -> u64 {
        // Acquire: as in `acquire_at`.
        self.count_with_head(self.head.load(Ordering::Acquire), now)
    }

    /// Closes the limiter for good and returns what it counted in the `B` sub-windows
    /// ending with the one of `now` at that instant: one swap of the head to the closed
    /// word ([`super::closed_word`]), so every admission is either in the count
    /// returned or refused; the ring then holds the final count of every former head.
    /// Where a reload retires a replaced limiter.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn close_at(&self, now: u64) -> u64 {
        // Acquire: pairs with the Release moves of the head, so the ring read below
        // holds the final count of every former head (see "Memory ordering").
        let frozen = self
            .head
            .swap(super::closed_word(self.permits), Ordering::Acquire);
        self.count_with_head(frozen, now)
    }

    /// [`count_at`](Self::count_at) with `head` as the head word.
    fn count_with_head(&self, head: u64, now: u64) -> u64 {
        let (j, c) = unpack(head);
        let newest = window_index(now, self.sub_window).max(j);
        let head = if j + self.buckets > newest { c } else { 0 };
        head + self.ring_sums(newest, j, newest).0
    }

    /// Counts `count` admissions made elsewhere in the sub-window of `now`, as many as
    /// the last `B` sub-windows have room for under the permits, whatever the pacing
    /// schedule has released; returns how many. Where a replacement limiter takes what
    /// the one it replaces admitted.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn absorb_at(&self, now: u64, count: u64) -> u64 {
        // Acquire / AcqRel: as in `acquire_at`.
        let mut current = self.head.load(Ordering::Acquire);
        loop {
            let (j, c) = unpack(current);
            let newest = window_index(now, self.sub_window).max(j);
            let (mut others, _) = self.ring_sums(newest, j, newest);
            let own = if newest == j {
                c
            } else {
                if j + self.buckets > newest {
                    others += c;
                }
                0
            };
            let taken = count.min(self.permits.saturating_sub(others + own));
            let next = if newest == j {
                if taken == 0 {
                    return 0;
                }
                pack(j, c + taken)
            } else {
                self.publish(j, c, newest);
                pack(newest, taken)
            };
            match self.head.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return taken,
                Err(actual) => current = actual,
            }
        }
    }

    /// Publishes `count` as the (final, if the head then moves to `nj`) count of
    /// sub-window `j`, and for a move into a new run the count of the run before it.
    #[inline]
    fn publish(&self, j: u64, count: u64, nj: u64) {
        // Relaxed (both): ordered before the Release move of the head that follows them.
        self.ring[(j % self.buckets) as usize].fetch_max(pack(j, count), Ordering::Relaxed);
        if nj / self.buckets > j / self.buckets {
            let before = self.run_before(j, count, nj);
            self.previous
                .fetch_max(pack(nj / self.buckets, before), Ordering::Relaxed);
        }
    }

    /// The decision for a call made at `now`: `Some(stamp)` or `None`.
    #[inline]
    pub(crate) fn acquire_at(&self, now: u64) -> Option<u64> {
        // Acquire: pairs with the Release moves of the head, so the ring holds the final
        // count of every former head (see "Memory ordering" on the type).
        let mut current = self.head.load(Ordering::Acquire);
        loop {
            let (j, c) = unpack(current);
            let start = j.saturating_mul(self.sub_window);
            // Bounds first (a multiplication); only a new sub-window pays the division.
            let (next, stamp) = if now >= start.saturating_add(self.sub_window)
                && window_index(now, self.sub_window) > j
            {
                let nj = window_index(now, self.sub_window);
                let run_start = nj - nj % self.buckets;
                let (mut sliding, mut run) = self.ring_sums(nj, j, run_start);
                if j + self.buckets > nj {
                    sliding += c;
                }
                if j >= run_start {
                    run += c;
                }
                if !self.fits(nj, 0, (sliding, run), || self.run_before(j, c, nj)) {
                    return None;
                }
                self.publish(j, c, nj);
                (pack(nj, 1), now)
            } else {
                if c >= self.permits {
                    return None;
                }
                let run_start = j - j % self.buckets;
                let others = self.ring_sums(j, j, run_start);
                if !self.fits(j, c, others, || self.previous_run(j)) {
                    return None;
                }
                // This sub-window, or for a stale `now` the head, stamped at its start.
                (current + 1, now.max(start))
            };
            // Release on success: publishes the ring entry written above (for a move)
            // and continues the release sequence (for an increment). Acquire on
            // failure: the word read is the next decision's head.
            match self.head.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(stamp),
                Err(actual) => current = actual,
            }
        }
    }
}

/// `B` for `limit`: its sub-windows, but at least 1 ms each, so the packed index lasts
/// 139 years as for the other limiters (`W ≥ 1 ms`: at least one).
fn buckets(limit: Limit) -> u64 {
    let most = limit.window_nanos() / Limit::MIN_WINDOW.as_nanos() as u64;
    u64::from(limit.sub_windows()).min(most).max(1)
}

/// The sub-window length (`⌈W/B⌉`, nanoseconds) and `B` a bucketed window for `limit`
/// cuts its window into: what a reload computes where it counts from, for a limiter
/// dropped since too.
pub(crate) fn ring(limit: Limit) -> (u64, u64) {
    let buckets = buckets(limit);
    (limit.window_nanos().div_ceil(buckets), buckets)
}

/// The heap a bucketed window for `limit` takes besides the struct: its ring and its
/// schedule, a word each per sub-window.
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the config summary
pub(crate) fn heap_bytes(limit: Limit) -> usize {
    2 * std::mem::size_of::<u64>() * buckets(limit) as usize
}

super::clocked_rate_limiter!(BucketedWindow);

impl<C: fmt::Debug> fmt::Debug for BucketedWindow<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Relaxed: a snapshot for display, nothing is read through it.
        let (j, c) = unpack(self.head.load(Ordering::Relaxed));
        f.debug_struct("BucketedWindow")
            .field("limit", &self.limit)
            .field("sub_windows", &self.buckets)
            .field("sub_window_index", &j)
            .field("count", &c)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::prop_support::{limit, windows, Walk};
    use crate::limiter::RateLimiter;

    const W: u64 = 1_000_000_000;

    fn limiter(permits: u32, paced: bool) -> (BucketedWindow<ManualClock>, ManualClock) {
        let clock = ManualClock::new();
        let limit = Limit::per_window(permits, Duration::from_nanos(W)).unwrap();
        let limit = if paced { limit } else { limit.unpaced() };
        (BucketedWindow::with_clock(limit, clock.clone()), clock)
    }

    #[test]
    fn slides_by_sub_windows() {
        let (l, clock) = limiter(10, false);
        clock.set(950_000_000); // sub-window 9
        assert_eq!((0..20).filter(|_| l.try_acquire()).count(), 10);
        // Sub-windows 10..=18 still see sub-window 9.
        clock.set(1_899_999_999);
        assert!(!l.try_acquire());
        // Sub-window 19: sub-window 9 has left the ring's reach.
        clock.set(1_900_000_000);
        assert_eq!((0..20).filter(|_| l.try_acquire()).count(), 10);
        assert_eq!(l.count_at(1_900_000_000), 10);
        assert_eq!(l.count_at(2_850_000_000), 10);
        assert_eq!(l.count_at(2_900_000_000), 0);
    }

    #[test]
    fn any_interval_of_w_can_hold_up_to_2n_in_the_worst_case() {
        // All N at the very end of sub-window 9, all N again at the start of sub-window
        // 19: W apart to the nanosecond plus one, so (t − W, t] holds both only if it
        // covers sub-window 9's last nanosecond and 19's first. The documented bound:
        // N + the partly covered oldest sub-window's count.
        let (l, clock) = limiter(4, false);
        clock.set(999_999_999);
        let mut stamps: Vec<u64> = (0..9).filter_map(|_| l.acquire_stamped()).collect();
        clock.set(1_900_000_000);
        stamps.extend((0..9).filter_map(|_| l.acquire_stamped()));
        // (0.9 s, 1.9 s] holds all 8: 2N, the bound, while any 10 consecutive
        // sub-windows hold 4.
        let inside = stamps
            .iter()
            .filter(|&&s| s > 900_000_000 && s <= 1_900_000_000)
            .count();
        assert_eq!((stamps.len(), inside), (8, 8));
        assert_eq!(l.count_at(1_900_000_000), 4);
    }

    #[test]
    fn memory_is_b_words_whatever_n() {
        let clock = ManualClock::new();
        let big = Limit::per_window(Limit::MAX_PERMITS, Duration::from_secs(1)).unwrap();
        let l = BucketedWindow::with_clock(big, clock.clone());
        assert_eq!((l.ring.len(), l.allowance.len()), (10, 10));
        let fine = big.with_sub_windows(64).unwrap();
        assert_eq!(
            BucketedWindow::with_clock(fine, clock.clone()).ring.len(),
            64
        );
        // Sub-windows of at least 1 ms: a 5 ms window has at most 5.
        let short = Limit::per_window(100, Duration::from_millis(5)).unwrap();
        let l = BucketedWindow::with_clock(short.with_sub_windows(64).unwrap(), clock);
        assert_eq!(
            (l.sub_windows(), l.sub_window()),
            (5, Duration::from_millis(1))
        );
    }

    #[test]
    fn a_window_b_does_not_divide_rounds_its_sub_windows_up() {
        let clock = ManualClock::new();
        let limit = Limit::per_window(3, Duration::from_nanos(1_000_000_007)).unwrap();
        let l = BucketedWindow::with_clock(limit.unpaced(), clock);
        assert_eq!(l.sub_window(), Duration::from_nanos(100_000_001));
    }

    #[test]
    fn paced_runs_release_their_share_per_sub_window() {
        let (l, clock) = limiter(100, true);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 10);
        clock.set(550_000_000);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 50);
        clock.set(999_999_999);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 40);
        // A stale reading counts into the head, stamped at its start.
        clock.set(0);
        assert!(!l.try_acquire());
        // After a run that kept N, the schedule has released 60 by 1.55 s and the ring
        // has room for 60, but the sub-window keeps its own share only.
        clock.set(1_550_000_000);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 10);
        // After a quiet run, the catch-up is back: all N in the last sub-window.
        clock.set(3_950_000_000);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 100);
    }

    #[test]
    fn rejections_do_not_write() {
        let (l, clock) = limiter(100, true);
        clock.set(3 * W);
        assert_eq!((0..20).filter(|_| l.try_acquire()).count(), 10);
        let words = |l: &BucketedWindow<ManualClock>| {
            let mut words: Vec<u64> = l.ring.iter().map(|a| a.load(Ordering::Relaxed)).collect();
            words.extend([&*l.head, &l.previous].map(|a| a.load(Ordering::Relaxed)));
            words
        };
        let before = words(&l);
        assert!((0..1000).all(|_| !l.try_acquire()));
        assert_eq!(words(&l), before);
        // Refused on the catch-up path (a sub-window past its share in a run after one
        // that kept N): still nothing written.
        for tenth in 1..10 {
            clock.set(3 * W + tenth * W / 10);
            assert_eq!((0..20).filter(|_| l.try_acquire()).count(), 10);
        }
        clock.set(4 * W + W / 2);
        assert_eq!((0..20).filter(|_| l.try_acquire()).count(), 10);
        let before = words(&l);
        assert!((0..1000).all(|_| !l.try_acquire()));
        assert_eq!(words(&l), before);
    }

    #[test]
    fn absorb_counts_into_the_sub_window_of_now_up_to_the_permits() {
        let (l, clock) = limiter(5, false);
        clock.set(250_000_000);
        assert!(l.try_acquire());
        clock.set(450_000_000);
        assert_eq!(l.absorb_at(450_000_000, 3), 3);
        assert_eq!(l.count_at(450_000_000), 4);
        assert_eq!((0..9).filter(|_| l.try_acquire()).count(), 1);
        // A full window takes nothing more.
        assert_eq!(l.absorb_at(450_000_000, 2), 0);
        assert_eq!(l.count_at(450_000_000), 5);
    }

    /// Saturated every 25 ms over `[from, to)`: what each call time kept.
    fn saturate(
        l: &BucketedWindow<ManualClock>,
        clock: &ManualClock,
        from: u64,
        to: u64,
    ) -> Vec<(u64, usize)> {
        (from..to)
            .step_by(25_000_000)
            .filter_map(|t| {
                clock.set(t);
                let kept = (0..4).take_while(|_| l.try_acquire()).count();
                (kept > 0).then_some((t / 1_000_000, kept))
            })
            .collect()
    }

    /// The reload property's starved case (N = 2 per 500 ms, paced, B = 10 sub-windows
    /// of 50 ms, shares 1 at places 0 and 5): a reload at 2.6 s carries 4, the limiter
    /// holds 2 in sub-window 52 (the rest is the handover's excess, outside the
    /// limiter) and refuses under the hard cap until they leave the ring at 3.1 s. Its
    /// first admission is then at place 2 of run 6 (the last B sub-windows hold
    /// nothing: a catch-up), which keeps place 0 of run 7 under the hard cap until
    /// 3.6 s; place 2 has no share and run 6 kept N, so run 7 keeps 1. Not a defect:
    /// a fresh limiter whose first call comes at 3.1 s does exactly the same (the
    /// carried count is not read past its sub-window, the previous run's word is run
    /// 6's true count), and from the second whole run after its first admission's on
    /// every run keeps its shares, as the spread guarantee says.
    #[test]
    fn a_carried_count_delays_the_first_admission_and_nothing_else() {
        let limit = Limit::per_window(2, Duration::from_millis(500)).unwrap();
        let clock = ManualClock::new();
        let carried = BucketedWindow::with_clock(limit, clock.clone());
        clock.set(2_600_000_000);
        assert_eq!(carried.absorb_at(2_600_000_000, 4), 2);
        let after_reload = saturate(&carried, &clock, 2_625_000_000, 5_000_000_000);
        let expected = [
            (3100, 1),
            (3250, 1),
            (3750, 1),
            (4000, 1),
            (4250, 1),
            (4500, 1),
            (4750, 1),
        ];
        assert_eq!(after_reload, expected);
        let clock = ManualClock::new();
        let fresh = BucketedWindow::with_clock(limit, clock.clone());
        assert_eq!(
            saturate(&fresh, &clock, 3_100_000_000, 5_000_000_000),
            expected
        );
    }

    /// The reference: every admission's sub-window in a queue, and the same rules
    /// (stale readings count into the newest sub-window; the schedule per run).
    struct Reference {
        permits: u64,
        buckets: u64,
        sub: u64,
        paced: bool,
        newest: u64,
        /// Every admission's sub-window.
        admitted: Vec<u64>,
    }

    impl Reference {
        fn admit(&mut self, now: u64) -> bool {
            // The newest sub-window is the newest admission's (a refusal moves nothing).
            let j = (now / self.sub).max(self.newest);
            // Counted, not popped: a refused call can see a later sub-window than the
            // next call, whose `j` falls back to the newest admission's.
            let count = |keep: &dyn Fn(u64) -> bool| {
                self.admitted.iter().filter(|&&x| keep(x)).count() as u64
            };
            let b = self.buckets;
            let sliding = count(&|x| x + b > j);
            let run_start = j - j % b;
            let in_run = count(&|x| x >= run_start);
            let place = j % b;
            let a = |i: u64| {
                if self.paced {
                    (self.permits * i).div_ceil(b)
                } else {
                    self.permits
                }
            };
            let (allowance, share) = (a(place + 1), a(place + 1) - a(place));
            // Paced: its share, or catching up after a quiet run (or a quiet `B`).
            let previous = count(&|x| x + b >= run_start && x < run_start);
            let caught_up = !self.paced
                || count(&|x| x == j) < share
                || sliding == 0
                || previous + in_run < self.permits;
            let ok = sliding < self.permits && in_run < allowance && caught_up;
            if ok {
                self.newest = j;
                self.admitted.push(j);
            }
            ok
        }
    }

    proptest! {
        #[test]
        fn matches_the_reference_model(
            permits in 1u32..30,
            paced in any::<bool>(),
            sub_windows in prop_oneof![1u32..=12, 1u32..=Limit::MAX_SUB_WINDOWS],
            w in windows(),
            start in 0u64..10_000_000_000,
            steps in proptest::collection::vec((0u64..400, any::<bool>(), 1usize..6), 1..200),
        ) {
            let mut walk = Walk::new(start, w);
            let l = BucketedWindow::with_clock(limit(permits, w, sub_windows, paced), walk.clock.clone());
            // The ring's B: the one asked for, lowered to keep sub-windows of 1 ms.
            let b = u64::from(l.sub_windows());
            let mut reference = Reference {
                permits: u64::from(permits),
                buckets: b,
                sub: w.div_ceil(b),
                paced,
                newest: 0,
                admitted: Vec::new(),
            };
            let mut stamps = Vec::new();
            for (delta, backwards, calls) in steps {
                let now = walk.step(delta, backwards);
                for _ in 0..calls {
                    let got = l.acquire_stamped();
                    prop_assert_eq!(got.is_some(), reference.admit(now), "at {}", now);
                    stamps.extend(got);
                }
            }
            // The stated bounds, over the stamps: any B consecutive sub-windows hold at
            // most N; any (t − W, t] at most N + the partly covered sub-window's count.
            let sub = reference.sub;
            let n = u64::from(permits);
            for &t in &stamps {
                let j = t / sub;
                let aligned = stamps.iter().filter(|&&s| s / sub + b > j && s / sub <= j).count() as u64;
                prop_assert!(aligned <= n);
                let inside = stamps.iter().filter(|&&s| s + w > t && s <= t).count() as u64;
                let partial = j.checked_sub(b).map_or(0, |old| {
                    stamps.iter().filter(|&&s| s / sub == old).count() as u64
                });
                prop_assert!(inside <= n + partial, "{} in (t − W, t]", inside);
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::loom_support::{kept_beside_a_give_back, limit, model, stamps_of, W};

    fn limiter(permits: u32, sub_windows: u32, paced: bool) -> Arc<BucketedWindow<ManualClock>> {
        let limit = limit(permits, paced).with_sub_windows(sub_windows).unwrap();
        Arc::new(BucketedWindow::with_clock(limit, ManualClock::new()))
    }

    /// At most `n` stamps in any `b` consecutive sub-windows of `sub` ns.
    fn check_ring(stamps: &[u64], sub: u64, b: u64, n: usize) {
        for &t in stamps {
            let j = t / sub;
            let inside = stamps
                .iter()
                .filter(|&&s| s / sub + b > j && s / sub <= j)
                .count();
            assert!(
                inside <= n,
                "{inside} > {n} in sub-windows ..={j}: {stamps:?}"
            );
        }
    }

    /// N = 1 over two sub-windows: a permit of sub-window 0 given back while worker 1
    /// moves the head to sub-window 2 and calls again: the new head never counts it
    /// back, and the ring holds at most one.
    #[test]
    fn a_permit_given_back_racing_a_move_stays_in_its_sub_window() {
        model(2, || {
            let l = limiter(1, 2, false);
            let kept = kept_beside_a_give_back(
                &l,
                W / 2 - 1,
                vec![W, W],
                |l, t| l.acquire_at(t),
                |l, stamp| l.give_back(stamp),
                |&stamp| stamp,
            );
            check_ring(&kept, W / 2, 2, 1);
            assert_eq!(kept.len(), 1, "{kept:?}");
        });
    }

    /// N = 1 over two sub-windows: two workers, each calling in sub-window 0, 1 (the
    /// same window: refused) and 2 (sub-window 0 has left). A move of the head races an
    /// increment: the count the mover publishes must be the final one.
    #[test]
    fn two_workers_exhaustive() {
        model(2, || {
            let l = limiter(1, 2, false);
            let stamps = stamps_of(&l, 2, |i| vec![i, W / 2 + i, W + i], |l, t| l.acquire_at(t));
            check_ring(&stamps, W / 2, 2, 1);
            assert_eq!(stamps.len(), 2, "{stamps:?}");
        });
    }

    /// N = 2 over two sub-windows: three workers calling across three sub-windows, with
    /// a stale call.
    #[test]
    fn three_workers_bounded_preemption() {
        model(3, || {
            let l = limiter(2, 2, false);
            let stamps = stamps_of(
                &l,
                3,
                |i| vec![W / 2 + i, i, W + W / 2 + i],
                |l, t| l.acquire_at(t),
            );
            check_ring(&stamps, W / 2, 2, 2);
        });
    }

    /// Paced, N = 2 over two sub-windows: at most one in a run's first sub-window.
    #[test]
    fn paced_two_workers_exhaustive() {
        model(2, || {
            let l = limiter(2, 2, true);
            let stamps = stamps_of(&l, 2, |_| vec![W / 4, 3 * W / 4], |l, t| l.acquire_at(t));
            check_ring(&stamps, W / 2, 2, 2);
            assert!(stamps.iter().filter(|&&s| s < W / 2).count() <= 1);
            assert_eq!(stamps.len(), 2, "{stamps:?}");
        });
    }

    /// Paced, N = 2 over two sub-windows: one admission in sub-window 1 (run 0), then a
    /// worker calling in sub-window 1 (a catch-up after a quiet run: admitted) and in
    /// sub-window 5 (place 1 of run 2), while another calls in sub-window 5. The ring has
    /// room for two there, but the move into run 2 publishes run 1's count (none), and
    /// the moves into runs 1 and 2 that of the run before: whichever worker makes them
    /// and in whatever order, run 2 catches up only if run 1 kept fewer than N.
    #[test]
    fn paced_new_run_sees_the_previous_runs_count() {
        model(2, || {
            let l = limiter(2, 2, true);
            assert!(l.acquire_at(W / 2).is_some());
            let stamps = stamps_of(
                &l,
                2,
                |i| {
                    if i == 0 {
                        vec![W / 2 + 1, 2 * W + W / 2]
                    } else {
                        vec![2 * W + W / 2 + 1]
                    }
                },
                |l, t| l.acquire_at(t),
            );
            let mut all = stamps.clone();
            all.push(W / 2);
            check_ring(&all, W / 2, 2, 2);
            assert_eq!(stamps.iter().filter(|&&s| s >= W).count(), 2, "{stamps:?}");
        });
    }

    /// As above, with run 1 busy: one admission in each of its sub-windows (2 and 3),
    /// then two workers in sub-window 5 (place 1 of run 2): the ring has room for two
    /// (sub-window 3 has left it) and the schedule has released two, but run 1 kept N,
    /// so sub-window 5 keeps its share, one, whichever worker moves the head.
    #[test]
    fn paced_run_after_a_busy_run_keeps_its_share() {
        model(2, || {
            let l = limiter(2, 2, true);
            assert!(l.acquire_at(W).is_some());
            assert!(l.acquire_at(W + W / 2).is_some());
            let stamps = stamps_of(&l, 2, |i| vec![2 * W + W / 2 + i], |l, t| l.acquire_at(t));
            assert_eq!(stamps.len(), 1, "{stamps:?}");
        });
    }
}
