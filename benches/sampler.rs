//! `should_sample` through `Box<dyn ShouldSample>`, as the SDK calls it, beside the SDK's
//! own samplers and a `governor`-backed sampler.
//!
//! Groups (see `BENCHMARKS.md` for the figures and how to reproduce them):
//!
//! * `sampler_root`: a root span (parent context `Some(&Context::new())`, what the SDK
//!   passes): `AlwaysOn`, `AlwaysOff`, `TraceIdRatioBased(0.1)`, `AlwaysOn` plus our two
//!   attributes, the governor-backed sampler admitting and refusing, and ours admitting
//!   and refusing on the default and the cached clock (and refusing on a `ManualClock`,
//!   to separate the clock from the rest).
//! * `sampler_probability`: the probability samplers on the same root: the SDK's
//!   `TraceIdRatioBased` admitting (0.9) and refusing (0.1), a rule-based consistent
//!   probability (OTEP 235, feature `config`) admitting (0.5, writing `th`) and refusing
//!   (0.1), and the `AdaptiveSampler` admitting (its first window, `p = 1`, writing
//!   `th:0`), refusing by its cap (spent), and refusing by its probability (`p = 1/100`,
//!   reached by a window of 100 offers on a `ManualClock`).
//! * `sampler_child`: a span whose parent is local and sampled: ours beside the SDK's
//!   parent-based samplers over `AlwaysOn`.
//! * `span_root`: a whole root span started and ended through an `SdkTracer` with no
//!   span processor, per sampler: what a decision costs against a span.
//! * `sampler_threads_reject`: one vs two threads refused by one shared saturated
//!   sampler (ours, and the adaptive sampler by its cap and by its probability);
//!   throughput in elements (decisions) per second.
//! * `sampler_stats`: the cost of counting decisions for `stats()` (and the `metrics`
//!   feature, whose instruments read the same counters): ours counting beside the same
//!   sampler built with `count_decisions(false)`, admitting, refusing and following a
//!   local parent, on the cached clock (the cheapest decisions, so the largest ratio);
//!   with feature `metrics`, also refusing with `SamplerMetrics` registered on an SDK
//!   meter provider.
//! * `sampler_stats_threads_reject`: one vs two threads refused by one shared saturated
//!   sampler, counting and not: counting must not stop two threads from scaling.
//!
//! **How "admit" stays an admit.** Every root case runs in chunks of [`CHUNK`] calls;
//! the admitting cases get, before each chunk and outside the timer, a fresh sampler with
//! room for exactly [`CHUNK`] traces, and every case asserts that every timed decision
//! was the expected one. The sampler reference and the parent context go through
//! `black_box` (the call stays a real virtual call); the `SamplingResult` is read and
//! dropped inside the timed loop (its attribute `Vec` freed), as the SDK drops it. No
//! other argument is black-boxed: doing so adds stack round trips to every case, which
//! raises the floor and flattens every ratio.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter as Governor};
use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{
    Sampler, SamplingDecision, SamplingResult, SdkTracer, SdkTracerProvider, ShouldSample,
};
use otel_rate_sampler::attributes::{RATELIMITING, SAMPLER_PARAM, SAMPLER_TYPE};
use otel_rate_sampler::{
    AdaptiveSampler, CachedClock, Clock, Limit, ManualClock, MonotonicClock, RateLimitingSampler,
};

/// Calls per chunk, and the traces per window of the admitting samplers.
const CHUNK: u32 = 1024;
/// The window of every sampler here: long enough never to roll during a run.
const HOUR: Duration = Duration::from_secs(3600);

type Boxed = Box<dyn ShouldSample>;
const NO_ATTRIBUTES: &[KeyValue] = &[];
const NO_LINKS: &[Link] = &[];
const TRACE_ID: TraceId =
    TraceId::from_bytes(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736_u128.to_be_bytes());
type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// One `should_sample` call with the arguments the SDK passes for `parent`, returning
/// whether the span is sampled. The sampler and the parent come through `black_box`, so
/// the call stays a virtual call on unknown data, as in the SDK; the result is read and
/// dropped (its attributes freed) inside the timed loop, as the SDK drops it.
#[inline]
fn sample(sampler: &dyn ShouldSample, parent: &Context) -> bool {
    let result = black_box(sampler).should_sample(
        Some(black_box(parent)),
        TRACE_ID,
        "GET /api/orders",
        &SpanKind::Server,
        NO_ATTRIBUTES,
        NO_LINKS,
    );
    result.decision == SamplingDecision::RecordAndSample
}

/// Times `iters` calls of `call`, [`CHUNK`] at a time, each chunk on the state `make`
/// returns (called outside the timer, and dropped outside it), and asserts that every
/// call answered `sampled`.
fn chunked<S>(
    iters: u64,
    mut make: impl FnMut() -> S,
    mut call: impl FnMut(&S) -> bool,
    sampled: bool,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(u64::from(CHUNK));
        let state = make();
        let mut hits = 0u64;
        let start = Instant::now();
        for _ in 0..n {
            hits += u64::from(call(&state));
        }
        total += start.elapsed();
        let expected = if sampled { n } else { 0 };
        assert_eq!(hits, expected, "a decision other than sampled = {sampled}");
        left -= n;
    }
    total
}

/// `threads` threads each making `iters` root decisions on one shared sampler, started
/// together; the wall time from the first start to the last end. Asserts all dropped.
fn concurrent(iters: u64, threads: usize, sampler: &dyn ShouldSample) -> Duration {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let root = Context::new();
                    barrier.wait();
                    let start = Instant::now();
                    let mut hits = 0u64;
                    for _ in 0..iters {
                        hits += u64::from(sample(sampler, &root));
                    }
                    let end = Instant::now();
                    assert_eq!(hits, 0, "a saturated sampler kept a trace");
                    (start, end)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = spans.iter().map(|s| s.0).min().unwrap();
    let last = spans.iter().map(|s| s.1).max().unwrap();
    last - first
}

/// A rate-limiting sampler as one would write it on `governor`: `check()` per root, the
/// same two attributes as ours on admission, `Drop` otherwise; children follow their
/// parent's sampled flag.
#[derive(Clone, Debug)]
struct GovernorSampler {
    limiter: Arc<DefaultDirectRateLimiter>,
    param: f64,
}

impl GovernorSampler {
    fn new(per_hour: u32) -> Self {
        let per_hour = NonZeroU32::new(per_hour).unwrap();
        Self {
            limiter: Arc::new(Governor::direct(Quota::per_hour(per_hour))),
            param: f64::from(per_hour.get()) / 3600.0,
        }
    }
}

impl ShouldSample for GovernorSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        _trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        let span = parent_context.map(|cx| cx.span());
        let parent = span.as_ref().map(|s| s.span_context());
        let trace_state = parent.map(|p| p.trace_state().clone()).unwrap_or_default();
        let sampled = match parent {
            Some(p) if p.is_valid() => p.is_sampled(),
            _ => self.limiter.check().is_ok(),
        };
        if sampled {
            SamplingResult {
                decision: SamplingDecision::RecordAndSample,
                attributes: vec![
                    KeyValue::new(SAMPLER_TYPE, RATELIMITING),
                    KeyValue::new(SAMPLER_PARAM, self.param),
                ],
                trace_state,
            }
        } else {
            SamplingResult {
                decision: SamplingDecision::Drop,
                attributes: Vec::new(),
                trace_state,
            }
        }
    }
}

/// Unpaced: a chunk of admissions at one instant (the rows predate pacing; the
/// limiter groups of `benches/limiters.rs` compare paced and unpaced).
fn ours<C: Clock>(per_hour: u32, clock: C) -> Boxed {
    let limit = Limit::per_window(per_hour, HOUR).unwrap().unpaced();
    Box::new(RateLimitingSampler::builder(limit).clock(clock).build())
}

/// An adaptive sampler capped at `per_hour` per hour (unpaced, as the rate-limiting
/// rows: a chunk spends the hour's permits at once), in its first window (`p = 1`).
fn adaptive<C: Clock + Clone>(per_hour: u32, clock: C) -> Boxed {
    let limit = Limit::per_window(per_hour, HOUR).unwrap().unpaced();
    Box::new(AdaptiveSampler::builder(limit).clock(clock).build())
}

/// An adaptive sampler of 1 per hour whose probability is 1/100 (100 traces offered in
/// the window before): [`TRACE_ID`]'s random bits are below its threshold.
fn adaptive_at_one_percent() -> Boxed {
    let clock = ManualClock::new();
    let sampler = adaptive(1, clock.clone());
    for i in 0..100u128 {
        let id = TraceId::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
        sampler.should_sample(None, id, "GET /api/orders", &SpanKind::Server, &[], &[]);
    }
    clock.advance(HOUR);
    assert!(
        !sample(sampler.as_ref(), &Context::new()),
        "p = 1/100 refuses the bench's trace id"
    );
    sampler
}

/// A rule-based sampler whose every root gets a consistent probability `p`.
#[cfg(feature = "config")]
fn consistent_rule(p: f64) -> Boxed {
    let text = format!("[default]\nprobability = {p}\n");
    let config = otel_rate_sampler::SamplingConfig::from_toml_str(&text, "bench.toml").unwrap();
    Box::new(otel_rate_sampler::RuleBasedSampler::new(&config, "bench").unwrap())
}

fn bench_probability(c: &mut Criterion) {
    let mut g = c.benchmark_group("sampler_probability");
    let root = Context::new();
    let call = |s: &&Boxed| sample(s.as_ref(), &root);
    let call_fresh = |s: &Boxed| sample(s.as_ref(), &root);
    let one = |g: &mut Group<'_>, name: &str, sampler: Boxed, sampled: bool| {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| chunked(iters, || &sampler, call, sampled))
        });
    };
    // The SDK compares this trace id's low 64 bits shifted right by one, about
    // 0.64·2^63, with p·2^63: kept by 0.9, not by 0.1.
    one(
        &mut g,
        "trace_id_ratio_admit_0.9",
        Box::new(Sampler::TraceIdRatioBased(0.9)),
        true,
    );
    one(
        &mut g,
        "trace_id_ratio_reject_0.1",
        Box::new(Sampler::TraceIdRatioBased(0.1)),
        false,
    );
    // Its low 56 bits are about 0.81·2^56: at least the threshold (1 − p)·2^56 of 0.5,
    // not of 0.1.
    #[cfg(feature = "config")]
    {
        one(
            &mut g,
            "consistent_rule_admit_0.5",
            consistent_rule(0.5),
            true,
        );
        one(
            &mut g,
            "consistent_rule_reject_0.1",
            consistent_rule(0.1),
            false,
        );
    }
    g.bench_function("adaptive_admit_default", |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                || adaptive(CHUNK, MonotonicClock::new()),
                call_fresh,
                true,
            )
        })
    });
    one(
        &mut g,
        "adaptive_reject_cap_default",
        spent(adaptive(1, MonotonicClock::new())),
        false,
    );
    one(
        &mut g,
        "adaptive_reject_probability_manual_clock",
        adaptive_at_one_percent(),
        false,
    );
    g.finish();
}

/// [`ours`], counting its decisions or not.
fn ours_counting<C: Clock>(per_hour: u32, clock: C, count: bool) -> Boxed {
    let limit = Limit::per_window(per_hour, HOUR).unwrap().unpaced();
    Box::new(
        RateLimitingSampler::builder(limit)
            .clock(clock)
            .count_decisions(count)
            .build(),
    )
}

/// A sampler that has kept its one trace of the hour.
fn spent(sampler: Boxed) -> Boxed {
    let root = Context::new();
    assert!(
        sample(sampler.as_ref(), &root),
        "the first root should be kept"
    );
    assert!(
        !sample(sampler.as_ref(), &root),
        "the second root should be dropped"
    );
    sampler
}

/// `AlwaysOn` plus the two attributes ours sets: the floor of any sampler that keeps a
/// trace with attributes (the attribute `Vec` is allocated and freed per decision).
#[derive(Clone, Debug)]
struct AlwaysOnWithAttributes {
    param: f64,
}

impl ShouldSample for AlwaysOnWithAttributes {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        _trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        SamplingResult {
            decision: SamplingDecision::RecordAndSample,
            attributes: vec![
                KeyValue::new(SAMPLER_TYPE, RATELIMITING),
                KeyValue::new(SAMPLER_PARAM, self.param),
            ],
            trace_state: parent_context
                .map(|cx| cx.span().span_context().trace_state().clone())
                .unwrap_or_default(),
        }
    }
}

fn bench_root(c: &mut Criterion, cached: &CachedClock) {
    let mut g = c.benchmark_group("sampler_root");
    let root = Context::new();
    let call = |s: &&Boxed| sample(s.as_ref(), &root);
    let call_fresh = |s: &Boxed| sample(s.as_ref(), &root);
    // A sampler shared by every chunk.
    let one = |g: &mut Group<'_>, name: &str, sampler: Boxed, sampled: bool| {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| chunked(iters, || &sampler, call, sampled))
        });
    };
    // A fresh sampler with room for a chunk, for each chunk.
    let fresh = |g: &mut Group<'_>, name: &str, make: &dyn Fn() -> Boxed| {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| chunked(iters, make, call_fresh, true))
        });
    };
    one(&mut g, "always_on", Box::new(Sampler::AlwaysOn), true);
    one(&mut g, "always_off", Box::new(Sampler::AlwaysOff), false);
    // This trace id's low 63 bits are above 0.1·2^63: dropped.
    one(
        &mut g,
        "trace_id_ratio_0.1",
        Box::new(Sampler::TraceIdRatioBased(0.1)),
        false,
    );
    one(
        &mut g,
        "always_on_with_attributes",
        Box::new(AlwaysOnWithAttributes { param: 1.0 }),
        true,
    );
    fresh(&mut g, "governor_admit", &|| {
        Box::new(GovernorSampler::new(CHUNK))
    });
    one(
        &mut g,
        "governor_reject",
        spent(Box::new(GovernorSampler::new(1))),
        false,
    );
    fresh(&mut g, "ours_admit_default", &|| {
        ours(CHUNK, MonotonicClock::new())
    });
    fresh(&mut g, "ours_admit_cached", &|| ours(CHUNK, cached.clone()));
    one(
        &mut g,
        "ours_reject_default",
        spent(ours(1, MonotonicClock::new())),
        false,
    );
    one(
        &mut g,
        "ours_reject_cached",
        spent(ours(1, cached.clone())),
        false,
    );
    // The sampler's own plumbing: a clock that is one relaxed load behind a pointer.
    one(
        &mut g,
        "ours_reject_manual_clock",
        spent(ours(1, ManualClock::new())),
        false,
    );
    g.finish();
}

fn bench_child(c: &mut Criterion) {
    let mut g = c.benchmark_group("sampler_child");
    // A local, sampled parent with an empty trace state (as most are).
    let parent = SpanContext::new(
        TRACE_ID,
        SpanId::from(0x00f0_67aa_0ba9_02b7_u64),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
    let cx = Context::new().with_remote_span_context(parent);
    let cases: [(&str, Boxed); 3] = [
        ("ours_local_sampled", spent(ours(1, MonotonicClock::new()))),
        (
            "parent_based_sampler_always_on",
            Box::new(Sampler::parent_based(Sampler::AlwaysOn)),
        ),
        (
            "sampler_parent_based_always_on",
            Box::new(Sampler::ParentBased(Box::new(Sampler::AlwaysOn))),
        ),
    ];
    for (name, sampler) in cases {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| chunked(iters, || &sampler, |s| sample(s.as_ref(), &cx), true))
        });
    }
    g.finish();
}

/// A whole root span, started and ended through the SDK's tracer (no span processor),
/// so the sampler's cost can be read against what a span costs anyway.
fn bench_span(c: &mut Criterion) {
    let mut g = c.benchmark_group("span_root");
    let tracer = |sampler: Boxed| {
        SdkTracerProvider::builder()
            .with_sampler(sampler)
            .build()
            .tracer("bench")
    };
    let span = |t: &SdkTracer| {
        let span = black_box(t).start("GET /api/orders");
        span.span_context().is_sampled()
    };
    let cases: [(&str, &dyn Fn() -> Boxed, bool); 5] = [
        ("always_on", &|| Box::new(Sampler::AlwaysOn), true),
        ("always_off", &|| Box::new(Sampler::AlwaysOff), false),
        (
            "always_on_with_attributes",
            &|| Box::new(AlwaysOnWithAttributes { param: 1.0 }),
            true,
        ),
        (
            "ours_admit_default",
            &|| ours(CHUNK, MonotonicClock::new()),
            true,
        ),
        (
            "ours_reject_default",
            &|| spent(ours(1, MonotonicClock::new())),
            false,
        ),
    ];
    for (name, make, sampled) in cases {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| chunked(iters, || tracer(make()), span, sampled))
        });
    }
    g.finish();
}

fn bench_threads(c: &mut Criterion, cached: &CachedClock) {
    let mut g = c.benchmark_group("sampler_threads_reject");
    let default = spent(ours(1, MonotonicClock::new()));
    let cached = spent(ours(1, cached.clone()));
    let adaptive_capped = spent(adaptive(1, MonotonicClock::new()));
    let adaptive_refusing = adaptive_at_one_percent();
    for threads in [1usize, 2] {
        g.throughput(Throughput::Elements(threads as u64));
        let param = format!("{threads}_thread{}", if threads == 1 { "" } else { "s" });
        g.bench_function(BenchmarkId::new("ours_default", &param), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, default.as_ref()))
        });
        g.bench_function(BenchmarkId::new("ours_cached", &param), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, cached.as_ref()))
        });
        g.bench_function(BenchmarkId::new("adaptive_cap_default", &param), |b| {
            b.iter_custom(|iters| concurrent(iters, threads, adaptive_capped.as_ref()))
        });
        g.bench_function(
            BenchmarkId::new("adaptive_probability_manual", &param),
            |b| b.iter_custom(|iters| concurrent(iters, threads, adaptive_refusing.as_ref())),
        );
    }
    g.finish();
}

fn bench_stats(c: &mut Criterion, cached: &CachedClock) {
    let mut g = c.benchmark_group("sampler_stats");
    let root = Context::new();
    let call = |s: &&Boxed| sample(s.as_ref(), &root);
    let call_fresh = |s: &Boxed| sample(s.as_ref(), &root);
    for (label, count) in [("counted", true), ("uncounted", false)] {
        g.bench_function(format!("admit_{label}"), |b| {
            b.iter_custom(|iters| {
                chunked(
                    iters,
                    || ours_counting(CHUNK, cached.clone(), count),
                    call_fresh,
                    true,
                )
            })
        });
        let spent_sampler = spent(ours_counting(1, cached.clone(), count));
        g.bench_function(format!("reject_{label}"), |b| {
            b.iter_custom(|iters| chunked(iters, || &spent_sampler, call, false))
        });
        let parent = SpanContext::new(
            TRACE_ID,
            SpanId::from(0x00f0_67aa_0ba9_02b7_u64),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
        let cx = Context::new().with_remote_span_context(parent);
        g.bench_function(format!("child_{label}"), |b| {
            b.iter_custom(|iters| {
                chunked(iters, || &spent_sampler, |s| sample(s.as_ref(), &cx), true)
            })
        });
    }
    #[cfg(feature = "metrics")]
    {
        use opentelemetry::metrics::MeterProvider as _;
        use opentelemetry_sdk::metrics::{
            InMemoryMetricExporter, PeriodicReader, SdkMeterProvider,
        };
        let limit = Limit::per_window(1, HOUR).unwrap();
        let sampler = RateLimitingSampler::builder(limit)
            .clock(cached.clone())
            .build();
        let meters = SdkMeterProvider::builder()
            .with_reader(
                PeriodicReader::builder(InMemoryMetricExporter::default())
                    .with_interval(HOUR)
                    .build(),
            )
            .build();
        otel_rate_sampler::SamplerMetrics::with_meter(meters.meter("bench"))
            .span_started(true)
            .register(&sampler);
        let spent_sampler = spent(Box::new(sampler));
        g.bench_function("reject_counted_with_metrics", |b| {
            b.iter_custom(|iters| chunked(iters, || &spent_sampler, call, false))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("sampler_stats_threads_reject");
    for (label, count) in [("counted", true), ("uncounted", false)] {
        let sampler = spent(ours_counting(1, cached.clone(), count));
        for threads in [1usize, 2] {
            g.throughput(Throughput::Elements(threads as u64));
            let param = format!("{threads}_thread{}", if threads == 1 { "" } else { "s" });
            g.bench_function(BenchmarkId::new(label, &param), |b| {
                b.iter_custom(|iters| concurrent(iters, threads, sampler.as_ref()))
            });
        }
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let cached = CachedClock::start(Duration::from_millis(1)).expect("start the clock thread");
    bench_root(c, &cached);
    bench_probability(c);
    bench_child(c);
    bench_span(c);
    bench_threads(c, &cached);
    bench_stats(c, &cached);
}

fn main() {
    // What `criterion_group!`/`criterion_main!` expand to, minus an undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
