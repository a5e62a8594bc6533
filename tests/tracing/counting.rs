//! A layer that counts what reaches it, by callback and span name: put between
//! `SkipDropped` and the OpenTelemetry layer, it shows what the wrapped layer is told.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use otel_rate_sampler::SkipDropped;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::pipeline::Provider;

/// Counts of (callback, span name).
#[derive(Clone, Debug, Default)]
pub(crate) struct Counts(Arc<Mutex<BTreeMap<(&'static str, String), usize>>>);

impl Counts {
    fn add(&self, callback: &'static str, name: &str) {
        *self
            .0
            .lock()
            .unwrap()
            .entry((callback, name.to_owned()))
            .or_default() += 1;
    }

    /// How often `callback` reached the layer for spans (or events) named `name`.
    pub(crate) fn get(&self, callback: &'static str, name: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .get(&(callback, name.to_owned()))
            .copied()
            .unwrap_or(0)
    }
}

/// The registry with `SkipDropped` around the OpenTelemetry layer of `provider`, what
/// reaches that layer counted.
pub(crate) fn counting_dispatch(provider: &Provider) -> (tracing::Dispatch, Counts) {
    let counts = Counts::default();
    let layer = SkipDropped::new(Counting {
        inner: provider.layer(),
        counts: counts.clone(),
    });
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    (dispatch, counts)
}

/// `inner`, counting every callback that reaches it into `counts`.
#[derive(Debug)]
pub(crate) struct Counting<L> {
    pub(crate) inner: L,
    pub(crate) counts: Counts,
}

fn name<S: Subscriber + for<'a> LookupSpan<'a>>(ctx: &Context<'_, S>, id: &Id) -> String {
    ctx.span(id)
        .map_or_else(String::new, |s| s.name().to_owned())
}

impl<S, L> Layer<S> for Counting<L>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    L: Layer<S>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.counts.add("new_span", attrs.metadata().name());
        self.inner.on_new_span(attrs, id, ctx);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        self.counts.add("enter", &name(&ctx, id));
        self.inner.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        self.counts.add("exit", &name(&ctx, id));
        self.inner.on_exit(id, ctx);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        self.counts.add("close", &name(&ctx, &id));
        self.inner.on_close(id, ctx);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        self.counts.add("record", &name(&ctx, id));
        self.inner.on_record(id, values, ctx);
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        self.counts.add("event", event.metadata().name());
        self.inner.on_event(event, ctx);
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.counts.add("follows_from", &name(&ctx, id));
        self.inner.on_follows_from(id, follows, ctx);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber);
    }

    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }

    // SAFETY: forwarded to the inner layer, which lives as long as `self`.
    #[allow(unsafe_code)]
    unsafe fn downcast_raw(&self, id: std::any::TypeId) -> Option<*const ()> {
        if id == std::any::TypeId::of::<Self>() {
            return Some(std::ptr::from_ref(self).cast());
        }
        // SAFETY: as above.
        unsafe { self.inner.downcast_raw(id) }
    }
}
