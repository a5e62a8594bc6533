//! [`DroppedContextExt::otel_context`]: a span's OpenTelemetry context for code that
//! injects it explicitly, a skipped span's included.

use opentelemetry::Context as OtelContext;
use tracing::span::Id;
use tracing::{Dispatch, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::registry::LookupSpan;

use super::mark::Mark;

/// How [`DroppedContextExt`] finds a skipped span's context through a `Dispatch` that
/// only knows the subscriber's type: the layer keeps one, made for its subscriber when
/// it is added to it, and hands it out through `downcast_raw`.
#[derive(Clone, Copy)]
pub(super) struct Lookup(fn(&Dispatch, &Id) -> Option<OtelContext>);

impl Lookup {
    pub(super) fn for_subscriber<S: Subscriber + for<'a> LookupSpan<'a>>() -> Self {
        Lookup(skipped_context::<S>)
    }
}

fn skipped_context<S: Subscriber + for<'a> LookupSpan<'a>>(
    dispatch: &Dispatch,
    id: &Id,
) -> Option<OtelContext> {
    let subscriber = dispatch.downcast_ref::<S>()?;
    let span = subscriber.span(id)?;
    let extensions = span.extensions();
    match extensions.get::<Mark>()? {
        Mark::Skipped(cx) => Some(cx.clone()),
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
        let mut skipped = None;
        self.with_subscriber(|(id, dispatch)| {
            if let Some(lookup) = dispatch.downcast_ref::<Lookup>() {
                skipped = (lookup.0)(dispatch, id);
            }
        });
        skipped.unwrap_or_else(|| self.context())
    }
}
