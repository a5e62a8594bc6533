//! [`DroppedContextExt::otel_context`]: a span's OpenTelemetry context for code that
//! injects it explicitly, a skipped span's included.

use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::Context as OtelContext;
use tracing::span::Id;
use tracing::{Dispatch, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::registry::LookupSpan;

use super::entered;
use super::mark::{dropped_ancestor, Mark};

/// How [`DroppedContextExt`] finds a skipped span's context through a `Dispatch` that
/// only knows the subscriber's type: the layer keeps one, made for its subscriber when
/// it is added to it, and hands it out through `downcast_raw`.
#[derive(Clone, Copy)]
pub(super) struct Lookup {
    find: fn(&Dispatch, &Id, usize, Ancestors) -> Option<OtelContext>,
    /// The layer's key, to find its pending spans.
    layer: usize,
}

/// Whether [`Lookup`] looks at an unmarked span's ancestors.
#[derive(Clone, Copy)]
enum Ancestors {
    /// No: the span's own mark, or its pending entry on this thread.
    Skip,
    /// Yes: a skipped span pending on another thread has no mark yet, and the inner
    /// layer has no context for it.
    Read,
}

impl Lookup {
    pub(super) fn for_subscriber<S: Subscriber + for<'a> LookupSpan<'a>>(layer: usize) -> Self {
        Lookup {
            find: skipped_context::<S>,
            layer,
        }
    }
}

fn skipped_context<S: Subscriber + for<'a> LookupSpan<'a>>(
    dispatch: &Dispatch,
    id: &Id,
    layer: usize,
    ancestors: Ancestors,
) -> Option<OtelContext> {
    if let Some(cx) = entered::pending(layer, id) {
        return Some(OtelContext::clone(&cx));
    }
    let subscriber = dispatch.downcast_ref::<S>()?;
    let span = subscriber.span(id)?;
    let mark = span.extensions().get::<Mark>().cloned();
    match (mark, ancestors) {
        (Some(Mark::Skipped(cx)), _) => Some(OtelContext::clone(&cx)),
        (None, Ancestors::Read) => dropped_ancestor(&span).map(|cx| OtelContext::clone(&cx)),
        _ => None,
    }
}

/// The drop-in for [`OpenTelemetrySpanExt::context`](tracing_opentelemetry::OpenTelemetrySpanExt::context)
/// under [`SkipDropped`](super::SkipDropped).
///
/// The OpenTelemetry layer never sees a span below a dropped root, so its `context()`
/// returns an empty context there, and a propagator injecting it writes nothing: the
/// next service starts a trace of its own and decides alone. `otel_context()` returns
/// the dropped trace's context instead (its trace id, the sampled flag off), and what
/// `context()` returns for every other span.
///
/// ```
/// use opentelemetry::propagation::TextMapPropagator as _;
/// use opentelemetry_sdk::propagation::TraceContextPropagator;
/// use otel_rate_sampler::DroppedContextExt as _;
///
/// let span = tracing::info_span!("call downstream");
/// let mut headers = std::collections::HashMap::new();
/// // Was: `.inject_context(&span.context(), ...)`
/// TraceContextPropagator::new().inject_context(&span.otel_context(), &mut headers);
/// ```
pub trait DroppedContextExt {
    /// The OpenTelemetry context to propagate for this span: a dropped trace's for a
    /// span [`SkipDropped`](super::SkipDropped) kept from the inner layer, else
    /// [`OpenTelemetrySpanExt::context`](tracing_opentelemetry::OpenTelemetrySpanExt::context).
    fn otel_context(&self) -> OtelContext;
}

impl DroppedContextExt for tracing::Span {
    fn otel_context(&self) -> OtelContext {
        let skipped = |ancestors| {
            let mut skipped = None;
            self.with_subscriber(|(id, dispatch)| {
                if let Some(lookup) = dispatch.downcast_ref::<Lookup>() {
                    skipped = (lookup.find)(dispatch, id, lookup.layer, ancestors);
                }
            });
            skipped
        };
        if let Some(cx) = skipped(Ancestors::Skip) {
            return cx;
        }
        // Only where the inner layer has nothing: a kept span costs no walk.
        let cx = self.context();
        if cx.has_active_span() {
            return cx;
        }
        skipped(Ancestors::Read).unwrap_or(cx)
    }
}
