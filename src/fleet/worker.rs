//! One rule's side of the shared worker (`pool.rs`): the lease state machine
//! (`lease.rs`) of one limiter, asked each round for its due call, given the answer
//! back, and its warnings (at most one per sync interval).
//!
//! The pool never holds the limiter across an await: a rule plans while holding a
//! strong reference, drops it, and applies the answer after the round only if the
//! limiter is still there. Dropping the last handle therefore ends the rule's calls at
//! once, even in the middle of a slow round.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use redis::Value;

use super::call_error::CallError;
use super::lease::phase_of;
use super::lease::{
    Call, LeaseMachine, Notice, Settings, Shared, Vouch, FALLBACK_AFTER_INTERVALS,
    PRUNE_AFTER_INTERVALS,
};
use super::stall::StallWatch;
use super::stats::FleetFailure;
use super::throttle::Throttle;
use super::wire::{read_reply, RuleWire};

/// What a rule's worker needs of the limiter it serves: its clock's reading and the
/// state the lease machine writes. The limiter implements it; the worker holds it
/// weakly, so a dropped limiter ends its rule's calls.
pub(crate) trait Served: Send + Sync {
    /// The limiter's clock now (nanoseconds).
    fn now_nanos(&self) -> u64;
    /// What the lease state machine writes.
    fn shared(&self) -> Shared<'_>;
}

/// A rule as the pool sees it, whatever its clock.
pub(crate) trait Member: Send + Sync {
    /// How its calls go on the wire.
    fn wire(&self) -> &RuleWire;
    /// How often it wants to be asked for a call.
    fn tick(&self) -> Duration;
    /// Its call due now, if any (none while one is in flight, once stopped or
    /// dropped); `pull`: a heartbeat due within a quarter interval too, to go in a
    /// round that goes anyway.
    fn plan(&self, pull: bool) -> Option<Planned>;
    /// What it vouches for in its replica's heartbeat (`lease/vouch.rs`); `in_round`:
    /// the send time (fleet ms) of its lease call in the round, if it has one.
    fn vouch(&self, in_round: Option<u64>) -> Vouch;
    /// Redis's answer to `planned` (or why there is none), after `round_trip`.
    fn apply(&self, planned: Planned, answer: Result<Value, CallError>, round_trip: Duration);
    /// The round of `planned` was abandoned (the worker stops).
    fn abandon(&self);
    /// Whether the rule was shut down.
    fn stopped(&self) -> bool;
    /// The replicas it last saw in Redis, and whether it spends its fallback share;
    /// `None` once its limiter is dropped.
    #[cfg(feature = "metrics")]
    fn gauges(&self) -> Option<(u64, bool)> {
        None
    }
    /// Whether it went dormant since the last ask: its member is to leave the rule
    /// (`lease/dormant.rs`).
    fn leaving(&self) -> bool {
        false
    }
}

/// A call a rule planned, and the local time it planned it at.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Planned {
    pub(crate) call: Call,
    t0: u64,
}

#[cfg(test)]
impl Planned {
    /// `call`, planned at local time 0.
    pub(crate) fn at_zero(call: Call) -> Self {
        Self { call, t0: 0 }
    }
}

/// One limiter's rule in the shared worker.
pub(crate) struct RuleWorker {
    inner: Weak<dyn Served>,
    wire: RuleWire,
    tick: Duration,
    stopped: AtomicBool,
    /// It went dormant: its member is to leave the rule.
    leave_due: AtomicBool,
    state: Mutex<RuleState>,
    /// Whether a call of this rule is in a round; `idle` is notified when it is not.
    in_flight: Mutex<bool>,
    idle: Condvar,
}

/// What the rule's side keeps between rounds.
struct RuleState {
    machine: LeaseMachine,
    interval_nanos: u64,
    last_warning: Option<u64>,
    errors_since_warning: u64,
    /// Clock steps, logged at most once per interval.
    steps: Throttle,
    /// Refusals (shape or version), logged at most once per interval.
    refusals: Throttle,
    /// The limiter's clock against real time.
    stall: StallWatch,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RuleWorker {
    pub(crate) fn new(inner: Weak<dyn Served>, mut wire: RuleWire) -> Self {
        let interval_nanos = nanos(wire.interval).max(1);
        let tick = Duration::from_nanos((wire.window_nanos / 40).min(interval_nanos / 4))
            .max(Duration::from_millis(1));
        // Recovery windows after Redis's memory starts: enough for every instance to
        // have retried (one interval plus the call's timeouts), plus one.
        let recovery = FALLBACK_AFTER_INTERVALS * interval_nanos + nanos(wire.bound());
        wire.young_windows = recovery.div_ceil(wire.window_nanos) + 2;
        let settings = Settings {
            permits: wire.permits,
            window_nanos: wire.window_nanos,
            interval_nanos,
            tick_nanos: nanos(tick),
            call_bound_nanos: nanos(wire.bound()),
            phase_nanos: phase_of(&wire.group, interval_nanos),
        };
        Self {
            inner,
            wire,
            tick,
            stopped: AtomicBool::new(false),
            leave_due: AtomicBool::new(false),
            state: Mutex::new(RuleState {
                machine: LeaseMachine::new(settings),
                interval_nanos,
                last_warning: None,
                errors_since_warning: 0,
                steps: Throttle::default(),
                refusals: Throttle::default(),
                stall: StallWatch::default(),
            }),
            in_flight: Mutex::new(false),
            idle: Condvar::new(),
        }
    }

    /// Stops the rule's calls and waits (at most its call bound) for one in a round to
    /// end: afterwards it writes nothing more to Redis.
    pub(crate) fn stop_and_wait(&self) {
        // Release: pairs with the Acquire load in `stopped`.
        self.stopped.store(true, Ordering::Release);
        let in_flight = lock(&self.in_flight);
        let _ = self
            .idle
            .wait_timeout_while(in_flight, self.wire.bound() * 2, |f| *f);
    }

    /// Stops the rule's calls without waiting.
    pub(crate) fn stop(&self) {
        // Release: pairs with the Acquire load in `stopped`.
        self.stopped.store(true, Ordering::Release);
    }

    /// The limiter is closed or dropped: its window counts as closed in the statistics.
    pub(crate) fn retire(&self, shared: Shared<'_>) {
        lock(&self.state).machine.retire(shared);
    }

    fn landed(&self) {
        *lock(&self.in_flight) = false;
        self.idle.notify_all();
    }
}

impl Member for RuleWorker {
    fn wire(&self) -> &RuleWire {
        &self.wire
    }

    fn tick(&self) -> Duration {
        self.tick
    }

    fn plan(&self, pull: bool) -> Option<Planned> {
        // One call in flight at a time.
        if self.stopped() || *lock(&self.in_flight) {
            return None;
        }
        let inner = self.inner.upgrade()?;
        let t0 = inner.now_nanos();
        let ahead = if pull {
            nanos(self.wire.interval) / 4
        } else {
            0
        };
        let mut state = lock(&self.state);
        if state.stall.stalled(t0, Instant::now(), self.wire.interval) {
            state.machine.clock_stalled();
        }
        let call = state.machine.plan_within(inner.shared(), t0, ahead);
        if state.machine.take_leave_due() {
            // Relaxed: read by the pool's thread, which is this one.
            self.leave_due.store(true, Ordering::Relaxed);
        }
        drop(state);
        let call = call?;
        *lock(&self.in_flight) = true;
        Some(Planned { call, t0 })
    }

    fn vouch(&self, in_round: Option<u64>) -> Vouch {
        lock(&self.state).machine.vouch(in_round)
    }

    fn apply(&self, planned: Planned, answer: Result<Value, CallError>, round_trip: Duration) {
        if let Some(inner) = self.inner.upgrade() {
            let t1 = inner.now_nanos();
            inner.shared().stats.timed(nanos(round_trip));
            let bound = self.wire.bound();
            let result = match answer {
                // Later than this rule waits: the rule's own timeout, as if alone.
                Ok(_) if round_trip > bound => Err(CallError::Timeout(bound)),
                Ok(value) => read_reply(planned.call, value, self.wire.response_timeout),
                Err(e) => Err(e),
            };
            let mut state = lock(&self.state);
            let Planned { call, t0 } = planned;
            match result {
                Ok(reply) => state.machine.on_reply(inner.shared(), call, reply, t0, t1),
                Err(error) => {
                    let kind = error.kind();
                    state.machine.on_failure(inner.shared(), (t0, t1), kind);
                    state.warn_failure(&self.wire.tag, call, &error, t1);
                }
            }
            state.log_notices(&self.wire.tag, t1);
        }
        self.landed();
    }

    fn abandon(&self) {
        self.landed();
    }

    fn stopped(&self) -> bool {
        // Acquire: pairs with the Release store in `stop`.
        self.stopped.load(Ordering::Acquire)
    }

    #[cfg(feature = "metrics")]
    fn gauges(&self) -> Option<(u64, bool)> {
        let inner = self.inner.upgrade()?;
        let stats = inner.shared().stats;
        // Relaxed (both): display values (see `StatCells`).
        Some((
            stats.instances.load(Ordering::Relaxed),
            stats.fallback.load(Ordering::Relaxed),
        ))
    }

    fn leaving(&self) -> bool {
        // Relaxed: written and read by the pool's thread.
        self.leave_due.swap(false, Ordering::Relaxed)
    }
}

impl RuleState {
    /// Logs a failed call, at most once per sync interval (with the count since).
    fn warn_failure(&mut self, key: &str, call: Call, error: &CallError, now: u64) {
        self.errors_since_warning += 1;
        if self
            .last_warning
            .is_some_and(|t| now.saturating_sub(t) < self.interval_nanos)
        {
            return;
        }

        let errors = self.errors_since_warning;
        if error.kind() == FleetFailure::Auth {
            // Retrying cannot help: say what to fix.
            tracing::error!(target: "otel_rate_sampler::fleet", key = %key, errors, %error,
                "Redis refused authentication: this replica leases nothing until the \
                 password (or user) in the Redis URL matches the server's");
        } else if matches!(error, CallError::Tls(..)) {
            // Retrying cannot help either: name the certificate problem.
            tracing::error!(target: "otel_rate_sampler::fleet", key = %key, errors, %error,
                "this replica leases nothing until the TLS certificates \
                 are fixed (never a fallback to plain text)");
        } else if error.kind() == FleetFailure::Foreign {
            tracing::error!(target: "otel_rate_sampler::fleet", key = %key, errors, %error,
                "a key of this fleet rule holds a value another program wrote: this rule \
                 admits only what Redis granted it (no fallback share) until the key is \
                 removed; the other rules go on");
        } else {
            tracing::warn!(target: "otel_rate_sampler::fleet", key = %key, errors, ?call,
                %error, "Redis call failed");
        }
        self.last_warning = Some(now);
        self.errors_since_warning = 0;
    }

    /// Logs the machine's notices; clock steps at most once per sync interval (with
    /// the count of those not logged since).
    fn log_notices(&mut self, key: &str, now: u64) {
        for notice in self.machine.take_notices() {
            match notice {
                Notice::FellBack { instances, cause } => {
                    let why = fallback_cause(cause);
                    tracing::warn!(target: "otel_rate_sampler::fleet",
                        key = %key, instances,
                        "no Redis answer for {FALLBACK_AFTER_INTERVALS} sync intervals ({why}): \
                         spending the local share N/{instances}");
                }
                Notice::ClockStep { nanos } => {
                    let Some(steps) = self.steps.due(now, self.interval_nanos) else {
                        continue;
                    };
                    let by = Duration::from_nanos(
                        u64::try_from(nanos.unsigned_abs()).unwrap_or(u64::MAX),
                    );
                    let direction = if nanos > 0 { "later" } else { "earlier" };
                    tracing::warn!(target: "otel_rate_sampler::fleet",
                        key = %key, steps,
                        "clock step detected: Redis time is {by:?} {direction} than this \
                         replica's mapping; mapping corrected");
                }
                Notice::Refused { version } => {
                    let Some(refusals) = self.refusals.due(now, self.interval_nanos) else {
                        continue;
                    };
                    if version {
                        tracing::error!(target: "otel_rate_sampler::fleet",
                            key = %key, refusals,
                            "this fleet rule's key holds the state of a later version of \
                             the lease script: this replica admits nothing for it until \
                             it is upgraded too");
                    } else {
                        tracing::warn!(target: "otel_rate_sampler::fleet",
                            key = %key, refusals,
                            "replicas with another limit or window lease this fleet key \
                             (a rolling deploy?): this replica admits nothing for it until \
                             they stop calling, then its limit takes over");
                    }
                }
                Notice::ShareExpired => {
                    tracing::warn!(target: "otel_rate_sampler::fleet",
                        key = %key,
                        "no heartbeat reached Redis for nearly {PRUNE_AFTER_INTERVALS} sync \
                         intervals (less a margin of the call timeouts): Redis may give this \
                         replica's share to the others; admitting nothing until Redis \
                         answers (a partition, or Redis down)");
                }
                Notice::Resumed => {
                    tracing::warn!(target: "otel_rate_sampler::fleet",
                        key = %key, "Redis answers again: leasing resumed");
                }
            }
        }
    }
}

/// Why the replica fell back, in words: the kind of the last failed call, or that no
/// call failed.
fn fallback_cause(cause: Option<FleetFailure>) -> &'static str {
    match cause {
        None => {
            "no call failed: this replica's clock jumped ahead or its fleet thread was \
             stalled"
        }
        Some(FleetFailure::Auth) => "Redis refuses authentication",
        Some(FleetFailure::Connect) => "cannot connect to Redis",
        Some(FleetFailure::Timeout) => {
            "calls time out: a partition, a paused or overloaded Redis, or Redis down"
        }
        Some(FleetFailure::Late) => {
            "calls refused as late: a clock step (see the clock-step warning) or a slow \
             network"
        }
        Some(FleetFailure::Redis | FleetFailure::BadReply) => "Redis answers with errors",
        Some(FleetFailure::Foreign) => "a key of the rule holds a value another program wrote",
        Some(
            FleetFailure::TlsUnknownCa
            | FleetFailure::TlsHostName
            | FleetFailure::TlsExpired
            | FleetFailure::TlsClientCert
            | FleetFailure::Tls,
        ) => "the TLS handshake with Redis fails (see the TLS error)",
    }
}
