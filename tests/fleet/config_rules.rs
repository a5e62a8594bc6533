//! A rule file with one fleet-scoped rule and one local rule, loaded by three
//! `RuleBasedSampler`s (three replicas, each its own sampler and fleet limiter) under
//! load on the real clock, with a reload that lowers the fleet rule's limit mid-run.
//!
//! Counting: the fleet rule's total per fleet window is read from Redis itself, the
//! window's `#` (every permit granted to any replica in that window id, which bounds
//! what the replicas can keep), polled during the run, and the spans the samplers kept
//! for it must fit in those grants. The local rule's kept spans are counted per window
//! exactly: each replica's one load thread reads the time its limiter read (a clock
//! that records its last reading per thread) and fixed windows are `t / W`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::{Clock, MonotonicClock, RateLimiter, RuleBasedSampler, SamplingConfig};

use crate::server::Server;

const WINDOW: Duration = Duration::from_millis(250);
/// The fleet rule's limit per fleet window, before and after the reload.
const FLEET_N: u64 = 200;
const FLEET_N_AFTER: u64 = 100;
/// The local rule's limit per window, per replica.
const LOCAL_N: u64 = 50;
const REPLICAS: usize = 3;

thread_local! {
    static LAST_READING: Cell<u64> = const { Cell::new(0) };
}

/// The monotonic clock, remembering on each thread the last time it returned.
#[derive(Clone, Debug, Default)]
struct RecordingClock(MonotonicClock);

impl Clock for RecordingClock {
    fn now_nanos(&self) -> u64 {
        let t = self.0.now_nanos();
        LAST_READING.with(|c| c.set(t));
        t
    }
}

fn config(url: &str, fleet_n: u64) -> SamplingConfig {
    let text = format!(
        r#"
[fleet]
redis = "{url}"
prefix = "cfg"
sync_interval = "50ms"

[default]
probability = 0.0

[[service]]
name = "shop"

[[service.rule]]
name = "api"
span_name = "api"
limit = {fleet_n}
window = "250ms"
scope = "fleet"

[[service.rule]]
name = "batch"
span_name = "batch"
limit = {LOCAL_N}
window = "250ms"
"#
    );
    SamplingConfig::from_toml_str(&text, "fleet.toml").expect("the test file loads")
}

/// Grants per fleet window id of the rule `shop:api`, from Redis.
fn grants(server: &Server) -> BTreeMap<u64, u64> {
    const SCRIPT: &str = "local r = {} for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
                          r[#r + 1] = k r[#r + 1] = redis.call('HGET', k, '#') end return r";
    let out = server.cli(&["EVAL", SCRIPT, "0", "{cfg:shop:api}:w:*"]);
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    lines
        .chunks(2)
        .filter_map(|kv| {
            let window = kv.first()?.rsplit(':').next()?.parse().ok()?;
            let total = kv.get(1)?.parse().ok()?;
            Some((window, total))
        })
        .collect()
}

/// What one replica kept: the fleet rule's spans in total, the local rule's per window.
#[derive(Default)]
struct Kept {
    fleet: u64,
    local: BTreeMap<u64, u64>,
}

/// Offers `api` and `batch` spans to `sampler` (paced, ~4 N per window of each) until
/// `stop`.
fn replica_load(sampler: RuleBasedSampler<RecordingClock>, stop: Arc<AtomicBool>) -> Kept {
    let mut kept = Kept::default();
    let per_ms = (4 * FLEET_N) as f64 / REPLICAS as f64 / WINDOW.as_millis() as f64;
    let start = Instant::now();
    let mut made = 0u64;
    let window = WINDOW.as_nanos() as u64;
    // Relaxed: a flag, nothing is published through it.
    while !stop.load(Ordering::Relaxed) {
        let due = (start.elapsed().as_secs_f64() * 1e3 * per_ms) as u64;
        while made < due {
            made += 1;
            let trace = TraceId::from(u128::from(made));
            for name in ["api", "batch"] {
                let decision = sampler
                    .should_sample(None, trace, name, &SpanKind::Server, &[], &[])
                    .decision;
                if decision != SamplingDecision::RecordAndSample {
                    continue;
                }
                if name == "api" {
                    kept.fleet += 1;
                } else {
                    let t = LAST_READING.with(Cell::get);
                    *kept.local.entry(t / window).or_default() += 1;
                }
            }
        }
        thread::sleep(Duration::from_millis(1));
    }
    kept
}

#[test]
fn a_fleet_rule_caps_the_fleet_and_a_local_rule_each_replica_through_a_reload() {
    let server = Server::start();
    let url = server.url();
    let samplers: Vec<_> = (0..REPLICAS)
        .map(|_| {
            RuleBasedSampler::with_clock(&config(&url, FLEET_N), "shop", RecordingClock::default())
                .expect("the sampler builds")
        })
        .collect();
    let fleet = |s: &RuleBasedSampler<RecordingClock>| s.fleet_limiter("api").expect("fleet rule");
    assert!(samplers[0].fleet_limiter("batch").is_none());
    // Synced, and past the two windows a fresh Redis grants nothing in.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !samplers.iter().all(|s| fleet(s).stats().clock_synced) {
        assert!(
            Instant::now() < deadline,
            "the replicas never reached Redis"
        );
        thread::sleep(Duration::from_millis(5));
    }
    thread::sleep(WINDOW * 3);

    // An unchanged reload keeps the very limiter (its lease count goes on).
    let before = fleet(&samplers[0]).stats().leases;
    samplers[0].reload(&config(&url, FLEET_N)).unwrap();
    assert!(fleet(&samplers[0]).stats().leases >= before.max(1));

    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = samplers
        .iter()
        .map(|s| {
            let (s, stop) = (s.clone(), Arc::clone(&stop));
            thread::spawn(move || replica_load(s, stop))
        })
        .collect();
    let mut seen = BTreeMap::new();
    let poll_for = |run: Duration, seen: &mut BTreeMap<u64, u64>| {
        let end = Instant::now() + run;
        while Instant::now() < end {
            for (w, n) in grants(&server) {
                let e = seen.entry(w).or_insert(0);
                *e = (*e).max(n);
            }
            thread::sleep(Duration::from_millis(50));
        }
    };
    let first = fleet(&samplers[0]).current_window().expect("synced");
    poll_for(WINDOW * 10, &mut seen);

    // Lower the fleet rule's limit on every replica.
    // The old limiter's clock mapping still names fleet windows after the reload (the
    // new one has none until its first Redis round trip).
    let old = fleet(&samplers[0]);
    let reload_from = old.current_window().expect("synced");
    for s in &samplers {
        s.reload(&config(&url, FLEET_N_AFTER)).unwrap();
    }
    let reload_to = old.current_window().expect("synced");
    let after = fleet(&samplers[0]);
    assert_eq!(after.key(), "shop:api");
    assert_eq!(
        after.instance_id(),
        old.instance_id(),
        "same replica in Redis"
    );
    assert_eq!(u64::from(after.limit().permits()), FLEET_N_AFTER);
    poll_for(WINDOW * 10, &mut seen);
    stop.store(true, Ordering::Relaxed);
    let kept: Vec<Kept> = loads.into_iter().map(|h| h.join().expect("load")).collect();
    let last = old.current_window().expect("synced");
    for (w, n) in grants(&server) {
        let e = seen.entry(w).or_insert(0);
        *e = (*e).max(n);
    }

    println!("fleet windows {first}..={last}, reload in {reload_from}..={reload_to}");
    println!("fleet grants per window: {seen:?}");
    for (w, n) in &seen {
        let bound = if *w < reload_from {
            FLEET_N
        } else if *w <= reload_to {
            FLEET_N.max(FLEET_N_AFTER)
        } else {
            FLEET_N_AFTER
        };
        assert!(
            *n <= bound,
            "fleet window {w} granted {n} > {bound} (reload in {reload_from}..={reload_to})"
        );
    }
    let granted: u64 = seen.values().sum();
    let kept_fleet: u64 = kept.iter().map(|k| k.fleet).sum();
    println!("fleet rule: kept {kept_fleet} of {granted} granted");
    assert!(
        kept_fleet <= granted,
        "kept {kept_fleet} > granted {granted}"
    );
    let after_reload: u64 = seen.range(reload_to + 1..).map(|(_, n)| n).sum();
    assert!(after_reload > 0, "the new fleet limiter never leased");
    for (i, k) in kept.iter().enumerate() {
        println!("replica {i}: local rule per window {:?}", k.local);
        for (w, n) in &k.local {
            assert!(
                *n <= LOCAL_N,
                "replica {i}: local window {w} kept {n} > {LOCAL_N}"
            );
        }
        assert!(
            k.local.len() >= 10,
            "replica {i} kept too little: {:?}",
            k.local
        );
    }
}
