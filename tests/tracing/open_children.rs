//! Skipped spans that stay open past the scope they were made in, or that another thread
//! uses while that scope is still open: the layer knows a dropped trace's children by id
//! on the thread that made them (no mark in the registry) and marks those still open when
//! that thread leaves the trace. Wherever they are used then, they stay skipped.

use opentelemetry::trace::{TraceContextExt as _, TraceId};
use opentelemetry::Context;
use otel_rate_sampler::DroppedContextExt as _;

use crate::counting::{counting_dispatch, Counts};
use crate::pipeline::{decision, Provider};
use crate::shapes::first;

/// A pipeline keeping the first root only, with what reaches the wrapped layer counted.
fn counted() -> (Provider, tracing::Dispatch, Counts) {
    let provider = Provider::new(first(1));
    let (dispatch, counts) = counting_dispatch(&provider);
    (provider, dispatch, counts)
}

/// `cx` is a span of the dropped trace `trace`: its id, the sampled flag off.
fn assert_in_dropped(cx: &Context, trace: TraceId, what: &str) {
    let span = cx.span();
    let sc = span.span_context();
    assert_eq!(sc.trace_id(), trace, "{what}: the dropped trace's id");
    assert!(!sc.is_sampled(), "{what}: not sampled");
}

/// A root dropped after the sampler's one permit was spent, and its trace.
fn dropped_root() -> (tracing::Span, TraceId) {
    tracing::info_span!("spends the permit").in_scope(|| ());
    let root = tracing::info_span!("request");
    let (trace, kept) = decision(&root);
    assert!(!kept);
    (root, trace)
}

/// Runs `f` on another thread under this thread's default dispatcher.
fn on_another_thread(f: impl FnOnce() + Send) {
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    std::thread::scope(|s| {
        s.spawn(move || tracing::dispatcher::with_default(&dispatch, f));
    });
}

/// The names of the spans exported, in order.
fn exported(provider: &Provider) -> Vec<String> {
    provider
        .spans()
        .iter()
        .map(|s| s.name.to_string())
        .collect()
}

fn assert_nothing_reached(counts: &Counts, name: &str, callbacks: &[&'static str]) {
    for callback in callbacks {
        assert_eq!(counts.get(callback, name), 0, "{callback} of {name}");
    }
}

#[test]
fn children_kept_open_past_their_root_s_scope_stay_skipped() {
    let (provider, dispatch, counts) = counted();
    tracing::dispatcher::with_default(&dispatch, || {
        let (root, trace) = dropped_root();
        // More than a thread keeps by id: the last ones are marked at once.
        let children: Vec<_> = root.in_scope(|| {
            (0..40)
                .map(|i| tracing::info_span!("child", i, status = tracing::field::Empty))
                .collect()
        });
        for child in &children {
            assert_in_dropped(&child.otel_context(), trace, "a child out of scope");
            child.record("status", 200);
            child.in_scope(|| {
                assert_in_dropped(&Context::current(), trace, "inside a child");
                tracing::info!(name: "work", "working");
                tracing::info_span!("grandchild").in_scope(|| ());
            });
            tracing::info_span!(parent: child, "explicit").in_scope(|| ());
            tracing::info!(name: "work", parent: child, "working");
        }
        // Recorded on another thread: only a mark tells it there.
        on_another_thread(|| {
            children.iter().for_each(|child| {
                child.record("status", 500);
            });
        });
        drop(children);
    });
    assert_nothing_reached(
        &counts,
        "grandchild",
        &["new_span", "enter", "exit", "close"],
    );
    // Entered and closed out of their trace's scope, the children's enters and closes
    // are forwarded first (docs: telling would cost every kept span a lookup), and the
    // inner layer finds nothing of them; nothing else of them reaches it.
    for name in ["child", "explicit"] {
        assert_nothing_reached(&counts, name, &["new_span", "exit", "record"]);
        assert_eq!(counts.get("close", name), 40, "close of {name}");
    }
    assert_eq!(counts.get("event", "work"), 0);
    assert_eq!(exported(&provider), ["spends the permit"]);
}

#[test]
fn a_child_is_skipped_on_another_thread_while_its_root_is_entered_here() {
    let (provider, dispatch, counts) = counted();
    tracing::dispatcher::with_default(&dispatch, || {
        let (root, trace) = dropped_root();
        root.in_scope(|| {
            let child = tracing::info_span!("child");
            on_another_thread(|| {
                // Not entered there yet: its context read through its ancestors.
                assert_in_dropped(&child.otel_context(), trace, "other thread");
                tracing::info_span!(parent: &child, "explicit").in_scope(|| ());
                child.in_scope(|| {
                    assert_in_dropped(&Context::current(), trace, "entered there");
                    tracing::info!(name: "work", "working");
                    tracing::info_span!("grandchild").in_scope(|| ());
                });
            });
            // Back here, still in the root's scope: entered and closed as skipped.
            child.in_scope(|| tracing::info!(name: "work", "working"));
            assert_in_dropped(&child.otel_context(), trace, "back here");
        });
    });
    assert_nothing_reached(
        &counts,
        "grandchild",
        &["new_span", "enter", "exit", "close"],
    );
    // Their enters on the other thread are forwarded first (out of every dropped scope
    // there), as any enter out of one; nothing else of the child reaches the inner
    // layer, nor anything of the span made there but that enter and its close.
    assert_nothing_reached(&counts, "child", &["new_span", "exit", "close"]);
    assert_nothing_reached(&counts, "explicit", &["new_span", "exit"]);
    assert_eq!(counts.get("enter", "child"), 1);
    assert_eq!(counts.get("event", "work"), 0);
    assert_eq!(exported(&provider), ["spends the permit"]);
}

#[test]
fn a_child_closed_on_another_thread_in_its_root_s_scope_leaves_kept_spans_whole() {
    // Its id is forgotten here when the registry gives it again; meanwhile kept spans
    // made here (under a kept trace, by explicit parent) are exported whole.
    let (provider, dispatch, counts) = counted();
    tracing::dispatcher::with_default(&dispatch, || {
        let kept = tracing::info_span!("kept");
        assert!(decision(&kept).1);
        let root = tracing::info_span!("request");
        assert!(!decision(&root).1);
        root.in_scope(|| {
            for _ in 0..3 {
                let child = tracing::info_span!("child");
                on_another_thread(move || drop(child));
                tracing::info_span!(parent: &kept, "kept child").in_scope(|| ());
            }
        });
        drop(root);
        drop(kept);
    });
    assert_eq!(counts.get("new_span", "child"), 0);
    assert_eq!(counts.get("enter", "kept child"), 3);
    let mut names = exported(&provider);
    names.sort();
    assert_eq!(names, ["kept", "kept child", "kept child", "kept child"]);
}
