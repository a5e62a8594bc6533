//! Feature `metrics` end to end: a sampler's decisions reported through an
//! `SdkMeterProvider` and the OTLP metric exporter (gRPC and HTTP/protobuf) to the real
//! receiver must agree with the traces the same receiver got.

use std::collections::HashMap;
use std::time::Duration;

use crate::receiver::{Offered, Receiver, Transport};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use otel_rate_sampler::{Limit, ManualClock, RateLimitingSampler, SamplerMetrics};

const LIMIT: u32 = 5;
const WINDOW: Duration = Duration::from_secs(1);
const THREADS: usize = 4;
const WINDOWS: u64 = 4;
const PER_THREAD: usize = 6;

/// The data points of the cumulative sum `name` in the last export that has it, as
/// (attributes as text, value).
fn points(
    requests: &[ExportMetricsServiceRequest],
    name: &str,
) -> Vec<(HashMap<String, String>, u64)> {
    let metric = last_metric(requests, name);
    let Some(Data::Sum(sum)) = &metric.data else {
        panic!("{name} is not a sum");
    };
    assert!(sum.is_monotonic, "{name} is a counter");
    sum.data_points
        .iter()
        .map(|p| {
            let attrs = p.attributes.iter().map(attribute_text).collect();
            let value = match p.value {
                Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(
                    i,
                )) => u64::try_from(i).expect("a count"),
                other => panic!("{name}: not an integer point: {other:?}"),
            };
            (attrs, value)
        })
        .collect()
}

/// The metric `name` in the last export that has it.
pub(crate) fn last_metric<'a>(
    requests: &'a [ExportMetricsServiceRequest],
    name: &str,
) -> &'a Metric {
    requests
        .iter()
        .flat_map(|r| &r.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .rfind(|m| m.name == name)
        .unwrap_or_else(|| panic!("no {name} exported"))
}

/// An exported attribute as (key, value as text: strings as they are, other values
/// as their debug form).
pub(crate) fn attribute_text(kv: &KeyValue) -> (String, String) {
    let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        other => format!("{other:?}"),
    };
    (kv.key.clone(), value)
}

/// The sum of the points of `name` whose attributes include every pair of `filter`.
fn total(points: &[(HashMap<String, String>, u64)], filter: &[(&str, &str)]) -> u64 {
    points
        .iter()
        .filter(|(attrs, _)| {
            filter
                .iter()
                .all(|(k, v)| attrs.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, n)| n)
        .sum()
}

fn metrics_end_to_end(transport: Transport) {
    let receiver = Receiver::start();
    let clock = ManualClock::new();
    let sampler = RateLimitingSampler::builder(Limit::per_window(LIMIT, WINDOW).unwrap().unpaced())
        .clock(clock.clone())
        .build();

    let reader = PeriodicReader::builder(crate::receiver::metric_exporter(&receiver, transport))
        // Only the shutdown exports: one cumulative snapshot after all the traffic.
        .with_interval(Duration::from_secs(3600))
        .build();
    let meters = SdkMeterProvider::builder().with_reader(reader).build();
    SamplerMetrics::with_meter(meters.meter("e2e"))
        .span_started(true)
        .register(&sampler);

    let traces = crate::receiver::provider(
        "e2e-metrics",
        sampler.clone(),
        crate::receiver::exporter(&receiver, transport),
    );
    let tracer = traces.tracer("e2e");
    let offered = crate::receiver::drive(THREADS, WINDOWS, PER_THREAD, &clock, WINDOW, |w| {
        let root = tracer.start("request");
        let sc = root.span_context().clone();
        let cx = Context::current_with_span(root);
        tracer.start_with_context("child", &cx);
        cx.span().end();
        Offered::new(&sc, w)
    });
    traces.shutdown().expect("trace provider shutdown flushes");
    meters.shutdown().expect("meter provider shutdown flushes");

    let received = receiver.traces().len() as u64;
    let kept = offered.iter().filter(|o| o.kept).count() as u64;
    let offered = offered.len() as u64;
    assert_eq!(received, kept, "every kept trace reached the receiver");
    assert_eq!(kept, u64::from(LIMIT) * WINDOWS, "saturated windows");

    let metrics = receiver.metrics();
    let decisions = points(&metrics, SamplerMetrics::DECISIONS);
    let keep = ("otel.span.sampling_result", "RECORD_AND_SAMPLE");
    let drop = ("otel.span.sampling_result", "DROP");
    let root = ("otel.span.parent.origin", "none");
    let local = ("otel.span.parent.origin", "local");
    assert_eq!(
        total(&decisions, &[keep, root]),
        received,
        "roots kept = traces received"
    );
    assert_eq!(
        total(&decisions, &[drop, root]),
        offered - kept,
        "roots dropped"
    );
    assert_eq!(
        total(
            &decisions,
            &[drop, root, ("otel_rate_sampler.reason", "rate_limit")]
        ),
        offered - kept,
        "every dropped root was refused by the limit"
    );
    // Each root has one child, which follows it.
    assert_eq!(total(&decisions, &[keep, local]), kept);
    assert_eq!(
        total(
            &decisions,
            &[drop, local, ("otel_rate_sampler.reason", "parent")]
        ),
        offered - kept
    );
    assert_eq!(
        total(&decisions, &[]),
        2 * offered,
        "every span decided once"
    );

    let started = points(&metrics, SamplerMetrics::SPAN_STARTED);
    assert_eq!(total(&started, &[keep]), 2 * kept);
    assert_eq!(total(&started, &[drop]), 2 * (offered - kept));
}

#[test]
fn decisions_exported_over_grpc_match_the_traces_received() {
    metrics_end_to_end(Transport::Grpc);
}

#[test]
fn decisions_exported_over_http_match_the_traces_received() {
    metrics_end_to_end(Transport::Http);
}
