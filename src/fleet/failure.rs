//! [`FleetFailure`]: the kinds of failed Redis calls, as the statistics and the
//! metrics count them.

use std::fmt;

/// Why a call to Redis gave no usable answer, as counted in [`FleetStats`](crate::FleetStats) and in the
/// fleet metrics (`error.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FleetFailure {
    /// No connection could be made (refused, unreachable, DNS).
    Connect,
    /// Redis refused the credentials (wrong password or user, or none given to a
    /// server that requires one). Retrying does not help until the configuration does.
    Auth,
    /// Redis (or the connection) answered with another error.
    Redis,
    /// No answer within the connect and response timeouts (a pause, a partition).
    Timeout,
    /// The lease script answered something it never answers.
    BadReply,
    /// The lease script refused the call as sent too long ago (a clock step or a slow
    /// network); the reply's time corrects the replica's clock mapping.
    Late,
    /// A key of the rule holds a value of another type (another program wrote the
    /// rule's meta, window or members key, e.g. with `SET`): Redis refuses that rule's
    /// calls (`WRONGTYPE`) until the key is removed; the other rules go on. The rule
    /// spends no fallback share meanwhile, only what Redis granted it.
    Foreign,
    /// TLS (`rediss://`): the server's certificate is not signed by a trusted CA (the
    /// CA file given, else the platform's roots). Never a fallback to plain text.
    TlsUnknownCa,
    /// TLS: the server's certificate does not name the host of the Redis URL.
    TlsHostName,
    /// TLS: the server's certificate has expired.
    TlsExpired,
    /// TLS: the server refused this client's certificate, or its absence (a server
    /// started with `--tls-auth-clients yes` and no client certificate given).
    TlsClientCert,
    /// TLS failed for another reason (a server speaking plain text to `rediss://`, an
    /// unsupported version or algorithm).
    Tls,
}

impl FleetFailure {
    /// Every kind, in the order of [`as_str`](Self::as_str)'s values.
    pub const ALL: [Self; 12] = [
        Self::Connect,
        Self::Auth,
        Self::Redis,
        Self::Timeout,
        Self::BadReply,
        Self::Late,
        Self::Foreign,
        Self::TlsUnknownCa,
        Self::TlsHostName,
        Self::TlsExpired,
        Self::TlsClientCert,
        Self::Tls,
    ];

    /// `connect`, `auth`, `redis`, `timeout`, `bad_reply`, `late`, `foreign_key`,
    /// `tls_unknown_ca`, `tls_host_name`, `tls_expired`, `tls_client_cert` or `tls`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Auth => "auth",
            Self::Redis => "redis",
            Self::Timeout => "timeout",
            Self::BadReply => "bad_reply",
            Self::Late => "late",
            Self::Foreign => "foreign_key",
            Self::TlsUnknownCa => "tls_unknown_ca",
            Self::TlsHostName => "tls_host_name",
            Self::TlsExpired => "tls_expired",
            Self::TlsClientCert => "tls_client_cert",
            Self::Tls => "tls",
        }
    }

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

/// What went wrong and what to look at, in one phrase: for an application's own
/// message while [`FleetStats::clock_synced`](crate::FleetStats::clock_synced) stays `false` (a wrong password must
/// not read as "no answer").
impl fmt::Display for FleetFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Connect => "cannot connect to Redis",
            Self::Auth => {
                "Redis refused authentication: check the password (and user) in the Redis URL"
            }
            Self::Redis => "Redis answered with an error",
            Self::Timeout => "no answer from Redis within the timeouts",
            Self::BadReply => "unexpected reply from the lease script",
            Self::Late => "calls refused as late (a clock step or a slow network)",
            Self::Foreign => {
                "a key of the rule holds a value of another type (another program wrote \
                 it): remove the key"
            }
            Self::TlsUnknownCa => {
                "Redis's TLS certificate is not signed by a trusted CA: give the CA that \
                 signed it (tls_ca_file)"
            }
            Self::TlsHostName => "Redis's TLS certificate does not name the host of the Redis URL",
            Self::TlsExpired => "Redis's TLS certificate has expired",
            Self::TlsClientCert => {
                "Redis refused this client's TLS certificate (or its absence): give a \
                 client certificate its CA trusts (tls_client_cert)"
            }
            Self::Tls => "the TLS handshake with Redis failed",
        })
    }
}
