//! The demo in fleet mode: three demo processes share one fleet limit through a real
//! Redis, and the sum of their `per_window` maps (keyed by the fleet's windows) stays
//! under it, through Redis killed and restarted empty too, and through one of them cut
//! off from Redis for 10 s (`churn.rs` adds and kills demos mid-run).
//!
//! Each process offers a paced 2000 traces per second (1000 per 500 ms window, twenty
//! times the fleet's 50), enough to saturate the fleet without starving the other fleet
//! tests of CPU. Time bounds are hang guards, not speed claims.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Output;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::proxy::Proxy;
use crate::server::Server;

#[path = "../support/demo_run.rs"]
pub(crate) mod demo_run;

use demo_run::{run_demo, stderr, summary};

/// The fleet's limit per window.
pub(crate) const N: u64 = 50;
/// The window, in Unix milliseconds.
const WINDOW_MS: u64 = 500;
/// Demo processes sharing the limit.
const PROCESSES: usize = 3;
/// Far above a run of a few seconds; only a hang gets near it.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(40);

/// What one demo process reported.
pub(crate) struct DemoRun {
    /// Kept traces per fleet window start (Unix ms).
    pub(crate) per_window: BTreeMap<u64, u64>,
    /// Windows wholly inside this process's run in which it alone offered more than N.
    pub(crate) saturated: BTreeSet<u64>,
    pub(crate) summary: Value,
    /// The start (Unix ms) of the demo's window 0, from its window lines: its windows
    /// are aligned on multiples of the window in Unix time (`examples/demo/windows.rs`).
    pub(crate) origin_ms: Option<u64>,
}

/// Runs [`PROCESSES`] demos at once against `redis` for `duration`, calling `during` on
/// this thread meanwhile.
fn run_fleet(redis: &str, key: &str, duration: &str, during: impl FnOnce()) -> Vec<DemoRun> {
    run_fleet_at(&[redis; PROCESSES], key, duration, during)
}

/// [`run_fleet`], demo `i` reaching Redis at `urls[i]`.
fn run_fleet_at(
    urls: &[&str; PROCESSES],
    key: &str,
    duration: &str,
    during: impl FnOnce(),
) -> Vec<DemoRun> {
    run_fleet_with(urls, &[], key, duration, during)
}

/// [`run_fleet_at`], each demo also given `extra` arguments.
pub(crate) fn run_fleet_with(
    urls: &[&str; PROCESSES],
    extra: &[&str],
    key: &str,
    duration: &str,
    during: impl FnOnce(),
) -> Vec<DemoRun> {
    let paths: Vec<PathBuf> = (0..PROCESSES).map(|i| fresh_stamps_path(key, i)).collect();
    let demos: Vec<_> = urls
        .iter()
        .zip(&paths)
        .map(|(url, path)| {
            let mut args = demo_args(url, key, duration, "2000");
            args.extend(extra.iter().map(|a| a.to_string()));
            let path = path.clone();
            thread::spawn(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let stamps = path.to_str().expect("a UTF-8 path");
                run_demo(&args, &[("DEMO_STAMPS", stamps)], HANG_GUARD)
            })
        })
        .collect();
    during();
    let runs: Vec<DemoRun> = demos
        .into_iter()
        .map(|h| parse(&h.join().expect("demo thread")))
        .collect();
    let stamped: Vec<_> = paths
        .into_iter()
        .zip(&runs)
        .map(|(p, r)| (p, r.origin_ms))
        .collect();
    judge_stamps(&stamped, key);
    runs
}

/// Half a demo's call bound (its response and connect timeouts, 62.5 ms each for a
/// 500 ms window), plus 5 ms of clock drift: how far the demo's window edges may be
/// from Redis `TIME`'s.
const DEMO_EDGE_NS: u64 = 68_000_000;

/// The file for the stamps of demo `i` of the test on `key` (`DEMO_STAMPS`).
pub(crate) fn stamps_path(key: &str, i: usize) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("stamps-{key}-{i}-{}", std::process::id()))
}

/// [`stamps_path`], emptied for a new demo.
pub(crate) fn fresh_stamps_path(key: &str, i: usize) -> PathBuf {
    let path = stamps_path(key, i);
    let _ = std::fs::remove_file(&path);
    path
}

/// Judges the demos by what they really kept: every kept root each exported (a killed
/// one's to its last), from their stamp files (`<start> <end> <window k>`, Unix ns
/// around the admission, and the demo's window, `origin_ms` + k windows in Unix ms). Each admission's window holds its real time, give or take the
/// demo's edge error; and counted by these stamps, no window keeps more than N (so every
/// Redis `TIME` window keeps at most N apart from admissions within the edge error of
/// its edges). Returns the kept roots per window (Unix ms).
pub(crate) fn judge_stamps(demos: &[(PathBuf, Option<u64>)], what: &str) -> BTreeMap<u64, u64> {
    let mut per_window = BTreeMap::new();
    let mut real = BTreeMap::<u64, u64>::new();
    let window_ns = WINDOW_MS * 1_000_000;
    for (path, origin_ms) in demos {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.is_empty() {
            continue;
        }
        let origin_ms = origin_ms.unwrap_or_else(|| panic!("{what}: stamps but no window line"));
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let mut next = || -> u64 {
                let word = words
                    .next()
                    .unwrap_or_else(|| panic!("short line {line:?}"));
                word.parse()
                    .unwrap_or_else(|_| panic!("bad stamp {line:?}"))
            };
            let (start, end, k) = (next(), next(), next());
            let window_ms = origin_ms + k * WINDOW_MS;
            let (from, to) = (window_ms * 1_000_000, window_ms * 1_000_000 + window_ns);
            assert!(
                end + DEMO_EDGE_NS >= from && start < to + DEMO_EDGE_NS,
                "{what}: kept in window @{window_ms} but admitted within [{start}, {end}] ns"
            );
            *per_window.entry(window_ms).or_default() += 1;
            *real.entry(start / window_ns * WINDOW_MS).or_default() += 1;
        }
        let _ = std::fs::remove_file(path);
    }
    for (window, kept) in &per_window {
        assert!(
            *kept <= N,
            "{what}: window @{window} kept {kept} > N = {N}, by the stamps"
        );
    }
    println!(
        "{what}: by the stamps, per window {:?}; per Redis TIME window {:?}",
        per_window.values().collect::<Vec<_>>(),
        real.values().collect::<Vec<_>>()
    );
    per_window
}

/// A fleet demo's arguments: `rate` traces per second on two threads, against the
/// fleet's limit of N per 500 ms window.
pub(crate) fn demo_args(redis: &str, key: &str, duration: &str, rate: &str) -> Vec<String> {
    [
        "--redis",
        redis,
        "--redis-key",
        key,
        "--limit",
        "50",
        "--window",
        "500ms",
        "--threads",
        "2",
        "--rate",
        rate,
        "--duration",
        duration,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The summary's `per_window`, and the saturated windows from the window lines.
pub(crate) fn parse(output: &Output) -> DemoRun {
    let err = stderr(output);
    assert!(output.status.success(), "the demo failed: {err}");
    let summary = summary(output);
    let per_window = summary["per_window"]
        .as_object()
        .expect("per_window is an object")
        .iter()
        .map(|(start, kept)| {
            let start = start.parse().expect("keys are Unix milliseconds");
            (start, kept.as_u64().expect("counts are whole numbers"))
        })
        .collect();
    DemoRun {
        per_window,
        saturated: saturated(&err),
        summary,
        origin_ms: origin_ms(&err),
    }
}

/// What a demo killed mid-run printed: its `per_window` from the window lines (the
/// summary's counts, printed as each window's counts are final), no summary.
pub(crate) fn parse_killed(output: &Output) -> DemoRun {
    let err = stderr(output);
    DemoRun {
        per_window: window_lines(&err)
            .map(|(start, _, exported, _)| (start, exported))
            .collect(),
        saturated: saturated(&err),
        summary: Value::Null,
        origin_ms: origin_ms(&err),
    }
}

/// The start (Unix ms) of the demo's window 0, from a window line (`window K @MS`).
fn origin_ms(err: &str) -> Option<u64> {
    err.lines().find_map(|l| {
        let rest = l.strip_prefix("window ")?;
        let (k, rest) = rest.split_once(" @")?;
        let (ms, _) = rest.split_once(':')?;
        let (k, ms): (u64, u64) = (k.parse().ok()?, ms.parse().ok()?);
        ms.checked_sub(k * WINDOW_MS)
    })
}

/// Windows wholly inside the run in which this process alone offered more than N.
fn saturated(err: &str) -> BTreeSet<u64> {
    window_lines(err)
        .filter(|(_, offered, _, whole)| *whole && *offered > N)
        .map(|(start, ..)| start)
        .collect()
}

/// The window lines on stderr (`window K @MS: offered O kept K exported E`, marked when
/// partial): start (Unix ms), offered, exported, and whether the window is whole.
fn window_lines(err: &str) -> impl Iterator<Item = (u64, u64, u64, bool)> + '_ {
    err.lines().filter_map(|l| {
        let rest = l.strip_prefix("window ")?;
        let (_, rest) = rest.split_once(" @")?;
        let (start, rest) = rest.split_once(": offered ")?;
        let mut words = rest.split_whitespace();
        let offered = words.next()?.parse().ok()?;
        let exported = words.nth(3)?.parse().ok()?;
        Some((start.parse().ok()?, offered, exported, !l.ends_with(')')))
    })
}

/// Kept traces per fleet window, summed over the processes.
pub(crate) fn summed(runs: &[DemoRun]) -> BTreeMap<u64, u64> {
    let mut total = BTreeMap::new();
    for run in runs {
        for (start, kept) in &run.per_window {
            *total.entry(*start).or_default() += kept;
        }
    }
    total
}

/// Asserts that no fleet window kept more than N in total; returns the largest total.
pub(crate) fn assert_capped(total: &BTreeMap<u64, u64>, runs: &[DemoRun], what: &str) -> u64 {
    for (start, kept) in total {
        let each: Vec<u64> = runs
            .iter()
            .map(|r| r.per_window.get(start).copied().unwrap_or(0))
            .collect();
        assert!(
            *kept <= N,
            "{what}: fleet window @{start} kept {kept} > N = {N} (per process {each:?})"
        );
    }
    total.values().copied().max().unwrap_or(0)
}

/// Waits until `clients` connections (the demos' fleet limiters) are open on `server`.
pub(crate) fn wait_for_clients(server: &Server, clients: usize) {
    // The hang guard counts from a built demo: the first test to start one builds it
    // (a minute or more on a loaded machine), and the others wait for that meanwhile.
    let _ = demo_run::demo_binary();
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        // `redis-cli` itself is one of the connections.
        let info = server.cli(&["INFO", "clients"]);
        let connected = info
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if connected > clients {
            return;
        }
        assert!(Instant::now() < deadline, "the demos never reached Redis");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn three_demos_share_the_fleet_limit_per_window() {
    let server = Server::start();
    let runs = run_fleet(&server.url(), "demo-share", "4s", || {});
    assert_shared(&runs, "demo-share");
}

/// Three demos' runs on `key`: under N in every fleet window, at least 90 % of N kept
/// in the windows all three saturated, every demo saw the three and never fell back.
pub(crate) fn assert_shared(runs: &[DemoRun], key: &str) {
    let total = summed(runs);
    let max = assert_capped(&total, runs, "three demos");
    // A Redis grants nothing in the first two fleet windows it sees (their accounting
    // might have been lost to a restart); the demos' first calls fall in or before the
    // earliest window any of them reports.
    let first = total.keys().next().copied().expect("some windows");
    let all_saturated: Vec<u64> = runs[0]
        .saturated
        .iter()
        .filter(|w| **w >= first + 2 * WINDOW_MS)
        .filter(|w| runs.iter().all(|r| r.saturated.contains(w)))
        .copied()
        .collect();
    let kept: Vec<u64> = all_saturated.iter().map(|w| total[w]).collect();
    println!("three demos: summed per window {total:?}; saturated by all {kept:?}, max {max}");
    assert!(
        kept.len() >= 3,
        "too few windows saturated by all three: {all_saturated:?} of {total:?}"
    );
    for (w, n) in all_saturated.iter().zip(&kept) {
        assert!(
            n * 10 >= N * 9,
            "fleet window @{w}, saturated by all three, kept {n} < 90 % of {N}: {total:?}"
        );
    }
    for run in runs {
        let s = &run.summary;
        assert_eq!(s["algorithm"], "fleet", "{s}");
        assert_eq!(s["redis_key"], key, "{s}");
        assert!(s["redis_calls"].as_u64() > Some(0), "{s}");
        assert_eq!(s["instances_seen"].as_u64(), Some(PROCESSES as u64), "{s}");
        assert_eq!(s["fallback_seen"], false, "{s}");
    }
}

/// Three demos on `key`; once they have all reached Redis and run `before_kill`, the
/// server is killed, left down long enough for every demo to fall back to its share (3
/// sync intervals, the sync interval being a quarter of the window), and restarted
/// empty on the same port. Returns the summed kept traces per fleet window, after
/// checking that each demo saw Redis fail and fell back to its share, or (`settled`
/// false: killed before the demos had a settled view of the fleet) did not.
fn killed_and_restarted(
    key: &str,
    before_kill: Duration,
    duration: &str,
    settled: bool,
) -> BTreeMap<u64, u64> {
    let mut server = Server::start();
    let url = server.url();
    let runs = run_fleet(&url, key, duration, || {
        wait_for_clients(&server, PROCESSES);
        thread::sleep(before_kill);
        server.kill();
        thread::sleep(Duration::from_millis(1500));
        server.restart_empty();
    });
    let total = summed(&runs);
    for run in &runs {
        println!("{key}: one demo {:?}", run.per_window);
    }
    for run in &runs {
        let s = &run.summary;
        assert!(s["lease_errors"].as_u64() > Some(0), "Redis was down: {s}");
        assert_eq!(s["fallback_seen"], settled, "{s}");
    }
    let max = assert_capped(&total, &runs, key);
    println!("{key}: summed per window {total:?}, max {max}");
    total
}

/// Killed once the fleet is past the windows a fresh Redis treats as young (since its
/// first window, recovery time plus two: 3 windows here), as the library's own fault
/// tests do after their warm-up.
#[test]
fn redis_killed_and_restarted_empty_mid_run_keeps_the_sum_under_n() {
    killed_and_restarted("demo-restart", Duration::from_millis(2500), "6s", true);
}

/// Killed while the fresh Redis is still young: the fleet sizes the demos saw at their
/// first calls disagree (1, 2 and 3 for demos that reached Redis one after the other).
/// Before the fix, their fallback shares added up to N + N/2 + N/3 (92 of 50 in each
/// fallback window); now an instance without a settled view of the fleet spends no
/// share at all.
#[test]
fn redis_killed_while_young_keeps_the_sum_under_n() {
    killed_and_restarted("demo-young", Duration::from_millis(500), "5s", false);
}

#[test]
fn a_wrong_password_is_named_at_once() {
    // On main the demo waited 5 s and said "no answer from Redis", for a failure that
    // waiting never mends.
    let server = Server::start_with(crate::server::free_port(), &["--requirepass", "s3cret"]);
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port);
    // Built first: the time asserted is the demo's, not its build's.
    demo_run::demo_binary();
    let started = Instant::now();
    let output = run_demo(&["--redis", &url, "--duration", "1s"], &[], HANG_GUARD);
    let err = stderr(&output);
    assert!(!output.status.success(), "{err}");
    assert!(err.contains("refused authentication"), "{err}");
    assert!(!err.contains("wrong"), "the password is shown: {err}");
    assert!(started.elapsed() < HANG_GUARD, "{err}");
}

/// Issue 18's done-when: one of three demos reaches Redis through a proxy that is cut
/// both ways for 10 s mid-run (80 sync intervals: past the 19 in which it may spend its
/// fallback share, and past Redis forgetting it), then restored. The sum per fleet
/// window stays at N or under throughout, and the cut-off demo leases again after.
#[test]
fn three_demos_with_one_cut_off_for_ten_seconds_stay_under_n() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let (direct, behind) = (server.url(), proxy.url());
    let mut restored_ms = 0;
    let runs = run_fleet_at(&[&direct, &direct, &behind], "demo-cut", "17s", || {
        wait_for_clients(&server, PROCESSES);
        thread::sleep(Duration::from_millis(2500));
        proxy.freeze();
        thread::sleep(Duration::from_secs(10));
        proxy.thaw();
        restored_ms = unix_ms();
    });
    let total = summed(&runs);
    let max = assert_capped(&total, &runs, "one demo cut off");
    let cut = &runs[2];
    println!("one cut off: summed per window {total:?}, max {max}");
    println!("one cut off: the cut-off demo {:?}", cut.per_window);
    assert!(
        cut.summary["lease_errors"].as_u64() > Some(0),
        "its calls went unanswered for 10 s: {}",
        cut.summary
    );
    let after: u64 = cut.per_window.range(restored_ms..).map(|(_, n)| n).sum();
    assert!(
        after > 0,
        "the cut-off demo kept nothing after the proxy was restored at {restored_ms}: {:?}; its summary: {}",
        cut.per_window,
        cut.summary
    );
}

/// Now, in Unix milliseconds (the demos' window starts are in the same terms).
pub(crate) fn unix_ms() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    now.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
