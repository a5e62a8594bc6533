//! Fleet-wide limits against a real `redis-server` (feature `redis`).
//!
//! Every test starts its own server(s) on free loopback ports; `redis-server` and
//! `redis-cli` must be on PATH (the tests fail, with a message, if not).

mod auth;
mod churn;
mod cluster;
mod demo;
mod deploy;
// Fleet-scoped rules from a rule file (feature `config` too).
#[cfg(feature = "config")]
mod config_rules;
mod faults;
mod foreign;
mod load;
mod logs;
mod many_rules;
// The fleet instruments, read back from an in-memory exporter (feature `metrics` too).
#[cfg(feature = "metrics")]
mod metrics;
mod partition;
// The TLS tests' CA and certificates (rcgen).
#[path = "../support/pki.rs"]
mod pki;
mod pool;
mod proxy;
mod server;
mod single;
// Replicas through the `tracing` layer (feature `tracing` too).
#[cfg(feature = "tracing")]
mod skip_dropped;
mod time_steps;
mod tls;
// The process's default crypto provider, absent or another, on a TLS cluster.
mod tls_provider;
// `rediss://` from a rule file (feature `config`), TLS failures in the metrics
// (feature `metrics`).
#[cfg(any(feature = "config", feature = "metrics"))]
mod tls_layers;
