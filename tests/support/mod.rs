//! Helpers shared by the integration tests: admissions per aligned window, sliding
//! interval checks over admission stamps, a multi-threaded hammer that records what each
//! call could have been decided against, and sequential reference models of the
//! limiters for phases in which every call reads the same clock time.
//!
//! Every check is stated over the stamps `RateLimiter::acquire_stamped` returns: the
//! clock time each admission is accounted at, over which each algorithm states its
//! guarantee.

// Each test file uses its own subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::thread;

use otel_rate_sampler::{Clock, RateLimiter};

/// Admissions per aligned window `[k·W, (k+1)·W)`, keyed by `k`.
pub(crate) fn per_window(stamps: &[u64], window: u64) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for s in stamps {
        *counts.entry(s / window).or_insert(0) += 1;
    }
    counts
}

/// Asserts that no aligned window holds more than `permits` stamps; returns the counts.
pub(crate) fn assert_at_most_per_window(
    stamps: &[u64],
    window: u64,
    permits: usize,
    what: &str,
) -> BTreeMap<u64, usize> {
    let counts = per_window(stamps, window);
    for (k, n) in &counts {
        assert!(
            *n <= permits,
            "{what}: aligned window {k} ([{}, {}) ns) admitted {n} > N = {permits}",
            k * window,
            (k + 1) * window
        );
    }
    counts
}

/// `stamps`, sorted.
pub(crate) fn sorted(stamps: &[u64]) -> Vec<u64> {
    let mut s = stamps.to_vec();
    s.sort_unstable();
    s
}

/// Asserts that no half-open interval of length `window` holds more than `max` stamps:
/// in the sorted stamps, `s[i + max] - s[i] >= window` for every `i`.
pub(crate) fn assert_sliding_at_most(stamps: &[u64], window: u64, max: usize, what: &str) {
    let s = sorted(stamps);
    for (i, pair) in s.windows(max + 1).enumerate() {
        let (first, last) = (pair[0], pair[max]);
        assert!(
            last - first >= window,
            "{what}: {} stamps within {} ns < W = {window} ns (stamps[{i}] = {first}, \
             stamps[{}] = {last}), more than {max} in one sliding window",
            max + 1,
            last - first,
            i + max
        );
    }
}

/// The documented bound of the sliding-window counter, checked at every stamp `t`: the
/// interval `(t − W, t]` holds at most `N + ⌈P·e/W⌉` stamps, where `e = t mod W` and `P`
/// is the number of stamps in the aligned window before `t`'s. This is at most `2N`.
pub(crate) fn assert_sliding_counter_bound(
    stamps: &[u64],
    window: u64,
    permits: usize,
    what: &str,
) {
    let s = sorted(stamps);
    let counts = per_window(&s, window);
    for (j, &t) in s.iter().enumerate() {
        // Every stamp equal to t is inside (t − W, t]: take the last of them.
        if s.get(j + 1) == Some(&t) {
            continue;
        }
        let low = s.partition_point(|&x| x + window <= t);
        let inside = j + 1 - low;
        let k = t / window;
        let p = if k == 0 {
            0
        } else {
            counts.get(&(k - 1)).copied().unwrap_or(0)
        };
        let excess = (p as u128 * u128::from(t % window)).div_ceil(u128::from(window));
        let bound = permits + excess as usize;
        assert!(
            inside <= bound,
            "{what}: {inside} stamps in ({}, {t}] > N + ⌈P·e/W⌉ = {bound} (P = {p})",
            t.saturating_sub(window)
        );
        assert!(
            inside <= 2 * permits,
            "{what}: {inside} stamps in ({}, {t}] > 2N",
            t.saturating_sub(window)
        );
    }
}

/// What a [`hammer`] run saw.
#[derive(Debug, Default)]
pub(crate) struct Hammered {
    /// Every admission's stamp, unsorted.
    pub(crate) stamps: Vec<u64>,
    /// For each aligned window `k`, the calls whose clock readings just before and just
    /// after the call both fell in `k`: such a call read a time in `k` itself (the clock
    /// is monotonic), and no call can have started a later window before it returned, so
    /// it was decided against window `k`.
    pub(crate) decided_inside: BTreeMap<u64, u64>,
    /// Calls made in all.
    pub(crate) calls: u64,
}

/// `threads` threads each call `limiter.acquire_stamped()` `calls_per_thread` times,
/// starting together. With `bracket`, each call is bracketed by two reads of `clock`
/// (which must share the limiter's time base) to fill
/// [`decided_inside`](Hammered::decided_inside) for aligned windows of `window` ns.
pub(crate) fn hammer<L: RateLimiter, C: Clock>(
    limiter: &L,
    clock: &C,
    threads: usize,
    calls_per_thread: u64,
    window: u64,
    bracket: bool,
) -> Hammered {
    let start = Barrier::new(threads);
    let per_thread: Vec<Hammered> = thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let start = &start;
                scope.spawn(move || {
                    let mut seen = Hammered::default();
                    // Runs of bracketed calls in one window, flushed when the window
                    // changes: far cheaper than a map update per call.
                    let (mut run_window, mut run_len) = (u64::MAX, 0u64);
                    start.wait();
                    for _ in 0..calls_per_thread {
                        if bracket {
                            let before = clock.now_nanos();
                            let got = limiter.acquire_stamped();
                            let after = clock.now_nanos();
                            if let Some(stamp) = got {
                                seen.stamps.push(stamp);
                            }
                            let k = before / window;
                            if k == after / window {
                                if k != run_window {
                                    if run_len > 0 {
                                        *seen.decided_inside.entry(run_window).or_insert(0) +=
                                            run_len;
                                    }
                                    (run_window, run_len) = (k, 0);
                                }
                                run_len += 1;
                            }
                        } else if let Some(stamp) = limiter.acquire_stamped() {
                            seen.stamps.push(stamp);
                        }
                    }
                    if run_len > 0 {
                        *seen.decided_inside.entry(run_window).or_insert(0) += run_len;
                    }
                    seen.calls = calls_per_thread;
                    seen
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("hammer thread panicked"))
            .collect()
    });
    let mut all = Hammered::default();
    for seen in per_thread {
        all.stamps.extend(seen.stamps);
        for (k, n) in seen.decided_inside {
            *all.decided_inside.entry(k).or_insert(0) += n;
        }
        all.calls += seen.calls;
    }
    all
}

/// A sequential model of one of the limiters, for a phase in which every call reads the
/// same clock time `now`.
pub(crate) trait Model {
    /// How many of `offered` calls at `now` the limiter admits, and the stamp each gets.
    fn admits(&self, now: u64, offered: u64) -> (u64, u64);
    /// Records that `admitted` calls were admitted at `now`.
    fn record(&mut self, now: u64, admitted: u64);
    /// The fewest of the `expected` admissions at `now` the documentation promises when
    /// the calls race each other: all of them, unless the algorithm documents that it
    /// may refuse more.
    fn promised(&self, _now: u64, expected: u64) -> u64 {
        expected
    }
}

/// The fixed window: a count for the newest window; a stale reading counts into it.
#[derive(Debug)]
pub(crate) struct FixedModel {
    pub(crate) permits: u64,
    pub(crate) window: u64,
    newest: u64,
    count: u64,
}

impl FixedModel {
    pub(crate) fn new(permits: u32, window: u64) -> Self {
        Self {
            permits: u64::from(permits),
            window,
            newest: 0,
            count: 0,
        }
    }
}

impl Model for FixedModel {
    fn admits(&self, now: u64, offered: u64) -> (u64, u64) {
        let k = now / self.window;
        if k > self.newest {
            (offered.min(self.permits), now)
        } else if k == self.newest {
            (offered.min(self.permits - self.count), now)
        } else {
            (
                offered.min(self.permits - self.count),
                self.newest * self.window,
            )
        }
    }

    fn record(&mut self, now: u64, admitted: u64) {
        let k = now / self.window;
        if k > self.newest {
            if admitted == 0 {
                return;
            }
            (self.newest, self.count) = (k, 0);
        }
        self.count += admitted;
    }
}

/// The sliding-window counter: the newest window's count and the final count of the one
/// before it; admits while `⌊prev·(W − e)/W⌋ + curr + 1 ≤ N`.
#[derive(Debug)]
pub(crate) struct SlidingCounterModel {
    pub(crate) permits: u64,
    pub(crate) window: u64,
    newest: u64,
    curr: u64,
    prev: u64,
}

impl SlidingCounterModel {
    pub(crate) fn new(permits: u32, window: u64) -> Self {
        Self {
            permits: u64::from(permits),
            window,
            newest: 0,
            curr: 0,
            prev: 0,
        }
    }

    /// The state a call at `now` is decided against: (window, curr, prev, elapsed, stamp).
    fn view(&self, now: u64) -> (u64, u64, u64, u64, u64) {
        let k = now / self.window;
        if k > self.newest {
            let prev = if k == self.newest + 1 { self.curr } else { 0 };
            (k, 0, prev, now - k * self.window, now)
        } else if k == self.newest {
            (k, self.curr, self.prev, now - k * self.window, now)
        } else {
            let start = self.newest * self.window;
            (self.newest, self.curr, self.prev, 0, start)
        }
    }
}

impl Model for SlidingCounterModel {
    fn admits(&self, now: u64, offered: u64) -> (u64, u64) {
        let (_, curr, prev, elapsed, stamp) = self.view(now);
        let w = u128::from(self.window);
        // ⌊prev·(W − e)/W⌋ + c + 1 ≤ N, as a division.
        let fits = |c: u64| {
            c < self.permits
                && u128::from(prev) * (w - u128::from(elapsed)) / w + u128::from(c)
                    < u128::from(self.permits)
        };
        let mut admitted = 0;
        while admitted < offered && fits(curr + admitted) {
            admitted += 1;
        }
        (admitted, stamp)
    }

    fn record(&mut self, now: u64, admitted: u64) {
        if admitted == 0 {
            return;
        }
        let (k, curr, prev, _, _) = self.view(now);
        (self.newest, self.curr, self.prev) = (k, curr + admitted, prev);
    }

    /// The roll into a new window is the one racy moment: callers that read the new
    /// window before its roller has published the previous count assume the previous
    /// window full, and may refuse. The roller itself is admitted.
    fn promised(&self, now: u64, expected: u64) -> u64 {
        if now / self.window > self.newest {
            expected.min(1)
        } else {
            expected
        }
    }
}

/// The sliding log as its docs describe it: a ring of the last `N` admission times;
/// admission `k` needs admission `k − N` to be at least a window old. While the clock
/// has only moved forward this is exact (the docs: "admits iff fewer than N admissions
/// lie in (now − W, now] when the calls' clock readings arrive in order"); once it has
/// stepped back the docs promise only that it never admits more.
#[derive(Debug)]
pub(crate) struct SlidingLogModel {
    pub(crate) window: u64,
    ring: Vec<u64>,
    next: u64,
    latest: u64,
    went_back: bool,
}

impl SlidingLogModel {
    pub(crate) fn new(permits: u32, window: u64) -> Self {
        Self {
            window,
            ring: vec![0; permits as usize],
            next: 0,
            latest: 0,
            went_back: false,
        }
    }
}

impl Model for SlidingLogModel {
    fn admits(&self, now: u64, offered: u64) -> (u64, u64) {
        let n = self.ring.len() as u64;
        let mut admitted = 0;
        while admitted < offered {
            let k = self.next + admitted;
            let ok = if k < n {
                true
            } else if k - n >= self.next {
                // Admitted in this very phase, at `now`: inside the window.
                false
            } else {
                now >= self.ring[(k % n) as usize].saturating_add(self.window)
            };
            if !ok {
                break;
            }
            admitted += 1;
        }
        (admitted, now)
    }

    fn record(&mut self, now: u64, admitted: u64) {
        self.went_back |= now < self.latest;
        self.latest = self.latest.max(now);
        let n = self.ring.len() as u64;
        for _ in 0..admitted {
            self.ring[(self.next % n) as usize] = now;
            self.next += 1;
        }
    }

    fn promised(&self, now: u64, expected: u64) -> u64 {
        if self.went_back || now < self.latest {
            0
        } else {
            expected
        }
    }
}

/// The bucketed window, unpaced: counts per sub-window of `⌈W/B⌉`; admits while the
/// newest `B` sub-windows hold fewer than `N`. A stale reading counts into the newest
/// sub-window, stamped at its start.
#[derive(Debug)]
pub(crate) struct BucketedModel {
    permits: u64,
    buckets: u64,
    sub: u64,
    newest: u64,
    counts: BTreeMap<u64, u64>,
}

impl BucketedModel {
    pub(crate) fn new(permits: u32, window: u64, buckets: u32) -> Self {
        Self {
            permits: u64::from(permits),
            buckets: u64::from(buckets),
            sub: window.div_ceil(u64::from(buckets)),
            newest: 0,
            counts: BTreeMap::new(),
        }
    }

    /// The sub-window a call at `now` counts in, and its stamp.
    fn place(&self, now: u64) -> (u64, u64) {
        let j = now / self.sub;
        if j >= self.newest {
            (j, now)
        } else {
            (self.newest, self.newest * self.sub)
        }
    }
}

impl Model for BucketedModel {
    fn admits(&self, now: u64, offered: u64) -> (u64, u64) {
        let (j, stamp) = self.place(now);
        let held: u64 = self
            .counts
            .range((j + 1).saturating_sub(self.buckets)..=j)
            .map(|(_, n)| n)
            .sum();
        (offered.min(self.permits.saturating_sub(held)), stamp)
    }

    fn record(&mut self, now: u64, admitted: u64) {
        if admitted == 0 {
            return;
        }
        let (j, _) = self.place(now);
        self.newest = j;
        *self.counts.entry(j).or_insert(0) += admitted;
    }
}
