//! Monotonic time sources for the limiters.

mod cached;
mod manual;
mod monotonic;

pub use cached::CachedClock;
pub use manual::ManualClock;
pub use monotonic::{MonotonicClock, PreciseClock};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A monotonic source of time, in integer nanoseconds since the clock's origin.
///
/// The limiters read the clock once per decision and never read the wall clock. A clock
/// that steps backwards (a [`ManualClock`] set back by a test, say) cannot make a limiter
/// admit more: every limiter treats a time older than what it has already seen as
/// belonging to the newest window it knows.
///
/// Clones of every clock in this crate share one origin, so a limiter and the code that
/// drives or observes it can hold the same time base.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Nanoseconds elapsed since this clock's origin.
    fn now_nanos(&self) -> u64;

    /// The granularity of [`now_nanos`](Clock::now_nanos): successive readings move in
    /// steps of about this size. Window edges are seen up to one step late.
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }

    fn resolution(&self) -> Duration {
        (**self).resolution()
    }
}
