//! Reload storms: one thread reloading as fast as it can while four threads decide on a
//! manual clock. A rule removed and restored, or switched between a limit and
//! probability 0, keeps at most its N in every window whatever the reload rate
//! (before, 12–13 in a window of 10 at full speed).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use otel_rate_sampler::{ManualClock, RuleBasedSampler, SamplingConfig};

use crate::reload_caps::keep;

const MS: u64 = 1_000_000;

/// The file with rule `r` as `policy`, or without it (`None`).
fn file(policy: Option<&str>) -> SamplingConfig {
    let rule = policy.map_or(String::new(), |p| {
        format!("[[default.rule]]\nname = \"r\"\nspan_name = \"r\"\n{p}\n")
    });
    let text = format!("[default]\nlimit = 1000\n{rule}");
    SamplingConfig::from_toml_str(&text, "storm.toml").unwrap()
}

/// Four threads decide spans `r` while one reloads `a` and `b` in turn as fast as it
/// can, at instants of `windows` windows of 1 s from `start` (part-way into one, or on
/// its edge): the first tenth of each window, every 10 ms, where a reload finds the
/// rule's window empty, then its middle and its end. Returns what rule `r` kept per
/// window.
fn storm(a: &SamplingConfig, b: &SamplingConfig, start: u64, windows: u64) -> Vec<usize> {
    let clock = ManualClock::new();
    clock.set(start);
    let s = RuleBasedSampler::with_clock(a, "svc", clock.clone()).unwrap();
    let first = start / 1000 / MS;
    let instants = (0..windows).flat_map(|w| {
        let edge = (first + w) * 1000 * MS;
        (0..10)
            .map(move |i| edge + i * 10 * MS)
            .chain([edge + 500 * MS, edge + 990 * MS])
    });
    let mut per_window = vec![0usize; windows as usize];
    for now in instants.filter(|&t| t >= start) {
        clock.set(now);
        let kept = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) || i < 50 {
                        if keep(&s, "r").as_deref() == Some("r") {
                            kept.fetch_add(1, Ordering::SeqCst);
                        }
                        i += 1;
                    }
                });
            }
            for i in 0..100 {
                s.reload(if i % 2 == 0 { b } else { a }).unwrap();
            }
            stop.store(true, Ordering::SeqCst);
        });
        per_window[(now / 1000 / MS - first) as usize] += kept.into_inner();
    }
    per_window
}

fn assert_storm_keeps(policy: &str, other: Option<&str>, n: usize) {
    let a = file(Some(policy));
    let b = file(other);
    for start in [5_000 * MS, 5_370 * MS] {
        let kept = storm(&a, &b, start, 4);
        assert!(
            kept.iter().all(|&k| k <= n),
            "{policy} / {other:?} from {start}: {kept:?}"
        );
    }
}

#[test]
fn a_rule_removed_and_restored_at_full_speed_keeps_its_limit() {
    for algorithm in ["fixed", "sliding", "sliding-log", "bucketed"] {
        for paced in [false, true] {
            let policy = format!("limit = 10\nalgorithm = \"{algorithm}\"\npaced = {paced}");
            assert_storm_keeps(&policy, None, 10);
        }
    }
}

#[test]
fn a_limit_switched_with_probability_zero_at_full_speed_keeps_its_limit() {
    for algorithm in ["fixed", "sliding", "sliding-log", "bucketed"] {
        for paced in [false, true] {
            let policy = format!("limit = 10\nalgorithm = \"{algorithm}\"\npaced = {paced}");
            assert_storm_keeps(&policy, Some("probability = 0.0"), 10);
        }
    }
}
