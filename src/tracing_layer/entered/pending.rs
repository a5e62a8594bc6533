//! The skipped spans a thread made in a dropped trace's scope, known by id until they
//! close there or the thread leaves the trace (then handed back to be marked).

use tracing::span::Id;

use super::{Waiting, THREAD};
use crate::tracing_layer::mark::Dropped;

/// A pending span handed back to be marked.
#[derive(Debug)]
pub(in crate::tracing_layer) struct Pending {
    id: u64,
    /// The dropped trace's context.
    pub(in crate::tracing_layer) cx: Dropped,
}

impl Pending {
    pub(in crate::tracing_layer) fn id(&self) -> Id {
        Id::from_u64(self.id)
    }
}

/// At most this many pending spans per thread: beyond, a skipped span is marked at once
/// (a trace keeping many children open), so finding one stays a short scan.
const MAX_PENDING: usize = 32;

/// What `layer` does with a span just made.
pub(in crate::tracing_layer) enum NewSpan {
    /// Nothing more: skipped in a dropped trace's scope, pending on this thread.
    Pending,
    /// Skipped in the dropped trace of this context, to be marked (too many pending).
    Mark(Dropped),
    /// Not made in a dropped trace's scope: the caller decides.
    Elsewhere,
}

/// Records the span `id` just made by `layer`: pending if it is contextual and this
/// thread is inside a dropped trace of `layer`. Forgets first any pending span with
/// that id (the registry gives it again: the one pending closed on another thread,
/// where this thread could not see it).
pub(in crate::tracing_layer) fn new_span(layer: usize, id: &Id, contextual: bool) -> NewSpan {
    THREAD.with(|thread| {
        let raw = id.into_u64();
        thread.unpend(layer, raw);
        let trace = match (contextual, thread.top(layer)) {
            (true, Some(Some(trace))) => trace,
            _ => return NewSpan::Elsewhere,
        };
        if thread.pending.borrow().len() >= MAX_PENDING {
            return thread
                .context(trace)
                .map_or(NewSpan::Elsewhere, NewSpan::Mark);
        }
        thread.hold_again(trace);
        thread.pending.borrow_mut().push(Waiting {
            layer,
            id: raw,
            trace,
        });
        NewSpan::Pending
    })
}

/// The dropped trace's context of `id` if it is pending for `layer` on this thread.
pub(in crate::tracing_layer) fn pending(layer: usize, id: &Id) -> Option<Dropped> {
    THREAD.with(|thread| {
        let raw = id.into_u64();
        let trace = thread
            .pending
            .borrow()
            .iter()
            .rev()
            .find(|p| p.layer == layer && p.id == raw)
            .map(|p| p.trace)?;
        thread.context(trace)
    })
}

/// Whether `id` is pending for `layer` on this thread.
pub(in crate::tracing_layer) fn is_pending(layer: usize, id: &Id) -> bool {
    THREAD.with(|thread| {
        let raw = id.into_u64();
        let pending = thread.pending.borrow();
        pending.iter().any(|p| p.layer == layer && p.id == raw)
    })
}

/// What `layer` should do with the close of `id` on this thread.
pub(in crate::tracing_layer) enum Close {
    /// A pending span, forgotten now: skip the close, nothing to look up.
    Pending,
    /// Inside a dropped trace, or the dropped root just exited: look the span's mark up.
    Likely,
    /// Most likely a span of a kept trace: forward the close without a lookup.
    Forward,
}

/// How to treat the close of `id` by `layer` (one visit of the thread's state).
pub(in crate::tracing_layer) fn close(layer: usize, id: &Id) -> Close {
    THREAD.with(|thread| {
        let raw = id.into_u64();
        if thread.unpend(layer, raw) {
            return Close::Pending;
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
pub(in crate::tracing_layer) fn take_pending(layer: usize) -> Vec<Pending> {
    THREAD.with(|thread| {
        if thread.pending.borrow().is_empty() || thread.in_dropped(layer) {
            return Vec::new();
        }
        let mut waiting = Vec::new();
        {
            let mut pending = thread.pending.borrow_mut();
            let mut at = 0;
            while at < pending.len() {
                if pending[at].layer == layer {
                    waiting.push(pending.swap_remove(at));
                } else {
                    at += 1;
                }
            }
        }
        waiting
            .into_iter()
            .filter_map(|w| {
                let cx = thread.context(w.trace);
                drop(thread.release(w.trace));
                cx.map(|cx| Pending { id: w.id, cx })
            })
            .collect()
    })
}
