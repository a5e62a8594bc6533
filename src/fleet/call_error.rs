//! Why a call to Redis gave no usable answer: one small error type, classified by what
//! failed (the credentials, the connection, the timeouts, Redis's answer, a reply the
//! script never gives), for the statistics, the metrics and the messages.

use std::time::Duration;

use redis::RedisError;

use super::stats::FleetFailure;
use super::tls::tls_cause;

/// Why a call to Redis gave no usable answer.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// No connection could be made.
    #[error("could not connect to Redis: {0}")]
    Connect(#[source] RedisError),
    /// Redis refused the credentials: a wrong password or user, or none given to a
    /// server that requires one (Redis then answers `NOAUTH`, or, to a long command,
    /// "unauthenticated multibulk length").
    #[error("Redis refused authentication (check the password and user in the Redis URL): {0}")]
    Auth(#[source] RedisError),
    /// Redis (or the connection) answered with an error.
    #[error("Redis call failed: {0}")]
    Redis(#[source] RedisError),
    /// No answer within the connect and response timeouts.
    #[error("no answer from Redis within {0:?}")]
    Timeout(Duration),
    /// The TLS handshake failed, for the cause named (a [`FleetFailure`] `Tls*` kind).
    /// Never followed by plain text.
    #[error("TLS with Redis failed ({0}): {1}")]
    Tls(FleetFailure, #[source] RedisError),
    /// The lease script answered something it never answers.
    #[error("unexpected lease script reply {0:?}")]
    BadReply(Vec<i64>),
    /// A key of the rule holds a value of another type (`WRONGTYPE`): another program
    /// wrote it. The message is Redis's, with the key(s) the lease script found foreign.
    #[error("a key of this rule holds a value another program wrote (remove it): {0}")]
    Foreign(String),
}

impl CallError {
    /// The kind counted in the statistics and the metrics.
    pub(crate) fn kind(&self) -> FleetFailure {
        match self {
            Self::Connect(_) => FleetFailure::Connect,
            Self::Auth(_) => FleetFailure::Auth,
            Self::Redis(_) => FleetFailure::Redis,
            Self::Timeout(_) => FleetFailure::Timeout,
            Self::Tls(kind, _) => *kind,
            Self::BadReply(_) => FleetFailure::BadReply,
            Self::Foreign(_) => FleetFailure::Foreign,
        }
    }

    /// Whether the connection failed (or Redis refused it): the next round makes a
    /// fresh one.
    pub(super) fn is_connection(&self) -> bool {
        matches!(
            self,
            Self::Connect(_) | Self::Auth(_) | Self::Timeout(_) | Self::Tls(..)
        )
    }

    /// A failed connection attempt: `Auth` if Redis refused the credentials.
    pub(super) fn connect(error: RedisError) -> Self {
        if let Some(kind) = tls_cause(&error) {
            Self::Tls(kind, error)
        } else if is_auth(&error) {
            Self::Auth(error)
        } else {
            Self::Connect(error)
        }
    }

    /// A failed call, by what failed: the credentials (`Auth`), the connection
    /// (`Connect`: refused, reset, closed; the manager connects lazily, inside a call),
    /// the client's response timeout (`Timeout`), a key of another type (`Foreign`: the
    /// clock script on a foreign meta key), else Redis's answer (`Redis`).
    pub(crate) fn redis(error: RedisError, response_timeout: Duration) -> Self {
        // Redis 7 keeps a script's error code; before, it was `ERR` with the message.
        if error.code() == Some("WRONGTYPE") || error.to_string().contains("WRONGTYPE") {
            Self::Foreign(error.to_string())
        } else if let Some(kind) = tls_cause(&error) {
            // Before `Io`: the manager connects inside a call, so a refused handshake
            // comes back as the call's I/O error.
            Self::Tls(kind, error)
        } else if is_auth(&error) {
            Self::Auth(error)
        } else if error.is_timeout() {
            Self::Timeout(response_timeout)
        } else if error.is_connection_refusal()
            || error.is_connection_dropped()
            || error.kind() == redis::ErrorKind::Io
        {
            Self::Connect(error)
        } else {
            Self::Redis(error)
        }
    }
}

/// A lease call the lease script answered with Redis's error `message` (it caught the
/// error, so the other calls of the script call were answered): `Foreign` for a key of
/// another type, else `Redis`.
pub(crate) fn failed_call(message: String) -> CallError {
    if message.contains("WRONGTYPE") {
        CallError::Foreign(message)
    } else {
        CallError::Redis(RedisError::from(std::io::Error::other(message)))
    }
}

/// Whether Redis refused the credentials. The client reports a refused `AUTH` as
/// `AuthenticationFailed`; a server that needs a password and got none answers
/// `NOAUTH` to a command, and closes the connection with "unauthenticated multibulk
/// length" after a long one (the lease script is long).
fn is_auth(error: &RedisError) -> bool {
    error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
        || error.to_string().contains("unauthenticated")
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn kind(error: RedisError) -> FleetFailure {
        CallError::redis(error, Duration::from_secs(1)).kind()
    }

    /// A refused password was reported as a generic error (or, by the demo, as no
    /// answer within its timeout): it is its own kind now, whatever its form.
    #[test]
    fn failures_are_classified_by_what_failed() {
        let auth = RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(kind(auth), FleetFailure::Auth);
        let refused = RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(kind(refused), FleetFailure::Connect);
        let reset = RedisError::from(io::Error::from(io::ErrorKind::ConnectionReset));
        assert_eq!(kind(reset), FleetFailure::Connect);
        let slow = RedisError::from(io::Error::from(io::ErrorKind::TimedOut));
        assert_eq!(kind(slow), FleetFailure::Timeout);
        let answer = RedisError::from((redis::ErrorKind::Client, "bad", "detail".to_owned()));
        assert_eq!(kind(answer), FleetFailure::Redis);
        // (The clock script's `WRONGTYPE` answer, whose code the client alone can
        // make, is classified in the fleet tests against a real server.)
        let caught = "WRONGTYPE Operation against a key holding the wrong kind of value";
        assert_eq!(failed_call(caught.to_owned()).kind(), FleetFailure::Foreign);
        assert_eq!(failed_call("OOM".to_owned()).kind(), FleetFailure::Redis);
        let message = CallError::connect(RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        )));
        assert!(
            message.to_string().contains("refused authentication"),
            "{message}"
        );
    }
}
