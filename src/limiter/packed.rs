//! The one-word (window, count) layout, and its one write: the window limiters' state,
//! and the fleet's lease word (`fleet/word.rs`, whose count is the permits remaining).
//!
//! ```text
//!  63                      22 21                 0
//! +--------------------------+--------------------+
//! |  window index (42 bits)  |  count (22 bits)   |
//! +--------------------------+--------------------+
//! ```
//!
//! The window index is `now / W` in the clock's nanoseconds. With the shortest window a
//! [`Limit`](crate::Limit) accepts (1 ms), 42 bits last 2^42 ms = 139 years of uptime; at
//! 1 s windows, 139 000 years. After that the index saturates (the limiter then keeps
//! counting into its last window and admits nothing more), it never wraps. The count
//! never exceeds the permits, because a call that would pass them writes nothing, so 22
//! bits hold any permit count up to [`Limit::MAX_PERMITS`].

use crate::limit::Limit;
use crate::sync::{AtomicU64, Ordering};

/// Bits of the count field.
const COUNT_BITS: u32 = 22;
/// Mask of the count field: also the largest count the word holds.
pub(crate) const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// The largest window index the word holds.
pub(crate) const MAX_WINDOW_INDEX: u64 = u64::MAX >> COUNT_BITS;

// The count field holds every permit count a `Limit` accepts.
const _: () = assert!(Limit::MAX_PERMITS as u64 <= COUNT_MASK);

/// Replaces `current` with `next` in a packed word, the one write every packed limiter
/// (and the fleet's lease word) makes: `Err(actual)` when another thread changed the word first (or spuriously).
///
/// `Relaxed` both ways: the word publishes no other memory, and a single location's
/// modification order already serialises the compare-exchanges; a new value is always
/// computed from the exact word it replaces, so no increment is lost or lands in the
/// wrong window.
#[inline]
pub(crate) fn replace(state: &AtomicU64, current: u64, next: u64) -> Result<(), u64> {
    state
        .compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed)
        .map(drop)
}

#[inline]
pub(crate) const fn pack(window: u64, count: u64) -> u64 {
    (window << COUNT_BITS) | count
}

#[inline]
pub(crate) const fn unpack(word: u64) -> (u64, u64) {
    (word >> COUNT_BITS, word & COUNT_MASK)
}

/// Adds `count` admissions made elsewhere to window `now_window` in `state` (or to the
/// newer window the word holds), as many as fit under `permits`, whatever a pacing
/// schedule would release: they were admitted under a schedule already. Returns how
/// many it counted, and the word it replaced when it rolled an older window over, so
/// the caller can account for that window. Used to carry admissions over to a
/// replacement limiter.
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
pub(crate) fn add_count(
    state: &AtomicU64,
    now_window: u64,
    count: u64,
    permits: u64,
) -> (u64, Option<u64>) {
    // Relaxed: see `replace`.
    let mut current = state.load(Ordering::Relaxed);
    loop {
        let (window, have) = unpack(current);
        let (window, have, rolled) = if now_window > window {
            (now_window, 0, true)
        } else {
            (window, have, false)
        };
        let taken = count.min(permits.saturating_sub(have));
        if taken == 0 && !rolled {
            return (0, None);
        }
        match replace(state, current, pack(window, have + taken)) {
            Ok(()) => return (taken, rolled.then_some(current)),
            Err(actual) => current = actual,
        }
    }
}

/// Takes one admission back out of window `window` of `state` (a permit given back:
/// the admission was not kept after all), a compare-exchange whose success has
/// `ordering`. Nothing while the word holds another window: once it has moved on, the
/// admission's window is over and a permit given back then would be counted in the next
/// one, where it was never taken; a closed word (the last index) gives nothing back.
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
pub(crate) fn take_back(state: &AtomicU64, window: u64, ordering: Ordering) {
    // Relaxed first read and on failure: the compare-exchange checks the word again.
    let mut current = state.load(Ordering::Relaxed);
    loop {
        let (held, count) = unpack(current);
        if held != window || held == MAX_WINDOW_INDEX || count == 0 {
            return;
        }
        match state.compare_exchange_weak(current, current - 1, ordering, Ordering::Relaxed) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

/// The index of the aligned window `[k·W, (k+1)·W)` that holds `now`.
#[inline]
pub(crate) fn window_index(now: u64, window_nanos: u64) -> u64 {
    (now / window_nanos).min(MAX_WINDOW_INDEX)
}

/// The count a packed word holds for the window of `now`: its count if its window is
/// that one or newer (a stale `now` is counted in the newest window), else 0.
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
#[inline]
pub(crate) fn count_for(word: u64, now: u64, window_nanos: u64) -> u64 {
    let (window, count) = unpack(word);
    if window >= window_index(now, window_nanos) {
        count
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_round_trips_at_the_extremes() {
        for (w, c) in [
            (0, 0),
            (MAX_WINDOW_INDEX, u64::from(Limit::MAX_PERMITS)),
            (MAX_WINDOW_INDEX, COUNT_MASK),
            (12345, 1),
            (1 << 40, 7),
        ] {
            assert_eq!(unpack(pack(w, c)), (w, c));
        }
        // Adding one to a word below the count's limit touches only the count.
        let word = pack(7, u64::from(Limit::MAX_PERMITS) - 1);
        assert_eq!(unpack(word + 1), (7, u64::from(Limit::MAX_PERMITS)));
    }

    #[test]
    fn window_index_does_not_wrap_for_139_years_of_1ms_windows() {
        let years_139 = 139 * 365 * 24 * 3600 * 1_000_000_000u64;
        assert!(window_index(years_139, 1_000_000) < MAX_WINDOW_INDEX);
        assert_eq!(window_index(u64::MAX, 1_000_000), MAX_WINDOW_INDEX);
    }
}
