use std::fmt;

use crossbeam_utils::CachePadded;

use super::pacing::Pacer;
use super::packed::{self, count_for, pack, unpack, window_index};
use crate::clock::{Clock, MonotonicClock};
use crate::limit::Limit;
use crate::sync::{AtomicU64, Ordering};

/// A lock-free fixed-window limiter: at most `N` admissions in every aligned window.
///
/// Windows are `[k·W, (k+1)·W)` in the clock's time, aligned to its origin, so they
/// never drift with traffic.
///
/// # Guarantee
///
/// * At most `N` admissions are counted in each aligned window, whatever the number of
///   threads, and **exactly** `N` when `N` or more calls fall in it (paced: when they
///   fall in it late enough, see below).
/// * Paced (the default, see [`Limit`]'s "Pacing"): by the end of sub-window `i` of a
///   window cut into `B`, at most `⌈N·(i+1)/B⌉` are counted in it, whatever the number of
///   threads; a window offered at least `⌈N/B⌉` calls in each sub-window counts exactly
///   `N`. A burst confined to the first sub-window gets `⌈N/B⌉`; one in the last gets all
///   the window has left. Unpaced ([`Limit::unpaced`]), every permit is available from
///   the window's start.
/// * The window only moves forward. A call whose `now` is older than the newest window
///   (a thread descheduled after reading the clock, or a clock stepped backwards) is
///   counted in that newest window, never in an older one.
/// * Like every fixed window it is *not* a sliding guarantee: a burst at the end of one
///   window and the start of the next can pass `2N` within a span shorter than `W`. Use
///   [`SlidingLog`](crate::SlidingLog) when any interval of length `W` must hold `N`.
///
/// # Layout
///
/// The whole state is one `AtomicU64`: the window index `now / W` in the high 42 bits,
/// the count in the low 22. The count never passes the permits (a call that would pass
/// them writes nothing), so 22 bits hold any [`Limit`] (up to [`Limit::MAX_PERMITS`]). At the
/// shortest window a [`Limit`] accepts (1 ms) 42 bits of window index last 2^42 ms =
/// 139 years of uptime (139 000 years at 1 s windows); the index then saturates instead
/// of wrapping, and the limiter keeps counting into its last window.
///
/// # Memory ordering
///
/// The whole state (window index and count) lives in one `AtomicU64`. Every write is a compare-exchange from the exact word the new value
/// was computed from, so no increment can be lost or land in the wrong window, and all
/// operations are `Relaxed`: the word publishes no other memory, and a single location's
/// modification order already serialises the compare-exchanges. A rejected call only
/// loads the word, so a saturated limiter does not bounce its cache line. Pacing reads
/// only immutable fields (the schedule is computed once, and the check is two
/// multiplications, no division).
///
/// Memory: one cache line.
pub struct FixedWindow<C = MonotonicClock> {
    // Invariant: the count field is at most `permits`, and the window field never
    // decreases (it is only replaced by a larger index or kept).
    state: CachePadded<AtomicU64>,
    permits: u64,
    window: u64,
    pacer: Pacer,
    limit: Limit,
    clock: C,
}

impl FixedWindow {
    /// A fixed-window limiter on the default [`MonotonicClock`].
    pub fn new(limit: Limit) -> Self {
        Self::with_clock(limit, MonotonicClock::new())
    }
}

impl<C: Clock> FixedWindow<C> {
    /// A fixed-window limiter reading `clock`.
    pub fn with_clock(limit: Limit, clock: C) -> Self {
        Self {
            state: CachePadded::new(AtomicU64::new(pack(0, 0))),
            permits: u64::from(limit.permits()),
            window: limit.window_nanos(),
            pacer: Pacer::new(limit),
            limit,
            clock,
        }
    }

    /// The admissions counted in the window that holds `now` (for a `now` older than
    /// the newest window, the newest window's count, as `acquire_at` would see it).
    pub(crate) fn count_at(&self, now: u64) -> u64 {
        // Relaxed: a snapshot for a reload or for stats, see "Memory ordering" on the type.
        count_for(self.state.load(Ordering::Relaxed), now, self.window)
    }

    /// Counts `count` admissions made elsewhere in the window of `now`, as many as fit
    /// under the permits, whatever the pacing schedule has released; returns how many.
    /// Where a replacement limiter takes what the one it replaces admitted.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn absorb_at(&self, now: u64, count: u64) -> u64 {
        let now_window = window_index(now, self.window);
        packed::add_count(&self.state, now_window, count, self.permits).0
    }

    /// Closes the limiter for good and returns what it counted in the window of `now`
    /// (as [`count_at`](Self::count_at)) at that instant: one swap of the word to the
    /// closed word ([`super::closed_word`]), so every admission is either in the count
    /// returned or refused. Where a reload retires a replaced limiter.
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

    /// The decision for a call made at `now` (clock nanoseconds): `Some(stamp)` with a
    /// time inside the window the admission was counted in, or `None`.
    #[inline]
    pub(crate) fn acquire_at(&self, now: u64) -> Option<u64> {
        // Relaxed (here and below): see the type's "Memory ordering" section.
        let mut current = self.state.load(Ordering::Relaxed);
        loop {
            let (window, count) = unpack(current);
            // Compare with the word's window bounds first: a multiplication, where the
            // index of `now` would take a division. Only a new window pays for that.
            let start = window.saturating_mul(self.window);
            let (next, stamp) = if now >= start.saturating_add(self.window)
                && window_index(now, self.window) > window
            {
                // A newer window: start it with this admission.
                (pack(window_index(now, self.window), 1), now)
            } else if count < self.permits && now.max(start) - start >= self.pacer.earliest(count) {
                // This window (or, for a stale `now`, the newer one the word holds,
                // stamped at its start), once the schedule has released this permit.
                (current + 1, now.max(start))
            } else {
                // Full, or paced: reject without writing.
                return None;
            };
            match packed::replace(&self.state, current, next) {
                Ok(()) => return Some(stamp),
                Err(actual) => current = actual,
            }
        }
    }
}

super::clocked_rate_limiter!(FixedWindow);

impl<C: fmt::Debug> fmt::Debug for FixedWindow<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Relaxed: a snapshot for display, nothing is read through it.
        let (window, count) = unpack(self.state.load(Ordering::Relaxed));
        f.debug_struct("FixedWindow")
            .field("limit", &self.limit)
            .field("window_index", &window)
            .field("count", &count)
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

    /// An unpaced limiter: these tests are about the window, not the schedule.
    fn limiter(permits: u32, window_ms: u64) -> (FixedWindow<ManualClock>, ManualClock) {
        let clock = ManualClock::new();
        let limit = Limit::per_window(permits, Duration::from_millis(window_ms)).unwrap();
        (
            FixedWindow::with_clock(limit.unpaced(), clock.clone()),
            clock,
        )
    }

    #[test]
    fn paced_releases_a_tenth_per_tenth_cumulatively() {
        let clock = ManualClock::new();
        let limit = Limit::per_window(100, Duration::from_secs(1)).unwrap();
        let l = FixedWindow::with_clock(limit, clock.clone());
        clock.set(1_000_000_000);
        // The first tenth: 10 of 1000.
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 10);
        // Idle until 0.55 s into the window: by then 60 are released, 50 of them unused.
        clock.set(1_550_000_000);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 50);
        clock.set(1_999_999_999);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 40);
        // A stale reading counts into the newest window at its start: nothing left.
        clock.set(0);
        assert!(!l.try_acquire());
    }

    #[test]
    fn paced_rejections_do_not_write() {
        let clock = ManualClock::new();
        let limit = Limit::per_window(100, Duration::from_secs(1)).unwrap();
        let l = FixedWindow::with_clock(limit, clock.clone());
        assert_eq!((0..10).filter(|_| l.try_acquire()).count(), 10);
        let before = l.state.load(Ordering::Relaxed);
        assert!((0..1000).all(|_| !l.try_acquire()));
        assert_eq!(l.state.load(Ordering::Relaxed), before);
    }

    #[test]
    fn admits_exactly_n_per_aligned_window_at_the_edges() {
        let (l, clock) = limiter(3, 1000);
        for window in 0..5u64 {
            let start = window * 1_000_000_000;
            // The first and last nanosecond of the window belong to it.
            clock.set(start);
            assert!(l.try_acquire() && l.try_acquire());
            clock.set(start + 999_999_999);
            assert!(l.try_acquire());
            assert!(!l.try_acquire(), "window {window} passed 3");
        }
    }

    #[test]
    fn clock_stepping_back_counts_into_the_newer_window() {
        let (l, clock) = limiter(2, 1000);
        clock.set(5_000_000_000);
        assert_eq!(l.acquire_stamped(), Some(5_000_000_000));
        clock.set(1_000_000_000); // four windows back
                                  // Counted in window 5, stamped at its start.
        assert_eq!(l.acquire_stamped(), Some(5_000_000_000));
        assert_eq!(l.acquire_stamped(), None);
        clock.set(5_500_000_000);
        assert_eq!(l.acquire_stamped(), None);
        clock.set(6_000_000_000);
        assert!(l.try_acquire());
    }

    #[test]
    fn rejected_calls_do_not_write() {
        let (l, _clock) = limiter(1, 1000);
        assert!(l.try_acquire());
        let before = l.state.load(Ordering::Relaxed);
        for _ in 0..1000 {
            assert!(!l.try_acquire());
        }
        assert_eq!(l.state.load(Ordering::Relaxed), before);
    }

    #[test]
    fn n_at_the_word_limit_admits_exactly_n() {
        let (l, clock) = limiter(Limit::MAX_PERMITS, 1000);
        for _ in 0..2 {
            let admitted = (0..u64::from(Limit::MAX_PERMITS) + 10)
                .filter(|_| l.try_acquire())
                .count();
            assert_eq!(admitted, Limit::MAX_PERMITS as usize);
            clock.advance(Duration::from_secs(1));
        }
    }

    proptest! {
        /// Against a reference model: a map of counts per window, with the same "count
        /// a stale call into the newest window" rule, for any window length, any number
        /// of sub-windows, a clock starting part-way and stepping back. Paced, the model releases `⌈N·(i+1)/B⌉` by the end of sub-window `i`, with
        /// divisions where the limiter multiplies.
        #[test]
        fn matches_the_reference_model(
            permits in prop_oneof![1u32..25, (Limit::MAX_PERMITS - 100)..=Limit::MAX_PERMITS],
            paced in any::<bool>(),
            sub_windows in 1u32..=Limit::MAX_SUB_WINDOWS,
            window in windows(),
            start in 0u64..10_000_000_000,
            steps in proptest::collection::vec((0u64..300, any::<bool>(), 1usize..4), 1..200),
        ) {
            let mut walk = Walk::new(start, window);
            let l = FixedWindow::with_clock(limit(permits, window, sub_windows, paced), walk.clock.clone());
            let b = u64::from(if paced { permits.min(sub_windows) } else { 1 });
            let n = u64::from(permits);
            // The word starts at window 0: a clock that starts later rolls it.
            let mut newest = 0u64;
            let mut count = 0u64;
            for (delta, backwards, calls) in steps {
                let now = walk.step(delta, backwards);
                for _ in 0..calls {
                    let w = now / window;
                    if w > newest { newest = w; count = 0; }
                    // A stale reading is at the newest window's start.
                    let offset = if w < newest { 0 } else { now % window };
                    let sub = (offset / (window / b)).min(b - 1);
                    let expect = count < n && count * b < n * (sub + 1);
                    if expect { count += 1; }
                prop_assert_eq!(l.try_acquire(), expect, "at {}", now);
                }
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::loom_support::{
        check_per_window, kept_beside_a_give_back, limit, model, stamps_in_windows, stamps_of, W,
    };

    fn limiter(permits: u32, paced: bool) -> Arc<FixedWindow<ManualClock>> {
        Arc::new(FixedWindow::with_clock(
            limit(permits, paced),
            ManualClock::new(),
        ))
    }

    /// Paced, N = 2 in two sub-windows: two workers each call in the first half, in
    /// the second half, and stale back in the first. At most one admission is stamped
    /// in the first half, at most two in the window, and exactly two are admitted.
    #[test]
    fn paced_two_workers_exhaustive() {
        model(2, || {
            let l = limiter(2, true);
            let stamps = stamps_of(
                &l,
                2,
                |_| vec![W / 4, 3 * W / 4, W / 4],
                |l, t| l.acquire_at(t),
            );
            let first_half = stamps.iter().filter(|&&s| s < W / 2).count();
            assert!(first_half <= 1, "{stamps:?}");
            assert_eq!(stamps.len(), 2, "{stamps:?}");
        });
    }

    /// Two workers, each making calls in window 0 then window 1 (plus a stale call back
    /// in window 0): never more than N per window, and exactly N where N were offered.
    #[test]
    fn two_workers_exhaustive() {
        model(2, || {
            let l = limiter(1, false);
            let stamps = stamps_of(&l, 2, |_| vec![0, W, W / 2], |l, t| l.acquire_at(t));
            let per_window = stamps_in_windows(&stamps, W);
            check_per_window(&per_window, 1);
            // Each window was offered at least 2 calls: both reach N exactly.
            assert_eq!(per_window.get(&0), Some(&1));
            assert_eq!(per_window.get(&1), Some(&1));
        });
    }

    #[test]
    fn three_workers_bounded_preemption() {
        model(3, || {
            let l = limiter(2, false);
            let stamps = stamps_of(
                &l,
                3,
                |i| vec![i * W / 4, W + i, W / 3],
                |l, t| l.acquire_at(t),
            );
            let per_window = stamps_in_windows(&stamps, W);
            check_per_window(&per_window, 2);
            assert_eq!(per_window.get(&1), Some(&2));
        });
    }
    /// N = 1: worker 0 is admitted at the end of window 0 (or, after the roll, stale
    /// into window 1) and gives the permit back while worker 1 calls twice at the start
    /// of window 1. A permit given back after the roll is not counted in window 1: at
    /// most one kept there.
    #[test]
    fn a_permit_given_back_racing_a_roll_stays_in_its_window() {
        model(2, || {
            let l = limiter(1, false);
            let kept = kept_beside_a_give_back(
                &l,
                W - 1,
                vec![W, W],
                |l, t| l.acquire_at(t),
                |l, stamp| l.give_back(stamp),
                |&stamp| stamp,
            );
            check_per_window(&stamps_in_windows(&kept, W), 1);
            // Nothing is lost either: the next window admits its one.
            assert!(l.acquire_at(2 * W).is_some());
        });
    }

    /// The trap of the seed articles: move the window with one compare-exchange, then
    /// reset the count with a separate store. An increment that lands between the two is
    /// lost, and the window admits N + 1. The model must find it.
    #[test]
    #[should_panic(expected = "admitted 2 in one window")]
    fn racy_two_atomic_reset_is_caught() {
        struct Racy {
            window: AtomicU64,
            count: AtomicU64,
        }
        impl Racy {
            // SeqCst throughout: the strongest ordering, so that what loom finds is the
            // two-atomic design's race, not a weak ordering.
            fn acquire(&self, now_window: u64) -> bool {
                let w = self.window.load(Ordering::SeqCst);
                if now_window > w
                    && self
                        .window
                        .compare_exchange(w, now_window, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                {
                    self.count.store(1, Ordering::SeqCst);
                    return true;
                }
                self.count.fetch_add(1, Ordering::SeqCst) < 1
            }
        }
        model(2, || {
            let racy = Arc::new(Racy {
                window: AtomicU64::new(0),
                count: AtomicU64::new(0),
            });
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    let racy = racy.clone();
                    thread::spawn(move || racy.acquire(1))
                })
                .collect();
            let admitted = workers
                .into_iter()
                .map(|w| w.join().unwrap())
                .filter(|&a| a)
                .count();
            assert!(admitted <= 1, "admitted {admitted} in one window");
        });
    }
}
