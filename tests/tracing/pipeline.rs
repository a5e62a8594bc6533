//! A provider exporting to memory, `tracing` spans through the OpenTelemetry layer with
//! or without `SkipDropped`, and the checks every test makes of what was exported.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use opentelemetry::trace::{SpanId, TraceContextExt as _, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, SdkTracer, SdkTracerProvider, ShouldSample, SpanData,
};
use otel_rate_sampler::{DroppedContextExt as _, SkipDropped};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;

/// While at most one dispatcher is registered, tracing-core computes a callsite's
/// cached interest from the registering thread's default dispatcher alone, without a
/// lock: a test registering a callsite then can overwrite the interest another test's
/// new dispatcher has just computed, so a filter is skipped (a filtered-out span
/// reaches the layers) or a span never reaches them. Two dispatchers registered for
/// the whole run keep every test of this binary on tracing-core's locked path.
fn keep_interest_locked() {
    static KEEP: OnceLock<[tracing::Dispatch; 2]> = OnceLock::new();
    KEEP.get_or_init(|| {
        [(); 2].map(|()| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()))
    });
}

/// A provider with `sampler`, exporting every ended span to memory at once.
pub(crate) struct Provider {
    pub(crate) provider: SdkTracerProvider,
    pub(crate) exporter: InMemorySpanExporter,
}

impl Provider {
    pub(crate) fn new(sampler: impl ShouldSample + 'static) -> Self {
        keep_interest_locked();
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_sampler(sampler)
            .with_simple_exporter(exporter.clone())
            .build();
        Self { provider, exporter }
    }

    pub(crate) fn tracer(&self) -> SdkTracer {
        self.provider.tracer("skip-dropped-test")
    }

    /// The OpenTelemetry layer on this provider, as the README sets it up.
    pub(crate) fn layer<S>(&self) -> OpenTelemetryLayer<S, SdkTracer>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer().with_tracer(self.tracer())
    }

    /// The registry with the OpenTelemetry layer, inside `SkipDropped` if `skip`.
    pub(crate) fn dispatch(&self, skip: bool) -> tracing::Dispatch {
        if skip {
            tracing::Dispatch::new(
                tracing_subscriber::registry().with(SkipDropped::new(self.layer())),
            )
        } else {
            tracing::Dispatch::new(tracing_subscriber::registry().with(self.layer()))
        }
    }

    /// Every span exported so far.
    pub(crate) fn spans(&self) -> Vec<SpanData> {
        self.exporter.get_finished_spans().expect("in-memory spans")
    }
}

/// The trace a root span decided: its id and whether it was kept (sampled), as its own
/// OpenTelemetry context says (the root always reaches the inner layer).
pub(crate) fn decision(root: &tracing::Span) -> (TraceId, bool) {
    let cx = root.otel_context();
    let sc = cx.span().span_context().clone();
    assert!(sc.is_valid(), "a root has a valid OpenTelemetry span");
    (sc.trace_id(), sc.is_sampled())
}

/// Exported spans by trace.
pub(crate) fn by_trace(spans: &[SpanData]) -> HashMap<TraceId, Vec<&SpanData>> {
    let mut traces: HashMap<TraceId, Vec<&SpanData>> = HashMap::new();
    for span in spans {
        traces
            .entry(span.span_context.trace_id())
            .or_default()
            .push(span);
    }
    traces
}

/// What was exported against what the roots decided: exactly the kept traces, each
/// with `per_trace` spans, one root among them and every other span's parent inside it.
pub(crate) fn assert_kept_whole(
    spans: &[SpanData],
    decisions: &[(TraceId, bool)],
    per_trace: usize,
) {
    let kept: HashSet<TraceId> = decisions.iter().filter(|d| d.1).map(|d| d.0).collect();
    let dropped: HashSet<TraceId> = decisions.iter().filter(|d| !d.1).map(|d| d.0).collect();
    let traces = by_trace(spans);
    let got: HashSet<TraceId> = traces.keys().copied().collect();
    assert!(
        got.is_disjoint(&dropped),
        "{} dropped traces exported spans",
        got.intersection(&dropped).count()
    );
    assert_eq!(got, kept, "exactly the kept traces are exported");
    for (trace_id, spans) in &traces {
        assert_eq!(
            spans.len(),
            per_trace,
            "trace {trace_id} whole: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        let ids: HashSet<SpanId> = spans.iter().map(|s| s.span_context.span_id()).collect();
        let roots = spans
            .iter()
            .filter(|s| !ids.contains(&s.parent_span_id))
            .count();
        assert_eq!(roots, 1, "trace {trace_id}: one root, the rest under it");
    }
}
