//! The rule layer (feature `config`): files, errors, the environment, the rule-based
//! sampler and hot reload (feature `reload`). One test binary, so the suite links once.
#![cfg(feature = "config")]

#[cfg(all(feature = "reload", unix))]
#[path = "../support/demo_run.rs"]
mod demo_run;
#[cfg(all(feature = "reload", unix))]
mod demo_watch;
mod env;
mod errors;
mod files;
mod fleet_scope;
#[cfg(feature = "metrics")]
mod metrics;
mod reload_caps;
#[cfg(all(feature = "reload", unix))]
mod reload_watch;
mod rule_sampler;
mod stats;
