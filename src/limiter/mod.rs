//! The limiters: one small trait, four lock-free algorithms.

mod any;
mod bucketed_window;
// Crate-visible: what a reload carries (`config::compile::handover`).
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
pub(crate) mod carry;
mod fair;
mod fixed_window;
mod forward;
mod pacing;
// Crate-visible: the fleet's lease word is the same word.
pub(crate) mod packed;
#[cfg(all(test, not(loom)))]
mod prop_support;
mod sliding_log;
mod sliding_window;
// Crate-visible: the samplers' decision counters count by the same thread slots.
pub(crate) mod slot;

#[cfg(all(test, loom))]
pub(crate) mod loom_support;

#[cfg(feature = "config")]
pub(crate) use any::Shape;
pub use any::{Algorithm, AnyLimiter, ParseAlgorithmError};
#[cfg(feature = "config")]
pub(crate) use bucketed_window::heap_bytes as bucketed_heap_bytes;
pub use bucketed_window::BucketedWindow;
// The rule layer checks a file's `max_keys` against it.
#[cfg(feature = "config")]
pub(crate) use fair::MAX_KEYS;
pub use fair::{FairAdmission, FairError, FairLimiter, FairStats, DEFAULT_MAX_KEYS};
pub use fixed_window::FixedWindow;
pub use sliding_log::SlidingLog;
pub use sliding_window::SlidingWindowCounter;

use std::fmt;

use crate::limit::Limit;

/// The packed word of a closed window limiter (fixed, sliding counter, bucketed): the
/// last window index the word holds, full. Every decision refuses on it as on a limiter
/// saturated in its last window (a call's window is never newer, and no permit is
/// left), so closing adds no test to a decision, and nothing rolls it over.
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
fn closed_word(permits: u64) -> u64 {
    let (last, _) = packed::unpack(u64::MAX);
    packed::pack(last, permits)
}

/// Closes the one-word window limiter whose word is `state` (the fixed window, the
/// sliding counter's current window) and returns what it counted in the window of
/// `now` (windows of `window` ns) at that instant.
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by reloads
fn close_packed(state: &crate::sync::AtomicU64, permits: u64, now: u64, window: u64) -> u64 {
    // Relaxed: the swap takes its place in the word's modification order, after every
    // admission it returns and before every compare-exchange that then fails; the word
    // publishes nothing else.
    let frozen = state.swap(closed_word(permits), crate::sync::Ordering::Relaxed);
    packed::count_for(frozen, now, window)
}

/// One admission of a crate limiter, enough to give its permit back
/// ([`AnyLimiter::give_back`]) or, found but not made, to make it
/// ([`AnyLimiter::confirm`]): the clock time it is accounted at (as
/// [`RateLimiter::acquire_stamped`] returns it) and, for the sliding log, its admission
/// number (0 for the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
pub(crate) struct Admission {
    pub(crate) stamp: u64,
    pub(crate) number: u64,
}

impl Admission {
    /// An admission of a window limiter, accounted at `stamp`.
    #[inline]
    pub(crate) fn at(stamp: u64) -> Self {
        Self { stamp, number: 0 }
    }
}

/// Gives back the permit of an admission stamped `stamp` to the one-word window
/// limiter whose word is `state` (the fixed window, the sliding counter's current
/// window; windows of `window` ns), if the admission's window is still the word's (see
/// [`packed::take_back`]): once rolled, that window's count is final.
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule layer's cap
fn give_back_packed(state: &crate::sync::AtomicU64, stamp: u64, window: u64) {
    // Relaxed: the word publishes nothing else (see `packed::replace`).
    let window = packed::window_index(stamp, window);
    packed::take_back(state, window, crate::sync::Ordering::Relaxed);
}

/// A rate limiter: answers, for each event, whether it may pass.
///
/// The verdict is a plain value, not an error. Implementations are shared between
/// threads (`&self`), never block, and never panic.
pub trait RateLimiter: Send + Sync + fmt::Debug {
    /// Admits one event now, or refuses it.
    #[inline]
    #[must_use]
    fn try_acquire(&self) -> bool {
        self.acquire_stamped().is_some()
    }

    /// Like [`try_acquire`](RateLimiter::try_acquire), but on admission returns the
    /// clock time (nanoseconds since the clock's origin) the admission is accounted at:
    /// the time the limiter read, or, for a call whose reading was older than a window
    /// already started, the start of the window it was counted in. The guarantee of each
    /// algorithm is stated over these stamps, so tests (and curious users) can check it.
    #[must_use]
    fn acquire_stamped(&self) -> Option<u64>;

    /// The limit this limiter enforces.
    fn limit(&self) -> Limit;

    /// The admissions counted in the current window (for a sliding log, in the last
    /// window's length), for statistics: a read that writes nothing, which a concurrent
    /// call may make stale at once. `None` (the default) if the limiter cannot tell.
    ///
    /// The crate's limiters read their clock and one word (the sliding log scans its N
    /// slots); no decision calls this.
    fn count_in_window(&self) -> Option<u64> {
        None
    }
}

/// `RateLimiter` for a limiter type with a `clock` field, a `limit` field, an
/// `acquire_at(now)` method (one clock read per decision) and a `count_at(now)` read.
macro_rules! clocked_rate_limiter {
    ($($limiter:ident),*) => {$(
        impl<C: crate::clock::Clock> crate::limiter::RateLimiter for $limiter<C> {
            #[inline]
            fn acquire_stamped(&self) -> Option<u64> {
                self.acquire_at(self.clock.now_nanos())
            }

            fn limit(&self) -> Limit {
                self.limit
            }

            fn count_in_window(&self) -> Option<u64> {
                Some(self.count_at(self.clock.now_nanos()))
            }
        }
    )*};
}
use clocked_rate_limiter;
