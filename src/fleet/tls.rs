//! TLS for `rediss://` URLs: the CA and client certificate files, read and checked in
//! `build`; the rustls crypto provider; a refused handshake classified by its cause.
//!
//! One server: the [`Connector`] makes the TLS connection itself, on ring named
//! explicitly, and hands the stream to the redis crate's multiplexed connection; the
//! process's default provider is neither read nor set.
//!
//! A cluster: the redis crate (1.x) connects to the nodes itself and builds its rustls
//! configuration on the process's default crypto provider, with no hook to pass one. So
//! that it never panics (rustls cannot pick a default when a process compiles in no
//! provider, or two), the fleet installs ring as the default when the process has none
//! yet; a default the application installed first is kept (a FIPS provider, say).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo,
    RedisConnectionInfo, RedisError, TlsCertificates,
};
use rustls::pki_types::ServerName;

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

/// One server's TLS connection, on ring named explicitly: address, server name, the
/// rustls configuration (the CA file's roots, else the platform's; the client
/// certificate if given) and the Redis settings (credentials, database).
pub(crate) struct Connector {
    host: String,
    port: u16,
    name: ServerName<'static>,
    config: Arc<rustls::ClientConfig>,
    redis: RedisConnectionInfo,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the Redis settings: they hold the password.
        write!(f, "Connector({}:{})", self.host, self.port)
    }
}

impl Connector {
    /// The connector for `url` (a `rediss://` URL, already checked) and `files`.
    pub(crate) fn new(url: &str, files: &TlsFiles) -> Result<Self, FleetError> {
        let bad_url = |reason: String| FleetError::InvalidUrl {
            url: super::error::redact(url),
            reason,
        };
        let info = url
            .into_connection_info()
            .map_err(|e| bad_url(e.to_string()))?;
        let ConnectionAddr::TcpTls { host, port, .. } = info.addr() else {
            return Err(bad_url("not a rediss:// URL".to_owned()));
        };
        let name = ServerName::try_from(host.clone()).map_err(|e| {
            bad_url(format!(
                "the host cannot be checked against a certificate: {e}"
            ))
        })?;
        let bad_file = |path: &std::path::Path, reason: String| FleetError::TlsFile {
            path: path.to_owned(),
            reason,
        };
        let mut roots = rustls::RootCertStore::empty();
        match &files.ca {
            Some(ca) => {
                let (_, certs) =
                    tls_files::certificates(ca).map_err(|e| bad_file(ca, e.to_string()))?;
                for cert in certs {
                    roots
                        .add(cert)
                        .map_err(|e| bad_file(ca, format!("not a CA certificate: {e}")))?;
                }
            }
            None => {
                // The platform's roots; one it cannot parse is left out (as browsers do).
                let _ =
                    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad_url(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        let config = match &files.client {
            Some((cert, key)) => {
                let (_, chain) =
                    tls_files::certificates(cert).map_err(|e| bad_file(cert, e.to_string()))?;
                let (_, der) =
                    tls_files::private_key(key).map_err(|e| bad_file(key, e.to_string()))?;
                builder
                    .with_client_auth_cert(chain, der)
                    .map_err(|e| bad_file(key, format!("does not go with the certificate: {e}")))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Self {
            host: host.clone(),
            port: *port,
            name,
            config: Arc::new(config),
            redis: info.redis_settings().clone(),
        })
    }

    /// Connects (TCP, the TLS handshake, then the redis crate's set-up: credentials,
    /// database) within `timeout`; the connection's driver runs on the current runtime.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
    ) -> Result<MultiplexedConnection, RedisError> {
        let work = async {
            let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await?;
            let _ = tcp.set_nodelay(true);
            let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.config));
            let stream = connector.connect(self.name.clone(), tcp).await?;
            let (connection, driver) = MultiplexedConnection::new_with_config(
                &self.redis,
                stream,
                AsyncConnectionConfig::new(),
            )
            .await?;
            tokio::spawn(driver);
            Ok(connection)
        };
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or_else(|_| Err(RedisError::from(io::Error::from(io::ErrorKind::TimedOut))))
    }
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
