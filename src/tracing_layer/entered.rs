//! The spans each thread has entered, as the layer saw them: whether each belongs to a
//! dropped trace, and the context attached for it. A span created in the current scope
//! (most are) learns its parent's trace from the top entry, with no lookup in the
//! registry; an exit learns there whether the inner layer saw the enter.

use std::cell::RefCell;

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::{Context as OtelContext, ContextGuard};

use super::mark::Dropped;
use tracing::span::Id;

/// One enter of a span on this thread.
#[derive(Debug)]
struct Entered {
    /// The layer that saw it (layers of several subscribers share the thread).
    layer: usize,
    id: Id,
    /// The dropped trace's context, if the span belongs to one.
    dropped: Option<Dropped>,
    /// Whether the inner layer saw the enter (and so must see the exit).
    forwarded: bool,
    /// The dropped trace's context, attached for a skipped span where it was not
    /// already current; detached on exit.
    _guard: Option<ContextGuard>,
}

thread_local! {
    static ENTERED: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
    /// The dropped root this thread last exited, by its layer: most roots close right
    /// after their last exit, and a root so named is looked up to skip its close.
    static EXITED_DROPPED_ROOT: RefCell<Option<(usize, Id)>> = const { RefCell::new(None) };
}

/// Records that `layer` forwarded the enter of `id`, a span of a kept trace (`dropped`
/// none) or a dropped root (its context, which the inner layer attached).
pub(super) fn enter_forwarded(layer: usize, id: &Id, dropped: Option<Dropped>) {
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
pub(super) fn enter_skipped(layer: usize, id: &Id, cx: &Dropped) {
    let span = cx.span();
    let (trace, span_id) = (
        span.span_context().trace_id(),
        span.span_context().span_id(),
    );
    let current = OtelContext::map_current(|now| {
        let now = now.span();
        let now = now.span_context();
        now.span_id() == span_id && now.trace_id() == trace
    });
    let guard = (!current).then(|| OtelContext::clone(cx).attach());
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
    let Some(entered) = entered else {
        return true;
    };
    if entered.forwarded && entered.dropped.is_some() {
        EXITED_DROPPED_ROOT.with(|last| *last.borrow_mut() = Some((layer, id.clone())));
    }
    entered.forwarded
}

/// Whether `id` is the dropped root `layer` last exited on this thread (forgotten
/// then): a hint, which the caller checks against the span's mark.
pub(super) fn closing_exited_dropped_root(layer: usize, id: &Id) -> bool {
    EXITED_DROPPED_ROOT.with(|last| {
        let mut last = last.borrow_mut();
        let hit = last.as_ref().is_some_and(|(l, i)| *l == layer && i == id);
        if hit {
            *last = None;
        }
        hit
    })
}

/// The current span of `layer` on this thread: `None` outside every span, else the
/// dropped trace's context if it belongs to one.
pub(super) fn current(layer: usize) -> Option<Option<Dropped>> {
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
