//! What the `otel-rate-sampler` command prints about a configuration: the effective
//! rules and their memory ([`summary`]) and the lints ([`lint`]).

pub(crate) mod describe;
pub mod lint;
pub mod summary;
