//! Feature `metrics`: the samplers' [`stats`](crate::RateLimitingSampler::stats) as
//! OpenTelemetry metrics, through observable instruments whose callbacks sum the
//! per-thread counters when the reader collects. A decision makes no metric API call.

mod instruments;
mod observation;

pub use instruments::SamplerMetrics;
