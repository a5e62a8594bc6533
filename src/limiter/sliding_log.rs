use std::fmt;

use crossbeam_utils::CachePadded;

use super::pacing::{Pacer, Step};
use super::packed::window_index;
use super::Admission;
use crate::clock::{Clock, MonotonicClock};
use crate::limit::Limit;
use crate::sync::{AtomicU64, Ordering};

// The admissions the rule layer's cap makes in two steps, and gives back.
mod admission;
// What a reload carries out of it and into it.
mod carry;

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
/// * Paced (the default, see [`Limit`]'s "Pacing"), a call in step `i` of its aligned
///   window `[k·W, (k+1)·W)` (the schedule's `B` steps, `a(i) = ⌈N·(i+1)/B⌉`) is also
///   refused once `a(i)` admissions are stamped in that window, and beyond the step's own
///   share `a(i) − a(i−1)` it is admitted only while fewer than `N` are stamped since the
///   *previous* window's start `(k−1)·W`, or none in `(now − W, now]`. So a window after a
///   quiet one (or after a gap of `W`) catches up on what its early steps left, as the
///   fixed window does, while a window after a busy one gives each step its share: the
///   permits a catch-up spends at once come back exactly `W` later and, let through
///   again, would replay the burst in every window. See "Spread" below.
///
///   The schedule holds exactly when readings arrive in order; a reading that arrives
///   late (older than an admission already recorded) can let a step pass its allowance
///   or its share by one per such straggler. The sliding cap above is unaffected. This
///   check divides twice (the window and the step holding `now`) and reads one slot
///   more than the unpaced log (which divides once, for its slot): two more after a
///   window that kept `N`, three past the step's share there.
///
/// # Spread
///
/// Under steady overload (every step offered more than its share), whatever the phase
/// of the first call, every step of every aligned window from the second whole one on
/// keeps exactly its share: at the defaults (`B = 10`) every tenth holds 10 % of the
/// window's `N`, ± one trace when `B` does not divide `N`. The price is traffic that
/// comes in part of every window only: it keeps `N` in a window after a quiet one, but
/// after a window that kept `N` only the shares of the steps it comes in. Offered
/// beyond its rate in the second half of every window only, it keeps `N` in its first
/// window, then `N/2` and `0.9·N` in turn (70 % of `N` on average, where the fixed
/// window keeps `N`); confined to the last tenth, `N` then `N/10` and `0.9·N` in turn.
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

/// `next` of a closed log: no admission claims it (the slot it would read never holds
/// its sequence, so the call is refused where a full log refuses), and no count reaches it.
const CLOSED: u64 = u64::MAX;

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
            .take_while(|_| self.admit_at(now, false, true).is_some())
            .count() as u64
    }

    /// Closes the log for good and returns the admissions it holds after `now − W` at
    /// that instant: one swap of `next` to [`CLOSED`], so every admission has claimed
    /// its number before (and is counted) or is refused. An admission whose stamp is
    /// still being written is counted (it is "now"), so the count is exact, or above by
    /// one per slot whose newest sequence this thread does not see yet.
    /// Where a reload retires a replaced limiter.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
    pub(crate) fn close_at(&self, now: u64) -> u64 {
        // Relaxed: the swap orders the claims among themselves, as the claims' own
        // compare-exchanges do; the slots' contents travel by `seq` (below).
        let claimed = self.next.swap(CLOSED, Ordering::Relaxed);
        (claimed.saturating_sub(self.permits)..claimed)
            .filter(|&k| {
                let slot = self.slot(k);
                // Acquire: pairs with the writer's Release store of `seq`, so the stamp
                // read after it is admission k's.
                slot.seq.load(Ordering::Acquire) != k + 1
                    || slot
                        .stamp
                        .load(Ordering::Relaxed)
                        .saturating_add(self.window)
                        > now
            })
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

    /// Whether admission `admission` is published with a stamp before `bound` (one still
    /// being written is "now", not before; one whose slot a newer admission took is not
    /// known, so not before either: the caller then looks at `next` again).
    #[inline]
    fn stamped_before(&self, admission: u64, bound: u64) -> bool {
        let slot = self.slot(admission);
        // Acquire (both): as for the oldest slot in `admit_at`.
        slot.seq.load(Ordering::Acquire) == admission + 1
            && slot.stamp.load(Ordering::Acquire) < bound
    }

    /// Whether the schedule has released admission `k` at `now`, in step `i` of the
    /// aligned window that starts at `start` (see "Guarantee" on the type), given the
    /// stamp of admission `k − N` (`None`: fewer than `N` admissions ever). Slot reads:
    /// admission `k − a(i)` (`a(i)` already in this window?), then only past the step's
    /// share admission `k − share`, and only if that fails too admission `k − 1`.
    ///
    /// The refusal by the allowance is inlined on its own, as it was before the share
    /// was looked at; the rest (a division more) is a call.
    #[inline(always)]
    fn paced_at(&self, now: u64, k: u64, oldest: Option<u64>) -> Paced {
        if !self.pacer.is_paced() {
            return Paced::Released;
        }
        let start = window_index(now, self.window).saturating_mul(self.window);
        let step = self.pacer.step_at(now - start);
        let counted_all = k
            .checked_sub(step.allowance)
            .is_some_and(|earlier| !self.stamped_before(earlier, start));
        if counted_all {
            return self.held(k);
        }
        self.within_share(now, k, oldest, start, step)
    }

    /// The rest of [`paced_at`](Self::paced_at), once fewer than `a(i)` are stamped in
    /// the window: released while fewer than `N` are stamped since the previous
    /// window's start (none of them before the first window), within the step's share,
    /// or after `W` with nothing stamped.
    #[inline(never)]
    fn within_share(&self, now: u64, k: u64, oldest: Option<u64>, start: u64, step: Step) -> Paced {
        let quiet = oldest.is_none_or(|stamp| stamp < start.saturating_sub(self.window));
        let released = quiet
            || k.checked_sub(step.share(&self.pacer))
                .is_none_or(|e| self.stamped_before(e, start + step.start(&self.pacer)))
            || self.stamped_before(k - 1, (now + 1).saturating_sub(self.window));
        if released {
            Paced::Released
        } else {
            self.held(k)
        }
    }

    /// Held, unless our `k` was stale.
    #[inline]
    fn held(&self, k: u64) -> Paced {
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
        self.admit_at(now, true, true).map(|a| a.stamp)
    }

    /// The stamp of admission `k − N` (`k ≥ N`) if it has left the window of `now`;
    /// `Err(None)` if it has not (or is still being written: it is "now"), and
    /// `Err(Some(next))` if `next` moved on from `k` meanwhile.
    #[inline(always)]
    fn oldest_left(&self, now: u64, k: u64) -> Result<u64, Option<u64>> {
        let slot = self.slot(k);
        // Acquire: pairs with the Release store of admission k - N's writer, so the stamp
        // read below is the one it wrote.
        let published = slot.seq.load(Ordering::Acquire) == k - self.permits + 1;
        // Acquire: pairs with the Release store of the stamp, so that if this is the
        // stamp of a newer admission (one that claimed `k` since we read the sequence),
        // its claim of `next` is visible to the load below.
        let oldest = if published {
            slot.stamp.load(Ordering::Acquire)
        } else {
            u64::MAX
        };
        // Inside (now - W, now], in our future (a stale or backward `now`), or still
        // being written (it is "now").
        if published && now >= oldest.saturating_add(self.window) {
            return Ok(oldest);
        }
        // Relaxed: see "Memory ordering" on the type.
        let latest = self.next.load(Ordering::Relaxed);
        // Someone claimed `k` meanwhile: the stamp may be theirs, not admission k - N's.
        // Look again rather than refuse on it.
        Err((latest != k).then_some(latest))
    }

    /// An admission at `now` if the last window has room and, when `paced`, the
    /// schedule has released it; made (claimed and stamped) when `claim`, else only
    /// found.
    #[inline(always)]
    fn admit_at(&self, now: u64, paced: bool, claim: bool) -> Option<Admission> {
        // Relaxed on `next`: see "Memory ordering" on the type.
        let mut k = self.next.load(Ordering::Relaxed);
        loop {
            let oldest = if k >= self.permits {
                match self.oldest_left(now, k) {
                    Ok(oldest) => Some(oldest),
                    Err(Some(latest)) => {
                        k = latest; // our k was stale: look again
                        continue;
                    }
                    Err(None) => return None,
                }
            } else {
                None
            };
            match if paced {
                self.paced_at(now, k, oldest)
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
            if !claim {
                return Some(Admission {
                    stamp: now,
                    number: k,
                });
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
                    return Some(Admission {
                        stamp: now,
                        number: k,
                    });
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
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::prop_support::{limit, windows, Walk};
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

    /// Paced, 100 per second.
    fn hundred_paced() -> (SlidingLog<ManualClock>, ManualClock) {
        let clock = ManualClock::new();
        let limit = Limit::per_window(100, Duration::from_secs(1)).unwrap();
        (SlidingLog::with_clock(limit, clock.clone()), clock)
    }

    #[test]
    fn paced_releases_a_tenth_per_tenth_of_the_aligned_window() {
        let (l, clock) = hundred_paced();
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
        // At 1.55 s the 50 of 0.55 s leave, and the schedule has released 60, but the
        // window before kept N: the step keeps its own share, no catch-up.
        clock.set(1_550_000_000);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 10);
        // After a quiet window, the catch-up is back: all N in the last tenth.
        clock.set(3_950_000_000);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 100);
    }

    #[test]
    fn refusals_past_the_share_after_a_busy_window_write_nothing() {
        let (l, clock) = hundred_paced();
        clock.set(900_000_000);
        assert_eq!((0..1000).filter(|_| l.try_acquire()).count(), 100);
        // Window 1, last tenth: the 100 of 0.9 s have left, the schedule has released
        // all, the step keeps its share, then refuses on the catch-up path.
        clock.set(1_950_000_000);
        assert_eq!((0..10).filter(|_| l.try_acquire()).count(), 10);
        let words = |l: &SlidingLog<ManualClock>| {
            let slots = l.slots.iter().flat_map(|s| [&s.seq, &s.stamp]);
            let mut words: Vec<u64> = slots.map(|a| a.load(Ordering::Relaxed)).collect();
            words.push(l.next.load(Ordering::Relaxed));
            words
        };
        let before = words(&l);
        assert!((0..1000).all(|_| !l.try_acquire()));
        assert_eq!(words(&l), before);
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
        /// admission, and so never more than N in any interval of length W, for any
        /// window, any B and a clock starting part-way into a window.
        #[test]
        fn matches_an_exact_log(
            permits in 1u32..25,
            paced in any::<bool>(),
            sub_windows in 1u32..=Limit::MAX_SUB_WINDOWS,
            window in windows(),
            start in 0u64..10_000_000_000,
            deltas in proptest::collection::vec(0u64..400, 1..300),
        ) {
            let mut walk = Walk::new(start, window);
            let limit = limit(permits, window, sub_windows, paced);
            let l = SlidingLog::with_clock(limit, walk.clock.clone());
            let b = u64::from(limit.pacing_steps());
            let n = u64::from(permits);
            // Every admission (the reference looks a window further back than the log).
            let mut log: Vec<u64> = Vec::new();
            for d in deltas {
                let now = walk.step(d, false);
                let count = |from: u64| log.iter().filter(|&&t| t >= from).count() as u64;
                let sliding = log.iter().filter(|&&t| t + window > now).count() as u64;
                let start = now / window * window;
                let step_len = window / b;
                let sub = ((now - start) / step_len).min(b - 1);
                let (allowance, before) = ((n * (sub + 1)).div_ceil(b), (n * sub).div_ceil(b));
                let scheduled = count(start) < allowance
                    && (count(start + sub * step_len) < allowance - before
                        || count(start.saturating_sub(window)) < n
                        || sliding == 0);
                let expect = sliding < n && (b == 1 || scheduled);
                if expect { log.push(now); }
                prop_assert_eq!(l.try_acquire(), expect);
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::loom_support::{
        check_per_window, check_sliding, kept_beside_a_give_back, limit, model, stamps_in_windows,
        stamps_of, W,
    };

    fn limiter(permits: u32, paced: bool) -> Arc<SlidingLog<ManualClock>> {
        Arc::new(SlidingLog::with_clock(
            limit(permits, paced),
            ManualClock::new(),
        ))
    }

    fn run(workers: u64, permits: u32, paced: bool, times: &'static [u64]) {
        model(workers as usize, move || {
            let l = limiter(permits, paced);
            let offset = |i: u64| times.iter().map(|&t| t + i).collect();
            let stamps = stamps_of(&l, workers, offset, SlidingLog::acquire_at);
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

    /// N = 2: worker 0 is admitted and gives the permit back (undone if no claim came
    /// since, else its stamp moved back) while worker 1 calls three times at the same
    /// instant: at most two kept in any interval of W, and no slot is left stuck: a
    /// window later both permits are there.
    #[test]
    fn a_permit_given_back_racing_claims_keeps_the_cap_and_leaves_no_slot_stuck() {
        for paced in [false, true] {
            model(2, move || {
                let l = limiter(2, paced);
                let t = W + W / 2;
                let kept = kept_beside_a_give_back(
                    &l,
                    t,
                    vec![t, t, t],
                    SlidingLog::admission_at,
                    SlidingLog::give_back,
                    |a| a.stamp,
                );
                check_sliding(&kept, 2);
                let later = 3 * W + W / 2;
                assert!(l.acquire_at(later).is_some() && l.acquire_at(later).is_some());
            });
        }
    }

    #[test]
    fn three_workers_bounded_preemption() {
        run(3, 2, false, &[0, W + W / 2]);
    }

    #[test]
    fn paced_two_workers_exhaustive() {
        run(2, 2, true, &[W / 4, W / 4, 3 * W / 4]);
    }

    /// Paced, N = 2 in two steps: window 0 kept both (stamped at W/2), then two workers
    /// call in step 1 of window 1 (W/2 later). The log has room for two there and the
    /// schedule has released two, but after a window that kept N a step keeps its
    /// share: exactly one, whatever the interleaving (before, both).
    #[test]
    fn paced_after_a_window_that_kept_n_a_step_takes_its_share() {
        model(2, || {
            let l = limiter(2, true);
            assert!(l.acquire_at(W / 2).is_some() && l.acquire_at(W / 2).is_some());
            let times = |i: u64| vec![W + W / 2 + i];
            let stamps = stamps_of(&l, 2, times, SlidingLog::acquire_at);
            assert_eq!(stamps.len(), 1, "{stamps:?}");
        });
    }
}
