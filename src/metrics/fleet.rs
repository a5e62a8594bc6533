//! The fleet limiters' instruments (features `metrics` and `redis`): each reads
//! [`FleetLimiter::stats`] when the reader collects. The counters behind them are
//! written by the fleet's worker thread after each Redis call, never by a decision.

use std::{iter, slice};

use opentelemetry::metrics::{AsyncInstrument, Meter};
use opentelemetry::KeyValue;

use super::instruments::SamplerMetrics;
use crate::clock::Clock;
use crate::fleet::{FleetFailure, FleetLimiter, FleetStats};

/// The points of one `u64` instrument at a collection, each with its attribute
/// beside the key, if any.
type Points = fn(&FleetStats) -> Vec<(u64, Option<KeyValue>)>;

impl SamplerMetrics {
    /// Live replicas the fleet limiter last saw in Redis (`k`).
    pub const FLEET_REPLICAS: &'static str = "otel_rate_sampler.fleet.replicas";
    /// 1 while the fleet limiter spends its local fallback share, else 0.
    pub const FLEET_FALLBACK: &'static str = "otel_rate_sampler.fleet.fallback";
    /// Calls to Redis (lease, heartbeat and clock calls; failed ones included).
    pub const FLEET_CALLS: &'static str = "otel_rate_sampler.fleet.calls";
    /// Failed calls to Redis, by [`ERROR_TYPE`](Self::ERROR_TYPE).
    pub const FLEET_CALL_FAILURES: &'static str = "otel_rate_sampler.fleet.call.failures";
    /// Time spent in calls to Redis (the sum of their round trips).
    pub const FLEET_CALL_TIME: &'static str = "otel_rate_sampler.fleet.call.time";
    /// The round trip of the last call to Redis.
    pub const FLEET_CALL_LAST_DURATION: &'static str = "otel_rate_sampler.fleet.call.last_duration";
    /// Permits installed for this replica, by [`SOURCE`](Self::SOURCE).
    pub const FLEET_PERMITS_LEASED: &'static str = "otel_rate_sampler.fleet.permits.leased";
    /// Permits spent by decisions.
    pub const FLEET_PERMITS_USED: &'static str = "otel_rate_sampler.fleet.permits.used";
    /// Permits left unspent when their window ended (they lapse with it).
    pub const FLEET_PERMITS_UNUSED: &'static str = "otel_rate_sampler.fleet.permits.unused";
    /// Lease calls refused because replicas with another limit or window lease the key
    /// (a rolling deploy), or a later script wrote its state.
    pub const FLEET_SHAPE_CONFLICTS: &'static str = "otel_rate_sampler.fleet.shape_conflicts";
    /// Attribute of every fleet instrument: the limiter's rule key.
    pub const FLEET_KEY: &'static str = "otel_rate_sampler.fleet.key";
    /// Attribute of the failure counter: [`FleetFailure::as_str`] (`connect`, `auth`,
    /// `redis`, `timeout`, `bad_reply`, `late`, `foreign_key`, and the TLS kinds `tls_*`).
    pub const ERROR_TYPE: &'static str = "error.type";
    /// Attribute of the leased permits: `redis` (granted by Redis) or `fallback` (the
    /// local share spent while Redis could not be reached).
    pub const SOURCE: &'static str = "otel_rate_sampler.fleet.source";

    /// Reports `limiter`'s [`stats`](FleetLimiter::stats) (feature `redis`), with the
    /// attribute `otel_rate_sampler.fleet.key` set to its rule key:
    ///
    /// | instrument | kind | unit | attributes |
    /// |---|---|---|---|
    /// | `otel_rate_sampler.fleet.replicas` | gauge | `{replica}` | key |
    /// | `otel_rate_sampler.fleet.fallback` | gauge (0 or 1) | `1` | key |
    /// | `otel_rate_sampler.fleet.calls` | counter | `{call}` | key |
    /// | `otel_rate_sampler.fleet.call.failures` | counter | `{call}` | key, `error.type` (`connect`, `auth`, `redis`, `timeout`, `bad_reply`, `late`, `foreign_key`, `tls_unknown_ca`, `tls_host_name`, `tls_expired`, `tls_client_cert`, `tls`) |
    /// | `otel_rate_sampler.fleet.call.time` | counter | `s` | key |
    /// | `otel_rate_sampler.fleet.call.last_duration` | gauge | `s` | key |
    /// | `otel_rate_sampler.fleet.permits.leased` | counter | `{permit}` | key, `otel_rate_sampler.fleet.source` (`redis`, `fallback`) |
    /// | `otel_rate_sampler.fleet.permits.used` | counter | `{permit}` | key |
    /// | `otel_rate_sampler.fleet.permits.unused` | counter | `{permit}` | key |
    /// | `otel_rate_sampler.fleet.shape_conflicts` | counter | `{call}` | key |
    ///
    /// Per key, call latency is a pair of observable figures (the mean round trip over
    /// a collection interval is the rise of `call.time` over the rise of `calls`;
    /// `call.last_duration` shows a slow or stuck Redis at once); the histogram is per
    /// Redis target, [`register_fleet_targets`](Self::register_fleet_targets). The
    /// instruments do not keep the limiter alive: once its last handle is dropped (a
    /// reload replaced it) they report nothing for it. Register each limiter once; to
    /// follow reloads, report per target instead.
    pub fn register_fleet<C: Clock + Send + Sync + 'static>(&self, limiter: &FleetLimiter<C>) {
        let meter = self.meter();
        let key = KeyValue::new(Self::FLEET_KEY, limiter.key().to_owned());
        for (name, counter, unit, description, points) in u64_instruments() {
            let (limiter, key) = (limiter.downgrade(), key.clone());
            let callback = move |out: &dyn AsyncInstrument<u64>| {
                let Some(limiter) = limiter.upgrade() else {
                    return;
                };
                for (value, extra) in points(&limiter.stats()) {
                    let attrs: Vec<KeyValue> = iter::once(key.clone()).chain(extra).collect();
                    out.observe(value, &attrs);
                }
            };
            observe_u64(&meter, (name, counter, unit, description), callback);
        }
        register_call_times(&meter, limiter, &key);
    }
}

/// Builds the observable `u64` instrument `name` (a counter, else a gauge) on `meter`.
pub(super) fn observe_u64<F>(
    meter: &Meter,
    (name, counter, unit, description): (&'static str, bool, &'static str, &'static str),
    callback: F,
) where
    F: Fn(&dyn AsyncInstrument<u64>) + Send + Sync + 'static,
{
    if counter {
        meter
            .u64_observable_counter(name)
            .with_unit(unit)
            .with_description(description)
            .with_callback(callback)
            .build();
    } else {
        meter
            .u64_observable_gauge(name)
            .with_unit(unit)
            .with_description(description)
            .with_callback(callback)
            .build();
    }
}

/// The integer instruments: (name, counter or gauge, unit, description, points).
fn u64_instruments() -> [(&'static str, bool, &'static str, &'static str, Points); 8] {
    let failures: Points = |s| {
        let kind = |k: FleetFailure| KeyValue::new(SamplerMetrics::ERROR_TYPE, k.as_str());
        FleetFailure::ALL
            .map(|k| (s.failures(k), Some(kind(k))))
            .to_vec()
    };
    let leased: Points = |s| {
        let source = |v: &'static str| Some(KeyValue::new(SamplerMetrics::SOURCE, v));
        vec![
            (s.permits_leased, source("redis")),
            (s.permits_fallback, source("fallback")),
        ]
    };
    // (name, counter or gauge, unit, description, points)
    [
        (
            SamplerMetrics::FLEET_REPLICAS,
            false,
            "{replica}",
            "Live replicas last seen in Redis",
            |s| vec![(s.instances, None)],
        ),
        (
            SamplerMetrics::FLEET_FALLBACK,
            false,
            "1",
            "1 while spending the local fallback share",
            |s| vec![(u64::from(s.fallback_active), None)],
        ),
        (
            SamplerMetrics::FLEET_CALLS,
            true,
            "{call}",
            "Calls to Redis",
            |s| vec![(s.redis_calls, None)],
        ),
        (
            SamplerMetrics::FLEET_CALL_FAILURES,
            true,
            "{call}",
            "Failed calls to Redis, by kind",
            failures,
        ),
        (
            SamplerMetrics::FLEET_PERMITS_LEASED,
            true,
            "{permit}",
            "Permits installed for this replica, from Redis or as fallback share",
            leased,
        ),
        (
            SamplerMetrics::FLEET_PERMITS_USED,
            true,
            "{permit}",
            "Permits spent",
            |s| vec![(s.permits_used, None)],
        ),
        (
            SamplerMetrics::FLEET_PERMITS_UNUSED,
            true,
            "{permit}",
            "Permits unspent when their window ended",
            |s| vec![(s.permits_unused, None)],
        ),
        (
            SamplerMetrics::FLEET_SHAPE_CONFLICTS,
            true,
            "{call}",
            "Lease calls refused: another limit or window leases the key",
            |s| vec![(s.shape_conflicts, None)],
        ),
    ]
}

/// The call-time pair (seconds, `f64`): the sum of round trips and the last one.
fn register_call_times<C: Clock + Send + Sync + 'static>(
    meter: &Meter,
    limiter: &FleetLimiter<C>,
    key: &KeyValue,
) {
    let seconds = |nanos: u64| nanos as f64 / 1e9;
    let (l, k) = (limiter.downgrade(), key.clone());
    meter
        .f64_observable_counter(SamplerMetrics::FLEET_CALL_TIME)
        .with_unit("s")
        .with_description("Time spent in calls to Redis (sum of round trips)")
        .with_callback(move |out| {
            if let Some(l) = l.upgrade() {
                out.observe(seconds(l.stats().call_nanos_total), slice::from_ref(&k));
            }
        })
        .build();
    let (l, k) = (limiter.downgrade(), key.clone());
    meter
        .f64_observable_gauge(SamplerMetrics::FLEET_CALL_LAST_DURATION)
        .with_unit("s")
        .with_description("Round trip of the last call to Redis")
        .with_callback(move |out| {
            if let Some(l) = l.upgrade() {
                out.observe(seconds(l.stats().last_call_nanos), slice::from_ref(&k));
            }
        })
        .build();
}
