//! A limit's fair shares per key in a rule set (`fair_by`): a [`FairLimiter`] over the
//! rule's own local limiter, so that a reload's handover reads, closes and carries its
//! window as any rule's, and the span's key made as [`FairBy`](crate::FairBy) makes it.

use std::sync::Arc;

use opentelemetry::KeyValue;

use crate::clock::Clock;
use crate::config::compile::local_rule::LocalRule;
use crate::config::model::FairSpec;
use crate::limiter::{FairLimiter, FairStats, MAX_KEYS};

/// Fair shares of a rule's (or the cap's pool's) local limit per key.
pub(crate) struct FairRule<C> {
    limiter: Arc<FairLimiter<C>>,
    spec: FairSpec,
}

impl<C> Clone for FairRule<C> {
    fn clone(&self) -> Self {
        Self {
            limiter: Arc::clone(&self.limiter),
            spec: self.spec,
        }
    }
}

impl<C: Clock> FairRule<C> {
    /// The fair shares of `spec` over `local`'s limiter. On a reload, `old` itself
    /// (its keys, their estimates and this window's reserved permits kept) when it is
    /// over the very limiter `local` kept (the limit unchanged) with the same `fair_by`
    /// and `max_keys`; else new shares over `local`, learning their keys again, while
    /// `local` carries what its window used like any replaced limit: the total stays
    /// within `N` (the reserved permits of a roll are counted in `local`'s limiter, an
    /// old wrapper's before the handover froze its count).
    pub(crate) fn build(spec: FairSpec, local: &LocalRule<C>, old: Option<&FairRule<C>>) -> Self {
        if let Some(old) = old.filter(|o| o.spec == spec && o.limiter.is_over(&local.limiter)) {
            return old.clone();
        }
        // In range once read (1 to MAX_KEYS); clamped so that building cannot fail.
        let max_keys = (spec.max_keys as usize).clamp(1, MAX_KEYS);
        let limiter = match FairLimiter::over_shared(Arc::clone(&local.limiter), max_keys) {
            Ok(limiter) => limiter,
            Err(e) => unreachable!("max_keys {max_keys} is in range: {e}"),
        };
        Self {
            limiter: Arc::new(limiter),
            spec,
        }
    }

    /// A permit for a span named `name` starting with `attributes`, and its key's
    /// probability in this window; `None`: refused. A refusal writes nothing another
    /// thread writes (see [`FairLimiter`]).
    #[inline]
    pub(crate) fn acquire(&self, name: &str, attributes: &[KeyValue]) -> Option<f64> {
        let key = self.spec.by.key_of(name, attributes);
        self.limiter.acquire(key).map(|a| a.probability())
    }

    /// Its keys and overflow count.
    pub(crate) fn stats(&self) -> FairStats {
        self.limiter.stats()
    }
}
