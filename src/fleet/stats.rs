//! The fleet limiter's statistics: the cells the worker thread writes (never the
//! decision path), [`FleetStats`] read from them, and [`FleetFailure`], the kinds of
//! failed Redis calls.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// Why a call to Redis gave no usable answer, as counted in [`FleetStats`] and in the
/// fleet metrics (`error.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FleetFailure {
    /// No connection could be made (refused, unreachable, DNS).
    Connect,
    /// Redis refused the credentials (wrong password or user, or none given to a
    /// server that requires one). Retrying does not help until the configuration does.
    Auth,
    /// Redis (or the connection) answered with another error.
    Redis,
    /// No answer within the connect and response timeouts (a pause, a partition).
    Timeout,
    /// The lease script answered something it never answers.
    BadReply,
    /// The lease script refused the call as sent too long ago (a clock step or a slow
    /// network); the reply's time corrects the replica's clock mapping.
    Late,
    /// A key of the rule holds a value of another type (another program wrote the
    /// rule's meta, window or members key, e.g. with `SET`): Redis refuses that rule's
    /// calls (`WRONGTYPE`) until the key is removed; the other rules go on. The rule
    /// spends no fallback share meanwhile, only what Redis granted it.
    Foreign,
    /// TLS (`rediss://`): the server's certificate is not signed by a trusted CA (the
    /// CA file given, else the platform's roots). Never a fallback to plain text.
    TlsUnknownCa,
    /// TLS: the server's certificate does not name the host of the Redis URL.
    TlsHostName,
    /// TLS: the server's certificate has expired.
    TlsExpired,
    /// TLS: the server refused this client's certificate, or its absence (a server
    /// started with `--tls-auth-clients yes` and no client certificate given).
    TlsClientCert,
    /// TLS failed for another reason (a server speaking plain text to `rediss://`, an
    /// unsupported version or algorithm).
    Tls,
}

impl FleetFailure {
    /// Every kind, in the order of [`as_str`](Self::as_str)'s values.
    pub const ALL: [Self; 12] = [
        Self::Connect,
        Self::Auth,
        Self::Redis,
        Self::Timeout,
        Self::BadReply,
        Self::Late,
        Self::Foreign,
        Self::TlsUnknownCa,
        Self::TlsHostName,
        Self::TlsExpired,
        Self::TlsClientCert,
        Self::Tls,
    ];

    /// `connect`, `auth`, `redis`, `timeout`, `bad_reply`, `late`, `foreign_key`,
    /// `tls_unknown_ca`, `tls_host_name`, `tls_expired`, `tls_client_cert` or `tls`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Auth => "auth",
            Self::Redis => "redis",
            Self::Timeout => "timeout",
            Self::BadReply => "bad_reply",
            Self::Late => "late",
            Self::Foreign => "foreign_key",
            Self::TlsUnknownCa => "tls_unknown_ca",
            Self::TlsHostName => "tls_host_name",
            Self::TlsExpired => "tls_expired",
            Self::TlsClientCert => "tls_client_cert",
            Self::Tls => "tls",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// What went wrong and what to look at, in one phrase: for an application's own
/// message while [`FleetStats::clock_synced`] stays `false` (a wrong password must
/// not read as "no answer").
impl fmt::Display for FleetFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Connect => "cannot connect to Redis",
            Self::Auth => {
                "Redis refused authentication: check the password (and user) in the Redis URL"
            }
            Self::Redis => "Redis answered with an error",
            Self::Timeout => "no answer from Redis within the timeouts",
            Self::BadReply => "unexpected reply from the lease script",
            Self::Late => "calls refused as late (a clock step or a slow network)",
            Self::Foreign => {
                "a key of the rule holds a value of another type (another program wrote \
                 it): remove the key"
            }
            Self::TlsUnknownCa => {
                "Redis's TLS certificate is not signed by a trusted CA: give the CA that \
                 signed it (tls_ca_file)"
            }
            Self::TlsHostName => "Redis's TLS certificate does not name the host of the Redis URL",
            Self::TlsExpired => "Redis's TLS certificate has expired",
            Self::TlsClientCert => {
                "Redis refused this client's TLS certificate (or its absence): give a \
                 client certificate its CA trusts (tls_client_cert)"
            }
            Self::Tls => "the TLS handshake with Redis failed",
        })
    }
}

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
}

impl StatCells {
    /// Counts a failed call (also in `redis_calls` and `lease_errors`).
    pub(crate) fn failed(&self, kind: FleetFailure) {
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
