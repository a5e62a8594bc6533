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
static INTERNED: Mutex<Interned> = Mutex::new(Interned::new());

/// Lists kept for the process's life, and the bytes of their attribute keys.
struct Interned {
    lists: Vec<&'static FairBy>,
    bytes: usize,
}

impl Interned {
    const fn new() -> Self {
        Self {
            lists: Vec::new(),
            bytes: 0,
        }
    }

    /// The kept list equal to `by`, else `by` kept if that leaves at most `max_lists`
    /// lists and `max_bytes` bytes of keys, else `None`.
    fn keep(&mut self, by: FairBy, max_lists: usize, max_bytes: usize) -> Option<&'static FairBy> {
        if let Some(found) = self.lists.iter().find(|i| ***i == by) {
            return Some(found);
        }
        let size: usize = by.attribute_keys().iter().map(|k| k.as_str().len()).sum();
        if self.lists.len() >= max_lists || self.bytes + size > max_bytes {
            return None;
        }
        let leaked: &'static FairBy = Box::leak(Box::new(by));
        self.lists.push(leaked);
        self.bytes += size;
        Some(leaked)
    }
}

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
        let mut interned = INTERNED.lock().unwrap_or_else(PoisonError::into_inner);
        let by = interned.keep(by, Self::INTERN_MAX_LISTS, Self::INTERN_MAX_BYTES)?;
        Some(Self { by, max_keys })
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
        // A table of its own: the process's is shared with the other tests.
        let mut interned = Interned::new();
        let list = |name: &str| FairBy::attributes([name.to_owned()]);
        let known = interned.keep(list("fair.test.a"), 3, 1000).unwrap();
        assert!(interned.keep(list("fair.test.b"), 3, 1000).is_some());
        assert!(interned.keep(list("fair.test.c"), 3, 1000).is_some());
        assert!(interned.keep(list("fair.test.d"), 3, 1000).is_none());
        let again = interned.keep(list("fair.test.a"), 3, 1000).unwrap();
        assert!(std::ptr::eq(known, again));
        assert_eq!((interned.lists.len(), interned.bytes), (3, 33));
        // The bytes bound: 12 bytes more than the 11 kept would pass 20.
        let mut small = Interned::new();
        assert!(small.keep(list("fair.test.a"), 10, 20).is_some());
        assert!(small.keep(list("fair.test.bb"), 10, 20).is_none());
    }
}
