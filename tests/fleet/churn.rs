//! Replica churn (issue 18, item 6): demo processes on one fleet key, 3 → 6 → 4, the
//! two leaving killed with SIGKILL mid-window. The sum of what every process kept per
//! fleet window stays at N or under throughout.
//!
//! A killed demo writes no summary: its counts are read from the window lines it
//! printed as it went (each printed once the window's counts are final, 50 ms after the
//! window's close), and again from the stamps every demo writes per kept trace as it
//! exports it (`DEMO_STAMPS`), which count a killed demo to its last kept trace and are
//! checked against Redis `TIME` (`demo::judge_stamps`). Time bounds are hang
//! guards, not speed claims.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::demo::demo_run::{spawn_demo, RunningDemo};
use crate::demo::{
    assert_capped, demo_args, fresh_stamps_path, judge_stamps, parse, parse_killed, stamps_path,
    summed, unix_ms, wait_for_clients, DemoRun, HANG_GUARD,
};
use crate::server::Server;

/// A demo and the window lines it has printed so far.
struct Replica {
    demo: RunningDemo,
    lines: Arc<AtomicU64>,
}

/// Starts `count` demos on `key` for `duration`, each offering 1000 traces per second
/// (500 per window, ten times N).
/// Demo `i` writes its stamps to `stamps_path(key, first + i)`.
fn start(url: &str, key: &str, duration: &str, count: usize, first: usize) -> Vec<Replica> {
    let args = demo_args(url, key, duration, "1000");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (first..first + count)
        .map(|i| {
            let lines = Arc::new(AtomicU64::new(0));
            let seen = lines.clone();
            let path = fresh_stamps_path(key, i);
            let stamps = [("DEMO_STAMPS", path.to_str().expect("a UTF-8 path"))];
            let demo = spawn_demo(&args, &stamps, move |line| {
                if line.starts_with("window ") {
                    // Relaxed: a count polled by the test, ordering nothing else.
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            });
            Replica { demo, lines }
        })
        .collect()
}

/// Kills `replica` with SIGKILL right after its next window line.
fn kill_after_a_line(replica: Replica) -> DemoRun {
    let printed = replica.lines.load(Ordering::Relaxed);
    let deadline = Instant::now() + HANG_GUARD;
    while replica.lines.load(Ordering::Relaxed) == printed {
        assert!(Instant::now() < deadline, "the demo printed no window line");
        thread::sleep(Duration::from_millis(1));
    }
    let output = replica.demo.kill();
    assert!(
        !output.status.success(),
        "killed, not ended: {}",
        output.status
    );
    parse_killed(&output)
}

#[test]
fn replica_churn_three_six_four_with_kill_9_stays_under_n() {
    let server = Server::start();
    let url = server.url();
    // Runs long enough that the kills below find every demo still running on a loaded
    // machine, where starting six demos and seeing them connect may take seconds. With
    // 14 s and 9 s the first kill once waited in vain for a window line under two CPU
    // hogs; the likely cause (not confirmed) is that demo having ended already.
    let mut first = start(&url, "demo-churn", "20s", 3, 0);
    wait_for_clients(&server, 3);
    thread::sleep(Duration::from_secs(3));
    let mut added = start(&url, "demo-churn", "12s", 3, 3);
    wait_for_clients(&server, 6);
    thread::sleep(Duration::from_secs(3));
    // One of the first three and one of those added.
    let mut runs = vec![
        kill_after_a_line(first.remove(0)),
        kill_after_a_line(added.remove(0)),
    ];
    let killed_ms = unix_ms();
    let survivors: Vec<DemoRun> = first
        .into_iter()
        .chain(added)
        .map(|r| parse(&r.demo.wait(HANG_GUARD)))
        .collect();
    for run in &runs {
        let kept: u64 = run.per_window.values().sum();
        assert!(
            kept > 0,
            "a killed demo printed nothing kept: {:?}",
            run.per_window
        );
    }
    for run in &survivors {
        let s = &run.summary;
        // Each renewed its registration while all six were up. (Whether one fell back
        // is not checked: a worker starved of CPU for 3 sync intervals may, and stays
        // within the bound when it does.)
        assert_eq!(s["instances_seen"].as_u64(), Some(6), "{s}");
    }
    runs.extend(survivors);
    let total = summed(&runs);
    let max = assert_capped(&total, &runs, "churn");
    println!("churn 3 → 6 → 4: summed per window {total:?}, max {max}");
    // Judged again by what every demo exported, the killed ones to their last kept
    // trace (their window lines stop at the last window they closed).
    // Started as 0, 1, 2 then 3, 4, 5; killed 0 and 3, the survivors in order.
    let order = [0, 3, 1, 2, 4, 5];
    let demos: Vec<_> = order
        .iter()
        .zip(&runs)
        .map(|(i, r)| (stamps_path("demo-churn", *i), r.origin_ms))
        .collect();
    let stamped = judge_stamps(&demos, "churn");
    for (window, kept) in &total {
        let by_stamps = stamped.get(window).copied().unwrap_or(0);
        assert!(
            by_stamps >= *kept,
            "window @{window}: stamps {by_stamps} < lines {kept}"
        );
    }
    let after: u64 = total.range(killed_ms..).map(|(_, n)| n).sum();
    assert!(
        after > 0,
        "the four left kept nothing after the kills: {total:?}"
    );
}
