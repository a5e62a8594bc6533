//! The OpenTelemetry side: [`ShouldSample`](opentelemetry_sdk::trace::ShouldSample)s
//! that ask a limiter once per trace.

#[cfg(feature = "config")]
mod matcher;
mod parent;
mod rate_limiting;
#[cfg(feature = "config")]
mod rule_based;
#[cfg(feature = "config")]
mod rule_set;
mod trace_state;

#[cfg(feature = "config")]
pub(crate) use parent::Origin;
pub use rate_limiting::{
    RateLimitingSampler, RateLimitingSamplerBuilder, RemoteParents, SAMPLER_PARAM, SAMPLER_TYPE,
    SAMPLER_TYPE_VALUE,
};
#[cfg(feature = "config")]
pub use rule_based::RuleBasedSampler;
#[cfg(feature = "config")]
pub use rule_set::{SAMPLER_RULE, SAMPLER_TYPE_PROBABILISTIC};
