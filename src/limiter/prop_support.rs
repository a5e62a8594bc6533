//! What the limiters' property tests share: a limit of any shape, and a clock that
//! starts part-way into a window, steps by amounts that rarely divide it, and steps
//! back.

use std::time::Duration;

use proptest::prelude::*;

use crate::clock::ManualClock;
use crate::limit::Limit;

/// Window lengths: the tests' usual second, or any from 1 ms to 3 s.
pub(crate) fn windows() -> impl Strategy<Value = u64> {
    prop_oneof![Just(1_000_000_000u64), 1_000_000u64..3_000_000_000]
}

/// `permits` per `window` nanoseconds in `sub_windows`, paced or not.
pub(crate) fn limit(permits: u32, window: u64, sub_windows: u32, paced: bool) -> Limit {
    let limit = Limit::per_window(permits, Duration::from_nanos(window))
        .unwrap()
        .with_sub_windows(sub_windows)
        .unwrap();
    if paced {
        limit
    } else {
        limit.unpaced()
    }
}

/// A manual clock walked from `start` in units of about a thousandth of the window plus
/// 7 ns (rarely a divisor of it).
pub(crate) struct Walk {
    pub(crate) clock: ManualClock,
    now: u64,
    unit: u64,
}

impl Walk {
    pub(crate) fn new(start: u64, window: u64) -> Self {
        let clock = ManualClock::new();
        clock.set(start);
        Self {
            clock,
            now: start,
            unit: window / 1000 + 7,
        }
    }

    /// Moves the clock `delta` units forward, or back (to 0 at the most); returns the
    /// new reading.
    pub(crate) fn step(&mut self, delta: u64, backwards: bool) -> u64 {
        self.now = if backwards {
            self.now.saturating_sub(delta * self.unit)
        } else {
            self.now + delta * self.unit
        };
        self.clock.set(self.now);
        self.now
    }
}
