//! Adaptive consistent probability under a hard cap: each window's probability is set
//! from the previous window's offered count, and a fixed window of N backs it up.
//!
//! The estimate's state (one window word, one threshold word, one offered total) is
//! written once per window, by the one caller that wins the window word's
//! compare-exchange; every other decision only loads it. The offered count itself is
//! the decision counters' per-thread cells (`crate::stats`): counting a refusal writes
//! only the calling thread's own cell.
//!
//! A folder by role: `estimator` (the offered rate per window and the
//! threshold it derives, with its cap), `sampler` that puts it behind the
//! parent policy and the counters, and the sampler's `builder`.

mod builder;
mod estimator;
mod sampler;

pub use builder::AdaptiveSamplerBuilder;
pub(crate) use estimator::Adaptive;
pub use sampler::AdaptiveSampler;
