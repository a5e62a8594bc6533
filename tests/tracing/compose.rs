//! The layer with what users put around and inside it: `EnvFilter`, per-layer filters
//! on either side, a reload layer, and the OpenTelemetry layer's builder options
//! (context activation off included). Kept traces still arrive whole, dropped ones send
//! nothing.

use tracing::level_filters::LevelFilter;
use tracing_subscriber::layer::{Layer as _, SubscriberExt as _};
use tracing_subscriber::{reload, EnvFilter};

use otel_rate_sampler::SkipDropped;

use crate::pipeline::{assert_kept_whole, Provider};
use crate::shapes::{first, request, request_then, SPANS};

/// Ten requests through `dispatch` on `provider` (keeping the first 3), checked.
fn check(provider: &Provider, dispatch: &tracing::Dispatch, per_trace: usize) {
    let decisions: Vec<_> =
        tracing::dispatcher::with_default(dispatch, || (0..10).map(request).collect());
    assert_eq!(decisions.iter().filter(|d| d.1).count(), 3);
    assert_kept_whole(&provider.spans(), &decisions, per_trace);
}

#[test]
fn under_an_env_filter() {
    let provider = Provider::new(first(3));
    let subscriber = tracing_subscriber::registry()
        .with(EnvFilter::new("info"))
        .with(SkipDropped::new(provider.layer()));
    check(&provider, &tracing::Dispatch::new(subscriber), SPANS);
}

#[test]
fn with_a_per_layer_filter_outside_or_inside() {
    let provider = Provider::new(first(3));
    let outside = SkipDropped::new(provider.layer()).with_filter(LevelFilter::INFO);
    check(
        &provider,
        &tracing::Dispatch::new(tracing_subscriber::registry().with(outside)),
        SPANS,
    );

    let provider = Provider::new(first(3));
    let inside = SkipDropped::new(provider.layer().with_filter(EnvFilter::new("info")));
    check(
        &provider,
        &tracing::Dispatch::new(tracing_subscriber::registry().with(inside)),
        SPANS,
    );
}

#[test]
fn inside_a_reload_layer_beside_a_reloaded_filter() {
    let provider = Provider::new(first(3));
    let (filter, handle) = reload::Layer::new(EnvFilter::new("warn"));
    let (layer, _layer_handle) = reload::Layer::new(SkipDropped::new(provider.layer()));
    let subscriber = tracing_subscriber::registry().with(filter).with(layer);
    let dispatch = tracing::Dispatch::new(subscriber);
    // Filtered out: no span reaches the layers.
    tracing::dispatcher::with_default(&dispatch, || (0..5).for_each(|n| request_then(n, |_| ())));
    assert!(provider.spans().is_empty());
    handle.reload(EnvFilter::new("info")).unwrap();
    tracing::dispatcher::with_default(&dispatch, || (0..10).for_each(|n| request_then(n, |_| ())));
    // A reload layer hides the layers inside it from `downcast_raw`, so no root's own
    // context can be read back: judge by what was exported, 3 whole traces.
    let spans = provider.spans();
    let traces = crate::pipeline::by_trace(&spans);
    assert_eq!(traces.len(), 3);
    assert!(traces.values().all(|t| t.len() == SPANS));
}

#[test]
fn with_every_builder_option_of_the_opentelemetry_layer() {
    for activation in [true, false] {
        for tracked in [true, false] {
            let provider = Provider::new(first(3));
            let layer = provider
                .layer()
                .with_context_activation(activation)
                .with_tracked_inactivity(tracked)
                .with_location(true)
                .with_threads(true)
                .with_level(true)
                .with_target(true)
                .with_error_events_to_status(true)
                .with_error_events_to_exceptions(true)
                .with_error_fields_to_exceptions(true)
                .with_error_records_to_exceptions(true);
            let subscriber = tracing_subscriber::registry().with(SkipDropped::new(layer));
            check(&provider, &tracing::Dispatch::new(subscriber), SPANS);
        }
    }
}
