//! `rediss://` against a real `redis-server` started with `--tls-port`, with a test CA
//! and the certificates it signs made in the test: two limiters sharing one key stay
//! under N per window; each certificate problem is its own typed failure in `stats()`
//! (unknown CA, host name, expired, client certificate refused), logged, never a
//! fallback to plain text; what cannot work is refused by `build`.

use std::time::{Duration, Instant};

use otel_rate_sampler::{FleetError, FleetFailure, FleetLimiter, RateLimiter};

use crate::auth::wait_for;
use crate::demo::demo_run::{run_demo, stderr};
use crate::demo::{assert_shared, run_fleet_with, HANG_GUARD};
use crate::load::{self, assert_capped, drive, inner_windows, limit, INTERVAL, N, WINDOW};
use crate::pki::{Pair, Pki};
use crate::server::{free_port, Server};

/// A server with a plain port (for the test's own `redis-cli`) and a TLS port serving
/// `cert`, trusting `ca` for client certificates, which it asks for if `auth_clients`.
pub(crate) struct TlsServer {
    server: Server,
    tls_port: u16,
}

/// The arguments of a TLS port `tls_port` serving `cert`.
fn tls_args(pki: &Pki, cert: &Pair, tls_port: u16, auth_clients: bool) -> Vec<String> {
    let path = |p: &std::path::Path| p.to_str().expect("UTF-8 path").to_owned();
    vec![
        "--tls-port".to_owned(),
        tls_port.to_string(),
        "--tls-cert-file".to_owned(),
        path(&cert.cert),
        "--tls-key-file".to_owned(),
        path(&cert.key),
        "--tls-ca-cert-file".to_owned(),
        path(&pki.ca),
        "--tls-auth-clients".to_owned(),
        if auth_clients { "yes" } else { "no" }.to_owned(),
    ]
}

impl TlsServer {
    pub(crate) fn start(pki: &Pki, cert: &Pair, auth_clients: bool) -> Self {
        let tls_port = free_port();
        let args = tls_args(pki, cert, tls_port, auth_clients);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = Server::start_with(free_port(), &args);
        Self { server, tls_port }
    }

    pub(crate) fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }
}

/// A limiter on `url` for `key` trusting `ca`, with the tests' short intervals.
pub(crate) fn builder(
    url: impl otel_rate_sampler::RedisUrls,
    key: &str,
    ca: &std::path::Path,
) -> otel_rate_sampler::FleetLimiterBuilder {
    FleetLimiter::builder(url, key, limit())
        .sync_interval(INTERVAL)
        .response_timeout(INTERVAL * 4)
        .tls_ca_file(ca)
}

/// The handshake fails as `kind` on every attempt (or, on a loaded machine, times
/// out), no other kind is counted, nothing is admitted and the server never saw a
/// command.
pub(crate) fn assert_refused(l: &FleetLimiter, kind: FleetFailure, server: &TlsServer) {
    let stats = wait_for(l, |s| {
        s.failures(kind) >= 3 && s.last_failure.is_some_and(|f| f != FleetFailure::Timeout)
    });
    assert_eq!(stats.last_failure, Some(kind), "{stats:?}");
    for other in FleetFailure::ALL {
        if other != kind && other != FleetFailure::Timeout {
            assert_eq!(stats.failures(other), 0, "{other:?}: {stats:?}");
        }
    }
    assert!(
        !stats.clock_synced && l.acquire_window().is_none(),
        "{stats:?}"
    );
    // Nothing reached Redis: no key, so no plain-text fallback either.
    assert_eq!(server.server.cli(&["DBSIZE"]).trim(), "0");
}

/// Two limiters on `urls` sharing `key`, trusting `ca`: under N in every window, and
/// at least 90 % of N used in the saturated ones (2 N offered).
fn two_share_one_cap(urls: &[String], key: &str, ca: &std::path::Path) {
    let fleet: Vec<FleetLimiter> = (0..2)
        .map(|i| {
            builder(urls.to_vec(), key, ca)
                .instance_id(format!("{key}-{i}"))
                .build()
                .expect("build")
        })
        .collect();
    load::warm_up(&fleet, 4);
    let (per_window, first, last) = drive(&fleet, 2.0 * f64::from(N), WINDOW * 8, || {});
    assert_capped(&per_window, key);
    let inner = inner_windows(&per_window, first, last);
    assert!(inner.len() >= 5, "too few windows measured: {inner:?}");
    for n in &inner {
        assert!(
            *n * 10 >= u64::from(N) * 9,
            "a window used {n} < 90 % of N: {inner:?}"
        );
    }
    for l in &fleet {
        let s = l.stats();
        assert_eq!(s.instances, 2, "{s:?}");
        // A loaded machine may time out the odd call; none is a TLS failure.
        assert!(s.leases > 10 * s.lease_errors, "{s:?}");
    }
}

#[test]
fn two_limiters_over_rediss_share_one_cap() {
    let pki = Pki::new("share");
    let server = TlsServer::start(&pki, &pki.server, false);
    two_share_one_cap(&[server.url()], "tls-share", &pki.ca);
}

#[test]
fn a_ca_that_did_not_sign_the_server_is_an_unknown_ca_failure() {
    let pki = Pki::new("unknown-ca");
    let server = TlsServer::start(&pki, &pki.server, false);
    crate::logs::capture();
    let started = Instant::now();
    let l = builder(server.url(), "tls-unknown-ca", &pki.other_ca)
        .build()
        .expect("build");
    assert_refused(&l, FleetFailure::TlsUnknownCa, &server);
    // Logged with the cause, at most once per sync interval.
    let lines = crate::logs::containing("tls-unknown-ca}");
    let tls: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("UnknownIssuer"))
        .collect();
    assert!(!tls.is_empty(), "{lines:?}");
    let intervals = started.elapsed().as_nanos() / INTERVAL.as_nanos() + 1;
    assert!(
        lines.len() as u128 <= intervals + 1,
        "{} lines: {lines:?}",
        lines.len()
    );
    let said = FleetFailure::TlsUnknownCa.to_string();
    assert!(said.contains("not signed by a trusted CA"), "{said}");
}

/// A server serving `cert` (picked from the PKI), trusted through the PKI's CA, is
/// refused as `kind`.
fn refused_as(tag: &str, cert: fn(&Pki) -> &Pair, kind: FleetFailure) {
    let pki = Pki::new(tag);
    let server = TlsServer::start(&pki, cert(&pki), false);
    let l = builder(server.url(), tag, &pki.ca).build().expect("build");
    assert_refused(&l, kind, &server);
}

#[test]
fn a_certificate_for_another_host_is_a_host_name_failure() {
    refused_as("tls-host", |p| &p.wrong_host, FleetFailure::TlsHostName);
}

#[test]
fn an_expired_certificate_is_an_expired_failure() {
    refused_as("tls-expired", |p| &p.expired, FleetFailure::TlsExpired);
}

#[test]
fn no_client_certificate_for_a_server_that_asks_is_refused_and_one_works() {
    let pki = Pki::new("mtls");
    let server = TlsServer::start(&pki, &pki.server, true);
    let without = builder(server.url(), "tls-no-client", &pki.ca)
        .build()
        .expect("build");
    assert_refused(&without, FleetFailure::TlsClientCert, &server);
    let with = builder(server.url(), "tls-client", &pki.ca)
        .tls_client_cert(&pki.client.cert, &pki.client.key)
        .build()
        .expect("build");
    let stats = wait_for(&with, |s| s.clock_synced && s.instances == 1);
    assert_eq!(stats.last_failure, None, "{stats:?}");
}

/// A `rediss://` URL on a port that speaks plain text fails: the limiter never sends a
/// command in the clear.
#[test]
fn rediss_to_a_plain_text_port_fails_and_sends_nothing_in_the_clear() {
    let pki = Pki::new("plain");
    let server = TlsServer::start(&pki, &pki.server, false);
    let url = format!("rediss://127.0.0.1:{}", server.server.port);
    let l = builder(url, "tls-plain", &pki.ca).build().expect("build");
    let stats = wait_for(&l, |s| s.lease_errors >= 3);
    // Plain Redis takes the ClientHello for the start of an inline command and
    // waits: the handshake times out (or fails as TLS), and no command is sent.
    assert!(
        stats.failures(FleetFailure::Tls) + stats.failures(FleetFailure::Timeout)
            == stats.lease_errors,
        "{stats:?}"
    );
    assert!(!stats.clock_synced, "{stats:?}");
    assert_eq!(server.server.cli(&["DBSIZE"]).trim(), "0");
}

/// What cannot work, or would turn verification off, is refused before any I/O.
#[test]
fn tls_misconfiguration_is_refused_by_build() {
    let pki = Pki::new("build");
    let l = |url: &str| builder(url.to_owned(), "tls-build", &pki.ca).build();
    // Certificate checks cannot be turned off through the URL.
    let insecure = l("rediss://127.0.0.1:1/#insecure").unwrap_err();
    assert!(
        matches!(insecure, FleetError::InvalidUrl { .. }),
        "{insecure}"
    );
    assert!(insecure.to_string().contains("verification"), "{insecure}");
    // A CA for a plain-text URL: the user expects TLS, which `redis://` is not.
    let plain = l("redis://127.0.0.1:1").unwrap_err();
    assert!(matches!(plain, FleetError::InvalidOption { .. }), "{plain}");
    // Files that cannot be read or hold no certificate.
    let missing = FleetLimiter::builder("rediss://127.0.0.1:1", "k", limit())
        .tls_ca_file("/nonexistent/ca.pem")
        .build()
        .unwrap_err();
    assert!(matches!(missing, FleetError::TlsFile { .. }), "{missing}");
    let key_as_cert = FleetLimiter::builder("rediss://127.0.0.1:1", "k", limit())
        .tls_client_cert(&pki.client.key, &pki.client.key)
        .build()
        .unwrap_err();
    assert!(
        matches!(key_as_cert, FleetError::TlsFile { .. }),
        "{key_as_cert}"
    );
}

/// Issue 32's done-when: three demos over `rediss://` with `--redis-ca` share one
/// limit (N or under per fleet window, at least 90 % of N kept in saturated windows).
#[test]
fn demos_over_rediss_with_redis_ca_share_one_limit() {
    let pki = Pki::new("demo-share");
    let server = TlsServer::start(&pki, &pki.server, false);
    let url = server.url();
    let ca = pki.ca.to_str().expect("UTF-8 path");
    let runs = run_fleet_with(&[&url; 3], &["--redis-ca", ca], "demo-tls", "4s", || {});
    assert_shared(&runs, "demo-tls");
}

/// With a CA that did not sign the server's certificate, the demo exits 1 at once
/// with a line naming the certificate problem (not "no answer" after its wait).
#[test]
fn a_demo_with_the_wrong_ca_exits_1_naming_the_certificate() {
    let pki = Pki::new("demo-wrong-ca");
    let server = TlsServer::start(&pki, &pki.server, false);
    let ca = pki.other_ca.to_str().expect("UTF-8 path");
    // Built first: the 15 s are the demo's, not cargo's.
    crate::demo::demo_run::demo_binary();
    let started = Instant::now();
    let args = [
        "--redis",
        &server.url(),
        "--redis-ca",
        ca,
        "--duration",
        "1s",
    ];
    let output = run_demo(&args, &[], HANG_GUARD);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("not signed by a trusted CA"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15), "{err}");
    // With a client certificate asked for and none given, the same at once.
    let mtls = TlsServer::start(&pki, &pki.server, true);
    let ca = pki.ca.to_str().expect("UTF-8 path");
    let args = ["--redis", &mtls.url(), "--redis-ca", ca, "--duration", "1s"];
    let output = run_demo(&args, &[], HANG_GUARD);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refused this client's TLS certificate"),
        "{err}"
    );
    let (cert, key) = (&pki.client.cert, &pki.client.key);
    let args = [
        "--redis",
        &mtls.url(),
        "--redis-ca",
        ca,
        "--redis-client-cert",
        cert.to_str().expect("UTF-8 path"),
        "--redis-client-key",
        key.to_str().expect("UTF-8 path"),
        "--duration",
        "1s",
    ];
    let output = run_demo(&args, &[], HANG_GUARD);
    assert!(output.status.success(), "{}", stderr(&output));
}

/// A 3-node cluster over TLS only for clients and the cluster bus (`--tls-cluster`):
/// the seed URLs are `rediss://`, the nodes announce their TLS ports, and two limiters
/// sharing one key stay under N per window.
#[test]
fn a_cluster_over_tls_stays_under_n() {
    let pki = Pki::new("cluster");
    let (_nodes, urls) = tls_cluster(&pki);
    two_share_one_cap(&urls, "tls-cluster", &pki.ca);
    // A CA that did not sign the nodes' certificates: typed as on one server.
    let l = builder(urls, "tls-cluster-unknown-ca", &pki.other_ca)
        .build()
        .expect("build");
    assert_cluster_refused(&l, FleetFailure::TlsUnknownCa);
}

/// Every handshake with the cluster fails as `kind`: counted, the last failure (a
/// loaded machine may time out a handshake: the last is read after one that did not),
/// and no clock ever synced.
fn assert_cluster_refused(l: &FleetLimiter, kind: FleetFailure) {
    let stats = wait_for(l, |s| {
        s.failures(kind) >= 3 && s.last_failure.is_some_and(|f| f != FleetFailure::Timeout)
    });
    assert_eq!(stats.last_failure, Some(kind), "{stats:?}");
    assert!(!stats.clock_synced, "{stats:?}");
}

/// A cluster whose nodes ask for a client certificate: without one every attempt is a
/// typed `TlsClientCert` failure (through the cluster's own node connector, as on one
/// server), with one the limiter syncs and admits.
#[test]
fn a_tls_cluster_asking_for_a_client_certificate_refuses_none_and_takes_one() {
    let pki = Pki::new("cluster-mtls");
    let (_nodes, urls) = tls_cluster_with(&pki, true);
    let without = builder(urls.clone(), "tls-cluster-no-client", &pki.ca)
        .build()
        .expect("build");
    assert_cluster_refused(&without, FleetFailure::TlsClientCert);
    let with = builder(urls, "tls-cluster-client", &pki.ca)
        .tls_client_cert(&pki.client.cert, &pki.client.key)
        .build()
        .expect("build");
    let stats = wait_for(&with, |s| s.clock_synced);
    assert!(stats.clock_synced, "{stats:?}");
    // The first decisions ask for a lease; one arrives within the wait.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !with.try_acquire() {
        assert!(
            Instant::now() < deadline,
            "never admitted: {:?}",
            with.stats()
        );
        std::thread::sleep(INTERVAL / 4);
    }
    assert!(with.stats().leases >= 1, "{:?}", with.stats());
}

/// Three cluster nodes serving the PKI's server certificate on TLS ports (clients and
/// the cluster bus), and their `rediss://` seed URLs.
pub(crate) fn tls_cluster(pki: &Pki) -> (Vec<Server>, Vec<String>) {
    tls_cluster_with(pki, false)
}

/// [`tls_cluster`], its nodes asking every client for a certificate the PKI's CA signed
/// if `auth_clients` (the bus's own connections present the server certificate, which
/// is also a client's).
fn tls_cluster_with(pki: &Pki, auth_clients: bool) -> (Vec<Server>, Vec<String>) {
    let tls_ports = [free_port(), free_port(), free_port()];
    let extra = tls_ports.map(|port| {
        let mut args = tls_args(pki, &pki.server, port, auth_clients);
        args.extend(["--tls-cluster".to_owned(), "yes".to_owned()]);
        args
    });
    let path = |p: &std::path::Path| p.to_str().expect("UTF-8 path").to_owned();
    let cli = [
        "--tls".to_owned(),
        "--cacert".to_owned(),
        path(&pki.ca),
        "--cert".to_owned(),
        path(&pki.server.cert),
        "--key".to_owned(),
        path(&pki.server.key),
    ];
    let nodes = crate::cluster::start_cluster_with(&extra, &cli, Some(&tls_ports));
    let urls = tls_ports
        .iter()
        .map(|p| format!("rediss://127.0.0.1:{p}"))
        .collect();
    (nodes, urls)
}
