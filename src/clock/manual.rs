use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::Clock;

/// A clock that moves only when told to: for deterministic tests, yours and ours.
///
/// Clones share one time, so a test can hand a clone to a limiter and advance the other.
/// It may be [`set`](ManualClock::set) backwards to test how a limiter copes with a clock
/// that steps back.
///
/// ```
/// use std::time::Duration;
/// use otel_rate_sampler::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let seen_by_limiter = clock.clone();
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(seen_by_limiter.now_nanos(), 1_500_000_000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    // Relaxed everywhere: the cell publishes nothing but its own value.
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by` (saturating at `u64::MAX` nanoseconds).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// Sets the clock to `nanos` since its origin, backwards if need be.
    pub fn set(&self, nanos: u64) {
        self.nanos.store(nanos, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
    }
}
