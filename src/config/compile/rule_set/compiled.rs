//! One rule compiled: what it does with a span it matches ([`Action`]), its floor in
//! the cap, the attributes a kept span records and its decision counters.

use std::sync::Arc;

use opentelemetry::KeyValue;

use crate::clock::Clock;
use crate::config::compile::rule_limiter::RuleLimiter;
use crate::config::model::Policy;
use crate::sampler::{Adaptive, Threshold};
use crate::stats::Counters;

pub(super) struct Compiled<C> {
    pub(super) name: String,
    /// The service's default (which a rule named `default` is not).
    pub(super) is_default: bool,
    pub(super) policy: Policy,
    pub(super) action: Action<C>,
    /// Permits reserved for this rule in the cap.
    pub(super) floor: Option<RuleLimiter<C>>,
    /// What a kept span records.
    pub(super) attributes: Vec<KeyValue>,
    /// This rule's decisions; the previous rule of the same name's, after a reload.
    pub(super) counters: Arc<Counters>,
}

pub(super) enum Action<C> {
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

impl<C> Clone for Action<C> {
    fn clone(&self) -> Self {
        match self {
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
        }
    }
}

impl<C> Clone for Compiled<C> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            is_default: self.is_default,
            policy: self.policy,
            action: self.action.clone(),
            floor: self.floor.clone(),
            attributes: self.attributes.clone(),
            counters: Arc::clone(&self.counters),
        }
    }
}

impl<C> Action<C> {
    /// Its own limiter, handed over by rule identity on a reload: a limit's, or a lower
    /// bound's (an adaptive policy's cap goes with its estimate instead).
    pub(super) fn limiter(&self) -> Option<&RuleLimiter<C>> {
        match self {
            Action::Limit(l) | Action::AtLeast { lower_bound: l, .. } => Some(l),
            Action::Probability(_) | Action::Adaptive(_) => None,
        }
    }
}

impl<C: Clock> Compiled<C> {
    /// Whether it has a limiter of its own (a limit or a lower bound).
    pub(super) fn limits(&self) -> bool {
        self.action.limiter().is_some()
    }

    /// Whether `other` is the same rule (by name, or both the default).
    pub(super) fn same_identity(&self, other: &Compiled<C>) -> bool {
        self.is_default == other.is_default && self.name == other.name
    }

    /// Whether one of its local limiters holds admissions in its current window.
    pub(super) fn holds_window(&self) -> bool {
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
