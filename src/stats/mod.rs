//! What the samplers decided so far: per-thread counters on the decision path, summed
//! into snapshots when someone asks ([`RateLimitingSampler::stats`](crate::RateLimitingSampler::stats),
//! `RuleBasedSampler::stats`, the `metrics` feature's instruments).

mod counters;
mod snapshot;

pub(crate) use counters::{record, Counters, Event};
#[cfg(feature = "config")]
pub use snapshot::{CapStats, ReloadStats, RuleBasedStats, RuleStats};
pub use snapshot::{DecisionStats, DropReason, ParentOrigin, SamplerStats, WindowFill};
