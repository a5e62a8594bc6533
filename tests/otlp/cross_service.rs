//! Trace integrity across services: three services in one process (`frontend` →
//! `backend` → `store`), each with its own provider, `service.name`, sampler and limit,
//! calling each other with W3C `traceparent` propagation through a `HashMap` carrier, and
//! all exporting over OTLP/gRPC to one real receiver.
//!
//! * By default the downstream services follow the upstream's decision: every trace the
//!   receiver got is whole across the three services.
//! * With `RemoteParents::Cap` on `backend`, its own cap holds for the traces it joins,
//!   and the price shows: the traces `frontend` kept and `backend` refused arrive broken
//!   (`frontend`'s spans only).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use crate::receiver::{Offered, Receiver, Transport, WINDOW_KEY};
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{
    Span as _, SpanKind, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use otel_rate_sampler::attributes::SAMPLER_TYPE;
use otel_rate_sampler::{Limit, ManualClock, RateLimitingSampler, RemoteParents};

const WINDOW: Duration = Duration::from_secs(1);
const FRONTEND_LIMIT: u32 = 5;
const BACKEND_CAP: u32 = 2;
const THREADS: usize = 4;
const WINDOWS: u64 = 5;
const PER_THREAD: usize = 8;
/// Two spans per service (its entry span and one child), three services.
const SPANS_PER_TRACE: usize = 6;

struct Service {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Service {
    fn new(
        name: &'static str,
        limit: u32,
        remote: RemoteParents,
        clock: &ManualClock,
        receiver: &Receiver,
    ) -> Self {
        let sampler =
            RateLimitingSampler::builder(Limit::per_window(limit, WINDOW).unwrap().unpaced())
                .remote_parents(remote)
                .clock(clock.clone())
                .build();
        let provider = crate::receiver::provider(
            name,
            sampler,
            crate::receiver::exporter(receiver, Transport::Grpc),
        );
        let tracer = provider.tracer(name);
        Self { provider, tracer }
    }

    /// Handles a request: an entry span under `parent` (remote, or none for the edge),
    /// then either a call to `next` with `traceparent` injected, or local work.
    fn handle(
        &self,
        parent: &Context,
        root_attrs: Vec<KeyValue>,
        next: &[&Service],
    ) -> opentelemetry::trace::SpanContext {
        let entry = self
            .tracer
            .span_builder("handle")
            .with_kind(SpanKind::Server)
            .with_attributes(root_attrs)
            .start_with_context(&self.tracer, parent);
        let cx = parent.with_span(entry);
        let sc = cx.span().span_context().clone();
        match next.split_first() {
            Some((downstream, rest)) => {
                let client = self
                    .tracer
                    .span_builder("call")
                    .with_kind(SpanKind::Client)
                    .start_with_context(&self.tracer, &cx);
                let client_cx = cx.with_span(client);
                let mut carrier = HashMap::new();
                TraceContextPropagator::new().inject_context(&client_cx, &mut carrier);
                assert!(carrier.contains_key("traceparent"));
                // "Over the wire": the downstream sees only the carrier.
                let remote = TraceContextPropagator::new().extract(&carrier);
                downstream.handle(&remote, Vec::new(), rest);
                client_cx.span().end();
            }
            None => {
                let mut work = self.tracer.start_with_context("query", &cx);
                work.set_attribute(KeyValue::new("db.system", "none"));
                work.end();
            }
        }
        cx.span().end();
        sc
    }
}

fn run(backend_remote: RemoteParents, backend_limit: u32) -> (Vec<Offered>, Receiver) {
    let receiver = Receiver::start();
    let clock = ManualClock::new();
    let frontend = Service::new(
        "frontend",
        FRONTEND_LIMIT,
        RemoteParents::Follow,
        &clock,
        &receiver,
    );
    let backend = Service::new("backend", backend_limit, backend_remote, &clock, &receiver);
    let store = Service::new("store", 1000, RemoteParents::Follow, &clock, &receiver);

    let offered = crate::receiver::drive(THREADS, WINDOWS, PER_THREAD, &clock, WINDOW, |window| {
        let sc = frontend.handle(
            &Context::new(),
            vec![KeyValue::new(WINDOW_KEY, window as i64)],
            &[&backend, &store],
        );
        Offered::new(&sc, window)
    });
    for service in [frontend, backend, store] {
        service
            .provider
            .shutdown()
            .expect("provider shutdown flushes");
    }
    (offered, receiver)
}

fn services(spans: &[crate::receiver::ReceivedSpan]) -> BTreeSet<&str> {
    spans.iter().map(|s| s.service.as_str()).collect()
}

#[test]
fn downstream_services_follow_and_every_trace_arrives_whole() {
    // The backend's own limit is tiny: following, it does not apply to traces that
    // start upstream.
    let (offered, receiver) = run(RemoteParents::Follow, 1);
    let traces = receiver.traces();
    crate::receiver::assert_capped_and_whole(
        &traces,
        &offered,
        FRONTEND_LIMIT as usize,
        f64::from(FRONTEND_LIMIT),
        SPANS_PER_TRACE,
    );
    let expected = BTreeSet::from(["frontend", "backend", "store"]);
    for (trace_id, spans) in &traces {
        assert_eq!(
            services(spans),
            expected,
            "trace {trace_id} crosses all three"
        );
        for service in &expected {
            assert_eq!(
                spans.iter().filter(|s| s.service == *service).count(),
                2,
                "trace {trace_id}: both spans of {service}"
            );
        }
    }
    assert_eq!(traces.len(), FRONTEND_LIMIT as usize * WINDOWS as usize);
}

#[test]
fn a_capped_downstream_holds_its_cap_at_the_price_of_broken_traces() {
    let (offered, receiver) = run(RemoteParents::Cap, BACKEND_CAP);
    let traces = receiver.traces();
    let kept: HashSet<_> = offered
        .iter()
        .filter(|o| o.kept)
        .map(|o| o.trace_id)
        .collect();
    let got: HashSet<_> = traces.keys().copied().collect();
    assert_eq!(got, kept, "exactly the frontend's kept traces arrive");

    let mut joined_per_window: BTreeMap<i64, usize> = BTreeMap::new();
    let mut broken_per_window: BTreeMap<i64, usize> = BTreeMap::new();
    for (trace_id, spans) in &traces {
        let root = spans
            .iter()
            .find(|s| s.service == "frontend" && s.parent_span_id.is_none())
            .expect("the frontend's root");
        let window = root.attr_i64(WINDOW_KEY).unwrap();
        match services(spans).len() {
            3 => {
                assert_eq!(spans.len(), SPANS_PER_TRACE, "trace {trace_id}");
                // The backend decided this trace itself: its entry span says so.
                let entry = spans
                    .iter()
                    .find(|s| s.service == "backend" && s.name == "handle")
                    .unwrap();
                assert!(entry.attr(SAMPLER_TYPE).is_some());
                *joined_per_window.entry(window).or_default() += 1;
            }
            1 => {
                // Broken: the frontend's two spans, the rest refused downstream.
                assert_eq!(spans.len(), 2, "trace {trace_id}");
                *broken_per_window.entry(window).or_default() += 1;
            }
            n => panic!("trace {trace_id} has spans of {n} services"),
        }
    }
    for window in 0..WINDOWS as i64 {
        let joined = joined_per_window.get(&window).copied().unwrap_or(0);
        let broken = broken_per_window.get(&window).copied().unwrap_or(0);
        assert_eq!(
            joined, BACKEND_CAP as usize,
            "window {window}: the backend's cap"
        );
        assert_eq!(
            broken,
            (FRONTEND_LIMIT - BACKEND_CAP) as usize,
            "window {window}: the cost, broken traces"
        );
    }
}
