//! The rule layer (feature `config`): files, errors, the environment, the rule-based
//! sampler and hot reload (feature `reload`). One test binary, so the suite links once.
#![cfg(feature = "config")]

mod env;
mod errors;
mod files;
mod fleet_scope;
#[cfg(feature = "metrics")]
mod metrics;
mod pacing;
#[cfg(feature = "reload")]
mod reload_watch;
mod rule_sampler;
mod stats;
