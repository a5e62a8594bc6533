//! One Redis server: the cap per fleet window and the utilisation, for k = 2, 4, 8
//! instances under 0.8 N to 10 N offered; lifecycle; bad input; the sampler.

use std::thread;
use std::time::{Duration, Instant};

use otel_rate_sampler::{FleetError, FleetLimiter, Limit, RateLimiter, RateLimitingSampler};

use crate::load::{self, assert_capped, drive, inner_windows, N, WINDOW};
use crate::pool::eventually;
use crate::server::Server;

/// For each offered load (× N per window): cap in 100 % of windows, and ≥ 90 % of N
/// used in every window fully under load when 2 N or more is offered.
fn caps_and_fills(k: usize) {
    let server = Server::start();
    let key = format!("cap-k{k}");
    let fleet = load::fleet(&[server.url()], &key, k);
    load::warm_up(&fleet, 4);
    for offered in [0.8, 2.0, 10.0] {
        let (per_window, first, last) = drive(&fleet, offered * f64::from(N), WINDOW * 8, || {});
        let max = assert_capped(&per_window, &format!("k={k} offered={offered}N"));
        let inner = inner_windows(&per_window, first, last);
        let min = inner.iter().copied().min().unwrap_or(0);
        let calls: u64 = fleet.iter().map(|l| l.stats().redis_calls).sum();
        println!(
            "k={k} offered={offered}N: windows {:?}, max {max}, min(inner) {min}, \
             redis calls so far {calls}",
            inner
        );
        assert!(inner.len() >= 5, "too few windows measured: {inner:?}");
        if offered >= 2.0 {
            for n in &inner {
                assert!(
                    *n * 10 >= u64::from(N) * 9,
                    "k={k} offered={offered}N: a window used {n} < 90 % of N = {N}: {inner:?}"
                );
            }
        }
    }
    for l in &fleet {
        let s = l.stats();
        assert_eq!(s.instances, k as u64, "{s:?}");
        // A call may time out on a loaded machine (a fault the limiter rides out);
        // it must not have left the instance in fallback.
        assert!(!s.fallback_active, "{s:?}");
    }
}

#[test]
fn two_instances_stay_under_n_and_fill_it() {
    caps_and_fills(2);
}

#[test]
fn four_instances_stay_under_n_and_fill_it() {
    caps_and_fills(4);
}

#[test]
fn eight_instances_stay_under_n_and_fill_it() {
    caps_and_fills(8);
}

/// At saturation an instance makes a handful of Redis calls per window, not one per
/// decision.
#[test]
fn calls_per_window_at_saturation_are_a_handful() {
    let server = Server::start();
    let fleet = load::fleet(&[server.url()], "calls", 2);
    load::warm_up(&fleet, 4);
    // Ramp demand up first, then measure.
    drive(&fleet, 4.0 * f64::from(N), WINDOW * 3, || {});
    let before: Vec<u64> = fleet.iter().map(|l| l.stats().redis_calls).collect();
    let (per_window, first, last) = drive(&fleet, 4.0 * f64::from(N), WINDOW * 8, || {});
    let windows = (last - first + 1) as f64;
    for (l, b) in fleet.iter().zip(before) {
        let per = (l.stats().redis_calls - b) as f64 / windows;
        println!("calls per instance per window at 4N offered: {per:.1}");
        assert!(per <= 12.0, "{per} Redis calls per window");
    }
    let admitted: u64 = per_window.values().sum();
    assert!(admitted > 0);
}

/// `build` returns at once, without waiting for Redis: against a server that accepts
/// the connection and never answers, with hour-long timeouts, a `build` that waited
/// would not return before the hour (the bound below only detects that hang, so a
/// loaded machine cannot fail it). Nothing is admitted until the first successful
/// call (the documented initial state).
#[test]
fn build_does_not_wait_for_redis_and_admits_nothing_before_it() {
    // Bound and never accepted: the kernel completes the connection, nobody answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    let port = silent.local_addr().expect("local address").port();
    let hour = Duration::from_secs(3600);
    let started = Instant::now();
    let l = FleetLimiter::builder(format!("redis://127.0.0.1:{port}"), "down", load::limit())
        .sync_interval(hour)
        .response_timeout(hour)
        .build()
        .expect("build never talks to Redis");
    assert!(started.elapsed() < hour / 60, "build waited for Redis");
    let until = Instant::now() + WINDOW * 3;
    while Instant::now() < until {
        assert!(!l.try_acquire(), "admitted with no Redis ever seen");
        thread::sleep(Duration::from_millis(2));
    }
    let s = l.stats();
    assert!(!s.clock_synced && s.leases == 0, "{s:?}");
}

/// Dropping the last handle stops the worker: its connection closes and its heartbeat
/// stops. A clone keeps it going. Each step waits for its condition (the deadline only
/// detects a hang), so a worker slowed by a loaded machine passes and a worker that
/// never stops fails.
#[test]
fn dropping_the_last_handle_stops_the_thread() {
    let server = Server::start();
    let l = FleetLimiter::builder(server.url(), "drop", load::limit())
        .sync_interval(load::INTERVAL)
        .instance_id("dropper")
        .build()
        .unwrap();
    load::warm_up(std::slice::from_ref(&l), 1);
    let clone = l.clone();
    drop(l);
    // A clone keeps it alive: the heartbeat still moves.
    let score = || load::heartbeat(&server, "dropper");
    let a = score();
    assert!(!a.trim().is_empty(), "no heartbeat while leasing");
    eventually("the worker heartbeats while a clone is alive", || {
        a != score()
    });
    drop(clone);
    // Its one connection closes: from then on nothing of this worker reaches Redis.
    eventually("the worker's connection closes", || server.clients() == 0);
    let b = score();
    thread::sleep(load::INTERVAL * 4);
    assert_eq!(
        b,
        score(),
        "a heartbeat after the worker's connection closed"
    );
    assert_eq!(
        server.clients(),
        0,
        "the worker connected again after the drop"
    );
}

#[test]
fn shutdown_stops_the_thread_and_is_idempotent() {
    let server = Server::start();
    let l = FleetLimiter::builder(server.url(), "shut", load::limit())
        .sync_interval(load::INTERVAL)
        .instance_id("shutter")
        .build()
        .unwrap();
    load::warm_up(std::slice::from_ref(&l), 1);
    l.shutdown(); // joins the thread
    let score = || load::heartbeat(&server, "shutter");
    let a = score();
    assert!(!a.trim().is_empty(), "no heartbeat before the shutdown");
    thread::sleep(load::INTERVAL * 4);
    assert_eq!(a, score());
    l.shutdown();
    // The lease of the current window may still be spent, then nothing.
    thread::sleep(WINDOW * 2);
    assert!(!l.try_acquire());
}

#[test]
fn bad_input_is_a_typed_error_not_a_panic() {
    let limit = load::limit();
    let err = |r: Result<FleetLimiter, FleetError>| r.expect_err("should fail");
    assert!(matches!(
        err(FleetLimiter::builder("nonsense://x", "k", limit).build()),
        FleetError::InvalidUrl { .. }
    ));
    let e = err(FleetLimiter::builder("redis://u:secret@[bad", "k", limit).build());
    assert!(!e.to_string().contains("secret"), "{e}");
    let builder = FleetLimiter::builder("redis://u:secret@host:1", "k", limit);
    assert!(!format!("{builder:?}").contains("secret"), "{builder:?}");
    assert!(matches!(
        err(FleetLimiter::builder("redis://127.0.0.1:1", "a{b}", limit).build()),
        FleetError::InvalidKey { .. }
    ));
    assert!(matches!(
        err(FleetLimiter::builder("redis://127.0.0.1:1", "", limit).build()),
        FleetError::InvalidKey { .. }
    ));
    assert!(matches!(
        err(FleetLimiter::builder(Vec::<String>::new(), "k", limit).build()),
        FleetError::NoUrl
    ));
    // `Limit` itself refuses more permits than a lease word holds (both are 4 194 303):
    // the largest limit builds.
    assert!(Limit::per_window(5_000_000, Duration::from_secs(1)).is_err());
    let largest = Limit::per_window(Limit::MAX_PERMITS, Duration::from_secs(1)).unwrap();
    FleetLimiter::builder("redis://127.0.0.1:1", "k", largest)
        .build()
        .expect("the largest Limit fits a fleet limiter");
    assert!(matches!(
        err(FleetLimiter::builder("redis://127.0.0.1:1", "k", limit)
            .sync_interval(Duration::ZERO)
            .build()),
        FleetError::InvalidOption { .. }
    ));
}

/// The sampler takes a fleet limiter unchanged, with or without an application runtime.
#[test]
fn sampler_over_a_fleet_limiter_inside_a_tokio_runtime() {
    use opentelemetry::trace::{SpanKind, TraceId};
    use opentelemetry_sdk::trace::ShouldSample;

    let server = Server::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let l = rt.block_on(async {
        FleetLimiter::builder(server.url(), "sampler", load::limit())
            .sync_interval(load::INTERVAL)
            .build()
            .unwrap()
    });
    load::warm_up(std::slice::from_ref(&l), 4);
    let sampler = RateLimitingSampler::new(l.clone());
    let kept = (0..2 * N)
        .filter(|i| {
            let r = sampler.should_sample(
                None,
                TraceId::from(u128::from(*i) + 1),
                "root",
                &SpanKind::Server,
                &[],
                &[],
            );
            r.decision == opentelemetry_sdk::trace::SamplingDecision::RecordAndSample
        })
        .count();
    assert!(kept > 0 && kept <= 2 * N as usize, "kept {kept}");
    drop(rt);
    let stamped = l.acquire_stamped();
    if let Some(stamp) = stamped {
        assert!(l.window_of(stamp).is_some());
    }
}

/// `count_in_window` (what the sampler's stats report as a fleet rule's window fill) is
/// what this replica spent in the current fleet window: five more admissions in one
/// window raise it by five. (A snapshot taken while the worker tops the lease up may
/// be off by that top-up, so the check is retried until one clean measurement.)
#[test]
fn count_in_window_is_what_this_replica_spent_in_the_window() {
    let server = Server::start();
    let fleet = load::fleet(&[server.url()], "count", 1);
    let l = &fleet[0];
    assert_eq!(l.count_in_window(), None, "no fleet clock yet");
    load::warm_up(&fleet, 4);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while !seen.contains(&5) && Instant::now() < deadline {
        let window = l.current_window().expect("the clock is synced");
        let before = l.count_in_window().expect("the clock is synced");
        let mut spent = 0;
        while spent < 5 && l.current_window() == Some(window) {
            match l.acquire_window() {
                Some(w) if w == window => spent += 1,
                Some(_) => break,
                None => thread::sleep(Duration::from_millis(1)),
            }
        }
        let after = l.count_in_window().expect("the clock is synced");
        if spent == 5 && l.current_window() == Some(window) {
            seen.push(after.wrapping_sub(before));
        }
    }
    assert!(
        seen.contains(&5),
        "five admissions never raised it by five: {seen:?}"
    );
}

/// Replicas of one rule with different sync intervals heartbeat in different replica
/// groups: each sees the other as a member (its share counted), and one that stops is
/// forgotten after its own prune age, its group's live clock moved by the other's
/// calls.
#[test]
fn replicas_of_one_rule_with_different_intervals_see_each_other() {
    let server = Server::start();
    let replica = |id: &str, interval: Duration| {
        FleetLimiter::builder(server.url(), "mixed", load::limit())
            .sync_interval(interval)
            .instance_id(id)
            .build()
            .unwrap()
    };
    let fast = replica("fast", load::INTERVAL);
    let slow = replica("slow", load::INTERVAL * 2);
    load::warm_up(&[fast.clone(), slow.clone()], 2);
    assert_eq!(fast.stats().instances, 2, "{:?}", fast.stats());
    assert_eq!(slow.stats().instances, 2, "{:?}", slow.stats());
    drop(slow);
    // The slow one's prune age is 20 of its intervals, of live clock.
    let deadline = Instant::now() + load::INTERVAL * 2 * 20 * 5;
    while fast.stats().instances != 1 {
        assert!(
            Instant::now() < deadline,
            "never forgotten: {:?}",
            fast.stats()
        );
        thread::sleep(load::INTERVAL);
    }
}
