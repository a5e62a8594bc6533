//! Feature `metrics`: the samplers' [`stats`](crate::RateLimitingSampler::stats) as
//! OpenTelemetry metrics, through observable instruments whose callbacks sum the
//! per-thread counters when the reader collects. A decision makes no metric API call.
//! With feature `redis`, `fleet.rs` reports the fleet limiters' statistics the same way.

#[cfg(feature = "redis")]
mod fleet;
mod instruments;
mod observation;

pub use instruments::SamplerMetrics;
