//! The fleet's instruments per Redis target (features `metrics` and `redis`): what each
//! worker of the process did for all the rules it serves, found at each collection, so
//! they follow reloads without holding any limiter.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::{AsyncInstrument, Histogram, Meter};
use opentelemetry::KeyValue;

use super::fleet::observe_u64;
use super::instruments::SamplerMetrics;
use crate::fleet::{self, FleetFailure, RoundObserver, TargetStats};

/// The points of one target instrument: (value, attribute beside the target's).
type Points = fn(&TargetStats) -> Vec<(u64, Option<KeyValue>)>;

/// The round-trip histogram's bucket bounds, in seconds: loopback to a slow WAN.
const ROUND_TRIP_BOUNDS: [f64; 14] = [
    0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

impl SamplerMetrics {
    /// Attribute of every per-target instrument: the Redis URL(s) without credentials
    /// but the user (`redis://app@10.0.0.1:6379/0`; a cluster's seeds sorted, joined by
    /// `,`, after `cluster:`). Never a password.
    pub const FLEET_TARGET: &'static str = "otel_rate_sampler.fleet.target";
    /// Rules the target's worker serves.
    pub const FLEET_TARGET_RULES: &'static str = "otel_rate_sampler.fleet.target.rules";
    /// The most live replicas one of the target's rules last saw in Redis.
    pub const FLEET_TARGET_REPLICAS: &'static str = "otel_rate_sampler.fleet.target.replicas";
    /// The target's rules spending their local fallback share.
    pub const FLEET_TARGET_FALLBACK: &'static str = "otel_rate_sampler.fleet.target.fallback";
    /// The rules' calls to the target (lease, heartbeat and clock calls).
    pub const FLEET_TARGET_CALLS: &'static str = "otel_rate_sampler.fleet.target.calls";
    /// Failed calls to the target, by [`ERROR_TYPE`](Self::ERROR_TYPE).
    pub const FLEET_TARGET_FAILURES: &'static str = "otel_rate_sampler.fleet.target.call.failures";
    /// Round trips to the target (one per round of pipelined calls), a histogram.
    pub const FLEET_TARGET_ROUND_TRIP: &'static str = "otel_rate_sampler.fleet.target.round_trip";
    /// Permits installed for the target's rules, by [`SOURCE`](Self::SOURCE).
    pub const FLEET_TARGET_LEASED: &'static str = "otel_rate_sampler.fleet.target.permits.leased";
    /// Permits the target's rules spent.
    pub const FLEET_TARGET_USED: &'static str = "otel_rate_sampler.fleet.target.permits.used";
    /// Permits the target's rules left unspent when their window ended (returned to
    /// the fleet: they lapse with the window).
    pub const FLEET_TARGET_UNUSED: &'static str = "otel_rate_sampler.fleet.target.permits.unused";
    /// Lease calls refused for another limit or window on the key (a rolling deploy).
    pub const FLEET_TARGET_SHAPE_CONFLICTS: &'static str =
        "otel_rate_sampler.fleet.target.shape_conflicts";

    /// Reports every Redis target the process's fleet limiters use (feature `redis`),
    /// now and later, one series per target labelled
    /// [`FLEET_TARGET`](Self::FLEET_TARGET):
    ///
    /// | instrument | kind | unit | attributes |
    /// |---|---|---|---|
    /// | `otel_rate_sampler.fleet.target.rules` | gauge | `{rule}` | target |
    /// | `otel_rate_sampler.fleet.target.replicas` | gauge | `{replica}` | target |
    /// | `otel_rate_sampler.fleet.target.fallback` | gauge | `{rule}` | target |
    /// | `otel_rate_sampler.fleet.target.calls` | counter | `{call}` | target |
    /// | `otel_rate_sampler.fleet.target.call.failures` | counter | `{call}` | target, `error.type` |
    /// | `otel_rate_sampler.fleet.target.round_trip` | histogram | `s` | target |
    /// | `otel_rate_sampler.fleet.target.permits.leased` | counter | `{permit}` | target, `otel_rate_sampler.fleet.source` |
    /// | `otel_rate_sampler.fleet.target.permits.used` | counter | `{permit}` | target |
    /// | `otel_rate_sampler.fleet.target.permits.unused` | counter | `{permit}` | target |
    /// | `otel_rate_sampler.fleet.target.shape_conflicts` | counter | `{call}` | target |
    ///
    /// The counters cover every rule the target's worker served, those a reload
    /// dropped included (a rule's last window counts when it is dropped), so they
    /// never fall back while the worker runs; the instruments hold no limiter, and a
    /// reload's new limiters are counted as they join. The histogram is synchronous,
    /// recorded by each worker's thread after each round (never by a decision).
    /// Register once per meter provider.
    pub fn register_fleet_targets(&self) {
        let meter = self.meter();
        for (name, counter, unit, description, points) in target_instruments() {
            let callback = move |out: &dyn AsyncInstrument<u64>| {
                for target in fleet::targets() {
                    let label = KeyValue::new(Self::FLEET_TARGET, target.label.clone());
                    for (value, extra) in points(&target) {
                        let mut attrs = vec![label.clone()];
                        attrs.extend(extra);
                        out.observe(value, &attrs);
                    }
                }
            };
            observe_u64(&meter, (name, counter, unit, description), callback);
        }
        fleet::observe_rounds(Arc::new(RoundTrips(round_trips(&meter))));
    }
}

fn round_trips(meter: &Meter) -> Histogram<f64> {
    meter
        .f64_histogram(SamplerMetrics::FLEET_TARGET_ROUND_TRIP)
        .with_unit("s")
        .with_description("Round trips to a Redis target (one per round of calls)")
        .with_boundaries(ROUND_TRIP_BOUNDS.to_vec())
        .build()
}

/// The histogram, told each round by the workers.
struct RoundTrips(Histogram<f64>);

impl RoundObserver for RoundTrips {
    fn round_trip(&self, label: &str, round_trip: Duration) {
        let target = KeyValue::new(SamplerMetrics::FLEET_TARGET, label.to_owned());
        self.0.record(round_trip.as_secs_f64(), &[target]);
    }
}

/// The observable instruments: (name, counter or gauge, unit, description, points).
fn target_instruments() -> [(&'static str, bool, &'static str, &'static str, Points); 9] {
    let failures: Points = |t| {
        let kind = |k: FleetFailure| KeyValue::new(SamplerMetrics::ERROR_TYPE, k.as_str());
        FleetFailure::ALL
            .map(|k| (t.failures(k), Some(kind(k))))
            .to_vec()
    };
    let leased: Points = |t| {
        let source = |v: &'static str| Some(KeyValue::new(SamplerMetrics::SOURCE, v));
        vec![
            (t.permits_leased, source("redis")),
            (t.permits_fallback, source("fallback")),
        ]
    };
    [
        (
            SamplerMetrics::FLEET_TARGET_RULES,
            false,
            "{rule}",
            "Rules served by the Redis target's worker",
            |t| vec![(t.gauges.rules, None)],
        ),
        (
            SamplerMetrics::FLEET_TARGET_REPLICAS,
            false,
            "{replica}",
            "The most live replicas a rule of the target last saw",
            |t| vec![(t.gauges.replicas, None)],
        ),
        (
            SamplerMetrics::FLEET_TARGET_FALLBACK,
            false,
            "{rule}",
            "Rules of the target spending their local fallback share",
            |t| vec![(t.gauges.in_fallback, None)],
        ),
        (
            SamplerMetrics::FLEET_TARGET_CALLS,
            true,
            "{call}",
            "Calls to the Redis target",
            |t| vec![(t.calls, None)],
        ),
        (
            SamplerMetrics::FLEET_TARGET_FAILURES,
            true,
            "{call}",
            "Failed calls to the Redis target, by kind",
            failures,
        ),
        (
            SamplerMetrics::FLEET_TARGET_LEASED,
            true,
            "{permit}",
            "Permits installed for the target's rules, from Redis or as fallback share",
            leased,
        ),
        (
            SamplerMetrics::FLEET_TARGET_USED,
            true,
            "{permit}",
            "Permits the target's rules spent",
            |t| vec![(t.permits_used, None)],
        ),
        (
            SamplerMetrics::FLEET_TARGET_UNUSED,
            true,
            "{permit}",
            "Permits unspent when their window ended",
            |t| vec![(t.permits_unused, None)],
        ),
        (
            SamplerMetrics::FLEET_TARGET_SHAPE_CONFLICTS,
            true,
            "{call}",
            "Lease calls refused: another limit or window leases the key",
            |t| vec![(t.shape_conflicts, None)],
        ),
    ]
}
