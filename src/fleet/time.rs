//! The fleet's time: Redis `TIME`, carried between samples by the local monotonic clock.
//!
//! Every lease call returns the fleet clock (the server's `TIME` plus the rule's shift,
//! never going back: see `script.rs`), refusals included. With `t0`/`t1` the local clock read
//! before and after the call, the server time is taken to be at the midpoint, so
//! `offset = server_unix_nanos − (t0 + t1) / 2` and `fleet_now = local_now + offset`.
//! The error of one sample is at most half the round trip (`(t1 − t0) / 2`), plus the
//! drift of the local clock against the server's until the next sample (a few µs per
//! second at typical crystal drift). The worker keeps only samples whose round trip is
//! within twice the fastest recent one plus 1 ms (or when the mapping is 10 sync
//! intervals old, or the sample shows the mapping off by more than its own error: a
//! step; see `SampleFilter`), so a call slowed by a pause or a queue does not drag the
//! mapping. That error moves the *edges* of a
//! window by at most that much for this instance; it never changes how many permits are
//! counted per window id: a lease names its window id, and a decision spends only the
//! lease of the window id it computes (or, when its reading is behind, of the newer one
//! the lease word already names).

use std::sync::atomic::{AtomicU64, Ordering};

/// The offset from the local clock to the fleet's Unix nanoseconds; 0 until the first
/// sample (the decision path then admits nothing).
#[derive(Debug, Default)]
pub(crate) struct TimeMap {
    // Relaxed: a single value, read as a value; a stale offset only moves an edge by the
    // difference of two samples, and the lease word keeps window ids monotonic.
    offset: AtomicU64,
}

impl TimeMap {
    /// The fleet's Unix nanoseconds at local clock time `local`, if known.
    #[inline]
    pub(crate) fn fleet_nanos(&self, local: u64) -> Option<u64> {
        match self.offset.load(Ordering::Relaxed) {
            0 => None,
            offset => Some(local.wrapping_add(offset)),
        }
    }

    /// The local clock time at fleet Unix nanoseconds `fleet` (saturating at 0).
    pub(crate) fn local_nanos(&self, fleet: u64) -> Option<u64> {
        match self.offset.load(Ordering::Relaxed) {
            0 => None,
            offset => Some(fleet.saturating_sub(offset)),
        }
    }

    /// Records a sample: the server said `server_unix_nanos` during the call made from
    /// local time `t0` to `t1`. Returns the sample's error bound (half the round trip).
    pub(crate) fn sample(&self, server_unix_nanos: u64, t0: u64, t1: u64) -> u64 {
        let t1 = t1.max(t0);
        let mid = t0 + (t1 - t0) / 2;
        // Unix time (~1.7e18 ns) is far above any monotonic uptime: the offset is > 0.
        let offset = server_unix_nanos.saturating_sub(mid).max(1);
        self.offset.store(offset, Ordering::Relaxed);
        (t1 - t0) / 2
    }
}

/// Which samples of Redis `TIME` to keep: those whose round trip is within twice the
/// fastest recent one plus 1 ms (a call slowed by a pause or a queue would move the
/// mapping by half its round trip); any when the mapping is older than the age given;
/// and any that shows the mapping wrong by more than the sample's own error (half its
/// round trip plus 1 ms): Redis time or the local clock stepped.
#[derive(Debug)]
pub(crate) struct SampleFilter {
    fastest_round_trip: u64,
    last_sample_at: Option<u64>,
}

/// What [`SampleFilter::judge`] says of a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Drop,
    Keep,
    /// Keep: the mapping was off by this many nanoseconds (fleet time later than the
    /// mapping said when positive).
    Step(i128),
}

impl SampleFilter {
    pub(crate) fn new() -> Self {
        Self {
            fastest_round_trip: u64::MAX,
            last_sample_at: None,
        }
    }

    /// Judges the sample `server` of a call made from local time `t0` to `t1`, against
    /// the mapping `map`; a mapping older than `max_age`, or a `forced` sample, is
    /// replaced whatever the round trip.
    pub(crate) fn judge(
        &mut self,
        map: &TimeMap,
        server: u64,
        (t0, t1): (u64, u64),
        max_age: u64,
        forced: bool,
    ) -> Verdict {
        let round_trip = t1.saturating_sub(t0);
        let mid = t0 + round_trip / 2;
        let off = map
            .fleet_nanos(mid)
            .map_or(0, |estimate| i128::from(server) - i128::from(estimate));
        let stepped = off.unsigned_abs() > u128::from(round_trip / 2 + 1_000_000);
        let old = forced
            || stepped
            || self
                .last_sample_at
                .is_none_or(|t| t1.saturating_sub(t) >= max_age);
        let fast = round_trip
            <= self
                .fastest_round_trip
                .saturating_mul(2)
                .saturating_add(1_000_000);
        if !(old || fast) {
            return Verdict::Drop;
        }
        self.fastest_round_trip = if old {
            round_trip
        } else {
            self.fastest_round_trip.min(round_trip)
        };
        self.last_sample_at = Some(t1);
        map.sample(server, t0, t1);
        if stepped {
            Verdict::Step(off)
        } else {
            Verdict::Keep
        }
    }
}

/// Redis `TIME` (seconds, microseconds) as Unix nanoseconds.
pub(crate) fn time_to_nanos(seconds: u64, micros: u64) -> u64 {
    seconds
        .saturating_mul(1_000_000_000)
        .saturating_add(micros.saturating_mul(1_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_local_to_fleet_time_through_the_midpoint() {
        let map = TimeMap::default();
        assert_eq!(map.fleet_nanos(5), None);
        let server = time_to_nanos(1_700_000_000, 250_000);
        let err = map.sample(server, 1_000, 3_000);
        assert_eq!(err, 1_000);
        assert_eq!(map.fleet_nanos(2_000), Some(server));
        assert_eq!(map.local_nanos(server + 10), Some(2_010));
    }
}
