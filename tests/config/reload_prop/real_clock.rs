//! Four threads decide on the real clock while a fifth reloads through every kind of
//! limit (the four algorithms and an adaptive rule's cap), window lengths from 500 ms to
//! 2 s, pacing, renames, an inserted rule and a removal. Asserted is only what the
//! design guarantees on a loaded machine: every reload succeeds; once the reloads stop,
//! each full window of the rule's limit keeps at most `N`, and keeps at least ⌈0.9 N⌉
//! when the deciding threads ran through it (a machine that ran none of them for a
//! tenth of a window is not the sampler's doing; how often that happened is printed).
//! The churn's bound during the reloads (window lengths and kinds changing) is the
//! manual-clock property's; on the real clock the cap during the reloads is judged for
//! a limit flipped 10 ↔ 9 every 2 ms, every algorithm, by the real time of each
//! admission (the bucketed window allowed one more per admission that may have left its
//! window while a reload compiled, which it carries short).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use otel_rate_sampler::{Clock, MonotonicClock, RuleBasedSampler};

use super::model::{Kind, Lim, RuleV, Version};
use crate::reload_caps::keep;

const KINDS: [Kind; 5] = [
    Kind::Fixed,
    Kind::Sliding,
    Kind::Log,
    Kind::Bucketed,
    Kind::Adaptive,
];

/// The `i`th file of the reload loop: every kind, window, pacing and shape in turn.
fn churn(i: usize) -> Version {
    let lim = Lim {
        n: 3 + (i % 7) as u32,
        window_ms: [500, 1000, 1500, 2000][i % 4],
        kind: KINDS[i % 5],
        paced: i.is_multiple_of(3),
    };
    let name = [Some("r"), Some("r2"), None][i % 3];
    Version {
        inserted: (i % 11 == 5).then_some(RuleV {
            name: Some("ins"),
            lim,
        }),
        ours: (i % 13 != 7).then_some(RuleV { name, lim }),
        floor: (i % 4) as u32,
        cap: 1000,
    }
}

/// The file the reloads end on: the rule `r` alone, `N` = 10 per 500 ms, unpaced (so
/// that a decision anywhere in a window may take its permits).
fn last(kind: Kind) -> (Version, Lim) {
    let lim = Lim {
        n: 10,
        window_ms: 500,
        kind,
        paced: false,
    };
    let version = Version {
        inserted: None,
        ours: Some(RuleV {
            name: Some("r"),
            lim,
        }),
        floor: 1,
        cap: 1000,
    };
    (version, lim)
}

/// What one deciding thread saw: the clock readings around each span the rule `r`
/// kept, and the milliseconds in which it decided at all.
#[derive(Default)]
struct Seen {
    kept: Vec<(u64, u64)>,
    decided_ms: Vec<u64>,
}

const MS: u64 = 1_000_000;

fn decide(s: &RuleBasedSampler<MonotonicClock>, clock: MonotonicClock, stop: &AtomicBool) -> Seen {
    let mut seen = Seen::default();
    // SeqCst: a test's stop flag; nothing else is published through it.
    while !stop.load(Ordering::SeqCst) {
        let before = clock.now_nanos();
        let kept = keep(s, "r");
        let after = clock.now_nanos();
        if kept.as_deref() == Some("r") {
            seen.kept.push((before, after));
        }
        if seen.decided_ms.last() != Some(&(after / MS)) {
            seen.decided_ms.push(after / MS);
        }
    }
    seen
}

/// Runs the reload loop for `churn_for`, ends on `last`, and returns when the reloads
/// ended (clock nanoseconds) with what the deciding threads saw until `after` later.
fn run(last: Version, churn_for: Duration, after: Duration) -> (MonotonicClock, u64, Vec<Seen>) {
    let clock = MonotonicClock::new();
    let s = RuleBasedSampler::with_clock(&churn(0).config(), "svc", clock).unwrap();
    let stop = AtomicBool::new(false);
    let (ended, seen) = std::thread::scope(|scope| {
        let deciders: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| decide(&s, clock, &stop)))
            .collect();
        let start = clock.now_nanos();
        let mut i = 1;
        while clock.now_nanos() - start < churn_for.as_nanos() as u64 {
            s.reload(&churn(i).config()).unwrap();
            i += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        s.reload(&last.config()).unwrap();
        let ended = clock.now_nanos();
        std::thread::sleep(after);
        // SeqCst: as in `decide`.
        stop.store(true, Ordering::SeqCst);
        let seen: Vec<Seen> = deciders.into_iter().map(|d| d.join().unwrap()).collect();
        (ended, seen)
    });
    (clock, ended, seen)
}

#[test]
fn four_threads_decide_while_a_thread_reloads_every_kind_and_no_rule_starves_after() {
    let mut skipped = 0;
    for kind in KINDS {
        let (version, lim) = last(kind);
        let (_, ended, seen) = run(
            version,
            Duration::from_millis(300),
            Duration::from_millis(2200),
        );
        let w = lim.window();
        let first = lim.first_full_window(ended);
        for start in [first, first + w] {
            let end = start + w;
            let kept = |inside: &dyn Fn(u64, u64) -> bool| -> usize {
                seen.iter()
                    .flat_map(|s| &s.kept)
                    .filter(|&&(before, after)| inside(before, after))
                    .count()
            };
            let surely_in = kept(&|before, after| before >= start && after < end);
            let maybe_in = kept(&|before, after| after >= start && before < end);
            assert!(
                surely_in <= lim.n as usize,
                "{kind:?}: {surely_in} kept in a window of {}",
                lim.n
            );
            // Decisions in every tenth of the window, by some thread.
            let ran = (0..10).all(|tenth| {
                let (from, to) = (
                    (start + tenth * w / 10) / MS,
                    (start + (tenth + 1) * w / 10) / MS,
                );
                seen.iter()
                    .any(|s| s.decided_ms.iter().any(|&ms| from <= ms && ms < to))
            });
            if !ran {
                skipped += 1;
                continue;
            }
            assert!(
                maybe_in >= lim.unstarved(),
                "{kind:?}: starved, {maybe_in} kept in the window from {start} after the reloads"
            );
        }
    }
    println!("windows the deciding threads did not run through: {skipped} of 10");
}

/// The file with rule `r` of `n` per 500 ms of `algorithm` (paced).
fn flipped(algorithm: &str, n: u32) -> otel_rate_sampler::SamplingConfig {
    let text = format!(
        "[default]\nlimit = 1000\n[[default.rule]]\nname = \"r\"\nspan_name = \"r\"\n\
         limit = {n}\nwindow = \"500ms\"\nalgorithm = \"{algorithm}\"\n"
    );
    otel_rate_sampler::SamplingConfig::from_toml_str(&text, "flip.toml").unwrap()
}

/// The most kept spans surely inside one of `intervals` (both clock readings around the
/// decision in it), with that interval, beside the bound there: 10, and for the sliding
/// kinds one more per span that may have left the window while a reload compiled
/// (`slack`).
fn most_over(
    kept: &[(u64, u64)],
    intervals: impl Iterator<Item = (u64, u64)>,
    slack: impl Fn(u64, u64) -> u64,
) -> Option<(u64, u64, u64, u64)> {
    intervals
        .map(|(from, to)| {
            let inside = kept
                .iter()
                .filter(|&&(before, after)| before >= from && after < to)
                .count() as u64;
            (from, to, inside, 10 + slack(from, to))
        })
        .find(|&(_, _, inside, bound)| inside > bound)
}

/// Four threads decide on the real clock while a fifth flips rule `r` between 10 and 9
/// per 500 ms every 2 ms, for every algorithm; the cap is judged *during* the reloads, by
/// the real time of each admission (both clock readings around its decision inside the
/// interval). The fixed window and the sliding counter keep at most 10 in every aligned
/// window, the sliding log in any interval of 500 ms: their carry is exact (the log's
/// late admissions counted by number). The bucketed window (any 10 sub-windows) keeps at
/// most 10 plus one per admission that may have left its window while a reload
/// compiled, which the design carries short (see `RuleBasedSampler::reload`): counted
/// from the reloads' own clock readings, so the bound holds on a loaded machine.
#[test]
fn four_threads_decide_while_a_limit_flips_and_no_window_passes_the_cap_during_the_reloads() {
    const W: u64 = 500 * MS;
    for algorithm in ["fixed", "sliding", "sliding-log", "bucketed"] {
        let (ten, nine) = (flipped(algorithm, 10), flipped(algorithm, 9));
        let clock = MonotonicClock::new();
        let s = RuleBasedSampler::with_clock(&ten, "svc", clock).unwrap();
        let stop = AtomicBool::new(false);
        let (reloads, seen) = std::thread::scope(|scope| {
            let deciders: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| decide(&s, clock, &stop)))
                .collect();
            let start = clock.now_nanos();
            let mut reloads = Vec::new();
            for i in 0.. {
                let begun = clock.now_nanos();
                if begun - start > 1500 * MS {
                    break;
                }
                s.reload(if i % 2 == 0 { &nine } else { &ten }).unwrap();
                reloads.push((begun, clock.now_nanos()));
                std::thread::sleep(Duration::from_millis(2));
            }
            // SeqCst: as in `decide`.
            stop.store(true, Ordering::SeqCst);
            let seen: Vec<Seen> = deciders.into_iter().map(|d| d.join().unwrap()).collect();
            (reloads, seen)
        });
        let mut kept: Vec<(u64, u64)> = seen.iter().flat_map(|s| s.kept.clone()).collect();
        kept.sort_unstable();
        let (first, last) = (reloads[0].0, reloads[reloads.len() - 1].1);
        // When each admission leaves the window (earliest, latest), by the algorithm.
        let sub = W / 10;
        let leaves = |(before, after): (u64, u64)| match algorithm {
            "bucketed" => ((before / sub + 10) * sub, (after / sub + 10) * sub),
            _ => (before + W, after + W),
        };
        // Admissions that may have left during a reload; each may let one more through
        // in the window after it.
        let short: Vec<(u64, u64)> = kept
            .iter()
            .map(|&k| leaves(k))
            .filter(|&(lo, hi)| reloads.iter().any(|&(b, e)| lo <= e && hi >= b))
            .collect();
        let slack = |from: u64, to: u64| {
            short
                .iter()
                .filter(|&&(lo, hi)| lo < to && hi + W > from)
                .count() as u64
        };
        let breach = match algorithm {
            "fixed" | "sliding" => {
                let windows = (first / W..=last / W).map(|k| (k * W, k * W + W));
                most_over(&kept, windows, |_, _| 0)
            }
            "sliding-log" => most_over(&kept, kept.iter().map(|&(b, _)| (b, b + W)), |_, _| 0),
            _ => most_over(
                &kept,
                kept.iter()
                    .map(|&(b, _)| (b / sub * sub, b / sub * sub + W)),
                slack,
            ),
        };
        assert!(
            breach.is_none(),
            "{algorithm}: (from, to, kept, bound) = {breach:?}; {} reloads, {} kept, {} may have left during one",
            reloads.len(),
            kept.len(),
            short.len()
        );
        println!(
            "{algorithm}: {} reloads, {} kept, {} may have left during one",
            reloads.len(),
            kept.len(),
            short.len()
        );
    }
}
