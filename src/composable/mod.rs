//! OpenTelemetry's composable samplers (specification `trace/sdk.md`, "CompositeSampler",
//! status Development): a [`ComposableSampler`] states an intent (a rejection threshold,
//! whether it is reliable, attributes and a trace-state update for a kept span) and a
//! [`CompositeSampler`] turns it into the SDK's decision, writing or erasing `th`.
//!
//! The specification's built-ins: [`ComposableAlwaysOn`], [`ComposableAlwaysOff`],
//! [`ComposableProbability`], [`ComposableParentThreshold`], [`ComposableRuleBased`] and
//! [`ComposableAnnotating`]. Ours (not in the specification) are marked as such on
//! their types: [`ComposableRateLimiting`], [`Predicate`] (the configuration schema's rule conditions as a
//! [`SamplingPredicate`]) and the [`Threshold`] type's constructors.

mod admission;
mod always;
mod annotating;
mod composite;
mod error;
mod fresh;
mod intent;
mod parent;
mod parent_threshold;
mod probability;
mod rate_limiting;
mod rule_based;
mod sampler;
mod threshold;

pub use always::{ComposableAlwaysOff, ComposableAlwaysOn};
pub use annotating::ComposableAnnotating;
pub use composite::CompositeSampler;
pub use error::ComposableError;
pub use intent::{AttributesProvider, SamplingIntent, TraceStateUpdater};
pub use parent_threshold::ComposableParentThreshold;
pub use probability::ComposableProbability;
#[cfg(feature = "yaml")]
pub(crate) use rate_limiting::arc_bytes;
pub use rate_limiting::ComposableRateLimiting;
pub use rule_based::{
    ComposableRuleBased, ComposableRuleBasedBuilder, Predicate, SamplingPredicate,
};
pub use sampler::ComposableSampler;
pub use threshold::Threshold;

/// Parents and decisions for the unit tests.
#[cfg(all(test, not(loom)))]
pub(crate) mod test_support;
