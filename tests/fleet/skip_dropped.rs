//! A fleet limit through `SkipDropped` (feature `tracing`): two replicas sharing one key
//! on a real `redis-server`, each a provider with the limit's sampler and `tracing` spans
//! through the layer. What each exports is whole traces, exactly those its roots kept,
//! and together no more than the fleet's N per window the run spans.

use std::collections::{HashMap, HashSet};
use std::thread;
use std::time::Instant;

use opentelemetry::trace::{TraceContextExt as _, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use otel_rate_sampler::{DroppedContextExt as _, RateLimitingSampler, SkipDropped};
use tracing_subscriber::layer::SubscriberExt as _;

use crate::load::{self, N, WINDOW};
use crate::server::Server;

/// A root and two children, each child with an event; what the root decided.
fn request() -> (TraceId, bool) {
    let root = tracing::info_span!("request");
    let _entered = root.enter();
    for step in 0..2 {
        tracing::info_span!("step", step).in_scope(|| tracing::info!(step, "working"));
    }
    let sc = root.otel_context().span().span_context().clone();
    (sc.trace_id(), sc.is_sampled())
}

#[test]
fn replicas_through_the_layer_export_whole_traces_under_the_fleet_cap() {
    let server = Server::start();
    let fleet = load::fleet(&[server.url()], "skip-dropped", 2);
    load::warm_up(&fleet, 2);
    let run = WINDOW * 6;
    let results: Vec<_> = thread::scope(|s| {
        let handles: Vec<_> = fleet
            .iter()
            .map(|limiter| {
                s.spawn(move || {
                    let exporter = InMemorySpanExporter::default();
                    let provider = SdkTracerProvider::builder()
                        .with_sampler(RateLimitingSampler::new(limiter.clone()))
                        .with_simple_exporter(exporter.clone())
                        .build();
                    let layer = SkipDropped::new(
                        tracing_opentelemetry::layer().with_tracer(provider.tracer("replica")),
                    );
                    let dispatch =
                        tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
                    let end = Instant::now() + run;
                    let mut decisions = Vec::new();
                    tracing::dispatcher::with_default(&dispatch, || {
                        // About 4 N per window offered between the two replicas.
                        while Instant::now() < end {
                            decisions.push(request());
                            thread::sleep(WINDOW / (2 * N));
                        }
                    });
                    let spans = exporter.get_finished_spans().unwrap();
                    (decisions, spans)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let mut kept_total = 0;
    for (decisions, spans) in &results {
        let kept: HashSet<TraceId> = decisions.iter().filter(|d| d.1).map(|d| d.0).collect();
        let dropped = decisions.len() - kept.len();
        assert!(
            !kept.is_empty() && dropped > 0,
            "{} kept, {dropped} dropped",
            kept.len()
        );
        let mut per_trace: HashMap<TraceId, usize> = HashMap::new();
        for span in spans {
            *per_trace.entry(span.span_context.trace_id()).or_default() += 1;
        }
        let exported: HashSet<TraceId> = per_trace.keys().copied().collect();
        assert_eq!(exported, kept, "exactly the kept traces exported");
        assert!(per_trace.values().all(|n| *n == 3), "every trace whole");
        kept_total += kept.len();
    }
    // The fleet's own count, per window and stamped at admission, is the cap's proof
    // (tests/fleet/single.rs); here: no more kept than N per window the run spans.
    let windows = (run.as_secs_f64() / WINDOW.as_secs_f64()).ceil() as usize + 1;
    assert!(
        kept_total <= N as usize * windows,
        "{kept_total} kept over at most {windows} windows of {N}"
    );
}
