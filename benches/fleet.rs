//! Fleet mode (`FleetLimiter`, feature `redis`) beside the local `FixedWindow`, in one run.
//!
//! The bench starts its own `redis-server` on a free loopback port (it must be on PATH)
//! and kills it at the end. Groups (figures in `BENCHMARKS.md`, section "Fleet"):
//!
//! * `fleet_admit`: an admitted call, `FixedWindow` vs `FleetLimiter`, default clock.
//!   Same chunked harness as `benches/limiters.rs`: each chunk of [`CHUNK`] calls is
//!   timed only once the fleet lease holds at least [`CHUNK`] permits (waiting for the
//!   background thread to lease happens outside the timer, spending a permit now and
//!   then, since the lease follows demand), and every timed call must be admitted.
//! * `fleet_reject`: a refused call on a spent limiter (1 per hour).
//! * `fleet_threads_reject`: one vs two threads refused by one shared spent limiter.
//! * Before the groups, the Redis calls per instance per window at saturation are
//!   measured from `FleetLimiter::stats` (two instances, 1000 per 250 ms, ~3 s) and
//!   printed.
//!
//! Each rule's Redis "memory start" marker is set to window 0 before its limiter is
//! built, so the first windows grant at once (a fresh Redis otherwise grants nothing for
//! its first two windows, which at 1-hour windows would be two hours).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

#[path = "support/mod.rs"]
mod support;

use criterion::{BenchmarkId, Criterion, Throughput};
use otel_rate_sampler::{FixedWindow, FleetLimiter, Limit, RateLimiter};
use support::{chunked, concurrent, CHUNK};

const HOUR: Duration = Duration::from_secs(3600);

struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be on PATH (apt-get install -y redis-server)");
        let redis = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !redis.cli(&["PING"]).contains("PONG") {
            assert!(Instant::now() < deadline, "redis-server did not start");
            thread::sleep(Duration::from_millis(10));
        }
        redis
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn cli(&self, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// A fleet limiter for `key` whose Redis memory counts as old (see the module docs).
    fn limiter(&self, key: &str, limit: Limit) -> FleetLimiter {
        self.cli(&["HSET", &format!("{{otel-rate:{key}}}:meta"), "since", "0"]);
        let l = FleetLimiter::builder(self.url(), key, limit)
            .build()
            .expect("build");
        let deadline = Instant::now() + Duration::from_secs(10);
        while l.stats().window_granted == 0 {
            assert!(Instant::now() < deadline, "no lease: {:?}", l.stats());
            thread::sleep(Duration::from_millis(1));
        }
        l
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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

fn bench_admit(c: &mut Criterion, redis: &Redis) {
    let mut g = c.benchmark_group("fleet_admit");
    g.bench_function("fixed_window", |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                || FixedWindow::new(Limit::per_window(CHUNK, HOUR).unwrap().unpaced()),
                |l| l.try_acquire(),
                true,
            )
        })
    });
    // The most a lease word holds per window, 250 ms windows: ~16 M admissions per second
    // of wall time, so the chunks rarely wait for the lease.
    let fleet = redis.limiter(
        "admit",
        Limit::per_window(4_194_303, Duration::from_millis(250)).unwrap(),
    );
    g.bench_function("fleet", |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                || {
                    let deadline = Instant::now() + Duration::from_secs(5);
                    loop {
                        let s = fleet.stats();
                        if Some(s.window) == fleet.current_window()
                            && s.window_granted - s.window_spent >= u64::from(CHUNK)
                        {
                            break;
                        }
                        assert!(Instant::now() < deadline, "no lease: {s:?}");
                        // Demand, outside the timer: the chunk follows what is spent.
                        let _ = fleet.try_acquire();
                        thread::sleep(Duration::from_micros(50));
                    }
                    &fleet
                },
                |l| l.try_acquire(),
                true,
            )
        })
    });
    g.finish();
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
}

fn bench_threads(c: &mut Criterion, redis: &Redis) {
    let mut g = c.benchmark_group("fleet_threads_reject");
    let one_per_hour = Limit::per_window(1, HOUR).unwrap();
    let fixed = spent(FixedWindow::new(one_per_hour));
    let fleet = spent(redis.limiter("threads", one_per_hour));
    for threads in [1usize, 2] {
        let id = |name: &str| {
            BenchmarkId::new(
                name,
                format!("{threads}_thread{}", if threads == 1 { "" } else { "s" }),
            )
        };
        g.throughput(Throughput::Elements(threads as u64));
        g.bench_function(id("fixed_window"), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, &fixed, |l| l.try_acquire()))
        });
        g.bench_function(id("fleet"), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, &fleet, |l| l.try_acquire()))
        });
    }
    g.finish();
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
