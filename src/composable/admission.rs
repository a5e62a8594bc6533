//! `Admission` (ours): a last word on a span the threshold keeps, taken by the
//! [`CompositeSampler`](crate::CompositeSampler) after its comparison. What lets
//! [`ComposableRateLimiting`](crate::ComposableRateLimiting) hold a hard cap now that an
//! intent is made without the trace id (and so without the randomness the comparison
//! reads).

use std::fmt;
use std::sync::Arc;

use crate::stats::ParentOrigin;

/// Told each decision on a span its intent has a threshold for, after the threshold has
/// been compared with the randomness: `kept` is that comparison's result. Returns
/// whether the span is kept: never `true` when `kept` is `false`. Not in the
/// specification, and not public: an intent carries one only from this crate's
/// composables, and the built-in decorators pass it on with the intent (as a user's
/// decorator does when it changes its delegate's intent rather than build a new one).
pub(crate) trait Admission: fmt::Debug + Send + Sync {
    /// The final keep (`true`) or drop of a span the threshold kept (`kept`) or dropped,
    /// under a parent of `origin`.
    fn admit(&self, kept: bool, origin: ParentOrigin) -> bool;
}

/// Two admissions, the delegate's first: a span is kept only if both admit it (for a
/// rate limiter over another).
#[derive(Debug)]
pub(crate) struct Both(pub(crate) Arc<dyn Admission>, pub(crate) Arc<dyn Admission>);

impl Admission for Both {
    fn admit(&self, kept: bool, origin: ParentOrigin) -> bool {
        let kept = self.0.admit(kept, origin);
        self.1.admit(kept, origin)
    }
}
