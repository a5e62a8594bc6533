//! Offered load over a fleet of limiters, counted per fleet window id.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use otel_rate_sampler::{Clock, FleetLimiter, Limit, RateLimiter};

/// Test timing: short windows so a run takes seconds.
pub(crate) const WINDOW: Duration = Duration::from_millis(250);
pub(crate) const INTERVAL: Duration = Duration::from_millis(50);
pub(crate) const N: u32 = 200;
/// The edge error of a replica of [`fleet`] (response and connect timeouts of one
/// interval each): half its call bound, plus 5 ms of clock drift.
pub(crate) const EDGE: Duration = Duration::from_millis(INTERVAL.as_millis() as u64 + 5);

/// The heartbeat Redis holds for `replica` (an instance id set by the test) among the
/// replicas of sync interval [`INTERVAL`] under the default prefix.
pub(crate) fn heartbeat(server: &crate::server::Server, replica: &str) -> String {
    let group = format!("{{otel-rate:replicas}}:{}:hb", INTERVAL.as_millis());
    server.cli(&["ZSCORE", &group, replica])
}

pub(crate) fn limit() -> Limit {
    Limit::per_window(N, WINDOW).unwrap()
}

/// `k` limiters on `urls`, sharing `key`, each with its own connection and thread.
pub(crate) fn fleet(urls: &[String], key: &str, k: usize) -> Vec<FleetLimiter> {
    (0..k)
        .map(|i| {
            FleetLimiter::builder(urls.to_vec(), key, limit())
                .sync_interval(INTERVAL)
                .response_timeout(INTERVAL)
                .instance_id(format!("{key}-{i}"))
                .build()
                .expect("build")
        })
        .collect()
}

/// Waits until every limiter has synced its clock and `windows` more windows passed.
pub(crate) fn warm_up<C: Clock>(fleet: &[FleetLimiter<C>], windows: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fleet.iter().all(|l| l.stats().clock_synced) {
        assert!(Instant::now() < deadline, "the fleet never reached Redis");
        thread::sleep(Duration::from_millis(5));
    }
    thread::sleep(WINDOW * windows);
}

/// Admissions per fleet window id, summed over the fleet.
pub(crate) type PerWindow = BTreeMap<u64, u64>;

/// Offers `per_window` calls per window in total (split evenly, paced every ms) to the
/// fleet for `run`, and on until `during` (run on the test thread meanwhile) returns: on
/// a loaded machine `during` may take longer than planned, and what it checks after its
/// fault needs the load still offered. Returns the admissions per window id and the
/// first and last window ids of the load.
pub(crate) fn drive<C: Clock>(
    fleet: &[FleetLimiter<C>],
    per_window: f64,
    run: Duration,
    during: impl FnOnce(),
) -> (PerWindow, u64, u64) {
    let (total, first, last, _) = drive_stamped(fleet, per_window, run, during);
    (total, first, last)
}

/// Now, in Unix nanoseconds: on loopback, the clock Redis `TIME` reads.
fn unix_nanos() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_nanos()).expect("before 2554")
}

/// One admission as it really happened: the window id the limiter counted it in, and
/// the real time (Unix ns) just before and just after the decision.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamp {
    pub(crate) window: u64,
    pub(crate) before: u64,
    pub(crate) after: u64,
}

/// [`drive`], judged by what really happened: every admission is stamped with the real
/// time around it (the clock Redis `TIME` reads, on loopback), and
///
/// * each one's window id must hold its real time, give or take `epsilon` (the design's
///   edge error: half the longest round trip a reply may take, the replica's call bound,
///   plus clock drift): a replica's word for its windows is checked against Redis
///   time, not taken;
/// * so, with at most N per window id, every Redis `TIME` window keeps at most N
///   admissions apart from those within `epsilon` of its edges; the counts per real
///   window are printed.
///
/// Only for fleets whose Redis time is the real one (no simulated shift of the rule's
/// clock).
pub(crate) fn drive_judged<C: Clock>(
    fleet: &[FleetLimiter<C>],
    per_window: f64,
    run: Duration,
    epsilon: Duration,
    during: impl FnOnce(),
) -> (PerWindow, u64, u64) {
    let (total, first, last, stamps) = drive_stamped(fleet, per_window, run, during);
    let w = u64::try_from(WINDOW.as_nanos()).unwrap();
    let eps = u64::try_from(epsilon.as_nanos()).unwrap();
    let mut real = PerWindow::new();
    for s in &stamps {
        let (start, end) = (s.window * w, (s.window + 1) * w);
        assert!(
            s.after + eps >= start && s.before < end + eps,
            "an admission counted in window {} ([{start}, {end}) ns) happened in \
             [{}, {}]: more than {epsilon:?} outside it",
            s.window,
            s.before,
            s.after
        );
        *real.entry(s.before / w).or_default() += 1;
        // Inside the window by more than epsilon: its window id is the real one.
        if s.before >= start + eps && s.after + eps < end {
            assert_eq!(s.before / w, s.window);
        }
    }
    let inner: Vec<u64> = (first + 1..last)
        .map(|w| real.get(&w).copied().unwrap_or(0))
        .collect();
    println!("per Redis TIME window (by real time): {inner:?}");
    (total, first, last)
}

/// [`drive`], with a [`Stamp`] of every admission.
fn drive_stamped<C: Clock>(
    fleet: &[FleetLimiter<C>],
    per_window: f64,
    run: Duration,
    during: impl FnOnce(),
) -> (PerWindow, u64, u64, Vec<Stamp>) {
    let rate_per_ns = per_window / fleet.len() as f64 / WINDOW.as_nanos() as f64;
    let first = fleet[0].current_window().expect("synced");
    let during_done = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = fleet
        .iter()
        .map(|l| {
            let l = l.clone();
            let during_done = Arc::clone(&during_done);
            thread::spawn(move || {
                let mut counts = PerWindow::new();
                let mut stamps = Vec::new();
                let start = Instant::now();
                let mut made = 0u64;
                // Relaxed: a stop flag; it publishes nothing (the counts come back
                // through `join`).
                while start.elapsed() < run || !during_done.load(Ordering::Relaxed) {
                    let due = (start.elapsed().as_nanos() as f64 * rate_per_ns) as u64;
                    while made < due {
                        made += 1;
                        let before = unix_nanos();
                        if let Some(window) = l.acquire_window() {
                            let after = unix_nanos();
                            *counts.entry(window).or_default() += 1;
                            stamps.push(Stamp {
                                window,
                                before,
                                after,
                            });
                        }
                    }
                    thread::sleep(Duration::from_millis(1));
                }
                (counts, stamps)
            })
        })
        .collect();
    {
        // Set when `during` returns or panics: a failed check must not leave the
        // load running for ever.
        let _done = Done(&during_done);
        during();
    }
    let mut total = PerWindow::new();
    let mut each = Vec::new();
    let mut stamps = Vec::new();
    for h in handles {
        let (counts, mine) = h.join().expect("load thread");
        stamps.extend(mine);
        for (w, n) in &counts {
            *total.entry(*w).or_default() += n;
        }
        each.push(counts);
    }
    // For a failure's diagnosis: who admitted what in a window over N.
    for (w, n) in &total {
        if *n > u64::from(N) {
            let per: Vec<u64> = each
                .iter()
                .map(|c| c.get(w).copied().unwrap_or(0))
                .collect();
            println!("window {w}: {n} admitted, per load thread {per:?}");
            for (i, l) in fleet.iter().enumerate() {
                println!("  limiter {i}: {:?}", l.stats());
            }
        }
    }
    let last = fleet[0].current_window().expect("synced");
    // Every limiter is a RateLimiter: the trait path answers as well.
    let _ = fleet[0].try_acquire();
    (total, first, last, stamps)
}

/// Sets its flag when dropped.
struct Done<'a>(&'a AtomicBool);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        // Relaxed: a stop flag, read by the load threads alone.
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Asserts no window passed N; returns the largest count.
pub(crate) fn assert_capped(per_window: &PerWindow, what: &str) -> u64 {
    for (w, n) in per_window {
        assert!(
            *n <= u64::from(N),
            "{what}: fleet window {w} admitted {n} > N = {N} ({per_window:?})"
        );
    }
    per_window.values().copied().max().unwrap_or(0)
}

/// The counts of the windows strictly inside (first, last).
pub(crate) fn inner_windows(per_window: &PerWindow, first: u64, last: u64) -> Vec<u64> {
    (first + 1..last)
        .map(|w| per_window.get(&w).copied().unwrap_or(0))
        .collect()
}
