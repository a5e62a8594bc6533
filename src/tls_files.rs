//! The TLS files a client is given (features `redis`, `jaeger-remote`): a CA file
//! trusted instead of the default roots and an optional client certificate and key,
//! read as PEM and checked before any connection.

use std::io;
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The CA file and the client certificate and key files, as given (paths kept for
/// messages).
#[derive(Clone, Debug, Default)]
pub(crate) struct TlsFiles {
    pub(crate) ca: Option<PathBuf>,
    pub(crate) client: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    pub(crate) fn is_empty(&self) -> bool {
        self.ca.is_none() && self.client.is_none()
    }
}

/// Why a TLS file was refused.
#[derive(Debug)]
pub(crate) enum FileError {
    /// It could not be read.
    Unreadable(io::Error),
    /// It holds no PEM certificate (or key), or a malformed one.
    NotPem(String),
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreadable(e) => write!(f, "cannot read the TLS file: {e}"),
            Self::NotPem(why) => f.write_str(why),
        }
    }
}

/// The PEM file's bytes and its certificates' DER (at least one).
pub(crate) fn certificates(
    path: &Path,
) -> Result<(Vec<u8>, Vec<CertificateDer<'static>>), FileError> {
    let pem = std::fs::read(path).map_err(FileError::Unreadable)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| FileError::NotPem(format!("not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        let why = "holds no PEM certificate (BEGIN CERTIFICATE)";
        return Err(FileError::NotPem(why.to_owned()));
    }
    Ok((pem, certs))
}

/// The PEM file's bytes and its (first) private key.
pub(crate) fn private_key(path: &Path) -> Result<(Vec<u8>, PrivateKeyDer<'static>), FileError> {
    let pem = std::fs::read(path).map_err(FileError::Unreadable)?;
    let key = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| FileError::NotPem(format!("holds no PEM private key: {e}")))?;
    Ok((pem, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_are_refused() {
        let missing = Path::new("/nonexistent/ca.pem");
        assert!(matches!(
            certificates(missing),
            Err(FileError::Unreadable(_))
        ));
        let path = std::env::temp_dir().join(format!("otel-tls-files-{}.pem", std::process::id()));
        std::fs::write(&path, "not a certificate\n").unwrap();
        let empty = certificates(&path).unwrap_err();
        assert!(empty.to_string().contains("no PEM certificate"), "{empty}");
        assert!(matches!(private_key(&path), Err(FileError::NotPem(_))));
        let _ = std::fs::remove_file(path);
    }
}
