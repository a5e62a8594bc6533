//! `SkipDropped` end to end through a real OTLP receiver: kept traces arrive as the plain
//! OpenTelemetry layer sends them (same spans, parents, attributes and trace state,
//! `ot=th` included), dropped ones send nothing, and a downstream service that follows
//! its parent drops exactly the traces the upstream dropped, as the `traceparent` it
//! received says.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{
    SpanId, SpanKind, TraceContextExt as _, TraceId, Tracer as _, TracerProvider as _,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::IdGenerator;
use otel_rate_sampler::{
    AdaptiveSampler, DroppedContextExt as _, Limit, ManualClock, RateLimitingSampler, SkipDropped,
};
use tracing_subscriber::layer::SubscriberExt as _;

use crate::receiver::{ReceivedSpan, Receiver, Transport};

thread_local! {
    /// The trace id the next root of this thread gets: set per request, so the same
    /// request has the same trace id through either layer.
    static NEXT_TRACE: Cell<u128> = const { Cell::new(1) };
}

/// Trace ids from [`NEXT_TRACE`], span ids from a counter.
#[derive(Debug, Default)]
struct PerRequest(AtomicU64);

impl IdGenerator for PerRequest {
    fn new_trace_id(&self) -> TraceId {
        TraceId::from(NEXT_TRACE.with(Cell::get))
    }

    fn new_span_id(&self) -> SpanId {
        // Relaxed: a counter for ids, nothing else depends on it.
        SpanId::from(self.0.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// Request `n`'s trace id: well spread in its low 56 bits, which `th` compares.
fn trace_id(n: u64) -> u128 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (u128::from(n) << 64) | u128::from(z ^ (z >> 31))
}

const REQUESTS: u64 = 60;
const WINDOW: Duration = Duration::from_secs(1);

/// One request as a service handles it: a root with fields, three children, an event,
/// a grandchild under an explicit parent, a record on the root.
fn request(n: u64) {
    NEXT_TRACE.with(|next| next.set(trace_id(n)));
    let root = tracing::info_span!(
        "request",
        n,
        http.route = "/items/{id}",
        status = tracing::field::Empty
    );
    let _entered = root.enter();
    for step in 0..3_u64 {
        let child = tracing::info_span!("step", step, db.system = "none");
        child.in_scope(|| {
            tracing::info!(step, "working");
            tracing::info_span!(parent: &child, "query", rows = 3).in_scope(|| ());
        });
    }
    root.record("status", 200);
}

/// What the receiver got, by request: each span by its name path, with its attributes
/// and trace state.
fn canonical(spans: &[ReceivedSpan]) -> BTreeMap<u64, BTreeMap<String, String>> {
    let by_id: HashMap<SpanId, &ReceivedSpan> = spans.iter().map(|s| (s.span_id, s)).collect();
    let mut out: BTreeMap<u64, BTreeMap<String, String>> = BTreeMap::new();
    for span in spans {
        let mut path = vec![span.name.clone()];
        let mut at = span;
        while let Some(parent) = at.parent_span_id.and_then(|p| by_id.get(&p)) {
            path.push(parent.name.clone());
            at = parent;
        }
        path.reverse();
        let n = (span.trace_id.to_bytes()[..8])
            .iter()
            .fold(0_u64, |acc, b| (acc << 8) | u64::from(*b));
        let mut attributes: Vec<String> = span
            .attributes
            .iter()
            .filter(|kv| !matches!(kv.key.as_str(), "busy_ns" | "idle_ns" | "thread.id"))
            .map(|kv| format!("{}={:?}", kv.key, kv.value))
            .collect();
        attributes.sort();
        let mut key = path.join("/");
        let spans = out.entry(n).or_default();
        while spans.contains_key(&key) {
            key.push('+');
        }
        spans.insert(key, format!("{attributes:?} {}", span.trace_state));
    }
    out
}

/// `REQUESTS` requests, a tenth of a window apart on a manual clock, through the
/// OpenTelemetry layer (inside `SkipDropped` if `skip`) to a real receiver over gRPC,
/// sampled by an `AdaptiveSampler` of 3 per window (consistent probability, `th` on
/// what it keeps): what arrived.
fn run(skip: bool) -> BTreeMap<u64, BTreeMap<String, String>> {
    let receiver = Receiver::start();
    let clock = ManualClock::new();
    clock.advance(Duration::from_millis(420)); // part-way into a window
    let sampler = AdaptiveSampler::builder(Limit::per_window(3, WINDOW).unwrap())
        .clock(clock.clone())
        .build();
    let provider = crate::receiver::provider_with_ids(
        "upstream",
        sampler,
        crate::receiver::exporter(&receiver, Transport::Grpc),
        PerRequest::default(),
    );
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("upstream"));
    let dispatch = if skip {
        tracing::Dispatch::new(tracing_subscriber::registry().with(SkipDropped::new(layer)))
    } else {
        tracing::Dispatch::new(tracing_subscriber::registry().with(layer))
    };
    tracing::dispatcher::with_default(&dispatch, || {
        for n in 0..REQUESTS {
            request(n);
            clock.advance(WINDOW / 10);
        }
    });
    provider.shutdown().expect("provider shutdown flushes");
    canonical(&receiver.spans())
}

#[test]
fn kept_traces_arrive_as_through_the_plain_layer_and_dropped_ones_not_at_all() {
    let plain = run(false);
    let skipping = run(true);
    assert!(
        plain.len() > 3 && plain.len() < REQUESTS as usize,
        "{} of {REQUESTS} kept: both paths taken",
        plain.len()
    );
    assert_eq!(skipping, plain);
    for (n, spans) in &skipping {
        assert_eq!(spans.len(), 7, "request {n} whole: {spans:?}");
        assert!(
            spans.values().all(|s| s.contains("th:")),
            "request {n}: th on every span: {spans:?}"
        );
    }
}

/// `traceparent`'s trace id and sampled flag.
fn parse(header: &str) -> (TraceId, bool) {
    let parts: Vec<&str> = header.split('-').collect();
    let trace = u128::from_str_radix(parts[1], 16).unwrap();
    (TraceId::from(trace), parts[3] == "01")
}

#[test]
fn a_downstream_service_drops_exactly_the_traces_the_upstream_dropped() {
    let receiver = Receiver::start();
    let clock = ManualClock::new();
    let upstream = crate::receiver::provider(
        "upstream",
        RateLimitingSampler::builder(Limit::per_window(3, WINDOW).unwrap().unpaced())
            .clock(clock.clone())
            .build(),
        crate::receiver::exporter(&receiver, Transport::Grpc),
    );
    // Following its parents, with a limit it never reaches on its own roots.
    let downstream = crate::receiver::provider(
        "downstream",
        RateLimitingSampler::builder(Limit::per_window(1000, WINDOW).unwrap().unpaced())
            .clock(clock.clone())
            .build(),
        crate::receiver::exporter(&receiver, Transport::Grpc),
    );
    let downstream_tracer = downstream.tracer("downstream");
    let layer =
        SkipDropped::new(tracing_opentelemetry::layer().with_tracer(upstream.tracer("upstream")));
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));

    let mut upstream_decisions = Vec::new();
    let mut received_headers = Vec::new();
    tracing::dispatcher::with_default(&dispatch, || {
        for window in 0..4 {
            for _ in 0..10 {
                let root = tracing::info_span!("request", window);
                let decided = root.otel_context().span().span_context().clone();
                upstream_decisions.push((decided.trace_id(), decided.is_sampled()));
                root.in_scope(|| {
                    let call = tracing::info_span!("call downstream");
                    call.in_scope(|| {
                        let mut carrier = HashMap::new();
                        TraceContextPropagator::new()
                            .inject_context(&call.otel_context(), &mut carrier);
                        let header = carrier.get("traceparent").expect("a traceparent").clone();
                        received_headers.push(parse(&header));
                        // "Over the wire": the downstream sees only the carrier.
                        let parent = TraceContextPropagator::new().extract(&carrier);
                        let span = downstream_tracer
                            .span_builder("handle")
                            .with_kind(SpanKind::Server)
                            .start_with_context(&downstream_tracer, &parent);
                        drop(span);
                    });
                });
            }
            clock.advance(WINDOW);
        }
    });
    upstream.shutdown().expect("flush");
    downstream.shutdown().expect("flush");

    // The header says what the upstream decided, for every trace.
    assert_eq!(received_headers, upstream_decisions);
    let kept: HashSet<TraceId> = upstream_decisions
        .iter()
        .filter(|d| d.1)
        .map(|d| d.0)
        .collect();
    assert_eq!(kept.len(), 3 * 4);
    let spans = receiver.spans();
    let downstream_traces: HashSet<TraceId> = spans
        .iter()
        .filter(|s| s.service == "downstream")
        .map(|s| s.trace_id)
        .collect();
    let upstream_traces: HashSet<TraceId> = spans
        .iter()
        .filter(|s| s.service == "upstream")
        .map(|s| s.trace_id)
        .collect();
    assert_eq!(
        downstream_traces, kept,
        "the downstream kept exactly the upstream's"
    );
    assert_eq!(upstream_traces, kept);
    assert_eq!(
        spans.len(),
        kept.len() * 3,
        "request, call, handle per kept trace"
    );
}
