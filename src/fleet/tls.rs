//! TLS for `rediss://` URLs: the CA and client certificate files, read and checked in
//! `build`; the rustls crypto provider; a refused handshake classified by its cause.
//!
//! The redis crate (1.x) builds its rustls configuration on the process's default
//! crypto provider and has no hook to pass one. So that it never panics (rustls cannot
//! pick a default when a process compiles in no provider, or two), the fleet installs
//! ring, the one it names, as the default when the process has none yet; a default the
//! application installed first is kept (a FIPS provider, say).

use redis::{ClientTlsConfig, RedisError, TlsCertificates};

use super::error::FleetError;
use super::stats::FleetFailure;
use crate::tls_files::{self, TlsFiles};

/// What tells two workers' TLS settings apart.
pub(crate) fn identity(files: &TlsFiles) -> String {
    format!("ca={:?} client={:?}", files.ca, files.client)
}

/// Reads and checks the files for the redis crate: the CA file must hold at least one
/// certificate, the client certificate file one or more, the key file a private key.
pub(crate) fn load(files: &TlsFiles) -> Result<TlsCertificates, FleetError> {
    let bad = |path: &std::path::Path| {
        let path = path.to_owned();
        move |e: tls_files::FileError| FleetError::TlsFile {
            path,
            reason: e.to_string(),
        }
    };
    let root_cert = match &files.ca {
        Some(ca) => Some(tls_files::certificates(ca).map_err(bad(ca))?.0),
        None => None,
    };
    let client_tls = match &files.client {
        Some((cert, key)) => Some(ClientTlsConfig {
            client_cert: tls_files::certificates(cert).map_err(bad(cert))?.0,
            client_key: tls_files::private_key(key).map_err(bad(key))?.0,
        }),
        None => None,
    };
    Ok(TlsCertificates {
        client_tls,
        root_cert,
    })
}

/// Installs ring as the process's default crypto provider unless one is installed
/// (losing a race to another installer is fine: a default is then installed all the
/// same). Called before any TLS client is made, so the redis crate never asks rustls
/// to guess one.
pub(crate) fn ensure_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The TLS cause of a failed call, if TLS failed: read from rustls's message, the one
/// part of the error the redis crate keeps (its source chain stops at the I/O error).
pub(crate) fn tls_cause(error: &RedisError) -> Option<FleetFailure> {
    cause_in(&error.to_string())
}

fn cause_in(message: &str) -> Option<FleetFailure> {
    if let Some(rest) = message.split("invalid peer certificate: ").nth(1) {
        return Some(
            if rest.starts_with("UnknownIssuer") || rest.starts_with("BadSignature") {
                FleetFailure::TlsUnknownCa
            } else if rest.starts_with("NotValidForName")
                || rest.starts_with("certificate not valid for name")
            {
                FleetFailure::TlsHostName
            } else if rest.starts_with("Expired") || rest.starts_with("certificate expired") {
                FleetFailure::TlsExpired
            } else {
                FleetFailure::Tls
            },
        );
    }
    if let Some(alert) = message.split("received fatal alert: ").nth(1) {
        // What a server says when it refuses the client's certificate (or its absence).
        const REFUSED: [&str; 7] = [
            "CertificateRequired",
            "BadCertificate",
            "UnknownCA",
            "CertificateUnknown",
            "UnsupportedCertificate",
            "CertificateExpired",
            "AccessDenied",
        ];
        return Some(if REFUSED.iter().any(|r| alert.starts_with(r)) {
            FleetFailure::TlsClientCert
        } else {
            FleetFailure::Tls
        });
    }
    const OTHER: [&str; 4] = [
        "received corrupt message",
        "peer is incompatible",
        "peer misbehaved",
        "peer sent no certificates",
    ];
    OTHER
        .iter()
        .any(|o| message.contains(o))
        .then_some(FleetFailure::Tls)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The causes, from rustls's own messages (as the redis crate passes them on).
    #[test]
    fn causes_are_read_from_rustls_messages() {
        let cases = [
            (
                "invalid peer certificate: UnknownIssuer",
                Some(FleetFailure::TlsUnknownCa),
            ),
            (
                "invalid peer certificate: certificate not valid for name \"x\"; certificate \
                 is only valid for 127.0.0.1",
                Some(FleetFailure::TlsHostName),
            ),
            (
                "invalid peer certificate: NotValidForName",
                Some(FleetFailure::TlsHostName),
            ),
            (
                "invalid peer certificate: certificate expired: verification time 2",
                Some(FleetFailure::TlsExpired),
            ),
            (
                "received fatal alert: CertificateRequired",
                Some(FleetFailure::TlsClientCert),
            ),
            (
                "received fatal alert: UnknownCA",
                Some(FleetFailure::TlsClientCert),
            ),
            (
                "received fatal alert: ProtocolVersion",
                Some(FleetFailure::Tls),
            ),
            (
                "received corrupt message of type InvalidContentType",
                Some(FleetFailure::Tls),
            ),
            ("Connection refused (os error 111)", None),
        ];
        for (message, cause) in cases {
            assert_eq!(cause_in(message), cause, "{message}");
        }
    }
}
