//! Jaeger remote sampling over `https://` against a loopback HTTPS server (rustls in
//! the test) serving a certificate signed by a CA made in the test: the strategy is
//! applied with that CA; a CA that did not sign it, a certificate for another host or
//! an expired one, and a missing client certificate where one is asked for, are each a
//! [`ConfigErrorKind::Tls`] error naming the cause, and the sampler's rules stay.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use otel_rate_sampler::{
    ConfigError, ConfigErrorKind, JaegerRemote, JaegerRemotePoller, RemoteUpdate, RuleBasedSampler,
    SamplingConfig,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::pki::{Pair, Pki};

const STRATEGY: &str =
    r#"{"strategyType":"PROBABILISTIC","probabilisticSampling":{"samplingRate":0.5}}"#;

/// A one-thread HTTPS server on 127.0.0.1 answering every request with [`STRATEGY`].
struct HttpsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpsServer {
    /// Serves `cert`; asks for a client certificate signed by the PKI's CA if
    /// `client_auth`.
    fn start(pki: &Pki, cert: &Pair, client_auth: bool) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("protocol versions");
        let builder = if client_auth {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_file(&pki.ca).expect("CA"))
                .expect("CA added");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("verifier");
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let chain = CertificateDer::pem_file_iter(&cert.cert)
            .expect("chain")
            .collect::<Result<Vec<_>, _>>()
            .expect("chain");
        let key = PrivateKeyDer::from_pem_file(&cert.key).expect("key");
        let config = Arc::new(builder.with_single_cert(chain, key).expect("server config"));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            for stream in listener.incoming() {
                // Relaxed: a stop flag; nothing is published through it.
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                if let Ok(stream) = stream {
                    answer(&config, stream);
                }
            }
        });
        Self {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn endpoint(&self) -> String {
        format!("https://{}/api/sampling", self.addr)
    }
}

/// Completes the handshake (a failed one ends the connection), reads the request head
/// and answers [`STRATEGY`].
fn answer(config: &Arc<rustls::ServerConfig>, stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let Ok(connection) = rustls::ServerConnection::new(Arc::clone(config)) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(connection, stream);
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{STRATEGY}",
        STRATEGY.len()
    );
    let _ = tls.write_all(response.as_bytes());
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        // Relaxed: see the accept loop.
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

type Outcome = Result<RemoteUpdate, (ConfigErrorKind, String)>;

/// A sampler for "checkout" polling `remote` every hour (so one outcome within the
/// test), its outcomes on the receiver.
fn poll(remote: JaegerRemote) -> (JaegerRemotePoller, Receiver<Outcome>) {
    let initial =
        SamplingConfig::from_toml_str("[default]\nprobability = 0.0\n", "initial").unwrap();
    let s = RuleBasedSampler::new(&initial, "checkout").unwrap();
    let (tx, rx) = mpsc::channel();
    let poller = s
        .poll_jaeger_remote(
            remote.interval(Duration::from_secs(3600)),
            move |outcome: Result<RemoteUpdate, ConfigError>| {
                let _ = tx.send(outcome.map_err(|e| (e.kind(), e.to_string())));
            },
        )
        .expect("poller");
    (poller, rx)
}

fn first(rx: &Receiver<Outcome>) -> Outcome {
    rx.recv_timeout(Duration::from_secs(20))
        .expect("an outcome before the deadline")
}

/// The first poll fails as TLS, its message containing `needle`.
fn refused(remote: JaegerRemote, needle: &str) {
    let (_poller, rx) = poll(remote);
    match first(&rx) {
        Err((ConfigErrorKind::Tls, message)) => {
            assert!(message.contains(needle), "{message}");
        }
        other => panic!("expected a TLS error with {needle:?}, got {other:?}"),
    }
}

#[test]
fn an_https_endpoint_signed_by_the_ca_given_is_applied() {
    let pki = Pki::new("jaeger-ok");
    let server = HttpsServer::start(&pki, &pki.server, false);
    let (_poller, rx) = poll(JaegerRemote::new(server.endpoint()).tls_ca_file(&pki.ca));
    assert_eq!(first(&rx), Ok(RemoteUpdate::Applied));
}

#[test]
fn each_certificate_problem_is_a_tls_error_naming_it() {
    let pki = Pki::new("jaeger-bad");
    let server = HttpsServer::start(&pki, &pki.server, false);
    let wrong_ca = JaegerRemote::new(server.endpoint()).tls_ca_file(&pki.other_ca);
    refused(wrong_ca, "not signed by a trusted CA");
    // Without a CA file, Mozilla's roots: the test CA is not among them.
    refused(
        JaegerRemote::new(server.endpoint()),
        "not signed by a trusted CA",
    );
    let other_host = HttpsServer::start(&pki, &pki.wrong_host, false);
    let remote = JaegerRemote::new(other_host.endpoint()).tls_ca_file(&pki.ca);
    refused(remote, "does not name the URL's host");
    let expired = HttpsServer::start(&pki, &pki.expired, false);
    let remote = JaegerRemote::new(expired.endpoint()).tls_ca_file(&pki.ca);
    refused(remote, "has expired");
}

#[test]
fn a_server_asking_for_a_client_certificate_refuses_none_and_takes_one() {
    let pki = Pki::new("jaeger-mtls");
    let server = HttpsServer::start(&pki, &pki.server, true);
    let remote = || JaegerRemote::new(server.endpoint()).tls_ca_file(&pki.ca);
    refused(remote(), "refused this client's certificate");
    let (_poller, rx) = poll(remote().tls_client_cert(&pki.client.cert, &pki.client.key));
    assert_eq!(first(&rx), Ok(RemoteUpdate::Applied));
}
