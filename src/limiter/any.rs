use std::fmt;
use std::str::FromStr;

use super::{
    Admission, BucketedWindow, FixedWindow, RateLimiter, SlidingLog, SlidingWindowCounter,
};
use crate::clock::{Clock, MonotonicClock};
use crate::limit::Limit;

// What a reload carries out of it and into its replacement.
mod carry;

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

    /// [`acquire_stamped`](RateLimiter::acquire_stamped), with what
    /// [`give_back`](Self::give_back) needs to return the permit.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    #[inline]
    pub(crate) fn admit(&self) -> Option<Admission> {
        let now = self.clock().now_nanos();
        match &self.inner {
            Inner::Fixed(l) => l.acquire_at(now).map(Admission::at),
            Inner::Sliding(l) => l.acquire_at(now).map(Admission::at),
            Inner::Log(l) => l.admission_at(now),
            Inner::Bucketed(l) => l.acquire_at(now).map(Admission::at),
        }
    }

    /// The first half of an admission that a later check may still refuse (the rule
    /// layer's service cap): the permit, taken (the window limiters, which
    /// [`release`](Self::release) gives back exactly) or, for the sliding log, found
    /// without writing ([`SlidingLog::peek_at`]: a slot given back stays in the ring's
    /// order, so the log takes it only once the span is kept). Then
    /// [`confirm`](Self::confirm) if the span is kept, else `release`. A refusal
    /// writes nothing.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    #[inline]
    pub(crate) fn take(&self) -> Option<Admission> {
        match &self.inner {
            Inner::Log(l) => l.peek_at(self.clock().now_nanos()),
            _ => self.admit(),
        }
    }

    /// Makes the admission [`take`](Self::take) returned: nothing more for the window
    /// limiters; the sliding log claims it now, at the time it was found, which fails
    /// (`None`) if another call took the room meanwhile.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    #[inline]
    pub(crate) fn confirm(&self, taken: Admission) -> Option<Admission> {
        match &self.inner {
            Inner::Log(l) => l.claim(taken),
            _ => Some(taken),
        }
    }

    /// Gives up the admission [`take`](Self::take) returned, not confirmed: the window
    /// limiters give its permit back; the sliding log has nothing to undo.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    pub(crate) fn release(&self, taken: Admission) {
        if !matches!(self.inner, Inner::Log(_)) {
            self.give_back(taken);
        }
    }

    /// Gives back the permit of `admission`, one this limiter made ([`admit`](Self::admit),
    /// or [`take`](Self::take) confirmed) for a span a later check refused: a permit of
    /// the window it was counted in, while that window is the current one; nothing once
    /// it is over, so a window never counts more admissions than were kept in it. The
    /// sliding log frees the slot from the admission's time on
    /// ([`SlidingLog::give_back`]). Nothing on a closed limiter. A compare-exchange, no
    /// clock read.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
    pub(crate) fn give_back(&self, admission: Admission) {
        match &self.inner {
            Inner::Fixed(l) => l.give_back(admission.stamp),
            Inner::Sliding(l) => l.give_back(admission.stamp),
            Inner::Log(l) => l.give_back(admission),
            Inner::Bucketed(l) => l.give_back(admission.stamp),
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

    /// Whether `kept` (stamps) holds the guarantee of `algorithm` for `limit`: at most
    /// N per aligned window (fixed, sliding counter), in any interval `(t − W, t]`
    /// (sliding log), in any `B` consecutive sub-windows (bucketed).
    fn holds(algorithm: Algorithm, limit: Limit, kept: &[u64]) -> Result<(), String> {
        let n = limit.permits() as usize;
        let w = limit.window_nanos();
        let over = |what: String, count: usize| {
            if count > n {
                Err(format!("{count} > {n} in {what}: {kept:?}"))
            } else {
                Ok(())
            }
        };
        match algorithm {
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                for &t in kept {
                    over(
                        format!("window {}", t / w),
                        kept.iter().filter(|&&s| s / w == t / w).count(),
                    )?;
                }
            }
            Algorithm::SlidingLog => {
                for &t in kept {
                    let inside = kept.iter().filter(|&&s| s <= t && s + w > t).count();
                    over(format!("({}, {t}]", t.saturating_sub(w)), inside)?;
                }
            }
            Algorithm::BucketedWindow => {
                let (sub, b) = super::super::bucketed_window::ring(limit);
                for &t in kept {
                    let j = t / sub;
                    let inside = kept
                        .iter()
                        .filter(|&&s| s / sub <= j && s / sub + b > j)
                        .count();
                    over(format!("the {b} sub-windows to {j}"), inside)?;
                }
            }
        }
        Ok(())
    }

    proptest::proptest! {
        /// Permits given back, at once or later (after window rolls, stepping back, on
        /// a closed limiter), never let a limiter's kept admissions pass its guarantee:
        /// a permit given back once its window is over is not counted in the next one.
        #[test]
        fn permits_given_back_at_any_time_keep_the_guarantee(
            algorithm in proptest::sample::select(Algorithm::ALL.to_vec()),
            permits in 1u32..12,
            paced in proptest::bool::ANY,
            w in crate::limiter::prop_support::windows(),
            start in 0u64..5_000_000_000,
            steps in proptest::collection::vec(
                (0u64..600, proptest::bool::weighted(0.1), 0usize..5, proptest::option::of(0usize..64)),
                1..120,
            ),
            close_at in proptest::option::of(0usize..120),
        ) {
            let mut walk = crate::limiter::prop_support::Walk::new(start, w);
            let limit = crate::limiter::prop_support::limit(permits, w, 10, paced);
            let l = AnyLimiter::with_clock(algorithm, limit, walk.clock.clone());
            // Admissions not given back (kept), and those that may still be.
            let mut held: Vec<Admission> = Vec::new();
            let mut kept: Vec<u64> = Vec::new();
            let mut closed = false;
            for (i, (delta, backwards, calls, give)) in steps.into_iter().enumerate() {
                walk.step(delta, backwards);
                if close_at == Some(i) {
                    let _ = l.close();
                    closed = true;
                }
                for c in 0..calls {
                    // Made at once, or taken then confirmed or released (every third).
                    let made = match (c + i) % 3 {
                        0 => l.admit(),
                        1 => l.take().and_then(|a| l.confirm(a)),
                        _ => {
                            if let Some(a) = l.take() {
                                l.release(a);
                            }
                            None
                        }
                    };
                    if let Some(a) = made {
                        proptest::prop_assert!(!closed, "{} admitted when closed", algorithm);
                        held.push(a);
                    }
                }
                if let Some(g) = give {
                    if !held.is_empty() {
                        let a = held.remove(g % held.len());
                        l.give_back(a);
                    }
                }
            }
            kept.extend(held.iter().map(|a| a.stamp));
            kept.sort_unstable();
            if let Err(e) = holds(algorithm, limit, &kept) {
                return Err(proptest::test_runner::TestCaseError::fail(format!("{algorithm} paced {paced}: {e}")));
            }
        }
    }

    /// A permit taken and released at once (a span the cap refused) is as if the call
    /// had not been made: the limiter then decides as a fresh one does, in every
    /// algorithm (the sliding log only found it: there is nothing to undo).
    #[test]
    fn a_permit_taken_and_released_is_admitted_again() {
        for algorithm in Algorithm::ALL {
            for paced in [false, true] {
                let clock = ManualClock::new();
                clock.set(4_250_000_000);
                let limit = Limit::per_window(10, Duration::from_secs(1)).unwrap();
                let limit = if paced { limit } else { limit.unpaced() };
                let l = AnyLimiter::with_clock(algorithm, limit, clock.clone());
                let fresh = AnyLimiter::with_clock(algorithm, limit, clock.clone());
                for step in 0..40u64 {
                    clock.set(4_250_000_000 + step * 50_000_000);
                    for _ in 0..5 {
                        if let Some(a) = l.take() {
                            l.release(a);
                        }
                        let got = l.take().and_then(|a| l.confirm(a)).is_some();
                        let case = format!("{algorithm} paced {paced} step {step}");
                        assert_eq!(got, fresh.admit().is_some(), "{case}");
                    }
                }
            }
        }
    }
}
