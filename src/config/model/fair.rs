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

/// Every distinct `fair_by` read so far, each kept once for the process's life, and the
/// bytes of their names: a reload of the same file finds its lists here instead of
/// keeping new ones, and a reload loop with ever-new lists stops at
/// [`FairSpec::INTERN_MAX_LISTS`] or [`FairSpec::INTERN_MAX_BYTES`] (its file is then
/// refused, see [`FairSpec::new`]), so what this holds is bounded whatever is reloaded.
static INTERNED: Mutex<(Vec<&'static FairBy>, usize)> = Mutex::new((Vec::new(), 0));

impl FairSpec {
    /// The most distinct `fair_by` lists a process keeps.
    pub(crate) const INTERN_MAX_LISTS: usize = 1024;
    /// The most bytes of attribute keys the kept lists may name in all.
    pub(crate) const INTERN_MAX_BYTES: usize = 256 * 1024;

    /// Keys made by `by`, at most `max_keys` told apart; `None` if `by` is a list this
    /// process has not read before and the lists kept are at
    /// [`FairSpec::INTERN_MAX_LISTS`] or would pass [`FairSpec::INTERN_MAX_BYTES`].
    pub(crate) fn new(by: FairBy, max_keys: u32) -> Option<Self> {
        // A poisoned lock still holds a consistent list: every change is one push.
        let mut guard = INTERNED.lock().unwrap_or_else(PoisonError::into_inner);
        let (lists, bytes) = &mut *guard;
        if let Some(found) = lists.iter().find(|i| ***i == by) {
            return Some(Self {
                by: found,
                max_keys,
            });
        }
        let size: usize = by.attribute_keys().iter().map(|k| k.as_str().len()).sum();
        if lists.len() >= Self::INTERN_MAX_LISTS || *bytes + size > Self::INTERN_MAX_BYTES {
            return None;
        }
        let leaked: &'static FairBy = Box::leak(Box::new(by));
        lists.push(leaked);
        *bytes += size;
        Some(Self {
            by: leaked,
            max_keys,
        })
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
        let a = FairSpec::new(FairBy::attributes(["fair.test.route"]), 10).unwrap();
        let b = FairSpec::new(FairBy::attributes(["fair.test.route"]), 20).unwrap();
        assert!(std::ptr::eq(a.by, b.by));
        assert_ne!(a, b);
        let c = FairSpec::new(FairBy::span_name().and_attribute("fair.test.route"), 10).unwrap();
        assert!(!std::ptr::eq(a.by, c.by));
        assert_eq!(c.names(), ["span_name", "fair.test.route"]);
    }

    #[test]
    fn ever_new_lists_stop_at_the_bound_and_known_ones_still_resolve() {
        let known = FairSpec::new(FairBy::attributes(["fair.test.known"]), 10).unwrap();
        let mut refused = false;
        for i in 0..=FairSpec::INTERN_MAX_LISTS {
            if FairSpec::new(FairBy::attributes([format!("fair.test.new.{i}")]), 10).is_none() {
                refused = true;
                break;
            }
        }
        assert!(refused, "a loop of new lists must hit the bound");
        let again = FairSpec::new(FairBy::attributes(["fair.test.known"]), 5).unwrap();
        assert!(std::ptr::eq(known.by, again.by));
        let guard = INTERNED.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(
            guard.0.len() <= FairSpec::INTERN_MAX_LISTS && guard.1 <= FairSpec::INTERN_MAX_BYTES
        );
    }
}
