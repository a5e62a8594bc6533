//! The rule layer (feature `config`): files, errors, the environment, the rule-based
//! sampler, hot reload (feature `reload`) and Jaeger remote sampling (feature
//! `jaeger-remote`). One test binary, so the suite links once.
#![cfg(feature = "config")]

mod adaptive;
mod cap_refusal;
// A property's case count, `PROPTEST_CASES` first.
#[path = "../support/cases.rs"]
mod cases;
#[cfg(feature = "yaml")]
mod declarative_budget;
#[cfg(all(feature = "reload", unix))]
#[path = "../support/demo_run.rs"]
mod demo_run;
// The demo with `--config` (its helpers are the reload tests').
#[cfg(all(feature = "reload", unix))]
mod demo_cap;
#[cfg(all(feature = "reload", unix))]
mod demo_watch;
// The demo while its rule file is saved every 100 ms.
#[cfg(all(feature = "reload", unix))]
mod demo_flip;
mod env;
mod errors;
mod fair_by;
mod files;
mod fleet_scope;
#[cfg(feature = "yaml")]
mod formats;
#[cfg(feature = "jaeger-remote")]
mod jaeger_remote;
// `https://` endpoints, with the test PKI (rcgen).
#[cfg(feature = "jaeger-remote")]
mod jaeger_tls;
mod key_rules;
#[cfg(feature = "metrics")]
mod metrics;
mod model;
mod pacing;
#[cfg(feature = "jaeger-remote")]
#[path = "../support/pki.rs"]
mod pki;
#[cfg(all(feature = "reload", unix))]
mod reload_burst;
mod reload_cache;
mod reload_caps;
mod reload_dated;
mod reload_prop;
mod reload_storm;
#[cfg(all(feature = "reload", unix))]
mod reload_watch;
// Run by `.ci/reload-calls` under callgrind (ignored in the suite).
#[cfg(feature = "yaml")]
mod reload_calls;
mod rule_sampler;
mod stats;
