//! A rolling deploy that changes a fleet rule's window (or `N`) under one key: demos of
//! the old shape replaced one by one by demos of the new, both shapes running while
//! the deploy lasts. Before, a window lengthened under a used key stopped the fleet
//! (the new version kept 0 in every window: the key's `since` was a window id in the
//! old window's units), and shapes that ran together each leased their own `N`.
//!
//! Counted by what each demo kept in each window of Redis `TIME` (its `per_window`),
//! windows of the shorter shape summed into the longer one's they nest in.

use std::collections::BTreeMap;
use std::process::Output;
use std::thread;
use std::time::Duration;

use otel_rate_sampler::{FleetLimiter, Limit, RateLimiter as _};

use crate::demo::demo_run::run_demo;
use crate::demo::{parse, DemoRun, HANG_GUARD};
use crate::logs;
use crate::pool::eventually;
use crate::server::Server;

/// The fleet's limit per window, for both shapes.
const N: u64 = 50;

/// A demo on `key` at N per `window`, offering 500 traces per second (ten times the
/// faster shape's N per window), for `duration`.
fn args(url: &str, key: &str, window: &str, duration: &str) -> Vec<String> {
    [
        "--redis",
        url,
        "--redis-key",
        key,
        "--limit",
        "50",
        "--window",
        window,
        "--threads",
        "2",
        "--rate",
        "500",
        "--duration",
        duration,
    ]
    .map(str::to_owned)
    .to_vec()
}

fn demo(url: &str, key: &str, window: &str, duration: &str) -> Output {
    let args = args(url, key, window, duration);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_demo(&args, &[], HANG_GUARD)
}

/// Three demos of window `old` on `key`, replaced one by one (each new one started as
/// an old one ends) by demos of window `new`, all new ones ending together.
fn rolling(key: &str, old: &str, new: &str) -> (Vec<DemoRun>, Vec<DemoRun>) {
    let server = Server::start();
    let url = server.url();
    let lanes: Vec<_> = [("3s", "12s"), ("5s", "10s"), ("7s", "8s")]
        .into_iter()
        .map(|(old_for, new_for)| {
            let (url, key, old, new) =
                (url.clone(), key.to_owned(), old.to_owned(), new.to_owned());
            thread::spawn(move || {
                let before = parse(&demo(&url, &key, &old, old_for));
                let after = parse(&demo(&url, &key, &new, new_for));
                (before, after)
            })
        })
        .collect();
    lanes
        .into_iter()
        .map(|lane| lane.join().expect("a lane of the deploy"))
        .unzip()
}

/// Kept per window of `long_ms` (window starts in Unix ms), over `runs`.
fn per_window_of(runs: &[&DemoRun], long_ms: u64) -> BTreeMap<u64, u64> {
    let mut sums = BTreeMap::new();
    for run in runs {
        for (start, kept) in &run.per_window {
            *sums.entry(start / long_ms * long_ms).or_default() += kept;
        }
    }
    sums
}

/// The end (Unix ms) of the last window any of `runs` reported.
fn last_end(runs: &[DemoRun], window_ms: u64) -> u64 {
    let last = runs.iter().filter_map(|r| r.per_window.keys().last());
    last.max().copied().expect("windows") + window_ms
}

/// While both shapes run, a window of the longer shape keeps at most what the faster
/// alone allows in it; the new demos keep at most N per window of theirs throughout.
fn assert_deploy_capped(old: &[DemoRun], new: &[DemoRun], old_ms: u64, new_ms: u64) {
    let long = old_ms.max(new_ms);
    let faster = N * long / old_ms.min(new_ms);
    let all: Vec<&DemoRun> = old.iter().chain(new).collect();
    let mixed = per_window_of(&all, long);
    println!("deploy {old_ms} ms -> {new_ms} ms: per {long} ms {mixed:?}");
    for (start, kept) in &mixed {
        assert!(
            *kept <= faster,
            "window @{start} of {long} ms kept {kept} > {faster}: {mixed:?}"
        );
    }
    let new_only: Vec<&DemoRun> = new.iter().collect();
    let replaced = per_window_of(&new_only, new_ms);
    println!("deploy {old_ms} ms -> {new_ms} ms: new demos per window {replaced:?}");
    for (start, kept) in &replaced {
        assert!(
            *kept <= N,
            "new window @{start} kept {kept} > {N}: {replaced:?}"
        );
    }
}

/// The done-when: 3 demos at 50 per 500 ms replaced one by one by demos at 50 per 2 s:
/// ≤ 200 per 2 s while the shapes mix, and once all are replaced ≤ 50 per window and
/// ≥ 45 from the third whole window. Before, the new demos kept 0 in every window.
#[test]
fn a_rolling_deploy_lengthening_the_window_never_stops_the_fleet() {
    let (old, new) = rolling("deploy-longer", "500ms", "2s");
    assert_deploy_capped(&old, &new, 500, 2000);
    let replaced = last_end(&old, 500);
    let third = replaced.div_ceil(2000) * 2000 + 2 * 2000;
    let totals = per_window_of(&new.iter().collect::<Vec<_>>(), 2000);
    let judged: Vec<(u64, u64)> = totals
        .iter()
        .filter(|(start, _)| **start >= third && new.iter().all(|r| r.saturated.contains(start)))
        .map(|(s, k)| (*s, *k))
        .collect();
    assert!(
        !judged.is_empty(),
        "no whole window saturated by all after {third}: {totals:?}"
    );
    for (start, kept) in judged {
        assert!(
            kept * 10 >= N * 9,
            "window @{start} kept {kept} < 90 % of {N}: {totals:?}"
        );
    }
    assert!(
        new[0].summary["shape_conflicts"].as_u64() > Some(0),
        "the first new demo ran beside old ones: {}",
        new[0].summary
    );
}

/// The reverse: 2 s demos replaced by 500 ms ones: ≤ 200 per 2 s while mixed, ≤ 50 per
/// 500 ms window, and the new demos lease once the old have stopped.
#[test]
fn a_rolling_deploy_shortening_the_window_never_stops_the_fleet() {
    let (old, new) = rolling("deploy-shorter", "2s", "500ms");
    assert_deploy_capped(&old, &new, 2000, 500);
    let replaced = last_end(&old, 2000);
    let after: u64 = new
        .iter()
        .flat_map(|r| r.per_window.range(replaced..).map(|(_, k)| k))
        .sum();
    assert!(
        after > 0,
        "the new demos kept nothing after the old ones stopped"
    );
}

/// A single demo at 50 per 2 s started on a key a 500 ms demo used a moment before:
/// ≥ 45 per window from its third whole window (before: 0 in all of them).
#[test]
fn a_longer_window_on_a_key_used_a_moment_before_leases_from_its_third_window() {
    let server = Server::start();
    let url = server.url();
    parse(&demo(&url, "deploy-after", "500ms", "2s"));
    let run = parse(&demo(&url, "deploy-after", "2s", "10s"));
    let whole: Vec<(u64, u64)> = run
        .saturated
        .iter()
        .map(|w| (*w, run.per_window[w]))
        .collect();
    assert!(whole.len() >= 4, "{:?}", run.per_window);
    for (start, kept) in &whole[2..] {
        assert!(
            *kept * 10 >= N * 9 && *kept <= N,
            "window @{start} kept {kept}: {:?}",
            run.per_window
        );
    }
}

/// In one process: a limiter refused because another shape leases its key counts it
/// (`FleetStats::shape_conflicts`, the metric's source), says so in at most one log
/// line per sync interval, admits nothing meanwhile, and takes the key over once the
/// other shape has stopped.
#[test]
fn a_limiter_refused_for_its_shape_says_so_and_takes_over_later() {
    logs::capture();
    let server = Server::start();
    let build = |window_ms: u64, id: &str| {
        let limit = Limit::per_window(10, Duration::from_millis(window_ms)).expect("limit");
        FleetLimiter::builder(server.url(), "deploy-refused", limit)
            .sync_interval(Duration::from_millis(50))
            .instance_id(id)
            .build()
            .expect("build")
    };
    let old = build(200, "old");
    eventually("the old shape leases", || old.try_acquire());
    let built = std::time::Instant::now();
    let new = build(400, "new");
    eventually("the new shape is refused", || {
        new.stats().shape_conflicts > 2
    });
    assert!(!new.try_acquire(), "refused, yet admitted");
    thread::sleep(Duration::from_millis(500));
    let lines = logs::containing("another limit or window").len() as u128;
    let intervals = built.elapsed().as_millis() / 50 + 1;
    assert!(
        lines <= intervals,
        "{lines} log lines in {intervals} intervals"
    );
    assert!(lines > 0, "no log line");
    assert!(
        !new.stats().fallback_active,
        "a refused limiter has no share"
    );
    drop(old);
    eventually("the new shape took over", || new.try_acquire());
}
