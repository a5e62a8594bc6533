//! A limit's `fair_by` and `max_keys`: fair shares of the limit per key (see
//! [`FairLimiter`](crate::FairLimiter)), as a rule file sets them.

use std::sync::{Mutex, PoisonError};

use crate::limiter::DEFAULT_MAX_KEYS;
use crate::sampler::FairBy;

/// What makes a limit's keys, and how many it tells apart. `Copy`, as the limit it
/// belongs to: the [`FairBy`] is interned (see [`FairSpec::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FairSpec {
    pub(crate) by: &'static FairBy,
    pub(crate) max_keys: u32,
}

/// Every distinct `fair_by` read so far, each kept once for the process's life: a
/// reload of the same file finds its lists here instead of keeping new ones, so what
/// this holds is bounded by the distinct lists ever written, not by reloads.
static INTERNED: Mutex<Vec<&'static FairBy>> = Mutex::new(Vec::new());

impl FairSpec {
    /// Keys made by `by`, at most `max_keys` told apart.
    pub(crate) fn new(by: FairBy, max_keys: u32) -> Self {
        let mut interned = INTERNED.lock().unwrap_or_else(PoisonError::into_inner);
        let by = match interned.iter().find(|i| ***i == by) {
            Some(found) => *found,
            None => {
                let leaked: &'static FairBy = Box::leak(Box::new(by));
                interned.push(leaked);
                leaked
            }
        };
        Self { by, max_keys }
    }

    /// The default `max_keys` ([`DEFAULT_MAX_KEYS`]).
    pub(crate) const DEFAULT_MAX_KEYS: u32 = DEFAULT_MAX_KEYS as u32;

    /// The key written in a file for the span name, beside attribute keys.
    pub(crate) const SPAN_NAME: &'static str = "span_name";

    /// What makes the key, as a file writes it: `span_name` first if used, then the
    /// attribute keys in order.
    pub(crate) fn names(&self) -> Vec<String> {
        let name = self.by.uses_span_name().then(|| Self::SPAN_NAME.to_owned());
        name.into_iter()
            .chain(
                self.by
                    .attribute_keys()
                    .iter()
                    .map(|k| k.as_str().to_owned()),
            )
            .collect()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_same_list_read_twice_is_kept_once() {
        let a = FairSpec::new(FairBy::attributes(["fair.test.route"]), 10);
        let b = FairSpec::new(FairBy::attributes(["fair.test.route"]), 20);
        assert!(std::ptr::eq(a.by, b.by));
        assert_ne!(a, b);
        let c = FairSpec::new(FairBy::span_name().and_attribute("fair.test.route"), 10);
        assert!(!std::ptr::eq(a.by, c.by));
        assert_eq!(c.names(), ["span_name", "fair.test.route"]);
    }
}
