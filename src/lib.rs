#![doc = include_str!("../README.md")]
// The library has no unsafe code and never will; only a test (a counting allocator)
// needs it, so the manifest denies it crate-wide and the library forbids it here.
#![forbid(unsafe_code)]

mod clock;
#[cfg(feature = "config")]
mod config;
// The lease word is also built under loom (without the feature) for its model tests.
#[cfg(any(feature = "redis", all(test, loom)))]
mod fleet;
mod limit;
mod limiter;
mod sampler;
mod sync;

pub use clock::{CachedClock, Clock, ManualClock, MonotonicClock, PreciseClock};
#[cfg(feature = "reload")]
pub use config::ConfigWatcher;
#[cfg(feature = "config")]
pub use config::{
    ConfigError, ConfigErrorKind, SamplingConfig, DEFAULT_TRACES_PER_SECOND,
    OTEL_RATE_SAMPLER_CONFIG, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG,
    PARENTBASED_RATELIMITING, RATELIMITING,
};
#[cfg(feature = "redis")]
pub use fleet::{
    FleetError, FleetLimiter, FleetLimiterBuilder, FleetStats, RedisUrls, DEFAULT_FLEET_PREFIX,
};
pub use limit::{Limit, LimitError, MIN_WINDOW};
pub use limiter::{
    Algorithm, AnyLimiter, FixedWindow, ParseAlgorithmError, RateLimiter, SlidingLog,
    SlidingWindowCounter,
};
pub use sampler::{
    RateLimitingSampler, RateLimitingSamplerBuilder, RemoteParents, SAMPLER_PARAM, SAMPLER_TYPE,
    SAMPLER_TYPE_VALUE,
};
#[cfg(feature = "config")]
pub use sampler::{RuleBasedSampler, SAMPLER_RULE, SAMPLER_TYPE_PROBABILISTIC};
