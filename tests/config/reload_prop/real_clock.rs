//! Four threads decide on the real clock while a fifth reloads through every kind of
//! limit (the four algorithms and an adaptive rule's cap), window lengths from 500 ms to
//! 2 s, pacing, renames, an inserted rule and a removal. Asserted is only what the
//! design guarantees on a loaded machine: every reload succeeds; once the reloads stop,
//! each full window of the rule's limit keeps at most `N`, and keeps at least ⌈0.9 N⌉
//! when the deciding threads ran through it (a machine that ran none of them for a
//! tenth of a window is not the sampler's doing; how often that happened is printed).
//! The bound during the reloads is the manual-clock tests' (on the real clock a
//! decision descheduled past the reload's grace period is not covered, and the sliding
//! kinds lose what leaves their window during a swap).

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
