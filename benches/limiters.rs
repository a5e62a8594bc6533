//! The bare limiters and the clocks they read, beside `governor`.
//!
//! Groups (see `BENCHMARKS.md` for the figures and how to reproduce them):
//!
//! * `clock`: one reading of each clock, beside `Instant::now()` and governor's clock.
//! * `limiter_admit`: an admitted call, per algorithm and clock, beside governor `check()`.
//! * `limiter_reject`: a refused call on a saturated limiter (1 per hour, spent).
//! * `limiter_no_clock`: the same on a `ManualClock`, i.e. the algorithm without the
//!   cost of reading a real clock.
//! * `limiter_threads_reject`: one vs two threads refused by one shared saturated
//!   limiter; throughput in elements (calls) per second.
//!
//! **Paced and unpaced.** Limits are paced by default. The rows named after an algorithm
//! alone (`fixed_window`, ...) are unpaced, as before pacing existed; the `_paced` rows
//! are the default. A paced admit runs on a limiter of `10 × CHUNK` per hour, whose first
//! tenth releases exactly a chunk (so every timed call admits through the schedule
//! check); a paced reject runs on a limiter refused by the schedule, not by the cap
//! (`CHUNK` per hour with its first tenth spent): the overloaded steady state.
//!
//! **How "admit" stays an admit.** A limiter admits only so many calls per window, and
//! criterion asks for millions. Every case of `limiter_admit` therefore runs in chunks
//! of [`CHUNK`] calls, each on a limiter that has room for exactly [`CHUNK`] more (a
//! fresh one built outside the timer; for `SlidingLog`, the same one with its clock
//! moved a window on, see [`Skewed`]), and asserts that every timed call was admitted.
//! The baselines run through the same harness.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "support/mod.rs"]
mod support;

use criterion::{BenchmarkId, Criterion, Throughput};
use governor::clock::{Clock as _, DefaultClock as GovernorClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter as Governor};
use otel_rate_sampler::{
    BucketedWindow, CachedClock, Clock, FixedWindow, Limit, ManualClock, MonotonicClock,
    PreciseClock, RateLimiter, SlidingLog, SlidingWindowCounter,
};
use support::{chunked, concurrent, CHUNK};

/// The window of the limiters here: long enough never to roll during a run.
const HOUR: Duration = Duration::from_secs(3600);
/// The window of the admitting `SlidingLog`, which [`Skewed`] jumps before each chunk
/// (short, so that a long run's jumps stay far from overflowing 64 bits).
const LOG_WINDOW: Duration = Duration::from_secs(1);

/// A clock that reads `C` and adds a skew the bench moves between chunks (outside the
/// timer), so a `SlidingLog` whose ring is full finds every slot a window old and admits
/// through its steady-state path (read the oldest stamp, then claim) rather than the
/// cheaper ring-filling one. It costs one relaxed load and an add over `C`.
#[derive(Debug)]
struct Skewed<C> {
    inner: C,
    skew: AtomicU64,
}

impl<C> Skewed<C> {
    fn new(inner: C) -> Self {
        Self {
            inner,
            skew: AtomicU64::new(0),
        }
    }

    fn jump_a_window(&self) {
        let by = u64::try_from(LOG_WINDOW.as_nanos()).unwrap();
        self.skew.fetch_add(by, Ordering::Relaxed);
    }
}

impl<C: Clock> Clock for Skewed<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.inner.now_nanos() + self.skew.load(Ordering::Relaxed)
    }
}

/// Unpaced: room for a chunk at any time.
fn room_for_a_chunk() -> Limit {
    Limit::per_window(CHUNK, HOUR).unwrap().unpaced()
}

/// Paced: its first tenth releases exactly a chunk.
fn paced_room_for_a_chunk() -> Limit {
    Limit::per_window(10 * CHUNK, HOUR).unwrap()
}

fn one_per_hour() -> Limit {
    Limit::per_window(1, HOUR).unwrap().unpaced()
}

/// A limiter refused by its schedule: `CHUNK` per hour, paced, its first tenth's
/// `CHUNK / 10` spent (the clock must stay in that tenth: 6 minutes).
fn held_by_the_schedule<L: RateLimiter>(limiter: L) -> L {
    let released = (0..CHUNK).filter(|_| limiter.try_acquire()).count();
    assert_eq!(released, CHUNK.div_ceil(10) as usize, "{limiter:?}");
    assert!(!limiter.try_acquire());
    limiter
}

fn governor_room_for_a_chunk() -> DefaultDirectRateLimiter {
    Governor::direct(Quota::per_hour(NonZeroU32::new(CHUNK).unwrap()))
}

/// A spent limiter: it admitted its one permit of the hour.
fn spent<L: RateLimiter>(limiter: L) -> L {
    assert!(limiter.try_acquire(), "the first call should be admitted");
    assert!(!limiter.try_acquire(), "the second call should be refused");
    limiter
}

fn spent_governor() -> DefaultDirectRateLimiter {
    let g = Governor::direct(Quota::per_hour(NonZeroU32::MIN));
    assert!(g.check().is_ok() && g.check().is_err());
    g
}

fn cached_clock() -> CachedClock {
    CachedClock::start(Duration::from_millis(1)).expect("start the clock thread")
}

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

fn bench_clocks(c: &mut Criterion, cached: &CachedClock) {
    let mut g = c.benchmark_group("clock");
    let monotonic = MonotonicClock::new();
    g.bench_function("default_monotonic_coarse", |b| {
        b.iter(|| black_box(&monotonic).now_nanos())
    });
    g.bench_function("cached", |b| b.iter(|| black_box(cached).now_nanos()));
    let precise = PreciseClock::new();
    g.bench_function("precise", |b| b.iter(|| black_box(&precise).now_nanos()));
    g.bench_function("std_instant_now", |b| b.iter(Instant::now));
    let quanta = GovernorClock::default();
    g.bench_function("governor_quanta", |b| b.iter(|| black_box(&quanta).now()));
    g.finish();
}

/// Admitted calls of the four algorithms on clock `C`, unpaced then paced.
fn admit_cases<C: Clock + Clone>(g: &mut Group<'_>, clock_name: &str, clock: &C) {
    g.bench_function(BenchmarkId::new("fixed_window", clock_name), |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                || FixedWindow::with_clock(room_for_a_chunk(), clock.clone()),
                |l| l.try_acquire(),
                true,
            )
        })
    });
    g.bench_function(BenchmarkId::new("sliding_window", clock_name), |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                || SlidingWindowCounter::with_clock(room_for_a_chunk(), clock.clone()),
                |l| l.try_acquire(),
                true,
            )
        })
    });
    // One log, ring full, its clock moved a window on before each chunk: every call
    // reads the slot it overwrites, finds it a window old, and claims it. Paced, the
    // log holds ten chunks and each new window's first tenth releases one: every call
    // also reads the stamp of the admission its allowance back, from an earlier window.
    for (name, limit) in [
        (
            "sliding_log_skewed",
            Limit::per_window(CHUNK, LOG_WINDOW).unwrap().unpaced(),
        ),
        (
            "sliding_log_skewed_paced",
            Limit::per_window(10 * CHUNK, LOG_WINDOW).unwrap(),
        ),
    ] {
        let log = SlidingLog::with_clock(limit, Skewed::new(clock.clone()));
        for _ in 0..limit.permits() / CHUNK {
            log.clock().jump_a_window();
            for _ in 0..CHUNK {
                assert!(log.try_acquire(), "{name}");
            }
        }
        g.bench_function(BenchmarkId::new(name, clock_name), |b| {
            b.iter_custom(|iters| {
                chunked(
                    iters,
                    || {
                        log.clock().jump_a_window();
                        &log
                    },
                    |l| l.try_acquire(),
                    true,
                )
            })
        });
    }
    g.bench_function(BenchmarkId::new("bucketed", clock_name), |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                || BucketedWindow::with_clock(room_for_a_chunk(), clock.clone()),
                |l| l.try_acquire(),
                true,
            )
        })
    });
    paced_admit_cases(g, clock_name, clock);
}

/// Admitted calls through the schedule check (see "Paced and unpaced" above).
fn paced_admit_cases<C: Clock + Clone>(g: &mut Group<'_>, clock_name: &str, clock: &C) {
    g.bench_function(BenchmarkId::new("fixed_window_paced", clock_name), |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                || FixedWindow::with_clock(paced_room_for_a_chunk(), clock.clone()),
                |l| l.try_acquire(),
                true,
            )
        })
    });
    g.bench_function(BenchmarkId::new("sliding_window_paced", clock_name), |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                || SlidingWindowCounter::with_clock(paced_room_for_a_chunk(), clock.clone()),
                |l| l.try_acquire(),
                true,
            )
        })
    });
    g.bench_function(BenchmarkId::new("bucketed_paced", clock_name), |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                || BucketedWindow::with_clock(paced_room_for_a_chunk(), clock.clone()),
                |l| l.try_acquire(),
                true,
            )
        })
    });
}

fn bench_admit(c: &mut Criterion, cached: &CachedClock) {
    let mut g = c.benchmark_group("limiter_admit");
    g.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                governor_room_for_a_chunk,
                |l| l.check().is_ok(),
                true,
            )
        })
    });
    admit_cases(&mut g, "default", &MonotonicClock::new());
    admit_cases(&mut g, "cached", cached);
    admit_cases(&mut g, "precise", &PreciseClock::new());
    g.finish();
}

/// Refused calls of the four algorithms on clock `C`, each saturated at 1 per hour,
/// then held by the schedule.
fn reject_cases<C: Clock + Clone>(g: &mut Group<'_>, clock_name: &str, clock: &C) {
    let fixed = spent(FixedWindow::with_clock(one_per_hour(), clock.clone()));
    g.bench_function(BenchmarkId::new("fixed_window", clock_name), |b| {
        b.iter_custom(|iters| chunked(iters, || &fixed, |l| l.try_acquire(), false))
    });
    let sliding = spent(SlidingWindowCounter::with_clock(
        one_per_hour(),
        clock.clone(),
    ));
    g.bench_function(BenchmarkId::new("sliding_window", clock_name), |b| {
        b.iter_custom(|iters| chunked(iters, || &sliding, |l| l.try_acquire(), false))
    });
    let log = spent(SlidingLog::with_clock(one_per_hour(), clock.clone()));
    g.bench_function(BenchmarkId::new("sliding_log", clock_name), |b| {
        b.iter_custom(|iters| chunked(iters, || &log, |l| l.try_acquire(), false))
    });
    let bucketed = spent(BucketedWindow::with_clock(one_per_hour(), clock.clone()));
    g.bench_function(BenchmarkId::new("bucketed", clock_name), |b| {
        b.iter_custom(|iters| chunked(iters, || &bucketed, |l| l.try_acquire(), false))
    });
    paced_reject_cases(g, clock_name, clock);
}

/// Calls refused by the schedule (see "Paced and unpaced" above).
fn paced_reject_cases<C: Clock + Clone>(g: &mut Group<'_>, clock_name: &str, clock: &C) {
    let paced = || Limit::per_window(CHUNK, HOUR).unwrap();
    let fixed = held_by_the_schedule(FixedWindow::with_clock(paced(), clock.clone()));
    g.bench_function(BenchmarkId::new("fixed_window_paced", clock_name), |b| {
        b.iter_custom(|iters| chunked(iters, || &fixed, |l| l.try_acquire(), false))
    });
    let sliding = held_by_the_schedule(SlidingWindowCounter::with_clock(paced(), clock.clone()));
    g.bench_function(BenchmarkId::new("sliding_window_paced", clock_name), |b| {
        b.iter_custom(|iters| chunked(iters, || &sliding, |l| l.try_acquire(), false))
    });
    let log = held_by_the_schedule(SlidingLog::with_clock(paced(), clock.clone()));
    g.bench_function(BenchmarkId::new("sliding_log_paced", clock_name), |b| {
        b.iter_custom(|iters| chunked(iters, || &log, |l| l.try_acquire(), false))
    });
    let bucketed = held_by_the_schedule(BucketedWindow::with_clock(paced(), clock.clone()));
    g.bench_function(BenchmarkId::new("bucketed_paced", clock_name), |b| {
        b.iter_custom(|iters| chunked(iters, || &bucketed, |l| l.try_acquire(), false))
    });
}

fn bench_reject(c: &mut Criterion, cached: &CachedClock) {
    let mut g = c.benchmark_group("limiter_reject");
    let gov = spent_governor();
    g.bench_function("governor", |b| {
        b.iter_custom(|iters| chunked(iters, || &gov, |l| l.check().is_ok(), false))
    });
    reject_cases(&mut g, "default", &MonotonicClock::new());
    reject_cases(&mut g, "cached", cached);
    reject_cases(&mut g, "precise", &PreciseClock::new());
    g.finish();
}

/// The algorithms alone: a `ManualClock` costs a pointer chase and a relaxed load.
fn bench_no_clock(c: &mut Criterion) {
    let mut g = c.benchmark_group("limiter_no_clock");
    let clock = ManualClock::new();
    clock.set(1);
    admit_cases(&mut g, "admit", &clock);

    let fixed = spent(FixedWindow::with_clock(one_per_hour(), clock.clone()));
    g.bench_function(BenchmarkId::new("fixed_window", "reject"), |b| {
        b.iter_custom(|iters| chunked(iters, || &fixed, |l| l.try_acquire(), false))
    });
    let sliding = spent(SlidingWindowCounter::with_clock(
        one_per_hour(),
        clock.clone(),
    ));
    g.bench_function(BenchmarkId::new("sliding_window", "reject_full"), |b| {
        b.iter_custom(|iters| chunked(iters, || &sliding, |l| l.try_acquire(), false))
    });
    // The overloaded steady state of a sliding counter: the current window is not full,
    // but the previous one, weighted, leaves no room (reads both words, u128 maths).
    // 10 per second; 10 admitted at 0.5 s; at 1.1 s one more fits (10·0.9 + 1 = 10),
    // then 10·0.9 + 2 = 11 > 10 refuses.
    let weighted_clock = ManualClock::new();
    let ten_per_second = Limit::per_window(10, Duration::from_secs(1))
        .unwrap()
        .unpaced();
    let weighted = SlidingWindowCounter::with_clock(ten_per_second, weighted_clock.clone());
    weighted_clock.set(500_000_000);
    assert_eq!((0..20).filter(|_| weighted.try_acquire()).count(), 10);
    weighted_clock.set(1_100_000_000);
    assert!(weighted.try_acquire() && !weighted.try_acquire());
    g.bench_function(BenchmarkId::new("sliding_window", "reject_weighted"), |b| {
        b.iter_custom(|iters| chunked(iters, || &weighted, |l| l.try_acquire(), false))
    });
    let log = spent(SlidingLog::with_clock(one_per_hour(), clock.clone()));
    g.bench_function(BenchmarkId::new("sliding_log", "reject"), |b| {
        b.iter_custom(|iters| chunked(iters, || &log, |l| l.try_acquire(), false))
    });
    let bucketed = spent(BucketedWindow::with_clock(one_per_hour(), clock.clone()));
    g.bench_function(BenchmarkId::new("bucketed", "reject"), |b| {
        b.iter_custom(|iters| chunked(iters, || &bucketed, |l| l.try_acquire(), false))
    });
    paced_reject_cases(&mut g, "reject", &clock);
    g.finish();
}

/// One and two threads refused by one shared saturated limiter.
fn bench_threads(c: &mut Criterion, cached: &CachedClock) {
    let mut g = c.benchmark_group("limiter_threads_reject");
    let fixed_default = spent(FixedWindow::new(one_per_hour()));
    let fixed_cached = spent(FixedWindow::with_clock(one_per_hour(), cached.clone()));
    let paced = Limit::per_window(CHUNK, HOUR).unwrap();
    let fixed_paced_cached = held_by_the_schedule(FixedWindow::with_clock(paced, cached.clone()));
    let bucketed_cached = spent(BucketedWindow::with_clock(one_per_hour(), cached.clone()));
    let bucketed_paced_cached =
        held_by_the_schedule(BucketedWindow::with_clock(paced, cached.clone()));
    let gov = spent_governor();
    for threads in [1usize, 2] {
        let id = |name: &str| {
            BenchmarkId::new(
                name,
                format!("{threads}_thread{}", if threads == 1 { "" } else { "s" }),
            )
        };
        g.throughput(Throughput::Elements(threads as u64));
        g.bench_function(id("fixed_window_default"), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, &fixed_default, |l| l.try_acquire()))
        });
        g.bench_function(id("fixed_window_cached"), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, &fixed_cached, |l| l.try_acquire()))
        });
        g.bench_function(id("fixed_window_paced_cached"), |b| {
            b.iter_custom(|iters| {
                concurrent(iters, threads, &fixed_paced_cached, |l| l.try_acquire())
            })
        });
        g.bench_function(id("bucketed_cached"), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, &bucketed_cached, |l| l.try_acquire()))
        });
        g.bench_function(id("bucketed_paced_cached"), |b| {
            b.iter_custom(|iters| {
                concurrent(iters, threads, &bucketed_paced_cached, |l| l.try_acquire())
            })
        });
        g.bench_function(id("governor"), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, &gov, |l| l.check().is_ok()))
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let cached = cached_clock();
    bench_clocks(c, &cached);
    bench_admit(c, &cached);
    bench_reject(c, &cached);
    bench_no_clock(c);
    bench_threads(c, &cached);
}

fn main() {
    // What `criterion_group!`/`criterion_main!` expand to, minus an undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
