//! `tracing` + `tracing-opentelemetry` with the rate-limiting sampler and an OTLP
//! exporter: the way most Rust services emit spans.
//!
//! ```text
//! cargo run --example tracing_subscriber                  # gRPC to OTEL_EXPORTER_OTLP_ENDPOINT or localhost:4317
//! cargo run --example tracing_subscriber -- http          # HTTP/protobuf, localhost:4318/v1/traces
//! ```
//!
//! The sampler sees each tracing span once, when tracing-opentelemetry starts its
//! OpenTelemetry span (on first enter), with the fields given in `info_span!`. A root
//! asks the limiter; its children follow it, so a kept request arrives whole and a
//! dropped one not at all. With no collector listening the example says so in one line
//! and goes on without export.

mod support;

use std::process::ExitCode;

use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use otel_rate_sampler::RateLimitingSampler;
use support::{Otlp, Target};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

const OFFERED: u32 = 100;

fn main() -> ExitCode {
    support::main("tracing_subscriber", run)
}

fn run() -> Result<(), String> {
    let mut otlp = Otlp::connect(Target::new(None, support::protocol_arg()?))?;

    let sampler = RateLimitingSampler::per_second(10.0).map_err(|e| e.to_string())?;
    let builder = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_resource(
            Resource::builder()
                .with_service_name("tracing-subscriber-example")
                .build(),
        );
    let provider = otlp.install(builder).build();

    // The registry with one layer: tracing spans become OpenTelemetry spans.
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("tracing_subscriber")));
    let kept = tracing::subscriber::with_default(subscriber, || {
        (0..OFFERED)
            .filter(|&i| handle_request(i64::from(i)))
            .count()
    });

    provider
        .shutdown()
        .map_err(|e| format!("provider shutdown: {e}"))?;
    otlp.finish(OFFERED, kept);
    Ok(())
}

/// One request: a root span and three children, a few fields each. Says whether the
/// sampler kept the trace.
fn handle_request(id: i64) -> bool {
    let root = tracing::info_span!(
        "GET /items/{id}",
        otel.kind = "server",
        http.request.method = "GET",
        http.route = "/items/{id}",
        item.id = id
    );
    let _entered = root.enter();
    for step in ["auth", "load", "render"] {
        tracing::info_span!("step", step, item.id = id).in_scope(|| {
            tracing::debug!(step, "done");
        });
    }
    root.context().span().span_context().is_sampled()
}
