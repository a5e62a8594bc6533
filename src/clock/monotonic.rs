use std::time::{Duration, Instant};

use super::Clock;

/// The default clock: the kernel's coarse monotonic clock where there is one.
///
/// On Linux and Android it reads `CLOCK_MONOTONIC_COARSE` through the vDSO (about 3 ns
/// measured here, no system call, no thread), whose resolution is one kernel tick: 1 to
/// 10 ms, 4 ms on most distributions ([`resolution`](Clock::resolution) reports the real
/// figure). Elsewhere it falls back to [`Instant`] (nanosecond resolution, ~25 ns).
/// Under valgrind 3.19, `rustix`'s vDSO lookup crashes the tool (rustix issue 1559): use
/// [`PreciseClock`] in programs you run under valgrind.
///
/// **What the resolution means.** The limiters' guarantees hold exactly in this clock's
/// time. In real time, each window edge is seen up to one tick late, so a window's real
/// span is still `W` on average but each edge jitters by up to a tick. For windows of a
/// second or more that is below 1 %; for windows under about 50 ms use [`PreciseClock`]
/// or a [`CachedClock`](crate::CachedClock) with a short tick.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: u64,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: raw_nanos(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // The raw clock never goes below the origin read from it; saturate anyway so a
        // clock from another source can never make this panic.
        raw_nanos().saturating_sub(self.origin)
    }

    fn resolution(&self) -> Duration {
        raw_resolution()
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
fn raw_nanos() -> u64 {
    use rustix::time::{clock_gettime, ClockId};
    let ts = clock_gettime(ClockId::MonotonicCoarse);
    // tv_sec of a monotonic clock is non-negative and far below 2^63 / 10^9 (292 years).
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn raw_resolution() -> Duration {
    use rustix::time::{clock_getres, ClockId};
    let ts = clock_getres(ClockId::MonotonicCoarse);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[inline]
fn raw_nanos() -> u64 {
    use std::sync::OnceLock;
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn raw_resolution() -> Duration {
    Duration::from_nanos(1)
}

/// A nanosecond-resolution clock built on [`Instant`]: exact window edges, but a read
/// costs about 25 ns, twice a whole `AlwaysOn` decision. Use it for windows under ~50 ms.
#[derive(Clone, Copy, Debug)]
pub struct PreciseClock {
    origin: Instant,
}

impl PreciseClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for PreciseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for PreciseClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // u64 nanoseconds cover 584 years of uptime.
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}
