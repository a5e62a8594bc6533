//! Trace shapes through the layer: what reaches the wrapped layer of a dropped trace,
//! and kept traces exported exactly as without the layer, whatever the shape: explicit
//! parents, children made before their root is entered or entered on other threads,
//! records, events, errors and links, a remote parent set after the root is created.

use std::collections::BTreeMap;
use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use opentelemetry_sdk::trace::SpanData;
use otel_rate_sampler::{Limit, ManualClock, RateLimitingSampler};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::counting::counting_dispatch;
use crate::pipeline::{assert_kept_whole, by_trace, decision, Provider};

/// Spans of one [`request`]: a root, three children, a grandchild under each.
pub(crate) const SPANS: usize = 7;

/// One request: a root with fields, entered; three children, each with an event and a
/// grandchild under an explicit parent; a field recorded on the root at the end. What
/// its root decided.
pub(crate) fn request(n: i64) -> (TraceId, bool) {
    request_then(n, decision)
}

/// [`request`], reading `read` of its root before the root's scope ends.
pub(crate) fn request_then<T>(n: i64, read: impl FnOnce(&tracing::Span) -> T) -> T {
    let root = tracing::info_span!(
        "request",
        n,
        http.route = "/items/{id}",
        status = tracing::field::Empty
    );
    let _entered = root.enter();
    for step in 0..3_i64 {
        let child = tracing::info_span!("step", step);
        child.in_scope(|| {
            tracing::info!(name: "work", step, "working");
            tracing::info_span!(parent: &child, "query", db.system = "none").in_scope(|| ());
        });
    }
    root.record("status", 200);
    read(&root)
}

/// A sampler keeping the first `n` roots of each hour on a clock that never moves, and
/// every child with its parent.
pub(crate) fn first(n: u32) -> RateLimitingSampler<otel_rate_sampler::AnyLimiter<ManualClock>> {
    RateLimitingSampler::builder(
        Limit::per_window(n, Duration::from_secs(3600))
            .unwrap()
            .unpaced(),
    )
    .clock(ManualClock::new())
    .build()
}

#[test]
fn a_dropped_trace_reaches_the_wrapped_layer_as_its_root_alone() {
    let provider = Provider::new(first(2));
    let (dispatch, counts) = counting_dispatch(&provider);
    let decisions: Vec<_> =
        tracing::dispatcher::with_default(&dispatch, || (0..10).map(request).collect());
    assert_eq!(decisions.iter().filter(|d| d.1).count(), 2);
    assert_kept_whole(&provider.spans(), &decisions, SPANS);

    // Every root reaches it, with its enter and exit (to start its span, then detach
    // its context); a dropped root's close does not (its non-recording span ends with
    // the span's data).
    for callback in ["new_span", "enter", "exit"] {
        assert_eq!(
            counts.get(callback, "request"),
            10,
            "{callback} of the roots"
        );
    }
    assert_eq!(counts.get("close", "request"), 2);
    // A dropped root's record does not; below a dropped root, nothing does.
    assert_eq!(counts.get("record", "request"), 2);
    for name in ["step", "query"] {
        for callback in ["new_span", "enter", "exit", "close"] {
            assert_eq!(counts.get(callback, name), 2 * 3, "{callback} of {name}");
        }
    }
    assert_eq!(counts.get("event", "work"), 2 * 3);
}

/// What a kept trace is, whatever its ids: its spans by name path, each with its kind,
/// attributes, events, links (by name path within the trace), status and trace state.
type Canonical = BTreeMap<String, String>;

fn canonical<'a>(spans: &[&'a SpanData]) -> (i64, Canonical) {
    let by_id: std::collections::HashMap<SpanId, &'a SpanData> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), *s))
        .collect();
    let path = |mut span: &'a SpanData| {
        let mut names = vec![span.name.to_string()];
        while let Some(parent) = by_id.get(&span.parent_span_id) {
            names.push(parent.name.to_string());
            span = parent;
        }
        names.reverse();
        names.join("/")
    };
    let mut n = -1;
    let mut out = Canonical::new();
    for span in spans {
        let mut attributes: Vec<String> = span
            .attributes
            .iter()
            .filter(|kv| !matches!(kv.key.as_str(), "thread.id" | "busy_ns" | "idle_ns"))
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect();
        attributes.sort();
        if let Some(kv) = span.attributes.iter().find(|kv| kv.key.as_str() == "n") {
            n = kv.value.to_string().parse().unwrap();
        }
        let events: Vec<String> = span
            .events
            .iter()
            .map(|e| {
                let mut attrs: Vec<String> = e
                    .attributes
                    .iter()
                    .map(|kv| format!("{}={}", kv.key, kv.value))
                    .collect();
                attrs.sort();
                format!("{}{attrs:?}", e.name)
            })
            .collect();
        let links: Vec<String> = span
            .links
            .iter()
            .map(|l| {
                by_id
                    .get(&l.span_context.span_id())
                    .map_or_else(|| "outside".to_owned(), |s| path(s))
            })
            .collect();
        let mut key = path(span);
        while out.contains_key(&key) {
            key.push('+');
        }
        out.insert(
            key,
            format!(
                "{:?} {attributes:?} {events:?} {links:?} {:?} {}",
                span.span_kind,
                span.status,
                span.span_context.trace_state().header()
            ),
        );
    }
    (n, out)
}

/// Every shape at once: explicit parents, a child made before its root is entered, one
/// entered on another thread, a span following another, an error event, a record.
fn shaped_request(n: i64) -> (TraceId, bool) {
    let root = tracing::info_span!("request", n, outcome = tracing::field::Empty);
    // Made before the root is entered: its parent is explicit.
    let early = tracing::info_span!(parent: &root, "early", n);
    let decided = decision(&root);
    let _entered = root.enter();
    let first = tracing::info_span!("first", kind = "db");
    let second = tracing::info_span!("second");
    second.follows_from(&first);
    first.in_scope(|| tracing::info!(name: "read", rows = 3, "read"));
    second.in_scope(|| tracing::error!(name: "failed", error = "timeout", "failed"));
    // Closed on the other thread under the same (scoped) dispatcher: the registry
    // closes a parent through the thread's default one.
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    std::thread::scope(|s| {
        let moved = tracing::info_span!("moved");
        s.spawn(move || {
            tracing::dispatcher::with_default(&dispatch, move || {
                moved.in_scope(|| tracing::info_span!("under_moved", deep = true).in_scope(|| ()));
                drop(moved);
            });
        });
    });
    early.in_scope(|| ());
    root.record("outcome", "ok");
    decided
}

fn run_shapes(skip: bool) -> BTreeMap<i64, Canonical> {
    let provider = Provider::new(first(3));
    let dispatch = provider.dispatch(skip);
    let decisions: Vec<_> = (0..8)
        .map(|n| tracing::dispatcher::with_default(&dispatch, || shaped_request(n)))
        .collect();
    assert_eq!(decisions.iter().filter(|d| d.1).count(), 3);
    let spans = provider.spans();
    assert_kept_whole(&spans, &decisions, 6);
    by_trace(&spans)
        .values()
        .map(|spans| canonical(spans))
        .collect()
}

#[test]
fn kept_traces_are_exported_as_without_the_layer() {
    let plain = run_shapes(false);
    let skipping = run_shapes(true);
    assert_eq!(plain.len(), 3);
    assert_eq!(skipping, plain);
    // The shapes made it: an error status, a link inside the trace, an event.
    let first = &skipping[&0];
    assert!(first["request/second"].contains("Error"), "{first:?}");
    assert!(
        first["request/second"].contains("[\"request/first\"]"),
        "{first:?}"
    );
    assert!(
        first["request/moved/under_moved"].contains("deep=true"),
        "{first:?}"
    );
}

fn remote(sampled: bool) -> opentelemetry::Context {
    let sc = SpanContext::new(
        TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736),
        SpanId::from(0x00f0_67aa_0ba9_02b7),
        if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        },
        true,
        TraceState::default(),
    );
    opentelemetry::Context::new().with_remote_span_context(sc)
}

#[test]
fn a_remote_parent_set_after_the_root_or_attached_before_it_decides() {
    // Roots of their own are all refused: only a sampled remote parent keeps a trace.
    let provider = Provider::new(first(1));
    let dispatch = provider.dispatch(true);
    tracing::dispatcher::with_default(&dispatch, || request(-1)); // spends the permit
    let mut decisions = Vec::new();
    for sampled in [true, false] {
        tracing::dispatcher::with_default(&dispatch, || {
            // `set_parent` after creating the root, as tracing-opentelemetry users do.
            let root = tracing::info_span!("request", via = "set_parent");
            root.set_parent(remote(sampled)).unwrap();
            root.in_scope(|| tracing::info_span!("step").in_scope(|| ()));
            decisions.push(decision(&root));
            // A context attached before the root is created.
            let _attached = remote(sampled).attach();
            let root = tracing::info_span!("request", via = "attached");
            root.in_scope(|| tracing::info_span!("step").in_scope(|| ()));
            decisions.push(decision(&root));
        });
    }
    let remote_trace = TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736);
    assert_eq!(
        decisions,
        vec![
            (remote_trace, true),
            (remote_trace, true),
            (remote_trace, false),
            (remote_trace, false)
        ]
    );
    let spans: Vec<_> = provider
        .spans()
        .into_iter()
        .filter(|s| s.span_context.trace_id() == remote_trace)
        .collect();
    // The two kept requests, two spans each, under the remote parent.
    assert_eq!(spans.len(), 4, "{spans:?}");
    assert!(spans.iter().all(|s| s.span_context.is_sampled()));
}

#[test]
fn a_span_following_a_dropped_one_links_to_its_trace() {
    let provider = Provider::new(first(1));
    let dispatch = provider.dispatch(true);
    tracing::dispatcher::with_default(&dispatch, || {
        let kept = tracing::info_span!("kept");
        let kept_trace = decision(&kept);
        let dropped = tracing::info_span!("dropped");
        let dropped_trace = decision(&dropped);
        assert!(kept_trace.1 && !dropped_trace.1);
        let skipped = dropped.in_scope(|| tracing::info_span!("skipped"));
        kept.in_scope(|| {
            let follower = tracing::info_span!("follower");
            follower.follows_from(&skipped);
            follower.in_scope(|| ());
        });
        drop(kept);
        let spans = provider.spans();
        let follower = spans.iter().find(|s| s.name == "follower").unwrap();
        assert_eq!(follower.links.len(), 1);
        let link = &follower.links[0].span_context;
        assert_eq!(link.trace_id(), dropped_trace.0);
        assert!(!link.is_sampled());
    });
    // Nothing of the dropped trace was exported.
    assert!(provider
        .spans()
        .iter()
        .all(|s| s.name != "skipped" && s.name != "dropped"));
}

/// Keeps every span but those named `step`, whatever their parent: a sampler that
/// decides spans on their own.
#[derive(Clone, Debug)]
struct AllButSteps;

impl opentelemetry_sdk::trace::ShouldSample for AllButSteps {
    fn should_sample(
        &self,
        _: Option<&opentelemetry::Context>,
        _: TraceId,
        name: &str,
        _: &opentelemetry::trace::SpanKind,
        _: &[opentelemetry::KeyValue],
        _: &[opentelemetry::trace::Link],
    ) -> opentelemetry_sdk::trace::SamplingResult {
        let decision = if name == "step" {
            opentelemetry_sdk::trace::SamplingDecision::Drop
        } else {
            opentelemetry_sdk::trace::SamplingDecision::RecordAndSample
        };
        opentelemetry_sdk::trace::SamplingResult {
            decision,
            attributes: Vec::new(),
            trace_state: TraceState::default(),
        }
    }
}

#[test]
fn a_span_dropped_inside_a_kept_trace_is_a_dropped_root() {
    let provider = Provider::new(AllButSteps);
    let dispatch = provider.dispatch(true);
    tracing::dispatcher::with_default(&dispatch, || request(0));
    let names: Vec<_> = provider
        .spans()
        .iter()
        .map(|s| s.name.to_string())
        .collect();
    // The plain layer would offer each `query` to the sampler and export it, under a
    // `step` nobody exports; through the layer, the dropped `step`'s subtree is skipped.
    assert_eq!(names, ["request"]);
}

#[test]
fn a_context_attached_inside_a_dropped_trace_starts_nothing_new() {
    let provider = Provider::new(first(1));
    let dispatch = provider.dispatch(true);
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("spends the permit").in_scope(|| ());
        let root = tracing::info_span!("request");
        root.in_scope(|| {
            tracing::info_span!("step").in_scope(|| {
                let _attached = remote(true).attach();
                tracing::info_span!("under a sampled remote context").in_scope(|| ());
            });
        });
    });
    let names: Vec<_> = provider
        .spans()
        .iter()
        .map(|s| s.name.to_string())
        .collect();
    assert_eq!(names, ["spends the permit"]);
}

#[test]
fn a_skipped_span_closed_outside_its_trace_s_scope_exports_nothing() {
    // The docs: its close reaches the inner layer (checking would cost every kept span
    // a lookup), which finds nothing of it; nothing of the dropped trace is exported.
    let provider = Provider::new(first(1));
    let (dispatch, counts) = counting_dispatch(&provider);
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("spends the permit").in_scope(|| ());
        let root = tracing::info_span!("request");
        let late = root.in_scope(|| tracing::info_span!("late"));
        drop(root);
        // Closed on another thread, under the same dispatcher, out of every scope.
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        std::thread::scope(|s| {
            s.spawn(move || tracing::dispatcher::with_default(&dispatch, move || drop(late)));
        });
    });
    assert_eq!(counts.get("new_span", "late"), 0);
    assert_eq!(counts.get("close", "late"), 1, "its close is forwarded");
    let names: Vec<_> = provider
        .spans()
        .iter()
        .map(|s| s.name.to_string())
        .collect();
    assert_eq!(names, ["spends the permit"]);
}
