//! A service's rules compiled for sampling: a limiter per rule (never per attribute
//! value), the cap split into per-rule floors and a shared pool, and the attributes
//! recorded on kept spans built once.

use std::sync::Arc;

use opentelemetry::trace::{SpanKind, TraceId, TraceState};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult};

use super::matcher::Matchers;
use super::model::{
    fleet_cap_key, fleet_floor_key, fleet_key, FleetSettings, LimitSpec, Policy, Rule,
    ServiceConfig,
};
use super::rule_limiter::{BuildError, RuleLimiter};
use crate::clock::Clock;
use crate::limit::LimitError;
use crate::limiter::{Algorithm, RateLimiter};
use crate::sampler::attributes::{self, PROBABILISTIC, RATELIMITING};
use crate::sampler::{drop_span, erase_threshold, Origin, RemoteParents};
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
    cap: Option<LimitSpec>,
    /// Decisions no rule made (followed parents, no match without a default); kept
    /// across reloads.
    pub(crate) unmatched: Arc<Counters>,
}

struct Compiled<C> {
    name: String,
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
    /// Keep iff the trace id's low 63 bits are below this.
    Probability(u64),
}

impl<C: Clock + Clone> RuleSet<C> {
    /// Compiles `service`'s settings, reusing `previous`'s limiters where a rule (by
    /// name) kept its limit, and carrying the current window's count over where it
    /// changed (see [`RuleLimiter::build`]). Fleet-scoped limits use `fleet`.
    pub(crate) fn compile(
        service: &ServiceConfig,
        fleet: &FleetSettings,
        clock: &C,
        previous: Option<&RuleSet<C>>,
    ) -> Result<Self, BuildError> {
        // A rule's predecessor is the previous rule of the same name; the default's is
        // the previous default (a rule may be named "default" too).
        let find = |rule: Option<&Rule>, name: &str| {
            previous.and_then(|p| match rule {
                Some(_) => p.rules.iter().find(|c| c.name == name),
                None => p.default.as_ref(),
            })
        };
        let cap = service.cap;
        let build = |spec: LimitSpec, key: &dyn Fn() -> String, old: Option<&RuleLimiter<C>>| {
            RuleLimiter::build(spec, key, fleet, clock, old)
        };
        let compile =
            |rule: Option<&Rule>, name: &str, policy: Policy| -> Result<Compiled<C>, BuildError> {
                let old = find(rule, name);
                let action = match policy {
                    Policy::Probability(p) => Action::Probability((p * 2f64.powi(63)) as u64),
                    Policy::Limit(spec) => {
                        let old_limiter = old.and_then(|o| match (&o.action, o.policy) {
                            (Action::Limit(l), Policy::Limit(_)) => Some(l),
                            _ => None,
                        });
                        let key = || fleet_key(&service.name, name);
                        Action::Limit(build(spec, &key, old_limiter)?)
                    }
                };
                let floor_permits = rule.map_or(0, |r| r.floor);
                // A floor is a fixed window in the cap's window, with the cap's scope.
                let floor = match (cap, floor_permits) {
                    (Some(cap), permits @ 1..) => {
                        let spec = LimitSpec {
                            limit: cap.limit.with_permits(permits)?,
                            algorithm: Algorithm::FixedWindow,
                            scope: cap.scope,
                        };
                        let key = || fleet_floor_key(&service.name, name);
                        Some(build(spec, &key, old.and_then(|o| o.floor.as_ref()))?)
                    }
                    _ => None,
                };
                let (kind, param) = match policy {
                    Policy::Limit(spec) => (RATELIMITING, spec.limit.per_second_rate()),
                    Policy::Probability(p) => (PROBABILISTIC, p),
                };
                Ok(Compiled {
                    name: name.to_owned(),
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
                let floors: u32 = service.rules.iter().map(|r| r.floor).sum();
                match cap.limit.permits().checked_sub(floors) {
                    Some(0) => None,
                    Some(permits) => {
                        let spec = LimitSpec {
                            limit: cap.limit.with_permits(permits)?,
                            ..cap
                        };
                        let key = || fleet_cap_key(&service.name);
                        Some(build(spec, &key, previous.and_then(|p| p.shared.as_ref()))?)
                    }
                    None => return Err(LimitError::ZeroPermits.into()),
                }
            }
            None => None,
        };
        Ok(Self {
            remote_parents: service.remote_parents,
            rules,
            matchers: Matchers::new(&service.rules),
            default,
            shared,
            cap: service.cap,
            unmatched: previous.map_or_else(Default::default, |p| Arc::clone(&p.unmatched)),
        })
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
        let origin = origin.into();
        let Some(chosen) = chosen else {
            self.unmatched
                .record(Event::dropped(DropReason::NoRule, origin));
            return drop_span(parent_state);
        };
        let (admitted, refusal) = match &chosen.action {
            Action::Limit(l) => (l.try_acquire(), DropReason::RateLimit),
            Action::Probability(threshold) => {
                let low = u128::from_be_bytes(trace_id.to_bytes()) as u64;
                ((low >> 1) < *threshold, DropReason::Probability)
            }
        };
        if !admitted {
            chosen.counters.record(Event::dropped(refusal, origin));
            return drop_span(parent_state);
        }
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
            trace_state: erase_threshold(parent_state),
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
                Action::Probability(_) => None,
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
        let rules = RuleSet::compile(&service, &config.fleet, &ManualClock::new(), None).unwrap();
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
