//! Fleet mode (`--redis`, feature `redis`): the limit is a fleet's, enforced by a
//! [`FleetLimiter`] shared with every demo process on the same Redis and key.
//!
//! The fleet counts by window id, Unix time (Redis `TIME`) divided by the window, and
//! the demo's clock is aligned on Unix time with the same window, so fleet window `w` is
//! the demo's window `w - first_unix_window` and `per_window` names it by the fleet's
//! start ([`FleetLimiter::window_start_unix_ms`]): several demos' counts add up per
//! fleet window.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use otel_rate_sampler::{FleetFailure, FleetLimiter, Limit, RateLimiter as _};
use serde::Serialize;

use crate::args::FleetTarget;
use crate::windows::AlignedClock;

/// How long the demo waits for Redis's first answer before it gives up.
const CONNECT_WAIT: Duration = Duration::from_secs(5);
/// How far the fleet's window edges may lie after the demo clock's: Redis `TIME`
/// against this host's wall clock, plus the fleet's mapping error (same host: under a
/// millisecond; NTP-synced hosts: a few). A window's line waits this long after its
/// close on the demo's clock; a trace counted later than that in a window already
/// printed shows in the warning on late counts.
pub(crate) const SETTLE: Duration = Duration::from_millis(50);

/// The fleet's limiter, on the demo's clock, with the demo's window 0 as a fleet id.
#[derive(Clone, Debug)]
pub(crate) struct Fleet {
    limiter: FleetLimiter<AlignedClock>,
    /// The fleet window id of the demo clock's window 0.
    first_window: u64,
}

impl Fleet {
    /// Starts the fleet's limiter on `clock` and waits (at most [`CONNECT_WAIT`]) for
    /// Redis's first answer, which also gives it the fleet's clock.
    ///
    /// # Errors
    ///
    /// One line: the limiter's error (a bad URL or key), or no answer from Redis.
    pub(crate) fn connect(
        target: &FleetTarget,
        limit: Limit,
        clock: AlignedClock,
    ) -> Result<Self, String> {
        let mut builder = FleetLimiter::builder(target.url.as_str(), target.key.as_str(), limit);
        if let Some(ca) = &target.ca {
            builder = builder.tls_ca_file(ca);
        }
        if let Some((cert, key)) = &target.client {
            builder = builder.tls_client_cert(cert, key);
        }
        let limiter = builder
            .clock(clock)
            .build()
            .map_err(|e| format!("--redis: {e}"))?;
        let deadline = Instant::now() + CONNECT_WAIT;
        loop {
            let stats = limiter.stats();
            if stats.clock_synced {
                break;
            }
            // A refused password or certificate will not go away by waiting: say so at
            // once.
            if let Some(
                failure @ (FleetFailure::Auth
                | FleetFailure::TlsUnknownCa
                | FleetFailure::TlsHostName
                | FleetFailure::TlsExpired
                | FleetFailure::TlsClientCert
                | FleetFailure::Tls),
            ) = stats.last_failure
            {
                return Err(format!("--redis {}: {failure}", target.shown_url()));
            }
            if Instant::now() >= deadline {
                let why = stats
                    .last_failure
                    .map_or_else(|| "no answer".to_owned(), |f| f.to_string());
                return Err(format!(
                    "--redis {}: nothing synced within {} ({why})",
                    target.shown_url(),
                    humantime::format_duration(CONNECT_WAIT)
                ));
            }
            thread::sleep(Duration::from_millis(5));
        }
        Ok(Self {
            limiter,
            first_window: clock.first_unix_window(limit.window_nanos()),
        })
    }

    /// Admits one trace; on admission, the window of the demo's clock that the fleet
    /// counted it in (exactly: by the fleet's window id, not by a clock reading).
    #[inline]
    pub(crate) fn acquire(&self) -> Option<u64> {
        // A fleet window before the demo's window 0 (Redis's clock behind this host's
        // by more than the run had begun into its window) counts in window 0.
        let window = self.limiter.acquire_window()?;
        Some(window.saturating_sub(self.first_window))
    }

    pub(crate) fn limit(&self) -> Limit {
        self.limiter.limit()
    }

    /// A watch on the limiter's statistics for the run's summary.
    pub(crate) fn watch(&self) -> Watch {
        Watch {
            limiter: self.limiter.clone(),
            fallback_seen: AtomicBool::new(false),
            instances_seen: AtomicU64::new(0),
        }
    }
}

/// What the fleet's limiter did during the run, polled by the reporting thread.
#[derive(Debug)]
pub(crate) struct Watch {
    limiter: FleetLimiter<AlignedClock>,
    fallback_seen: AtomicBool,
    instances_seen: AtomicU64,
}

impl Watch {
    /// Reads the limiter's statistics once and keeps what must be seen while it lasts.
    pub(crate) fn observe(&self) {
        let stats = self.limiter.stats();
        // Relaxed (both): display values, written and read by the reporting thread.
        self.fallback_seen
            .fetch_or(stats.fallback_active, Ordering::Relaxed);
        self.instances_seen
            .fetch_max(stats.instances, Ordering::Relaxed);
    }

    /// The summary's fleet fields, read at the end of the run.
    pub(crate) fn finish(&self) -> Outcome {
        self.observe();
        let stats = self.limiter.stats();
        Outcome {
            redis_key: self.limiter.key().to_owned(),
            instance_id: self.limiter.instance_id().to_owned(),
            redis_calls: stats.redis_calls,
            leases: stats.leases,
            lease_errors: stats.lease_errors,
            shape_conflicts: stats.shape_conflicts,
            fallback_seen: self.fallback_seen.load(Ordering::Relaxed),
            instances_seen: self.instances_seen.load(Ordering::Relaxed),
        }
    }
}

/// The fleet's fields of the JSON summary.
#[derive(Debug, Serialize)]
pub(crate) struct Outcome {
    redis_key: String,
    /// This process's id among the fleet's instances.
    instance_id: String,
    /// Calls this process made to Redis (leases, heartbeats, clock samples; failed ones
    /// included).
    redis_calls: u64,
    /// Lease calls that granted permits.
    leases: u64,
    /// Calls to Redis that failed or timed out.
    lease_errors: u64,
    /// Lease calls refused because demos with another limit or window leased the key.
    shape_conflicts: u64,
    /// Whether this process spent its fallback share (Redis unreachable) at any time.
    fallback_seen: bool,
    /// The most live instances (demo processes on this key) it saw at once.
    instances_seen: u64,
}

impl Outcome {
    /// One line for stderr.
    pub(crate) fn line(&self) -> String {
        format!(
            "fleet {:?}: {} Redis calls ({} failed), {} leases, up to {} instance(s) seen, {}",
            self.redis_key,
            self.redis_calls,
            self.lease_errors,
            self.leases,
            self.instances_seen,
            if self.fallback_seen {
                "fell back to its share while Redis was unreachable"
            } else {
                "never fell back"
            }
        )
    }
}
