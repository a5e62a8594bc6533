//! Eight threads hammer one limiter on the real clock; the admission stamps must keep
//! each algorithm's documented cap, and a fixed window that was offered at least `N`
//! calls decided against it must have admitted exactly `N`.
//!
//! No assertion here depends on how fast the machine is: the caps hold for any
//! interleaving, and the saturation check only looks at windows the run itself proves
//! were offered `N` calls (each bracketed by two clock readings inside the window).

use std::time::Duration;

use crate::support::{
    assert_at_most_per_window, assert_sliding_at_most, assert_sliding_counter_bound, hammer,
};
use otel_rate_sampler::{
    Clock, FixedWindow, Limit, MonotonicClock, PreciseClock, RateLimiter, SlidingLog,
    SlidingWindowCounter,
};

const THREADS: usize = 8;
/// Per run: 8 × 750 000 = 6·10⁶ calls; 2.4·10⁷ over the four runs of this file.
const CALLS_PER_THREAD: u64 = 750_000;
/// A few hundred permits per 20 ms window: many windows in a run, each offered far
/// more calls than it admits.
const PERMITS: u32 = 300;
const WINDOW: Duration = Duration::from_millis(20);

fn limit() -> Limit {
    Limit::per_window(PERMITS, WINDOW).unwrap().unpaced()
}

/// Runs the fixed window on `clock` and checks the cap and the saturation of every
/// window that was provably offered `N` calls. Returns the number of such windows.
fn fixed_window_keeps_exactly_n<C: Clock>(limiter: FixedWindow<C>, calls_per_thread: u64) -> usize {
    let w = limiter.limit().window_nanos();
    let n = PERMITS as usize;
    let seen = hammer(
        &limiter,
        limiter.clock(),
        THREADS,
        calls_per_thread,
        w,
        true,
    );
    let what = format!("{limiter:?}");
    let admitted = assert_at_most_per_window(&seen.stamps, w, n, &what);
    let mut checked = 0;
    for (&k, &decided) in &seen.decided_inside {
        if decided >= u64::from(PERMITS) {
            checked += 1;
            let got = admitted.get(&k).copied().unwrap_or(0);
            assert_eq!(
                got, n,
                "{what}: window {k} had {decided} calls decided against it (both clock \
                 readings inside) but admitted {got}, not N = {n}"
            );
        }
    }
    assert!(
        checked >= 3,
        "{what}: only {checked} windows were offered N calls decided inside them \
         ({} calls, {} admissions): the check proved nothing",
        seen.calls,
        seen.stamps.len()
    );
    checked
}

#[test]
fn fixed_window_on_precise_clock_admits_at_most_n_and_exactly_n_when_saturated() {
    let limiter = FixedWindow::with_clock(limit(), PreciseClock::new());
    fixed_window_keeps_exactly_n(limiter, CALLS_PER_THREAD);
}

#[test]
fn fixed_window_on_default_coarse_clock_admits_at_most_n_and_exactly_n_when_saturated() {
    // The default clock ticks in steps of 1-10 ms; the guarantee holds in its time, so
    // the brackets read the same clock.
    let limiter = FixedWindow::new(limit());
    let _: &MonotonicClock = limiter.clock();
    fixed_window_keeps_exactly_n(limiter, CALLS_PER_THREAD);
}

#[test]
fn sliding_counter_on_precise_clock_keeps_both_bounds() {
    let limiter = SlidingWindowCounter::with_clock(limit(), PreciseClock::new());
    let w = limiter.limit().window_nanos();
    let n = PERMITS as usize;
    let seen = hammer(
        &limiter,
        limiter.clock(),
        THREADS,
        CALLS_PER_THREAD,
        w,
        false,
    );
    let what = format!("{limiter:?}");
    let admitted = assert_at_most_per_window(&seen.stamps, w, n, &what);
    // No interval of length W over 2N, and the finer documented N + ⌈P·e/W⌉.
    assert_sliding_at_most(&seen.stamps, w, 2 * n, &what);
    assert_sliding_counter_bound(&seen.stamps, w, n, &what);
    assert!(
        admitted.len() >= 3,
        "{what}: admissions in only {} windows",
        admitted.len()
    );
}

#[test]
fn sliding_log_on_precise_clock_keeps_n_in_every_sliding_window() {
    let limiter = SlidingLog::with_clock(limit(), PreciseClock::new());
    let w = limiter.limit().window_nanos();
    let n = PERMITS as usize;
    let seen = hammer(
        &limiter,
        limiter.clock(),
        THREADS,
        CALLS_PER_THREAD,
        w,
        false,
    );
    let what = format!("{limiter:?}");
    // Sorted, stamps[i + N] − stamps[i] ≥ W: no interval (t − W, t] holds N + 1.
    assert_sliding_at_most(&seen.stamps, w, n, &what);
    assert!(
        seen.stamps.len() > 2 * n,
        "{what}: only {} admissions in {} calls",
        seen.stamps.len(),
        seen.calls
    );
}
