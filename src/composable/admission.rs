//! `Admission` (ours): a last word on a span the threshold keeps, taken by the
//! [`CompositeSampler`](crate::CompositeSampler) after its comparison. What lets
//! [`ComposableRateLimiting`](crate::ComposableRateLimiting) hold a hard cap now that an
//! intent is made without the trace id (and so without the randomness the comparison
//! reads).

use std::fmt;
use std::sync::Arc;

use crate::stats::ParentOrigin;

/// Told each decision on a span its intent has a threshold for, after the threshold has
/// been compared with the randomness: `kept` is that comparison's result, `ticket` what
/// the admission gave the intent (for a rate limiter, the clock reading its threshold
/// was paced at). Returns whether the span is kept: never `true` when `kept` is `false`.
/// Not in the specification, and not public: an intent carries one only from this
/// crate's composables, and the built-in decorators pass it on with the intent (as a
/// user's decorator does when it changes its delegate's intent rather than build a new
/// one).
pub(crate) trait Admission: fmt::Debug + Send + Sync {
    /// The final keep (`true`) or drop of a span the threshold kept (`kept`) or dropped,
    /// under a parent of `origin`.
    fn admit(&self, kept: bool, ticket: u64, origin: ParentOrigin) -> bool;
}

/// An admission with the ticket it gave one intent, borrowed from the sampler that
/// made the intent for as long as the intent lives (the call of the
/// [`CompositeSampler`](crate::CompositeSampler) that asked for it): carrying it writes
/// nothing shared (no reference count).
#[derive(Clone, Debug)]
pub(crate) enum Ticketed<'a> {
    /// One admission, and its ticket.
    One(&'a dyn Admission, u64),
    /// Two, the delegate's first: a span is kept only if both admit it (for a rate
    /// limiter over another). Each keeps its own ticket. Shared, so that cloning an
    /// intent does not allocate.
    Both(Arc<(Ticketed<'a>, Ticketed<'a>)>),
}

impl Ticketed<'_> {
    /// The admission's answer for this intent's span.
    #[inline]
    pub(crate) fn admit(&self, kept: bool, origin: ParentOrigin) -> bool {
        match self {
            Self::One(admission, ticket) => admission.admit(kept, *ticket, origin),
            // Out of line, so that the one-admission case inlines (a recursive
            // function would not).
            Self::Both(both) => admit_both(both, kept, origin),
        }
    }
}

/// The delegate's admission, then ours.
#[inline(never)]
fn admit_both(both: &(Ticketed<'_>, Ticketed<'_>), kept: bool, origin: ParentOrigin) -> bool {
    let kept = both.0.admit(kept, origin);
    both.1.admit(kept, origin)
}
