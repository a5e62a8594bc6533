//! The plain OpenTelemetry SDK with the rate-limiting sampler, exporting over OTLP:
//! gRPC (tonic, on a tokio runtime) or HTTP/protobuf (blocking client, no runtime).
//!
//! ```text
//! cargo run --example sdk_provider                 # gRPC to OTEL_EXPORTER_OTLP_ENDPOINT or localhost:4317
//! cargo run --example sdk_provider -- http         # HTTP/protobuf, localhost:4318/v1/traces
//! OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 \
//!     cargo run --example sdk_provider
//! ```
//!
//! It offers 100 traces (a root and 3 children) as fast as it can under a limit of 10
//! traces per second, so about 10 are kept, and prints what was kept and sent. With no
//! collector listening it says so in one line and goes on without export.

mod support;

use std::process::ExitCode;

use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use otel_rate_sampler::RateLimitingSampler;
use support::{Otlp, Target};

const OFFERED: u32 = 100;

fn main() -> ExitCode {
    support::main("sdk_provider", run)
}

fn run() -> Result<(), String> {
    let mut otlp = Otlp::connect(Target::new(None, support::protocol_arg()?))?;

    // At most 10 traces a second leave this process; children follow their root.
    let sampler = RateLimitingSampler::per_second(10.0).map_err(|e| e.to_string())?;
    let builder = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_resource(
            Resource::builder()
                .with_service_name("sdk-provider-example")
                .build(),
        );
    let provider = otlp.install(builder).build();
    let tracer = provider.tracer("sdk_provider");

    let mut kept = 0;
    for i in 0..OFFERED {
        tracer.in_span("GET /items/{id}", |cx| {
            let root = cx.span();
            root.set_attribute(KeyValue::new("item.id", i64::from(i)));
            if root.span_context().is_sampled() {
                kept += 1;
            }
            for step in ["auth", "load", "render"] {
                let mut child = tracer.start(step);
                child.set_attribute(KeyValue::new("step", step));
                child.end();
            }
        });
    }

    // Flushes the batch processor: every kept span is sent (or has failed) after this.
    provider
        .shutdown()
        .map_err(|e| format!("provider shutdown: {e}"))?;
    otlp.finish(OFFERED, kept);
    Ok(())
}
