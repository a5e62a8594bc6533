//! End to end through a real OTLP receiver: traffic from several threads, through the
//! SDK API and through `tracing` + `tracing-opentelemetry`, exported over gRPC and over
//! HTTP/protobuf. What the receiver got must be at most N traces per window, every trace
//! whole, and nothing lost after `shutdown()`.

use std::time::Duration;

use crate::receiver::{Offered, Receiver, Transport, WINDOW_KEY};
use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracerProvider;
use otel_rate_sampler::{Limit, ManualClock, RateLimitingSampler};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

const LIMIT: u32 = 5;
const WINDOW: Duration = Duration::from_secs(1);
const THREADS: usize = 4;
const WINDOWS: u64 = 6;
/// Offered per thread per window: 4 × 8 = 32 offered for 5 kept.
const PER_THREAD: usize = 8;
/// A root and three children.
const SPANS_PER_TRACE: usize = 4;

fn sampler(clock: &ManualClock) -> RateLimitingSampler<otel_rate_sampler::AnyLimiter<ManualClock>> {
    RateLimitingSampler::builder(Limit::per_window(LIMIT, WINDOW).unwrap().unpaced())
        .clock(clock.clone())
        .build()
}

fn per_second() -> f64 {
    f64::from(LIMIT) / WINDOW.as_secs_f64()
}

/// Sets up a receiver and a provider exporting to it over `transport`, lets `traffic`
/// offer traces, shuts the provider down and checks what the receiver got.
fn end_to_end(
    transport: Transport,
    traffic: impl FnOnce(&SdkTracerProvider, &ManualClock) -> Vec<Offered>,
) {
    let receiver = Receiver::start();
    let clock = ManualClock::new();
    let provider = crate::receiver::provider(
        "e2e",
        sampler(&clock),
        crate::receiver::exporter(&receiver, transport),
    );
    let offered = traffic(&provider, &clock);
    provider.shutdown().expect("provider shutdown flushes");
    crate::receiver::assert_capped_and_whole(
        &receiver.traces(),
        &offered,
        LIMIT as usize,
        per_second(),
        SPANS_PER_TRACE,
    );
}

/// Traces made with the SDK API: a root with its window, three children under it.
fn sdk_traffic(provider: &SdkTracerProvider, clock: &ManualClock) -> Vec<Offered> {
    let tracer = provider.tracer("e2e");
    crate::receiver::drive(THREADS, WINDOWS, PER_THREAD, clock, WINDOW, |window| {
        let root = tracer
            .span_builder("request")
            .with_attributes([KeyValue::new(WINDOW_KEY, window as i64)])
            .start(&tracer);
        let sc = root.span_context().clone();
        let cx = Context::current_with_span(root);
        for i in 0..3 {
            let mut child = tracer.start_with_context(format!("step-{i}"), &cx);
            child.set_attribute(KeyValue::new("step", i64::from(i)));
            child.end();
        }
        cx.span().end();
        Offered::new(&sc, window)
    })
}

#[test]
fn sdk_traffic_over_grpc_arrives_capped_and_whole() {
    end_to_end(Transport::Grpc, sdk_traffic);
}

#[test]
fn sdk_traffic_over_http_arrives_capped_and_whole() {
    end_to_end(Transport::Http, sdk_traffic);
}

/// The same traffic through `tracing` spans with a few fields each.
fn tracing_traffic(provider: &SdkTracerProvider, clock: &ManualClock) -> Vec<Offered> {
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("e2e")));
    let dispatch = tracing::Dispatch::new(subscriber);

    crate::receiver::drive(THREADS, WINDOWS, PER_THREAD, clock, WINDOW, |window| {
        tracing::dispatcher::with_default(&dispatch, || {
            let root = tracing::info_span!(
                "request",
                test.window = window as i64,
                http.method = "GET",
                http.route = "/items/{id}",
                user.id = 42_i64,
                cache.hit = false
            );
            let sc = root.context().span().span_context().clone();
            root.in_scope(|| {
                for i in 0..3_u64 {
                    let child = tracing::info_span!("step", step = i, db.system = "none");
                    child.in_scope(|| tracing::info!(i, "working"));
                }
            });
            Offered::new(&sc, window)
        })
    })
}

#[test]
fn tracing_traffic_over_grpc_arrives_capped_and_whole() {
    end_to_end(Transport::Grpc, tracing_traffic);
}

#[test]
fn tracing_traffic_over_http_arrives_capped_and_whole() {
    end_to_end(Transport::Http, tracing_traffic);
}
