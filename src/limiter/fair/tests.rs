//! The fair limiter's guarantees under several threads and a manual clock: the total,
//! the floor, the max-min shares, the overflow key and the weights.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::Duration;

use proptest::prelude::*;

// `default` cases unless `PROPTEST_CASES` is set: the integration tests' convention.
#[path = "../../../tests/support/cases.rs"]
mod cases;

use cases::cases;

use super::decide::Verdict;
use super::*;
use crate::clock::ManualClock;
use crate::limit::Limit;
use crate::limiter::{Algorithm, AnyLimiter};

const W: u64 = 1_000_000_000;

fn limiter(
    algorithm: Algorithm,
    permits: u32,
    paced: bool,
    max_keys: usize,
) -> (FairLimiter<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limit = Limit::per_window(permits, Duration::from_nanos(W)).unwrap();
    let limit = if paced { limit } else { limit.unpaced() };
    let inner = AnyLimiter::with_clock(algorithm, limit, clock.clone());
    (FairLimiter::over(inner, max_keys).unwrap(), clock)
}

/// One call's outcome as a test records it.
#[derive(Clone, Copy, Debug)]
struct Call {
    window: u64,
    key: u64,
    verdict: Verdict,
}

/// Runs `phases` (a clock reading and the keys called then, in order) on the driver
/// and `workers` threads: at each phase the driver sets the clock and, when `lead` is
/// set, makes the phase's first call alone (it rolls the window), then the workers make
/// the rest, each its share in turn, concurrently. Returns every call.
fn run(
    l: &FairLimiter<ManualClock>,
    clock: &ManualClock,
    phases: &[(u64, Vec<u64>)],
    workers: usize,
    lead: bool,
    mut after_phase: impl FnMut(usize),
) -> Vec<Call> {
    let barrier = Barrier::new(workers + 1);
    let call = |now: u64, key: u64| Call {
        window: now / W,
        key,
        verdict: l.decide(key),
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|t| {
                let barrier = &barrier;
                let call = &call;
                s.spawn(move || {
                    let mut calls = Vec::new();
                    for (now, keys) in phases {
                        barrier.wait();
                        let mine = keys.iter().skip(usize::from(lead)).skip(t).step_by(workers);
                        calls.extend(mine.map(|&key| call(*now, key)));
                        barrier.wait();
                    }
                    calls
                })
            })
            .collect();
        let mut calls = Vec::new();
        for (i, (now, keys)) in phases.iter().enumerate() {
            clock.set(*now);
            if lead {
                calls.extend(keys.first().map(|&key| call(*now, key)));
            }
            barrier.wait();
            barrier.wait();
            after_phase(i);
        }
        for h in handles {
            calls.extend(h.join().unwrap());
        }
        calls
    })
}

fn stamps_per_window(calls: &[Call]) -> BTreeMap<u64, u64> {
    let mut per = BTreeMap::new();
    for c in calls {
        if let Verdict::Kept(a) = c.verdict {
            *per.entry(a.stamp() / W).or_insert(0) += 1;
        }
    }
    per
}

/// `(offered, kept)` per window and key, leaving out the calls refused by a roll
/// that did not count them.
fn per_key(calls: &[Call]) -> BTreeMap<(u64, u64), (u64, u64)> {
    let mut per = BTreeMap::new();
    for c in calls {
        let e = per.entry((c.window, c.key)).or_insert((0, 0));
        match c.verdict {
            Verdict::Kept(_) => *e = (e.0 + 1, e.1 + 1),
            Verdict::Refused | Verdict::Rolling { counted: true } => e.0 += 1,
            Verdict::Rolling { counted: false } => {}
        }
    }
    per
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(Algorithm::ALL.to_vec())
}

proptest! {
    #![proptest_config(cases(10_000))]

    /// Any calls at any times: at most N stamped per window, and every key offered in
    /// the window before and in this one keeps one in it while such keys are at most
    /// the permits the roll could reserve.
    #[test]
    fn total_never_above_n_and_every_key_seen_keeps_one(
        algorithm in algorithm(),
        permits in 1u32..12,
        paced in any::<bool>(),
        start in 0u64..3 * W,
        windows in prop::collection::vec(
            prop::collection::vec((0u64..W, prop::collection::vec(0u64..10, 0..12)), 1..4),
            1..5,
        ),
    ) {
        let (l, clock) = limiter(algorithm, permits, paced, 64);
        let first = start / W + 1;
        let mut phases = Vec::new();
        for (i, mut window) in windows.into_iter().enumerate() {
            window.sort_by_key(|(offset, _)| *offset);
            for (offset, keys) in window {
                phases.push(((first + i as u64) * W + offset, keys));
            }
        }
        let mut capacity = BTreeMap::new();
        let calls = run(&l, &clock, &phases, 2, false, |i| {
            capacity.insert(phases[i].0 / W, l.reserved_capacity());
        });
        for (w, n) in stamps_per_window(&calls) {
            prop_assert!(n <= u64::from(permits), "window {} kept {} > {}", w, n, permits);
        }
        let per = per_key(&calls);
        for (&(w, key), &(offered, kept)) in &per {
            let before = |k: u64| per.get(&(w - 1, k)).is_some_and(|&(o, _)| o > 0);
            let seen: u64 = (0..10).filter(|&k| before(k)).count() as u64;
            if offered > 0 && before(key) && seen <= capacity[&w] {
                prop_assert!(kept >= 1, "{:?}: key {} of {} in window {} kept none", algorithm, key, seen, w);
            }
        }
    }

    /// Each key offering as many calls in every window (all at one instant, late in the
    /// window): from the second window on no key keeps more than one more than a key
    /// whose calls it refused.
    #[test]
    fn shares_are_max_min_fair(
        algorithm in algorithm(),
        permits in 1u32..30,
        paced in any::<bool>(),
        late in 0u64..W / 20,
        demands in prop::collection::vec(0u64..9, 1..10),
        order in any::<prop::sample::Index>(),
    ) {
        let (l, clock) = limiter(algorithm, permits, paced, 64);
        let mut keys: Vec<u64> = demands
            .iter()
            .enumerate()
            .flat_map(|(k, &d)| std::iter::repeat_n(k as u64, d as usize))
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let turn = order.index(keys.len());
        keys.rotate_left(turn);
        let phases: Vec<_> = (1..5u64).map(|w| (w * W + W - 1 - late, keys.clone())).collect();
        let calls = run(&l, &clock, &phases, 2, true, |_| {});
        let per = per_key(&calls);
        for w in 2..5u64 {
            let kept = |k: usize| per.get(&(w, k as u64)).map_or(0, |&(_, kept)| kept);
            for (j, &d) in demands.iter().enumerate() {
                prop_assert!(kept(j) <= d);
                if kept(j) < d {
                    for i in 0..demands.len() {
                        prop_assert!(
                            kept(i) <= kept(j) + 1,
                            "{:?} window {}: key {} kept {} while key {} kept {} of {}",
                            algorithm, w, i, kept(i), j, kept(j), d
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_rare_key_keeps_one_beside_a_hot_one_and_its_weight_counts_the_hot_ones_calls() {
    let (l, clock) = limiter(Algorithm::FixedWindow, 10, false, 8);
    for w in 1..4u64 {
        clock.set(w * W);
        let hot = (0..1000).filter(|_| l.acquire(1).is_some()).count();
        let rare = l.acquire(2);
        if w == 1 {
            // No estimates yet: first come, first served.
            assert_eq!((hot, rare), (10, None));
            continue;
        }
        let rare = rare.expect("the rare key's floor");
        assert_eq!(hot, 9, "window {w}");
        assert_eq!(rare.probability(), 1.0);
    }
    // The hot key's reserved permits stand for its 1000 calls a window.
    clock.set(4 * W);
    let weights: f64 = (0..1000)
        .filter_map(|_| l.acquire(1))
        .map(|a| 1.0 / a.probability())
        .sum();
    assert!((weights - 1000.0).abs() < 1e-6, "{weights}");
}

#[test]
fn admissions_in_the_first_window_have_probability_one() {
    let (l, _clock) = limiter(Algorithm::FixedWindow, 3, false, 8);
    assert_eq!(l.acquire(7).map(|a| a.probability()), Some(1.0));
}

#[test]
fn keys_beyond_max_keys_share_the_overflow_key_and_idle_keys_age_out() {
    let (l, clock) = limiter(Algorithm::FixedWindow, 100, false, 4);
    clock.set(W);
    for key in 0..10 {
        let _ = l.acquire(key);
    }
    let stats = l.stats();
    assert_eq!(
        (stats.keys, stats.max_keys, stats.overflow_offered),
        (4, 4, 6)
    );
    // Keys 0..4 go idle: after 8 windows their entries are free again.
    for w in 2..12 {
        clock.set(w * W);
        let _ = l.acquire(100);
    }
    // Key 100 overflowed in windows 2 to 9; the roll to window 10 freed keys 0 to 3.
    assert_eq!(l.stats().keys, 1);
    assert_eq!(l.stats().overflow_offered, 6 + 8);
}

#[test]
fn max_keys_is_checked() {
    for bad in [0, 65_535] {
        let err = FairLimiter::new(Algorithm::FixedWindow, Limit::per_second(1.0).unwrap(), bad)
            .unwrap_err();
        assert_eq!(err, FairError::MaxKeys { max_keys: bad });
        assert!(err.to_string().contains("65534"), "{err}");
    }
}

#[test]
fn a_refusal_writes_nothing_another_thread_writes() {
    let (l, clock) = limiter(Algorithm::FixedWindow, 2, false, 8);
    clock.set(W);
    let _ = l.acquire(1);
    clock.set(2 * W);
    assert!(l.acquire(1).is_some() && l.acquire(1).is_some());
    let words = |l: &FairLimiter<ManualClock>| {
        let mut words: Vec<u64> = l
            .entries
            .iter()
            .flat_map(|e| [&e.used, &e.reserved, &e.probability])
            .map(|w| w.load(crate::sync::Ordering::Relaxed))
            .collect();
        words.push(l.state.load(crate::sync::Ordering::Relaxed));
        words
    };
    let before = words(&l);
    for _ in 0..100 {
        assert!(l.acquire(1).is_none());
    }
    assert_eq!(words(&l), before);
}

#[test]
fn memory_is_fixed_at_construction_about_0_4_kb_per_key() {
    let (l, clock) = limiter(Algorithm::FixedWindow, 10, false, 500);
    let at_start = l.heap_bytes();
    assert!(at_start <= 500 * 420, "{at_start} bytes for 500 keys");
    // A million distinct keys in each of two windows: at most N kept in each, the
    // overflow counted, nothing grown.
    for w in 1..=2 {
        clock.set(w * W);
        let kept = (0..1_000_000)
            .filter(|&key| l.acquire(key).is_some())
            .count();
        assert!(kept <= 10, "window {w} kept {kept}");
    }
    assert_eq!(l.heap_bytes(), at_start);
    let stats = l.stats();
    assert_eq!(
        (stats.keys, stats.overflow_offered),
        (500, 2 * (1_000_000 - 500))
    );
}

/// Why the demo's adjusted counts summed over a run drift from what was offered (issue
/// 30: 0.957 to 1.059 of offered under a load that swings from window to window): a
/// key's probability in a window is its reserved permits over its count in the window
/// before, so when it keeps its whole share the window's weights add up to that
/// count, not to this window's. Exact while a key's load holds; one window late when it
/// changes, so a run's sum is off by how much its first and last windows' loads differ.
#[test]
fn a_keys_weights_add_up_to_its_count_in_the_window_before() {
    let (l, clock) = limiter(Algorithm::FixedWindow, 10, false, 4);
    // Window `w`: key 1 offered `a` times, key 2 `b` times; each key's adjusted count.
    let window = |w: u64, a: u64, b: u64| {
        clock.set(w * W);
        let adjusted = |key, n| -> f64 {
            (0..n)
                .filter_map(|_| l.acquire(key))
                .map(|admission| 1.0 / admission.probability())
                .sum()
        };
        (adjusted(1, a), adjusted(2, b))
    };
    let close = |(a, b): (f64, f64), (x, y): (f64, f64)| {
        assert!((a - x).abs() < 1e-9 && (b - y).abs() < 1e-9, "{a} {b}");
    };
    // A learning window: first come, probability 1.
    close(window(1, 100, 100), (10.0, 0.0));
    // Steady: exact (5 permits each, probability 5/100).
    close(window(2, 100, 100), (100.0, 100.0));
    // Key 1 doubles: its 5 permits still weigh 1/(5/100) each, the count before.
    close(window(3, 200, 100), (100.0, 100.0));
    // Steady again: exact.
    close(window(4, 200, 100), (200.0, 100.0));
    // Key 1 halves: it keeps its 5 (probability 5/200), weighing last window's 200.
    close(window(5, 100, 100), (200.0, 100.0));
}
