//! What a trace costs under `tracing` + `tracing-opentelemetry` when the sampler drops
//! it: a root and 3 children, 5 fields each, through the same pipeline (registry, the
//! OpenTelemetry layer, an SDK provider with a no-op exporter) with our sampler
//! rejecting, beside `AlwaysOff` (the floor: the layer's own work on a dropped span) and
//! `AlwaysOn` (every span recorded and handed to the processor). Target: rejecting
//! costs at most 1.2× the `AlwaysOff` pipeline.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_main, Criterion};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::testing::trace::NoopSpanExporter;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, ShouldSample};
use otel_rate_sampler::{Limit, ManualClock, RateLimitingSampler};
use tracing_subscriber::layer::SubscriberExt as _;

/// One request: a root span and three children, five fields each.
fn trace(i: i64) {
    let root = tracing::info_span!(
        "request",
        http.method = "GET",
        http.route = "/items/{id}",
        item.id = i,
        cache.hit = false,
        ratio = 0.5
    );
    let _entered = root.enter();
    for step in 0..3_i64 {
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

fn pipeline(sampler: impl ShouldSample + 'static) -> (tracing::Dispatch, SdkTracerProvider) {
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_simple_exporter(NoopSpanExporter::new())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench")));
    (tracing::Dispatch::new(subscriber), provider)
}

fn bench(c: &mut Criterion) {
    // Our sampler with its one permit spent and a clock that never moves: every root is
    // refused, and every child follows its dropped root.
    let rejecting =
        RateLimitingSampler::builder(Limit::per_window(1, Duration::from_secs(1)).unwrap())
            .clock(ManualClock::new())
            .build();
    let cases = [
        ("AlwaysOff", pipeline(Sampler::AlwaysOff)),
        ("rate_limiting_rejecting", pipeline(rejecting)),
        ("AlwaysOn", pipeline(Sampler::AlwaysOn)),
    ];
    let mut group = c.benchmark_group("tracing_root_and_3_children");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, (dispatch, provider)) in cases {
        tracing::dispatcher::with_default(&dispatch, || {
            trace(-1); // spends the rejecting sampler's permit
            let mut i = 0;
            group.bench_function(name, |b| {
                b.iter(|| {
                    i += 1;
                    trace(i);
                });
            });
        });
        drop(dispatch);
        let _ = provider.shutdown();
    }
    group.finish();
}

// `criterion_group!` makes an undocumented `pub fn`.
#[allow(missing_docs)]
mod harness {
    criterion::criterion_group!(benches, super::bench);
}
use harness::benches;
criterion_main!(benches);
