//! Caps that survive reloads: whatever the sequence of reloads, an aligned window never
//! admits more than the largest limit in force during it, for a rule, a floor and the
//! service cap. Deterministic (`ManualClock`); the concurrent test counts against a bound
//! it computes from what happened during the reloads. The property over every kind of
//! limit and of reload is in `reload_prop`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::attributes::SAMPLER_RULE;
use otel_rate_sampler::{Clock, ManualClock, RuleBasedSampler, SamplingConfig};
use proptest::prelude::*;

fn config(text: &str) -> SamplingConfig {
    SamplingConfig::from_toml_str(text, "test.toml").unwrap()
}

/// The rule that kept a root span named `name` (its `sampler.rule`), or `None`. The
/// trace's randomness is the largest: any probability keeps it, so an adaptive rule's
/// cap alone decides.
pub(crate) fn keep(s: &impl ShouldSample, name: &str) -> Option<String> {
    let result = s.should_sample(
        Some(&Context::new()),
        TraceId::from(u128::MAX),
        name,
        &SpanKind::Server,
        &[],
        &[],
    );
    (result.decision == SamplingDecision::RecordAndSample).then(|| {
        result
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == SAMPLER_RULE)
            .map(|kv| kv.value.to_string())
            .unwrap_or_default()
    })
}

fn kept(s: &impl ShouldSample, name: &str, n: usize) -> usize {
    (0..n).filter(|_| keep(s, name).is_some()).count()
}

/// Of `n` roots named `name`: how many were kept, and how many of those by `rule`.
fn kept_by(s: &impl ShouldSample, name: &str, n: usize, rule: &str) -> (usize, usize) {
    (0..n).fold((0, 0), |(all, by), _| match keep(s, name) {
        Some(r) => (all + 1, by + usize::from(r == rule)),
        None => (all, by),
    })
}

/// 950 ms: in the last tenth of every 1 s window, where a paced limit has released all
/// its permits (these tests spend a window's permits at one instant).
const LAST_TENTH: u64 = 950_000_000;

fn hourly(limit: u32) -> SamplingConfig {
    config(&format!("[default]\nlimit = {limit}\nwindow = \"1h\"\n"))
}

#[test]
fn lowering_then_restoring_a_limit_within_the_hour_reopens_nothing() {
    // On main: 1000/h -> 500 -> 1000 kept 1500 that hour.
    let clock = ManualClock::new();
    // In the last tenth of the hour (limits are paced: all of the hour's permits are
    // released by then), with room for the two minutes of reloads.
    clock.set(3240 * 1_000_000_000);
    let s = RuleBasedSampler::with_clock(&hourly(1000), "svc", clock.clone()).unwrap();
    assert_eq!(kept(&s, "op", 1000), 1000);
    clock.advance(Duration::from_secs(60));
    s.reload(&hourly(500)).unwrap();
    clock.advance(Duration::from_secs(60));
    s.reload(&hourly(1000)).unwrap();
    assert_eq!(kept(&s, "op", 2000), 0, "used permits re-opened");
    clock.advance(Duration::from_secs(3600));
    assert_eq!(kept(&s, "op", 2000), 1000, "the next hour is a fresh one");
}

#[test]
fn an_adaptive_rules_cap_reopens_nothing_through_reloads() {
    // On main an adaptive rule whose limit changed got a fresh cap: 1000/h, lowered to
    // 500 and restored, then 200 reloads, kept 12 500 in the hour.
    let adaptive = |limit: u32, rule: &str| {
        config(&format!(
            "[default]\nlimit = 1\n[[default.rule]]\nname = \"{rule}\"\nspan_name = \"op\"\nadaptive = {{ limit = {limit}, window = \"1h\" }}\n"
        ))
    };
    let clock = ManualClock::new();
    clock.set(3240 * 1_000_000_000);
    let s = RuleBasedSampler::with_clock(&adaptive(1000, "a"), "svc", clock.clone()).unwrap();
    // The first window's probability is 1: the cap alone decides.
    assert_eq!(kept_by(&s, "op", 2000, "a"), (1000, 1000));
    let mut total = 1000;
    for round in 0..200 {
        let limit = if round % 2 == 0 { 500 } else { 1000 };
        let rule = if round % 3 == 0 { "a" } else { "b" };
        s.reload(&adaptive(limit, rule)).unwrap();
        total += kept(&s, "op", 50);
    }
    assert_eq!(total, 1000, "the hour's cap was re-opened by reloads");
    // Gone and back within the hour: still spent.
    s.reload(&config("[default]\nlimit = 1\n")).unwrap();
    s.reload(&adaptive(1000, "a")).unwrap();
    assert_eq!(kept_by(&s, "op", 50, "a"), (0, 0));
}

#[test]
fn a_floor_moved_to_another_rule_reopens_nothing_of_the_cap() {
    let floor_on = |rule: &str| {
        let floor = |r: &str| if r == rule { 5 } else { 0 };
        config(&format!(
            "[default]\nlimit = 100\ncap = {{ limit = 10 }}\n\
             [[default.rule]]\nname = \"hot\"\nspan_name = \"hot\"\nlimit = 100\nfloor = {}\n\
             [[default.rule]]\nname = \"cold\"\nspan_name = \"cold\"\nlimit = 100\nfloor = {}\n",
            floor("hot"),
            floor("cold"),
        ))
    };
    let clock = ManualClock::new();
    clock.set(LAST_TENTH);
    let s = RuleBasedSampler::with_clock(&floor_on("hot"), "svc", clock.clone()).unwrap();
    assert_eq!(kept(&s, "hot", 100), 10);
    // On main the new floor of "cold" started empty: 5 more kept in the window.
    s.reload(&floor_on("cold")).unwrap();
    assert_eq!(kept(&s, "cold", 100) + kept(&s, "hot", 100), 0);
    s.reload(&floor_on("hot")).unwrap();
    assert_eq!(kept(&s, "cold", 100) + kept(&s, "hot", 100), 0);
    clock.advance(Duration::from_secs(1));
    assert_eq!(kept(&s, "cold", 100) + kept(&s, "hot", 100), 10);
}

#[test]
fn a_rule_removed_and_brought_back_within_its_window_reopens_nothing() {
    // On main a rule that vanished from a half-saved file and came back got a fresh
    // limiter: a limit of 5 kept 10 in one window.
    let with = config(
        "[default]\nlimit = 100\n[[default.rule]]\nname = \"r\"\nspan_name = \"r\"\nlimit = 5\n",
    );
    let without = config("[default]\nlimit = 100\n");
    let clock = ManualClock::new();
    clock.set(LAST_TENTH);
    let s = RuleBasedSampler::with_clock(&with, "svc", clock.clone()).unwrap();
    assert_eq!(kept_by(&s, "r", 10, "r"), (5, 5));
    s.reload(&without).unwrap();
    s.reload(&with).unwrap();
    assert_eq!(kept_by(&s, "r", 10, "r"), (0, 0));
    clock.advance(Duration::from_secs(1));
    assert_eq!(kept_by(&s, "r", 10, "r"), (5, 5));
    // Removed across a window boundary: it comes back with a fresh window.
    s.reload(&without).unwrap();
    clock.advance(Duration::from_secs(1));
    s.reload(&without).unwrap();
    s.reload(&with).unwrap();
    assert_eq!(kept_by(&s, "r", 10, "r"), (5, 5));
}

/// A rule inserted above another with the same conditions is that rule by what it
/// matches (the first rule is the one that decides): it takes over the limiter, named
/// or not, and the rule pushed down, which decides nothing, starts a fresh one.
#[test]
fn a_rule_inserted_above_with_the_same_conditions_hands_out_no_second_n() {
    let file = |names: &[&str]| {
        let rules: String = names
            .iter()
            .map(|name| {
                format!("[[default.rule]]\n{name}span_name = \"op\"\nlimit = 10\npaced = false\n")
            })
            .collect();
        config(&format!("[default]\nlimit = 100\n{rules}"))
    };
    let clock = ManualClock::new();
    clock.set(LAST_TENTH);
    let s = RuleBasedSampler::with_clock(&file(&[""]), "svc", clock.clone()).unwrap();
    assert_eq!(kept(&s, "op", 20), 10);
    s.reload(&file(&["", ""])).unwrap();
    assert_eq!(kept(&s, "op", 20), 0, "a second N after an unnamed insert");
    s.reload(&file(&["name = \"ins\"\n", ""])).unwrap();
    assert_eq!(kept(&s, "op", 20), 0, "a second N after naming it");
    clock.advance(Duration::from_secs(1));
    assert_eq!(kept_by(&s, "op", 20, "ins"), (10, 10));
}

/// A window-length change hands over what the old limiter counts in its own window and,
/// where the new window reaches back before it, what the old limit could have let
/// through there (`reload`'s docs). 1 per 1.5 s, changed to 2 per 1 s at 1.5 s: 2
/// between 1 s and 2 s (before, 3), and 2 per second from then on.
#[test]
fn a_window_length_change_carries_what_the_old_limit_let_through_in_the_new_window() {
    let rule = |limit: u32, window: &str| {
        config(&format!(
            "[default]\nlimit = 100\n[[default.rule]]\nname = \"r\"\nspan_name = \"r\"\nlimit = {limit}\nwindow = \"{window}\"\npaced = false\n"
        ))
    };
    let clock = ManualClock::new();
    clock.set(1_009_000_000);
    let s = RuleBasedSampler::with_clock(&rule(1, "1500ms"), "svc", clock.clone()).unwrap();
    assert_eq!(kept_by(&s, "r", 5, "r"), (1, 1));
    clock.set(1_500_000_000);
    s.reload(&rule(2, "1s")).unwrap();
    assert_eq!(kept_by(&s, "r", 5, "r"), (1, 1));
    clock.set(2_000_000_000);
    assert_eq!(kept_by(&s, "r", 5, "r"), (2, 2));
    clock.set(2_999_000_000);
    assert_eq!(kept_by(&s, "r", 5, "r"), (0, 0));
}

/// A rule keeps its limiter by what it matches when it has no name, or its name
/// changed: on main, inserting a rule above an unnamed one or renaming a rule gave a
/// second N in the window (21 kept in a window of 10).
#[test]
fn renaming_inserting_or_reordering_rules_hands_out_no_second_n() {
    let rule = |name: &str, span: &str| {
        let name = if name.is_empty() {
            String::new()
        } else {
            format!("name = \"{name}\"\n")
        };
        format!("[[default.rule]]\n{name}span_name = \"{span}\"\nlimit = 10\n")
    };
    let file = |rules: &[(&str, &str)]| {
        let rules: String = rules.iter().map(|(n, s)| rule(n, s)).collect();
        config(&format!("[default]\nlimit = 100\n{rules}"))
    };
    let clock = ManualClock::new();
    clock.set(LAST_TENTH);
    let s = RuleBasedSampler::with_clock(&file(&[("", "op")]), "svc", clock.clone()).unwrap();
    assert_eq!(kept(&s, "op", 20), 10);
    // Inserted above: the unnamed rule for "op" is now rule-2, and rule-1 is new.
    s.reload(&file(&[("", "other"), ("", "op")])).unwrap();
    assert_eq!(kept(&s, "op", 20), 0, "a second N after an insert");
    assert_eq!(kept(&s, "other", 20), 10, "the inserted rule starts fresh");
    // Named, then renamed, then moved below another rule: the same conditions.
    s.reload(&file(&[("", "other"), ("checkout", "op")]))
        .unwrap();
    assert_eq!(kept(&s, "op", 20), 0, "a second N after naming the rule");
    s.reload(&file(&[("", "other"), ("cart", "op")])).unwrap();
    assert_eq!(kept(&s, "op", 20), 0, "a second N after a rename");
    s.reload(&file(&[("cart", "op"), ("", "other")])).unwrap();
    assert_eq!(kept(&s, "op", 20) + kept(&s, "other", 20), 0, "reordered");
    clock.advance(Duration::from_secs(1));
    assert_eq!(kept(&s, "op", 20), 10, "the next window is a fresh one");
    assert_eq!(kept(&s, "other", 20), 10);
}

/// One service: a rule `r` (limit, algorithm, floor; or no rule) under a cap, and the
/// default.
#[derive(Clone, Copy, Debug)]
struct Version {
    /// Whether the file has the rule (a rule removed and brought back within a window
    /// must find its limiter).
    present: bool,
    /// Whether the rule is `probability = 0.0` instead of its limit (switched back and
    /// forth, the limit must find its limiter as a rule brought back does).
    zero: bool,
    rule: u32,
    /// One of the four algorithms, or `adaptive` (its cap is the limit).
    algorithm: &'static str,
    paced: bool,
    floor: u32,
    cap: u32,
}

impl Version {
    /// The rule is named `r`, or unnamed (named by position: `rule-1`).
    fn config(self, named: bool) -> SamplingConfig {
        let name = if named { "name = \"r\"\n" } else { "" };
        let policy = if self.zero {
            "probability = 0.0".to_owned()
        } else if self.algorithm == "adaptive" {
            format!("adaptive = {{ limit = {}, window = \"1s\" }}", self.rule)
        } else {
            format!(
                "limit = {}\nalgorithm = \"{}\"\npaced = {}",
                self.rule, self.algorithm, self.paced
            )
        };
        let rule = if self.present {
            format!(
                "[[default.rule]]\n{name}span_name = \"r\"\n{policy}\nfloor = {}\n",
                self.floor
            )
        } else {
            String::new()
        };
        config(&format!(
            "[default]\nlimit = 50\ncap = {{ limit = {} }}\n{rule}",
            self.cap
        ))
    }

    /// The rule's limit, 0 when the file has no rule or a probability of 0.
    fn rule_limit(self) -> u32 {
        if self.present && !self.zero {
            self.rule
        } else {
            0
        }
    }
}

fn version() -> impl Strategy<Value = Version> {
    (
        1u32..12,
        prop::sample::select(vec![
            "fixed",
            "sliding",
            "sliding-log",
            "bucketed",
            "adaptive",
        ]),
        any::<bool>(),
        0u32..4,
        4u32..16,
        prop::bool::weighted(0.75),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(rule, algorithm, paced, floor, cap, present, zero)| Version {
                present,
                zero,
                rule,
                algorithm,
                paced,
                floor,
                cap,
            },
        )
}

/// Admissions of one aligned 1 s window against the largest limits in force during it.
#[derive(Default)]
struct Window {
    /// The window's index (clock seconds).
    index: u64,
    rule: usize,
    total: usize,
    max_rule: u32,
    max_cap: u32,
}

impl Window {
    fn opened(v: Version) -> Self {
        Window {
            max_rule: v.rule_limit(),
            max_cap: v.cap,
            ..Window::default()
        }
    }

    fn in_force(&mut self, v: Version) {
        self.max_rule = self.max_rule.max(v.rule_limit());
        self.max_cap = self.max_cap.max(v.cap);
    }

    /// Checks the window and opens the next one if `clock` has left it.
    fn roll(&mut self, clock: &ManualClock, current: Version) -> Result<(), TestCaseError> {
        let now = clock.now_nanos() / SECOND;
        if now != self.index {
            self.check()?;
            *self = Window {
                index: now,
                ..Window::opened(current)
            };
        }
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        prop_assert!(
            self.rule <= self.max_rule as usize,
            "rule kept {} > {}",
            self.rule,
            self.max_rule
        );
        prop_assert!(
            self.total <= self.max_cap as usize,
            "cap kept {} > {}",
            self.total,
            self.max_cap
        );
        Ok(())
    }
}

const SECOND: u64 = 1_000_000_000;

/// Admissions counted by deciding threads: of the rule, and in all.
#[derive(Default)]
struct Tally {
    rule: AtomicUsize,
    total: AtomicUsize,
}

proptest! {
    #![proptest_config(crate::cases::cases(24))]

    /// Threads decide while another thread reloads: each window keeps at most the
    /// largest limits in force during it, counting every admission, also those decided
    /// while a reload ran (the reload closes a changed limit's old limiter, carrying
    /// what it admitted, before it publishes the replacement). A round's reloads are
    /// also repeated as fast as one thread can (a rule removed and restored, or
    /// switched with probability 0, up to hundreds of times while four threads decide:
    /// on main 12–13 in a window of 10).
    #[test]
    fn reloads_under_concurrent_load_keep_every_window_under_the_largest_limit(
        first in version(),
        rounds in prop::collection::vec(
            (
                prop::collection::vec(version(), 1..12),
                prop_oneof![3 => Just(1usize), 1 => 10usize..60],
                // Some ms, or to the next window's edge (`None`), where a reload finds
                // the rule's window empty.
                prop_oneof![2 => (0u64..1500).prop_map(Some), 1 => Just(None)],
            ),
            1..5,
        ),
    ) {
        let clock = ManualClock::new();
        let s = RuleBasedSampler::with_clock(&first.config(true), "svc", clock.clone()).unwrap();
        let mut window = Window::opened(first);
        let mut current: Version;
        for (reloads, repeat, advance) in rounds {
            let tally = Tally::default();
            let stop = AtomicBool::new(false);
            std::thread::scope(|scope| {
                for t in 0..4 {
                    let (s, tally, stop) = (&s, &tally, &stop);
                    scope.spawn(move || {
                        let mut i = 0usize;
                        while !stop.load(Ordering::SeqCst) || i < 200 {
                            let name = if (i + t).is_multiple_of(2) { "r" } else { "other" };
                            if let Some(rule) = keep(s, name) {
                                if rule == "r" {
                                    tally.rule.fetch_add(1, Ordering::SeqCst);
                                }
                                tally.total.fetch_add(1, Ordering::SeqCst);
                            }
                            i += 1;
                        }
                    });
                }
                for v in reloads.iter().cycle().take(reloads.len() * repeat) {
                    s.reload(&v.config(true)).unwrap();
                }
                stop.store(true, Ordering::SeqCst);
            });
            for v in &reloads {
                window.in_force(*v);
            }
            current = *reloads.last().unwrap();
            window.rule += tally.rule.load(Ordering::SeqCst);
            window.total += tally.total.load(Ordering::SeqCst);
            match advance {
                Some(ms) => clock.advance(Duration::from_millis(ms)),
                None => clock.set((clock.now_nanos() / SECOND + 1) * SECOND),
            }
            window.roll(&clock, current)?;
        }
        window.check()?;
    }
}
