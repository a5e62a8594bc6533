//! Redis down, killed and restarted empty, paused: the fleet stays under N per window,
//! decisions never block, and leasing resumes.

use std::thread;
use std::time::{Duration, Instant};

use otel_rate_sampler::FleetLimiter;

use crate::load::{self, assert_capped, drive, inner_windows, INTERVAL, N, WINDOW};
use crate::proxy::Proxy;
use crate::server::Server;

/// Waits until `pred` holds for every limiter; returns how long that took.
fn time_until(fleet: &[FleetLimiter], pred: impl Fn(&FleetLimiter) -> bool) -> Duration {
    let start = Instant::now();
    while !fleet.iter().all(&pred) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "condition never reached: {:?}",
            fleet.iter().map(|l| l.stats()).collect::<Vec<_>>()
        );
        thread::sleep(Duration::from_millis(1));
    }
    start.elapsed()
}

/// Killed mid-run, then restarted EMPTY on the same port: no window passes N (the new
/// Redis does not hand out a second N for windows whose accounting it lost), every
/// instance falls back to its share, and leasing resumes after the restart.
#[test]
fn killed_and_restarted_empty_stays_under_n() {
    let mut server = Server::start();
    let fleet = load::fleet(&[server.url()], "restart", 4);
    load::warm_up(&fleet, 4);
    let mut fallback_seen = false;
    let mut recovery = Duration::ZERO;
    // The window of each step, for a failure's diagnosis.
    let mut steps = Vec::new();
    let mut killed_in = 0;
    let mut restart_took = Duration::ZERO;
    let (per_window, first, last) = drive(&fleet, 3.0 * f64::from(N), WINDOW * 16, || {
        thread::sleep(WINDOW * 4 + WINDOW / 3);
        killed_in = fleet[0].current_window().expect("synced");
        steps.push(("kill", Some(killed_in)));
        server.kill();
        // Long enough for every instance to fall back (3 intervals), across windows.
        thread::sleep(WINDOW * 4);
        fallback_seen = fleet.iter().all(|l| l.stats().fallback_active);
        steps.push(("restart", fleet[0].current_window()));
        let restarting = Instant::now();
        server.restart_empty();
        restart_took = restarting.elapsed();
        recovery = time_until(&fleet, |l| !l.stats().fallback_active);
        steps.push(("resumed", fleet[0].current_window()));
        // The load goes on past the new Redis's windows without grants and its
        // recovery windows, however long the restart took on a loaded machine.
        thread::sleep(WINDOW * 8);
    });
    let max = assert_capped(&per_window, "kill + restart empty");
    println!(
        "restart: windows {:?} ({first} to {last}, steps {steps:?}), max {max}, the restart took {restart_took:?}, leasing resumed {recovery:?} after it",
        inner_windows(&per_window, first, last)
    );
    for l in &fleet {
        println!("  {:?}", l.stats());
    }
    assert!(
        fallback_seen,
        "the instances did not fall back while Redis was down"
    );
    // Recovery: one attempt per interval; the first attempt after the restart succeeds.
    assert!(
        recovery <= INTERVAL * 2 + Duration::from_millis(50),
        "leasing resumed only after {recovery:?}"
    );
    // In fallback each instance spent its share: the fleet kept sampling in the
    // windows the shares cover (from the window after the one it fell back in, 3
    // intervals after the kill, to the last ending within 19 intervals of its last
    // heartbeat: `killed_in + 2` and `+ 3` here; the restart may come later on a
    // loaded machine, and then nothing is kept until Redis answers, as designed).
    let inner = inner_windows(&per_window, first, last);
    for l in &fleet {
        let s = l.stats();
        assert!(s.permits_fallback > 0, "no fallback share spent: {s:?}");
    }
    let covered = [killed_in + 2, killed_in + 3].map(|w| per_window.get(&w).copied());
    assert!(
        covered.iter().any(|n| n.unwrap_or(0) > 0),
        "nothing kept on the fallback shares: {covered:?} of {inner:?}"
    );
    // With the restart as planned (Redis down about 4 windows), most windows kept.
    if restart_took <= WINDOW {
        assert!(
            inner.iter().filter(|&&n| n > 0).count() >= inner.len() / 2,
            "{inner:?}"
        );
    }
    // After the recovery windows, leasing fills N again.
    let tail = &inner[inner.len().saturating_sub(2)..];
    for n in tail {
        assert!(
            *n * 10 >= u64::from(N) * 9,
            "not refilled after restart: {inner:?}"
        );
    }
}

/// Restarted empty so fast that no instance falls back: the instances still hold the
/// old Redis's grants for the window, which the new Redis cannot know until each one
/// reports. It must hand out nothing more for that window (nor the next).
#[test]
fn quick_restart_does_not_hand_out_a_second_n() {
    let mut server = Server::start();
    let fleet = load::fleet(&[server.url()], "quick", 4);
    load::warm_up(&fleet, 4);
    let (per_window, first, last) = drive(&fleet, 3.0 * f64::from(N), WINDOW * 14, || {
        for _ in 0..3 {
            thread::sleep(WINDOW * 3 + WINDOW / 4);
            server.restart_empty();
        }
    });
    let max = assert_capped(&per_window, "quick restart");
    let inner = inner_windows(&per_window, first, last);
    println!("quick restarts: windows {inner:?}, max {max}");
    assert!(fleet.iter().all(|l| l.stats().lease_errors > 0));
}

/// Redis paused with `DEBUG SLEEP`: calls time out (bounded), the instances fall back,
/// decisions keep answering at once, and leasing resumes after the pause.
#[test]
fn paused_with_debug_sleep_stays_under_n() {
    let server = Server::start();
    let fleet = load::fleet(&[server.url()], "pause", 4);
    load::warm_up(&fleet, 4);
    let mut recovery = Duration::ZERO;
    let mut slowest_decision = Duration::ZERO;
    let (per_window, first, last) = drive(&fleet, 3.0 * f64::from(N), WINDOW * 14, || {
        thread::sleep(WINDOW * 4);
        let port = server.port;
        let sleeper = thread::spawn(move || {
            std::process::Command::new("redis-cli")
                .args(["-p", &port.to_string(), "DEBUG", "SLEEP", "1.2"])
                .output()
                .expect("redis-cli")
        });
        thread::sleep(INTERVAL * 5);
        // Decisions never wait for Redis.
        for _ in 0..1000 {
            let t = Instant::now();
            let _ = fleet[0].acquire_window();
            slowest_decision = slowest_decision.max(t.elapsed());
        }
        sleeper.join().expect("sleeper");
        recovery = time_until(&fleet, |l| !l.stats().fallback_active);
    });
    let max = assert_capped(&per_window, "DEBUG SLEEP");
    println!(
        "pause: windows {:?}, max {max}, leasing resumed {recovery:?} after the pause, \
         slowest decision {slowest_decision:?}",
        inner_windows(&per_window, first, last)
    );
    assert!(fleet.iter().all(|l| l.stats().lease_errors > 0));
    assert!(
        recovery <= INTERVAL * 2 + Duration::from_millis(50),
        "leasing resumed only after {recovery:?}"
    );
}

/// `CLIENT PAUSE` (all commands): the same cap; the fleet goes on.
#[test]
fn client_pause_stays_under_n() {
    let server = Server::start();
    let fleet = load::fleet(&[server.url()], "cpause", 2);
    load::warm_up(&fleet, 4);
    let (per_window, first, last) = drive(&fleet, 5.0 * f64::from(N), WINDOW * 10, || {
        thread::sleep(WINDOW * 3);
        server.cli(&["CLIENT", "PAUSE", "800", "ALL"]);
    });
    let max = assert_capped(&per_window, "CLIENT PAUSE");
    let inner = inner_windows(&per_window, first, last);
    println!("client pause: windows {inner:?}, max {max}");
    let tail = &inner[inner.len().saturating_sub(2)..];
    for n in tail {
        assert!(
            *n * 10 >= u64::from(N) * 9,
            "not refilled after the pause: {inner:?}"
        );
    }
}

/// Redis down at start: nothing admitted, no panic; when it comes up, leasing starts
/// within two intervals.
#[test]
fn down_at_start_then_up() {
    let port = crate::server::free_port();
    let fleet: Vec<_> = (0..2)
        .map(|i| {
            FleetLimiter::builder(format!("redis://127.0.0.1:{port}"), "late", load::limit())
                .sync_interval(INTERVAL)
                .instance_id(format!("late-{i}"))
                .build()
                .unwrap()
        })
        .collect();
    thread::sleep(WINDOW);
    assert!(fleet.iter().all(|l| l.acquire_window().is_none()));
    let _server = Server::start_with(port, &[]);
    let up = time_until(&fleet, |l| l.stats().clock_synced);
    println!("down at start: first successful call {up:?} after the server answered");
    assert!(up <= INTERVAL * 2 + Duration::from_millis(50), "{up:?}");
    // The first two windows of a fresh Redis grant nothing; then permits flow.
    thread::sleep(WINDOW * 4);
    let (per_window, first, last) = drive(&fleet, 2.0 * f64::from(N), WINDOW * 5, || {});
    assert_capped(&per_window, "late start");
    let inner = inner_windows(&per_window, first, last);
    assert!(
        inner.iter().all(|n| *n * 10 >= u64::from(N) * 9),
        "{inner:?}"
    );
}

/// A fleet of 4 where instance 3 reaches Redis through a freezable proxy.
fn fleet_with_one_behind_a_proxy(server: &Server, key: &str) -> (Vec<FleetLimiter>, Proxy) {
    let proxy = Proxy::start(server.port);
    let mut fleet = load::fleet(&[server.url()], key, 3);
    fleet.push(
        FleetLimiter::builder(proxy.url(), key, load::limit())
            .sync_interval(INTERVAL)
            .response_timeout(INTERVAL)
            .instance_id(format!("{key}-3"))
            .build()
            .expect("build"),
    );
    load::warm_up(&fleet, 4);
    (fleet, proxy)
}

/// One instance cut off while the others still reach Redis: it falls back to its share,
/// and Redis reserves that share (the instance's heartbeat is stale), so the others
/// cannot lease it. Its calls held in the network arrive late and are refused.
#[test]
fn one_instance_cut_off_stays_under_n() {
    let server = Server::start();
    let (fleet, proxy) = fleet_with_one_behind_a_proxy(&server, "partition");
    let mut cut_off_fell_back = false;
    let (per_window, first, last) = drive(&fleet, 3.0 * f64::from(N), WINDOW * 12, || {
        thread::sleep(WINDOW * 3 + WINDOW / 3);
        proxy.freeze();
        // Past the fallback (3 intervals), within the prune horizon (20 intervals).
        thread::sleep(INTERVAL * 14);
        cut_off_fell_back = fleet[3].stats().fallback_active;
        proxy.thaw();
        time_until(&fleet, |l| !l.stats().fallback_active);
    });
    let max = assert_capped(&per_window, "one instance cut off");
    let inner = inner_windows(&per_window, first, last);
    println!("partition: windows {inner:?}, max {max}");
    assert!(cut_off_fell_back, "{:?}", fleet[3].stats());
    assert!(fleet[..3].iter().all(|l| !l.stats().fallback_active));
}

/// Redis restarted empty while one instance, holding the old Redis's grants for the
/// window, cannot reach it yet (but not long enough to fall back): the others reconnect
/// at once and report theirs; the new Redis must still grant nothing more for that
/// window, or the fleet would pass N by what the slow instance holds.
#[test]
fn restart_while_one_instance_is_slow_to_return_stays_under_n() {
    let mut server = Server::start();
    let (fleet, proxy) = fleet_with_one_behind_a_proxy(&server, "slowback");
    // Instance 3 takes 4/7 of the load (one thread per entry; clones share a limiter),
    // so the grants it holds early in a window exceed its share N/4: the others' share
    // caps alone would not cover them.
    let weighted: Vec<FleetLimiter> = (0..7).map(|i| fleet[i.min(3)].clone()).collect();
    let (per_window, first, last) = drive(&weighted, 3.0 * f64::from(N), WINDOW * 14, || {
        for _ in 0..3 {
            // Early in a window: instance 3 holds a lease it has not spent yet.
            let w = fleet[0].current_window().expect("synced");
            while fleet[0].current_window() == Some(w) {
                thread::sleep(Duration::from_millis(1));
            }
            thread::sleep(WINDOW / 8);
            proxy.freeze();
            server.restart_empty();
            thread::sleep(INTERVAL * 2);
            proxy.thaw();
            thread::sleep(WINDOW * 3);
        }
    });
    let max = assert_capped(&per_window, "restart with a slow instance");
    let inner = inner_windows(&per_window, first, last);
    println!("restart, one slow: windows {inner:?}, max {max}");
}
