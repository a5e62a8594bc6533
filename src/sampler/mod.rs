//! The OpenTelemetry side: [`ShouldSample`](opentelemetry_sdk::trace::ShouldSample)s
//! that ask a limiter once per trace, the parent policy they share and the attributes
//! they record.

mod adaptive;
pub mod attributes;
mod consistent;
// Public at the crate root as `env`; with `config`, through the rule layer's `env`,
// which adds the rule file's variables.
#[cfg(not(feature = "config"))]
pub mod env;
#[cfg(feature = "config")]
pub(crate) mod env;
mod fair_builder;
mod fair_by;
mod parent;
mod rate_limiting;
mod trace_state;

#[cfg_attr(not(feature = "config"), allow(unused_imports))]
pub(crate) use adaptive::Adaptive; // the rule layer's `adaptive`
pub use adaptive::{AdaptiveSampler, AdaptiveSamplerBuilder};
#[cfg_attr(not(feature = "config"), allow(unused_imports))]
pub(crate) use consistent::{decide as decide_consistent, Kept, Threshold, Verdict};
pub use fair_builder::FairSamplerBuilder;
pub use fair_by::FairBy;
pub use parent::RemoteParents;
#[cfg_attr(not(feature = "config"), allow(unused_imports))] // the rule layer uses them
pub(crate) use parent::{apply as apply_parent_policy, drop_span, Origin};
pub use rate_limiting::{RateLimitingSampler, RateLimitingSamplerBuilder};
#[cfg_attr(not(feature = "config"), allow(unused_imports))]
pub(crate) use trace_state::erase_threshold;
// The composable samplers' randomness, threshold parse and trace-state edit.
#[cfg(feature = "composable")]
pub(crate) use consistent::{parent_threshold, randomness, with_threshold, ParentThreshold};
