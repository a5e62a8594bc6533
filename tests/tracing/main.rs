//! `SkipDropped` with an SDK provider exporting to memory: what reaches the exporter
//! through the layer (whole kept traces, nothing of dropped ones) and what reaches the
//! wrapped layer (nothing below a dropped root), with every sampler of the crate and a
//! foreign one, with the OpenTelemetry layer's builder options and tracing-subscriber's
//! filters and reload layers around it, and what a dropped trace propagates.
//! The same end to end through a real OTLP receiver is in `tests/otlp/skip_dropped.rs`.

mod compose;
mod counting;
mod open_children;
mod pipeline;
mod propagation;
mod samplers;
mod shapes;
