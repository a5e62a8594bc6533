//! Why a command stopped early, and the exit code each reason gets.

use otel_rate_sampler::{ConfigError, LimitError};

/// Why a command stopped early.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A bad argument (exit 2).
    Usage(String),
    /// The file did not load, or the sampler could not be built from it (exit 1).
    File(String),
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Self {
        Failure::File(e.to_string())
    }
}

impl From<LimitError> for Failure {
    fn from(e: LimitError) -> Self {
        Failure::File(e.to_string())
    }
}
