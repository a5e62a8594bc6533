//! A rule, the policy it applies, and the limit it enforces with who shares it.

use opentelemetry::trace::SpanKind;

use crate::config::error::Pos;
use crate::config::model::FairSpec;
use crate::limit::Limit;
use crate::limiter::Algorithm;
use crate::pattern::Pattern;
use crate::sampler::Origin;

/// A limit, the algorithm that enforces it and who shares it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LimitSpec {
    pub(crate) limit: Limit,
    pub(crate) algorithm: Algorithm,
    pub(crate) scope: Scope,
    /// Where the file sets the window (`window`, else `rate` or `limit`; 0:0 if nowhere),
    /// for the errors found when the sampler is built.
    pub(crate) at: Pos,
    /// `fair_by` (with `max_keys`): fair shares of the limit per key; `None`: a plain
    /// limit.
    pub(crate) fair: Option<FairSpec>,
}

impl LimitSpec {
    /// Whether every replica shares it through Redis.
    pub(crate) fn is_fleet(&self) -> bool {
        self.scope == Scope::Fleet
    }

    /// A limit this process enforces on its own.
    pub(crate) const fn local(limit: Limit, algorithm: Algorithm) -> Self {
        Self {
            limit,
            algorithm,
            scope: Scope::Local,
            at: Pos { line: 0, column: 0 },
            fair: None,
        }
    }
}

/// Who shares a limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Each process keeps its own N per window.
    #[default]
    Local,
    /// Every replica shares one N per fleet window, through Redis (a fixed window).
    Fleet,
}

/// The fleet key of a service's rule (`rule` = `"default"` for its own policy).
pub(crate) fn fleet_key(service: &str, rule: &str) -> String {
    format!("{service}:{rule}")
}

/// The fleet key of a service's cap.
pub(crate) fn fleet_cap_key(service: &str) -> String {
    format!("{service}:cap")
}

/// The fleet key of a rule's floor in a fleet-scoped cap.
pub(crate) fn fleet_floor_key(service: &str, rule: &str) -> String {
    format!("{service}:cap:{rule}")
}

/// What a rule (or a default) does with the spans it matches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Policy {
    Limit(LimitSpec),
    Probability(f64),
    /// A consistent probability adapted each window to keep about, and at most, this
    /// limit (local to each process).
    Adaptive(Limit),
    /// A consistent probability, but at least `lower_bound` traces (Jaeger's
    /// guaranteed-throughput sampler): a trace the probability keeps also spends a
    /// permit of the lower bound's limiter when one is left; a trace it refuses is kept
    /// if that limiter admits it. The lower bound is a local limit.
    AtLeast {
        probability: f64,
        lower_bound: LimitSpec,
    },
}

impl Policy {
    /// Whether it is a limit every replica shares through Redis (only a limit can be).
    pub(crate) fn is_fleet(&self) -> bool {
        matches!(self, Policy::Limit(spec) if spec.is_fleet())
    }

    /// The limit this policy's own limiter enforces (a limit's, or a lower bound's), if
    /// it has one; an adaptive policy's cap is not one of these (it is shared with the
    /// adaptive estimate, not handed over).
    pub(crate) fn limiter(&self) -> Option<LimitSpec> {
        match *self {
            Policy::Limit(spec) => Some(spec),
            Policy::AtLeast { lower_bound, .. } => Some(lower_bound),
            Policy::Probability(_) | Policy::Adaptive(_) => None,
        }
    }
}

/// A matching rule.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rule {
    pub(crate) name: String,
    /// Whether the file named it (else `name` is its position, `rule-N`): a reload
    /// matches a named rule by name, an unnamed one by what it matches.
    pub(crate) named: bool,
    pub(crate) span_name: Option<Pattern>,
    pub(crate) kind: Option<SpanKind>,
    pub(crate) parent: Option<Origin>,
    pub(crate) attributes: Vec<(String, Pattern)>,
    pub(crate) policy: Policy,
    /// Permits reserved for this rule in each window of the service cap.
    pub(crate) floor: u32,
    /// Whether a service has it from the file default's rules.
    pub(crate) inherited: bool,
}

impl Rule {
    /// Whether it has no condition at all, and so matches every span.
    pub(crate) fn matches_everything(&self) -> bool {
        self.span_name.is_none()
            && self.kind.is_none()
            && self.parent.is_none()
            && self.attributes.is_empty()
    }
}
