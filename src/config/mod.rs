//! The rule layer: per-service sampling rules by operation and attribute, loaded from
//! TOML, YAML, OpenTelemetry declarative configuration or Jaeger strategy files and the
//! environment, compiled into the [`RuleBasedSampler`] on top of the sampler layer, and
//! inspected by the lints and summaries the `otel-rate-sampler` command prints.
//!
//! One direction through the room, each folder importing only from those above it in
//! this list (and from the crate's lower layers):
//!
//! * `error.rs`, `log.rs`, `vars.rs`: [`ConfigError`], the library's own messages and
//!   the names of the environment variables.
//! * `model/`: the data model every format loads into ([`SamplingConfig`], services,
//!   rules, policies, scopes, patterns), the typed key of a limit in it, and the values
//!   a file may hold (`values.rs`: windows, rates, globs, names).
//! * `check/`: the structural checks over a model (the memory budget, the clock's
//!   resolution, reachability, floors, fleet keys), each written once and shared by the
//!   loaders and the lints.
//! * `formats/`: one reader per format (TOML, YAML, Jaeger JSON, OpenTelemetry
//!   declarative), each decoding its own wire types, and the lowering they share.
//! * `compile/`: the compiled rule set, its matcher, the rule limiters and the handover
//!   of their windows across a reload.
//! * `runtime/`: the samplers ([`RuleBasedSampler`], `DeclarativeSampler`) and the
//!   reload handle.
//! * `sources/`: where rules come from at run time: the environment, the file watcher,
//!   the Jaeger remote poller.
//! * `diagnostics/`: summaries, descriptions and lints, for `check` and `simulate`.

mod check;
mod compile;
mod diagnostics;
mod error;
mod formats;
mod log;
mod model;
mod runtime;
mod sources;
mod vars;

pub use diagnostics::{lint, summary};
pub use error::{ConfigError, ConfigErrorKind};
pub use model::SamplingConfig;
#[cfg(feature = "yaml")]
pub use runtime::DeclarativeSampler;
pub use runtime::{ReloadHandle, RuleBasedSampler};
pub use sources::env;
#[cfg(feature = "reload")]
pub use sources::{ConfigWatcher, WatchOptions};
#[cfg(feature = "jaeger-remote")]
pub use sources::{JaegerRemote, JaegerRemotePoller, RemoteUpdate};
