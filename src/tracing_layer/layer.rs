//! [`SkipDropped`]: the layer, and what it forwards of each callback.

use std::any::TypeId;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use tracing::dispatcher::WeakDispatch;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use super::context::Lookup;
use super::entered;
use super::mark::{Known, Mark};

/// A `tracing` layer around [`tracing_opentelemetry::layer()`] that forwards nothing of
/// a dropped trace below its root: a dropped trace costs the registry, its root's
/// OpenTelemetry span and, for each span made in its scope, a look at the thread's own
/// state (no registry lookup, no allocation), not an OpenTelemetry span per span.
///
/// ```
/// use opentelemetry::trace::TracerProvider as _;
/// use opentelemetry_sdk::trace::SdkTracerProvider;
/// use otel_rate_sampler::{RateLimitingSampler, SkipDropped};
/// use tracing_subscriber::layer::SubscriberExt as _;
///
/// let provider = SdkTracerProvider::builder()
///     .with_sampler(RateLimitingSampler::per_second(100.0)?)
///     .build();
/// let subscriber = tracing_subscriber::registry().with(SkipDropped::new(
///     tracing_opentelemetry::layer().with_tracer(provider.tracer("checkout")),
/// ));
/// # drop(subscriber);
/// # Ok::<(), otel_rate_sampler::LimitError>(())
/// ```
///
/// # What it forwards
///
/// * A root (a span whose parent this layer has not seen, or none) goes to the inner
///   layer as without `SkipDropped`: the inner layer builds it and starts its
///   OpenTelemetry span on first enter, when the provider's sampler decides, with the
///   parent set by `set_parent` or the context current when the root was created.
///   Right after that enter the layer reads the decision back: the started span
///   records or it does not.
/// * Below a kept root (or a recorded one), everything is forwarded: the exporter
///   receives what it receives without this layer.
/// * Below a dropped root, nothing is: no span, enter, exit, record, event, link or
///   close of its descendants reaches the inner layer, nor the root's own records,
///   events, links and close (its non-recording span ends with the span's data). Its
///   enters and exits still reach it (the inner layer starts the span and detaches its
///   context).
/// * While a skipped span is entered, the dropped trace's context is the current
///   OpenTelemetry context, so propagators reading `Context::current()` send its trace
///   id with the sampled flag off. For a span's own context, use
///   [`DroppedContextExt::otel_context`](super::DroppedContextExt::otel_context) in
///   place of `OpenTelemetrySpanExt::context`.
///
/// Every other callback (`register_callsite`, `enabled`, `event_enabled`,
/// `max_level_hint`, `on_layer`, `on_register_dispatch`, `downcast_raw`) goes to the
/// inner layer unchanged, so per-layer filters, `EnvFilter` and reload layers compose
/// with it on either side, and `OpenTelemetrySpanExt` keeps finding the inner layer.
pub struct SkipDropped<L> {
    pub(super) inner: L,
    /// This layer among the layers whose spans share a thread's entered stack.
    pub(super) key: usize,
    /// The dispatch the layer is part of, to have the inner layer start a root whose
    /// decision is needed before its first enter (a child created first, or context
    /// activation turned off).
    pub(super) dispatch: OnceLock<WeakDispatch>,
    /// Set when the layer is added to a subscriber, whose type it knows.
    lookup: Option<Lookup>,
}

impl<L> SkipDropped<L> {
    /// Wraps `inner`, normally `tracing_opentelemetry::layer().with_tracer(...)` with any
    /// of its builder options.
    pub fn new(inner: L) -> Self {
        /// The next layer's key.
        static KEYS: AtomicUsize = AtomicUsize::new(0);
        Self {
            inner,
            // Relaxed: a unique number, published with the layer itself.
            key: KEYS.fetch_add(1, Ordering::Relaxed),
            dispatch: OnceLock::new(),
            lookup: None,
        }
    }

    /// The wrapped layer.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The wrapped layer, mutably.
    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.inner
    }

    /// The wrapped layer, unwrapped.
    pub fn into_inner(self) -> L {
        self.inner
    }
}

impl<S, L> Layer<S> for SkipDropped<L>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    L: Layer<S>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        // The first dispatch wins: a layer belongs to one subscriber.
        let _ = self.dispatch.set(subscriber.downgrade());
        self.inner.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.lookup = Some(Lookup::for_subscriber::<S>(self.key));
        self.inner.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.inner.max_level_hint()
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.event_enabled(event, ctx)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        // The parent's trace: the current span's from this thread's entered stack (no
        // lookup; a child in a dropped trace's scope is pending there, no mark), an
        // explicit parent's from its mark; none for a root.
        let explicit = match entered::new_span(self.key, id, attrs.is_contextual()) {
            entered::NewSpan::Pending => return,
            entered::NewSpan::Mark(cx) => return Self::mark_skipped(id, cx, &ctx),
            entered::NewSpan::Elsewhere => attrs.parent(),
        };
        let dropped = explicit.and_then(|parent| {
            entered::pending(self.key, parent).or_else(|| {
                ctx.span(parent)
                    .and_then(|parent| match self.known(&parent) {
                        Known::Skipped(cx) => Some(cx),
                        Known::Forwarded(dropped) => dropped,
                    })
            })
        });
        match dropped {
            // A root or a span of a kept trace: the inner layer builds it (a root's
            // decision is read on its first enter).
            None => self.inner.on_new_span(attrs, id, ctx),
            Some(cx) => Self::mark_skipped(id, cx, &ctx),
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        // Inside a dropped trace the span entered is most likely one of its skipped
        // spans, pending on this thread (no lookup) or marked: tell before the inner
        // layer would look, for nothing. Elsewhere it is most likely one the inner layer
        // knows: let its enter tell.
        if !entered::in_dropped(self.key) {
            return self.enter_forwarding_first(id, ctx);
        }
        if entered::enter_pending(self.key, id) {
            return;
        }
        let Some(span) = ctx.span(id) else {
            return self.inner.on_enter(id, ctx);
        };
        let skipped = match span.extensions().get::<Mark>() {
            Some(Mark::Skipped(cx)) => Some(cx.clone()),
            _ => None,
        };
        if let Some(cx) = skipped {
            return entered::enter_skipped(self.key, id, cx);
        }
        match self.known(&span) {
            Known::Skipped(cx) => entered::enter_skipped(self.key, id, cx),
            Known::Forwarded(dropped) => {
                self.inner.on_enter(id, ctx.clone());
                entered::enter_forwarded(self.key, id, dropped);
            }
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let forwarded = entered::exit(self.key, id);
        // Leaving a dropped trace's scope with skipped spans still open: they get their
        // marks now, for whoever enters or closes them elsewhere.
        for pending in entered::take_pending(self.key) {
            Self::mark_skipped(&pending.id(), pending.cx, &ctx);
        }
        if forwarded {
            self.inner.on_exit(id, ctx);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        // A skipped span, or a dropped root (whose non-recording span the registry drops
        // with the span's data, ending nothing): nothing for the inner layer to do. A
        // pending span is known without a lookup; the lookup that tells for a marked one
        // is made where one is likely (inside a dropped trace, or right after a dropped
        // root's exit), never for a kept span outside one; a skipped span closing
        // elsewhere (on another thread, after its root's scope) costs the inner layer
        // the lookup it finds nothing with.
        let dropped = match entered::close(self.key, &id) {
            entered::Close::Pending => true,
            entered::Close::Likely => ctx.span(&id).is_some_and(|span| {
                span.extensions()
                    .get::<Mark>()
                    .is_some_and(Mark::is_dropped)
            }),
            entered::Close::Forward => false,
        };
        if !dropped {
            self.inner.on_close(id, ctx);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if !self.is_dropped(id, &ctx) {
            self.inner.on_record(id, values, ctx);
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: Context<'_, S>) {
        if self.is_dropped(id, &ctx) {
            return;
        }
        let skipped = entered::pending(self.key, follows).or_else(|| {
            ctx.span(follows)
                .and_then(|span| match span.extensions().get::<Mark>() {
                    Some(Mark::Skipped(cx)) => Some(cx.clone()),
                    _ => None,
                })
        });
        match skipped {
            // The inner layer never saw `follows`: link the span to the dropped trace
            // through its root's context, as the inner layer links seen spans.
            Some(cx) => self.link(id, &cx),
            None => self.inner.on_follows_from(id, follows, ctx),
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let dropped = if let Some(parent) = event.parent() {
            self.is_dropped(parent, &ctx)
        } else if event.is_contextual() {
            entered::in_dropped(self.key)
        } else {
            false
        };
        if !dropped {
            self.inner.on_event(event, ctx);
        }
    }

    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        #[allow(deprecated)]
        self.inner.on_id_change(old, new, ctx);
    }

    // SAFETY: the pointers returned point into `self` (itself, its lookup) or are the
    // inner layer's own answer, valid for as long as `self` is, as the trait requires.
    #[allow(unsafe_code)] // the trait's method is unsafe to implement; nothing else is
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(std::ptr::from_ref(self).cast());
        }
        if id == TypeId::of::<Lookup>() {
            if let Some(lookup) = &self.lookup {
                return Some(std::ptr::from_ref(lookup).cast());
            }
        }
        // SAFETY: forwarded unchanged; the inner layer lives as long as `self`.
        unsafe { self.inner.downcast_raw(id) }
    }
}

impl<L: fmt::Debug> fmt::Debug for SkipDropped<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkipDropped")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}
