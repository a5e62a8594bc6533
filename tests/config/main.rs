//! The rule layer (feature `config`): files, errors, the environment, the rule-based
//! sampler and hot reload (feature `reload`). One test binary, so the suite links once.
#![cfg(feature = "config")]

mod adaptive;
mod env;
mod errors;
mod files;
mod fleet_scope;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "reload")]
mod reload_watch;
mod rule_sampler;
mod stats;
