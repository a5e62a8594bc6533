//! A service's rules compiled for sampling: a limiter per rule (never per attribute
//! value), the cap split into per-rule floors and a shared pool, and the attributes
//! recorded on kept spans built once.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{SpanKind, TraceId, TraceState};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult};

use super::handover::{spread, Handover, LocalRule};
use super::matcher::Matchers;
use super::model::{
    fleet_cap_key, fleet_floor_key, fleet_key, FleetSettings, LimitSpec, Policy, Rule, Scope,
    ServiceConfig,
};
use super::rule_limiter::{BuildError, LimitOf, RuleLimiter};
use crate::clock::Clock;
use crate::limit::LimitError;
use crate::limiter::{Algorithm, FixedWindow, RateLimiter};
use crate::sampler::attributes::{self, ADAPTIVE, PROBABILISTIC, RATELIMITING};
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
            },
            floor: self.floor.clone(),
            attributes: self.attributes.clone(),
            counters: Arc::clone(&self.counters),
        }
    }
}

impl<C: Clock> Compiled<C> {
    /// Whether it has a limit (not a probability).
    fn limits(&self) -> bool {
        matches!(self.action, Action::Limit(_))
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
        let action = match &self.action {
            Action::Limit(l) => Some(l),
            Action::Probability(_) | Action::Adaptive(_) => None,
        };
        action.into_iter().chain(self.floor.as_ref()).any(used)
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
        below_resolution(service, clock.resolution())?;
        let cap = service.cap;
        let build = |spec: LimitSpec, key: &dyn Fn() -> String, old: Option<&RuleLimiter<C>>| {
            RuleLimiter::build(spec, key, fleet, clock, old, &handovers)
        };
        let compile =
            |rule: Option<&Rule>, name: &str, policy: Policy| -> Result<Compiled<C>, BuildError> {
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
                    Policy::Limit(spec) => {
                        let old_limiter = old.and_then(|o| match (&o.action, o.policy) {
                            (Action::Limit(l), Policy::Limit(_)) => Some(l),
                            _ => None,
                        });
                        let key = || fleet_key(&service.name, name);
                        Action::Limit(
                            build(spec, &key, old_limiter)
                                .map_err(|e| e.of(|| LimitOf::Rule(name.to_owned())))?,
                        )
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
                            build(spec, &key, old_floor)
                                .map_err(|e| e.of(|| LimitOf::Rule(name.to_owned())))?,
                        )
                    }
                    _ => None,
                };
                let (kind, param) = match policy {
                    Policy::Limit(spec) => (RATELIMITING, spec.limit.per_second_rate()),
                    Policy::Probability(p) => (PROBABILISTIC, p),
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
                            build(spec, &key, previous.and_then(|p| p.shared.as_ref()))
                                .map_err(|e| e.of(|| LimitOf::Cap))?,
                        )
                    }
                    None => return Err(cap_error(LimitError::ZeroPermits)),
                }
            }
            None => None,
        };
        if let Some(previous) = previous {
            // The cap as a whole: what the old floors and pool used in this window stays
            // spent, also where a floor was removed, added or resized.
            let used = |l: &RuleLimiter<C>| l.local().map_or(0, LocalRule::used);
            let was: u64 = floors(&previous.rules)
                .chain(previous.shared.as_ref())
                .map(used)
                .sum();
            let limits: Vec<&LocalRule<C>> = shared
                .iter()
                .chain(floors(&rules))
                .filter_map(RuleLimiter::local)
                .collect();
            spread(was, &limits);
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

/// Refuses a local limit whose window is shorter than the clock's resolution (before
/// any limiter is built): such a limiter sees whole windows go by between two readings
/// and enforces another rate (1 per 1 ms on a 4 ms clock kept 251 per second).
fn below_resolution(service: &ServiceConfig, resolution: Duration) -> Result<(), BuildError> {
    let rules = service.rules.iter().filter_map(|r| match r.policy {
        Policy::Limit(spec) => Some((LimitOf::Rule(r.name.clone()), spec)),
        Policy::Adaptive(limit) => Some((
            LimitOf::Rule(r.name.clone()),
            LimitSpec::local(limit, Algorithm::FixedWindow),
        )),
        Policy::Probability(_) => None,
    });
    let default = match service.policy {
        Some(Policy::Limit(spec)) => Some((LimitOf::Default, spec)),
        Some(Policy::Adaptive(limit)) => Some((
            LimitOf::Default,
            LimitSpec::local(limit, Algorithm::FixedWindow),
        )),
        _ => None,
    };
    let cap = service.cap.map(|spec| (LimitOf::Cap, spec));
    match rules
        .chain(default)
        .chain(cap)
        .find(|(_, spec)| spec.scope == Scope::Local && spec.limit.window() < resolution)
    {
        Some((of, spec)) => Err(BuildError::WindowBelowResolution {
            of,
            spec,
            resolution,
        }),
        None => Ok(()),
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
        let kept = match &chosen.action {
            Action::Limit(l) => l.try_acquire().then_some(None),
            Action::Probability(threshold) => {
                let second_stage = origin == Origin::Remote;
                match decide_consistent(*threshold, trace_id, parent_state, second_stage) {
                    Verdict::Keep(kept) => Some(Some(kept)),
                    Verdict::Drop => None,
                }
            }
            Action::Adaptive(adaptive) => {
                // Every decision of this rule was offered to it.
                let threshold = adaptive.threshold(|| chosen.counters.snapshot().total());
                let second_stage = origin == Origin::Remote;
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
                Action::Probability(_) | Action::Adaptive(_) => DropReason::Probability,
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
            attributes: chosen.attributes.clone(),
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
                    Action::Limit(l) => fill(l),
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
            .and_then(|c| match &c.action {
                Action::Limit(l) => l.fleet(),
                Action::Probability(_) | Action::Adaptive(_) => None,
            })
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
