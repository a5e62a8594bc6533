//! The decision side of a lease: one `AtomicU64` the hot path spends lock-free.
//!
//! The word is the window limiters' (window, count) word (`limiter/packed.rs`, written
//! once there, with its one compare-exchange), its count the permits remaining:
//!
//! ```text
//!  63                         22 21                  0
//! +-----------------------------+---------------------+
//! | fleet window id (42 bits)   |  remaining (22 bits)|
//! +-----------------------------+---------------------+
//! ```
//!
//! The window id is the fleet window `unix_nanos / W` (Redis `TIME`, see `time.rs`);
//! 42 bits of 1 ms windows since 1970 last until the year 2109 (it saturates, never
//! wraps). `remaining` is what this instance may still spend *in that window id and no
//! other*: the permits Redis granted it for the window (or, in fallback, its local
//! share), minus what was spent. What was granted per window is kept by the worker, so
//! `spent = granted − remaining` is exact; the word stays one atomic.
//!
//! A second word, `next`, holds a lease prefetched for the next window (same layout);
//! the first decision of that window (or the worker, whichever comes first) installs it
//! by a compare-exchange that only succeeds from an older window, so it is installed at
//! most once.
//!
//! # Memory ordering
//!
//! Every access is `Relaxed`. The words publish no other memory (the decision returns
//! only what it read from the word itself), and each word's modification order already
//! serialises the compare-exchanges: every write is a compare-exchange from the exact
//! word the new value was computed from (`packed::replace`), so no spend, top-up or roll
//! can be lost or land in the wrong window. A refusal only loads.

use crossbeam_utils::CachePadded;

use crate::limiter::packed::{
    pack, replace, unpack, COUNT_MASK as REMAINING_MASK, MAX_WINDOW_INDEX as MAX_WINDOW_ID,
};
use crate::sync::{AtomicU64, Ordering};

/// The lease words of one instance.
#[derive(Debug)]
pub(crate) struct LeaseWord {
    // Invariant: the window field never decreases; `remaining` only decreases by
    // decisions and only increases by the worker adding a grant (or a share) for the
    // very window the word names.
    word: CachePadded<AtomicU64>,
    // A lease for a window not yet started; installed at most once (see module docs).
    next: AtomicU64,
    // The newest word a roll replaced (window, remaining): what was left of a window
    // when a decision (or the worker) moved the word on, so the worker's statistics
    // count exactly what was spent of it. Written once per roll, never on a spend.
    left: AtomicU64,
}

/// What [`LeaseWord::add`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Added {
    /// The grant is in the word for its window.
    Installed,
    /// The word already names a newer window: the grant was not installed (it expired).
    Expired,
}

impl LeaseWord {
    pub(crate) fn new() -> Self {
        Self {
            word: CachePadded::new(AtomicU64::new(pack(0, 0))),
            next: AtomicU64::new(pack(0, 0)),
            left: AtomicU64::new(pack(0, 0)),
        }
    }

    /// Spends one permit for a call made at fleet time `fleet_nanos` with windows of
    /// `window_nanos`. Returns the window id it was counted in: the call's, or the word's
    /// newer one for a stale caller. The call is placed against the end of the word's
    /// window by a multiplication (a division only on a new window), and a refusal there
    /// is decided from that one comparison and the word's count: it only loads.
    #[inline]
    pub(crate) fn try_spend_at(&self, fleet_nanos: u64, window_nanos: u64) -> Option<u64> {
        // Relaxed: see the module's "Memory ordering".
        let current = self.word.load(Ordering::Relaxed);
        let (window, remaining) = unpack(current);
        let end = window.saturating_add(1).saturating_mul(window_nanos);
        if fleet_nanos < end {
            // The word's window, or (a stale caller) before it: counted in the word's.
            if remaining == 0 {
                return None;
            }
            return match replace(&self.word, current, current - 1) {
                Ok(()) => Some(window),
                Err(actual) => self.spend_from(actual, window),
            };
        }
        self.spend_from(current, (fleet_nanos / window_nanos).min(MAX_WINDOW_ID))
    }

    /// Spends one permit for a call made in the middle of fleet window `now_window`,
    /// through the decision's own path ([`try_spend_at`](Self::try_spend_at), windows of
    /// 1 µs). Returns the window id it was counted in: `now_window`, or the word's newer
    /// window for a stale caller.
    #[cfg(test)]
    pub(crate) fn try_spend(&self, now_window: u64) -> Option<u64> {
        const WINDOW_NANOS: u64 = 1000;
        self.try_spend_at(now_window * WINDOW_NANOS + WINDOW_NANOS / 2, WINDOW_NANOS)
    }

    /// The spend loop, from `current`, a value the word held.
    #[inline]
    fn spend_from(&self, mut current: u64, now_window: u64) -> Option<u64> {
        // Relaxed (all here): see the module's "Memory ordering".
        loop {
            let (window, remaining) = unpack(current);
            let next = if now_window > window {
                // The word's lease is for an older window: never spend it here. Only a
                // prefetched lease for exactly this window may start it.
                let (next_window, granted) = unpack(self.next.load(Ordering::Relaxed));
                if next_window != now_window || granted == 0 {
                    return None;
                }
                pack(now_window, granted - 1)
            } else if remaining > 0 {
                // This window, or (stale caller) the newer one the word names.
                current - 1
            } else {
                return None;
            };
            match replace(&self.word, current, next) {
                Ok(()) => {
                    if now_window > window {
                        self.rolled_from(current);
                    }
                    return Some(unpack(next).0);
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Keeps `replaced`, a word a roll replaced, if it names the newest window so far.
    fn rolled_from(&self, replaced: u64) {
        // Relaxed: a statistic; `fetch_max` keeps the newest window's whatever order
        // two rolls store in (the window is the word's high bits).
        self.left.fetch_max(replaced, Ordering::Relaxed);
    }

    /// What was left of `window` when a roll moved the word past it, if the last roll
    /// did (the worker's statistics, `lease/roll.rs`).
    pub(crate) fn left_of(&self, window: u64) -> Option<u64> {
        // Relaxed: a statistic, see `rolled_from`.
        let (w, remaining) = unpack(self.left.load(Ordering::Relaxed));
        (w == window).then_some(remaining)
    }

    /// Publishes a lease of `granted` permits for the future window `window`.
    pub(crate) fn publish_next(&self, window: u64, granted: u64) {
        // Relaxed: read by decisions only as a value; its single use is enforced by the
        // compare-exchange on `word` (window only moves forward).
        self.next
            .store(pack(window, granted.min(REMAINING_MASK)), Ordering::Relaxed);
    }

    /// Starts `window` with `granted` permits if the word names an older window.
    /// Returns `true` if this call started it (`false`: it had already started, for
    /// example by a decision installing the prefetched lease, or a newer one had).
    pub(crate) fn roll_to(&self, window: u64, granted: u64) -> bool {
        // Relaxed (load and CAS): see the module's "Memory ordering".
        let mut current = self.word.load(Ordering::Relaxed);
        loop {
            if unpack(current).0 >= window {
                return false;
            }
            let next = pack(window, granted.min(REMAINING_MASK));
            match replace(&self.word, current, next) {
                Ok(()) => {
                    self.rolled_from(current);
                    return true;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Adds `granted` permits to `window`, starting it if the word names an older one.
    pub(crate) fn add(&self, window: u64, granted: u64) -> Added {
        // Relaxed (load and CAS): see the module's "Memory ordering".
        let mut current = self.word.load(Ordering::Relaxed);
        loop {
            let (w, remaining) = unpack(current);
            let next = if w == window {
                pack(window, (remaining + granted).min(REMAINING_MASK))
            } else if w < window {
                pack(window, granted.min(REMAINING_MASK))
            } else {
                return Added::Expired;
            };
            match replace(&self.word, current, next) {
                Ok(()) => {
                    if w < window {
                        self.rolled_from(current);
                    }
                    return Added::Installed;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// The word's (window id, remaining), a snapshot.
    pub(crate) fn snapshot(&self) -> (u64, u64) {
        // Relaxed: a snapshot; nothing is read through it.
        unpack(self.word.load(Ordering::Relaxed))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// What a window had left when a roll moved the word on is kept for the worker's
    /// statistics, whoever rolled it: a decision installing the prefetched lease, or
    /// the worker; the newest roll's only.
    #[test]
    fn a_roll_keeps_what_the_window_left() {
        let l = LeaseWord::new();
        assert_eq!(l.add(10, 5), Added::Installed);
        assert_eq!(l.try_spend(10), Some(10));
        l.publish_next(11, 3);
        assert_eq!(
            l.try_spend(11),
            Some(11),
            "a decision installs the prefetch"
        );
        assert_eq!(l.left_of(10), Some(4));
        assert!(l.roll_to(12, 2));
        assert_eq!(l.left_of(11), Some(2));
        assert_eq!(l.left_of(10), None, "only the newest roll's");
        assert_eq!(l.add(13, 1), Added::Installed);
        assert_eq!(l.left_of(12), Some(2));
    }

    #[test]
    fn spends_only_in_the_window_it_names() {
        let l = LeaseWord::new();
        assert_eq!(l.add(10, 2), Added::Installed);
        assert_eq!(l.try_spend(10), Some(10));
        // A newer window does not spend the old lease.
        assert_eq!(l.try_spend(11), None);
        assert_eq!(l.snapshot(), (10, 1));
        // A stale caller counts in the word's window.
        assert_eq!(l.try_spend(9), Some(10));
        assert_eq!(l.try_spend(10), None);
        // A grant for an older window expires.
        assert_eq!(l.add(9, 5), Added::Expired);
    }

    #[test]
    fn prefetched_lease_is_installed_once() {
        let l = LeaseWord::new();
        l.add(1, 1);
        l.publish_next(2, 2);
        assert_eq!(l.try_spend(2), Some(2));
        // The worker's roll finds it started and does not add it again.
        assert!(!l.roll_to(2, 2));
        assert_eq!(l.try_spend(2), Some(2));
        assert_eq!(l.try_spend(2), None);
        // A lease published for window 2 never starts window 3.
        assert_eq!(l.try_spend(3), None);
    }

    #[test]
    fn refusals_do_not_write() {
        let l = LeaseWord::new();
        l.add(5, 0);
        let before = l.word.load(Ordering::Relaxed);
        for _ in 0..100 {
            assert_eq!(l.try_spend(5), None);
            assert_eq!(l.try_spend(6), None);
        }
        assert_eq!(l.word.load(Ordering::Relaxed), before);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;
    use crate::limiter::loom_support::model;

    /// A decider spends in window 1 then in window 2 (where only the prefetched lease may
    /// start the window) while the worker tops up window 1 and rolls to window 2: window
    /// 1 spends at most what was installed for it, window 2's lease is installed exactly
    /// once (by the decider or by the roll), and nothing granted for window 1 is spent
    /// in window 2. Exhaustive (two threads).
    #[test]
    fn loom_spend_vs_top_up_vs_roll() {
        model(2, || {
            let l = Arc::new(LeaseWord::new());
            l.add(1, 1);
            l.publish_next(2, 1);
            let decider = {
                let l = l.clone();
                thread::spawn(move || {
                    [1, 1, 2, 2]
                        .iter()
                        .filter_map(|&w| {
                            let got = l.try_spend(w)?;
                            // Counted in the window asked for or a newer one, never an
                            // older one's lease spent now.
                            assert!(got >= w, "asked for window {w}, spent window {got}'s");
                            Some(got)
                        })
                        .collect::<Vec<_>>()
                })
            };
            // The worker: a top-up of 1 for window 1, then the roll to window 2.
            let added = l.add(1, 1);
            l.roll_to(2, 1);
            let mut spent = [0u64; 3];
            for w in decider.join().unwrap() {
                spent[w as usize] += 1;
            }
            let granted_1 = 1 + u64::from(added == Added::Installed);
            assert!(
                spent[1] <= granted_1,
                "window 1 spent {} > {granted_1}",
                spent[1]
            );
            let (w, remaining) = l.snapshot();
            assert_eq!(w, 2);
            assert_eq!(
                spent[2] + remaining,
                1,
                "window 2's lease installed twice or lost"
            );
        });
    }

    /// Two deciders race for the last permits of a window while the worker tops it up:
    /// every permit installed is spent at most once, none is lost. Exhaustive.
    #[test]
    fn loom_two_deciders_vs_top_up() {
        model(2, || {
            let l = Arc::new(LeaseWord::new());
            l.add(7, 1);
            let decider = {
                let l = l.clone();
                thread::spawn(move || (0..2).filter(|_| l.try_spend(7).is_some()).count())
            };
            let mine = usize::from(l.try_spend(7).is_some());
            assert_eq!(l.add(7, 1), Added::Installed);
            let mine = mine + usize::from(l.try_spend(7).is_some());
            let theirs = decider.join().unwrap();
            let (_, remaining) = l.snapshot();
            assert_eq!(mine + theirs + remaining as usize, 2);
        });
    }
}
