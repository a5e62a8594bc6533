//! The spans each thread has entered, as the layer saw them: whether each belongs to a
//! dropped trace, and the context attached for it. A span created in the current scope
//! (most are) learns its parent's trace from the top entry, with no lookup in the
//! registry; an exit learns there whether the inner layer saw the enter. A thread that
//! has no span of a dropped trace entered (every thread, where every trace is kept)
//! answers "inside a dropped trace?" from one counter, without reading the stack.
//!
//! A span created in the scope of a dropped trace (a contextual child, the usual case) is
//! skipped with nothing written to the registry: it is *pending* here, by id, with the
//! dropped trace's context, until it closes on this thread (the usual case, and then it
//! never had a mark) or the thread leaves the dropped trace's scope, when the layer
//! writes the marks of those still open (`take_pending`). So a skipped child costs no
//! extensions lock and no allocation, and its enter, exit and close no lookup.
//!
//! The entries and pending spans name their dropped trace by its place in the thread's
//! table of dropped traces, counted with a plain integer: a skipped child moves no
//! shared reference count (each copy of the context's `Arc` would be an atomic write).

use std::cell::{Cell, RefCell};

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::{Context as OtelContext, ContextGuard};
use tracing::span::Id;

use super::mark::Dropped;

mod pending;

pub(super) use pending::{close, is_pending, new_span, pending, take_pending, Close, NewSpan};

/// A dropped trace's place in [`Thread::traces`].
type Trace = usize;

/// One enter of a span on this thread.
#[derive(Debug)]
struct Entered {
    /// The layer that saw it (layers of several subscribers share the thread).
    layer: usize,
    id: Id,
    /// The dropped trace the span belongs to, if it belongs to one.
    trace: Option<Trace>,
    /// Whether the inner layer saw the enter (and so must see the exit).
    forwarded: bool,
    /// The dropped trace's context, attached for a skipped span where it was not
    /// already current; detached on exit.
    _guard: Option<ContextGuard>,
}

/// A span skipped on this thread, in a dropped trace's scope, that carries no mark yet.
#[derive(Debug)]
struct Waiting {
    /// The layer that skipped it.
    layer: usize,
    /// Its id, as `Id::into_u64` gives it.
    id: u64,
    trace: Trace,
}

/// What a thread keeps for the layers: its entered spans, how many of them belong to a
/// dropped trace, the dropped root it last exited, its pending skipped spans, and the
/// dropped traces these name.
struct Thread {
    entered: RefCell<Vec<Entered>>,
    /// The entries of `entered` whose `trace` is set.
    dropped: Cell<usize>,
    /// The dropped root this thread last exited, with its layer, by id: most roots close
    /// right after their last exit, and a root so named is looked up to skip its close.
    exited_dropped_root: Cell<Option<(usize, u64)>>,
    /// Skipped spans created here in a dropped trace's scope, not closed yet, unmarked.
    pending: RefCell<Vec<Waiting>>,
    /// The dropped traces entries and pending spans name, each with how many do; a
    /// place is emptied (its context released) when none does.
    traces: RefCell<Vec<Option<(Dropped, usize)>>>,
}

thread_local! {
    static THREAD: Thread = const {
        Thread {
            entered: RefCell::new(Vec::new()),
            dropped: Cell::new(0),
            exited_dropped_root: Cell::new(None),
            pending: RefCell::new(Vec::new()),
            traces: RefCell::new(Vec::new()),
        }
    };
}

impl Thread {
    /// The place of `cx`'s trace, counted once more (found by the `Arc`: every span of a
    /// dropped trace shares its root's).
    fn hold(&self, cx: Dropped) -> Trace {
        let mut traces = self.traces.borrow_mut();
        if let Some(at) = traces.iter().position(|t| {
            t.as_ref()
                .is_some_and(|(held, _)| Dropped::ptr_eq(held, &cx))
        }) {
            if let Some((_, count)) = &mut traces[at] {
                *count += 1;
            }
            // `cx` is released here: the place holds the same context.
            return at;
        }
        match traces.iter().position(Option::is_none) {
            Some(at) => {
                traces[at] = Some((cx, 1));
                at
            }
            None => {
                traces.push(Some((cx, 1)));
                traces.len() - 1
            }
        }
    }

    /// `trace` counted once more.
    fn hold_again(&self, trace: Trace) {
        if let Some((_, count)) = &mut self.traces.borrow_mut()[trace] {
            *count += 1;
        }
    }

    /// `trace` counted once less; its context, to release once nothing is borrowed, when
    /// that was the last.
    #[must_use]
    fn release(&self, trace: Trace) -> Option<Dropped> {
        let mut traces = self.traces.borrow_mut();
        let last = matches!(&traces[trace], Some((_, 1)));
        if last {
            return traces[trace].take().map(|(cx, _)| cx);
        }
        if let Some((_, count)) = &mut traces[trace] {
            *count -= 1;
        }
        None
    }

    /// `trace`'s context.
    fn context(&self, trace: Trace) -> Option<Dropped> {
        self.traces.borrow()[trace]
            .as_ref()
            .map(|(cx, _)| cx.clone())
    }

    /// Forgets the pending span `raw` of `layer`; whether there was one.
    fn unpend(&self, layer: usize, raw: u64) -> bool {
        let trace = {
            let mut pending = self.pending.borrow_mut();
            pending
                .iter()
                .rposition(|p| p.layer == layer && p.id == raw)
                .map(|at| pending.swap_remove(at).trace)
        };
        trace.is_some_and(|trace| {
            drop(self.release(trace));
            true
        })
    }

    /// `layer`'s top entry on this thread.
    fn top(&self, layer: usize) -> Option<Option<Trace>> {
        let stack = self.entered.borrow();
        stack
            .iter()
            .rev()
            .find(|e| e.layer == layer)
            .map(|e| e.trace)
    }

    /// See [`in_dropped`].
    fn in_dropped(&self, layer: usize) -> bool {
        self.dropped.get() > 0 && matches!(self.top(layer), Some(Some(_)))
    }

    fn push(&self, entered: Entered) {
        if entered.trace.is_some() {
            self.dropped.set(self.dropped.get() + 1);
        }
        self.entered.borrow_mut().push(entered);
    }

    /// Enters `id`, skipped in `trace` (counted for the entry already), attaching the
    /// trace's context unless it already is current (a child entered inside its dropped
    /// root, the usual case, attaches nothing).
    fn enter_skipped(&self, layer: usize, id: &Id, trace: Trace) {
        let guard = self.context(trace).and_then(|cx| {
            let span = cx.span();
            let (trace_id, span_id) = (
                span.span_context().trace_id(),
                span.span_context().span_id(),
            );
            let current = OtelContext::map_current(|now| {
                let now = now.span();
                let now = now.span_context();
                now.span_id() == span_id && now.trace_id() == trace_id
            });
            (!current).then(|| OtelContext::clone(&cx).attach())
        });
        self.push(Entered {
            layer,
            id: id.clone(),
            trace: Some(trace),
            forwarded: false,
            _guard: guard,
        });
    }
}

/// Records that `layer` forwarded the enter of `id`, a span of a kept trace (`dropped`
/// none) or a dropped root (its context, which the inner layer attached).
pub(super) fn enter_forwarded(layer: usize, id: &Id, dropped: Option<Dropped>) {
    THREAD.with(|thread| {
        let trace = dropped.map(|cx| thread.hold(cx));
        thread.push(Entered {
            layer,
            id: id.clone(),
            trace,
            forwarded: true,
            _guard: None,
        });
    });
}

/// Records the enter of the skipped span `id` and makes the dropped trace's context
/// current while it is entered, unless it already is.
pub(super) fn enter_skipped(layer: usize, id: &Id, cx: Dropped) {
    THREAD.with(|thread| {
        let trace = thread.hold(cx);
        thread.enter_skipped(layer, id, trace);
    });
}

/// Enters `id` as skipped if it is pending for `layer` on this thread; whether it was.
pub(super) fn enter_pending(layer: usize, id: &Id) -> bool {
    THREAD.with(|thread| {
        let trace = {
            let raw = id.into_u64();
            let pending = thread.pending.borrow();
            pending
                .iter()
                .rev()
                .find(|p| p.layer == layer && p.id == raw)
                .map(|p| p.trace)
        };
        let Some(trace) = trace else {
            return false;
        };
        thread.hold_again(trace);
        thread.enter_skipped(layer, id, trace);
        true
    })
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
        if let Some(trace) = entered.trace {
            thread.dropped.set(thread.dropped.get() - 1);
            if entered.forwarded {
                thread.exited_dropped_root.set(Some((layer, id.into_u64())));
            }
            drop(thread.release(trace));
        }
        entered.forwarded
    })
}

/// Whether `layer`'s current span on this thread belongs to a dropped trace.
pub(super) fn in_dropped(layer: usize) -> bool {
    THREAD.with(|thread| thread.in_dropped(layer))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// The dropped traces this thread still holds.
    fn held() -> usize {
        THREAD.with(|thread| thread.traces.borrow().iter().flatten().count())
    }

    #[test]
    fn a_dropped_trace_is_released_once_its_spans_are_gone() {
        let cx: Dropped = Arc::new(OtelContext::new());
        let (root, child, open) = (Id::from_u64(1), Id::from_u64(2), Id::from_u64(3));
        enter_forwarded(7, &root, Some(cx.clone()));
        assert!(matches!(new_span(7, &child, true), NewSpan::Pending));
        assert!(matches!(new_span(7, &open, true), NewSpan::Pending));
        assert!(enter_pending(7, &child));
        // A child of the child is pending in the same trace.
        assert!(matches!(
            new_span(7, &Id::from_u64(4), true),
            NewSpan::Pending
        ));
        assert!(matches!(close(7, &Id::from_u64(4)), Close::Pending));
        assert!(!exit(7, &child), "a skipped span's exit is not forwarded");
        assert!(matches!(close(7, &child), Close::Pending));
        assert_eq!(held(), 1);
        assert!(exit(7, &root), "the root's exit is forwarded");
        // Left the trace with `open` still open: handed back to be marked.
        let taken = take_pending(7);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].id(), open);
        assert!(Arc::ptr_eq(&taken[0].cx, &cx));
        drop(taken);
        assert_eq!(held(), 0);
        assert_eq!(Arc::strong_count(&cx), 1, "nothing of the trace kept");
    }

    #[test]
    fn an_id_given_again_forgets_the_span_pending_under_it() {
        let cx: Dropped = Arc::new(OtelContext::new());
        let (root, child) = (Id::from_u64(11), Id::from_u64(12));
        enter_forwarded(8, &root, Some(cx.clone()));
        assert!(matches!(new_span(8, &child, true), NewSpan::Pending));
        // Closed on another thread, then its id given to a span with an explicit parent.
        assert!(matches!(new_span(8, &child, false), NewSpan::Elsewhere));
        assert!(!is_pending(8, &child));
        assert!(exit(8, &root));
        assert!(take_pending(8).is_empty());
        assert_eq!(Arc::strong_count(&cx), 1);
    }
}
