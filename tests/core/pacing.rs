//! Paced admission, for every algorithm: under steady overload the kept traces spread
//! evenly across the window, a late burst gets what the window has left, an early burst
//! gets its share only (unless unpaced), and many threads on the real clock never pass
//! the cap nor the schedule.

use std::time::Duration;

use crate::support::{assert_at_most_per_window, hammer, per_window};
use otel_rate_sampler::{Algorithm, AnyLimiter, Limit, ManualClock, PreciseClock, RateLimiter};

const W: u64 = 1_000_000_000;
const N: u32 = 100;

fn limiter(algorithm: Algorithm, limit: Limit) -> (AnyLimiter<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (
        AnyLimiter::with_clock(algorithm, limit, clock.clone()),
        clock,
    )
}

fn hundred_per_second() -> Limit {
    Limit::per_window(N, Duration::from_nanos(W)).unwrap()
}

fn offer(l: &impl RateLimiter, calls: usize) -> usize {
    (0..calls).filter(|_| l.try_acquire()).count()
}

/// 5 calls every millisecond (50 × overload) for 10 windows: every window keeps at
/// least 0.98·N, and each tenth of it holds 10 % ± 3 % of what it kept.
#[test]
fn uniform_overload_spreads_the_kept_traces_evenly_across_the_window() {
    for algorithm in Algorithm::ALL {
        let (l, clock) = limiter(algorithm, hundred_per_second());
        let mut stamps = Vec::new();
        for ms in 0..10_000u64 {
            clock.set(ms * 1_000_000);
            stamps.extend((0..5).filter_map(|_| l.acquire_stamped()));
        }
        let kept = per_window(&stamps, W);
        assert_eq!(kept.len(), 10, "{algorithm}: {kept:?}");
        for (&k, &in_window) in &kept {
            assert!(
                (98..=100).contains(&in_window),
                "{algorithm}: window {k} kept {in_window}"
            );
            let mut tenths = [0usize; 10];
            for s in stamps.iter().filter(|&&s| s / W == k) {
                tenths[((s % W) / (W / 10)) as usize] += 1;
            }
            for (i, &t) in tenths.iter().enumerate() {
                let share = t as f64 / in_window as f64;
                assert!(
                    (0.07..=0.13).contains(&share),
                    "{algorithm}: window {k}, tenth {i} holds {t} of {in_window}: {tenths:?}"
                );
            }
        }
    }
}

/// Unpaced, the same traffic keeps the whole window's worth in its first instants: the
/// bias pacing removes.
#[test]
fn unpaced_overload_keeps_everything_in_the_first_tenth() {
    let (l, clock) = limiter(Algorithm::FixedWindow, hundred_per_second().unpaced());
    let mut stamps = Vec::new();
    for ms in 0..3_000u64 {
        clock.set(ms * 1_000_000);
        stamps.extend((0..5).filter_map(|_| l.acquire_stamped()));
    }
    assert_eq!(stamps.len(), 300);
    assert!(stamps.iter().all(|s| s % W < W / 10), "{stamps:?}");
}

/// A burst confined to the last tenth of an idle window gets all N; one after early
/// traffic gets all the window has left.
#[test]
fn a_burst_in_the_last_tenth_gets_all_the_window_had_left() {
    for algorithm in Algorithm::ALL {
        let (l, clock) = limiter(algorithm, hundred_per_second());
        clock.set(W - W / 20);
        assert_eq!(offer(&l, 1000), 100, "{algorithm}: idle window");
        // Three idle windows later (the sliding limiters forget the burst), 30 early
        // calls spread over the first three tenths, then a burst in the last tenth.
        for tenth in 0..3 {
            clock.set(4 * W + tenth * W / 10);
            assert_eq!(offer(&l, 10), 10, "{algorithm}: tenth {tenth}");
        }
        clock.set(5 * W - 1);
        assert_eq!(offer(&l, 1000), 70, "{algorithm}: what was left");
    }
}

/// The trade-off: paced, a burst in the first tenth of a window gets ⌈N/B⌉; unpaced, N.
#[test]
fn a_burst_in_the_first_tenth_gets_a_tenth_unless_unpaced() {
    for algorithm in Algorithm::ALL {
        let (paced, clock) = limiter(algorithm, hundred_per_second());
        clock.set(3 * W + W / 20);
        assert_eq!(offer(&paced, 1000), 10, "{algorithm} paced");
        let (unpaced, clock) = limiter(algorithm, hundred_per_second().unpaced());
        clock.set(3 * W + W / 20);
        assert_eq!(offer(&unpaced, 1000), 100, "{algorithm} unpaced");
        // Fewer permits than sub-windows: one step per permit.
        let three = Limit::per_window(3, Duration::from_nanos(W)).unwrap();
        let (l, clock) = limiter(algorithm, three);
        clock.set(3 * W);
        assert_eq!(offer(&l, 10), 1, "{algorithm}: N = 3, first third");
        clock.set(3 * W + 2 * W / 3);
        assert_eq!(offer(&l, 10), 2, "{algorithm}: N = 3, last third");
    }
}

/// At most `⌈N·(i+1)/B⌉` stamps before the end of sub-window `i` of each window.
fn assert_schedule(stamps: &[u64], limit: Limit, what: &str) {
    let w = limit.window_nanos();
    let (n, b) = (
        u64::from(limit.permits()),
        u64::from(limit.sub_windows().min(limit.permits())),
    );
    for (k, _) in per_window(stamps, w) {
        for i in 0..b {
            let end = k * w + (i + 1) * (w / b);
            let before = stamps.iter().filter(|&&s| s / w == k && s < end).count() as u64;
            let allowance = (n * (i + 1)).div_ceil(b);
            assert!(
                before <= allowance,
                "{what}: window {k} has {before} stamps before the end of sub-window {i}, \
                 allowance {allowance}"
            );
        }
    }
}

/// Four threads on the real clock: every algorithm keeps at most N per aligned window,
/// and the window-count limiters keep the schedule whatever the interleaving (the
/// sliding log keeps it only for readings that arrive in order, as documented).
#[test]
fn many_threads_on_the_real_clock_never_pass_the_cap_nor_the_schedule() {
    let limit = Limit::per_window(200, Duration::from_millis(20)).unwrap();
    for algorithm in Algorithm::ALL {
        let l = AnyLimiter::with_clock(algorithm, limit, PreciseClock::new());
        let w = limit.window_nanos();
        // However fast or loaded the machine, rounds of calls until the admissions span
        // at least 3 windows (a fixed number of calls fit in two on a quick run).
        let mut stamps = Vec::new();
        for _ in 0..1000 {
            stamps.extend(hammer(&l, l.clock(), 4, 20_000, w, false).stamps);
            if per_window(&stamps, w).len() >= 3 {
                break;
            }
        }
        let what = format!("{l:?}");
        let admitted = assert_at_most_per_window(&stamps, w, 200, &what);
        assert!(admitted.len() >= 3, "{what}: {admitted:?}");
        if algorithm != Algorithm::SlidingLog {
            assert_schedule(&stamps, limit, &what);
        }
    }
}
