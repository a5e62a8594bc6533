//! A test PKI made in the test (rcgen): a CA, server certificates it signs (for
//! 127.0.0.1 and localhost, for another host only, expired), a client certificate, and
//! a second CA that signed none of them. rustls refuses a CA certificate used as the
//! server's own, so the server's is a leaf.

use std::path::{Path, PathBuf};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose,
    IsCa, KeyPair, KeyUsagePurpose,
};

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub(crate) struct Pair {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// The files of the test PKI, in their own directory (removed on drop).
#[derive(Debug)]
pub(crate) struct Pki {
    dir: PathBuf,
    /// The CA that signed every certificate below.
    pub(crate) ca: PathBuf,
    /// A CA that signed none of them.
    pub(crate) other_ca: PathBuf,
    /// For 127.0.0.1 and localhost.
    pub(crate) server: Pair,
    /// For `wrong.example` only.
    pub(crate) wrong_host: Pair,
    /// For 127.0.0.1, expired in 2020.
    pub(crate) expired: Pair,
    /// A client certificate.
    pub(crate) client: Pair,
}

fn ca_issuer(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write PEM");
    path
}

impl Pki {
    /// Makes the PKI in a fresh directory named after `tag`.
    pub(crate) fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("otel-pki-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("PKI dir");
        let ca = ca_issuer("otel-rate-sampler test CA");
        let other = ca_issuer("a CA nobody trusts");
        let leaf = |name: &str, sans: &[&str], usage: Vec<_>, expired: bool| {
            let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
            let mut params = CertificateParams::new(sans).expect("leaf params");
            params.extended_key_usages = usage;
            if expired {
                params.not_before = date_time_ymd(2019, 1, 1);
                params.not_after = date_time_ymd(2020, 1, 1);
            }
            let key = KeyPair::generate().expect("key");
            let cert = params.signed_by(&key, &ca).expect("sign");
            Pair {
                cert: write(&dir, &format!("{name}.pem"), &cert.pem()),
                key: write(&dir, &format!("{name}.key"), &key.serialize_pem()),
            }
        };
        // A server's certificate is also its client certificate on a TLS cluster bus.
        let server_auth = || {
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ]
        };
        let local = ["127.0.0.1", "localhost"];
        Self {
            server: leaf("server", &local, server_auth(), false),
            wrong_host: leaf("wrong-host", &["wrong.example"], server_auth(), false),
            expired: leaf("expired", &local, server_auth(), true),
            client: leaf(
                "client",
                &[],
                vec![ExtendedKeyUsagePurpose::ClientAuth],
                false,
            ),
            ca: write(&dir, "ca.pem", &ca.pem()),
            other_ca: write(&dir, "other-ca.pem", &other.pem()),
            dir,
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
