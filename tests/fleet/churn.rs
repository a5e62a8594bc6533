//! Replica churn (issue 18, item 6): demo processes on one fleet key, 3 → 6 → 4, the
//! two leaving killed with SIGKILL mid-window. The sum of what every process kept per
//! fleet window stays at N or under throughout.
//!
//! A killed demo writes no summary: its counts are read from the window lines it
//! printed as it went (each printed once the window's counts are final, 50 ms after the
//! window's close). Each is killed right after it printed one, so only what it kept in
//! the first instants of the window it died in goes uncounted. Time bounds are hang
//! guards, not speed claims.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::demo::demo_run::{spawn_demo, RunningDemo};
use crate::demo::{
    assert_capped, demo_args, parse, parse_killed, summed, unix_ms, wait_for_clients, DemoRun,
    HANG_GUARD,
};
use crate::server::Server;

/// A demo and the window lines it has printed so far.
struct Replica {
    demo: RunningDemo,
    lines: Arc<AtomicU64>,
}

/// Starts `count` demos on `key` for `duration`, each offering 1000 traces per second
/// (500 per window, ten times N).
fn start(url: &str, key: &str, duration: &str, count: usize) -> Vec<Replica> {
    let args = demo_args(url, key, duration, "1000");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (0..count)
        .map(|_| {
            let lines = Arc::new(AtomicU64::new(0));
            let seen = lines.clone();
            let demo = spawn_demo(&args, &[], move |line| {
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
    let mut first = start(&url, "demo-churn", "14s", 3);
    wait_for_clients(&server, 3);
    thread::sleep(Duration::from_secs(3));
    let mut added = start(&url, "demo-churn", "9s", 3);
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
    let after: u64 = total.range(killed_ms..).map(|(_, n)| n).sum();
    assert!(
        after > 0,
        "the four left kept nothing after the kills: {total:?}"
    );
}
