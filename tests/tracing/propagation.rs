//! What a dropped trace propagates: every span of it, root or descendant, injects its
//! trace id with the sampled flag off, through `DroppedContextExt::otel_context` and
//! through `Context::current()` inside it, on the thread that made it and on another.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceId;
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use otel_rate_sampler::DroppedContextExt as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::pipeline::{decision, Provider};
use crate::shapes::first;

/// The `traceparent` a propagator writes for `cx`, if any.
fn traceparent(cx: &Context) -> Option<String> {
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    carrier.remove("traceparent")
}

/// `traceparent`'s trace id and flags.
fn parsed(header: &str) -> (String, String) {
    let parts: Vec<&str> = header.split('-').collect();
    assert_eq!(parts.len(), 4, "{header}");
    (parts[1].to_owned(), parts[3].to_owned())
}

fn assert_propagates(cx: &Context, trace: TraceId, sampled: bool, what: &str) {
    let header = traceparent(cx).unwrap_or_else(|| panic!("{what}: no traceparent"));
    let flags = if sampled { "01" } else { "00" };
    assert_eq!(
        parsed(&header),
        (format!("{trace:032x}"), flags.to_owned()),
        "{what}"
    );
}

#[test]
fn every_span_of_a_dropped_trace_propagates_it_unsampled() {
    let provider = Provider::new(first(1));
    let dispatch = provider.dispatch(true);
    tracing::dispatcher::with_default(&dispatch, || {
        for expect_kept in [true, false] {
            let root = tracing::info_span!("request");
            let (trace, kept) = decision(&root);
            assert_eq!(kept, expect_kept);
            assert_propagates(&root.otel_context(), trace, kept, "root");
            root.in_scope(|| {
                assert_propagates(&Context::current(), trace, kept, "current in the root");
                let child = tracing::info_span!("child");
                child.in_scope(|| {
                    assert_propagates(&Context::current(), trace, kept, "current in a child");
                    let grandchild = tracing::info_span!("grandchild");
                    assert_propagates(&grandchild.otel_context(), trace, kept, "grandchild");
                    grandchild.in_scope(|| {
                        assert_propagates(&Context::current(), trace, kept, "in a grandchild");
                    });
                });
                assert_propagates(&child.otel_context(), trace, kept, "child");
                // Entered on another thread, where nothing of the trace is current.
                std::thread::scope(|s| {
                    let child = child.clone();
                    s.spawn(move || {
                        assert!(traceparent(&Context::current()).is_none());
                        child.in_scope(|| {
                            assert_propagates(&Context::current(), trace, kept, "other thread");
                        });
                        assert!(
                            traceparent(&Context::current()).is_none(),
                            "detached on exit"
                        );
                    });
                });
            });
        }
    });
}

#[test]
fn without_the_drop_in_a_skipped_span_propagates_nothing() {
    // What the docs say happens with `OpenTelemetrySpanExt::context()` alone: the
    // OpenTelemetry layer never saw the span, so the next service decides on its own.
    let provider = Provider::new(first(1));
    let dispatch = provider.dispatch(true);
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("spends the permit").in_scope(|| ());
        let root = tracing::info_span!("request");
        let (trace, kept) = decision(&root);
        assert!(!kept);
        let child = root.in_scope(|| tracing::info_span!("child"));
        assert!(traceparent(&child.context()).is_none());
        assert_propagates(&child.otel_context(), trace, false, "the drop-in");
    });
}
