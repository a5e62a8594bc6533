//! Rate-limited trace sampling for OpenTelemetry: **at most N traces per window** leave
//! the process, whatever the traffic does, for a few nanoseconds per decision.
//!
//! * [`RateLimitingSampler`]: a [`ShouldSample`](opentelemetry_sdk::trace::ShouldSample)
//!   that asks a lock-free limiter once per trace and keeps children with their root.
//! * [`AdaptiveSampler`]: about, and at most, `N` traces per window by a consistent
//!   probability (OTEP 235, `ot=th` on kept spans) adapted each window to the offered
//!   load, with a hard cap of `N` behind it.
//! * The limiters, behind [`RateLimiter`]: [`FixedWindow`], [`SlidingWindowCounter`],
//!   [`SlidingLog`] and [`BucketedWindow`] (or [`AnyLimiter`], chosen at run time by
//!   [`Algorithm`], whose docs say which to use when), each with its guarantee stated on
//!   its type, over a [`Limit`] (fractional rates allowed; paced by default, so kept
//!   traces spread across the window) and a [`Clock`] (a [`ManualClock`] for tests).
//! * The environment ([`env`](mod@env)): [`RateLimitingSampler::from_env`] reads
//!   `OTEL_TRACES_SAMPLER=ratelimiting` and its argument, with no feature.
//! * Feature `config`: per-service rules from TOML or Jaeger strategy files and the
//!   environment ([`SamplingConfig`], [`RuleBasedSampler`]); feature `yaml`: the same
//!   rules in YAML, and OpenTelemetry declarative configuration files
//!   (`DeclarativeSampler`, `OTEL_CONFIG_FILE`); feature `reload`: hot reload of the rule
//!   file; feature `jaeger-remote`: strategies polled from a Jaeger collector or agent
//!   (`JaegerRemote`).
//! * Feature `composable`: OpenTelemetry's composable samplers (specification status
//!   Development): [`CompositeSampler`] over the specification's built-ins
//!   (`ComposableProbability`, `ComposableParentThreshold`, `ComposableRuleBased`, ...).
//! * Feature `tracing`: `SkipDropped`, a layer around
//!   `tracing_opentelemetry::layer()` that forwards nothing of a dropped trace below
//!   its root, so a dropped trace costs little more than the bare registry, and
//!   `DroppedContextExt`, the propagation drop-in that goes with it.
//! * Every sampler counts its decisions (kept, dropped and why) for a nanosecond or so:
//!   [`RateLimitingSampler::stats`]; feature `metrics` reports them as OpenTelemetry
//!   metrics (`SamplerMetrics`).
//!
//! ```
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//! use otel_rate_sampler::RateLimitingSampler;
//!
//! let sampler = RateLimitingSampler::per_second(100.0)?; // 0.5 = one trace per 2 s
//! let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
//! # Ok::<(), otel_rate_sampler::LimitError>(())
//! ```
//!
//! Each type's docs state what it guarantees and what it costs; the guides in the
//! repository's `docs/` (linked from its README) cover `tracing` and OTLP set-up,
//! configuration files, the fleet limiter and the tools, and `BENCHMARKS.md` the
//! measured costs.
// The library has no unsafe code but one method: `SkipDropped`'s `Layer::downcast_raw`,
// which tracing-subscriber declares unsafe to implement and which must forward to the
// wrapped layer. The manifest denies unsafe code crate-wide; that method allows it.
#![deny(unsafe_code)]
// docs.rs builds with every feature and marks what each item needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod clock;
#[cfg(feature = "composable")]
mod composable;
#[cfg(feature = "config")]
mod config;
// The lease word is also built under loom (without the feature) for its model tests.
#[cfg(any(feature = "redis", all(test, loom)))]
mod fleet;
mod limit;
mod limiter;
// Glob patterns on names and attribute values: the rule layer's and the composables'.
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(any(feature = "config", feature = "composable"))]
#[cfg_attr(not(feature = "config"), allow(dead_code))] // the composables use a part
mod pattern;
mod sampler;
pub mod stats;
mod sync;
#[cfg(any(feature = "redis", feature = "jaeger-remote"))]
mod tls_files;
#[cfg(feature = "tracing")]
mod tracing_layer;

pub use clock::{CachedClock, Clock, ManualClock, MonotonicClock, PreciseClock};
#[cfg(feature = "composable")]
pub use composable::{
    AttributesProvider, ComposableAlwaysOff, ComposableAlwaysOn, ComposableAnnotating,
    ComposableError, ComposableParentThreshold, ComposableProbability, ComposableRateLimiting,
    ComposableRuleBased, ComposableRuleBasedBuilder, ComposableSampler, CompositeSampler,
    Predicate, SamplingIntent, SamplingPredicate, Threshold, TraceStateUpdater,
};
#[cfg(feature = "config")]
pub use config::env;
#[cfg(feature = "yaml")]
pub use config::DeclarativeSampler;
#[cfg(feature = "config")]
pub use config::{
    lint, summary, ConfigError, ConfigErrorKind, ReloadHandle, RuleBasedSampler, SamplingConfig,
};
#[cfg(feature = "reload")]
pub use config::{ConfigWatcher, WatchOptions};
#[cfg(feature = "jaeger-remote")]
pub use config::{JaegerRemote, JaegerRemotePoller, RemoteUpdate};
#[cfg(feature = "redis")]
pub use fleet::{
    FleetError, FleetFailure, FleetLimiter, FleetLimiterBuilder, FleetStats, RedisUrls,
    DEFAULT_FLEET_PREFIX,
};
pub use limit::{Limit, LimitError};
pub use limiter::{
    Algorithm, AnyLimiter, BucketedWindow, FairAdmission, FairError, FairLimiter, FairStats,
    FixedWindow, ParseAlgorithmError, RateLimiter, SlidingLog, SlidingWindowCounter,
    DEFAULT_MAX_KEYS,
};
#[cfg(feature = "metrics")]
pub use metrics::SamplerMetrics;
#[cfg(not(feature = "config"))]
pub use sampler::env;
pub use sampler::{
    attributes, AdaptiveSampler, AdaptiveSamplerBuilder, FairBy, FairSamplerBuilder,
    RateLimitingSampler, RateLimitingSamplerBuilder, RemoteParents,
};
#[cfg(feature = "tracing")]
pub use tracing_layer::{DroppedContextExt, SkipDropped};

// The code blocks of the README and of the guides in `docs/`, compiled as doctests
// without becoming the crate's docs (their examples need the `config`, `yaml`,
// `composable`, `metrics`, `redis`, `jaeger-remote` and `tracing` features: CI's
// `--all-features`).
// One struct per page, so a failing block is named by its page.
#[cfg(all(
    doctest,
    feature = "config",
    feature = "yaml",
    feature = "composable",
    feature = "metrics",
    feature = "redis",
    feature = "jaeger-remote",
    feature = "tracing"
))]
mod guide_doctests {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/tracing.md")]
    struct Tracing;
    #[doc = include_str!("../docs/algorithms.md")]
    struct Algorithms;
    #[doc = include_str!("../docs/configuration.md")]
    struct Configuration;
    #[doc = include_str!("../docs/fleet.md")]
    struct Fleet;
    #[doc = include_str!("../docs/composable.md")]
    struct Composable;
    #[doc = include_str!("../docs/metrics.md")]
    struct Metrics;
    #[doc = include_str!("../docs/tools.md")]
    struct Tools;
    #[doc = include_str!("../docs/pay-only-for-what-you-keep.md")]
    struct PayOnlyForWhatYouKeep;
    #[doc = include_str!("../docs/every-key-seen.md")]
    struct EveryKeySeen;
    // A new page of docs/ gets its struct here, and its line in the README's map.
}
