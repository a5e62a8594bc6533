//! The spans each thread has entered, as the layer saw them: whether each belongs to a
//! dropped trace, and the context attached for it. A span created in the current scope
//! (most are) learns its parent's trace from the top entry, with no lookup in the
//! registry; an exit learns there whether the inner layer saw the enter.

use std::cell::RefCell;

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::{Context as OtelContext, ContextGuard};
use tracing::span::Id;

/// One enter of a span on this thread.
#[derive(Debug)]
struct Entered {
    /// The layer that saw it (layers of several subscribers share the thread).
    layer: usize,
    id: Id,
    /// The dropped trace's context, if the span belongs to one.
    dropped: Option<OtelContext>,
    /// Whether the inner layer saw the enter (and so must see the exit).
    forwarded: bool,
    /// The dropped trace's context, attached for a skipped span where it was not
    /// already current; detached on exit.
    _guard: Option<ContextGuard>,
}

thread_local! {
    static ENTERED: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
}

/// Records that `layer` forwarded the enter of `id`, a span of a kept trace (`dropped`
/// none) or a dropped root (its context, which the inner layer attached).
pub(super) fn enter_forwarded(layer: usize, id: &Id, dropped: Option<OtelContext>) {
    push(Entered {
        layer,
        id: id.clone(),
        dropped,
        forwarded: true,
        _guard: None,
    });
}

/// Records the enter of the skipped span `id` and makes the dropped trace's context
/// current while it is entered, unless it already is (a child entered inside its
/// dropped root, the usual case, attaches nothing).
pub(super) fn enter_skipped(layer: usize, id: &Id, cx: &OtelContext) {
    let current =
        OtelContext::map_current(|now| now.span().span_context() == cx.span().span_context());
    let guard = (!current).then(|| cx.clone().attach());
    push(Entered {
        layer,
        id: id.clone(),
        dropped: Some(cx.clone()),
        forwarded: false,
        _guard: guard,
    });
}

fn push(entered: Entered) {
    ENTERED.with(|stack| stack.borrow_mut().push(entered));
}

/// Removes the latest enter of `id` by `layer` on this thread, detaching what it
/// attached; whether the inner layer must see the exit (true where the enter was not
/// seen: the inner layer decides then, as without this layer).
pub(super) fn exit(layer: usize, id: &Id) -> bool {
    let entered = ENTERED.with(|stack| {
        let mut stack = stack.borrow_mut();
        // Exits mostly come in the reverse order of enters: the top, popped.
        if stack
            .last()
            .is_some_and(|e| e.layer == layer && e.id == *id)
        {
            return stack.pop();
        }
        let at = stack
            .iter()
            .rposition(|e| e.layer == layer && e.id == *id)?;
        Some(stack.remove(at))
    });
    // Dropped (and its guard detached) once the stack is no longer borrowed.
    entered.is_none_or(|entered| entered.forwarded)
}

/// The current span of `layer` on this thread: `None` outside every span, else the
/// dropped trace's context if it belongs to one.
pub(super) fn current(layer: usize) -> Option<Option<OtelContext>> {
    ENTERED.with(|stack| {
        let stack = stack.borrow();
        let top = stack.iter().rev().find(|e| e.layer == layer)?;
        Some(top.dropped.clone())
    })
}

/// Whether `layer`'s current span on this thread belongs to a dropped trace.
pub(super) fn in_dropped(layer: usize) -> bool {
    ENTERED.with(|stack| {
        let stack = stack.borrow();
        stack
            .iter()
            .rev()
            .find(|e| e.layer == layer)
            .is_some_and(|top| top.dropped.is_some())
    })
}
