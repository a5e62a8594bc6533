//! The kinds of [`Lint`](super::Lint) and how serious each is.

/// How serious a [`Lint`](super::Lint) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The sampler works as written, but probably not as meant.
    Warning,
    /// Part of the file never takes effect, or cannot: fix it.
    Error,
}

/// What a [`Lint`](super::Lint) found. The severity of each is fixed, and given here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LintKind {
    /// Error: an earlier rule has no condition at all (it matches every span), so this
    /// rule never decides. (The loaders refuse such a file; this catches any other
    /// source of a configuration.)
    Unreachable,
    /// Error: every span this rule matches is matched by an earlier rule first (its
    /// conditions imply this rule's), so this rule never decides.
    Shadowed,
    /// Error: the rules' floors add up to more than the cap's permits; the sampler
    /// cannot be built. (The TOML loader refuses such a file; this catches any other
    /// source of a configuration.)
    FloorsOverCap,
    /// Warning: a rule's floor reserves more of the cap than the rule's own limit lets
    /// through (compared as rates); the excess is held back from the shared pool and
    /// never used.
    FloorOverLimit,
    /// Error: the floors reserve every permit of the cap, so the cap's shared pool is
    /// empty: spans decided by the service's default policy (and by rules without a
    /// floor) are never kept.
    SharedPoolEmpty,
    /// Warning: the cap's shared pool (the cap less the floors) lets through fewer than
    /// the default policy's limit (compared as rates), so spans no rule matches keep at
    /// most the pool, not the default's limit (a cap of 10 with floors of 9 keeps 1 per
    /// window for them).
    SharedPoolBelowDefault,
    /// Warning: a service's limiters take more than
    /// [`LARGE_MEMORY_BYTES`](super::LARGE_MEMORY_BYTES).
    LargeMemory,
    /// Error: a local limit's window is shorter than the resolution of the default clock
    /// ([`MonotonicClock`](crate::MonotonicClock), one kernel tick, 4 ms on most Linux
    /// systems), so [`RuleBasedSampler::new`](crate::RuleBasedSampler::new) refuses it
    /// (a limiter that sees time in steps longer than its window enforces another rate).
    /// A finer clock ([`RuleBasedSampler::with_clock`](crate::RuleBasedSampler::with_clock)
    /// with a [`PreciseClock`](crate::PreciseClock)) serves it.
    WindowBelowClock,
    /// Error: a limit divided by the replica count is out of [`Limit::per_second`](crate::Limit::per_second)'s
    /// range, so no per-replica limit expresses it. Fleet-scoped limits are never
    /// divided: they already hold for the whole fleet.
    CannotSplit,
    /// Warning: a lower bound (`at_least`) asks for more traces than the service cap
    /// lets through (compared as rates), so the cap, not the lower bound, decides how
    /// many of that rule's traces are kept when its probability keeps few.
    LowerBoundOverCap,
}

impl LintKind {
    /// The severity of this kind of lint.
    pub fn severity(self) -> Severity {
        match self {
            LintKind::FloorOverLimit
            | LintKind::SharedPoolBelowDefault
            | LintKind::LargeMemory
            | LintKind::LowerBoundOverCap => Severity::Warning,
            LintKind::Unreachable
            | LintKind::Shadowed
            | LintKind::FloorsOverCap
            | LintKind::WindowBelowClock
            | LintKind::SharedPoolEmpty
            | LintKind::CannotSplit => Severity::Error,
        }
    }
}
