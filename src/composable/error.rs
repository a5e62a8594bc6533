//! What a composable sampler refuses to be built from.

/// A composable sampler's configuration that cannot be used. Building never panics:
/// every bad input is one of these.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ComposableError {
    /// A sampling ratio outside what the specification accepts: `0` (sample nothing) or
    /// a value in `[2^-56, 1]`.
    #[error("invalid sampling ratio {ratio}: expected 0, or a number from 2^-56 to 1")]
    InvalidRatio {
        /// The ratio given.
        ratio: f64,
    },
    /// An attribute pattern that does not compile.
    #[error("invalid pattern {pattern:?} for attribute {key:?}: {reason}")]
    InvalidPattern {
        /// The attribute key the pattern is for.
        key: String,
        /// The pattern as given.
        pattern: String,
        /// Why it does not compile.
        reason: String,
    },
}
