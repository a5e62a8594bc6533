//! Fleet mode (`FleetLimiter`, feature `redis`) beside the local `FixedWindow`, in one run.
//!
//! The bench starts its own `redis-server` on a free loopback port (it must be on PATH)
//! and kills it at the end. Groups (figures in `BENCHMARKS.md`, section "Fleet"):
//!
//! * `fleet_admit`: an admitted call, `FixedWindow` vs `FleetLimiter`, default clock;
//!   every timed call must be admitted. Two fleet rows:
//!   * `fleet_worker_idle`: the calls are timed in runs the lease covers with room to
//!     spare (it stays above the mark at which the worker asks for more), each after a
//!     few untimed calls; a run during which the lease word took any write but the
//!     run's own (a top-up, a window roll) is discarded and timed again, and the
//!     discards are printed. Leasing happens between runs, outside the timer.
//!   * `fleet_worker_tops_up`: the chunked harness of `benches/limiters.rs`: each chunk
//!     of [`CHUNK`] calls is timed as soon as the lease holds [`CHUNK`] permits (waiting
//!     for the lease is outside the timer, spending a permit now and then since the
//!     lease follows demand), so a chunk mostly runs right after the worker wrote the
//!     lease word.
//! * `fleet_reject`: a refused call on a spent limiter (1 per hour).
//! * `fleet_threads_reject`: one vs two threads refused by one shared spent limiter;
//!   then the fleet rows again with `redis-server` stopped (`SIGSTOP`), so that neither
//!   it nor the worker's calls take a core from the two bench threads.
//! * After each group, its cases timed again in alternation, round by round, and the
//!   medians and ratios printed (`paired`: on a shared machine, load that comes or goes
//!   between two criterion cases moves their ratio; it falls on both rounds of a pair).
//! * Before the groups, the Redis calls per instance per window at saturation are
//!   measured from `FleetLimiter::stats` (two instances, 1000 per 250 ms, ~3 s) and
//!   printed.
//!
//! Each rule's Redis "memory start" marker is set to window 0 before its limiter is
//! built, so the first windows grant at once (a fresh Redis otherwise grants nothing for
//! its first two windows, which at 1-hour windows would be two hours).

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

#[path = "support/paired.rs"]
mod paired;
#[path = "support/redis.rs"]
mod redis;
#[path = "support/mod.rs"]
mod support;

use criterion::{BenchmarkId, Criterion, Throughput};
use otel_rate_sampler::{FixedWindow, FleetLimiter, Limit, RateLimiter};
use paired::{paired, Paired};
use redis::Redis;
use support::{chunked, concurrent, CHUNK};

const HOUR: Duration = Duration::from_secs(3600);

fn spent<L: RateLimiter>(l: L) -> L {
    assert!(l.try_acquire(), "the first call should be admitted");
    assert!(!l.try_acquire(), "the second call should be refused");
    l
}

/// Redis calls per instance per window, two instances saturated for ~3 s.
fn calls_per_window_at_saturation(redis: &Redis) {
    let window = Duration::from_millis(250);
    let limit = Limit::per_window(1000, window).unwrap();
    let fleet: Vec<_> = (0..2).map(|_| redis.limiter("saturation", limit)).collect();
    let run = |d: Duration| {
        thread::scope(|s| {
            for l in &fleet {
                s.spawn(move || {
                    let end = Instant::now() + d;
                    while Instant::now() < end {
                        for _ in 0..50 {
                            let _ = l.try_acquire();
                        }
                        thread::sleep(Duration::from_micros(200));
                    }
                });
            }
        })
    };
    run(window * 2); // demand ramps up
    let before: Vec<_> = fleet.iter().map(|l| l.stats()).collect();
    let w0 = fleet[0].current_window().unwrap_or(0);
    run(window * 12);
    let windows = (fleet[0].current_window().unwrap_or(0) - w0).max(1);
    for (l, b) in fleet.iter().zip(before) {
        let s = l.stats();
        println!(
            "fleet_calls_per_window: {:.2} Redis calls per instance per window at saturation \
             ({} leases, {} errors over {windows} windows; k=2, N=1000 per 250 ms)",
            (s.redis_calls - b.redis_calls) as f64 / windows as f64,
            s.leases - b.leases,
            s.lease_errors - b.lease_errors,
        );
    }
}

/// The most calls timed in one worker-idle run (the window must not end during a run;
/// one that does is discarded).
const MAX_RUN: u64 = 16 * CHUNK as u64;
/// Untimed calls before each worker-idle run: the path warm after a wait for the lease,
/// as the baseline's chunks, run back to back, find it.
const WARM: u64 = 64;

/// 50 µs of waiting for the worker, spinning: a bench thread that slept could wake on
/// a core another process holds, and its next timed calls would wait for it (the
/// baseline's thread never sleeps).
fn pause() {
    let until = Instant::now() + Duration::from_micros(50);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// The lease word of `l`: (window id, remaining), read through its statistics.
fn lease_word(l: &FleetLimiter) -> (u64, u64) {
    let s = l.stats();
    (s.window, s.window_granted - s.window_spent)
}

/// The calls `l` can make now while its lease stays above the worker's low-water mark
/// (half a chunk; a chunk is at most a quarter of the previous window's spending, at
/// most `N`, or half of this window's: `FleetLimiter`'s docs): waits outside the timer,
/// spending to show demand, until that room is at least `CHUNK + WARM`.
fn idle_room(l: &FleetLimiter) -> u64 {
    let permits = u64::from(l.limit().permits());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = l.stats();
        let remaining = s.window_granted - s.window_spent;
        // `remaining - r` above both `N / 8` and `(spent + r) / 4`.
        let room = if Some(s.window) == l.current_window() {
            let below_n = remaining.saturating_sub(permits / 8 + 1);
            let below_spent =
                ((4 * remaining).saturating_sub(s.window_spent) / 5).saturating_sub(1);
            below_n.min(below_spent)
        } else {
            0
        };
        if room >= u64::from(CHUNK) + WARM {
            return room;
        }
        assert!(Instant::now() < deadline, "no lease: {s:?}");
        // Demand, outside the timer: the lease follows what is spent.
        for _ in 0..CHUNK {
            let _ = l.try_acquire();
        }
        pause();
    }
}

/// `iters` admitted calls on `l`, timed in runs during which only the runs themselves
/// wrote the lease word: a run that finds the word otherwise (a top-up or a roll by the
/// worker, a window ended) is not counted but added to `discarded`, and run again.
fn admit_worker_idle(iters: u64, l: &FleetLimiter, discarded: &mut u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let run = left.min(idle_room(l) - WARM).min(MAX_RUN);
        for _ in 0..WARM {
            let _ = l.try_acquire();
        }
        let (window, remaining) = lease_word(l);
        let start = Instant::now();
        let mut hits = 0u64;
        for _ in 0..run {
            hits += u64::from(black_box(&l).try_acquire());
        }
        let elapsed = start.elapsed();
        if remaining >= run && lease_word(l) == (window, remaining - run) {
            assert_eq!(hits, run, "a call the lease covered was refused");
            total += elapsed;
            left -= run;
        } else {
            *discarded += 1;
        }
    }
    total
}

/// Rounds of a paired run (see `support/paired.rs`), and the calls a round times.
const ROUNDS: usize = 2000;
const THREAD_ROUNDS: usize = 200;
const THREAD_CALLS: u64 = 64 * CHUNK as u64;

fn admit_fixed(iters: u64) -> Duration {
    chunked(
        iters,
        || FixedWindow::new(Limit::per_window(CHUNK, HOUR).unwrap().unpaced()),
        |l| l.try_acquire(),
        true,
    )
}

/// Chunks timed as soon as `fleet`'s lease holds one (see the module docs).
fn admit_tops_up(iters: u64, fleet: &FleetLimiter) -> Duration {
    let lease = || {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let s = fleet.stats();
            if Some(s.window) == fleet.current_window()
                && s.window_granted - s.window_spent >= u64::from(CHUNK)
            {
                return fleet;
            }
            assert!(Instant::now() < deadline, "no lease: {s:?}");
            // Demand, outside the timer: the chunk follows what is spent.
            let _ = fleet.try_acquire();
            pause();
        }
    };
    chunked(iters, lease, |l| l.try_acquire(), true)
}

fn print_paired(group: &str, a: &str, b: &str, p: &Paired) {
    println!(
        "paired {group}: {a} {:.2} ns, {b} {:.2} ns per call, {b} / {a} {:.2} \
         (medians of {ROUNDS} alternating rounds of {CHUNK} calls)",
        p.a, p.b, p.ratio
    );
}

fn bench_admit(c: &mut Criterion, redis: &Redis) {
    let mut g = c.benchmark_group("fleet_admit");
    g.bench_function("fixed_window", |b| b.iter_custom(admit_fixed));
    // The most a lease word holds per window, 250 ms windows: ~16 M admissions per second
    // of wall time.
    let most = Limit::per_window(4_194_303, Duration::from_millis(250)).unwrap();
    let idle = redis.limiter("admit_idle", most);
    let (mut runs, mut discarded) = (0u64, 0u64);
    g.bench_function("fleet_worker_idle", |b| {
        b.iter_custom(|iters| {
            runs += iters.div_ceil(MAX_RUN);
            admit_worker_idle(iters, &idle, &mut discarded)
        })
    });
    let p = paired(
        ROUNDS,
        u64::from(CHUNK),
        || admit_fixed(u64::from(CHUNK)),
        || admit_worker_idle(u64::from(CHUNK), &idle, &mut discarded),
    );
    print_paired("fleet_admit", "fixed_window", "fleet_worker_idle", &p);
    println!(
        "fleet_admit/fleet_worker_idle: {discarded} runs discarded (the lease word written \
         by the worker or a window ended during them), against at least {} kept",
        runs + ROUNDS as u64
    );
    drop(idle);
    let fleet = redis.limiter("admit", most);
    g.bench_function("fleet_worker_tops_up", |b| {
        b.iter_custom(|iters| admit_tops_up(iters, &fleet))
    });
    g.finish();
    let p = paired(
        ROUNDS,
        u64::from(CHUNK),
        || admit_fixed(u64::from(CHUNK)),
        || admit_tops_up(u64::from(CHUNK), &fleet),
    );
    print_paired("fleet_admit", "fixed_window", "fleet_worker_tops_up", &p);
}

/// One chunk of refused calls on `l`.
fn refuse_chunk<L: RateLimiter>(l: &L) -> Duration {
    chunked(u64::from(CHUNK), || l, |l| l.try_acquire(), false)
}

fn bench_reject(c: &mut Criterion, redis: &Redis) {
    let mut g = c.benchmark_group("fleet_reject");
    let one_per_hour = Limit::per_window(1, HOUR).unwrap();
    let fixed = spent(FixedWindow::new(one_per_hour));
    g.bench_function("fixed_window", |b| {
        b.iter_custom(|iters| chunked(iters, || &fixed, |l| l.try_acquire(), false))
    });
    let fleet = spent(redis.limiter("reject", one_per_hour));
    g.bench_function("fleet", |b| {
        b.iter_custom(|iters| chunked(iters, || &fleet, |l| l.try_acquire(), false))
    });
    g.finish();
    // Each type's own path, inlined as in criterion's cases above and in the samplers
    // (which hold their limiter's concrete type), not a call through `&dyn RateLimiter`.
    let p = paired(
        ROUNDS,
        u64::from(CHUNK),
        || refuse_chunk(&fixed),
        || refuse_chunk(&fleet),
    );
    print_paired("fleet_reject", "fixed_window", "fleet", &p);
}

/// `<name>/1_thread`, `<name>/2_threads`.
fn threads_id(name: &str, threads: usize) -> BenchmarkId {
    let plural = if threads == 1 { "" } else { "s" };
    BenchmarkId::new(name, format!("{threads}_thread{plural}"))
}

fn bench_threads(c: &mut Criterion, redis: &Redis) {
    let mut g = c.benchmark_group("fleet_threads_reject");
    let one_per_hour = Limit::per_window(1, HOUR).unwrap();
    let fixed = spent(FixedWindow::new(one_per_hour));
    let fleet = spent(redis.limiter("threads", one_per_hour));
    for threads in [1usize, 2] {
        let id = |name: &str| threads_id(name, threads);
        g.throughput(Throughput::Elements(threads as u64));
        g.bench_function(id("fixed_window"), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, &fixed, |l| l.try_acquire()))
        });
        g.bench_function(id("fleet"), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, &fleet, |l| l.try_acquire()))
        });
    }
    print_scaling("fixed_window", &fixed);
    print_scaling("fleet", &fleet);
    // The same refusals with the server stopped: its process and the worker's calls (they
    // time out, then one attempt per interval) off the two cores.
    redis.signal("-STOP");
    for threads in [1usize, 2] {
        g.throughput(Throughput::Elements(threads as u64));
        g.bench_function(threads_id("fleet_redis_stopped", threads), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, &fleet, |l| l.try_acquire()))
        });
    }
    print_scaling("fleet_redis_stopped", &fleet);
    redis.signal("-CONT");
    g.finish();
}

/// One thread against two refusing on `l`, paired; prints the throughput ratio.
fn print_scaling(name: &str, l: &impl RateLimiter) {
    let refuse = |threads| move || concurrent(THREAD_CALLS, threads, l, |l| l.try_acquire());
    let p = paired(THREAD_ROUNDS, THREAD_CALLS, refuse(1), refuse(2));
    println!(
        "paired fleet_threads_reject/{name}: 1 thread {:.2} ns per call, 2 threads \
         {:.2} ns per iteration (a call on each), throughput 2 / 1 {:.2} (medians of \
         {THREAD_ROUNDS} alternating rounds of {THREAD_CALLS} calls a thread)",
        p.a,
        p.b,
        2.0 / p.ratio
    );
}

fn main() {
    // What `criterion_group!`/`criterion_main!` expand to, minus an undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    let redis = Redis::start();
    calls_per_window_at_saturation(&redis);
    bench_admit(&mut c, &redis);
    bench_reject(&mut c, &redis);
    bench_threads(&mut c, &redis);
    c.final_summary();
}
