//! Offered load over a fleet of limiters, counted per fleet window id.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use otel_rate_sampler::{Clock, FleetLimiter, Limit, RateLimiter};

/// Test timing: short windows so a run takes seconds.
pub(crate) const WINDOW: Duration = Duration::from_millis(250);
pub(crate) const INTERVAL: Duration = Duration::from_millis(50);
pub(crate) const N: u32 = 200;

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
                let start = Instant::now();
                let mut made = 0u64;
                // Relaxed: a stop flag; it publishes nothing (the counts come back
                // through `join`).
                while start.elapsed() < run || !during_done.load(Ordering::Relaxed) {
                    let due = (start.elapsed().as_nanos() as f64 * rate_per_ns) as u64;
                    while made < due {
                        made += 1;
                        if let Some(w) = l.acquire_window() {
                            *counts.entry(w).or_default() += 1;
                        }
                    }
                    thread::sleep(Duration::from_millis(1));
                }
                counts
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
    for h in handles {
        let counts = h.join().expect("load thread");
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
    (total, first, last)
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
