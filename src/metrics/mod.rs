//! Feature `metrics`: the samplers' [`stats`](crate::RateLimitingSampler::stats) as
//! OpenTelemetry metrics, through observable instruments whose callbacks sum the
//! per-thread counters when the reader collects. A decision makes no metric API call.
//! With feature `redis`, `fleet.rs` reports the fleet limiters' statistics the same way,
//! per key, and `fleet_targets.rs` per Redis target.

#[cfg(feature = "redis")]
mod fleet;
#[cfg(feature = "redis")]
mod fleet_targets;
mod instruments;
mod observation;

pub use instruments::SamplerMetrics;
