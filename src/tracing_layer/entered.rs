//! The spans each thread has entered, as the layer saw them: whether each belongs to a
//! dropped trace, and the context attached for it. A span created in the current scope
//! (most are) learns its parent's trace from the top entry, with no lookup in the
//! registry; an exit learns there whether the inner layer saw the enter. A thread that
//! has no span of a dropped trace entered (every thread, where every trace is kept)
//! answers "inside a dropped trace?" from one counter, without reading the stack.

use std::cell::{Cell, RefCell};

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::{Context as OtelContext, ContextGuard};
use tracing::span::Id;

use super::mark::Dropped;

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

/// What a thread keeps for the layers: its entered spans, how many of them belong to a
/// dropped trace, and the dropped root it last exited.
struct Thread {
    entered: RefCell<Vec<Entered>>,
    /// The entries of `entered` whose `dropped` is set.
    dropped: Cell<usize>,
    /// The dropped root this thread last exited, with its layer, by id: most roots close
    /// right after their last exit, and a root so named is looked up to skip its close.
    exited_dropped_root: Cell<Option<(usize, u64)>>,
}

thread_local! {
    static THREAD: Thread = const {
        Thread {
            entered: RefCell::new(Vec::new()),
            dropped: Cell::new(0),
            exited_dropped_root: Cell::new(None),
        }
    };
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
    THREAD.with(|thread| {
        if entered.dropped.is_some() {
            thread.dropped.set(thread.dropped.get() + 1);
        }
        thread.entered.borrow_mut().push(entered);
    });
}

/// Removes the latest enter of `id` by `layer` on this thread, detaching what it
/// attached; whether the inner layer must see the exit (true where the enter was not
/// seen: the inner layer decides then, as without this layer).
pub(super) fn exit(layer: usize, id: &Id) -> bool {
    THREAD.with(|thread| {
        let entered = {
            let mut stack = thread.entered.borrow_mut();
            // Exits mostly come in the reverse order of enters: the top, popped.
            if stack
                .last()
                .is_some_and(|e| e.layer == layer && e.id == *id)
            {
                stack.pop()
            } else {
                stack
                    .iter()
                    .rposition(|e| e.layer == layer && e.id == *id)
                    .map(|at| stack.remove(at))
            }
        };
        // Dropped (and its guard detached) once the stack is no longer borrowed.
        let Some(entered) = entered else {
            return true;
        };
        if entered.dropped.is_some() {
            thread.dropped.set(thread.dropped.get() - 1);
            if entered.forwarded {
                thread.exited_dropped_root.set(Some((layer, id.into_u64())));
            }
        }
        entered.forwarded
    })
}

/// Whether `id` is the dropped root `layer` last exited on this thread (forgotten
/// then): a hint, which the caller checks against the span's mark.
pub(super) fn closing_exited_dropped_root(layer: usize, id: &Id) -> bool {
    THREAD.with(|thread| {
        let hit = thread.exited_dropped_root.get() == Some((layer, id.into_u64()));
        if hit {
            thread.exited_dropped_root.set(None);
        }
        hit
    })
}

/// The current span of `layer` on this thread: `None` outside every span, else the
/// dropped trace's context if it belongs to one.
pub(super) fn current(layer: usize) -> Option<Option<Dropped>> {
    THREAD.with(|thread| {
        let stack = thread.entered.borrow();
        let top = stack.iter().rev().find(|e| e.layer == layer)?;
        Some(top.dropped.clone())
    })
}

/// Whether `layer`'s current span on this thread belongs to a dropped trace.
pub(super) fn in_dropped(layer: usize) -> bool {
    THREAD.with(|thread| {
        thread.dropped.get() > 0
            && thread
                .entered
                .borrow()
                .iter()
                .rev()
                .find(|e| e.layer == layer)
                .is_some_and(|top| top.dropped.is_some())
    })
}
