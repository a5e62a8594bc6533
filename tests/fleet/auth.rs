//! A server that requires a password: a wrong password, or none, is an authentication
//! failure the application sees in `stats()` (`last_failure`, failures by kind), not a
//! timeout nor a protocol error; the right password leases.

use std::thread;
use std::time::{Duration, Instant};

use otel_rate_sampler::{FleetFailure, FleetLimiter, FleetStats};

use crate::load::{limit, INTERVAL};
use crate::server::Server;

const PASSWORD: &str = "s3cret";

fn limiter(url: String, key: &str) -> FleetLimiter {
    FleetLimiter::builder(url, key, limit())
        .sync_interval(INTERVAL)
        .response_timeout(INTERVAL)
        .build()
        .expect("build")
}

/// Waits (at most 10 s) until `pred` holds for the limiter's stats; returns them.
pub(crate) fn wait_for(l: &FleetLimiter, pred: impl Fn(&FleetStats) -> bool) -> FleetStats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = l.stats();
        if pred(&stats) {
            return stats;
        }
        assert!(Instant::now() < deadline, "never reached: {stats:?}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Refused credentials are counted as `Auth` on every attempt (one per interval),
/// never as a timeout or a generic error, and nothing is admitted.
fn assert_refused(l: &FleetLimiter) {
    let stats = wait_for(l, |s| s.failures(FleetFailure::Auth) >= 3);
    assert_eq!(stats.last_failure, Some(FleetFailure::Auth), "{stats:?}");
    for kind in FleetFailure::ALL {
        if kind != FleetFailure::Auth {
            assert_eq!(stats.failures(kind), 0, "{kind:?}: {stats:?}");
        }
    }
    assert_eq!(stats.lease_errors, stats.failures(FleetFailure::Auth));
    // What an application can print instead of "no answer within 5s".
    let said = FleetFailure::Auth.to_string();
    assert!(said.contains("refused authentication"), "{said}");
    assert!(
        !stats.clock_synced && l.acquire_window().is_none(),
        "{stats:?}"
    );
}

#[test]
fn a_wrong_password_is_an_auth_failure_in_stats() {
    let server = Server::start_with(crate::server::free_port(), &["--requirepass", PASSWORD]);
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port);
    assert_refused(&limiter(url, "auth-wrong"));
}

#[test]
fn no_password_for_a_server_that_requires_one_is_an_auth_failure() {
    let server = Server::start_with(crate::server::free_port(), &["--requirepass", PASSWORD]);
    assert_refused(&limiter(server.url(), "auth-none"));
}

#[test]
fn the_right_password_leases_and_clears_the_last_failure() {
    let server = Server::start_with(crate::server::free_port(), &["--requirepass", PASSWORD]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", server.port);
    let l = limiter(url, "auth-right");
    let stats = wait_for(&l, |s| s.clock_synced && s.instances == 1);
    assert_eq!(stats.last_failure, None, "{stats:?}");
    assert_eq!(stats.lease_errors, 0, "{stats:?}");
}
