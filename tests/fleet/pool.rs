//! One worker per Redis target: the limiters of a process on one Redis URL share one
//! thread and one connection, whatever their number; a limiter dropped stops its own
//! calls, the last one dropped stops the worker and closes its connection.

use std::thread;
use std::time::{Duration, Instant};

use otel_rate_sampler::{FleetLimiter, Limit};

use crate::load::{self, INTERVAL};
use crate::many_rules::script_calls;
use crate::proxy::Proxy;
use crate::server::Server;

/// A limiter of its own rule `key` on `url`.
fn rule(url: String, key: &str) -> FleetLimiter {
    FleetLimiter::builder(url, key, load::limit())
        .sync_interval(INTERVAL)
        .response_timeout(INTERVAL)
        .instance_id("pooled")
        .build()
        .expect("build")
}

/// Waits (at most 10 s) until `pred` holds.
pub(crate) fn eventually(what: &str, pred: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pred() {
        assert!(Instant::now() < deadline, "never: {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// The fleet time of `key`'s last call (every call moves its rule's fleet clock).
fn last_call(server: &Server, key: &str) -> String {
    server.cli(&["HGET", &format!("{{otel-rate:{key}}}:meta"), "high"])
}

/// Before, each limiter had its own thread and connection: 20 rules meant 20 of each.
#[test]
fn limiters_on_one_redis_share_one_worker_and_one_connection() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let keys: Vec<String> = (0..20).map(|i| format!("shared{i}")).collect();
    let mut rules: Vec<FleetLimiter> = keys.iter().map(|k| rule(server.url(), k)).collect();
    // Another URL (here a proxy to the same server) is another target: its own worker.
    let apart = rule(proxy.url(), "apart");
    load::warm_up(&rules, 1);
    load::warm_up(std::slice::from_ref(&apart), 0);
    for l in &rules {
        let s = l.stats();
        assert_eq!(s.worker_rules, 20, "{s:?}");
        assert!(s.last_failure.is_none() && !s.fallback_active, "{s:?}");
    }
    assert_eq!(apart.stats().worker_rules, 1);
    // The 20 rules' connection and the proxy's (the proxy connects on the apart
    // worker's behalf).
    assert_eq!(server.clients(), 2, "one connection per worker");
    // Every rule's calls ride the same rounds, and the lease calls of a round are one
    // call of the several-rule script: Redis runs one script per round, not per rule.
    let calls = || rules.iter().map(|l| l.stats().redis_calls).sum::<u64>();
    let rounds = || rules[0].stats().worker_round_trips;
    let _ = server.cli(&["CONFIG", "RESETSTAT"]);
    let (calls_before, rounds_before) = (calls(), rounds());
    thread::sleep(INTERVAL * 6);
    let scripts = script_calls(&server);
    let (calls, rounds) = (calls() - calls_before, rounds() - rounds_before);
    assert!(calls >= 20 * 4, "{calls} calls in 6 intervals");
    assert!(
        rounds * 5 <= calls,
        "{rounds} round trips for {calls} calls"
    );
    // At most one script call per round (a round may be counted on either side of
    // the reset), and the clock samples of the rules whose mapping aged.
    assert!(
        scripts <= rounds + 2 + 20,
        "{scripts} script calls, {rounds} rounds"
    );
    assert!(
        scripts * 4 <= calls,
        "{scripts} script calls for {calls} calls"
    );

    let last = rules.pop().expect("20 rules");
    drop(rules);
    // A round running now may hold a dropped rule until it ends.
    eventually("the dropped rules leave the worker", || {
        last.stats().worker_rules == 1
    });
    // The dropped rules' calls stop; the remaining rule's go on.
    thread::sleep(INTERVAL * 2);
    let (dropped, kept) = (last_call(&server, &keys[0]), last_call(&server, &keys[19]));
    thread::sleep(INTERVAL * 4);
    assert_eq!(
        dropped,
        last_call(&server, &keys[0]),
        "a dropped rule still calls"
    );
    assert_ne!(
        kept,
        last_call(&server, &keys[19]),
        "the remaining rule stopped"
    );

    // The last rule dropped stops the worker at once: its connection closes.
    drop(last);
    eventually("the worker's connection closes", || server.clients() == 1);
    drop(apart);
    eventually("the other worker's connection closes", || {
        server.clients() == 0
    });
    // A new limiter on the same URL starts a worker of its own.
    let again = rule(server.url(), "again");
    load::warm_up(std::slice::from_ref(&again), 0);
    assert_eq!(again.stats().worker_rules, 1);
    assert_eq!(server.clients(), 1);
}

/// `shutdown` stops one limiter's calls, not the worker the others share.
#[test]
fn shutdown_of_one_limiter_leaves_the_others_leasing() {
    let server = Server::start();
    let a = rule(server.url(), "shut-a");
    let b = rule(server.url(), "shut-b");
    load::warm_up(&[a.clone(), b.clone()], 1);
    a.shutdown();
    let (stopped, going) = (last_call(&server, "shut-a"), last_call(&server, "shut-b"));
    thread::sleep(INTERVAL * 4);
    assert_eq!(stopped, last_call(&server, "shut-a"));
    assert_ne!(going, last_call(&server, "shut-b"));
    // (No admission is asserted: a new Redis grants nothing in its first windows.)
    let s = b.stats();
    assert!(s.last_failure.is_none() && s.worker_rules == 2, "{s:?}");
}

/// The worker is the Redis the URL connects to, however it is spelt; other credentials
/// or another database are another target.
#[test]
fn urls_spelt_differently_for_one_redis_share_a_worker() {
    let server = Server::start();
    let url = server.url();
    let a = rule(url.clone(), "spelt-a");
    let b = rule(format!("{url}/0"), "spelt-b");
    let other_db = rule(format!("{url}/1"), "spelt-c");
    assert_eq!(a.stats().worker_rules, 2);
    assert_eq!(b.stats().worker_rules, 2);
    assert_eq!(other_db.stats().worker_rules, 1);
}

/// One worker per Redis target whatever the windows: a rule's default timeouts follow
/// its window, and the worker's key held the connect timeout, so rules of a rule file
/// with different windows (or explicit timeouts) got a thread and a connection each.
/// Each still lease, its calls bounded by its own timeouts.
#[test]
fn limiters_of_any_windows_and_timeouts_share_one_worker() {
    let server = Server::start();
    let url = server.url();
    let of_window = |key: &str, window_ms: u64| {
        let limit = Limit::per_window(10, Duration::from_millis(window_ms)).expect("limit");
        FleetLimiter::builder(url.clone(), key, limit)
            .instance_id("pooled")
            .build()
            .expect("build")
    };
    let short = of_window("window-200ms", 200);
    let long = of_window("window-2s", 2000);
    let explicit = FleetLimiter::builder(url.clone(), "timeout-c", load::limit())
        .sync_interval(INTERVAL)
        .response_timeout(INTERVAL)
        .connect_timeout(Duration::from_millis(700))
        .instance_id("pooled")
        .build()
        .expect("build");
    let all = [short, long, explicit];
    for l in &all {
        assert_eq!(l.stats().worker_rules, 3, "{:?}", l.stats());
    }
    eventually("every rule answered by Redis", || {
        all.iter().all(|l| {
            let s = l.stats();
            s.clock_synced && s.last_failure.is_none()
        })
    });
    assert_eq!(server.clients(), 1, "one connection for the three rules");
}

/// Two limiters of one rule in one process (default instance ids, one replica): the
/// replica's heartbeat keeps both members live, so one dropped leaves the rule's
/// members at once rather than counting in `k` for as long as the process lives.
#[test]
fn a_limiter_dropped_while_its_process_lives_leaves_its_rule() {
    let server = Server::start();
    let limiter = || {
        FleetLimiter::builder(server.url(), "leave", load::limit())
            .sync_interval(INTERVAL)
            .build()
            .expect("build")
    };
    let (kept, dropped) = (limiter(), limiter());
    load::warm_up(&[kept.clone(), dropped.clone()], 1);
    eventually("both members counted", || {
        kept.stats().instances == 2 && dropped.stats().instances == 2
    });
    drop(dropped);
    eventually("the dropped member left", || kept.stats().instances == 1);
}
