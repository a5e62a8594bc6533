//! [`FleetLimiter`]: the handle, its builder and its statistics.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "metrics")]
use std::sync::Weak;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::lease::Shared;
use super::pool::Registration;
use super::stats::{FleetStats, StatCells};
use super::time::TimeMap;
use super::word::LeaseWord;
use super::worker::{RuleWorker, Served};
use crate::clock::{Clock, MonotonicClock};
use crate::limit::Limit;
use crate::limiter::RateLimiter;

/// The key prefix when none is set: keys are `{otel-rate:<key>}:...`.
pub const DEFAULT_FLEET_PREFIX: &str = "otel-rate";

/// A rate limiter shared by every replica of a service through Redis: at most `N`
/// admissions per fleet window, whatever the number of replicas.
///
/// Build one with [`FleetLimiter::builder`]; it implements [`RateLimiter`], so
/// `RateLimitingSampler::new(fleet_limiter)` works as with a local limiter. Clones share
/// one state; every limiter of the process on the same Redis URL(s) shares one
/// background thread and one connection.
///
/// # How it works
///
/// A background thread per Redis target (named `otel-rate-fleet`, with its own
/// current-thread tokio runtime: it never uses the application's; each round it sends
/// the due calls of all the limiters on that target in one pipeline) leases chunks of
/// permits for fleet window
/// `w` from Redis with one atomic Lua script, and the decision path spends the lease on
/// one atomic word: no Redis call, lock or allocation per decision, and a refusal only
/// loads. See "Bounds" in the guide `docs/fleet.md` for all of them; in short:
///
/// * **Per window id, at most `N`** across the fleet while Redis keeps its data, and
///   through Redis being down, slow, paused, or restarted empty (see below).
/// * **Window edges** are Redis `TIME`, mapped onto the local clock at every call; each
///   instance's edges are off by at most half a round trip plus clock drift over one
///   sync interval. That moves edges, never the count per window id.
/// * **Under-use**: an instance holds at most 1.5 chunks unspent, a chunk following its
///   demand (a quarter of what it spent in the previous window; 1 when idle).
/// * **Initial state**: nothing is admitted until the first successful call to Redis
///   (which also samples the fleet clock); Redis down at start means no admissions
///   until it answers. Then the first two fleet windows this Redis ever sees grant
///   nothing (they might be windows whose accounting a restart lost).
/// * **Fallback**: after 3 sync intervals without a successful call, an instance spends
///   its last known share, `N/k` with `k` the live replicas it last saw (integer parts
///   rotated over windows so shares of one window add up to exactly `N`), from the
///   window after the one it fell back in (Redis reserves that share for it one interval
///   before); when Redis answers again (within one interval plus the response timeout)
///   leasing resumes and what the fallback spent is reported. An instance that has only
///   seen Redis during its young windows (when `k` counts only the instances registered
///   so far) has no settled `k` and spends no share: it admits nothing until Redis
///   answers.
/// * **Partitions, of any length:** Redis forgets a silent instance, and stops
///   reserving its share, 20 sync intervals (of its live clock, never faster than real
///   time) after its last heartbeat. An instance spends its fallback share only in
///   windows that end within 19 intervals of sending its last heartbeat Redis
///   answered, then admits nothing until Redis answers: at most `N` per window through
///   a partition of one instance, of several or of all, however long. The price: a
///   fleet cut off from Redis for longer keeps nothing from then on.
/// * **Steps of time:** see `lease.rs`. A step of Redis `TIME` back costs no window
///   (the scripts' fleet clock never goes back), a step forward or a replica's clock
///   stalling at most one window of under-use for that replica, never a window over
///   `N`, with at most 4 Redis calls per interval per replica meanwhile.
/// * **Not paced**: the fleet window is not cut into sub-windows, whatever
///   [`Limit::is_paced`](crate::Limit::is_paced) says: a lease may be spent as soon as it
///   is granted, so under overload the fleet's `N` tend to fall early in each fleet
///   window (the front-loaded behaviour of [`Limit::unpaced`](crate::Limit::unpaced)).
///   Pacing would need the replicas to share a schedule through Redis; a local
///   `RateLimitingSampler` or a rule's local limit is paced.
///
/// # Memory ordering
///
/// The decision path reads the fleet-time offset (`Relaxed`: a value, see `time.rs`) and
/// spends the lease word by compare-exchange from the exact value read (`Relaxed`: the
/// word publishes nothing else; see `word.rs`).
pub struct FleetLimiter<C = MonotonicClock> {
    pub(super) inner: Arc<Inner<C>>,
}

impl<C> Clone for FleetLimiter<C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

pub(crate) struct Inner<C> {
    pub(crate) lease: LeaseWord,
    pub(crate) time: TimeMap,
    pub(crate) clock: C,
    pub(crate) limit: Limit,
    pub(crate) stats: StatCells,
    /// Set by a decision refused for want of a lease: wakes a dormant rule (`lease.rs`).
    pub(crate) demand: AtomicBool,
    /// This rule in its worker, and its place there.
    pub(super) member: Arc<RuleWorker>,
    pub(super) registration: OnceLock<Registration>,
    pub(super) key: String,
    pub(super) instance_id: String,
    pub(super) sync_interval: Duration,
}

impl<C> Inner<C> {
    /// What the lease state machine writes.
    pub(crate) fn shared(&self) -> Shared<'_> {
        Shared {
            lease: &self.lease,
            time: &self.time,
            stats: &self.stats,
            demand: &self.demand,
        }
    }
}

impl<C> Inner<C> {
    /// A decision was refused: a dormant rule wakes at the worker's next tick. Written
    /// only when not set yet, so refusals in a row write nothing shared.
    #[inline]
    fn wanted(&self) {
        // Relaxed (both): a hint to the worker, which reads it with its own clock and
        // leases; it publishes nothing.
        if !self.demand.load(Ordering::Relaxed) {
            self.demand.store(true, Ordering::Relaxed);
        }
    }
}

impl<C: Clock> Served for Inner<C> {
    fn now_nanos(&self) -> u64 {
        self.clock.now_nanos()
    }

    fn shared(&self) -> Shared<'_> {
        Inner::shared(self)
    }
}

impl<C> Drop for Inner<C> {
    fn drop(&mut self) {
        self.member.stop();
        // Its last window counts in its target's statistics (once, if closed before).
        self.member.retire(self.shared());
    }
}

/// A handle on a [`FleetLimiter`] that does not keep it alive: what the metrics hold,
/// so a limiter a reload replaced is dropped (its calls end) and reported no more.
#[cfg(feature = "metrics")]
pub(crate) struct WeakFleet<C>(Weak<Inner<C>>);

#[cfg(feature = "metrics")]
impl<C> WeakFleet<C> {
    /// The limiter, while a handle of it is still held elsewhere.
    pub(crate) fn upgrade(&self) -> Option<FleetLimiter<C>> {
        self.0.upgrade().map(|inner| FleetLimiter { inner })
    }
}

#[cfg(feature = "metrics")]
impl<C> FleetLimiter<C> {
    /// A handle that does not keep this limiter alive.
    pub(crate) fn downgrade(&self) -> WeakFleet<C> {
        WeakFleet(Arc::downgrade(&self.inner))
    }
}

impl<C: Clock> FleetLimiter<C> {
    /// Admits one event now and returns the fleet window id it was counted in, or
    /// refuses it. Never blocks, never calls Redis.
    ///
    /// Window `w` spans fleet time (Redis `TIME`) `[w·W, (w+1)·W)` since the Unix epoch;
    /// see [`window_start_unix_ms`](Self::window_start_unix_ms).
    #[inline]
    #[must_use]
    pub fn acquire_window(&self) -> Option<u64> {
        let inner = &*self.inner;
        let fleet = inner.time.fleet_nanos(inner.clock.now_nanos())?;
        let admitted = inner.lease.try_spend_at(fleet, inner.limit.window_nanos());
        if admitted.is_none() {
            inner.wanted();
        }
        admitted
    }

    /// The fleet window id that holds local clock time `local_nanos` (a stamp from
    /// [`acquire_stamped`](RateLimiter::acquire_stamped)), by the current clock mapping,
    /// or `None` before the fleet clock is known. A stamp within the mapping's error of a
    /// window edge may map to the neighbouring window: count exactly with
    /// [`acquire_window`](Self::acquire_window).
    pub fn window_of(&self, local_nanos: u64) -> Option<u64> {
        let fleet = self.inner.time.fleet_nanos(local_nanos)?;
        Some(fleet / self.inner.limit.window_nanos())
    }

    /// The fleet window id now, or `None` before the fleet clock is known.
    pub fn current_window(&self) -> Option<u64> {
        self.window_of(self.inner.clock.now_nanos())
    }

    /// The start of fleet window `window`, in Unix milliseconds (Redis `TIME`).
    pub fn window_start_unix_ms(&self, window: u64) -> u64 {
        let nanos = u128::from(window) * u128::from(self.inner.limit.window_nanos());
        u64::try_from(nanos / 1_000_000).unwrap_or(u64::MAX)
    }

    /// A cheap snapshot of the limiter's state (a few relaxed loads): the lease, the
    /// replicas seen, fallback, calls, failures by kind, round trips and permits.
    pub fn stats(&self) -> FleetStats {
        let s = &self.inner.stats;
        let (window, remaining) = self.inner.lease.snapshot();
        // Relaxed (all): display values, see `StatCells`.
        let granted = if s.window.load(Ordering::Relaxed) == window {
            s.granted.load(Ordering::Relaxed)
        } else {
            remaining
        };
        let spent = granted.saturating_sub(remaining);
        let mut stats = s.read();
        stats.window = window;
        stats.window_granted = granted.max(remaining);
        stats.window_spent = spent;
        // The windows rolled past, and the current one.
        stats.permits_used += spent;
        stats.clock_synced = self.inner.time.fleet_nanos(0).is_some();
        if let Some(registration) = self.inner.registration.get() {
            (stats.worker_rules, stats.worker_round_trips) = registration.figures();
        }
        stats
    }

    /// This instance's id in Redis (its heartbeat member).
    pub fn instance_id(&self) -> &str {
        &self.inner.instance_id
    }

    /// The rule key this limiter shares.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// The interval of heartbeats and retries.
    pub fn sync_interval(&self) -> Duration {
        self.inner.sync_interval
    }

    /// Whether the two are the same limiter (clones of one).
    #[cfg(feature = "config")]
    pub(crate) fn same(&self, other: &FleetLimiter<C>) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Closes the limiter for good, as a reload retires one its new rules do not keep:
    /// its calls to Redis stop (as when it is dropped) and its lease word is moved to
    /// the last window id with nothing left, so every later decision refuses (a call's
    /// window is never newer, and a grant for a real window is never installed there).
    /// What remains of the current lease is not spent.
    #[cfg(feature = "config")]
    pub(crate) fn close(&self) {
        self.inner.member.stop();
        self.inner.member.retire(self.inner.shared());
        self.inner
            .lease
            .roll_to(crate::limiter::packed::MAX_WINDOW_INDEX, 0);
    }

    /// Whether it was closed (or stopped): its worker makes no more calls for it.
    #[cfg(all(test, feature = "config"))]
    pub(crate) fn is_stopped(&self) -> bool {
        use super::worker::Member;
        self.inner.member.stopped()
    }

    /// Stops this limiter's calls to Redis and waits for one in flight to end (at most
    /// twice the response and connect timeouts); the worker thread goes on for the
    /// other limiters on the same Redis, and stops with the last one dropped.
    /// Afterwards nothing is leased: what remains of the current lease may still be
    /// spent in its window, then every call is refused. Idempotent; dropping the last
    /// clone stops the calls the same way without waiting.
    pub fn shutdown(&self) {
        self.inner.member.stop_and_wait();
        // Relaxed: a display value (see `StatCells`).
        self.inner.stats.fallback.store(false, Ordering::Relaxed);
    }
}

impl<C: Clock> RateLimiter for FleetLimiter<C> {
    #[inline]
    fn try_acquire(&self) -> bool {
        self.acquire_window().is_some()
    }

    #[inline]
    fn acquire_stamped(&self) -> Option<u64> {
        let inner = &*self.inner;
        let now = inner.clock.now_nanos();
        let fleet = inner.time.fleet_nanos(now)?;
        let wlen = inner.limit.window_nanos();
        let Some(window) = inner.lease.try_spend_at(fleet, wlen) else {
            inner.wanted();
            return None;
        };
        // A stale reading is counted in the newer window: stamp it at that window's start.
        let start = inner
            .time
            .local_nanos(window.saturating_mul(wlen))
            .unwrap_or(now);
        Some(now.max(start))
    }

    fn limit(&self) -> Limit {
        self.inner.limit
    }

    /// What **this replica** spent in the current fleet window (the fleet's total is in
    /// Redis); `None` before the fleet clock is known. `Some(0)` when the lease word
    /// still names an older window.
    fn count_in_window(&self) -> Option<u64> {
        let now = self.current_window()?;
        let stats = self.stats();
        Some(if stats.window == now {
            stats.window_spent
        } else {
            0
        })
    }
}

impl<C: fmt::Debug> fmt::Debug for FleetLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (window, remaining) = self.inner.lease.snapshot();
        f.debug_struct("FleetLimiter")
            .field("key", &self.inner.key)
            .field("instance_id", &self.inner.instance_id)
            .field("limit", &self.inner.limit)
            .field("window", &window)
            .field("remaining", &remaining)
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of, size_of};
    use std::ops::Range;

    use super::Inner;
    use crate::clock::{CachedClock, MonotonicClock};

    /// The 128-byte blocks (pairs of cache lines) of `len` bytes at `offset`.
    fn blocks(offset: usize, len: usize) -> Range<usize> {
        offset / 128..(offset + len.max(1)).div_ceil(128)
    }

    fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
        a.start < b.end && b.start < a.end
    }

    /// The decision path reads the clock, the fleet-time offset and the limit, and spends
    /// the lease word; the worker writes its statistics after every call. No block of
    /// the former is one of the latter, and the limiter starts on a block of its own
    /// (the `Arc` counts, written by every clone and every look of the worker, sit in
    /// the block before it).
    fn decision_fields_share_no_block_with_worker_counters<C>() {
        assert!(align_of::<Inner<C>>() >= 128);
        let stats = blocks(offset_of!(Inner<C>, stats), size_of::<super::StatCells>());
        let read = [
            blocks(offset_of!(Inner<C>, lease), size_of::<super::LeaseWord>()),
            blocks(offset_of!(Inner<C>, time), size_of::<super::TimeMap>()),
            blocks(
                offset_of!(Inner<C>, limit),
                size_of::<crate::limit::Limit>(),
            ),
            blocks(offset_of!(Inner<C>, clock), size_of::<C>()),
        ];
        for (i, r) in read.iter().enumerate() {
            assert!(
                !overlap(r, &stats),
                "field {i} of the decision shares a block with the stats: {r:?} {stats:?}"
            );
        }
    }

    #[test]
    fn the_decision_reads_no_line_the_worker_writes_its_statistics_on() {
        decision_fields_share_no_block_with_worker_counters::<MonotonicClock>();
        decision_fields_share_no_block_with_worker_counters::<CachedClock>();
    }

    /// A fleet limiter a reload retires is closed: its worker stops, what is left of its
    /// lease is not spent, no later grant is installed, and every decision refuses, in
    /// its window and after (a thread deciding on its cached old rules reaches it).
    #[cfg(all(feature = "config", not(loom)))]
    #[test]
    fn a_closed_fleet_limiter_refuses_for_good_and_stops_its_calls() {
        use std::time::Duration;

        use crate::clock::ManualClock;
        use crate::fleet::word::Added;
        use crate::fleet::worker::Member;
        use crate::fleet::FleetLimiter;
        use crate::limiter::RateLimiter;

        let clock = ManualClock::new();
        clock.set(5_250_000_000);
        let limit = crate::Limit::per_window(10, Duration::from_secs(1)).unwrap();
        let l = FleetLimiter::builder("redis://127.0.0.1:1", "svc:r", limit)
            .clock(clock.clone())
            .build()
            .unwrap();
        // Redis time known, a lease of 5 for the current fleet window.
        l.inner
            .time
            .sample(1_700_000_000_300_000_000, 5_250_000_000, 5_250_000_000);
        let window = l.current_window().unwrap();
        assert_eq!(l.inner.lease.add(window, 5), Added::Installed);
        assert!(l.try_acquire());
        l.close();
        assert!(l.inner.member.stopped());
        assert!(!l.try_acquire(), "4 of the lease were left");
        for w in [window, window + 1] {
            assert_eq!(l.inner.lease.add(w, 5), Added::Expired);
        }
        clock.advance(Duration::from_secs(3));
        assert!(!l.try_acquire());
        assert_eq!(l.acquire_stamped(), None);
    }
}
