//! [`FleetError`]: why a [`FleetLimiter`](crate::FleetLimiter) could not be built.

use std::io;

/// Why [`FleetLimiterBuilder::build`](crate::FleetLimiterBuilder::build) failed.
///
/// Building never talks to Redis: only what can be checked locally fails here. Redis
/// being down or slow is not an error of `build` (see the limiter's initial state);
/// such faults show in [`FleetStats`](crate::FleetStats) and as `tracing` warnings.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// No Redis URL was given.
    #[error("no Redis URL given; pass one URL (redis://host:port) or the seed nodes of a cluster")]
    NoUrl,
    /// A Redis URL could not be parsed.
    #[error(
        "invalid Redis URL {url:?}: {reason}; expected redis://[user:password@]host:port[/db]"
    )]
    InvalidUrl {
        /// The URL given (with any password replaced by `***`).
        url: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The rule key was empty or held a character that would break the hash tag.
    #[error(
        "invalid fleet key {key:?}: it must be non-empty and hold no '{{', '}}' or whitespace"
    )]
    InvalidKey {
        /// The key given.
        key: String,
    },
    /// An option was out of its accepted range.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The builder method.
        option: &'static str,
        /// What is accepted.
        reason: &'static str,
    },
    /// A TLS file (CA, client certificate or key) could not be read or holds no PEM
    /// certificate (or key).
    #[error("TLS file {path:?}: {reason}")]
    TlsFile {
        /// The file given.
        path: std::path::PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// The background thread could not be started.
    #[error("could not start the fleet thread: {0}")]
    Spawn(#[source] io::Error),
}

/// `url` with the password (between `:` and `@` of the authority) masked.
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    match (rest.find('@'), rest.find(':')) {
        (Some(at), Some(colon)) if colon < at => {
            format!(
                "{}{}:***{}",
                &url[..scheme_end + 3],
                &rest[..colon],
                &rest[at..]
            )
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_in_errors() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact("nonsense"), "nonsense");
    }
}
