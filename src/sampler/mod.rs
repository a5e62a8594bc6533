//! The OpenTelemetry side: a [`ShouldSample`](opentelemetry_sdk::trace::ShouldSample)
//! that asks a limiter once per trace.

mod parent;
mod rate_limiting;
mod trace_state;

pub use rate_limiting::{
    RateLimitingSampler, RateLimitingSamplerBuilder, RemoteParents, SAMPLER_PARAM, SAMPLER_TYPE,
    SAMPLER_TYPE_VALUE,
};
