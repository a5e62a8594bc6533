//! The fleet limiter's statistics: the cells the worker thread writes (never the
//! decision path) and [`FleetStats`] read from them.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

pub(crate) use super::failure::FleetFailure;
use super::target::{Count, TargetCells};

/// Counters the worker writes and [`FleetLimiter::stats`](crate::FleetLimiter::stats)
/// reads (all `Relaxed`: plain values for display, nothing is published through them).
///
/// Aligned to 128 bytes, so the cells start and end on their own pair of cache lines
/// (x86 fetches lines in aligned pairs): what the worker writes after each call never
/// shares a line with what a decision reads beside them in the limiter (the clock, the
/// fleet-time offset, the limit), whatever order the compiler gives the fields.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct StatCells {
    pub(crate) leases: AtomicU64,
    pub(crate) lease_errors: AtomicU64,
    pub(crate) redis_calls: AtomicU64,
    pub(crate) fallback: AtomicBool,
    pub(crate) instances: AtomicU64,
    pub(crate) window: AtomicU64,
    pub(crate) granted: AtomicU64,
    /// Lease calls refused because the key is leased by another shape (or version).
    pub(crate) shape_conflicts: AtomicU64,
    /// Failed calls by [`FleetFailure::index`].
    failures: [AtomicU64; FleetFailure::ALL.len()],
    /// The last failure's index plus one; 0 after a success (or before any call).
    last_failure: AtomicU8,
    /// Sum of the calls' round trips, and the last one, in nanoseconds.
    call_nanos: AtomicU64,
    last_call_nanos: AtomicU64,
    /// Permits granted by Redis, installed as fallback shares, spent and left unspent,
    /// over the windows the worker has rolled past (the current one is added on read).
    pub(crate) permits_leased: AtomicU64,
    pub(crate) permits_fallback: AtomicU64,
    pub(crate) permits_used: AtomicU64,
    pub(crate) permits_unused: AtomicU64,
    /// The counters of the rule's Redis target (its worker), which every count here
    /// adds to as well: set when the rule joins its worker, before its first call.
    pub(crate) target: OnceLock<Arc<TargetCells>>,
}

impl StatCells {
    /// Adds `n` to the target's counter `count` (none before the rule joined one).
    fn to_target(&self, count: Count, n: u64) {
        if let Some(target) = self.target.get() {
            target.add(count, n);
        }
    }

    /// Counts permits Redis granted, installed in the lease word.
    pub(crate) fn leased(&self, n: u64) {
        // Relaxed: a display counter.
        self.permits_leased.fetch_add(n, Ordering::Relaxed);
        self.to_target(Count::Leased, n);
    }

    /// Counts a fallback share installed in the lease word.
    pub(crate) fn fallback_installed(&self, n: u64) {
        // Relaxed: a display counter.
        self.permits_fallback.fetch_add(n, Ordering::Relaxed);
        self.to_target(Count::Fallback, n);
    }

    /// Counts a window rolled past: what was spent of it, and what was left.
    pub(crate) fn rolled(&self, used: u64, unused: u64) {
        // Relaxed (both): display counters.
        self.permits_used.fetch_add(used, Ordering::Relaxed);
        self.permits_unused.fetch_add(unused, Ordering::Relaxed);
        self.to_target(Count::Used, used);
        self.to_target(Count::Unused, unused);
    }

    /// Counts a lease call refused for another shape (or version) on the key.
    pub(crate) fn shape_conflict(&self) {
        // Relaxed: a display counter.
        self.shape_conflicts.fetch_add(1, Ordering::Relaxed);
        self.to_target(Count::ShapeConflict, 1);
    }

    /// Counts a failed call (also in `redis_calls` and `lease_errors`).
    pub(crate) fn failed(&self, kind: FleetFailure) {
        self.to_target(Count::Call, 1);
        self.to_target(Count::Failure(kind), 1);
        // Relaxed (all): display counters.
        self.redis_calls.fetch_add(1, Ordering::Relaxed);
        self.lease_errors.fetch_add(1, Ordering::Relaxed);
        self.failures[kind.index()].fetch_add(1, Ordering::Relaxed);
        // `index() < 12`: the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        self.last_failure
            .store(kind.index() as u8 + 1, Ordering::Relaxed);
    }

    /// Counts a successful call.
    pub(crate) fn succeeded(&self) {
        self.to_target(Count::Call, 1);
        // Relaxed (both): display values.
        self.redis_calls.fetch_add(1, Ordering::Relaxed);
        self.last_failure.store(0, Ordering::Relaxed);
    }

    /// Records a call's round trip (failed or not).
    pub(crate) fn timed(&self, nanos: u64) {
        // Relaxed (both): display values.
        self.call_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.last_call_nanos.store(nanos, Ordering::Relaxed);
    }

    /// The figures of [`FleetStats`] that are plain reads of the cells.
    pub(crate) fn read(&self) -> FleetStats {
        // Relaxed (all): display values.
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let last = self.last_failure.load(Ordering::Relaxed);
        FleetStats {
            leases: load(&self.leases),
            lease_errors: load(&self.lease_errors),
            redis_calls: load(&self.redis_calls),
            fallback_active: self.fallback.load(Ordering::Relaxed),
            instances: load(&self.instances),
            failures: self.failures.each_ref().map(load),
            last_failure: FleetFailure::ALL
                .get(usize::from(last).wrapping_sub(1))
                .copied(),
            call_nanos_total: load(&self.call_nanos),
            last_call_nanos: load(&self.last_call_nanos),
            permits_leased: load(&self.permits_leased),
            permits_fallback: load(&self.permits_fallback),
            permits_used: load(&self.permits_used),
            permits_unused: load(&self.permits_unused),
            shape_conflicts: load(&self.shape_conflicts),
            ..FleetStats::default()
        }
    }
}

/// A snapshot of a [`FleetLimiter`](crate::FleetLimiter)'s state, from
/// [`FleetLimiter::stats`](crate::FleetLimiter::stats).
///
/// The worker thread updates the counters after each Redis call; a decision never
/// touches them. The fields are read one by one without a lock: while the worker is
/// changing them a snapshot may mix two instants (each counter is exact on its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetStats {
    /// Lease calls that granted at least one permit.
    pub leases: u64,
    /// Calls to Redis that failed, timed out, were refused as late or on a foreign key
    /// (the sum of [`failures`](Self::failures) over [`FleetFailure::ALL`]).
    pub lease_errors: u64,
    /// Calls made to Redis (lease, heartbeat and clock calls; failed ones included).
    pub redis_calls: u64,
    /// Whether the instance is spending its local fallback share.
    pub fallback_active: bool,
    /// The number of live replicas last seen in Redis (`k`; 0 before the first call).
    pub instances: u64,
    /// The fleet window id the lease word names (0 before the first lease).
    pub window: u64,
    /// Permits this instance holds for that window (Redis grants plus fallback share).
    pub window_granted: u64,
    /// Of those, the permits spent.
    pub window_spent: u64,
    /// Whether the fleet clock has been sampled (decisions can be admitted).
    pub clock_synced: bool,
    /// Why the last call failed, or `None` if it succeeded (or none was made yet).
    /// `Some(FleetFailure::Auth)` means Redis refuses the credentials: nothing will be
    /// admitted until the configuration changes.
    pub last_failure: Option<FleetFailure>,
    /// Sum of the round trips of every call (failed ones up to their timeout), in
    /// nanoseconds of `std::time::Instant`; divide by `redis_calls` for the mean.
    pub call_nanos_total: u64,
    /// The round trip of the last call, in nanoseconds.
    pub last_call_nanos: u64,
    /// Permits Redis granted this instance, over its life (prefetched leases count
    /// when the window they are for begins).
    pub permits_leased: u64,
    /// Permits of fallback shares installed while Redis could not be reached.
    pub permits_fallback: u64,
    /// Permits spent by decisions (leased or fallback).
    pub permits_used: u64,
    /// Permits held when their window ended and never spent. The lease design never
    /// gives permits back to Redis: they lapse with their window.
    pub permits_unused: u64,
    /// The limiters served by this limiter's worker thread: every fleet limiter of the
    /// process on the same Redis URL(s) shares one thread, one connection and one
    /// pipeline per round.
    pub worker_rules: u64,
    /// Round trips that worker made to Redis (one pipeline carrying the due calls of
    /// all its limiters; one per slot on a cluster), over its life.
    pub worker_round_trips: u64,
    /// Lease calls Redis refused because replicas with another limit or window (`N`
    /// or window differing under the same key, as in a rolling deploy) lease the key,
    /// or because a later version of the lease script wrote its state. A refused
    /// replica admits nothing for the rule (and spends no fallback share) until the
    /// other shape has stopped calling for its stale age; then its shape takes over.
    pub shape_conflicts: u64,
    failures: [u64; FleetFailure::ALL.len()],
}

impl FleetStats {
    /// Failed calls of kind `kind`.
    pub fn failures(&self, kind: FleetFailure) -> u64 {
        self.failures[kind.index()]
    }
}
