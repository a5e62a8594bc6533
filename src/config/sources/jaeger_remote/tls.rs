//! TLS for an `https://` sampling endpoint: the CA and client certificate files read
//! into ureq's configuration with ring as the crypto provider (passed explicitly: the
//! process's default, or its absence, does not matter), and a failed handshake
//! described by its cause.

use std::path::Path;
use std::sync::Arc;

use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig, TlsProvider};

use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::tls_files::{self, FileError, TlsFiles};

/// ureq's TLS configuration: the CA file's certificates as the only roots (else
/// Mozilla's), the client certificate if given, ring. Verification is always on.
///
/// # Errors
///
/// A [`ConfigError`] naming the file: [`Io`](ConfigErrorKind::Io) if it cannot be read,
/// [`Tls`](ConfigErrorKind::Tls) if it holds no PEM certificate (or key).
pub(crate) fn config(files: &TlsFiles) -> Result<TlsConfig, ConfigError> {
    let mut builder = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()));
    if let Some(ca) = &files.ca {
        builder = builder.root_certs(RootCerts::new_with_certs(&certificates(ca)?));
    }
    if let Some((cert, key)) = &files.client {
        let chain = certificates(cert)?;
        let (pem, _) = tls_files::private_key(key).map_err(|e| file_error(key, e))?;
        // Checked above: a key is there.
        let key = PrivateKey::from_pem(&pem)
            .map_err(|e| file_error(key, FileError::NotPem(e.to_string())))?;
        builder = builder.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    Ok(builder.build())
}

fn file_error(path: &Path, error: FileError) -> ConfigError {
    let file = path.display().to_string();
    let message = error.to_string();
    match error {
        FileError::Unreadable(e) => ConfigErrorKind::Io.error(&file, message).with_source(e),
        FileError::NotPem(_) => ConfigErrorKind::Tls.error(&file, message),
    }
}

/// Every certificate of a PEM file (at least one).
fn certificates(path: &Path) -> Result<Vec<Certificate<'static>>, ConfigError> {
    let (_, ders) = tls_files::certificates(path).map_err(|e| file_error(path, e))?;
    Ok(ders
        .iter()
        .map(|d| Certificate::from_der(d.as_ref()).to_owned())
        .collect())
}

/// What failed, in words, if `error` is a TLS failure (the handshake's, or an alert
/// the server sent at the first read, as TLS 1.3 servers refuse a client certificate).
pub(crate) fn describe(error: &ureq::Error) -> Option<String> {
    let tls = match error {
        ureq::Error::Rustls(e) => e,
        ureq::Error::Io(io) => io.get_ref()?.downcast_ref::<rustls::Error>()?,
        _ => return None,
    };
    Some(format!(
        "TLS with the sampling endpoint failed: {}: {tls}",
        cause(tls)
    ))
}

fn cause(error: &rustls::Error) -> &'static str {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match error {
        E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            "the endpoint's certificate is not signed by a trusted CA (give the CA that \
             signed it: tls_ca_file)"
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the endpoint's certificate does not name the URL's host"
        }
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            "the endpoint's certificate has expired"
        }
        E::AlertReceived(
            A::CertificateRequired
            | A::BadCertificate
            | A::UnknownCA
            | A::CertificateUnknown
            | A::UnsupportedCertificate
            | A::CertificateExpired
            | A::AccessDenied,
        ) => {
            "the endpoint refused this client's certificate, or its absence (give one its \
             CA trusts: tls_client_cert)"
        }
        _ => "the TLS handshake failed",
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn causes_are_named() {
        let unknown = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        assert!(cause(&unknown).contains("not signed by a trusted CA"));
        let host = rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName);
        assert!(cause(&host).contains("does not name"));
        let expired = rustls::Error::InvalidCertificate(rustls::CertificateError::Expired);
        assert!(cause(&expired).contains("expired"));
        let refused = rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired);
        assert!(cause(&refused).contains("refused this client's certificate"));
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, refused);
        let said = describe(&ureq::Error::Io(io)).unwrap();
        assert!(said.contains("refused this client's certificate"), "{said}");
        assert!(describe(&ureq::Error::StatusCode(500)).is_none());
    }

    #[test]
    fn unreadable_or_empty_files_are_refused() {
        let missing = TlsFiles {
            ca: Some(PathBuf::from("/nonexistent/ca.pem")),
            client: None,
        };
        assert_eq!(config(&missing).unwrap_err().kind(), ConfigErrorKind::Io);
        let path = std::env::temp_dir().join(format!("otel-jaeger-tls-{}.pem", std::process::id()));
        std::fs::write(&path, "no certificate here\n").unwrap();
        let empty = TlsFiles {
            ca: Some(path.clone()),
            client: None,
        };
        assert_eq!(config(&empty).unwrap_err().kind(), ConfigErrorKind::Tls);
        let _ = std::fs::remove_file(path);
    }
}
