use std::fmt;

use crossbeam_utils::CachePadded;

use super::pacing::Pacer;
use super::packed::window_index;
use crate::clock::{Clock, MonotonicClock};
use crate::limit::Limit;
use crate::sync::{AtomicU64, Ordering};

/// An exact sliding-window limiter: at most `N` admissions in **any** interval of length
/// `W`, kept as a lock-free ring of the last `N` admission times.
///
/// This is the bounded channel of the seed article (a channel of capacity `N` holding
/// admission timestamps) without the channel's trimming task: admission `k` writes its
/// time into slot `k mod N`, and a call is admitted only if the slot it would overwrite
/// (admission `k − N`, the oldest of the last `N`) has left the window. Nothing needs to
/// run in the background, so it needs no runtime and holds no thread.
///
/// # Guarantee
///
/// * For every `t`, at most `N` admissions are stamped in `(t − W, t]`. Admissions that
///   share a slot are at least `W` apart, and `N` slots can put at most `N` stamps in an
///   interval of length `W`. This holds whatever the thread interleaving and whatever
///   order the stamps land in.
/// * Unpaced ([`Limit::unpaced`]), it is exact (admits iff fewer than `N` admissions lie
///   in `(now − W, now]`) when the calls' clock readings arrive in order. When they do
///   not (a thread descheduled between reading the clock and admitting, or a clock
///   stepped backwards), it can only refuse more, never admit more.
/// * Paced (the default, see [`Limit`]'s "Pacing"), it also refuses a call in sub-window
///   `i` of its aligned window `[k·W, (k+1)·W)` once `⌈N·(i+1)/B⌉` admissions are stamped
///   in that window (it reads the stamp of admission `next − ⌈N·(i+1)/B⌉`): the
///   schedule holds exactly when readings arrive in order; a reading that arrives late
///   (older than an admission already recorded) can let a sub-window pass its allowance
///   by one per such straggler. The sliding cap above is unaffected. This check divides
///   twice (the window and the sub-window holding `now`), where the unpaced log divides
///   once (its slot).
///
/// Memory: `16·N` bytes (a sequence number and a timestamp per permit) plus a cache line.
/// At [`Limit::MAX_PERMITS`] the log takes 64 MiB.
///
/// # Memory ordering
///
/// `next` (the number of admissions so far) is claimed with a `Relaxed` compare-exchange:
/// it only orders the admissions among themselves. The winner of admission `k` writes the
/// slot's timestamp, then publishes it with a `Release` store of the slot's sequence
/// number `k + 1`; a caller reads the sequence with `Acquire` before it reads the
/// timestamp, so a timestamp is used only once it is whole and belongs to admission
/// `k − N`. While it is not yet published, the call is refused (the stamp being written
/// is "now", inside the window). The stamp itself is stored with `Release` and loaded
/// with `Acquire`: a caller that reads the stamp of an admission which claimed `k` after
/// the caller checked the sequence then sees that claim in `next`, and looks again
/// instead of refusing on someone else's stamp.
pub struct SlidingLog<C = MonotonicClock> {
    // Invariant: admission k (0-based) owns slot k % permits; the slot's seq is k + 1 once
    // its timestamp is written, and admission k + permits may only claim `next` after it
    // has read that seq and a timestamp at least one window old.
    next: CachePadded<AtomicU64>,
    slots: Box<[Slot]>,
    permits: u64,
    window: u64,
    pacer: Pacer,
    limit: Limit,
    clock: C,
}

#[derive(Debug)]
struct Slot {
    seq: AtomicU64,
    stamp: AtomicU64,
}

impl SlidingLog {
    /// An exact sliding-window limiter on the default [`MonotonicClock`].
    pub fn new(limit: Limit) -> Self {
        Self::with_clock(limit, MonotonicClock::new())
    }
}

impl<C: Clock> SlidingLog<C> {
    /// An exact sliding-window limiter reading `clock`.
    pub fn with_clock(limit: Limit, clock: C) -> Self {
        let slots = (0..limit.permits())
            .map(|_| Slot {
                seq: AtomicU64::new(0),
                stamp: AtomicU64::new(0),
            })
            .collect();
        Self {
            next: CachePadded::new(AtomicU64::new(0)),
            slots,
            permits: u64::from(limit.permits()),
            window: limit.window_nanos(),
            pacer: Pacer::new(limit),
            limit,
            clock,
        }
    }

    /// The admissions stamped after `now − W` (a snapshot for a reload; one still being
    /// written is not seen).
    pub(crate) fn count_at(&self, now: u64) -> u64 {
        self.slots
            .iter()
            // Acquire: pairs with the writer's Release store of `seq`, as in `acquire_at`.
            .filter(|slot| slot.seq.load(Ordering::Acquire) != 0)
            .filter(|slot| {
                slot.stamp
                    .load(Ordering::Relaxed)
                    .saturating_add(self.window)
                    > now
            })
            .count() as u64
    }

    /// Records `count` admissions made elsewhere at `now`, as many as the last window
    /// has room for, whatever the pacing schedule has released (they were admitted under
    /// a schedule already); returns how many. Where a replacement log takes what the one
    /// it replaces admitted. One slot write per admission carried, as building the log
    /// writes one per permit.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn absorb_at(&self, now: u64, count: u64) -> u64 {
        (0..count)
            .take_while(|_| self.admit_at(now, false).is_some())
            .count() as u64
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    #[inline]
    fn slot(&self, admission: u64) -> &Slot {
        // In bounds: the remainder is below `permits`, the slice's length.
        &self.slots[(admission % self.permits) as usize]
    }

    /// Whether the schedule has released admission `k` at `now`: whether fewer than the
    /// allowance `a` of `now`'s sub-window are stamped in its aligned window, that is
    /// whether admission `k − a` (if any) is stamped before the window's start.
    #[inline]
    fn paced_at(&self, now: u64, k: u64) -> Paced {
        if !self.pacer.is_paced() {
            return Paced::Released;
        }
        let start = window_index(now, self.window).saturating_mul(self.window);
        let allowance = self.pacer.allowance_at(now - start);
        let Some(earlier) = k.checked_sub(allowance) else {
            return Paced::Released; // fewer than `allowance` admissions ever
        };
        let slot = self.slot(earlier);
        // Acquire (both): as for the oldest slot in `acquire_at`.
        let seq = slot.seq.load(Ordering::Acquire);
        if seq == earlier + 1 && slot.stamp.load(Ordering::Acquire) < start {
            return Paced::Released;
        }
        // Being written (it is "now", in the window), stamped in the window, or
        // overwritten by a newer admission: hold, unless our `k` was stale.
        // Relaxed: see "Memory ordering" on the type.
        let latest = self.next.load(Ordering::Relaxed);
        if latest != k {
            Paced::Stale(latest)
        } else {
            Paced::Held
        }
    }

    /// The decision for a call made at `now`: `Some(now)` or `None`.
    #[inline]
    pub(crate) fn acquire_at(&self, now: u64) -> Option<u64> {
        self.admit_at(now, true)
    }

    /// An admission at `now` if the last window has room and, when `paced`, the
    /// schedule has released it.
    #[inline(always)]
    fn admit_at(&self, now: u64, paced: bool) -> Option<u64> {
        // Relaxed on `next`: see "Memory ordering" on the type.
        let mut k = self.next.load(Ordering::Relaxed);
        loop {
            if k >= self.permits {
                let slot = self.slot(k);
                // Acquire: pairs with the Release store of admission k - N's writer, so
                // the stamp read below is the one it wrote.
                if slot.seq.load(Ordering::Acquire) != k - self.permits + 1 {
                    let latest = self.next.load(Ordering::Relaxed);
                    if latest != k {
                        k = latest; // our k was stale: look again
                        continue;
                    }
                    return None; // admission k - N is still being written: it is "now"
                }
                // Acquire: pairs with the Release store of the stamp, so that if this is
                // the stamp of a newer admission (one that claimed `k` since we read the
                // sequence), its claim of `next` is visible to the load below.
                let oldest = slot.stamp.load(Ordering::Acquire);
                // Inside (now - W, now], or in our future (a stale or backward `now`).
                if now < oldest.saturating_add(self.window) {
                    let latest = self.next.load(Ordering::Relaxed);
                    if latest != k {
                        // Someone claimed `k` meanwhile: the stamp may be theirs, not
                        // admission k - N's. Look again rather than refuse on it.
                        k = latest;
                        continue;
                    }
                    return None;
                }
            }
            match if paced {
                self.paced_at(now, k)
            } else {
                Paced::Released
            } {
                Paced::Released => {}
                Paced::Held => return None,
                Paced::Stale(latest) => {
                    k = latest;
                    continue;
                }
            }
            // Relaxed: claiming admission k orders only the claims among themselves; the
            // slot's contents travel by `seq` and `stamp` (see "Memory ordering").
            match self
                .next
                .compare_exchange_weak(k, k + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    let slot = self.slot(k);
                    // Release: pairs with the Acquire load of the stamp above. (The
                    // stamp reaches admission k + N through the Release store of `seq`.)
                    slot.stamp.store(now, Ordering::Release);
                    slot.seq.store(k + 1, Ordering::Release);
                    return Some(now);
                }
                Err(actual) => k = actual,
            }
        }
    }
}

/// The schedule's answer for one admission of the log.
enum Paced {
    Released,
    Held,
    /// `next` moved on: look again from this admission.
    Stale(u64),
}

super::clocked_rate_limiter!(SlidingLog);

impl<C: fmt::Debug> fmt::Debug for SlidingLog<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Relaxed: a snapshot for display, nothing is read through it.
        f.debug_struct("SlidingLog")
            .field("limit", &self.limit)
            .field("admissions", &self.next.load(Ordering::Relaxed))
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::VecDeque;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::RateLimiter;

    /// Unpaced: these tests are about the sliding log, not the schedule.
    fn limiter(permits: u32, window_ms: u64) -> (SlidingLog<ManualClock>, ManualClock) {
        let clock = ManualClock::new();
        let limit = Limit::per_window(permits, Duration::from_millis(window_ms)).unwrap();
        (
            SlidingLog::with_clock(limit.unpaced(), clock.clone()),
            clock,
        )
    }

    #[test]
    fn paced_releases_a_tenth_per_tenth_of_the_aligned_window() {
        let clock = ManualClock::new();
        let limit = Limit::per_window(100, Duration::from_secs(1)).unwrap();
        let l = SlidingLog::with_clock(limit, clock.clone());
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 10);
        clock.set(550_000_000);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 50);
        clock.set(999_999_999);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 40);
        // The next aligned window: the 10 stamped at 0 have left (t − 1 s, t], and its
        // first tenth releases 10.
        clock.set(1_000_000_000);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 10);
        // Later in the first tenth: released, but the sliding cap holds the 90 stamped
        // at 0.55 s and 1 s − 1 ns, plus these 10.
        clock.set(1_099_999_999);
        assert!(!l.try_acquire());
        // At 1.55 s the 50 of 0.55 s leave, and the schedule has released 60.
        clock.set(1_550_000_000);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 50);
    }

    #[test]
    fn slides_instead_of_resetting() {
        let (l, clock) = limiter(2, 1000);
        clock.set(900_000_000);
        assert!(l.try_acquire() && l.try_acquire());
        // A fixed window would reset at 1 s; the sliding one waits until 1.9 s.
        clock.set(1_100_000_000);
        assert!(!l.try_acquire());
        clock.set(1_899_999_999);
        assert!(!l.try_acquire());
        // Both admissions at 0.9 s leave (t − 1 s, t] at t = 1.9 s.
        clock.set(1_900_000_000);
        assert!(l.try_acquire() && l.try_acquire());
        assert!(!l.try_acquire());
    }

    #[test]
    fn clock_stepping_back_is_refused() {
        let (l, clock) = limiter(1, 1000);
        clock.set(5_000_000_000);
        assert!(l.try_acquire());
        clock.set(0);
        assert!(!l.try_acquire());
        clock.set(6_000_000_000);
        assert!(l.try_acquire());
    }

    proptest! {
        /// With readings in order it is exact: the same verdicts as a log of every
        /// admission, and so never more than N in any interval of length W.
        #[test]
        fn matches_an_exact_log(
            permits in 1u32..25,
            paced in any::<bool>(),
            deltas in proptest::collection::vec(0u64..400, 1..300),
        ) {
            let window = 1_000_000_000u64;
            let clock = ManualClock::new();
            let limit = Limit::per_window(permits, Duration::from_millis(1000)).unwrap();
            let limit = if paced { limit } else { limit.unpaced() };
            let l = SlidingLog::with_clock(limit, clock.clone());
            let b = u64::from(if paced { permits.min(10) } else { 1 });
            let n = u64::from(permits);
            let mut log: VecDeque<u64> = VecDeque::new();
            let mut now = 0u64;
            for d in deltas {
                now += d * 1_000_000;
                clock.set(now);
                while log.front().is_some_and(|&t| t + window <= now) {
                    log.pop_front();
                }
                let start = now / window * window;
                let in_aligned = log.iter().filter(|&&t| t >= start).count() as u64;
                let sub = ((now - start) / (window / b)).min(b - 1);
                let expect = log.len() < permits as usize && in_aligned * b < n * (sub + 1);
                if expect { log.push_back(now); }
                prop_assert_eq!(l.try_acquire(), expect);
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
    use crate::limiter::loom_support::{check_per_window, model, stamps_in_windows};

    const W: u64 = 1_000_000_000;

    fn limiter(permits: u32, paced: bool) -> Arc<SlidingLog<ManualClock>> {
        let limit = Limit::per_window(permits, std::time::Duration::from_nanos(W)).unwrap();
        let limit = if paced { limit } else { limit.unpaced() };
        Arc::new(SlidingLog::with_clock(limit, ManualClock::new()))
    }

    /// Asserts that no interval (t - W, t] holds more than `permits` stamps.
    fn check_sliding(stamps: &[u64], permits: usize) {
        for &t in stamps {
            let inside = stamps.iter().filter(|&&s| s + W > t && s <= t).count();
            assert!(
                inside <= permits,
                "{inside} stamps in ({}, {t}]: {stamps:?}",
                t.saturating_sub(W)
            );
        }
    }

    fn run(workers: u64, permits: u32, paced: bool, times: &'static [u64]) {
        model(workers as usize, move || {
            let l = limiter(permits, paced);
            let handles: Vec<_> = (0..workers)
                .map(|i| {
                    let l = l.clone();
                    thread::spawn(move || {
                        times
                            .iter()
                            .filter_map(|&t| l.acquire_at(t + i))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let stamps: Vec<u64> = handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect();
            check_sliding(&stamps, permits as usize);
            assert!(!stamps.is_empty());
            if paced {
                // N = 2 in two sub-windows: at most one stamp in a window's first half
                // (the readings of these models arrive in order per worker, and the
                // workers' readings are at most a few nanoseconds apart).
                let first_halves: Vec<u64> =
                    stamps.iter().filter(|&&s| s % W < W / 2).copied().collect();
                check_per_window(&stamps_in_windows(&first_halves, W), 1);
            }
        });
    }

    #[test]
    fn two_workers_exhaustive() {
        run(2, 1, false, &[0, W + 1]);
    }

    #[test]
    fn three_workers_bounded_preemption() {
        run(3, 2, false, &[0, W + W / 2]);
    }

    #[test]
    fn paced_two_workers_exhaustive() {
        run(2, 2, true, &[W / 4, W / 4, 3 * W / 4]);
    }
}
