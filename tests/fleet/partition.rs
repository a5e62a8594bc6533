//! Partitions longer than Redis keeps a silent replica's share (20 sync intervals):
//! the cut-off replicas stop spending their fallback share before Redis can hand it to
//! the others, so no window passes N however long the partition lasts.

use std::thread;
use std::time::Duration;

use otel_rate_sampler::{FleetFailure, FleetLimiter, FleetStats};

use crate::load::{self, assert_capped, drive_judged, inner_windows, EDGE, INTERVAL, N, WINDOW};
use crate::proxy::Proxy;
use crate::server::Server;

/// Three replicas that reach Redis and a fourth behind `proxy`, warmed up.
fn three_and_one_behind(server: &Server, proxy: &Proxy, key: &str) -> Vec<FleetLimiter> {
    let mut fleet = load::fleet(&[server.url()], key, 3);
    fleet.push(behind(proxy, key, 3));
    load::warm_up(&fleet, 4);
    fleet
}

fn behind(proxy: &Proxy, key: &str, i: usize) -> FleetLimiter {
    behind_with(proxy, key, i, INTERVAL)
}

/// A replica reaching Redis through `proxy`, with the response timeout given (the
/// connect timeout the same).
fn behind_with(proxy: &Proxy, key: &str, i: usize, response_timeout: Duration) -> FleetLimiter {
    FleetLimiter::builder(proxy.url(), key, load::limit())
        .sync_interval(INTERVAL)
        .response_timeout(response_timeout)
        .instance_id(format!("{key}-{i}"))
        .build()
        .expect("build")
}

/// One replica of four cut off for 40 intervals (twice the prune age): before, it
/// spent its share for as long as the partition lasted while Redis had given that
/// share to the others (63 per window of 50).
#[test]
fn one_replica_cut_off_for_forty_intervals_stays_under_n() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let fleet = three_and_one_behind(&server, &proxy, "longcut");
    let cut_off = cut_off_for_forty_intervals(&fleet, &proxy, "one replica cut off", EDGE);
    // What an operator sees of the cut-off replica: in fallback, its calls timing out
    // (the partition), not refused credentials nor error answers.
    assert!(cut_off.fallback_active, "{cut_off:?}");
    assert_eq!(
        cut_off.last_failure,
        Some(FleetFailure::Timeout),
        "{cut_off:?}"
    );
    assert!(cut_off.failures(FleetFailure::Timeout) >= 10, "{cut_off:?}");
    for kind in [FleetFailure::Auth, FleetFailure::Redis] {
        assert_eq!(cut_off.failures(kind), 0, "{kind:?}: {cut_off:?}");
    }
}

/// One replica whose replies are cut off for 40 intervals: its calls still reach Redis
/// (heartbeats and reports), it hears nothing and falls back. Never over N.
#[test]
fn one_replica_without_replies_for_forty_intervals_stays_under_n() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let fleet = three_and_one_behind(&server, &proxy, "repliescut");
    let mut fell_back = false;
    let (per_window, first, last) =
        drive_judged(&fleet, 12.0 * f64::from(N), WINDOW * 16, EDGE, || {
            thread::sleep(WINDOW * 2);
            proxy.freeze_replies();
            thread::sleep(INTERVAL * 10);
            fell_back = fleet[3].stats().fallback_active;
            thread::sleep(INTERVAL * 30);
            proxy.thaw();
        });
    let max = assert_capped(&per_window, "one replica without replies for 40 intervals");
    println!(
        "replies cut off: windows {:?}, max {max}",
        inner_windows(&per_window, first, last)
    );
    assert!(fell_back, "{:?}", fleet[3].stats());
}

/// Every replica cut off (Redis unreachable for all) for 40 intervals: each spends its
/// share while Redis would still reserve it, then nothing; never over N.
#[test]
fn the_whole_fleet_cut_off_for_forty_intervals_stays_under_n() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let fleet: Vec<FleetLimiter> = (0..4).map(|i| behind(&proxy, "allcut", i)).collect();
    load::warm_up(&fleet, 4);
    let (per_window, first, last) =
        drive_judged(&fleet, 3.0 * f64::from(N), WINDOW * 16, EDGE, || {
            thread::sleep(WINDOW * 2);
            proxy.freeze();
            thread::sleep(INTERVAL * 40);
            proxy.thaw();
        });
    let max = assert_capped(&per_window, "the whole fleet cut off for 40 intervals");
    let inner = inner_windows(&per_window, first, last);
    println!("whole fleet cut off: windows {inner:?}, max {max}");
    // The partition spans 8 windows: the shares filled at least 2 of them (spent while
    // Redis still reserved them), the rest kept nothing, and leasing fills N after.
    let empty = inner.iter().filter(|&&n| n == 0).count();
    assert!((1..=6).contains(&empty), "{inner:?}");
    assert!(
        inner.last().is_some_and(|&n| n * 10 >= u64::from(N) * 9),
        "{inner:?}"
    );
}

/// The partition rule for any timeout: one replica of four, whose calls may take a
/// response timeout of 2 sync intervals (and a connect timeout as long), cut off for 40
/// intervals. Its stop time follows its own timeouts (4 intervals before Redis may
/// forget it, not 1): never over N, and nothing spent past it.
#[test]
fn one_replica_with_a_response_timeout_of_two_intervals_cut_off_stays_under_n() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let key = "slowcut";
    let mut fleet = load::fleet(&[server.url()], key, 3);
    fleet.push(behind_with(&proxy, key, 3, INTERVAL * 2));
    load::warm_up(&fleet, 4);
    // Its call bound is 4 intervals (response and connect timeouts of 2 each).
    cut_off_for_forty_intervals(
        &fleet,
        &proxy,
        "a replica with a 2-interval timeout cut off",
        INTERVAL * 2 + Duration::from_millis(5),
    );
    assert!(
        fleet[3].stats().permits_fallback > 0,
        "{:?}",
        fleet[3].stats()
    );
}

/// Drives `fleet` while its last replica, behind `proxy`, is cut off for 40 intervals:
/// no window over N, and nothing spent by it in the last 10 (past the prune age).
/// Returns its statistics near the end of the partition.
/// `edge`: the slowest replica's edge error (half its call bound, plus drift).
fn cut_off_for_forty_intervals(
    fleet: &[FleetLimiter],
    proxy: &Proxy,
    what: &str,
    edge: Duration,
) -> FleetStats {
    let cut = &fleet[fleet.len() - 1];
    let mut spent_late = 0;
    let mut cut_off = None;
    let (per_window, first, last) =
        drive_judged(fleet, 3.0 * f64::from(N), WINDOW * 16, edge, || {
            thread::sleep(WINDOW * 2);
            proxy.freeze();
            thread::sleep(INTERVAL * 30);
            let before = cut.stats();
            thread::sleep(INTERVAL * 10);
            let after = cut.stats();
            cut_off = Some(after);
            // Past the prune age: the cut-off replica admits nothing.
            spent_late = if after.window == before.window {
                after.window_spent - before.window_spent
            } else {
                after.window_spent
            };
            proxy.thaw();
        });
    let max = assert_capped(&per_window, what);
    println!(
        "{what}: windows {:?}, max {max}",
        inner_windows(&per_window, first, last)
    );
    assert_eq!(spent_late, 0, "{:?}", cut.stats());
    cut_off.expect("stats taken during the partition")
}
