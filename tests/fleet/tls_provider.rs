//! rustls's crypto provider on a `rediss://` cluster: the fleet names ring for every
//! connection, so a process with no default provider, or with another one installed
//! first, connects all the same and keeps its default as it was. Each case runs in a
//! process of its own (a default provider is process-wide and set once).

use std::process::Command;

use rustls::crypto::CryptoProvider;

use crate::auth::wait_for;
use crate::pki::Pki;
use crate::tls::{builder, tls_cluster};

/// The child's test, by its path in this binary.
const CHILD: &str = "tls_provider::child_connects_to_a_tls_cluster";

/// What the child is told: the seeds, the CA and which default provider to set first.
const URLS: &str = "FLEET_TLS_PROVIDER_URLS";
const CA: &str = "FLEET_TLS_PROVIDER_CA";
const MODE: &str = "FLEET_TLS_PROVIDER_MODE";

#[test]
fn a_tls_cluster_connects_whatever_the_process_default_provider() {
    let pki = Pki::new("provider");
    let (_nodes, urls) = tls_cluster(&pki);
    for mode in ["none", "other"] {
        let output = Command::new(std::env::current_exe().expect("test executable"))
            .args([
                CHILD,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(URLS, urls.join(","))
            .env(CA, &pki.ca)
            .env(MODE, mode)
            .output()
            .expect("run the child test");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "default provider {mode}:\n{stdout}\n{stderr}"
        );
    }
}

/// Run by the test above in a process of its own: with the process's default crypto
/// provider absent (`none`) or one that can make no TLS connection at all (`other`: no
/// cipher suite), a limiter on the TLS cluster leases, and the default is as it was.
#[test]
#[ignore = "run in a process of its own by a_tls_cluster_connects_whatever_the_process_default_provider"]
fn child_connects_to_a_tls_cluster() {
    let var = |name| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let urls: Vec<String> = var(URLS).split(',').map(str::to_owned).collect();
    let mode = var(MODE);
    match mode.as_str() {
        "none" => assert!(CryptoProvider::get_default().is_none()),
        "other" => {
            let useless = CryptoProvider {
                cipher_suites: Vec::new(),
                ..rustls::crypto::ring::default_provider()
            };
            useless.install_default().expect("the first default");
        }
        other => panic!("mode {other}"),
    }
    let l = builder(urls, &format!("tls-provider-{mode}"), var(CA).as_ref())
        .build()
        .expect("build");
    wait_for(&l, |s| s.clock_synced && s.leases > 0);
    match CryptoProvider::get_default() {
        None => assert_eq!(mode, "none"),
        Some(p) => assert!(mode == "other" && p.cipher_suites.is_empty()),
    }
}
