//! The background thread: its own current-thread tokio runtime, and the loop that
//! asks the lease state machine (`lease.rs`) what to call, makes the call through the
//! transport (`transport.rs`) and hands the answer back.
//!
//! The loop never holds the limiter across an await: it plans a call while holding a
//! strong reference, drops it, awaits the call (racing the stop signal), then applies
//! the reply. Dropping the last handle therefore stops the thread at once, even in the
//! middle of a slow call.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::lease::{
    Call, LeaseMachine, Notice, Settings, FALLBACK_AFTER_INTERVALS, FALLBACK_MARGIN_INTERVALS,
    PRUNE_AFTER_INTERVALS,
};
use super::limiter::Inner;
use super::stats::FleetFailure;
use super::stop::Stop;
use super::transport::{CallError, Transport, WorkerConfig};
use crate::clock::Clock;

/// Starts the thread.
pub(crate) fn spawn<C: Clock>(
    inner: Weak<Inner<C>>,
    config: WorkerConfig,
) -> io::Result<JoinHandle<()>> {
    let stop = match inner.upgrade() {
        Some(i) => Arc::clone(&i.stop),
        None => return Err(io::Error::other("the limiter was dropped while building")),
    };
    thread::Builder::new()
        .name("otel-rate-fleet".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::warn!(target: "otel_rate_sampler::fleet", error = %e,
                        "could not start the fleet runtime; this instance admits nothing");
                    return;
                }
            };
            runtime.block_on(Worker::new(inner, config, stop).run());
        })
}

struct Worker<C> {
    inner: Weak<Inner<C>>,
    stop: Arc<Stop>,
    machine: LeaseMachine,
    transport: Transport,
    tick: Duration,
    interval_nanos: u64,
    last_warning: Option<u64>,
    errors_since_warning: u64,
    /// When a clock step was last logged, and the steps not logged since.
    last_step_warning: Option<u64>,
    steps_since_warning: u64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<C: Clock> Worker<C> {
    fn new(inner: Weak<Inner<C>>, config: WorkerConfig, stop: Arc<Stop>) -> Self {
        let interval_nanos = nanos(config.interval).max(1);
        let tick = Duration::from_nanos((config.window_nanos / 40).min(interval_nanos / 4))
            .max(Duration::from_millis(1));
        // Recovery windows after Redis's memory starts: enough for every instance to
        // have retried (one interval plus the call's timeouts), plus one.
        let recovery = FALLBACK_AFTER_INTERVALS * interval_nanos
            + nanos(config.response_timeout)
            + nanos(config.connect_timeout);
        let young_windows = recovery.div_ceil(config.window_nanos) + 2;
        let settings = Settings {
            permits: config.permits,
            window_nanos: config.window_nanos,
            interval_nanos,
            tick_nanos: nanos(tick),
        };
        let transport = Transport::new(config, young_windows);
        Self {
            inner,
            stop,
            machine: LeaseMachine::new(settings),
            transport,
            tick,
            interval_nanos,
            last_warning: None,
            errors_since_warning: 0,
            last_step_warning: None,
            steps_since_warning: 0,
        }
    }

    async fn run(mut self) {
        while !self.stop.is_stopped() {
            let planned = {
                let Some(inner) = self.inner.upgrade() else {
                    break;
                };
                let now = inner.clock.now_nanos();
                self.machine
                    .plan(inner.shared(), now)
                    .map(|call| (call, now))
            };
            let Some((call, t0)) = planned else {
                let slept = self.stop.unless_stopped(tokio::time::sleep(self.tick));
                if slept.await.is_none() {
                    break;
                }
                continue;
            };
            // The round trip for the statistics, from the precise monotonic clock (the
            // limiter's clock may be coarse: a loopback call would read 0).
            let started = Instant::now();
            let Some(result) = self.transport.call(call, &self.stop).await else {
                break;
            };
            let Some(inner) = self.inner.upgrade() else {
                break;
            };
            let t1 = inner.clock.now_nanos();
            inner.stats.timed(nanos(started.elapsed()));
            match result {
                Ok(reply) => self.machine.on_reply(inner.shared(), call, reply, t0, t1),
                Err(error) => {
                    self.machine.on_failure(inner.shared(), t0, error.kind());
                    self.warn_failure(call, &error, t1);
                }
            }
            self.log_notices(t1);
        }
        if let Some(inner) = self.inner.upgrade() {
            // Relaxed: a display value (see `StatCells`).
            inner.stats.fallback.store(false, Ordering::Relaxed);
        }
    }

    /// Logs a failed call, at most once per sync interval (with the count since).
    fn warn_failure(&mut self, call: Call, error: &CallError, now: u64) {
        self.errors_since_warning += 1;
        if self
            .last_warning
            .is_some_and(|t| now.saturating_sub(t) < self.interval_nanos)
        {
            return;
        }
        let key = self.transport.tag();
        let errors = self.errors_since_warning;
        if error.kind() == FleetFailure::Auth {
            // Retrying cannot help: say what to fix.
            tracing::error!(target: "otel_rate_sampler::fleet", key = %key, errors, %error,
                "Redis refused authentication: this replica leases nothing until the \
                 password (or user) in the Redis URL matches the server's");
        } else {
            tracing::warn!(target: "otel_rate_sampler::fleet", key = %key, errors, ?call,
                %error, "Redis call failed");
        }
        self.last_warning = Some(now);
        self.errors_since_warning = 0;
    }

    /// Logs the machine's notices; clock steps at most once per sync interval (with
    /// the count of those not logged since).
    fn log_notices(&mut self, now: u64) {
        for notice in self.machine.take_notices() {
            match notice {
                Notice::FellBack { instances, cause } => {
                    let why = fallback_cause(cause);
                    tracing::warn!(target: "otel_rate_sampler::fleet",
                        key = %self.transport.tag(), instances,
                        "no Redis answer for {FALLBACK_AFTER_INTERVALS} sync intervals ({why}): \
                         spending the local share N/{instances}");
                }
                Notice::ClockStep { nanos } => {
                    self.steps_since_warning += 1;
                    if self
                        .last_step_warning
                        .is_some_and(|t| now.saturating_sub(t) < self.interval_nanos)
                    {
                        continue;
                    }
                    let steps = std::mem::take(&mut self.steps_since_warning);
                    self.last_step_warning = Some(now);
                    let by = Duration::from_nanos(
                        u64::try_from(nanos.unsigned_abs()).unwrap_or(u64::MAX),
                    );
                    let direction = if nanos > 0 { "later" } else { "earlier" };
                    tracing::warn!(target: "otel_rate_sampler::fleet",
                        key = %self.transport.tag(), steps,
                        "clock step detected: Redis time is {by:?} {direction} than this \
                         replica's mapping; mapping corrected");
                }
                Notice::ShareExpired => {
                    tracing::warn!(target: "otel_rate_sampler::fleet",
                        key = %self.transport.tag(),
                        "no heartbeat reached Redis for {} sync intervals: Redis may have \
                         given this replica's share to the others; admitting nothing until \
                         Redis answers (a partition, or Redis down)",
                        PRUNE_AFTER_INTERVALS - FALLBACK_MARGIN_INTERVALS);
                }
                Notice::Resumed => {
                    tracing::warn!(target: "otel_rate_sampler::fleet",
                        key = %self.transport.tag(), "Redis answers again: leasing resumed");
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
    }
}
