//! One rule compiled: what it does with a span it matches ([`Action`]), its floor in
//! the cap, the attributes a kept span records and its decision counters.

use std::sync::Arc;

use opentelemetry::trace::SpanKind;

use crate::clock::Clock;
use crate::config::compile::fair_rule::FairRule;
use crate::config::compile::handover::Forgotten;
use crate::config::compile::local_rule::LocalRule;
use crate::config::compile::rule_limiter::RuleLimiter;
use crate::config::model::{Policy, Rule};
use crate::pattern::Pattern;
use crate::sampler::attributes::RuleAttributes;
use crate::sampler::{Adaptive, Origin, Threshold};
use crate::stats::Counters;

pub(super) struct Compiled<C> {
    pub(super) name: String,
    /// The service's default (which a rule named `default` is not).
    pub(super) is_default: bool,
    /// Whether the file named the rule (else `name` is its position).
    pub(super) named: bool,
    /// What the rule matches (`None` for the default).
    pub(super) conditions: Option<Conditions>,
    pub(super) policy: Policy,
    pub(super) action: Action<C>,
    /// `fair_by`: fair shares of its limit per key, over the limit's own limiter.
    pub(super) fair: Option<FairRule<C>>,
    /// Permits reserved for this rule in the cap.
    pub(super) floor: Option<RuleLimiter<C>>,
    /// What a kept span records.
    pub(super) attributes: RuleAttributes,
    /// This rule's decisions; the previous rule of the same name's, after a reload.
    pub(super) counters: Arc<Counters>,
}

/// What a rule matches, as written.
#[derive(Clone, PartialEq)]
pub(super) struct Conditions {
    span_name: Option<Pattern>,
    kind: Option<SpanKind>,
    parent: Option<Origin>,
    attributes: Vec<(String, Pattern)>,
}

impl Conditions {
    pub(super) fn of(rule: &Rule) -> Self {
        Self {
            span_name: rule.span_name.clone(),
            kind: rule.kind.clone(),
            parent: rule.parent,
            attributes: rule.attributes.clone(),
        }
    }
}

/// How a rule of the previous set is the same rule as one of the new set.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Identity {
    /// The same name, both named by the file (or both the default).
    Name,
    /// The same conditions, whatever the names: an unnamed rule moved by an insert, a
    /// rule named or renamed.
    Conditions,
}

pub(super) enum Action<C> {
    Limit(RuleLimiter<C>),
    /// Keep iff the trace's randomness is at least this (OTEP 235), writing `th`.
    Probability(Threshold),
    /// An adaptive probability under its own cap; shared with the previous rule set's
    /// same rule across a reload when its limit did not change. Its cap (the same
    /// limiter as the estimate's) is handed over like a limit's otherwise.
    Adaptive {
        adaptive: Arc<Adaptive<C, LocalRule<C>>>,
        cap: RuleLimiter<C>,
    },
    /// A probability (writing `th`), and a lower bound's limiter that the probability's
    /// keeps also spend and that may keep what it refuses.
    AtLeast {
        threshold: Threshold,
        lower_bound: RuleLimiter<C>,
        /// What a span kept by the lower bound alone records (the rule's `attributes`
        /// are those of a probability keep).
        bound_attributes: RuleAttributes,
    },
}

impl<C> Clone for Action<C> {
    fn clone(&self) -> Self {
        match self {
            Action::Limit(l) => Action::Limit(l.clone()),
            Action::Probability(p) => Action::Probability(*p),
            Action::Adaptive { adaptive, cap } => Action::Adaptive {
                adaptive: Arc::clone(adaptive),
                cap: cap.clone(),
            },
            Action::AtLeast {
                threshold,
                lower_bound,
                bound_attributes,
            } => Action::AtLeast {
                threshold: *threshold,
                lower_bound: lower_bound.clone(),
                bound_attributes: bound_attributes.clone(),
            },
        }
    }
}

impl<C> Clone for Compiled<C> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            is_default: self.is_default,
            named: self.named,
            conditions: self.conditions.clone(),
            policy: self.policy,
            action: self.action.clone(),
            fair: self.fair.clone(),
            floor: self.floor.clone(),
            attributes: self.attributes.clone(),
            counters: Arc::clone(&self.counters),
        }
    }
}

impl<C> Action<C> {
    /// Its own limiter, handed over by rule identity on a reload: a limit's, a lower
    /// bound's or an adaptive policy's cap.
    pub(super) fn limiter(&self) -> Option<&RuleLimiter<C>> {
        match self {
            Action::Limit(l)
            | Action::AtLeast { lower_bound: l, .. }
            | Action::Adaptive { cap: l, .. } => Some(l),
            Action::Probability(_) => None,
        }
    }
}

impl<C: Clock> Compiled<C> {
    /// Whether it has a limiter of its own (a limit or a lower bound).
    pub(super) fn limits(&self) -> bool {
        self.action.limiter().is_some()
    }

    /// Who it is, for a reload to find it again.
    pub(super) fn who(&self) -> Who<'_> {
        Who {
            name: &self.name,
            is_default: self.is_default,
            named: self.named,
            conditions: self.conditions.as_ref(),
        }
    }

    /// How this rule (of the previous set) is the same as `rule` of the new set
    /// (`None`: the default), if it is.
    pub(super) fn identity(&self, rule: Option<&Rule>) -> Option<Identity> {
        self.who().identity(rule)
    }

    /// What its lineage needs once its limiters are dropped (their windows empty): who
    /// it is and what each local limiter of it was; `None` without a local one.
    pub(super) fn forget(&self) -> Option<Tombstone> {
        let forget = |l: Option<&RuleLimiter<C>>| l.and_then(RuleLimiter::local).map(Forgotten::of);
        let (action, floor) = (forget(self.action.limiter()), forget(self.floor.as_ref()));
        (action.is_some() || floor.is_some()).then(|| Tombstone {
            name: self.name.clone(),
            is_default: self.is_default,
            named: self.named,
            conditions: self.conditions.clone(),
            action,
            floor,
        })
    }

    /// Its own local limit (a limit's, a lower bound's or an adaptive cap's) if no
    /// reload has closed it yet (its floor is the cap's handover's).
    pub(super) fn open_limit(&self) -> Option<&LocalRule<C>> {
        let local = self.action.limiter().and_then(RuleLimiter::local)?;
        (!local.is_closed()).then_some(local)
    }

    /// Whether one of its local limiters holds admissions in its current window.
    pub(super) fn holds_window(&self) -> bool {
        let used = |l: &RuleLimiter<C>| l.local().is_some_and(|l| l.used() > 0);
        self.action
            .limiter()
            .into_iter()
            .chain(self.floor.as_ref())
            .any(used)
    }
}

/// Who a rule is, for a reload to find it again: its name, whether the file named it or
/// it is the default, and what it matches.
#[derive(Clone, Copy)]
pub(super) struct Who<'a> {
    name: &'a str,
    is_default: bool,
    named: bool,
    conditions: Option<&'a Conditions>,
}

impl Who<'_> {
    /// Whether `other` is the same rule (by name, or both the default).
    pub(super) fn same(self, other: Who<'_>) -> bool {
        self.is_default == other.is_default && self.name == other.name
    }

    /// How this rule (of a previous set) is the same as `rule` of the new set (`None`:
    /// the default), if it is.
    pub(super) fn identity(self, rule: Option<&Rule>) -> Option<Identity> {
        match rule {
            None => self.is_default.then_some(Identity::Name),
            Some(_) if self.is_default => None,
            Some(r) if self.named && r.named && self.name == r.name => Some(Identity::Name),
            Some(r) => self
                .conditions
                .is_some_and(|c| *c == Conditions::of(r))
                .then_some(Identity::Conditions),
        }
    }
}

/// A rule whose limiters a reload dropped (their windows empty): who it was and what
/// each of its local limiters was, so that the rule brought back goes on its lineage.
/// A name, conditions and a few words; no limiter.
#[derive(Clone)]
pub(super) struct Tombstone {
    name: String,
    is_default: bool,
    named: bool,
    conditions: Option<Conditions>,
    /// Its action's limiter (a limit's, a lower bound's, an adaptive cap), if local.
    pub(super) action: Option<Forgotten>,
    /// Its floor's, if local.
    pub(super) floor: Option<Forgotten>,
}

impl Tombstone {
    #[cfg(all(test, not(loom)))]
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    fn who(&self) -> Who<'_> {
        Who {
            name: &self.name,
            is_default: self.is_default,
            named: self.named,
            conditions: self.conditions.as_ref(),
        }
    }
}

/// A rule of an earlier set whose identity has no limit in the current one: kept with
/// its limiters while their windows hold admissions, forgotten (a [`Tombstone`]) after.
pub(super) enum Aside<C> {
    Kept(Box<Compiled<C>>),
    Forgotten(Box<Tombstone>),
}

impl<C> Clone for Aside<C> {
    fn clone(&self) -> Self {
        match self {
            Aside::Kept(c) => Aside::Kept(Box::new(Compiled::clone(c))),
            Aside::Forgotten(t) => Aside::Forgotten(t.clone()),
        }
    }
}

/// A previous rule a new one can go on from: one in force or kept aside, or forgotten.
pub(super) enum Was<'a, C> {
    Rule(&'a Compiled<C>),
    Forgotten(&'a Tombstone),
}

impl<C> Clone for Was<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C> Copy for Was<'_, C> {}

impl<'a, C: Clock> Was<'a, C> {
    pub(super) fn of(aside: &'a Aside<C>) -> Self {
        match aside {
            Aside::Kept(c) => Was::Rule(c),
            Aside::Forgotten(t) => Was::Forgotten(t),
        }
    }

    pub(super) fn who(self) -> Who<'a> {
        match self {
            Was::Rule(c) => c.who(),
            Was::Forgotten(t) => t.who(),
        }
    }

    /// The rule, if its limiters are there.
    pub(super) fn rule(self) -> Option<&'a Compiled<C>> {
        match self {
            Was::Rule(c) => Some(c),
            Was::Forgotten(_) => None,
        }
    }

    /// What it left, if forgotten.
    pub(super) fn forgotten(self) -> Option<&'a Tombstone> {
        match self {
            Was::Rule(_) => None,
            Was::Forgotten(t) => Some(t),
        }
    }

    /// Whether it has (or had) a limiter of its own.
    pub(super) fn limits(self) -> bool {
        self.rule().is_none_or(Compiled::limits)
    }

    /// Whether the two are the same one.
    pub(super) fn is(self, other: Was<'_, C>) -> bool {
        match (self, other) {
            (Was::Rule(a), Was::Rule(b)) => std::ptr::eq(a, b),
            (Was::Forgotten(a), Was::Forgotten(b)) => std::ptr::eq(a, b),
            _ => false,
        }
    }
}
