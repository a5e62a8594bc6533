//! A limiter's clock that stands still (or crawls) while real time goes on: the lease
//! state machine paces its calls by that clock, so it would make no call at all, and
//! the decisions would stay in a window Redis has left, admitting nothing until the
//! clock catches up. The worker thread watches it against its own monotonic clock
//! (`Instant`) and, once per sync interval of real time in which the limiter's clock
//! moved less than half as far, has the machine sample Redis time again
//! (`LeaseMachine::clock_stalled`): the mapping then follows Redis, and the replica
//! keeps leasing within one window.

use std::time::{Duration, Instant};

/// The last time the limiter's clock was compared with real time.
#[derive(Debug, Default)]
pub(crate) struct StallWatch {
    seen: Option<(Instant, u64)>,
}

impl StallWatch {
    /// Whether the limiter's clock, reading `local` at real time `real`, moved less
    /// than half as far as real time over the last `interval` (or more) of it. Looks
    /// once per `interval` of real time.
    pub(crate) fn stalled(&mut self, local: u64, real: Instant, interval: Duration) -> bool {
        let Some((then, was)) = self.seen else {
            self.seen = Some((real, local));
            return false;
        };
        let elapsed = real.saturating_duration_since(then);
        if elapsed < interval {
            return false;
        }
        self.seen = Some((real, local));
        let moved = u128::from(local.saturating_sub(was));
        moved < elapsed.as_nanos() / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_that_stands_still_for_an_interval_is_stalled_once_per_interval() {
        let interval = Duration::from_millis(50);
        let start = Instant::now();
        let mut watch = StallWatch::default();
        assert!(!watch.stalled(1_000, start, interval));
        // Within an interval: not looked at.
        assert!(!watch.stalled(1_000, start + interval / 2, interval));
        assert!(watch.stalled(1_000, start + interval, interval));
        // Moving with real time again.
        let moved = 1_000 + 60_000_000;
        assert!(!watch.stalled(
            moved,
            start + interval * 2 + Duration::from_millis(10),
            interval
        ));
        // Crawling: a tenth of real time.
        let crawled = moved + 5_000_000;
        assert!(watch.stalled(
            crawled,
            start + interval * 3 + Duration::from_millis(10),
            interval
        ));
    }
}
