//! Two services configured apart with one probability keep the same traces, end to end:
//! `checkout` and `search`, each with its own provider, `service.name` and
//! `DeclarativeSampler` read from the same 1.1 file (a `composite/development`
//! probability, `${RATIO}` filled in), offered roots with the same trace ids, exporting
//! over OTLP/gRPC to one real receiver. What arrives from each is the same set of
//! traces, with the same `th`.

use std::collections::{BTreeMap, BTreeSet};

use opentelemetry::trace::{TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::Context;
use otel_rate_sampler::DeclarativeSampler;

use crate::receiver::{Receiver, Transport};
use crate::seeded_ids::Seeded;

const FILE: &str = "file_format: \"1.1\"
tracer_provider:
  sampler:
    composite/development:
      parent_threshold:
        root:
          probability:
            ratio: ${RATIO:-0.3}
";

#[test]
fn two_services_configured_apart_with_one_probability_keep_the_same_traces_at_a_collector() {
    let receiver = Receiver::start();
    for service in ["checkout", "search"] {
        let sampler = DeclarativeSampler::from_yaml_str(FILE, "otel-config.yaml", service).unwrap();
        let provider = crate::receiver::provider_with_ids(
            service,
            sampler,
            crate::receiver::exporter(&receiver, Transport::Grpc),
            Seeded::new(7),
        );
        let tracer = provider.tracer(service);
        for _ in 0..1000 {
            let root = tracer.start_with_context("handle", &Context::new());
            let cx = Context::new().with_span(root);
            tracer.start_with_context("child", &cx);
        }
        provider.shutdown().expect("provider shutdown flushes");
    }
    // Per service: trace id -> the th of its spans (all the same within a trace).
    let mut kept: BTreeMap<String, BTreeMap<u128, BTreeSet<String>>> = BTreeMap::new();
    for span in receiver.spans() {
        kept.entry(span.service.clone())
            .or_default()
            .entry(u128::from_be_bytes(span.trace_id.to_bytes()))
            .or_default()
            .insert(span.trace_state.clone());
    }
    let checkout = &kept["checkout"];
    let search = &kept["search"];
    assert_eq!(
        checkout, search,
        "the same traces, with the same trace state"
    );
    // Binomial(1000, 0.3): mean 300, standard deviation 14.5; five of them either side.
    assert!((227..=373).contains(&checkout.len()), "{}", checkout.len());
    let th_03 = "ot=th:b3333333333334";
    for states in checkout.values() {
        assert_eq!(states, &BTreeSet::from([th_03.to_owned()]));
    }
    // Whole traces: a root and a child of each kept trace, from each service.
    assert_eq!(receiver.spans().len(), 2 * 2 * checkout.len());
}
