//! The composable samplers (feature `composable`): the decision cost of each built-in,
//! asked directly for its intent and through `CompositeSampler` as the SDK calls it
//! (`Box<dyn ShouldSample>`), beside the SDK's `TraceIdRatioBased` and `ParentBased`, in
//! one run.
//!
//! Groups (figures and how to reproduce them in `BENCHMARKS.md`):
//!
//! * `composable_root`: a root span (parent `Some(&Context::new())`, what the SDK
//!   passes). The SDK's `TraceIdRatioBased(0.5)` keeping and dropping, and
//!   `ParentBased(TraceIdRatioBased(0.5))` keeping; each built-in through
//!   `CompositeSampler` (`composite_*`) keeping and, where it can, dropping; and each
//!   built-in's `sampling_intent` alone (`intent_*`). `ComposableRateLimiting` keeps with
//!   room in its cap (a fresh sampler for every chunk of 1024, nothing measured yet, so
//!   `p = 1`), drops by its threshold (the load measured, a span of low randomness) and
//!   by its cap (full); on a `ManualClock` (no clock read) and, for the cap, on the
//!   default monotonic clock.
//! * `composable_child`: a span whose local parent is sampled: the SDK's `ParentBased`
//!   beside `ComposableParentThreshold` (whose parent carries `th:8`).
//!
//! Every case asserts each timed decision (a bench panics rather than report a mix);
//! the sampler and the parent go through `black_box`, the result is read and dropped
//! inside the timed loop, as in `benches/sampler.rs`.

use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, ShouldSample};
use otel_rate_sampler::{
    ComposableAlwaysOff, ComposableAlwaysOn, ComposableAnnotating, ComposableParentThreshold,
    ComposableProbability, ComposableRateLimiting, ComposableRuleBased, ComposableSampler,
    CompositeSampler, Limit, ManualClock, Predicate,
};

#[path = "support/mod.rs"]
#[allow(dead_code)] // the threads harness serves the limiter benches
mod support;

use support::{chunked, CHUNK};

const NO_ATTRIBUTES: &[KeyValue] = &[];
const NO_LINKS: &[Link] = &[];
/// Kept by every sampler here: randomness (the low 56 bits) at its highest, and the SDK's
/// ratio test (the low 64 bits shifted right once, below `0.5 · 2^63`) passed.
const KEEP: TraceId = TraceId::from_bytes(0x00ff_ffff_ffff_ffff_u128.to_be_bytes());
/// Dropped by the SDK's `TraceIdRatioBased(0.5)`.
const SDK_DROP: TraceId = TraceId::from_bytes(0xffff_ffff_ffff_ffff_u128.to_be_bytes());
/// Dropped by a composable threshold of 1/2 or less: randomness 1.
const LOW: TraceId = TraceId::from_bytes(1u128.to_be_bytes());
const HOUR: Duration = Duration::from_secs(3600);

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// One `should_sample` for `id` under `parent`, with the arguments the SDK passes for a
/// server span named `GET /api/orders`: whether the span is sampled.
#[inline]
fn sample(sampler: &dyn ShouldSample, parent: &Context, id: TraceId) -> bool {
    black_box(sampler)
        .should_sample(
            Some(black_box(parent)),
            id,
            "GET /api/orders",
            &SpanKind::Server,
            NO_ATTRIBUTES,
            NO_LINKS,
        )
        .decision
        == SamplingDecision::RecordAndSample
}

/// One intent for the same span (the same arguments but the trace id, which an intent
/// is not given): whether its threshold keeps the randomness of `id`.
#[inline]
fn intent(sampler: &dyn ComposableSampler, parent: &Context, id: TraceId) -> bool {
    let randomness = (u128::from_be_bytes(id.to_bytes()) as u64) & ((1 << 56) - 1);
    black_box(sampler)
        .sampling_intent(
            Some(black_box(parent)),
            "GET /api/orders",
            &SpanKind::Server,
            NO_ATTRIBUTES,
            NO_LINKS,
        )
        .keeps(randomness)
}

/// Times `should_sample` on one sampler, asserting every decision is `kept`.
fn case(group: &mut Group<'_>, name: &str, sampler: &dyn ShouldSample, id: TraceId, kept: bool) {
    let root = Context::new();
    group.bench_function(name, |b| {
        b.iter_custom(|iters| chunked(iters, || (), |()| sample(sampler, &root, id), kept))
    });
}

/// Times `sampling_intent` on one sampler, asserting every intent keeps iff `kept`.
fn intent_case(
    group: &mut Group<'_>,
    name: &str,
    sampler: &dyn ComposableSampler,
    id: TraceId,
    kept: bool,
) {
    let root = Context::new();
    group.bench_function(name, |b| {
        b.iter_custom(|iters| chunked(iters, || (), |()| intent(sampler, &root, id), kept))
    });
}

/// The specification's example root: health checks off, server spans at 1/2, the rest
/// on. The bench's server span without attributes takes the second rule.
fn rule_based() -> ComposableRuleBased {
    ComposableRuleBased::builder()
        .rule(
            Predicate::new().attribute_values("url.path", ["/health"]),
            ComposableAlwaysOff,
        )
        .rule(
            Predicate::new().span_kinds([SpanKind::Server]),
            ComposableProbability::new(0.5).unwrap(),
        )
        .rule(Predicate::new(), ComposableAlwaysOn)
        .build()
}

fn annotating() -> ComposableAnnotating<ComposableProbability> {
    ComposableAnnotating::new(
        [KeyValue::new("sampled.by", "half")],
        ComposableProbability::new(0.5).unwrap(),
    )
}

/// `ComposableRateLimiting` of `permits` per hour over `ComposableAlwaysOn` on a
/// `ManualClock` that does not move unless `measured`: then 10 000 spans are offered over
/// an hour first (through a `CompositeSampler`, which asks its cap and counts them), so
/// its threshold keeps about 1 in 10 from the next hour on.
fn rate_limiting(
    permits: u32,
    measured: bool,
) -> ComposableRateLimiting<ComposableAlwaysOn, ManualClock> {
    let clock = ManualClock::new();
    let limit = Limit::per_window(permits, HOUR).unwrap();
    let s = ComposableRateLimiting::with_clock(ComposableAlwaysOn, limit, clock.clone());
    if measured {
        let root = Context::new();
        let composite = CompositeSampler::new(s.clone());
        for i in 0..10_000u64 {
            let id = TraceId::from_bytes(
                u128::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8).to_be_bytes(),
            );
            sample(&composite, &root, id);
            clock.advance(HOUR / 10_000);
        }
        clock.advance(HOUR);
    }
    s
}

/// The SDK's samplers and each built-in through `CompositeSampler`.
fn bench_composites(group: &mut Group<'_>) {
    let half = || ComposableProbability::new(0.5).unwrap();
    let boxed = |s| -> Box<dyn ShouldSample> { s };
    let composite = |s| boxed(Box::new(CompositeSampler::new(s)));
    let ratio = || Box::new(Sampler::TraceIdRatioBased(0.5));
    let cases: [(&str, Box<dyn ShouldSample>, TraceId, bool); 12] = [
        ("sdk_TraceIdRatioBased_keep", ratio(), KEEP, true),
        ("sdk_TraceIdRatioBased_drop", ratio(), SDK_DROP, false),
        (
            "sdk_ParentBased_keep",
            Box::new(Sampler::ParentBased(ratio())),
            KEEP,
            true,
        ),
        (
            "composite_AlwaysOn",
            Box::new(CompositeSampler::new(ComposableAlwaysOn)),
            KEEP,
            true,
        ),
        (
            "composite_AlwaysOff",
            Box::new(CompositeSampler::new(ComposableAlwaysOff)),
            KEEP,
            false,
        ),
        ("composite_Probability_keep", composite(half()), KEEP, true),
        ("composite_Probability_drop", composite(half()), LOW, false),
        (
            "composite_ParentThreshold_keep",
            Box::new(CompositeSampler::new(
                ComposableParentThreshold::new(half()),
            )),
            KEEP,
            true,
        ),
        (
            "composite_RuleBased_keep",
            Box::new(CompositeSampler::new(rule_based())),
            KEEP,
            true,
        ),
        (
            "composite_RuleBased_drop",
            Box::new(CompositeSampler::new(rule_based())),
            LOW,
            false,
        ),
        (
            "composite_Annotating_keep",
            Box::new(CompositeSampler::new(annotating())),
            KEEP,
            true,
        ),
        (
            "composite_RateLimiting_drop_threshold",
            Box::new(CompositeSampler::new(rate_limiting(CHUNK, true))),
            LOW,
            false,
        ),
    ];
    for (name, sampler, id, kept) in &cases {
        case(group, name, &**sampler, *id, *kept);
    }
}

/// `ComposableRateLimiting` keeping, and refusing by its cap on both clocks.
fn bench_rate_limiting(group: &mut Group<'_>) {
    let root = Context::new();
    group.bench_function("composite_RateLimiting_keep", |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                || CompositeSampler::new(rate_limiting(CHUNK, false)),
                |s| sample(s, &root, KEEP),
                true,
            )
        })
    });
    let full = CompositeSampler::new(rate_limiting(1, false));
    assert!(sample(&full, &root, KEEP));
    case(group, "composite_RateLimiting_drop_cap", &full, KEEP, false);
    let limit = Limit::per_window(1, HOUR).unwrap();
    let monotonic = CompositeSampler::new(ComposableRateLimiting::new(ComposableAlwaysOn, limit));
    assert!(sample(&monotonic, &root, KEEP));
    case(
        group,
        "composite_RateLimiting_drop_cap_monotonic",
        &monotonic,
        KEEP,
        false,
    );
}

/// Each built-in's `sampling_intent` alone.
fn bench_intents(group: &mut Group<'_>) {
    let half = || ComposableProbability::new(0.5).unwrap();
    let cases: [(&str, Box<dyn ComposableSampler>, TraceId, bool); 6] = [
        ("intent_AlwaysOn", Box::new(ComposableAlwaysOn), KEEP, true),
        ("intent_Probability_drop", Box::new(half()), LOW, false),
        (
            "intent_ParentThreshold_keep",
            Box::new(ComposableParentThreshold::new(half())),
            KEEP,
            true,
        ),
        ("intent_RuleBased_keep", Box::new(rule_based()), KEEP, true),
        ("intent_Annotating_keep", Box::new(annotating()), KEEP, true),
        (
            "intent_RateLimiting_drop_threshold",
            Box::new(rate_limiting(CHUNK, true)),
            LOW,
            false,
        ),
    ];
    for (name, sampler, id, kept) in &cases {
        intent_case(group, name, &**sampler, *id, *kept);
    }
}

fn bench_child(c: &mut Criterion) {
    let mut group = c.benchmark_group("composable_child");
    let local = |state: &str| {
        Context::new().with_remote_span_context(SpanContext::new(
            KEEP,
            SpanId::from(7u64),
            TraceFlags::SAMPLED,
            false,
            state.parse::<TraceState>().unwrap(),
        ))
    };
    let sdk = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(0.5)));
    let parent = local("");
    group.bench_function("sdk_ParentBased_local_sampled", |b| {
        b.iter_custom(|iters| chunked(iters, || (), |()| sample(&sdk, &parent, KEEP), true))
    });
    let ours = CompositeSampler::new(ComposableParentThreshold::new(
        ComposableProbability::new(0.5).unwrap(),
    ));
    let parent = local("ot=th:8");
    group.bench_function("composite_ParentThreshold_local_sampled", |b| {
        b.iter_custom(|iters| chunked(iters, || (), |()| sample(&ours, &parent, KEEP), true))
    });
    group.finish();
}

fn main() {
    // What `criterion_group!`/`criterion_main!` expand to, minus an undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("composable_root");
    bench_composites(&mut group);
    bench_rate_limiting(&mut group);
    bench_intents(&mut group);
    group.finish();
    bench_child(&mut c);
    c.final_summary();
}
