//! A rule's permit is spent only on a span kept: when the service cap refuses a span
//! its rule admitted, the rule's permit goes back. Before, it was spent: an unpaced rule
//! of 10 per second under a paced cap of 10 kept 5 per window when offered 20, and a
//! rule whose spans met a cap another rule had filled kept nothing once the cap had
//! room again. Every algorithm, paced or not, under a paced and an unpaced cap, on a
//! manual clock created on a window's edge and part-way into one; with four threads,
//! the rule and the cap still never pass their N.

use std::collections::BTreeMap;
use std::sync::Arc;

use otel_rate_sampler::{Algorithm, ManualClock, RuleBasedSampler, SamplingConfig};

use crate::reload_caps::keep;

/// `t0`: an edge of the rule's 1 s windows and of the cap's 500 ms ones.
const T0: u64 = 10_000_000_000;
const MS: u64 = 1_000_000;

/// Rule `r` (10 per 1 s, `algorithm`, paced or not) and rule `q` (plenty) under a cap of
/// 10 per 500 ms, paced or not.
fn sampler(
    algorithm: Algorithm,
    rule_paced: bool,
    cap_paced: bool,
    created: u64,
) -> (RuleBasedSampler<ManualClock>, ManualClock) {
    let text = format!(
        r#"
[[service]]
name = "svc"
limit = 1000
cap = {{ limit = 10, window = "500ms", paced = {cap_paced} }}
[[service.rule]]
name = "q"
span_name = "q"
limit = 1000
paced = false
[[service.rule]]
name = "r"
span_name = "r"
limit = 10
window = "1s"
algorithm = "{algorithm}"
paced = {rule_paced}
"#
    );
    let config = SamplingConfig::from_toml_str(&text, "cap.toml").unwrap();
    let clock = ManualClock::new();
    clock.set(created);
    let s = RuleBasedSampler::with_clock(&config, "svc", clock.clone()).unwrap();
    (s, clock)
}

/// Every combination, named, with its sampler and clock: the algorithm of `r`, whether
/// it is paced, whether the cap is, and the clock's start (on `T0`, or 300 ms before).
fn every_case() -> impl Iterator<Item = (String, RuleBasedSampler<ManualClock>, ManualClock)> {
    Algorithm::ALL.into_iter().flat_map(|a| {
        [(false, false), (false, true), (true, false), (true, true)]
            .into_iter()
            .flat_map(move |(rp, cp)| {
                [T0, T0 - 300 * MS].map(|c| {
                    let (s, clock) = sampler(a, rp, cp, c);
                    let case = format!("{a} rule paced {rp}, cap paced {cp}, created {c}");
                    (case, s, clock)
                })
            })
    })
}

/// At `T0` rule `q` takes what the cap gives it; then every 50 ms for a second 10 spans
/// of `r`, refused by the cap while it has no room. `r` keeps its 10 in its window
/// `[T0, T0 + 1 s)`: what the cap refused is given back, whatever the algorithm and
/// pacing. The cap never keeps more than 10 per 500 ms, `r` never more than 10.
#[test]
fn a_rule_refused_by_the_cap_keeps_its_permits_for_spans_kept_later() {
    for (case, s, clock) in every_case() {
        clock.set(T0);
        let mut per_cap_window: BTreeMap<u64, usize> = BTreeMap::new();
        let q = (0..10).filter(|_| keep(&s, "q").is_some()).count();
        assert!(q >= 1, "{case}: q kept {q}");
        *per_cap_window.entry(T0 / (500 * MS)).or_default() += q;
        let mut r = 0;
        for step in 0..20 {
            clock.set(T0 + step * 50 * MS);
            let kept = (0..10).filter(|_| keep(&s, "r").is_some()).count();
            *per_cap_window
                .entry(clock_window(T0 + step * 50 * MS))
                .or_default() += kept;
            r += kept;
        }
        assert_eq!(r, 10, "{case}: r kept {r} in its window");
        assert!(
            per_cap_window.values().all(|&n| n <= 10),
            "{case}: {per_cap_window:?}"
        );
    }
}

fn clock_window(t: u64) -> u64 {
    t / (500 * MS)
}

/// The issue's case on a manual clock: an unpaced `[default]` of 10 per 1 s under a
/// paced cap of 10 per 1 s, offered 20 per window evenly, kept 5 per window; it keeps
/// 10, every window.
#[test]
fn an_unpaced_default_under_a_paced_cap_keeps_its_limit_when_offered_twice_it() {
    for algorithm in Algorithm::ALL {
        let text = format!(
            "[default]\nlimit = 10\nwindow = \"1s\"\npaced = false\nalgorithm = \"{algorithm}\"\ncap = {{ limit = 10, window = \"1s\" }}\n"
        );
        let config = SamplingConfig::from_toml_str(&text, "cap.toml").unwrap();
        let clock = ManualClock::new();
        clock.set(T0 - 300 * MS);
        let s = RuleBasedSampler::with_clock(&config, "svc", clock.clone()).unwrap();
        let per_window: Vec<usize> = (0..4)
            .map(|w| {
                (0..20)
                    .filter(|i| {
                        clock.set(T0 + w * 1000 * MS + i * 50 * MS);
                        keep(&s, "op").is_some()
                    })
                    .count()
            })
            .collect();
        assert_eq!(per_window, [10; 4], "{algorithm}");
    }
}

/// Four threads deciding `r` and `q` at every 10 ms instant: the permits given back
/// race admissions and window rolls, and neither the rule nor the cap passes its N in
/// any window (`r` counted over the aligned windows, where every algorithm holds N).
#[test]
fn four_threads_giving_permits_back_never_pass_the_rule_or_the_cap() {
    for (case, s, clock) in every_case() {
        let s = Arc::new(s);
        let mut rule: BTreeMap<u64, usize> = BTreeMap::new();
        let mut cap: BTreeMap<u64, usize> = BTreeMap::new();
        for step in 0..300u64 {
            let now = T0 + step * 10 * MS;
            clock.set(now);
            let kept: Vec<(usize, usize)> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..4)
                    .map(|i| {
                        let s = &s;
                        scope.spawn(move || {
                            let r = (0..3).filter(|_| keep(&**s, "r").is_some()).count();
                            let q = if (step + i) % 7 == 0 {
                                (0..2).filter(|_| keep(&**s, "q").is_some()).count()
                            } else {
                                0
                            };
                            (r, q)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let (r, q): (usize, usize) = kept.iter().fold((0, 0), |(a, b), (r, q)| (a + r, b + q));
            *rule.entry(now / (1000 * MS)).or_default() += r;
            *cap.entry(clock_window(now)).or_default() += r + q;
        }
        assert!(rule.values().all(|&n| n <= 10), "{case}: {rule:?}");
        assert!(cap.values().all(|&n| n <= 10), "{case}: {cap:?}");
    }
}
