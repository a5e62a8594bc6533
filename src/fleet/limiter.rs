//! [`FleetLimiter`]: the handle, its builder and its statistics.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::error::{redact, FleetError};
use super::lease::Shared;
use super::time::TimeMap;
use super::transport::Target;
use super::word::LeaseWord;
use super::worker::{self, WorkerConfig};
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
/// one state and one background thread.
///
/// # How it works
///
/// A background thread (named `otel-rate-fleet`, with its own current-thread tokio
/// runtime: it never uses the application's) leases chunks of permits for fleet window
/// `w` from Redis with one atomic Lua script, and the decision path spends the lease on
/// one atomic word: no Redis call, lock or allocation per decision, and a refusal only
/// loads. See the README's "Across replicas" for the bounds; in short:
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
    inner: Arc<Inner<C>>,
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
    pub(crate) stop: Arc<worker::Stop>,
    thread: Mutex<Option<JoinHandle<()>>>,
    key: String,
    instance_id: String,
    sync_interval: Duration,
}

impl<C> Inner<C> {
    /// What the lease state machine writes.
    pub(crate) fn shared(&self) -> Shared<'_> {
        Shared {
            lease: &self.lease,
            time: &self.time,
            stats: &self.stats,
        }
    }
}

impl<C> Drop for Inner<C> {
    fn drop(&mut self) {
        self.stop.stop();
    }
}

/// Counters the worker writes and [`FleetLimiter::stats`] reads (all `Relaxed`: plain
/// values for display, nothing is published through them).
#[derive(Debug, Default)]
pub(crate) struct StatCells {
    pub(crate) leases: AtomicU64,
    pub(crate) lease_errors: AtomicU64,
    pub(crate) redis_calls: AtomicU64,
    pub(crate) fallback: AtomicBool,
    pub(crate) instances: AtomicU64,
    pub(crate) window: AtomicU64,
    pub(crate) granted: AtomicU64,
}

/// A snapshot of a [`FleetLimiter`]'s state, from [`FleetLimiter::stats`].
///
/// The fields are read one by one without a lock: while the worker is changing them a
/// snapshot may mix two instants (each counter is exact on its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetStats {
    /// Lease calls that granted at least one permit.
    pub leases: u64,
    /// Calls to Redis that failed or timed out.
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
}

impl FleetLimiter {
    /// A builder for a limiter of `limit` per fleet window, shared by every instance that
    /// uses the same Redis, prefix and `key`.
    ///
    /// `redis` is one URL (`"redis://host:6379"`) or the seed nodes of a Redis Cluster
    /// (several URLs, or one with [`cluster`](FleetLimiterBuilder::cluster)). `key` names
    /// the rule (for example `"checkout:root"`); every instance must pass the same limit
    /// for the same key.
    pub fn builder(
        redis: impl RedisUrls,
        key: impl Into<String>,
        limit: Limit,
    ) -> FleetLimiterBuilder {
        FleetLimiterBuilder {
            urls: redis.into_urls(),
            key: key.into(),
            limit,
            prefix: DEFAULT_FLEET_PREFIX.to_owned(),
            cluster: false,
            sync_interval: None,
            response_timeout: None,
            connect_timeout: None,
            instance_id: None,
            clock: MonotonicClock::new(),
        }
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
        inner.lease.try_spend_at(fleet, inner.limit.window_nanos())
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

    /// A cheap snapshot of the limiter's state (a handful of relaxed loads).
    pub fn stats(&self) -> FleetStats {
        let s = &self.inner.stats;
        let (window, remaining) = self.inner.lease.snapshot();
        // Relaxed (all): display values, see `StatCells`.
        let granted = if s.window.load(Ordering::Relaxed) == window {
            s.granted.load(Ordering::Relaxed)
        } else {
            remaining
        };
        FleetStats {
            leases: s.leases.load(Ordering::Relaxed),
            lease_errors: s.lease_errors.load(Ordering::Relaxed),
            redis_calls: s.redis_calls.load(Ordering::Relaxed),
            fallback_active: s.fallback.load(Ordering::Relaxed),
            instances: s.instances.load(Ordering::Relaxed),
            window,
            window_granted: granted.max(remaining),
            window_spent: granted.saturating_sub(remaining),
            clock_synced: self.inner.time.fleet_nanos(0).is_some(),
        }
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

    /// Stops the background thread and waits for it (it ends at its next await point,
    /// at once). Afterwards nothing is leased: what remains of the current lease may
    /// still be spent in its window, then every call is refused. Idempotent; dropping
    /// the last clone does the same without waiting.
    pub fn shutdown(&self) {
        self.inner.stop.stop();
        let handle = match self.inner.thread.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(handle) = handle {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
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
        let window = inner.lease.try_spend_at(fleet, wlen)?;
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

/// One Redis URL or several (the seed nodes of a cluster), for
/// [`FleetLimiter::builder`]. Implemented for `&str`, `String`, and slices, arrays and
/// vectors of them.
pub trait RedisUrls {
    /// The URLs.
    fn into_urls(self) -> Vec<String>;
}

impl RedisUrls for &str {
    fn into_urls(self) -> Vec<String> {
        vec![self.to_owned()]
    }
}

impl RedisUrls for String {
    fn into_urls(self) -> Vec<String> {
        vec![self]
    }
}

impl<S: AsRef<str>> RedisUrls for &[S] {
    fn into_urls(self) -> Vec<String> {
        self.iter().map(|s| s.as_ref().to_owned()).collect()
    }
}

impl<S: AsRef<str>, const K: usize> RedisUrls for [S; K] {
    fn into_urls(self) -> Vec<String> {
        self.iter().map(|s| s.as_ref().to_owned()).collect()
    }
}

impl<S: AsRef<str>> RedisUrls for Vec<S> {
    fn into_urls(self) -> Vec<String> {
        self.iter().map(|s| s.as_ref().to_owned()).collect()
    }
}

/// Builds a [`FleetLimiter`]; from [`FleetLimiter::builder`].
#[must_use]
pub struct FleetLimiterBuilder<C = MonotonicClock> {
    urls: Vec<String>,
    key: String,
    limit: Limit,
    prefix: String,
    cluster: bool,
    sync_interval: Option<Duration>,
    response_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    instance_id: Option<String>,
    clock: C,
}

impl<C: Clock> FleetLimiterBuilder<C> {
    /// How often the instance heartbeats and, while Redis fails, retries. Default: a
    /// quarter of the window, between 10 ms and 1 s. Fallback starts after 3 intervals
    /// without a successful call; recovery takes at most one interval plus the response
    /// timeout once Redis answers.
    pub fn sync_interval(mut self, interval: Duration) -> Self {
        self.sync_interval = Some(interval);
        self
    }

    /// The longest a Redis call may take before it counts as failed. Default: half the
    /// sync interval.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = Some(timeout);
        self
    }

    /// The longest a connection attempt may take. Default: the response timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// This instance's id among the replicas (unique per process). Default: the process
    /// id, the start time and a counter.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// The key prefix, [`DEFAULT_FLEET_PREFIX`] by default: keys are `{prefix:key}:...`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Treats the URL(s) as seed nodes of a Redis Cluster (implied by several URLs).
    pub fn cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    /// The local clock the decisions read (windows are still Redis's; this clock carries
    /// Redis `TIME` between samples). Default: [`MonotonicClock`]. It must advance with
    /// real time: the worker maps it onto Redis `TIME` at every call, so a
    /// [`ManualClock`](crate::ManualClock) only makes sense in a test that drives it
    /// in step with the wall clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> FleetLimiterBuilder<C2> {
        FleetLimiterBuilder {
            urls: self.urls,
            key: self.key,
            limit: self.limit,
            prefix: self.prefix,
            cluster: self.cluster,
            sync_interval: self.sync_interval,
            response_timeout: self.response_timeout,
            connect_timeout: self.connect_timeout,
            instance_id: self.instance_id,
            clock,
        }
    }

    /// Checks the options, starts the background thread and returns at once, without
    /// waiting for Redis.
    ///
    /// # Errors
    ///
    /// [`FleetError::NoUrl`], [`FleetError::InvalidUrl`], [`FleetError::InvalidKey`] (or
    /// a bad prefix),
    /// [`FleetError::InvalidOption`] for a zero interval or timeout, and
    /// [`FleetError::Spawn`] if the thread cannot start.
    pub fn build(self) -> Result<FleetLimiter<C>, FleetError> {
        if self.urls.is_empty() {
            return Err(FleetError::NoUrl);
        }
        let bad_part =
            |s: &str| s.is_empty() || s.contains(['{', '}']) || s.chars().any(char::is_whitespace);
        if bad_part(&self.key) {
            return Err(FleetError::InvalidKey { key: self.key });
        }
        if bad_part(&self.prefix) {
            return Err(FleetError::InvalidKey { key: self.prefix });
        }
        let window = self.limit.window();
        let interval = self.sync_interval.unwrap_or_else(|| {
            (window / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
        });
        if interval < Duration::from_millis(1) {
            return Err(FleetError::InvalidOption {
                option: "sync_interval",
                reason: "must be at least 1 ms",
            });
        }
        let response_timeout = self.response_timeout.unwrap_or(interval / 2);
        let connect_timeout = self.connect_timeout.unwrap_or(response_timeout);
        if response_timeout.is_zero() || connect_timeout.is_zero() {
            return Err(FleetError::InvalidOption {
                option: "response_timeout / connect_timeout",
                reason: "must be above zero",
            });
        }
        let target = Target::parse(
            &self.urls,
            self.cluster || self.urls.len() > 1,
            response_timeout,
            connect_timeout,
        )
        .map_err(|(url, reason)| FleetError::InvalidUrl {
            url: redact(&url),
            reason,
        })?;
        let instance_id = self.instance_id.unwrap_or_else(default_instance_id);
        if bad_part(&instance_id) {
            return Err(FleetError::InvalidOption {
                option: "instance_id",
                reason: "must be non-empty, without '{', '}' or whitespace",
            });
        }
        let inner = Arc::new(Inner {
            lease: LeaseWord::new(),
            time: TimeMap::default(),
            clock: self.clock,
            limit: self.limit,
            stats: StatCells::default(),
            stop: Arc::new(worker::Stop::default()),
            thread: Mutex::new(None),
            key: self.key.clone(),
            instance_id: instance_id.clone(),
            sync_interval: interval,
        });
        let config = WorkerConfig {
            target,
            tag: format!("{{{}:{}}}", self.prefix, self.key),
            instance_id,
            permits: u64::from(self.limit.permits()),
            window_nanos: self.limit.window_nanos(),
            interval,
            response_timeout,
            connect_timeout,
        };
        let handle = worker::spawn(Arc::downgrade(&inner), config).map_err(FleetError::Spawn)?;
        match inner.thread.lock() {
            Ok(mut guard) => *guard = Some(handle),
            Err(poisoned) => *poisoned.into_inner() = Some(handle),
        }
        Ok(FleetLimiter { inner })
    }
}

impl<C: fmt::Debug> fmt::Debug for FleetLimiterBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs with their passwords masked.
        let urls: Vec<String> = self.urls.iter().map(|u| redact(u)).collect();
        f.debug_struct("FleetLimiterBuilder")
            .field("urls", &urls)
            .field("key", &self.key)
            .field("limit", &self.limit)
            .field("prefix", &self.prefix)
            .field("cluster", &self.cluster)
            .field("sync_interval", &self.sync_interval)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("instance_id", &self.instance_id)
            .field("clock", &self.clock)
            .finish()
    }
}

fn default_instance_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    // Relaxed: a counter for uniqueness within the process.
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{since_epoch}-{n}", std::process::id())
}
