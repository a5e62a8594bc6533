//! A service's rules compiled for sampling: a limiter per rule (never per attribute
//! value), the cap split into per-rule floors and a shared pool, and the attributes
//! recorded on kept spans built once.
//!
//! A rule set is compiled ([`build`]) from the model, reusing or handing over the
//! previous set's limiters, and then decides ([`decide`]) until a reload replaces it;
//! each rule is a [`compiled::Compiled`].

mod compiled;
mod decide;
mod steps;

use std::sync::Arc;

use compiled::{Aside, Compiled};

use crate::clock::Clock;
use crate::config::compile::fair_rule::FairRule;
use crate::config::compile::matcher::Matchers;
use crate::config::compile::rule_limiter::RuleLimiter;
use crate::config::model::LimitSpec;
use crate::limiter::RateLimiter;
use crate::sampler::RemoteParents;
use crate::stats::{CapStats, Counters, DecisionStats, DropReason, RuleStats, WindowFill};

use compiled::Action;

/// The rule name reported for spans no rule matched.
const DEFAULT_RULE: &str = "default";

pub(crate) struct RuleSet<C> {
    pub(crate) remote_parents: RemoteParents,
    rules: Vec<Compiled<C>>,
    /// The rules' conditions, in the same order.
    matchers: Matchers,
    /// For spans no rule matches (`None`: drop them).
    default: Option<Compiled<C>>,
    /// The cap's shared pool (`None` without a cap, or when floors reserve all of it).
    shared: Option<RuleLimiter<C>>,
    /// The cap's `fair_by`: fair shares of its shared pool per key.
    shared_fair: Option<FairRule<C>>,
    /// Limits of earlier rule sets whose identity (a rule's name, or the default) has
    /// no limit in this one, kept while their window holds admissions: a rule removed
    /// (or made a probability) and brought back within a window finds its limiter;
    /// after, forgotten (what a rule brought back needs to go on from them, a bounded
    /// number of them: `steps::FORGOTTEN`).
    retired: Vec<Aside<C>>,
    cap: Option<LimitSpec>,
    /// Decisions no rule made (followed parents, no match without a default); kept
    /// across reloads.
    pub(crate) unmatched: Arc<Counters>,
}

impl<C: Clock> RuleSet<C> {
    /// Each rule's decisions and windows (the default last), the unmatched decisions,
    /// and the cap's.
    pub(crate) fn stats(&self) -> (Vec<RuleStats>, DecisionStats, Option<CapStats>) {
        let fill = |l: &RuleLimiter<C>| {
            l.count_in_window().map(|used| WindowFill {
                used,
                permits: l.limit().permits(),
            })
        };
        let rules: Vec<RuleStats> = self
            .rules
            .iter()
            .chain(self.default.as_ref())
            .map(|c| RuleStats {
                name: c.name.clone(),
                decisions: c.counters.snapshot(),
                window: match &c.action {
                    Action::Limit(l) | Action::AtLeast { lower_bound: l, .. } => fill(l),
                    Action::Adaptive { adaptive, .. } => adaptive.window_fill(),
                    Action::Probability(_) => None,
                },
                floor: c.floor.as_ref().and_then(fill),
                fair: c.fair.as_ref().map(FairRule::stats),
            })
            .collect();
        let cap = self.cap.map(|cap| {
            let floors: u64 = rules.iter().filter_map(|r| r.floor.map(|f| f.used)).sum();
            let shared = self.shared.as_ref().and_then(fill).map_or(0, |f| f.used);
            CapStats {
                dropped: rules
                    .iter()
                    .map(|r| r.decisions.dropped_for(DropReason::ServiceCap))
                    .sum(),
                window: WindowFill {
                    used: floors + shared,
                    permits: cap.limit.permits(),
                },
                fair: self.shared_fair.as_ref().map(FairRule::stats),
            }
        });
        (rules, self.unmatched.snapshot(), cap)
    }

    /// The fleet limiter of the rule named `rule` (`default` for the default, `cap`
    /// for the cap's shared pool), if that limit is fleet-scoped.
    #[cfg(feature = "redis")]
    pub(crate) fn fleet_limiter(&self, rule: &str) -> Option<&crate::fleet::FleetLimiter<C>> {
        if rule == "cap" {
            if let Some(shared) = self.shared.as_ref().and_then(RuleLimiter::fleet) {
                return Some(shared);
            }
        }
        self.rules
            .iter()
            .chain(self.default.as_ref())
            .find(|c| c.name == rule)
            .and_then(|c| c.action.limiter())
            .and_then(RuleLimiter::fleet)
    }

    /// Every fleet limiter it holds: its rules' and default's limits, floors and the
    /// cap's pool, and those of rules kept aside.
    #[cfg(feature = "redis")]
    fn fleet_limiters(&self) -> impl Iterator<Item = &crate::fleet::FleetLimiter<C>> {
        let kept_aside = self.retired.iter().filter_map(|a| match a {
            compiled::Aside::Kept(c) => Some(&**c),
            compiled::Aside::Forgotten(_) => None,
        });
        let rules = self
            .rules
            .iter()
            .chain(self.default.as_ref())
            .chain(kept_aside);
        rules
            .flat_map(|c| c.action.limiter().into_iter().chain(c.floor.as_ref()))
            .chain(self.shared.as_ref())
            .filter_map(RuleLimiter::fleet)
    }

    /// Closes each of its fleet limiters that `next` does not hold (a changed limit's,
    /// a removed rule's, a change of scope's): it calls Redis no more and refuses every
    /// later decision, also one reaching it through a thread's cached old rules, as it
    /// would once dropped. A reload runs it before it publishes `next`.
    #[cfg(feature = "redis")]
    pub(crate) fn close_fleet_limiters_not_in(&self, next: &RuleSet<C>) {
        for old in self.fleet_limiters() {
            if !next.fleet_limiters().any(|kept| kept.same(old)) {
                old.close();
            }
        }
    }

    /// The rule names, for `Debug`.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.rules
            .iter()
            .chain(self.default.as_ref())
            .map(|c| c.name.as_str())
    }
}

/// The floors of `rules`.
fn floors<C>(rules: &[Compiled<C>]) -> impl Iterator<Item = &RuleLimiter<C>> {
    rules.iter().filter_map(|c| c.floor.as_ref())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use opentelemetry::trace::{SpanKind, TraceId, TraceState};

    use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult};

    use super::*;
    use crate::clock::ManualClock;
    use crate::config::compile::handover::Handover;
    use crate::config::model::SamplingConfig;
    use crate::sampler::attributes::{self, LOWERBOUND, PROBABILISTIC};
    use crate::sampler::Origin;
    use crate::stats::ParentOrigin;

    /// A rule set of `toml`'s default for a service it does not list, on `clock`.
    fn compiled(toml: &str, clock: &ManualClock) -> RuleSet<ManualClock> {
        let config = SamplingConfig::from_toml_str(toml, "t.toml").unwrap();
        RuleSet::compile(&config.service("svc"), &config.fleet, clock, None)
            .unwrap()
            .0
    }

    /// A floor removed by a reload while decisions on the old rules admit through it:
    /// those late admissions are spread into the new cap when the handover closes the
    /// old floor, which refuses from then on, so the cap's window keeps at most its
    /// limit. Before, the new shared pool gave out the permits again.
    #[test]
    fn a_floor_removed_during_a_swap_keeps_the_cap_exact() {
        let clock = ManualClock::new();
        clock.set(1);
        let with_floor = "[default]\nlimit = 50\ncap = { limit = 10, window = \"1h\", paced = false }\n[[default.rule]]\nname = \"r\"\nspan_name = \"r\"\nlimit = 50\nfloor = 3\n";
        let v1 = SamplingConfig::from_toml_str(with_floor, "t.toml").unwrap();
        let old = RuleSet::compile(&v1.service("svc"), &v1.fleet, &clock, None)
            .unwrap()
            .0;
        let old_floor = old.rules[0].floor.clone().unwrap();
        let old_pool = old.shared.clone().unwrap();
        assert!(old_floor.try_acquire() && old_pool.try_acquire());
        let without = with_floor.replace("floor = 3\n", "");
        let v2 = SamplingConfig::from_toml_str(&without, "t.toml").unwrap();
        let (new, handovers) =
            RuleSet::compile(&v2.service("svc"), &v2.fleet, &clock, Some(&old)).unwrap();
        let pool = new.shared.clone().unwrap();
        // While the new rules are built: the old floor admits twice more.
        assert!(old_floor.try_acquire() && old_floor.try_acquire());
        handovers.iter().for_each(Handover::settle);
        // Closed: a decision still holding the old rules is refused.
        assert!(!old_floor.try_acquire() && !old_pool.try_acquire());
        // 10 in the window: 2 before, 2 during the swap, 6 after.
        assert_eq!((0..20).filter(|_| pool.try_acquire()).count(), 6);
    }

    /// The trace ids of a small deterministic generator (splitmix64), so the counts
    /// of a probability are the same on every run.
    fn trace_ids(seed: u64) -> impl Iterator<Item = TraceId> {
        let mut x = seed;
        std::iter::repeat_with(move || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            TraceId::from(u128::from(z ^ (z >> 31)) | 1 << 64)
        })
    }

    /// How a kept span was kept: `Some(true)` by the probability (with `th`),
    /// `Some(false)` by the lower bound (no `th`, `sampler.type = lowerbound`).
    fn kept_by_probability(result: &SamplingResult) -> Option<bool> {
        if result.decision != SamplingDecision::RecordAndSample {
            return None;
        }
        let sampler_type = result
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == attributes::SAMPLER_TYPE)
            .map(|kv| kv.value.as_str().into_owned());
        let th = result
            .trace_state
            .get("ot")
            .is_some_and(|ot| ot.contains("th:"));
        match sampler_type.as_deref() {
            Some(PROBABILISTIC) => {
                assert!(th, "a probability keep without th");
                Some(true)
            }
            Some(LOWERBOUND) => {
                assert!(!th, "a lower-bound keep claims a probability");
                Some(false)
            }
            other => panic!("kept as {other:?}"),
        }
    }

    fn root(rules: &RuleSet<ManualClock>, id: TraceId) -> SamplingResult {
        rules.decide(
            Origin::Root,
            id,
            "op",
            &SpanKind::Server,
            &[],
            &TraceState::NONE,
        )
    }

    /// Rule names are interned for the process's life (a kept span's `sampler.rule`
    /// then copies a pointer) up to a cap: rule sets naming more distinct rules than
    /// the cap holds, as a reload loop with ever-new names would, leave the interner
    /// within it and still name every kept span's rule.
    #[test]
    fn rule_names_past_the_interners_cap_still_name_kept_spans() {
        let clock = ManualClock::new();
        // 12 rule sets of 40 names of 160 bytes: 75 KiB of names, over the cap.
        let long = "n".repeat(150);
        for set in 0..12 {
            let mut toml = String::from("[default]\nprobability = 1.0\n");
            for j in 0..40 {
                toml.push_str(&format!(
                    "[[default.rule]]\nname = \"{long}-{set:03}-{j:03}\"\nspan_name = \"op{j}\"\nprobability = 1.0\n"
                ));
            }
            let rules = compiled(&toml, &clock);
            for j in 0..40 {
                let name = format!("op{j}");
                let kept = rules.decide(
                    Origin::Root,
                    TraceId::from(7),
                    &name,
                    &SpanKind::Server,
                    &[],
                    &TraceState::NONE,
                );
                let rule = kept
                    .attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == attributes::SAMPLER_RULE)
                    .map(|kv| kv.value.as_str().into_owned());
                assert_eq!(rule, Some(format!("{long}-{set:03}-{j:03}")));
            }
            let (names, bytes) = attributes::interned();
            assert!(bytes <= attributes::INTERN_MAX_BYTES, "{bytes} bytes");
            assert!(names <= attributes::INTERN_MAX_NAMES, "{names} names");
        }
    }

    #[test]
    fn probability_zero_at_least_two_keeps_exactly_two_per_second() {
        let clock = ManualClock::new();
        let rules = compiled("[default]\nprobability = 0.0\nat_least = 2.0\n", &clock);
        let mut ids = trace_ids(1);
        // 10 seconds of 1000 roots per second, one per millisecond.
        let mut per_second = [0u32; 10];
        for ms in 0..10_000u64 {
            clock.set(ms * 1_000_000);
            if let Some(by_probability) = kept_by_probability(&root(&rules, ids.next().unwrap())) {
                assert!(!by_probability);
                per_second[(ms / 1000) as usize] += 1;
            }
        }
        assert_eq!(per_second, [2; 10]);
        let (stats, _, _) = rules.stats();
        assert_eq!(stats[0].decisions.total(), 10_000);
        assert_eq!(
            stats[0].decisions.dropped_for(DropReason::Probability),
            9_980
        );
    }

    #[test]
    fn probability_one_keeps_every_trace_and_spends_the_lower_bound() {
        let clock = ManualClock::new();
        let rules = compiled("[default]\nprobability = 1.0\nat_least = 5.0\n", &clock);
        let mut ids = trace_ids(2);
        // 20 roots in the second, one per 50 ms: all kept by the probability, and the
        // first ones spend the bound's 5 permits as its pacing releases them.
        for i in 0..20u64 {
            clock.set(i * 50_000_000);
            assert_eq!(
                kept_by_probability(&root(&rules, ids.next().unwrap())),
                Some(true)
            );
        }
        let (stats, _, _) = rules.stats();
        assert_eq!(stats[0].decisions.kept(), 20);
        let window = stats[0].window.expect("the lower bound's window");
        assert_eq!((window.used, window.permits), (5, 5));
    }

    #[test]
    fn probability_one_half_and_a_bound_over_the_traffic_keeps_every_trace() {
        let clock = ManualClock::new();
        let rules = compiled("[default]\nprobability = 0.5\nat_least = 100.0\n", &clock);
        let mut ids = trace_ids(3);
        // 20 roots per second for 10 seconds, evenly spaced (2 per tenth of a second,
        // within the paced bound's 10 per tenth): the bound keeps what the probability
        // refuses.
        let (mut by_probability, mut by_bound) = (0u32, 0u32);
        for i in 0..200u64 {
            clock.set(i * 50_000_000);
            match kept_by_probability(&root(&rules, ids.next().unwrap())) {
                Some(true) => by_probability += 1,
                Some(false) => by_bound += 1,
                None => panic!("root {i} refused"),
            }
        }
        assert_eq!(by_probability + by_bound, 200);
        // Binomial(200, 0.5): mean 100, sigma 7.07; 5 sigma either side.
        assert!((65..=135).contains(&by_probability), "{by_probability}");
        eprintln!("kept by probability {by_probability}, by the lower bound {by_bound}");
    }

    #[test]
    fn the_lower_bounds_limiter_is_kept_across_reloads_by_rule_name() {
        let clock = ManualClock::new();
        let text = |bound: &str| {
            format!("[default]\nrate = 1.0\n[[default.rule]]\nname = \"op\"\nspan_name = \"op\"\nprobability = 0.0\nat_least = {bound}\n")
        };
        let config = |bound: &str| SamplingConfig::from_toml_str(&text(bound), "t.toml").unwrap();
        let compile = |bound: &str, previous: Option<&RuleSet<ManualClock>>| {
            let c = config(bound);
            let (set, handovers) =
                RuleSet::compile(&c.service("svc"), &c.fleet, &clock, previous).unwrap();
            for h in &handovers {
                h.settle();
            }
            set
        };
        let mut ids = trace_ids(4);
        let mut kept = |rules: &RuleSet<ManualClock>| {
            (0..10)
                .filter(|_| kept_by_probability(&root(rules, ids.next().unwrap())).is_some())
                .count()
        };
        // In the window's last tenth, where the paced bound has released every permit.
        clock.set(950_000_000);
        let first = compile("3.0", None);
        assert_eq!(kept(&first), 3);
        // The same bound: the same limiter, nothing re-opened.
        let same = compile("3.0", Some(&first));
        assert_eq!(kept(&same), 0);
        // A higher bound: what was used in this window stays spent.
        let higher = compile("5.0", Some(&same));
        assert_eq!(kept(&higher), 2);
        // The next window is a fresh one.
        clock.set(1_950_000_000);
        assert_eq!(kept(&higher), 5);
    }

    #[test]
    fn spans_no_rule_matches_are_counted_as_no_rule_without_a_default() {
        let config = SamplingConfig::from_toml_str(
            "[default]\nlimit = 1\n[[default.rule]]\nname = \"only\"\nspan_name = \"only\"\nlimit = 1\n",
            "t.toml",
        )
        .unwrap();
        let mut service = config.service("svc");
        service.policy = None; // what no loader produces: rules without a default
        let (rules, _) =
            RuleSet::compile(&service, &config.fleet, &ManualClock::new(), None).unwrap();
        let result = rules.decide(
            Origin::Root,
            TraceId::from(1u128),
            "other",
            &SpanKind::Server,
            &[],
            &TraceState::NONE,
        );
        assert_eq!(result.decision, SamplingDecision::Drop);
        let (per_rule, unmatched, cap) = rules.stats();
        assert_eq!(
            unmatched.dropped_for_from(DropReason::NoRule, ParentOrigin::Root),
            1
        );
        assert_eq!(per_rule.len(), 1);
        assert_eq!(per_rule[0].decisions.total(), 0);
        assert!(cap.is_none());
    }
}
