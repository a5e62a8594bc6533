#![doc = include_str!("../README.md")]
// The library has no unsafe code and never will; only a test (a counting allocator)
// needs it, so the manifest denies it crate-wide and the library forbids it here.
#![forbid(unsafe_code)]

mod clock;
mod limit;
mod limiter;
mod sampler;
mod sync;

pub use clock::{CachedClock, Clock, ManualClock, MonotonicClock, PreciseClock};
pub use limit::{Limit, LimitError, MIN_WINDOW};
pub use limiter::{
    Algorithm, AnyLimiter, FixedWindow, ParseAlgorithmError, RateLimiter, SlidingLog,
    SlidingWindowCounter,
};
pub use sampler::{
    RateLimitingSampler, RateLimitingSamplerBuilder, RemoteParents, SAMPLER_PARAM, SAMPLER_TYPE,
    SAMPLER_TYPE_VALUE,
};
