//! The public snapshot types: what a sampler decided so far.
//!
//! A snapshot is built by summing per-thread counters. It is exact when no decision runs
//! while it is taken; otherwise each counter is individually exact (it holds every
//! decision that finished before it was read, and a part of none) but the counters are
//! not read at one instant, so, for example, `kept() + dropped()` may include a decision
//! that a later counter of the same snapshot does not.

use crate::limiter::FairStats;

/// Where the parent of a decided span came from: the semantic conventions'
/// `otel.span.parent.origin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParentOrigin {
    /// No valid parent: a root (`none`).
    Root = 0,
    /// A parent in this process (`local`).
    Local = 1,
    /// A parent from another process (`remote`).
    Remote = 2,
}

impl ParentOrigin {
    /// Every origin.
    pub const ALL: [ParentOrigin; 3] = [
        ParentOrigin::Root,
        ParentOrigin::Local,
        ParentOrigin::Remote,
    ];

    /// The value of `otel.span.parent.origin`: `none`, `local` or `remote`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ParentOrigin::Root => "none",
            ParentOrigin::Local => "local",
            ParentOrigin::Remote => "remote",
        }
    }
}

/// Why a span was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// The limiter (of the sampler, or of the matching rule) had no permit left
    /// (`rate_limit`).
    RateLimit = 0,
    /// The rule admitted it but the service's cap was full (`service_cap`).
    ServiceCap = 1,
    /// The rule's probability left it out (`probability`).
    Probability = 2,
    /// No rule matched and the service has no default (`no_rule`).
    NoRule = 3,
    /// It followed an unsampled parent (`parent`).
    Parent = 4,
}

impl DropReason {
    /// Every reason.
    pub const ALL: [DropReason; 5] = [
        DropReason::RateLimit,
        DropReason::ServiceCap,
        DropReason::Probability,
        DropReason::NoRule,
        DropReason::Parent,
    ];

    /// The value of the `otel_rate_sampler.reason` metric attribute.
    pub const fn as_str(self) -> &'static str {
        match self {
            DropReason::RateLimit => "rate_limit",
            DropReason::ServiceCap => "service_cap",
            DropReason::Probability => "probability",
            DropReason::NoRule => "no_rule",
            DropReason::Parent => "parent",
        }
    }

    /// The origins a drop for this reason can have: a parent drop has a parent; the
    /// others are decisions the sampler makes itself, for roots and (with
    /// [`RemoteParents::Cap`](crate::RemoteParents::Cap)) sampled remote parents.
    pub const fn origins(self) -> &'static [ParentOrigin] {
        match self {
            DropReason::Parent => &[ParentOrigin::Local, ParentOrigin::Remote],
            _ => &[ParentOrigin::Root, ParentOrigin::Remote],
        }
    }
}

/// Kept (row 0) and each [`DropReason`] (rows 1..).
pub(crate) const OUTCOMES: usize = 1 + DropReason::ALL.len();

/// Decisions counted so far: kept by parent origin, dropped by reason and origin.
///
/// # Snapshot
///
/// Exact when no decision runs while the snapshot is taken; otherwise each counter is
/// individually exact (every decision that finished before it was read, a part of none),
/// but the counters are not read at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecisionStats {
    /// `[outcome][origin]`: outcome 0 kept, then the drop reasons.
    grid: [[u64; 3]; OUTCOMES],
}

impl DecisionStats {
    pub(crate) const fn from_grid(grid: [[u64; 3]; OUTCOMES]) -> Self {
        Self { grid }
    }

    /// Spans kept (`RECORD_AND_SAMPLE`).
    pub fn kept(&self) -> u64 {
        self.grid[0].iter().sum()
    }

    /// Spans dropped (`DROP`).
    pub fn dropped(&self) -> u64 {
        self.grid[1..].iter().flatten().sum()
    }

    /// Every decision.
    pub fn total(&self) -> u64 {
        self.kept() + self.dropped()
    }

    /// Spans kept whose parent had `origin` (roots: [`ParentOrigin::Root`]).
    pub fn kept_from(&self, origin: ParentOrigin) -> u64 {
        self.grid[0][origin as usize]
    }

    /// Spans dropped for `reason`.
    pub fn dropped_for(&self, reason: DropReason) -> u64 {
        self.grid[reason as usize + 1].iter().sum()
    }

    /// Spans dropped for `reason` whose parent had `origin`.
    pub fn dropped_for_from(&self, reason: DropReason, origin: ParentOrigin) -> u64 {
        self.grid[reason as usize + 1][origin as usize]
    }

    /// Every possible (reason, origin) pair with its count, zero counts included; reason
    /// `None` is kept. The rows the `otel_rate_sampler.decisions` metric reports.
    pub fn iter(&self) -> impl Iterator<Item = (Option<DropReason>, ParentOrigin, u64)> + '_ {
        let kept = ParentOrigin::ALL
            .into_iter()
            .map(|origin| (None, origin, self.kept_from(origin)));
        let dropped = DropReason::ALL.into_iter().flat_map(move |reason| {
            reason
                .origins()
                .iter()
                .map(move |&origin| (Some(reason), origin, self.dropped_for_from(reason, origin)))
        });
        kept.chain(dropped)
    }

    /// The sum of two snapshots.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // the rule-based totals
    pub(crate) fn merged(mut self, other: &DecisionStats) -> DecisionStats {
        for (mine, theirs) in self
            .grid
            .iter_mut()
            .flatten()
            .zip(other.grid.iter().flatten())
        {
            *mine = mine.wrapping_add(*theirs);
        }
        self
    }
}

/// How full a limiter's current window is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WindowFill {
    /// Admissions counted in the current window (for the sliding log, in the last
    /// window's length), as [`RateLimiter::count_in_window`](crate::RateLimiter::count_in_window)
    /// reads it.
    pub used: u64,
    /// The permits per window.
    pub permits: u32,
}

/// What a [`RateLimitingSampler`](crate::RateLimitingSampler) decided so far: see
/// [`DecisionStats`] for how exact a snapshot is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SamplerStats {
    /// Every decision, by outcome, reason and parent origin (all zero if counting was
    /// turned off with
    /// [`count_decisions(false)`](crate::RateLimitingSamplerBuilder::count_decisions)).
    pub decisions: DecisionStats,
    /// The limiter's current window (`None` if the limiter cannot tell).
    pub window: Option<WindowFill>,
    /// With `fair_by`: the keys held and the overflow key's count.
    pub fair: Option<FairStats>,
}

/// One rule's decisions in a [`RuleBasedStats`].
#[cfg(feature = "config")]
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleStats {
    /// The rule's name (`default` for the default; unnamed rules are named by position).
    pub name: String,
    /// The decisions this rule made (the spans it matched).
    pub decisions: DecisionStats,
    /// The rule limiter's current window (`None` for a probability).
    pub window: Option<WindowFill>,
    /// The current window of the rule's floor in the service cap, if it has one.
    pub floor: Option<WindowFill>,
    /// With `fair_by` on the rule's limit: its keys and overflow count.
    pub fair: Option<FairStats>,
}

/// The service cap in a [`RuleBasedStats`].
#[cfg(feature = "config")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CapStats {
    /// Spans a rule admitted and the cap refused (the sum of the rules'
    /// [`DropReason::ServiceCap`]).
    pub dropped: u64,
    /// The cap's current window: the floors' and the shared pool's admissions, out of the
    /// cap's permits.
    pub window: WindowFill,
    /// With `fair_by` on the cap: its shared pool's keys and overflow count.
    pub fair: Option<FairStats>,
}

/// Reloads of a [`RuleBasedSampler`](crate::RuleBasedSampler).
#[cfg(feature = "config")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReloadStats {
    /// Reloads that replaced the rules.
    pub succeeded: u64,
    /// Reloads that failed (the file did not load, or a limiter could not be built);
    /// the rules in force stayed.
    pub failed: u64,
}

/// What a [`RuleBasedSampler`](crate::RuleBasedSampler) decided so far, per rule: see
/// [`DecisionStats`] for how exact a snapshot is.
///
/// A rule's counters live as long as a rule of that name does: they carry over reloads
/// (also when the rule's limit changes), and go when a reload removes the rule.
#[cfg(feature = "config")]
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleBasedStats {
    /// The service whose rules apply.
    pub service: String,
    /// The rules in force, in order, the default (if any) last.
    pub rules: Vec<RuleStats>,
    /// Decisions no rule made: spans that followed their parent, and spans no rule
    /// matched when the service has no default.
    pub unmatched: DecisionStats,
    /// The service cap, if the service has one.
    pub cap: Option<CapStats>,
    /// The rule set in force: 0 for the one the sampler was built with, one more for each
    /// successful reload.
    pub generation: u64,
    /// Reloads so far.
    pub reloads: ReloadStats,
}

#[cfg(feature = "config")]
impl RuleBasedStats {
    /// Every decision: the rules' and the unmatched ones.
    pub fn total(&self) -> DecisionStats {
        self.rules
            .iter()
            .fold(self.unmatched, |sum, rule| sum.merged(&rule.decisions))
    }

    /// The rule named `name`.
    pub fn rule(&self, name: &str) -> Option<&RuleStats> {
        self.rules.iter().find(|r| r.name == name)
    }
}
