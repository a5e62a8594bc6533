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

/// A span skipped on this thread, in a dropped trace's scope, that carries no mark yet.
#[derive(Debug)]
pub(super) struct Pending {
    /// The layer that skipped it.
    layer: usize,
    /// Its id, as `Id::into_u64` gives it.
    id: u64,
    /// The dropped trace's context.
    pub(super) cx: Dropped,
}

impl Pending {
    pub(super) fn id(&self) -> Id {
        Id::from_u64(self.id)
    }
}

/// At most this many pending spans per thread: beyond, a skipped span is marked at once
/// (a trace keeping many children open), so finding one stays a short scan.
const MAX_PENDING: usize = 32;

/// What a thread keeps for the layers: its entered spans, how many of them belong to a
/// dropped trace, the dropped root it last exited, and its pending skipped spans.
struct Thread {
    entered: RefCell<Vec<Entered>>,
    /// The entries of `entered` whose `dropped` is set.
    dropped: Cell<usize>,
    /// The dropped root this thread last exited, with its layer, by id: most roots close
    /// right after their last exit, and a root so named is looked up to skip its close.
    exited_dropped_root: Cell<Option<(usize, u64)>>,
    /// Skipped spans created here in a dropped trace's scope, not closed yet, unmarked.
    pending: RefCell<Vec<Pending>>,
}

thread_local! {
    static THREAD: Thread = const {
        Thread {
            entered: RefCell::new(Vec::new()),
            dropped: Cell::new(0),
            exited_dropped_root: Cell::new(None),
            pending: RefCell::new(Vec::new()),
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
pub(super) fn enter_skipped(layer: usize, id: &Id, cx: Dropped) {
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
    let guard = (!current).then(|| OtelContext::clone(&cx).attach());
    push(Entered {
        layer,
        id: id.clone(),
        dropped: Some(cx),
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
    THREAD.with(|thread| thread.in_dropped(layer))
}

impl Thread {
    /// See [`in_dropped`].
    fn in_dropped(&self, layer: usize) -> bool {
        self.dropped.get() > 0
            && self
                .entered
                .borrow()
                .iter()
                .rev()
                .find(|e| e.layer == layer)
                .is_some_and(|top| top.dropped.is_some())
    }
}

/// Records `id`, just created by `layer` in the scope of the dropped trace of `cx`, as
/// pending: skipped, with no mark. Gives `cx` back when the thread has too many pending
/// already (the caller marks the span instead).
pub(super) fn add_pending(layer: usize, id: &Id, cx: Dropped) -> Result<(), Dropped> {
    THREAD.with(|thread| {
        let mut pending = thread.pending.borrow_mut();
        if pending.len() >= MAX_PENDING {
            return Err(cx);
        }
        pending.push(Pending {
            layer,
            id: id.into_u64(),
            cx,
        });
        Ok(())
    })
}

/// Forgets any pending span of `layer` with the id `id` the registry has just given a new
/// span: the one pending was closed on another thread (where this thread could not see
/// it), and its id is not its any more.
pub(super) fn forget_pending(layer: usize, id: &Id) {
    THREAD.with(|thread| {
        let mut pending = thread.pending.borrow_mut();
        if !pending.is_empty() {
            let id = id.into_u64();
            pending.retain(|p| !(p.layer == layer && p.id == id));
        }
    });
}

/// The dropped trace's context of `id` if it is pending for `layer` on this thread.
pub(super) fn pending(layer: usize, id: &Id) -> Option<Dropped> {
    THREAD.with(|thread| {
        let pending = thread.pending.borrow();
        let id = id.into_u64();
        pending
            .iter()
            .rev()
            .find(|p| p.layer == layer && p.id == id)
            .map(|p| p.cx.clone())
    })
}

/// Whether `id` is pending for `layer` on this thread.
pub(super) fn is_pending(layer: usize, id: &Id) -> bool {
    THREAD.with(|thread| {
        let pending = thread.pending.borrow();
        let id = id.into_u64();
        pending.iter().any(|p| p.layer == layer && p.id == id)
    })
}

/// What `layer` should do with the close of `id` on this thread.
pub(super) enum Close {
    /// A pending span, forgotten now: skip the close, nothing to look up.
    Pending,
    /// Inside a dropped trace, or the dropped root just exited: look the span's mark up.
    Likely,
    /// Most likely a span of a kept trace: forward the close without a lookup.
    Forward,
}

/// How to treat the close of `id` by `layer` (one visit of the thread's state).
pub(super) fn close(layer: usize, id: &Id) -> Close {
    THREAD.with(|thread| {
        let raw = id.into_u64();
        {
            let mut pending = thread.pending.borrow_mut();
            if let Some(at) = pending
                .iter()
                .rposition(|p| p.layer == layer && p.id == raw)
            {
                // The context is dropped once the list is no longer borrowed.
                let gone = pending.swap_remove(at);
                drop(pending);
                drop(gone);
                return Close::Pending;
            }
        }
        if thread.in_dropped(layer) {
            return Close::Likely;
        }
        if thread.exited_dropped_root.get() == Some((layer, raw)) {
            thread.exited_dropped_root.set(None);
            return Close::Likely;
        }
        Close::Forward
    })
}

/// The pending spans of `layer` on this thread, taken once the thread is no longer
/// inside a dropped trace of `layer` (the caller marks them): none in the usual case,
/// where every skipped child closed in its trace's scope.
pub(super) fn take_pending(layer: usize) -> Vec<Pending> {
    THREAD.with(|thread| {
        if thread.pending.borrow().is_empty() || thread.in_dropped(layer) {
            return Vec::new();
        }
        let mut pending = thread.pending.borrow_mut();
        let mut taken = Vec::new();
        let mut at = 0;
        while at < pending.len() {
            if pending[at].layer == layer {
                taken.push(pending.swap_remove(at));
            } else {
                at += 1;
            }
        }
        taken
    })
}
