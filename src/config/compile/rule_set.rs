//! A service's rules compiled for sampling: a limiter per rule (never per attribute
//! value), the cap split into per-rule floors and a shared pool, and the attributes
//! recorded on kept spans built once.

use std::cell::RefCell;
use std::sync::Arc;

use opentelemetry::trace::{SpanKind, TraceId, TraceState};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult};

use crate::clock::Clock;
use crate::config::check::resolution::below_resolution;
use crate::config::compile::handover::{cap_handover, spread, Handover, LocalRule, Snapshot};
use crate::config::compile::matcher::Matchers;
use crate::config::compile::rule_limiter::{BuildError, RuleLimiter};
use crate::config::model::LimitOf;
use crate::config::model::{
    fleet_cap_key, fleet_floor_key, fleet_key, FleetSettings, LimitSpec, Policy, Rule,
    ServiceConfig,
};
use crate::limit::LimitError;
use crate::limiter::{Algorithm, FixedWindow, RateLimiter};
use crate::sampler::attributes::{self, ADAPTIVE, LOWERBOUND, PROBABILISTIC, RATELIMITING};
use crate::sampler::{
    decide_consistent, drop_span, erase_threshold, Adaptive, Origin, RemoteParents, Threshold,
    Verdict,
};
use crate::stats::{CapStats, Counters, DecisionStats, DropReason, Event, RuleStats, WindowFill};

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
    /// Limits of earlier rule sets whose identity (a rule's name, or the default) has
    /// no limit in this one, kept while their window holds admissions: a rule removed
    /// (or made a probability) and brought back within a window finds its limiter.
    retired: Vec<Compiled<C>>,
    cap: Option<LimitSpec>,
    /// Decisions no rule made (followed parents, no match without a default); kept
    /// across reloads.
    pub(crate) unmatched: Arc<Counters>,
}

struct Compiled<C> {
    name: String,
    /// The service's default (which a rule named `default` is not).
    is_default: bool,
    policy: Policy,
    action: Action<C>,
    /// Permits reserved for this rule in the cap.
    floor: Option<RuleLimiter<C>>,
    /// What a kept span records.
    attributes: Vec<KeyValue>,
    /// This rule's decisions; the previous rule of the same name's, after a reload.
    counters: Arc<Counters>,
}

enum Action<C> {
    Limit(RuleLimiter<C>),
    /// Keep iff the trace's randomness is at least this (OTEP 235), writing `th`.
    Probability(Threshold),
    /// An adaptive probability under its own cap; shared with the previous rule set's
    /// rule of the same name and limit across a reload.
    Adaptive(Arc<Adaptive<C>>),
    /// A probability (writing `th`), and a lower bound's limiter that the probability's
    /// keeps also spend and that may keep what it refuses.
    AtLeast {
        threshold: Threshold,
        lower_bound: RuleLimiter<C>,
        /// What a span kept by the lower bound alone records (the rule's `attributes`
        /// are those of a probability keep).
        bound_attributes: Vec<KeyValue>,
    },
}

impl<C> Clone for Compiled<C> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            is_default: self.is_default,
            policy: self.policy,
            action: match &self.action {
                Action::Limit(l) => Action::Limit(l.clone()),
                Action::Probability(p) => Action::Probability(*p),
                Action::Adaptive(a) => Action::Adaptive(Arc::clone(a)),
                Action::AtLeast {
                    threshold,
                    lower_bound,
                    bound_attributes,
                } => Action::AtLeast {
                    threshold: *threshold,
                    lower_bound: lower_bound.clone(),
                    bound_attributes: bound_attributes.clone(),
                },
            },
            floor: self.floor.clone(),
            attributes: self.attributes.clone(),
            counters: Arc::clone(&self.counters),
        }
    }
}

impl<C> Action<C> {
    /// Its own limiter, handed over by rule identity on a reload: a limit's, or a lower
    /// bound's (an adaptive policy's cap goes with its estimate instead).
    fn limiter(&self) -> Option<&RuleLimiter<C>> {
        match self {
            Action::Limit(l) | Action::AtLeast { lower_bound: l, .. } => Some(l),
            Action::Probability(_) | Action::Adaptive(_) => None,
        }
    }
}

impl<C: Clock> Compiled<C> {
    /// Whether it has a limiter of its own (a limit or a lower bound).
    fn limits(&self) -> bool {
        self.action.limiter().is_some()
    }

    /// Whether `other` is the same rule (by name, or both the default).
    fn same_identity(&self, other: &Compiled<C>) -> bool {
        self.is_default == other.is_default && self.name == other.name
    }

    /// Whether one of its local limiters holds admissions in its current window.
    fn holds_window(&self) -> bool {
        let used = |l: &RuleLimiter<C>| l.local().is_some_and(|l| l.used() > 0);
        // An adaptive rule's cap is shared with its successor of the same limit, so it
        // is never kept aside.
        self.action
            .limiter()
            .into_iter()
            .chain(self.floor.as_ref())
            .any(used)
    }
}

impl<C: Clock + Clone> RuleSet<C> {
    /// Compiles `service`'s settings, reusing `previous`'s limiters where a rule (by
    /// name, or position when unnamed), a floor (by its rule) or the cap's pool kept its
    /// limit, and carrying what was used in the current window over where it changed
    /// (see [`RuleLimiter::build`]), with the [`Handover`]s to settle once the new set
    /// is published and no decision holds `previous`. Fleet-scoped limits use `fleet`.
    pub(crate) fn compile(
        service: &ServiceConfig,
        fleet: &FleetSettings,
        clock: &C,
        previous: Option<&RuleSet<C>>,
    ) -> Result<(Self, Vec<Handover<C>>), BuildError> {
        let handovers = RefCell::new(Vec::new());
        // A rule's predecessor is the previous rule of the same name; the default's is
        // the previous default (a rule may be named "default" too). One with a limit
        // first: the current one, else a retired one.
        let find = |rule: Option<&Rule>, name: &str| {
            let p = previous?;
            let is_default = rule.is_none();
            let same = |c: &&Compiled<C>| c.is_default == is_default && c.name == name;
            let current = p.rules.iter().chain(p.default.as_ref());
            current
                .clone()
                .filter(same)
                .find(|c| c.limits())
                .or_else(|| p.retired.iter().find(same))
                .or_else(|| current.clone().find(same))
        };
        // Refused before any limiter is built (see `check::resolution`).
        if let Some((of, spec)) = below_resolution(service, clock.resolution()).next() {
            return Err(BuildError::WindowBelowResolution {
                of,
                spec,
                resolution: clock.resolution(),
            });
        }
        let cap = service.cap;
        let build = |spec: LimitSpec, key: &dyn Fn() -> String, old: Option<&RuleLimiter<C>>| {
            RuleLimiter::build(spec, key, fleet, clock, old, &handovers)
        };
        // The cap's floors and pool are handed over as a whole (`cap_handover` below),
        // not one by one: their own handovers are dropped.
        let by_cap = RefCell::new(Vec::new());
        let build_in_cap =
            |spec: LimitSpec, key: &dyn Fn() -> String, old: Option<&RuleLimiter<C>>| {
                RuleLimiter::build(spec, key, fleet, clock, old, &by_cap)
            };
        let compile = |rule: Option<&Rule>,
                       name: &str,
                       policy: Policy|
         -> Result<Compiled<C>, BuildError> {
            let old = find(rule, name);
            let action = match policy {
                Policy::Probability(p) => Action::Probability(Threshold::from_probability(p)),
                Policy::Adaptive(limit) => match old.map(|o| (&o.action, o.policy)) {
                    // The same limit: keep the estimate and the cap's window.
                    Some((Action::Adaptive(a), Policy::Adaptive(l))) if l == limit => {
                        Action::Adaptive(Arc::clone(a))
                    }
                    // The rule's counters carry over by name: start the offered
                    // count from their total.
                    _ => Action::Adaptive(Arc::new(Adaptive::new(
                        FixedWindow::with_clock(limit, clock.clone()),
                        clock.clone(),
                        old.map_or(0, |o| o.counters.snapshot().total()),
                    ))),
                },
                // A limit and a lower bound take over the predecessor's limiter
                // (either kind): what it used in this window stays spent.
                Policy::Limit(spec) => {
                    let key = || fleet_key(&service.name, name);
                    Action::Limit(
                        build(spec, &key, old.and_then(|o| o.action.limiter()))
                            .map_err(|e| e.of(|| LimitOf::Rule(name.to_owned())))?,
                    )
                }
                Policy::AtLeast {
                    probability,
                    lower_bound,
                } => {
                    let key = || fleet_key(&service.name, name);
                    Action::AtLeast {
                        threshold: Threshold::from_probability(probability),
                        lower_bound: build(lower_bound, &key, old.and_then(|o| o.action.limiter()))
                            .map_err(|e| e.of(|| LimitOf::Rule(name.to_owned())))?,
                        bound_attributes: attributes::kept_by_rule(
                            LOWERBOUND,
                            lower_bound.limit.per_second_rate(),
                            name,
                        ),
                    }
                }
            };
            let floor_permits = rule.map_or(0, |r| r.floor);
            // A floor is a fixed window in the cap's window, with the cap's scope.
            let floor = match (cap, floor_permits) {
                (Some(cap), permits @ 1..) => {
                    let limit =
                        cap.limit
                            .with_permits(permits)
                            .map_err(|error| BuildError::Limit {
                                of: LimitOf::Rule(name.to_owned()),
                                field: "floor",
                                at: cap.at,
                                error,
                            })?;
                    let spec = LimitSpec {
                        limit,
                        algorithm: Algorithm::FixedWindow,
                        ..cap
                    };
                    let key = || fleet_floor_key(&service.name, name);
                    // The floor of the rule in force first (a probability rule
                    // can have one), else the predecessor's.
                    let old_floor = previous
                        .into_iter()
                        .flat_map(|p| p.rules.iter())
                        .find(|c| !c.is_default && c.name == name)
                        .and_then(|c| c.floor.as_ref())
                        .or_else(|| old.and_then(|o| o.floor.as_ref()));
                    Some(
                        build_in_cap(spec, &key, old_floor)
                            .map_err(|e| e.of(|| LimitOf::Rule(name.to_owned())))?,
                    )
                }
                _ => None,
            };
            let (kind, param) = match policy {
                Policy::Limit(spec) => (RATELIMITING, spec.limit.per_second_rate()),
                Policy::Probability(p) | Policy::AtLeast { probability: p, .. } => {
                    (PROBABILISTIC, p)
                }
                Policy::Adaptive(limit) => (ADAPTIVE, limit.per_second_rate()),
            };
            Ok(Compiled {
                name: name.to_owned(),
                is_default: rule.is_none(),
                policy,
                action,
                floor,
                attributes: attributes::kept_by_rule(kind, param, name),
                // By name, also when the rule changed: its metric series stay
                // monotonic.
                counters: old.map_or_else(Default::default, |o| Arc::clone(&o.counters)),
            })
        };
        let rules = service
            .rules
            .iter()
            .map(|r| compile(Some(r), &r.name, r.policy))
            .collect::<Result<Vec<_>, _>>()?;
        let default = service
            .policy
            .map(|p| compile(None, DEFAULT_RULE, p))
            .transpose()?;
        let shared = match service.cap {
            Some(cap) => {
                let cap_error = |error| BuildError::Limit {
                    of: LimitOf::Cap,
                    field: "",
                    at: cap.at,
                    error,
                };
                let floors: u32 = service.rules.iter().map(|r| r.floor).sum();
                match cap.limit.permits().checked_sub(floors) {
                    Some(0) => None,
                    Some(permits) => {
                        let spec = LimitSpec {
                            limit: cap.limit.with_permits(permits).map_err(cap_error)?,
                            ..cap
                        };
                        let key = || fleet_cap_key(&service.name);
                        Some(
                            build_in_cap(spec, &key, previous.and_then(|p| p.shared.as_ref()))
                                .map_err(|e| e.of(|| LimitOf::Cap))?,
                        )
                    }
                    None => return Err(cap_error(LimitError::ZeroPermits)),
                }
            }
            None => None,
        };
        drop(by_cap);
        if let Some(previous) = previous {
            // The cap as a whole: what the old floors and pool used in this window stays
            // spent, also where a floor was removed, added or resized; and what they
            // admit during the swap is spread into the new ones, closed until then.
            let old: Vec<(&LocalRule<C>, Snapshot)> = floors(&previous.rules)
                .chain(previous.shared.as_ref())
                .filter_map(RuleLimiter::local)
                .map(|l| (l, l.snapshot()))
                .collect();
            let was: u64 = old.iter().map(|(_, s)| s.used).sum();
            let limits: Vec<&LocalRule<C>> = shared
                .iter()
                .chain(floors(&rules))
                .filter_map(RuleLimiter::local)
                .collect();
            spread(was, &limits);
            handovers.borrow_mut().extend(cap_handover(&old, &limits));
        }
        let retired = match previous {
            None => Vec::new(),
            Some(previous) => {
                let mut retired: Vec<Compiled<C>> = Vec::new();
                let candidates = previous
                    .rules
                    .iter()
                    .chain(previous.default.as_ref())
                    .chain(&previous.retired);
                for c in candidates {
                    let kept_on = rules
                        .iter()
                        .chain(default.as_ref())
                        .chain(&retired)
                        .any(|n| n.limits() && n.same_identity(c));
                    if c.limits() && !kept_on && c.holds_window() {
                        retired.push(c.clone());
                    }
                }
                retired
            }
        };
        let set = Self {
            remote_parents: service.remote_parents,
            rules,
            matchers: Matchers::new(&service.rules),
            default,
            shared,
            retired,
            cap: service.cap,
            unmatched: previous.map_or_else(Default::default, |p| Arc::clone(&p.unmatched)),
        };
        Ok((set, handovers.into_inner()))
    }
}

impl<C: Clock> RuleSet<C> {
    /// The decision for a span this process decides (a root, or a capped remote
    /// parent). The reject path allocates nothing.
    #[inline]
    pub(crate) fn decide(
        &self,
        origin: Origin,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        parent_state: &TraceState,
    ) -> SamplingResult {
        let chosen = self
            .matchers
            .first_match(origin, name, kind, attributes)
            .map(|i| &self.rules[i])
            .or(self.default.as_ref());
        let Some(chosen) = chosen else {
            self.unmatched
                .record(Event::dropped(DropReason::NoRule, origin.into()));
            return drop_span(parent_state);
        };
        // A limit's keep has no known probability: `th` goes. A probability's keep
        // carries its threshold (raised to a capped remote parent's, never lowered).
        let second_stage = origin == Origin::Remote;
        let mut attributes = &chosen.attributes;
        let kept = match &chosen.action {
            Action::Limit(l) => l.try_acquire().then_some(None),
            Action::Probability(threshold) => {
                match decide_consistent(*threshold, trace_id, parent_state, second_stage) {
                    Verdict::Keep(kept) => Some(Some(kept)),
                    Verdict::Drop => None,
                }
            }
            Action::AtLeast {
                threshold,
                lower_bound,
                bound_attributes,
            } => match decide_consistent(*threshold, trace_id, parent_state, second_stage) {
                // Kept by probability: it also spends a permit of the lower bound if one
                // is left, so the bound adds traces only while the probability keeps
                // fewer than it.
                Verdict::Keep(kept) => {
                    let _ = lower_bound.try_acquire();
                    Some(Some(kept))
                }
                // Refused by probability: kept like a rate-limited trace if the bound
                // admits it (no `th`: it was not sampled at the rule's probability).
                Verdict::Drop if lower_bound.try_acquire() => {
                    attributes = bound_attributes;
                    Some(None)
                }
                Verdict::Drop => None,
            },
            Action::Adaptive(adaptive) => {
                // Every decision of this rule was offered to it.
                let threshold = adaptive.threshold(|| chosen.counters.snapshot().total());
                match decide_consistent(threshold, trace_id, parent_state, second_stage) {
                    Verdict::Keep(kept) if adaptive.admit() => Some(Some(kept)),
                    Verdict::Keep(_) => {
                        chosen
                            .counters
                            .record(Event::dropped(DropReason::RateLimit, origin.into()));
                        return drop_span(parent_state);
                    }
                    Verdict::Drop => None,
                }
            }
        };
        let origin = origin.into();
        let Some(consistent) = kept else {
            let refusal = match chosen.action {
                Action::Limit(_) => DropReason::RateLimit,
                // A lower bound only adds to what the probability keeps: the refusal
                // is the probability's.
                Action::Probability(_) | Action::Adaptive(_) | Action::AtLeast { .. } => {
                    DropReason::Probability
                }
            };
            chosen.counters.record(Event::dropped(refusal, origin));
            return drop_span(parent_state);
        };
        // The cap: the rule's reserved floor first, then the shared pool.
        if self.cap.is_some()
            && !(chosen.floor.as_ref().is_some_and(|f| f.try_acquire())
                || self.shared.as_ref().is_some_and(|s| s.try_acquire()))
        {
            chosen
                .counters
                .record(Event::dropped(DropReason::ServiceCap, origin));
            return drop_span(parent_state);
        }
        chosen.counters.record(Event::kept(origin));
        SamplingResult {
            decision: SamplingDecision::RecordAndSample,
            attributes: attributes.clone(),
            trace_state: match consistent {
                Some(kept) => kept.trace_state(parent_state),
                None => erase_threshold(parent_state),
            },
        }
    }

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
                    Action::Adaptive(a) => a.window_fill(),
                    Action::Probability(_) => None,
                },
                floor: c.floor.as_ref().and_then(fill),
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

    use super::*;
    use crate::config::model::SamplingConfig;
    use crate::stats::ParentOrigin;
    use crate::ManualClock;

    /// A rule set of `toml`'s default for a service it does not list, on `clock`.
    fn compiled(toml: &str, clock: &ManualClock) -> RuleSet<ManualClock> {
        let config = SamplingConfig::from_toml_str(toml, "t.toml").unwrap();
        RuleSet::compile(&config.service("svc"), &config.fleet, clock, None)
            .unwrap()
            .0
    }

    /// A floor removed by a reload while a decision still holding the old rules admits
    /// through it: that late admission is spread into the new cap (closed until then),
    /// so the cap's window keeps at most its limit. Before, the new shared pool gave
    /// out the permit again.
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
        // During the swap: the old floor admits twice more, the new pool refuses.
        assert!(old_floor.try_acquire() && old_floor.try_acquire());
        assert!(!pool.try_acquire());
        handovers.iter().for_each(Handover::settle);
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
