//! [`RuleSet::compile`] in named steps: refuse windows below the clock's resolution;
//! compile each rule (its predecessor, its action, its floor); the cap's shared pool;
//! the cap handed over as a whole; the limits kept aside for rules that went away
//! (`steps/aside.rs`).

mod aside;

use std::sync::Arc;

use self::aside::{aside, going_on, pick};
use super::compiled::{Action, Compiled, Conditions, Identity, Was};
use super::{floors, RuleSet, DEFAULT_RULE};
use crate::clock::Clock;
use crate::config::check::resolution::below_resolution;
use crate::config::compile::fair_rule::FairRule;
use crate::config::compile::handover::{cap_handover, spread, Forgotten, Handover};
use crate::config::compile::local_rule::{LocalRule, Snapshot};
use crate::config::compile::matcher::Matchers;
use crate::config::compile::rule_limiter::{BuildError, RuleLimiter};
use crate::config::model::{
    fleet_cap_key, fleet_floor_key, fleet_key, FleetSettings, LimitOf, LimitSpec, Policy, Rule,
    ServiceConfig,
};
use crate::limit::LimitError;
use crate::limiter::Algorithm;
use crate::sampler::attributes::{
    RuleAttributes, ADAPTIVE, LOWERBOUND, PROBABILISTIC, RATELIMITING,
};
use crate::sampler::{Adaptive, Threshold};

impl<C: Clock + Clone> RuleSet<C> {
    /// Compiles `service`'s settings, reusing `previous`'s limiters where a rule (by
    /// name, else by what it matches: see `Build::predecessors`), a floor (by its rule)
    /// or the cap's pool kept its limit, and carrying what was used in the current window over where it changed
    /// (see [`RuleLimiter::build`]), with the [`Handover`]s that close `previous`'s
    /// replaced limiters and settle what they admitted since, to run before the new set
    /// is published. Fleet-scoped limits use `fleet`.
    pub(crate) fn compile(
        service: &ServiceConfig,
        fleet: &FleetSettings,
        clock: &C,
        previous: Option<&RuleSet<C>>,
    ) -> Result<(Self, Vec<Handover<C>>), BuildError> {
        // Refused before any limiter is built (see `check::resolution`).
        if let Some((of, spec)) = below_resolution(service, clock.resolution()).next() {
            return Err(BuildError::WindowBelowResolution {
                of,
                spec,
                resolution: clock.resolution(),
            });
        }
        let mut build = Build {
            service,
            fleet,
            clock,
            previous,
            handovers: Vec::new(),
            by_cap: Vec::new(),
        };
        let (old_rules, old_default) = build.predecessors();
        let rules = service
            .rules
            .iter()
            .zip(&old_rules)
            .map(|(r, old)| build.rule(Some(r), &r.name, r.policy, *old))
            .collect::<Result<Vec<_>, _>>()?;
        let default = service
            .policy
            .map(|p| build.rule(None, DEFAULT_RULE, p, old_default))
            .transpose()?;
        let shared = build.shared_pool()?;
        let shared_fair = build.shared_fair(shared.as_ref());
        build.hand_over_cap(&rules, shared.as_ref());
        // The limits (and forgotten ones) a rule with a limit went on from.
        let kept_on: Vec<Was<C>> = old_rules
            .iter()
            .zip(&rules)
            .chain(
                [(&old_default, default.as_ref())]
                    .into_iter()
                    .filter_map(|(old, new)| new.map(|new| (old, new))),
            )
            .filter(|(_, new)| new.limits())
            .filter_map(|(old, _)| *old)
            .collect();
        let retired = previous.map_or_else(Vec::new, |p| aside(p, &kept_on, &mut build.handovers));
        let set = Self {
            remote_parents: service.remote_parents,
            matchers: Matchers::new(&service.rules),
            rules,
            default,
            shared,
            shared_fair,
            retired,
            cap: service.cap,
            unmatched: previous.map_or_else(Default::default, |p| Arc::clone(&p.unmatched)),
        };
        Ok((set, build.handovers))
    }
}

/// Each new rule's predecessor, in rule order, and the default's.
type Predecessors<'a, C> = (Vec<Option<Was<'a, C>>>, Option<Was<'a, C>>);

/// The state of one compilation.
struct Build<'a, C> {
    service: &'a ServiceConfig,
    fleet: &'a FleetSettings,
    clock: &'a C,
    previous: Option<&'a RuleSet<C>>,
    /// The handovers to settle once the new set is published.
    handovers: Vec<Handover<C>>,
    /// The cap's floors' and pool's own handovers, dropped: the cap is handed over as a
    /// whole ([`Build::hand_over_cap`]).
    by_cap: Vec<Handover<C>>,
}

impl<'a, C: Clock + Clone> Build<'a, C> {
    /// Each new rule's predecessor, whose limiter it takes over, and the default's.
    /// Identity is by meaning, not position: first a named rule by its name (the
    /// default by being the default), then any rule left by what it matches, so
    /// inserting, reordering, naming or renaming rules hands out no second N. Each
    /// previous rule is the predecessor of one new rule at most.
    fn predecessors(&self) -> Predecessors<'a, C> {
        let rules = &self.service.rules;
        let mut found: Vec<Option<Was<'a, C>>> = vec![None; rules.len()];
        let Some(p) = self.previous else {
            return (found, None);
        };
        let mut taken: Vec<Was<'a, C>> = Vec::new();
        let default = pick(p, &mut taken, None, Identity::Name);
        for identity in [Identity::Name, Identity::Conditions] {
            for (rule, old) in rules.iter().zip(found.iter_mut()) {
                if old.is_none() {
                    *old = pick(p, &mut taken, Some(rule), identity);
                }
            }
        }
        (found, default)
    }

    /// The previous rule of the same name (the default for the default), for its
    /// decision counters: they go by name, so a rule's metric series stay monotonic.
    fn same_name(&self, rule: Option<&Rule>, name: &str) -> Option<&'a Compiled<C>> {
        let p = self.previous?;
        let is_default = rule.is_none();
        p.rules
            .iter()
            .chain(p.default.as_ref())
            .chain(p.retired.iter().filter_map(|a| Was::of(a).rule()))
            .find(|c| c.is_default == is_default && c.name == name)
    }

    /// A limiter of `spec` replacing `old`, or without one going on from `forgotten`
    /// (its lineage's limiter dropped since); its handover goes to the cap's (dropped)
    /// when `in_cap`.
    fn limiter(
        &mut self,
        spec: LimitSpec,
        key: impl FnOnce() -> String,
        old: Option<&RuleLimiter<C>>,
        forgotten: Option<&Forgotten>,
        in_cap: bool,
    ) -> Result<RuleLimiter<C>, BuildError> {
        let handovers = if in_cap {
            &mut self.by_cap
        } else {
            &mut self.handovers
        };
        let built = RuleLimiter::build(spec, key, self.fleet, self.clock, old, handovers)?;
        Ok(match (built, old) {
            (RuleLimiter::Local(local), None) => RuleLimiter::Local(going_on(local, forgotten)),
            (built, _) => built,
        })
    }

    /// The rule of `policy` named `name` (`rule` is `None` for the default), taking
    /// over `was`'s limiters, or going on from what they were when it was forgotten.
    fn rule(
        &mut self,
        rule: Option<&Rule>,
        name: &str,
        policy: Policy,
        was: Option<Was<'a, C>>,
    ) -> Result<Compiled<C>, BuildError> {
        let old = was.and_then(Was::rule);
        let forgotten = was.and_then(Was::forgotten);
        let of = || LimitOf::Rule(name.to_owned());
        let action = self
            .action(name, policy, old, forgotten.and_then(|t| t.action.as_ref()))
            .map_err(|e| e.of(of))?;
        let fair = match (policy, &action) {
            (
                Policy::Limit(LimitSpec {
                    fair: Some(spec), ..
                }),
                Action::Limit(RuleLimiter::Local(local)),
            ) => Some(FairRule::build(
                spec,
                local,
                old.and_then(|o| o.fair.as_ref()),
            )),
            _ => None,
        };
        let floor = match rule {
            Some(r) if r.floor > 0 => {
                let forgotten = forgotten.and_then(|t| t.floor.as_ref());
                self.floor(r, r.floor, old, forgotten)
                    .map_err(|e| e.of(of))?
            }
            _ => None,
        };
        let (kind, param) = match policy {
            Policy::Limit(spec) => (RATELIMITING, spec.limit.per_second_rate()),
            Policy::Probability(p) | Policy::AtLeast { probability: p, .. } => (PROBABILISTIC, p),
            Policy::Adaptive(limit) => (ADAPTIVE, limit.per_second_rate()),
        };
        Ok(Compiled {
            name: name.to_owned(),
            is_default: rule.is_none(),
            named: rule.is_some_and(|r| r.named),
            conditions: rule.map(Conditions::of),
            policy,
            action,
            fair,
            floor,
            attributes: RuleAttributes::new(kind, param, name),
            // By name, also when the rule changed: its metric series stay monotonic.
            counters: self
                .same_name(rule, name)
                .map_or_else(Default::default, |o| Arc::clone(&o.counters)),
        })
    }

    /// What the rule named `name` does with a span it matches; `old` is its predecessor,
    /// `forgotten` its lineage's limiter dropped since.
    fn action(
        &mut self,
        name: &str,
        policy: Policy,
        old: Option<&Compiled<C>>,
        forgotten: Option<&Forgotten>,
    ) -> Result<Action<C>, BuildError> {
        let service = self.service;
        let key = || fleet_key(&service.name, name);
        let old_limiter = old.and_then(|o| o.action.limiter());
        Ok(match policy {
            Policy::Probability(p) => Action::Probability(Threshold::from_probability(p)),
            Policy::Adaptive(limit) => match old.map(|o| (&o.action, o.policy)) {
                // The same limit: keep the estimate and the cap's window.
                // (Unless a reload closed its cap, setting it aside.)
                Some((adaptive @ Action::Adaptive { cap, .. }, Policy::Adaptive(l)))
                    if l == limit && cap.local().is_none_or(|c| !c.is_closed()) =>
                {
                    adaptive.clone()
                }
                // A changed one: a new estimate, and a cap that takes over the
                // predecessor's limiter (an adaptive cap, a limit or a lower bound), so
                // what it used in this window stays spent.
                _ => {
                    let local = RuleLimiter::build_local(
                        Algorithm::FixedWindow,
                        limit,
                        self.clock,
                        old_limiter,
                        &mut self.handovers,
                    );
                    let local = going_on(local, forgotten);
                    let cap = RuleLimiter::Local(local.clone());
                    Action::Adaptive {
                        adaptive: Arc::new(Adaptive::new(
                            local,
                            self.clock.clone(),
                            // The rule's counters carry over by name: start the offered
                            // count from their total.
                            old.map_or(0, |o| o.counters.snapshot().total()),
                        )),
                        cap,
                    }
                }
            },
            // A limit and a lower bound take over the predecessor's limiter (either
            // kind): what it used in this window stays spent.
            Policy::Limit(spec) => {
                Action::Limit(self.limiter(spec, key, old_limiter, forgotten, false)?)
            }
            Policy::AtLeast {
                probability,
                lower_bound,
            } => Action::AtLeast {
                threshold: Threshold::from_probability(probability),
                lower_bound: self.limiter(lower_bound, key, old_limiter, forgotten, false)?,
                bound_attributes: RuleAttributes::new(
                    LOWERBOUND,
                    lower_bound.limit.per_second_rate(),
                    name,
                ),
            },
        })
    }

    /// The floor of `permits` of `rule`: a fixed window in the cap's window, with the
    /// cap's scope (none without a cap); `forgotten`: its lineage's, dropped since.
    fn floor(
        &mut self,
        rule: &Rule,
        permits: u32,
        old: Option<&Compiled<C>>,
        forgotten: Option<&Forgotten>,
    ) -> Result<Option<RuleLimiter<C>>, BuildError> {
        let name = rule.name.as_str();
        let Some(cap) = self.service.cap else {
            return Ok(None);
        };
        let limit = cap
            .limit
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
            // A floor is the rule's own, whatever its spans' keys.
            fair: None,
            ..cap
        };
        // The floor of the same rule in force first (a probability rule can have one),
        // else the predecessor's.
        let old_floor = self
            .previous
            .into_iter()
            .flat_map(|p| p.rules.iter())
            .find(|c| c.identity(Some(rule)).is_some())
            .and_then(|c| c.floor.as_ref())
            .or_else(|| old.and_then(|o| o.floor.as_ref()));
        let service = self.service;
        self.limiter(
            spec,
            || fleet_floor_key(&service.name, name),
            old_floor,
            forgotten,
            true,
        )
        .map(Some)
    }

    /// The cap's shared pool: its permits less the floors' (none without a cap, or
    /// when the floors reserve all of it).
    fn shared_pool(&mut self) -> Result<Option<RuleLimiter<C>>, BuildError> {
        let Some(cap) = self.service.cap else {
            return Ok(None);
        };
        let cap_error = |error| BuildError::Limit {
            of: LimitOf::Cap,
            field: "",
            at: cap.at,
            error,
        };
        let floors: u32 = self.service.rules.iter().map(|r| r.floor).sum();
        let permits = match cap.limit.permits().checked_sub(floors) {
            Some(0) => return Ok(None),
            Some(permits) => permits,
            None => return Err(cap_error(LimitError::ZeroPermits)),
        };
        let spec = LimitSpec {
            limit: cap.limit.with_permits(permits).map_err(cap_error)?,
            ..cap
        };
        let old = self.previous.and_then(|p| p.shared.as_ref());
        let service = self.service;
        self.limiter(spec, || fleet_cap_key(&service.name), old, None, true)
            .map(Some)
            .map_err(|e| e.of(|| LimitOf::Cap))
    }

    /// The cap's `fair_by` over its shared pool: the previous pool's shares when the
    /// pool and the `fair_by` are unchanged (see [`FairRule::build`]).
    fn shared_fair(&self, shared: Option<&RuleLimiter<C>>) -> Option<FairRule<C>> {
        let spec = self.service.cap?.fair?;
        let local = shared?.local()?;
        let old = self.previous.and_then(|p| p.shared_fair.as_ref());
        Some(FairRule::build(spec, local, old))
    }

    /// The cap as a whole: what the old floors and pool used in this window stays
    /// spent, also where a floor was removed, added or resized; and what they admit
    /// until the handover closes the old ones is spread into the new ones.
    fn hand_over_cap(&mut self, rules: &[Compiled<C>], shared: Option<&RuleLimiter<C>>) {
        self.by_cap.clear();
        let Some(previous) = self.previous else {
            return;
        };
        let old: Vec<(&LocalRule<C>, Snapshot)> = floors(&previous.rules)
            .chain(previous.shared.as_ref())
            .filter_map(RuleLimiter::local)
            .map(|l| (l, l.snapshot()))
            .collect();
        let was: u64 = old.iter().map(|(_, s)| s.used).sum();
        let limits: Vec<&LocalRule<C>> = shared
            .into_iter()
            .chain(floors(rules))
            .filter_map(RuleLimiter::local)
            .collect();
        spread(was, &limits);
        self.handovers.extend(cap_handover(&old, &limits));
    }
}
