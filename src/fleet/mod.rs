//! Fleet-wide limits: permits leased from Redis, spent lock-free (feature `redis`).
//!
//! * `word.rs`: the lock-free decision side (one atomic word per instance); also built
//!   under `--cfg loom` without the feature, for its model tests.
//! * `share.rs`: fallback shares and chunk sizes (pure arithmetic).
//! * `script.rs`: the Lua lease script and its reply.
//! * `time.rs`: Redis `TIME` mapped onto the local clock.
//! * `lease.rs`: the lease state machine (planning, window roll, fallback, accounting),
//!   without I/O or a clock of its own.
//! * `tls.rs`: `rediss://`: the CA and client certificate files, the crypto provider,
//!   a refused handshake's cause.
//! * `transport.rs`: the connection to Redis and one call, with typed errors.
//! * `wire.rs`: one rule's keys and arguments, its calls as script commands, their
//!   replies read back.
//! * `worker.rs`: one rule's side of a worker: its machine asked for calls and given
//!   the answers, and its warnings.
//! * `pipeline.rs`: one round's calls as pipelines (the lease calls of a server, or of
//!   a cluster slot, in one call of the lease script, their replicas heartbeating once).
//! * `target.rs`: what a worker counted for all its rules, its label without the
//!   password, and the observers of its round trips (the metrics' histogram).
//! * `pool.rs`: one worker per Redis target (a thread, its runtime, one connection),
//!   shared by every limiter of the process on it: one pipeline per round.
//! * `limiter.rs`: the public handle.
//! * `stall.rs`: a limiter's clock standing still while real time goes on.
//! * `throttle.rs`: a kind of warning logged at most once per sync interval.
//! * `stats.rs`: its statistics, written by the worker; `failure.rs` the kinds of
//!   failed calls.
//! * `builder.rs`: its builder, where the options are checked.
//! * `error.rs`: `FleetError`.

// Under loom without the feature only the word is built, for its model; the rest of
// the crate does not use it then.
#![cfg_attr(not(feature = "redis"), allow(dead_code))]

mod word;

#[cfg(feature = "redis")]
mod builder;
#[cfg(feature = "redis")]
mod call_error;
#[cfg(feature = "redis")]
mod error;
#[cfg(feature = "redis")]
mod failure;
#[cfg(feature = "redis")]
mod lease;
#[cfg(feature = "redis")]
mod limiter;
#[cfg(feature = "redis")]
mod pipeline;
#[cfg(feature = "redis")]
mod pool;
#[cfg(feature = "redis")]
mod script;
#[cfg(feature = "redis")]
mod share;
#[cfg(feature = "redis")]
mod stall;
#[cfg(feature = "redis")]
mod stats;
#[cfg(feature = "redis")]
mod stop;
#[cfg(feature = "redis")]
mod target;
#[cfg(feature = "redis")]
mod throttle;
#[cfg(feature = "redis")]
mod time;
#[cfg(feature = "redis")]
mod tls;
#[cfg(feature = "redis")]
mod transport;
#[cfg(feature = "redis")]
mod wire;
#[cfg(feature = "redis")]
mod worker;

#[cfg(feature = "redis")]
pub use builder::{FleetLimiterBuilder, RedisUrls};
#[cfg(feature = "redis")]
pub use error::FleetError;
#[cfg(feature = "redis")]
pub use failure::FleetFailure;
#[cfg(feature = "redis")]
pub use limiter::{FleetLimiter, DEFAULT_FLEET_PREFIX};
#[cfg(feature = "redis")]
pub use stats::FleetStats;
#[cfg(all(feature = "redis", feature = "metrics"))]
pub(crate) use {
    pool::targets,
    target::{observe_rounds, RoundObserver, TargetStats},
};
