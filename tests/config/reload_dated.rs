//! A reload carries what a sliding log or bucketed window admitted at the time it was
//! admitted, not at the reload: a limit changed late in a window gives its permits back
//! when the admissions it carries leave the window, as the limiter it replaced would
//! have. Deterministic (`ManualClock`), one deciding thread; the cap is checked beside
//! what is kept.

use otel_rate_sampler::{ManualClock, RuleBasedSampler, SamplingConfig};

use crate::reload_caps::keep;

const MS: u64 = 1_000_000;
/// Where the runs start: an aligned window's edge.
const BASE: u64 = 5_000 * MS;

/// Rule `r` of `n` per second, of `algorithm`, paced or not.
fn file(algorithm: &str, paced: bool, n: u32) -> SamplingConfig {
    let text = format!(
        "[default]\nlimit = 1000\n[[default.rule]]\nname = \"r\"\nspan_name = \"r\"\n\
         limit = {n}\nwindow = \"1s\"\nalgorithm = \"{algorithm}\"\npaced = {paced}\n"
    );
    SamplingConfig::from_toml_str(&text, "dated.toml").unwrap()
}

/// Offers `count` spans `r` at the clock's instant; returns the instants of those kept.
fn offer(s: &RuleBasedSampler<ManualClock>, clock: &ManualClock, count: usize) -> Vec<u64> {
    use otel_rate_sampler::Clock;
    let now = clock.now_nanos();
    (0..count)
        .filter(|_| keep(s, "r").as_deref() == Some("r"))
        .map(|_| now)
        .collect()
}

/// The most kept in any interval `(t − 1 s, t]`.
fn most_in_a_window(kept: &[u64]) -> usize {
    kept.iter()
        .map(|&t| {
            kept.iter()
                .filter(|&&s| s <= t && s + 1000 * MS > t)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Kept per aligned window of 1 s from `BASE`.
fn per_window(kept: &[u64], windows: usize) -> Vec<usize> {
    let mut per = vec![0; windows];
    for &t in kept {
        per[((t - BASE) / (1000 * MS)) as usize] += 1;
    }
    per
}

/// Issue 29's example: 10 admitted unpaced at 1 ms, the limit flipped 10 → 5 → 10 at
/// 900 ms: the window from 1001 ms keeps 10 again, the sliding log and the bucketed
/// window at once (the 10 have left their window), and no interval of a window holds
/// more than 10. (Before, the carried 10 were dated at 900 ms: the sliding log and the
/// bucketed window kept nothing until 1.9 s.)
#[test]
fn a_limit_flipped_late_in_a_window_gives_its_permits_back_when_they_leave_it() {
    for algorithm in ["fixed", "sliding", "sliding-log", "bucketed"] {
        let clock = ManualClock::new();
        clock.set(BASE + MS);
        let ten = file(algorithm, false, 10);
        let s = RuleBasedSampler::with_clock(&ten, "svc", clock.clone()).unwrap();
        let mut kept = offer(&s, &clock, 100);
        assert_eq!(kept.len(), 10, "{algorithm}");
        clock.set(BASE + 900 * MS);
        s.reload(&file(algorithm, false, 5)).unwrap();
        s.reload(&ten).unwrap();
        assert!(offer(&s, &clock, 100).is_empty(), "{algorithm}: re-opened");
        clock.set(BASE + 1001 * MS);
        let at_once = offer(&s, &clock, 100);
        if algorithm == "sliding-log" || algorithm == "bucketed" {
            assert_eq!(at_once.len(), 10, "{algorithm}: kept at 1001 ms");
        }
        kept.extend(at_once);
        // The sliding counter weighs the window before: it keeps its 10 by 1.901 s.
        for step in 1..10 {
            clock.set(BASE + (1001 + step * 100) * MS);
            kept.extend(offer(&s, &clock, 100));
        }
        let from_1001 = kept.iter().filter(|&&t| t >= BASE + 1001 * MS).count();
        assert_eq!(from_1001, 10, "{algorithm}: {kept:?}");
        assert!(most_in_a_window(&kept) <= 10, "{algorithm}: {kept:?}");
    }
}

/// Issue 29's twenty flips: at every 100 ms instant the limit is flipped 10 ↔ 5 twenty
/// times (ending on 10), then 10 spans are offered (100 per window). Every window keeps
/// its 10, and no interval of a window holds more (before: [10, 0, 0, 0, ...] with the
/// sliding log, paced or not, and the bucketed window).
#[test]
fn a_limit_flipped_twenty_times_at_every_instant_keeps_its_limit_in_every_window() {
    for algorithm in ["fixed", "sliding", "sliding-log", "bucketed"] {
        for paced in [false, true] {
            let clock = ManualClock::new();
            clock.set(BASE);
            let (ten, five) = (file(algorithm, paced, 10), file(algorithm, paced, 5));
            let s = RuleBasedSampler::with_clock(&ten, "svc", clock.clone()).unwrap();
            let windows = 8;
            let mut kept = Vec::new();
            for step in 0..10 * windows as u64 {
                clock.set(BASE + step * 100 * MS);
                for flip in 0..20 {
                    s.reload(if flip % 2 == 0 { &five } else { &ten }).unwrap();
                }
                kept.extend(offer(&s, &clock, 10));
            }
            let per = per_window(&kept, windows);
            let case = format!("{algorithm} paced {paced}: {per:?}");
            assert!(per.iter().all(|&k| k == 10), "{case}");
            if algorithm == "sliding-log" {
                assert!(most_in_a_window(&kept) <= 10, "{case}");
            }
        }
    }
}

/// Reloaded once in the middle of every window (the limit flipped 10 → 5 → 10), 10
/// offered every 100 ms: the paced sliding log keeps at least 9 of its 10 in every
/// window after the first (before, 6), and never more than 10 in any interval of 1 s.
#[test]
fn a_paced_sliding_log_reloaded_in_the_middle_of_every_window_keeps_its_spread() {
    let clock = ManualClock::new();
    clock.set(BASE);
    let (ten, five) = (file("sliding-log", true, 10), file("sliding-log", true, 5));
    let s = RuleBasedSampler::with_clock(&ten, "svc", clock.clone()).unwrap();
    let windows = 8;
    let mut kept = Vec::new();
    for step in 0..10 * windows as u64 {
        clock.set(BASE + step * 100 * MS);
        if step % 10 == 5 {
            s.reload(&five).unwrap();
            s.reload(&ten).unwrap();
        }
        kept.extend(offer(&s, &clock, 10));
    }
    let per = per_window(&kept, windows);
    assert!(per[1..].iter().all(|&k| k >= 9), "{per:?}");
    assert!(most_in_a_window(&kept) <= 10, "{per:?}");
}
