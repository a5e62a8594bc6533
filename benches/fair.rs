//! Fair shares per key: `should_sample` of a `RateLimitingSampler` with
//! `fair_by(["http.route"])` and 500 active routes, beside the same sampler and limit
//! without `fair_by` (the baseline), through `Box<dyn ShouldSample>` as the SDK calls it.
//!
//! Group `fair_by` (see `BENCHMARKS.md` for the figures and how to reproduce them):
//!
//! * `plain_admit` / `keys_500_admit`: roots that are kept. The fair sampler's window
//!   holds reserved permits for every route (each route offered 5 times in the window
//!   before, a limit of 2048: at least 4 each), and the calls go round the 500 routes,
//!   so each is kept on its route's reserved permits; the plain sampler has room for
//!   the chunk.
//! * `plain_refuse` / `keys_500_refuse`: roots that are refused: every route's reserved
//!   permits and the limit spent. A refusal reads the route, hashes it, finds its entry,
//!   counts its demand in the thread's own row and asks the wrapped limiter.
//!
//! Both on a `ManualClock` (one relaxed load), so the ratio is the fair machinery's
//! against the cheapest sampler; `*_refuse_default_clock` repeats the refusals on the
//! default clock, what a service pays.
//!
//! Every case runs in chunks of [`CHUNK`] calls; an admitting case gets a fresh sampler
//! per chunk, built outside the timer, and every case asserts each timed decision.

use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::{Clock, FairBy, Limit, ManualClock, MonotonicClock, RateLimitingSampler};

#[path = "support/mod.rs"]
#[allow(dead_code)] // the threaded harness is not used here
mod support;

use support::{chunked, CHUNK};

type Boxed = Box<dyn ShouldSample>;
type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

const ROUTES: usize = 500;
/// The limit of every sampler here: room for a chunk, and at least 4 reserved permits
/// per route when each offered 5.
const PERMITS: u32 = 2048;
const NO_LINKS: &[Link] = &[];
// The admitting cases keep a whole chunk, at most 3 calls a route.
const _: () = assert!(CHUNK <= PERMITS / 2);
const TRACE_ID: TraceId = TraceId::from_bytes(0x4bf9_2f35_77b3_4da6_u128.to_be_bytes());

/// One root decision for route `i` (mod 500).
#[inline]
fn sample(sampler: &dyn ShouldSample, routes: &[Vec<KeyValue>], i: usize) -> bool {
    let result = black_box(sampler).should_sample(
        Some(black_box(&Context::new())),
        TRACE_ID,
        "GET",
        &SpanKind::Server,
        &routes[i % ROUTES],
        NO_LINKS,
    );
    result.decision == SamplingDecision::RecordAndSample
}

fn limit(window: Duration) -> Limit {
    Limit::per_window(PERMITS, window).unwrap().unpaced()
}

fn plain<C: Clock>(clock: C, window: Duration) -> Boxed {
    Box::new(
        RateLimitingSampler::builder(limit(window))
            .clock(clock)
            .build(),
    )
}

fn fair<C: Clock>(clock: C, window: Duration) -> Boxed {
    Box::new(
        RateLimitingSampler::builder(limit(window))
            .clock(clock)
            .fair_by(FairBy::attributes(["http.route"]))
            .build()
            .expect("500 keys fit the default max_keys"),
    )
}

/// Offers each route `times` times, returns how many were kept.
fn offer(sampler: &dyn ShouldSample, routes: &[Vec<KeyValue>], times: usize) -> usize {
    (0..ROUTES * times)
        .filter(|&i| sample(sampler, routes, i))
        .count()
}

/// A fair sampler in its second window, every route holding reserved permits.
fn fair_with_shares(routes: &[Vec<KeyValue>]) -> Boxed {
    let clock = ManualClock::new();
    let s = fair(clock.clone(), Duration::from_secs(1));
    clock.set(1_000_000_000);
    offer(s.as_ref(), routes, 5);
    clock.set(2_000_000_000);
    // The window's first call rolls it (once a window; not what a decision costs).
    assert!(sample(s.as_ref(), routes, 0));
    s
}

/// `sampler` with its permits spent.
fn spent(sampler: Boxed, routes: &[Vec<KeyValue>]) -> Boxed {
    offer(sampler.as_ref(), routes, 10);
    assert!(!sample(sampler.as_ref(), routes, 0));
    sampler
}

fn cases(g: &mut Group<'_>, routes: &[Vec<KeyValue>]) {
    let second = Duration::from_secs(1);
    let hour = Duration::from_secs(3600);
    let fresh = |g: &mut Group<'_>, name: &str, make: &dyn Fn() -> Boxed| {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut i = 0;
                chunked(
                    iters,
                    make,
                    |s| {
                        i += 1;
                        sample(s.as_ref(), routes, i)
                    },
                    true,
                )
            })
        });
    };
    let shared = |g: &mut Group<'_>, name: &str, sampler: Boxed| {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut i = 0;
                chunked(
                    iters,
                    || &sampler,
                    |s| {
                        i += 1;
                        sample(s.as_ref(), routes, i)
                    },
                    false,
                )
            })
        });
    };
    fresh(g, "plain_admit", &|| plain(ManualClock::new(), second));
    fresh(g, "keys_500_admit", &|| fair_with_shares(routes));
    shared(
        g,
        "plain_refuse",
        spent(plain(ManualClock::new(), second), routes),
    );
    shared(
        g,
        "keys_500_refuse",
        spent(fair_with_shares(routes), routes),
    );
    shared(
        g,
        "plain_refuse_default_clock",
        spent(plain(MonotonicClock::new(), hour), routes),
    );
    shared(
        g,
        "keys_500_refuse_default_clock",
        spent(fair(MonotonicClock::new(), hour), routes),
    );
}

fn main() {
    let routes: Vec<Vec<KeyValue>> = (0..ROUTES)
        .map(|i| vec![KeyValue::new("http.route", format!("/route/{i}"))])
        .collect();
    // What `criterion_group!`/`criterion_main!` expand to, minus an undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("fair_by");
    cases(&mut g, &routes);
    g.finish();
    c.final_summary();
}
