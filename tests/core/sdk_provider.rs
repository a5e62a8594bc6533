//! The sampler inside a real `SdkTracerProvider` with an in-memory exporter, on a
//! [`ManualClock`]: threads start traces (a root and three children made through the SDK
//! as children of the root's context) in phases separated by barriers and clock moves;
//! each root names its phase in an attribute.
//!
//! From the exported spans: per phase (and per window) no more traces than the limit,
//! exactly N when more were offered, every exported trace whole, no child without its
//! root, and the sampler's attributes on roots only.
//!
//! Each phase is opened by one trace the main thread starts alone, before the workers
//! race. That makes every phase deterministic, also for the sliding counter, whose roll
//! into a new window may (as documented) refuse callers that race the roller.

use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use crate::support::{BucketedModel, FixedModel, Model, SlidingCounterModel, SlidingLogModel};
use opentelemetry::trace::{Span as _, SpanId, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracer, SdkTracerProvider, SpanData};
use otel_rate_sampler::attributes::{SAMPLER_PARAM, SAMPLER_TYPE};
use otel_rate_sampler::{Algorithm, Clock, Limit, ManualClock, RateLimitingSampler};

const PHASE: &str = "test.phase";
const CHILDREN: usize = 3;
const THREADS: usize = 4;

fn model(algorithm: Algorithm, limit: Limit) -> Box<dyn Model> {
    let (n, w) = (limit.permits(), limit.window_nanos());
    match algorithm {
        Algorithm::FixedWindow => Box::new(FixedModel::new(n, w)),
        Algorithm::SlidingWindow => Box::new(SlidingCounterModel::new(n, w)),
        Algorithm::SlidingLog => Box::new(SlidingLogModel::new(n, w)),
        Algorithm::BucketedWindow => Box::new(BucketedModel::new(n, w, limit.sub_windows())),
        other => panic!("no model for {other}"),
    }
}

/// One trace: a root carrying its phase, and [`CHILDREN`] children of its context.
fn trace(tracer: &SdkTracer, phase: usize) {
    let root = tracer
        .span_builder("root")
        .with_attributes([KeyValue::new(PHASE, phase as i64)])
        .start_with_context(tracer, &Context::new());
    let cx = Context::new().with_span(root);
    for i in 0..CHILDREN {
        let mut child = tracer.start_with_context(format!("child-{i}"), &cx);
        child.end();
    }
    cx.span().end();
}

/// Runs `times.len()` phases, phase `p` with the clock at `times[p]` and
/// `1 + THREADS * per_thread` traces offered, and returns the exported spans with the
/// traces the model expects per phase.
fn run(
    algorithm: Algorithm,
    limit: Limit,
    times: &[u64],
    per_thread: usize,
) -> (Vec<SpanData>, Vec<u64>) {
    let clock = ManualClock::new();
    let sampler = RateLimitingSampler::builder(limit)
        .algorithm(algorithm)
        .clock(clock.clone())
        .build();
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("sdk_provider");
    assert!(times.is_sorted(), "phases move the clock forward");
    let offered = (1 + THREADS * per_thread) as u64;
    let mut model = model(algorithm, limit);
    let expected: Vec<u64> = times
        .iter()
        .map(|&now| {
            let (admits, _) = model.admits(now, offered);
            model.record(now, admits);
            admits
        })
        .collect();

    // A panic (in the sampler, say) is counted, not propagated at once: a thread that
    // left early would leave the others waiting at a barrier for ever.
    let panics = AtomicUsize::new(0);
    let guarded = |f: &dyn Fn()| {
        if catch_unwind(AssertUnwindSafe(f)).is_err() {
            panics.fetch_add(1, Ordering::Relaxed);
        }
    };
    let start = Barrier::new(THREADS + 1);
    let end = Barrier::new(THREADS + 1);
    thread::scope(|scope| {
        for _ in 0..THREADS {
            let (start, end, tracer, guarded) = (&start, &end, &tracer, &guarded);
            scope.spawn(move || {
                for phase in 0..times.len() {
                    start.wait();
                    guarded(&|| {
                        for _ in 0..per_thread {
                            trace(tracer, phase);
                        }
                    });
                    end.wait();
                }
            });
        }
        for (phase, &now) in times.iter().enumerate() {
            clock.advance(Duration::from_nanos(now.saturating_sub(clock.now_nanos())));
            guarded(&|| trace(&tracer, phase)); // alone: any roll of the window is here
            start.wait();
            end.wait();
        }
    });
    assert_eq!(
        panics.into_inner(),
        0,
        "{algorithm}: span creation panicked"
    );
    provider.force_flush().unwrap();
    // Read before shutdown: shutting the in-memory exporter down clears it.
    let spans = exporter.get_finished_spans().unwrap();
    provider.shutdown().unwrap();
    (spans, expected)
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

/// Checks the exported spans and returns the traces per phase.
fn check_export(spans: &[SpanData], limit: Limit, what: &str) -> BTreeMap<usize, u64> {
    let mut traces: HashMap<_, Vec<&SpanData>> = HashMap::new();
    for span in spans {
        assert!(
            span.span_context.is_sampled(),
            "{what}: exported an unsampled span"
        );
        traces
            .entry(span.span_context.trace_id())
            .or_default()
            .push(span);
    }
    let mut per_phase = BTreeMap::new();
    for (trace_id, trace) in &traces {
        let roots: Vec<_> = trace
            .iter()
            .filter(|s| s.parent_span_id == SpanId::INVALID)
            .collect();
        assert_eq!(
            roots.len(),
            1,
            "{what}: trace {trace_id} exported {} roots (children without their root?): {:?}",
            roots.len(),
            trace.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        let root = roots[0];
        assert_eq!(root.name, "root");
        assert_eq!(
            attr(root, SAMPLER_TYPE),
            Some(&Value::from("ratelimiting")),
            "{what}: root of {trace_id}"
        );
        assert_eq!(
            attr(root, SAMPLER_PARAM),
            Some(&Value::F64(limit.per_second_rate())),
            "{what}: root of {trace_id}"
        );
        let root_id = root.span_context.span_id();
        let mut children: Vec<_> = trace
            .iter()
            .filter(|s| s.span_context.span_id() != root_id)
            .map(|child| {
                assert_eq!(
                    child.parent_span_id, root_id,
                    "{what}: {} of {trace_id} is not a child of its root",
                    child.name
                );
                assert_eq!(child.span_context.trace_id(), *trace_id);
                assert!(
                    attr(child, SAMPLER_TYPE).is_none() && attr(child, SAMPLER_PARAM).is_none(),
                    "{what}: child {} carries the sampler's attributes: {:?}",
                    child.name,
                    child.attributes
                );
                child.name.to_string()
            })
            .collect();
        children.sort();
        assert_eq!(
            children,
            ["child-0", "child-1", "child-2"],
            "{what}: trace {trace_id}"
        );
        let Some(Value::I64(phase)) = attr(root, PHASE) else {
            panic!(
                "{what}: root of {trace_id} lost its phase: {:?}",
                root.attributes
            );
        };
        *per_phase.entry(*phase as usize).or_insert(0) += 1;
    }
    assert_eq!(spans.len(), traces.len() * (1 + CHILDREN));
    per_phase
}

/// Phases one window apart (two for the sliding counter, whose previous window, if
/// full, weighs fully at the start of the next one and refuses everything there).
fn window_steps(algorithm: Algorithm, limit: Limit, phases: u64) -> Vec<u64> {
    let step = match algorithm {
        Algorithm::SlidingWindow => 2 * limit.window_nanos(),
        _ => limit.window_nanos(),
    };
    (0..phases).map(|p| p * step).collect()
}

#[test]
fn every_algorithm_exports_exactly_n_whole_traces_per_window() {
    let limit = Limit::per_window(10, Duration::from_secs(2))
        .unwrap()
        .unpaced();
    for algorithm in Algorithm::ALL {
        let what = format!("{algorithm} at {limit}");
        let times = window_steps(algorithm, limit, 5);
        // 1 + 4 × 8 = 33 traces offered per phase, more than N.
        let (spans, expected) = run(algorithm, limit, &times, 8);
        assert_eq!(expected, vec![10; times.len()], "{what}: the model");
        let per_phase = check_export(&spans, limit, &what);
        for (phase, &want) in expected.iter().enumerate() {
            let got = per_phase.get(&phase).copied().unwrap_or(0);
            assert_eq!(
                got,
                want,
                "{what}: phase {phase} (window {}) exported {got} traces",
                times[phase] / limit.window_nanos()
            );
        }
    }
}

#[test]
fn fractional_rate_keeps_one_trace_per_two_seconds() {
    let limit = Limit::per_second(0.5).unwrap();
    assert_eq!(
        (limit.permits(), limit.window()),
        (1, Duration::from_secs(2))
    );
    let s = 1_000_000_000;
    // Whole windows, half windows, and the last nanosecond of a window.
    let times = [
        0,
        s,
        2 * s,
        3 * s,
        4 * s - 1,
        4 * s,
        6 * s,
        8 * s,
        11 * s,
        12 * s,
    ];
    for algorithm in Algorithm::ALL {
        let what = format!("{algorithm} at {limit}");
        let (spans, expected) = run(algorithm, limit, &times, 2);
        let per_phase = check_export(&spans, limit, &what);
        let mut per_window = BTreeMap::new();
        for (phase, &want) in expected.iter().enumerate() {
            let got = per_phase.get(&phase).copied().unwrap_or(0);
            assert_eq!(
                got, want,
                "{what}: phase {phase} at {} ns exported {got}",
                times[phase]
            );
            *per_window
                .entry(times[phase] / limit.window_nanos())
                .or_insert(0) += got;
        }
        for (window, got) in per_window {
            assert!(got <= 1, "{what}: {got} traces in 2 s window {window}");
        }
        let total: u64 = expected.iter().sum();
        assert!(total >= 3, "{what}: only {total} traces over 12 s");
        if algorithm == Algorithm::FixedWindow {
            // One in each 2 s window the phases touch: 0, 1, 2, 3, 4, 5, 6.
            assert_eq!(
                expected,
                [1, 0, 1, 0, 0, 1, 1, 1, 1, 1],
                "{what}: the model"
            );
        }
    }
}
