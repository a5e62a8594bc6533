//! What a trace costs through `tracing` + `tracing-opentelemetry`, kept or dropped, with
//! and without [`SkipDropped`]: one request (a root and 3 children, or 20, 5 fields
//! each) through the pipeline the README sets up (registry, the OpenTelemetry layer, an
//! SDK provider with a no-op exporter), each case beside its baselines in the same run.
//!
//! Targets (docs/pay-only-for-what-you-keep.md): root + 3 children, `layer_dropping` ≤
//! 2× `registry_only`; root + 20 children, `layer_dropping` ≤ 1.3× `registry_only`;
//! `layer_keeping` ≤ 1.05× `otel_always_on`; two threads dropping through the layer ≥
//! 1.8× one.
//!
//! Before timing, each pipeline runs a few traces into an in-memory exporter and the
//! bench checks what reached it: nothing for the dropping cases, every span for the
//! keeping ones.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::testing::trace::NoopSpanExporter;
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, Sampler, SdkTracerProvider, ShouldSample, SpanExporter,
};
use otel_rate_sampler::{Limit, ManualClock, RateLimitingSampler, SkipDropped};
use tracing_subscriber::layer::SubscriberExt as _;

#[path = "support/mod.rs"]
#[allow(dead_code)] // the threads' meeting only
mod support;

/// One request: a root span and `children` children, five fields each.
fn trace(i: i64, children: i64) {
    let root = tracing::info_span!(
        "request",
        http.method = "GET",
        http.route = "/items/{id}",
        item.id = i,
        cache.hit = false,
        ratio = 0.5
    );
    let _entered = root.enter();
    for step in 0..children {
        tracing::info_span!(
            "step",
            step,
            item.id = i,
            db.system = "none",
            ok = true,
            cost = 1.5
        )
        .in_scope(|| black_box(step));
    }
}

/// How the spans reach the provider.
#[derive(Clone, Copy)]
enum Via {
    /// No OpenTelemetry layer: the registry alone.
    Registry,
    /// `tracing_opentelemetry::layer()` as the README set it up before `SkipDropped`.
    Plain,
    /// The same layer inside `SkipDropped`.
    Skip,
}

/// Our sampler refusing every root: one permit, spent by the first trace, and a clock
/// that never moves.
fn refusing() -> impl ShouldSample + 'static {
    RateLimitingSampler::builder(Limit::per_window(1, Duration::from_secs(1)).unwrap())
        .clock(ManualClock::new())
        .build()
}

/// Our sampler with a limit no run reaches: every root kept, with its attributes
/// (4 million per second, unpaced, where a trace takes microseconds).
fn keeping() -> impl ShouldSample + 'static {
    let limit = Limit::per_window(Limit::MAX_PERMITS, Duration::from_secs(1)).unwrap();
    RateLimitingSampler::builder(limit.unpaced()).build()
}

fn pipeline<E: SpanExporter + 'static>(
    via: Via,
    sampler: impl ShouldSample + 'static,
    exporter: E,
) -> (tracing::Dispatch, SdkTracerProvider) {
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_simple_exporter(exporter)
        .build();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("bench"));
    let registry = tracing_subscriber::registry();
    let dispatch = match via {
        Via::Registry => tracing::Dispatch::new(registry),
        Via::Plain => tracing::Dispatch::new(registry.with(otel)),
        Via::Skip => tracing::Dispatch::new(registry.with(SkipDropped::new(otel))),
    };
    (dispatch, provider)
}

/// Spans a pipeline exports for 5 traces after the first (which spends the refusing
/// sampler's permit): the bench's check that a case does what its name says.
fn exported(via: Via, decides: Decides, children: i64) -> usize {
    let exporter = InMemorySpanExporter::default();
    let (dispatch, provider) = build(via, decides, exporter.clone());
    tracing::dispatcher::with_default(&dispatch, || (0..6).for_each(|i| trace(i, children)));
    let spans = exporter.get_finished_spans().unwrap().len();
    let _ = provider.shutdown();
    spans.saturating_sub(1 + children as usize)
}

/// The sampler of a case.
#[derive(Clone, Copy)]
enum Decides {
    AlwaysOn,
    AlwaysOff,
    Refusing,
    Keeping,
}

/// [`pipeline`] with `decides`' sampler.
fn build<E: SpanExporter + 'static>(
    via: Via,
    decides: Decides,
    exporter: E,
) -> (tracing::Dispatch, SdkTracerProvider) {
    match decides {
        Decides::AlwaysOn => pipeline(via, Sampler::AlwaysOn, exporter),
        Decides::AlwaysOff => pipeline(via, Sampler::AlwaysOff, exporter),
        Decides::Refusing => pipeline(via, refusing(), exporter),
        Decides::Keeping => pipeline(via, keeping(), exporter),
    }
}

/// Each case: its name, its pipeline, its sampler, and whether it keeps (checked).
const CASES: [(&str, Via, Decides, Option<bool>); 6] = [
    ("registry_only", Via::Registry, Decides::AlwaysOn, None),
    ("otel_always_on", Via::Plain, Decides::AlwaysOn, Some(true)),
    (
        "otel_always_off",
        Via::Plain,
        Decides::AlwaysOff,
        Some(false),
    ),
    ("otel_dropping", Via::Plain, Decides::Refusing, Some(false)),
    ("layer_dropping", Via::Skip, Decides::Refusing, Some(false)),
    ("layer_keeping", Via::Skip, Decides::Keeping, Some(true)),
];

/// How a group times its cases.
#[derive(Clone, Copy)]
enum Timer {
    /// Wall time, criterion's own.
    Wall,
    /// This thread's CPU time: on a machine other processes load, wall time stretches
    /// with every wait for a core, CPU time much less (the cache and the core's clock
    /// still vary). The same work, so ratios compare with the wall-time groups'.
    Cpu,
}

/// This thread's CPU time so far.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// No thread CPU clock here: wall time.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn thread_cpu() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

fn run_group(c: &mut Criterion, group: &str, children: i64, names: &[&str], timer: Timer) {
    let mut g = c.benchmark_group(group);
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, via, decides, keeps) in CASES {
        if !names.contains(&name) {
            continue;
        }
        if let Some(keeps) = keeps {
            let spans = exported(via, decides, children);
            let expected = if keeps {
                5 * (1 + children as usize)
            } else {
                0
            };
            assert_eq!(spans, expected, "{group}/{name} exported {spans} spans");
        }
        let (dispatch, provider) = build(via, decides, NoopSpanExporter::new());
        tracing::dispatcher::with_default(&dispatch, || {
            trace(-1, children); // spends the refusing sampler's permit
            let mut i = 0;
            g.bench_function(name, |b| match timer {
                Timer::Wall => b.iter(|| {
                    i += 1;
                    trace(i, children);
                }),
                Timer::Cpu => b.iter_custom(|iters| {
                    let start = thread_cpu();
                    for _ in 0..iters {
                        i += 1;
                        trace(i, children);
                    }
                    thread_cpu() - start
                }),
            });
        });
        drop(dispatch);
        let _ = provider.shutdown();
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    let three = [
        "registry_only",
        "otel_always_on",
        "otel_always_off",
        "otel_dropping",
        "layer_dropping",
        "layer_keeping",
    ];
    let twenty = ["registry_only", "layer_dropping"];
    run_group(c, "tracing_root_and_3_children", 3, &three, Timer::Wall);
    run_group(c, "tracing_root_and_20_children", 20, &twenty, Timer::Wall);
    // The same cases timed by this thread's CPU time, for a loaded machine.
    run_group(c, "tracing_cpu_root_and_3_children", 3, &three, Timer::Cpu);
    run_group(
        c,
        "tracing_cpu_root_and_20_children",
        20,
        &twenty,
        Timer::Cpu,
    );
    bench_threads(c);
}

/// Two threads dropping through the layer against one: the layer shares nothing a
/// dropped trace writes (each thread's traces are its own).
fn bench_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("tracing_threads_dropping");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    // The registry alone beside the layer: how two threads scale is first the
    // registry's. Both through the global default, as a service sets it (a scoped
    // dispatcher is reference counted, and every span moves that count on both
    // threads): one global `Switch` that forwards to the case being measured.
    let (registry, _registry_provider) =
        pipeline(Via::Registry, refusing(), NoopSpanExporter::new());
    let (layer, _layer_provider) = pipeline(Via::Skip, refusing(), NoopSpanExporter::new());
    let global =
        tracing::dispatcher::set_global_default(tracing::Dispatch::new(Switch([registry, layer])))
            .is_ok();
    for (case, name) in ["registry_only", "layer_dropping"].into_iter().enumerate() {
        // Relaxed: set between measurements, while no thread makes spans.
        CASE.store(case, Ordering::Relaxed);
        trace(-1, 3); // spends the refusing sampler's permit
        for threads in [1usize, 2] {
            g.throughput(Throughput::Elements(threads as u64));
            let param = format!("{threads}_thread{}", if threads == 1 { "" } else { "s" });
            g.bench_function(BenchmarkId::new(name, &param), |b| {
                b.iter_custom(|iters| concurrent(iters, threads))
            });
        }
    }
    assert!(
        global,
        "the bench sets the global default dispatcher once, here"
    );
    g.finish();
}

/// Which of [`Switch`]'s dispatchers spans go to.
static CASE: AtomicUsize = AtomicUsize::new(0);

/// A subscriber forwarding everything to one of two dispatchers, chosen by [`CASE`]
/// (changed only while no span is alive): the global default can be set only once.
struct Switch([tracing::Dispatch; 2]);

impl Switch {
    fn now(&self) -> &tracing::Dispatch {
        // Relaxed: see `CASE`.
        &self.0[CASE.load(Ordering::Relaxed)]
    }
}

impl tracing::Subscriber for Switch {
    fn register_callsite(
        &self,
        metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // Both may be asked later: never cache a verdict.
        let _ = metadata;
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        self.now().enabled(metadata)
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.now().new_span(span)
    }
    fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        self.now().record(span, values);
    }
    fn record_follows_from(&self, span: &tracing::span::Id, follows: &tracing::span::Id) {
        self.now().record_follows_from(span, follows);
    }
    fn event(&self, event: &tracing::Event<'_>) {
        self.now().event(event);
    }
    fn enter(&self, span: &tracing::span::Id) {
        self.now().enter(span);
    }
    fn exit(&self, span: &tracing::span::Id) {
        self.now().exit(span);
    }
    fn clone_span(&self, id: &tracing::span::Id) -> tracing::span::Id {
        self.now().clone_span(id)
    }
    fn try_close(&self, id: tracing::span::Id) -> bool {
        self.now().try_close(id)
    }
}

/// `threads` threads each running `iters` dropped traces through the global default
/// dispatcher, started together (`support::concurrent`: they meet by spinning); the
/// wall time from the first start to the last end.
fn concurrent(iters: u64, threads: usize) -> Duration {
    support::concurrent(iters, threads, &(), |()| {
        trace(1, 3);
        false // nothing is admitted: every root is refused
    })
}

// `criterion_group!` makes an undocumented `pub fn`.
#[allow(missing_docs)]
mod harness {
    criterion::criterion_group!(benches, super::bench);
}
use harness::benches;
criterion_main!(benches);
