use std::fmt;
use std::str::FromStr;

use super::{BucketedWindow, FixedWindow, RateLimiter, SlidingLog, SlidingWindowCounter};
use crate::clock::{Clock, MonotonicClock};
use crate::limit::Limit;

/// The limiting algorithms this crate provides, to choose one at run time.
///
/// Parses from (and displays as) `fixed`, `sliding`, `sliding-log` and `bucketed`.
///
/// # Which algorithm when
///
/// Every algorithm is lock-free, never blocks, writes nothing when it refuses, and is
/// paced by default (see [`Limit`]'s "Pacing"). `N` permits per window `W`, `B`
/// sub-windows (10 by default). Cost: median ns per decision from `BENCHMARKS.md`
/// (criterion, 2-vCPU VM, unpaced), with the default clock, and on a `ManualClock` (the
/// algorithm alone); a refusal costs less than an admission.
///
/// | algorithm | guarantee | memory | admit / reject (default clock) | admit / reject (algorithm alone) | suits |
/// |---|---|---|---|---|---|
/// | [`FixedWindow`] (`fixed`, the default) | ≤ N per aligned window, exactly N under saturation; up to 2N across an edge | one cache line | 10.9 / 4.6 | 10.7 / 1.1 | most services: the cheapest, and with pacing an evenly spread sample |
/// | [`SlidingWindowCounter`] (`sliding`) | ≤ N per aligned window; ≤ N + ⌈P·e/W⌉ ≤ 2N in any interval of W (about N for even traffic) | two words | 13.5 / 4.4 | 12.9 / 1.7–2.6 | a smoother cap than the fixed window in O(1) memory, for bursty traffic at window edges |
/// | [`SlidingLog`] (`sliding-log`) | ≤ N in **any** interval of W, exactly | 16·N bytes (16 MB at N = 10⁶) | 15.6 / 4.9 | 15.2 / 2.1 | a strict backend quota with a modest N |
/// | [`BucketedWindow`] (`bucketed`) | ≤ N in any B consecutive sub-windows (any interval of W on a sub-window edge); ≤ N + one sub-window's count (≤ 2N) in any interval of W | B + 2 words (96 bytes + a cache line by default) | see `BENCHMARKS.md` | see `BENCHMARKS.md` | a sliding cap for large N, where the log's memory is too much; accuracy W/B |
///
/// Pacing adds two multiplications to the fixed window's and the sliding counter's
/// decisions, and two divisions and a slot read to the sliding log's; see
/// `BENCHMARKS.md` for the paced rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// [`FixedWindow`]: at most N per aligned window; the cheapest.
    #[default]
    FixedWindow,
    /// [`SlidingWindowCounter`]: at most N per aligned window and at most 2N in any
    /// sliding one; O(1) memory.
    SlidingWindow,
    /// [`SlidingLog`]: at most N in any sliding window, exactly; O(N) memory.
    SlidingLog,
    /// [`BucketedWindow`]: at most N in any B consecutive sub-windows, within one
    /// sub-window (W/B) of an exact sliding window; O(B) memory.
    BucketedWindow,
}

impl Algorithm {
    /// Every algorithm, in the order of the docs.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::BucketedWindow,
    ];

    /// The name it parses from: `fixed`, `sliding`, `sliding-log` or `bucketed`.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed",
            Algorithm::SlidingWindow => "sliding",
            Algorithm::SlidingLog => "sliding-log",
            Algorithm::BucketedWindow => "bucketed",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = ParseAlgorithmError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| ParseAlgorithmError(s.to_owned()))
    }
}

/// The error of parsing an unknown [`Algorithm`] name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown algorithm {0:?}; expected one of \"fixed\", \"sliding\", \"sliding-log\", \"bucketed\"")]
pub struct ParseAlgorithmError(String);

/// A limiter's algorithm and limit: where what a limiter of them counts begins and ends,
/// and the most it lets through in a span, computed without the limiter (a reload
/// computes them for a limiter dropped since; see `config::compile::unseen`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
pub(crate) struct Shape {
    pub(crate) algorithm: Algorithm,
    pub(crate) limit: Limit,
}

#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
impl Shape {
    /// The bucketed window's sub-window length and count, as its limiter cuts them.
    fn ring(self) -> (u64, u64) {
        super::bucketed_window::ring(self.limit)
    }

    /// When what it counts at `now` has left its window (clock nanoseconds): the end of
    /// the aligned window for the fixed window and the sliding counter, `now + W` for
    /// the sliding log (what it stamps now leaves it then), and for the bucketed window
    /// the end of the last `B` sub-windows that hold `now`'s. Until then a reload's
    /// excess (admissions a replacement counts beyond what its limiter holds) lasts.
    pub(crate) fn counted_until(self, now: u64) -> u64 {
        let w = self.limit.window_nanos();
        match self.algorithm {
            Algorithm::SlidingLog => now.saturating_add(w),
            Algorithm::BucketedWindow => {
                let (s, b) = self.ring();
                (now / s).saturating_add(b).saturating_mul(s)
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                (now / w).saturating_add(1).saturating_mul(w)
            }
        }
    }

    /// Where what it counts at `now` begins (clock nanoseconds, included): the aligned
    /// window for the fixed window and the sliding counter, just after `now - W` for the
    /// sliding log, the first of the last `B` sub-windows for the bucketed window. Its
    /// look-back: a replacement must count what its lineage admitted from here on.
    pub(crate) fn counted_from(self, now: u64) -> u64 {
        let w = self.limit.window_nanos();
        match self.algorithm {
            Algorithm::SlidingLog => (now + 1).saturating_sub(w),
            Algorithm::BucketedWindow => {
                let (s, b) = self.ring();
                (now / s + 1).saturating_mul(s).saturating_sub(s * b)
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindow => now / w * w,
        }
    }

    /// The most it lets through of its own in `[from, to)` (`from < to`), by its
    /// guarantee: `N` per aligned window meeting the span for the fixed window and the
    /// sliding counter, per `W` of the span's length for the sliding log, per `B`
    /// sub-windows meeting it for the bucketed window.
    pub(crate) fn most_in(self, from: u64, to: u64) -> u64 {
        let w = self.limit.window_nanos();
        let meeting = |len: u64| (to - 1) / len - from / len + 1;
        let windows = match self.algorithm {
            Algorithm::SlidingLog => (to - from).div_ceil(w),
            Algorithm::BucketedWindow => {
                let (s, b) = self.ring();
                meeting(s).div_ceil(b)
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindow => meeting(w),
        };
        windows.saturating_mul(u64::from(self.limit.permits()))
    }
}

/// Any of the crate's limiters, chosen at run time by [`Algorithm`], dispatched without
/// a virtual call.
pub struct AnyLimiter<C = MonotonicClock> {
    inner: Inner<C>,
}

enum Inner<C> {
    Fixed(FixedWindow<C>),
    Sliding(SlidingWindowCounter<C>),
    Log(SlidingLog<C>),
    Bucketed(BucketedWindow<C>),
}

impl AnyLimiter {
    /// The `algorithm` limiter for `limit`, on the default [`MonotonicClock`].
    pub fn new(algorithm: Algorithm, limit: Limit) -> Self {
        Self::with_clock(algorithm, limit, MonotonicClock::new())
    }
}

impl<C: Clock> AnyLimiter<C> {
    /// The `algorithm` limiter for `limit`, reading `clock`.
    pub fn with_clock(algorithm: Algorithm, limit: Limit, clock: C) -> Self {
        let inner = match algorithm {
            Algorithm::FixedWindow => Inner::Fixed(FixedWindow::with_clock(limit, clock)),
            Algorithm::SlidingWindow => {
                Inner::Sliding(SlidingWindowCounter::with_clock(limit, clock))
            }
            Algorithm::SlidingLog => Inner::Log(SlidingLog::with_clock(limit, clock)),
            Algorithm::BucketedWindow => Inner::Bucketed(BucketedWindow::with_clock(limit, clock)),
        };
        Self { inner }
    }

    /// The algorithm chosen.
    pub fn algorithm(&self) -> Algorithm {
        match self.inner {
            Inner::Fixed(_) => Algorithm::FixedWindow,
            Inner::Sliding(_) => Algorithm::SlidingWindow,
            Inner::Log(_) => Algorithm::SlidingLog,
            Inner::Bucketed(_) => Algorithm::BucketedWindow,
        }
    }

    /// The admissions counted at `now` in the current window (for the sliding log, in
    /// the last window): what a reload carries over.
    fn count_at(&self, now: u64) -> u64 {
        match &self.inner {
            Inner::Fixed(l) => l.count_at(now),
            Inner::Sliding(l) => l.count_at(now),
            Inner::Log(l) => l.count_at(now),
            Inner::Bucketed(l) => l.count_at(now),
        }
    }

    /// Counts, now, `count` admissions made elsewhere (by the limiter this one
    /// replaces, or by decisions that still held it during a reload) in the current
    /// window, as many as fit under the permits and whatever the pacing schedule has
    /// released, since they were admitted under one already; returns how many it
    /// counted. So a replacement starts where the old limiter was, and a reload that
    /// changes a limit causes no burst. One compare-exchange for the window limiters;
    /// the sliding log writes one slot per admission carried.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn absorb(&self, count: u64) -> u64 {
        let now = self.clock().now_nanos();
        match &self.inner {
            Inner::Fixed(l) => l.absorb_at(now, count),
            Inner::Sliding(l) => l.absorb_at(now, count),
            Inner::Log(l) => l.absorb_at(now, count),
            Inner::Bucketed(l) => l.absorb_at(now, count),
        }
    }

    /// Closes the limiter for good, so that every later decision refuses, and returns
    /// what it counted in its current window at that instant (as
    /// [`count_in_window`](RateLimiter::count_in_window)): one swap of its word (the
    /// sliding log's admission counter), so each admission is in the count or refused.
    /// Exact, but for a sliding log slot whose newest stamp the closing thread does not
    /// see yet, counted as if in the window. A refusal on a closed limiter is the
    /// refusal of a full one: the decision path has no test for it.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn close(&self) -> u64 {
        let now = self.clock().now_nanos();
        match &self.inner {
            Inner::Fixed(l) => l.close_at(now),
            Inner::Sliding(l) => l.close_at(now),
            Inner::Log(l) => l.close_at(now),
            Inner::Bucketed(l) => l.close_at(now),
        }
    }

    /// Its algorithm and limit: what bounds where it counts and what it lets through
    /// ([`Shape`]), without the limiter.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn shape(&self) -> Shape {
        Shape {
            algorithm: self.algorithm(),
            limit: self.limit(),
        }
    }

    /// [`Shape::counted_until`] of its shape.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn counted_until(&self, now: u64) -> u64 {
        self.shape().counted_until(now)
    }

    /// [`Shape::counted_from`] of its shape.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn counted_from(&self, now: u64) -> u64 {
        self.shape().counted_from(now)
    }

    /// The decision for a call made at `now` (clock nanoseconds), for a caller that
    /// has read the clock already (the fair limiter).
    #[inline]
    pub(crate) fn acquire_at(&self, now: u64) -> Option<u64> {
        match &self.inner {
            Inner::Fixed(l) => l.acquire_at(now),
            Inner::Sliding(l) => l.acquire_at(now),
            Inner::Log(l) => l.acquire_at(now),
            Inner::Bucketed(l) => l.acquire_at(now),
        }
    }

    /// The clock the limiter reads.
    pub fn clock(&self) -> &C {
        match &self.inner {
            Inner::Fixed(l) => l.clock(),
            Inner::Sliding(l) => l.clock(),
            Inner::Log(l) => l.clock(),
            Inner::Bucketed(l) => l.clock(),
        }
    }
}

impl<C: Clock> RateLimiter for AnyLimiter<C> {
    #[inline]
    fn acquire_stamped(&self) -> Option<u64> {
        match &self.inner {
            Inner::Fixed(l) => l.acquire_stamped(),
            Inner::Sliding(l) => l.acquire_stamped(),
            Inner::Log(l) => l.acquire_stamped(),
            Inner::Bucketed(l) => l.acquire_stamped(),
        }
    }

    fn count_in_window(&self) -> Option<u64> {
        Some(self.count_at(self.clock().now_nanos()))
    }

    fn limit(&self) -> Limit {
        match &self.inner {
            Inner::Fixed(l) => l.limit(),
            Inner::Sliding(l) => l.limit(),
            Inner::Log(l) => l.limit(),
            Inner::Bucketed(l) => l.limit(),
        }
    }
}

impl<C: fmt::Debug> fmt::Debug for AnyLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Fixed(l) => l.fmt(f),
            Inner::Sliding(l) => l.fmt(f),
            Inner::Log(l) => l.fmt(f),
            Inner::Bucketed(l) => l.fmt(f),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn carry_over_starts_a_new_limiter_where_the_old_one_was() {
        for from in Algorithm::ALL {
            for to in Algorithm::ALL {
                let clock = ManualClock::new();
                clock.set(1_500_000_000);
                let limit = |n| {
                    Limit::per_window(n, Duration::from_secs(1))
                        .unwrap()
                        .unpaced()
                };
                let old = AnyLimiter::with_clock(from, limit(5), clock.clone());
                assert_eq!((0..3).filter(|_| old.try_acquire()).count(), 3);
                assert_eq!(old.count_at(clock.now_nanos()), 3, "{from}");
                let new = AnyLimiter::with_clock(to, limit(4), clock.clone());
                new.absorb(old.count_at(clock.now_nanos()));
                assert_eq!(
                    (0..10).filter(|_| new.try_acquire()).count(),
                    1,
                    "{from} -> {to}"
                );
                // A smaller new limit is simply full.
                let small = AnyLimiter::with_clock(to, limit(2), clock.clone());
                small.absorb(old.count_at(clock.now_nanos()));
                assert!(!small.try_acquire(), "{from} -> {to}");
                // The count belongs to the current window only.
                clock.advance(Duration::from_secs(2));
                assert_eq!(old.count_at(clock.now_nanos()), 0, "{from}");
            }
        }
    }

    /// A closed limiter returns what it counted and then refuses every call, in its
    /// window and in every later one (nothing rolls it over), paced or not, its clock
    /// part-way into a window or on its edge.
    #[test]
    fn a_closed_limiter_returns_its_count_and_refuses_for_good() {
        for algorithm in Algorithm::ALL {
            for paced in [false, true] {
                for start in [3_000_000_000, 3_730_000_000] {
                    let clock = ManualClock::new();
                    clock.set(start);
                    let limit = Limit::per_window(10, Duration::from_secs(1)).unwrap();
                    let limit = if paced { limit } else { limit.unpaced() };
                    let l = AnyLimiter::with_clock(algorithm, limit, clock.clone());
                    let kept = (0..4).filter(|_| l.try_acquire()).count() as u64;
                    assert!(kept > 0, "{algorithm}");
                    assert_eq!(l.close(), kept, "{algorithm} paced {paced} at {start}");
                    for step in [0, 1, 999, 5_000] {
                        clock.set(start + step * 1_000_000);
                        assert!(!l.try_acquire(), "{algorithm} +{step} ms");
                        assert_eq!(l.acquire_stamped(), None, "{algorithm} +{step} ms");
                    }
                }
            }
        }
    }

    /// Threads admit while another closes: every admission is in the count the close
    /// returns or was refused, exactly, whatever the algorithm (one window, on a manual
    /// clock started part-way into it; and on the real clock, whose window of an hour
    /// the run does not leave).
    #[test]
    fn closing_under_threads_counts_every_admission_made_before_it_and_none_after() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let manual = ManualClock::new();
        manual.set(7_250_000_000);
        let hour = Duration::from_secs(3600);
        for algorithm in Algorithm::ALL {
            let limit = Limit::per_window(4096, hour).unwrap().unpaced();
            let on_manual = AnyLimiter::with_clock(algorithm, limit, manual.clone());
            let on_real = AnyLimiter::new(algorithm, limit);
            fn hammer<C: Clock>(l: &AnyLimiter<C>) -> (u64, u64) {
                let admitted = AtomicU64::new(0);
                let frozen = std::thread::scope(|scope| {
                    for _ in 0..3 {
                        scope.spawn(|| {
                            for _ in 0..2000 {
                                if l.try_acquire() {
                                    // Relaxed: read after the threads are joined.
                                    admitted.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        });
                    }
                    std::thread::yield_now();
                    l.close()
                });
                (frozen, admitted.into_inner())
            }
            let (frozen, admitted) = hammer(&on_manual);
            assert_eq!(frozen, admitted, "{algorithm} on a manual clock");
            let (frozen, admitted) = hammer(&on_real);
            assert_eq!(frozen, admitted, "{algorithm} on the real clock");
        }
    }

    /// Admissions carried from elsewhere were admitted under a schedule already: a
    /// paced limiter counts them all, early in its window too, up to its permits. (On
    /// main a paced replacement counted only what its schedule had released, and went
    /// over its limit after a reload.)
    #[test]
    fn absorb_counts_what_the_schedule_has_not_released_yet() {
        for algorithm in Algorithm::ALL {
            for phase in [0, 100_000_000, 550_000_000] {
                let clock = ManualClock::new();
                clock.set(3_000_000_000 + phase);
                let limit = Limit::per_window(10, Duration::from_secs(1)).unwrap();
                let l = AnyLimiter::with_clock(algorithm, limit, clock.clone());
                assert_eq!(l.absorb(6), 6, "{algorithm} at {phase}");
                assert_eq!(l.count_at(clock.now_nanos()), 6, "{algorithm} at {phase}");
                assert_eq!(l.absorb(6), 4, "{algorithm} at {phase}: past the permits");
                assert!(!l.try_acquire(), "{algorithm} at {phase}");
                // The window the admissions were counted in holds them, the one after
                // it (for the log, a window's length later) starts empty.
                clock.advance(Duration::from_secs(2));
                assert_eq!(l.count_at(clock.now_nanos()), 0, "{algorithm}");
            }
        }
    }

    /// What a bucketed window counts leaves it with its sub-window, not at the aligned
    /// window's end: a reload's excess must last as long. (Before, it lasted to the
    /// aligned end: a handover from a bucketed window at that instant dropped the excess
    /// while the sub-window still counted, and the next limiter gave it out again.)
    #[test]
    fn what_is_counted_now_leaves_the_window_when_the_algorithm_says() {
        let clock = ManualClock::new();
        let now = 1_596_000_000;
        let limit = Limit::per_window(1, Duration::from_millis(500)).unwrap();
        let until =
            |algorithm| AnyLimiter::with_clock(algorithm, limit, clock.clone()).counted_until(now);
        assert_eq!(until(Algorithm::FixedWindow), 2_000_000_000);
        assert_eq!(until(Algorithm::SlidingWindow), 2_000_000_000);
        assert_eq!(until(Algorithm::SlidingLog), 2_096_000_000);
        // Sub-windows of 50 ms: 1.55 s to 1.6 s, counted until 2.05 s.
        assert_eq!(until(Algorithm::BucketedWindow), 2_050_000_000);
        let l = AnyLimiter::with_clock(Algorithm::BucketedWindow, limit.unpaced(), clock.clone());
        clock.set(now);
        assert_eq!(l.absorb(1), 1);
        clock.set(2_049_999_999);
        assert_eq!(l.count_at(clock.now_nanos()), 1, "still counted");
        clock.set(2_050_000_000);
        assert_eq!(l.count_at(clock.now_nanos()), 0, "gone");
    }

    /// Where what it counts begins, and the most it lets through of its own in a span
    /// before that: what a replacement looking back further must count.
    #[test]
    fn what_it_counts_begins_where_the_algorithm_says_and_bounds_a_span_before() {
        let clock = ManualClock::new();
        let now = 1_596_000_000;
        let limit = Limit::per_window(3, Duration::from_millis(500)).unwrap();
        let of = |algorithm| AnyLimiter::with_clock(algorithm, limit, clock.clone());
        let from = |algorithm| of(algorithm).counted_from(now);
        assert_eq!(from(Algorithm::FixedWindow), 1_500_000_000);
        assert_eq!(from(Algorithm::SlidingWindow), 1_500_000_000);
        assert_eq!(from(Algorithm::SlidingLog), 1_096_000_001);
        // Sub-windows of 50 ms: the last 10 hold 1.55 s to 1.6 s.
        assert_eq!(from(Algorithm::BucketedWindow), 1_100_000_000);
        // [0.2 s, 1.1 s): the aligned windows [0, 0.5 s), [0.5 s, 1 s), [1 s, 1.5 s);
        // two log windows' length; 18 sub-windows, two runs of 10.
        let most = |algorithm| of(algorithm).shape().most_in(200_000_000, 1_100_000_000);
        assert_eq!(most(Algorithm::FixedWindow), 9);
        assert_eq!(most(Algorithm::SlidingWindow), 9);
        assert_eq!(most(Algorithm::SlidingLog), 6);
        assert_eq!(most(Algorithm::BucketedWindow), 6);
    }

    #[test]
    fn algorithm_names_round_trip_and_unknown_names_say_what_is_accepted() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
        }
        let err = "token-bucket".parse::<Algorithm>().unwrap_err().to_string();
        assert!(
            err.contains("token-bucket") && err.contains("sliding-log"),
            "{err}"
        );
    }
}
