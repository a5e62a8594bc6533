//! The permits of one decision that a later check may still refuse: a rule's, taken
//! before the service cap is asked and confirmed or released by its answer, and the
//! cap's, given back when the rule's cannot be confirmed. So a rule spends its permits
//! only on the spans kept, and the cap only on spans the rule keeps.

use crate::clock::Clock;
use crate::config::compile::local_rule::LocalRule;
use crate::limiter::Admission;

/// A rule's permit (its limit's, its lower bound's or its adaptive cap's), taken before
/// the service cap is asked ([`AnyLimiter::take`](crate::AnyLimiter::take)): confirmed
/// if the cap keeps the span, else released, so a rule spends its permits only on
/// spans kept. A fleet limiter's permit, spent on a word leased from Redis, is neither
/// confirmed nor released: it is taken.
#[must_use]
pub(crate) struct Permit<'a, C> {
    of: Option<(&'a LocalRule<C>, Admission)>,
    /// A permit the span is kept without (a lower bound's, spent by a probability's
    /// keep): confirming it may fail.
    optional: bool,
}

impl<'a, C: Clock> Permit<'a, C> {
    /// No permit taken (a probability's keep, no cap, or a fleet limiter's).
    #[inline]
    pub(crate) fn none() -> Self {
        Self {
            of: None,
            optional: false,
        }
    }

    /// A permit of the local limit `rule` to confirm, if it has one (a closed one has
    /// none); a refusal writes nothing.
    #[inline]
    pub(crate) fn take(rule: &'a LocalRule<C>) -> Option<Self> {
        rule.limiter.take().map(|a| Self {
            of: Some((rule, a)),
            optional: false,
        })
    }

    /// This permit, whose span is kept even if it cannot be confirmed.
    #[inline]
    pub(crate) fn optional(self) -> Self {
        Self {
            optional: true,
            ..self
        }
    }

    /// Makes the permit: whether the span may be kept (see
    /// [`AnyLimiter::confirm`](crate::AnyLimiter::confirm)).
    #[inline]
    pub(crate) fn confirm(&self) -> bool {
        match self.of {
            Some((rule, a)) => rule.limiter.confirm(a).is_some() || self.optional,
            None => true,
        }
    }

    /// Gives up a permit not confirmed: the span is not kept.
    pub(crate) fn release(self) {
        if let Some((rule, a)) = self.of {
            rule.limiter.release(a);
        }
    }
}

/// A permit made at once (the service cap's floor or pool, [`RuleLimiter::admit`]), to
/// give back if the rule's own permit cannot be confirmed after all. `Made(None)`: no
/// cap, or a fleet limit's (not given back).
#[must_use]
pub(crate) struct Made<'a, C>(pub(crate) Option<(&'a LocalRule<C>, Admission)>);

impl<C: Clock> Made<'_, C> {
    /// Gives the permit back ([`AnyLimiter::give_back`](crate::AnyLimiter::give_back)).
    pub(crate) fn give_back(self) {
        if let Some((rule, a)) = self.0 {
            rule.limiter.give_back(a);
        }
    }
}
