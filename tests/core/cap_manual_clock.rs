//! Eight threads share one limiter on a [`ManualClock`], in phases: the main thread
//! moves the clock (to the last nanosecond of a window, the first of the next, or back
//! into the past), then every thread offers its calls at that one time, and a barrier
//! ends the phase.
//!
//! With a single reading per phase each limiter is deterministic, but where its docs
//! leave it leeway (see [`Model::promised`]), so every phase is checked against a
//! sequential model: how many were admitted and at what stamp. Across the run: at most
//! N per aligned window, exactly N for the fixed window in each window offered N or
//! more, and each algorithm's sliding bound.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use crate::support::{
    assert_at_most_per_window, assert_sliding_at_most, assert_sliding_counter_bound, BucketedModel,
    FixedModel, Model, SlidingCounterModel, SlidingLogModel,
};
use otel_rate_sampler::{
    Algorithm, AnyLimiter, Clock, FixedWindow, Limit, LimitError, ManualClock, RateLimiter,
    SlidingLog, SlidingWindowCounter,
};

const THREADS: usize = 8;
const W: u64 = 1_000_000_000;
/// The most permits the packed window word holds (22 bits of count).
const MAX_PERMITS: u32 = Limit::MAX_PERMITS;

/// What one phase admitted: stamp → admissions with that stamp.
type Tally = BTreeMap<u64, u64>;

/// Runs `phases` (clock time, calls offered in all) on `threads` threads and checks each
/// against `model`. Returns the admissions per stamp over the whole run, and the calls
/// offered into each aligned window (the window the model says they count in).
///
/// A failed check, or a panic in a worker, is reported when all phases have run: a
/// thread that left early would leave the others waiting at a barrier for ever.
fn run_phases<L: RateLimiter, M: Model>(
    limiter: &L,
    clock: &ManualClock,
    model: &mut M,
    threads: usize,
    phases: &[(u64, u64)],
) -> (Tally, BTreeMap<u64, u64>) {
    let window = limiter.limit().window_nanos();
    let start = Barrier::new(threads + 1);
    let end = Barrier::new(threads + 1);
    let (tx, rx) = mpsc::channel::<Option<Tally>>();
    let mut all = Tally::new();
    let mut offered_into = BTreeMap::new();
    let mut failure = None;
    thread::scope(|scope| {
        for i in 0..threads {
            let (start, end, tx) = (&start, &end, tx.clone());
            scope.spawn(move || {
                for &(_, offered) in phases {
                    let share =
                        offered / threads as u64 + u64::from((i as u64) < offered % threads as u64);
                    start.wait();
                    let tally = catch_unwind(AssertUnwindSafe(|| offer(limiter, share))).ok();
                    tx.send(tally).unwrap();
                    end.wait();
                }
            });
        }
        for (p, &(now, offered)) in phases.iter().enumerate() {
            let before = clock.now_nanos();
            if now >= before {
                clock.advance(Duration::from_nanos(now - before));
            } else {
                clock.set(now); // back in time
            }
            let (expected, expected_stamp) = model.admits(now, offered);
            let promised = model.promised(now, expected);
            start.wait();
            end.wait();
            let tallies: Vec<Option<Tally>> = rx.iter().take(threads).collect();
            if failure.is_some() {
                continue;
            }
            let checked = catch_unwind(AssertUnwindSafe(|| {
                let ctx = format!(
                    "{limiter:?}: phase {p}, clock at {now} ns (window {}, offset {}), {offered} offered",
                    now / window,
                    now % window
                );
                assert_eq!(clock.now_nanos(), now);
                let mut phase = Tally::new();
                for tally in tallies {
                    let tally = tally.unwrap_or_else(|| panic!("{ctx}: acquire_stamped panicked"));
                    for (s, n) in tally {
                        *phase.entry(s).or_insert(0) += n;
                    }
                }
                let admitted: u64 = phase.values().sum();
                if admitted > 0 {
                    assert_eq!(
                        phase.keys().copied().collect::<Vec<_>>(),
                        vec![expected_stamp],
                        "{ctx}: admissions stamped elsewhere than the model says"
                    );
                }
                if promised < expected {
                    // Documented leeway (the sliding counter's roll, the sliding log
                    // after the clock stepped back): never more, at least `promised`.
                    assert!(
                        (promised..=expected).contains(&admitted),
                        "{ctx}: admitted {admitted}, expected {promised}..={expected}"
                    );
                } else {
                    assert_eq!(
                        admitted, expected,
                        "{ctx}: admitted {admitted}, model {expected}"
                    );
                }
                (phase, admitted)
            }));
            match checked {
                Ok((phase, admitted)) => {
                    model.record(now, admitted);
                    *offered_into.entry(expected_stamp / window).or_insert(0) += offered;
                    for (s, n) in phase {
                        *all.entry(s).or_insert(0) += n;
                    }
                }
                Err(panic) => failure = Some(panic),
            }
        }
    });
    if let Some(panic) = failure {
        resume_unwind(panic);
    }
    (all, offered_into)
}

/// Offers `calls` calls to `limiter` at one clock reading; returns admissions per stamp.
fn offer<L: RateLimiter>(limiter: &L, calls: u64) -> Tally {
    let mut tally = Tally::new();
    // One reading per phase, so one stamp: count runs, not a map entry per call (the
    // largest phases offer millions).
    let (mut stamp, mut run) = (0, 0);
    for _ in 0..calls {
        if let Some(s) = limiter.acquire_stamped() {
            if run > 0 && s != stamp {
                *tally.entry(stamp).or_insert(0) += run;
                run = 0;
            }
            (stamp, run) = (s, run + 1);
        }
    }
    if run > 0 {
        *tally.entry(stamp).or_insert(0) += run;
    }
    tally
}

/// The stamps, one per admission.
fn expand(tally: &Tally) -> Vec<u64> {
    tally
        .iter()
        .flat_map(|(&s, &n)| std::iter::repeat_n(s, n as usize))
        .collect()
}

/// A schedule in windows of [`W`] touching every edge case: the first and the last
/// nanosecond of windows, fewer than N offered then topped up in the same window, the
/// clock set back (into the full newest window, and into an older one while the newest
/// still has room), and a jump over several windows.
fn schedule(permits: u32) -> Vec<(u64, u64)> {
    let many = 4 * u64::from(permits) + 8 * THREADS as u64;
    let few = u64::from(permits) / 3;
    vec![
        (0, many),             // first ns of window 0: N
        (W - 1, many),         // last ns of window 0: nothing more
        (W, many),             // first ns of window 1
        (2 * W - 1, many),     // last ns of window 1
        (2 * W, few),          // window 2, fewer than N offered
        (3 * W - 1, many),     // topped up to N at its last ns
        (W + W / 2, many),     // set back into window 1: window 2 is full, nothing
        (3 * W + W / 2, few),  // window 3, fewer than N
        (0, many),             // set back to 0: counted into window 3, up to N
        (2 * W, many),         // set back again: window 3 full, nothing
        (4 * W - 1, many),     // last ns of window 3
        (4 * W, many),         // first ns of window 4
        (10 * W - 1, many),    // a jump: last ns of window 9
        (10 * W, many),        // first ns of window 10
        (5 * W + 1, many),     // far back
        (10 * W + W - 1, few), // last ns of window 10
        (12 * W, many),        // window 12 after an empty window 11
    ]
}

fn fixed_window_schedule(permits: u32) {
    let clock = ManualClock::new();
    let limit = Limit::per_window(permits, Duration::from_nanos(W))
        .unwrap()
        .unpaced();
    let limiter = FixedWindow::with_clock(limit, clock.clone());
    let mut model = FixedModel::new(permits, W);
    let (tally, offered_into) =
        run_phases(&limiter, &clock, &mut model, THREADS, &schedule(permits));
    let what = format!("{limiter:?}");
    let stamps = expand(&tally);
    let admitted = assert_at_most_per_window(&stamps, W, permits as usize, &what);
    for (k, offered) in offered_into {
        let got = admitted.get(&k).copied().unwrap_or(0);
        if offered >= u64::from(permits) {
            assert_eq!(
                got, permits as usize,
                "{what}: window {k} offered {offered}, admitted {got}"
            );
        } else {
            assert_eq!(
                got as u64, offered,
                "{what}: window {k} offered {offered} < N, admitted {got}"
            );
        }
    }
}

fn sliding_counter_schedule(permits: u32) {
    let clock = ManualClock::new();
    let limit = Limit::per_window(permits, Duration::from_nanos(W))
        .unwrap()
        .unpaced();
    let limiter = SlidingWindowCounter::with_clock(limit, clock.clone());
    let mut model = SlidingCounterModel::new(permits, W);
    let (tally, _) = run_phases(&limiter, &clock, &mut model, THREADS, &schedule(permits));
    let what = format!("{limiter:?}");
    let stamps = expand(&tally);
    assert_at_most_per_window(&stamps, W, permits as usize, &what);
    assert_sliding_counter_bound(&stamps, W, permits as usize, &what);
}

/// `phases` without those that move the clock back.
fn forward_only(phases: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut latest = 0;
    phases
        .into_iter()
        .filter(|&(now, _)| {
            let forward = now >= latest;
            latest = latest.max(now);
            forward
        })
        .collect()
}

/// The log is exact while the clock only moves forward, and promises only "never
/// more" once it has stepped back: run the schedule both ways.
fn sliding_log_schedule(permits: u32) {
    for phases in [forward_only(schedule(permits)), schedule(permits)] {
        sliding_log_phases(permits, &phases);
    }
}

fn sliding_log_phases(permits: u32, phases: &[(u64, u64)]) {
    let clock = ManualClock::new();
    let limit = Limit::per_window(permits, Duration::from_nanos(W))
        .unwrap()
        .unpaced();
    let limiter = SlidingLog::with_clock(limit, clock.clone());
    let mut model = SlidingLogModel::new(permits, W);
    let (tally, _) = run_phases(&limiter, &clock, &mut model, THREADS, phases);
    let what = format!("{limiter:?}");
    let stamps = expand(&tally);
    assert_at_most_per_window(&stamps, W, permits as usize, &what);
    assert_sliding_at_most(&stamps, W, permits as usize, &what);
}

#[test]
fn fixed_window_admits_exactly_n_per_window_at_the_edges_and_nothing_extra_going_back() {
    fixed_window_schedule(50);
}

#[test]
fn fixed_window_with_one_permit() {
    fixed_window_schedule(1);
}

#[test]
fn sliding_counter_follows_its_model_and_bound_at_the_edges() {
    sliding_counter_schedule(50);
}

#[test]
fn sliding_counter_with_one_permit() {
    sliding_counter_schedule(1);
}

#[test]
fn sliding_log_follows_its_model_at_the_edges() {
    sliding_log_schedule(50);
}

#[test]
fn sliding_log_with_one_permit() {
    sliding_log_schedule(1);
}

#[test]
fn any_limiter_dispatches_to_the_same_behaviour() {
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new();
        let limit = Limit::per_window(7, Duration::from_nanos(W))
            .unwrap()
            .unpaced();
        let limiter = AnyLimiter::with_clock(algorithm, limit, clock.clone());
        assert_eq!(limiter.algorithm(), algorithm);
        let schedule = schedule(7);
        match algorithm {
            Algorithm::FixedWindow => {
                run_phases(
                    &limiter,
                    &clock,
                    &mut FixedModel::new(7, W),
                    THREADS,
                    &schedule,
                );
            }
            Algorithm::SlidingWindow => {
                let mut model = SlidingCounterModel::new(7, W);
                run_phases(&limiter, &clock, &mut model, THREADS, &schedule);
            }
            Algorithm::SlidingLog => {
                let mut model = SlidingLogModel::new(7, W);
                run_phases(&limiter, &clock, &mut model, THREADS, &schedule);
            }
            Algorithm::BucketedWindow => {
                let mut model = BucketedModel::new(7, W, limit.sub_windows());
                run_phases(&limiter, &clock, &mut model, THREADS, &schedule);
            }
            other => panic!("no model for {other}"),
        }
    }
}

/// The count field at its largest (all 22 bits set): one more increment would carry
/// into the window index. Window 0 fills to exactly N, its last nanosecond admits
/// nothing, and the next window again admits exactly N.
#[test]
fn fixed_window_at_the_largest_permit_count_the_word_holds() {
    let clock = ManualClock::new();
    let limit = Limit::per_window(MAX_PERMITS, Duration::from_nanos(W))
        .unwrap()
        .unpaced();
    let limiter = FixedWindow::with_clock(limit, clock.clone());
    let n = u64::from(MAX_PERMITS);
    let phases = [
        (0, n + 1_000),
        (W - 1, 1_000),
        (W / 2, 1_000),
        (W, n + 1_000),
    ];
    let mut model = FixedModel::new(MAX_PERMITS, W);
    let (tally, _) = run_phases(&limiter, &clock, &mut model, 2, &phases);
    assert_eq!(tally, BTreeMap::from([(0, n), (W, n)]));
}

/// The same edge for the sliding counter's word (window 1 is skipped: after a full
/// window 0 its start admits nothing, by design).
#[test]
fn sliding_counter_at_the_largest_permit_count_the_word_holds() {
    let clock = ManualClock::new();
    let limit = Limit::per_window(MAX_PERMITS, Duration::from_nanos(W))
        .unwrap()
        .unpaced();
    let limiter = SlidingWindowCounter::with_clock(limit, clock.clone());
    let n = u64::from(MAX_PERMITS);
    let phases = [
        (0, n + 1_000),
        (W - 1, 1_000),
        (2 * W, n + 1_000),
        (3 * W - 1, 1_000),
    ];
    let mut model = SlidingCounterModel::new(MAX_PERMITS, W);
    let (tally, _) = run_phases(&limiter, &clock, &mut model, 2, &phases);
    assert_eq!(tally.get(&0), Some(&n));
    assert!(tally.values().all(|&c| c <= n), "{tally:?}");
}

#[test]
fn one_permit_more_than_the_word_holds_is_a_typed_error_of_the_limit() {
    let err = Limit::per_window(MAX_PERMITS + 1, Duration::from_secs(1)).unwrap_err();
    assert_eq!(
        err,
        LimitError::TooManyPermits {
            permits: 4_194_304,
            max: 4_194_303,
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("4194304") && msg.contains("4194303"), "{msg}");
    // The largest count is accepted by every algorithm, and admits exactly that many
    // (the log allocates its 64 MiB ring here).
    let largest = Limit::per_window(MAX_PERMITS, Duration::from_secs(1))
        .unwrap()
        .unpaced();
    for algorithm in Algorithm::ALL {
        let limiter = AnyLimiter::with_clock(algorithm, largest, ManualClock::new());
        assert_eq!(limiter.limit().permits(), MAX_PERMITS, "{algorithm}");
    }
}

/// The sliding log's documented exactness: "admits iff fewer than N admissions lie in
/// (now − W, now] when the calls' clock readings arrive in order". Here every call of a
/// phase reads the same time, exactly one window after the previous phase's N
/// admissions, so all N calls of each phase fit and must be admitted.
#[test]
fn sliding_log_admits_every_call_that_fits_under_contention() {
    const N: u64 = 64;
    const PHASES: u64 = 2_000;
    let clock = ManualClock::new();
    let limit = Limit::per_window(N as u32, Duration::from_nanos(W))
        .unwrap()
        .unpaced();
    let limiter = SlidingLog::with_clock(limit, clock.clone());
    let phases: Vec<(u64, u64)> = (0..PHASES).map(|p| (p * W, N)).collect();
    let mut model = SlidingLogModel::new(N as u32, W);
    let (tally, _) = run_phases(&limiter, &clock, &mut model, THREADS, &phases);
    assert_eq!(tally.values().sum::<u64>(), N * PHASES);
}
