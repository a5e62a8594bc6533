//! TLS for `rediss://` URLs: the CA and client certificate files, read and checked in
//! `build`; the rustls configuration, on the ring crypto provider named explicitly;
//! a refused handshake classified by its cause.
//!
//! The process's default crypto provider is neither read nor set, so a process with
//! none, with two compiled in, or with another one installed first connects all the
//! same (rustls would panic choosing a default in the first two cases).
//!
//! One server: the [`Connector`] makes the TLS connection itself and hands the stream
//! to the redis crate's multiplexed connection.
//!
//! A cluster: the redis crate (1.x) connects to the nodes itself, and its own TLS
//! would build a rustls configuration on the process default (`ClientConfig::builder()`),
//! with no way to pass one. So the cluster connects each node through [`TlsNode`]
//! instead (the crate's `Connect` hook for a cluster's node connections, taken by
//! `ClusterClient::get_async_generic_connection`), which makes the handshake as the
//! `Connector` does, on the configuration of [`NodeTls`]. That hook is a function with
//! no receiver, so the configuration reaches it through the connecting thread: the
//! worker of one target runs on a thread of its own with a current-thread runtime
//! (`pool.rs`), so every node connection of its cluster is made on that thread, which
//! [`NodeTls::enter`] marks first.

use std::cell::RefCell;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::Connect;
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, IntoConnectionInfo, Pipeline,
    RedisConnectionInfo, RedisError, RedisFuture, Value,
};
use rustls::pki_types::ServerName;

use super::error::FleetError;
use super::stats::FleetFailure;
use crate::tls_files::{self, TlsFiles};

/// What tells two workers' TLS settings apart.
pub(crate) fn identity(files: &TlsFiles) -> String {
    format!("ca={:?} client={:?}", files.ca, files.client)
}

/// The rustls configuration for `url`'s server(s) (a `rediss://` URL, named in errors)
/// on ring: the CA file's roots, else the platform's; the client certificate if given.
fn client_config(url: &str, files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, FleetError> {
    let bad_url = |reason: String| FleetError::InvalidUrl {
        url: super::error::redact(url),
        reason,
    };
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
            let _ = roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    // Named explicitly: the process default is never consulted.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad_url(format!("TLS: {e}")))?
        .with_root_certificates(roots);
    let config = match &files.client {
        Some((cert, key)) => {
            let (_, chain) =
                tls_files::certificates(cert).map_err(|e| bad_file(cert, e.to_string()))?;
            let (_, der) = tls_files::private_key(key).map_err(|e| bad_file(key, e.to_string()))?;
            builder
                .with_client_auth_cert(chain, der)
                .map_err(|e| bad_file(key, format!("does not go with the certificate: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// TCP to `host:port`, the TLS handshake checking the certificate against `name`, then
/// the redis crate's set-up of a multiplexed connection (credentials, database) with
/// `settings`, all within `timeout`; the connection's driver runs on the current
/// runtime.
async fn handshake(
    (host, port, name): (&str, u16, ServerName<'static>),
    tls: Arc<rustls::ClientConfig>,
    redis: &RedisConnectionInfo,
    settings: AsyncConnectionConfig,
    timeout: Duration,
) -> Result<MultiplexedConnection, RedisError> {
    let work = async {
        let tcp = tokio::net::TcpStream::connect((host, port)).await?;
        let _ = tcp.set_nodelay(true);
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await?;
        let (connection, driver) =
            MultiplexedConnection::new_with_config(redis, stream, settings).await?;
        tokio::spawn(driver);
        Ok(connection)
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| Err(RedisError::from(io::Error::from(io::ErrorKind::TimedOut))))
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
        let config = client_config(url, files)?;
        Ok(Self {
            host: host.clone(),
            port: *port,
            name,
            config,
            redis: info.redis_settings().clone(),
        })
    }

    /// Connects (TCP, the TLS handshake, then the redis crate's set-up: credentials,
    /// database) within `timeout`; the connection's driver runs on the current runtime.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
    ) -> Result<MultiplexedConnection, RedisError> {
        let at = (self.host.as_str(), self.port, self.name.clone());
        let settings = AsyncConnectionConfig::new();
        handshake(at, Arc::clone(&self.config), &self.redis, settings, timeout).await
    }
}

/// A TLS cluster's node configuration: the rustls configuration (as the
/// [`Connector`]'s) and the bound of one node's connection.
#[derive(Clone)]
pub(crate) struct NodeTls {
    config: Arc<rustls::ClientConfig>,
    timeout: Duration,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeTls({:?})", self.timeout)
    }
}

thread_local! {
    /// The node configuration of the TLS cluster this thread's worker connects to.
    static NODE_TLS: RefCell<Option<NodeTls>> = const { RefCell::new(None) };
}

impl NodeTls {
    /// The configuration for a cluster seeded by `url` (a `rediss://` URL, named in
    /// errors) and `files`, a node's connection bounded by `timeout`.
    pub(crate) fn new(url: &str, files: &TlsFiles, timeout: Duration) -> Result<Self, FleetError> {
        Ok(Self {
            config: client_config(url, files)?,
            timeout,
        })
    }

    /// Marks this thread as connecting with this configuration: every [`TlsNode`]
    /// connection made on it from now on (the worker's thread is its target's alone).
    pub(crate) fn enter(&self) {
        NODE_TLS.with(|t| *t.borrow_mut() = Some(self.clone()));
    }

    /// This thread's configuration, if marked.
    fn current() -> Option<Self> {
        NODE_TLS.with(|t| t.borrow().clone())
    }
}

/// A cluster node's connection over our own TLS handshake (see the module's docs): a
/// multiplexed connection, made by [`Connect`] on the thread's [`NodeTls`].
#[derive(Clone)]
pub(crate) struct TlsNode(MultiplexedConnection);

impl Connect for TlsNode {
    fn connect_with_config<'a, T>(info: T, settings: AsyncConnectionConfig) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        let tls = NodeTls::current();
        Box::pin(async move {
            let refused = |reason: String| {
                RedisError::from((ErrorKind::InvalidClientConfig, "TLS cluster node", reason))
            };
            let tls = tls.ok_or_else(|| {
                refused("no TLS configuration on this thread (not a fleet worker's)".to_owned())
            })?;
            let info = info.into_connection_info()?;
            // The cluster's nodes are all reached over TLS, never in plain text.
            let ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                ..
            } = info.addr()
            else {
                return Err(refused(format!(
                    "{:?} is not a verified TLS address",
                    info.addr()
                )));
            };
            let name = ServerName::try_from(host.clone()).map_err(|e| {
                refused(format!(
                    "{host}: the host cannot be checked against a certificate: {e}"
                ))
            })?;
            let at = (host.as_str(), *port, name);
            handshake(at, tls.config, info.redis_settings(), settings, tls.timeout)
                .await
                .map(Self)
        })
    }
}

impl ConnectionLike for TlsNode {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
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

    fn node(url: &str) -> Result<TlsNode, RedisError> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(TlsNode::connect_with_config(
                url,
                AsyncConnectionConfig::new(),
            ))
    }

    /// Outside a worker's thread there is no node configuration: an error, not the
    /// process's default provider (nor a panic for want of one).
    #[test]
    fn a_node_connection_without_the_threads_configuration_is_refused() {
        let refused = std::thread::spawn(|| node("rediss://127.0.0.1:1"))
            .join()
            .unwrap()
            .err()
            .expect("refused");
        assert_eq!(refused.kind(), ErrorKind::InvalidClientConfig, "{refused}");
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
    }

    /// A TLS cluster's node announced without TLS is not connected in plain text.
    #[test]
    fn a_plain_node_of_a_tls_cluster_is_refused() {
        let refused = std::thread::spawn(|| {
            let files = TlsFiles::default();
            NodeTls::new("rediss://127.0.0.1:1", &files, Duration::from_secs(1))
                .unwrap()
                .enter();
            node("redis://127.0.0.1:1")
        })
        .join()
        .unwrap()
        .err()
        .expect("refused");
        assert_eq!(refused.kind(), ErrorKind::InvalidClientConfig, "{refused}");
        assert!(
            refused.to_string().contains("not a verified TLS address"),
            "{refused}"
        );
    }
}
