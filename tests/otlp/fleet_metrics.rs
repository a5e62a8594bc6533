//! Features `metrics` and `redis` end to end: a fleet limiter's instruments, against a
//! real `redis-server`, exported over OTLP/gRPC to the real receiver, with the names,
//! units, kinds and attributes operators will query.

use std::thread;
use std::time::{Duration, Instant};

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use opentelemetry_proto::tonic::metrics::v1::NumberDataPoint;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use otel_rate_sampler::{FleetFailure, FleetLimiter, Limit, SamplerMetrics as M};

use crate::fleet_server::Server;
use crate::metrics::{attribute_text, last_metric};
use crate::receiver::{Receiver, Transport};

const WINDOW: Duration = Duration::from_millis(250);
const INTERVAL: Duration = Duration::from_millis(50);

/// One exported metric: its unit, whether it is a monotonic sum (`None`: a gauge), and
/// its points as (attributes as text, value).
struct Exported {
    unit: String,
    monotonic: Option<bool>,
    points: Vec<(Vec<(String, String)>, f64)>,
}

fn exported(receiver: &Receiver, name: &str) -> Exported {
    let requests = receiver.metrics();
    let metric = last_metric(&requests, name);
    let (monotonic, points): (_, &[NumberDataPoint]) = match &metric.data {
        Some(Data::Sum(sum)) => (Some(sum.is_monotonic), &sum.data_points),
        Some(Data::Gauge(gauge)) => (None, &gauge.data_points),
        other => panic!("{name}: {other:?}"),
    };
    let points = points
        .iter()
        .map(|p| {
            let attrs = p.attributes.iter().map(attribute_text).collect();
            let value = match p.value {
                Some(Number::AsInt(i)) => i as f64,
                Some(Number::AsDouble(d)) => d,
                None => panic!("{name}: a point without a value"),
            };
            (attrs, value)
        })
        .collect();
    Exported {
        unit: metric.unit.clone(),
        monotonic,
        points,
    }
}

impl Exported {
    /// The value of the one point whose attributes include every pair of `filter`.
    fn value(&self, filter: &[(&str, &str)]) -> f64 {
        let matching: Vec<f64> = self
            .points
            .iter()
            .filter(|(attrs, _)| {
                filter
                    .iter()
                    .all(|(k, v)| attrs.iter().any(|(ak, av)| ak == k && av == v))
            })
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(matching.len(), 1, "{filter:?}: {matching:?}");
        matching[0]
    }
}

#[test]
fn fleet_instruments_cross_otlp_with_their_units_and_attributes() {
    let server = Server::start();
    let receiver = Receiver::start();
    let limiter = FleetLimiter::builder(
        server.url(),
        "otlp",
        Limit::per_window(100, WINDOW).unwrap(),
    )
    .sync_interval(INTERVAL)
    .response_timeout(INTERVAL)
    .build()
    .expect("build");
    let reader =
        PeriodicReader::builder(crate::receiver::metric_exporter(&receiver, Transport::Grpc))
            // Only the shutdown exports: one cumulative snapshot after all the traffic.
            .with_interval(Duration::from_secs(3600))
            .build();
    let meters = SdkMeterProvider::builder().with_reader(reader).build();
    M::with_meter(meters.meter("fleet")).register_fleet(&limiter);

    let deadline = Instant::now() + Duration::from_secs(10);
    while !limiter.stats().clock_synced {
        assert!(
            Instant::now() < deadline,
            "never synced: {:?}",
            limiter.stats()
        );
        thread::sleep(Duration::from_millis(5));
    }
    let mut admitted = 0u64;
    let until = Instant::now() + WINDOW * 4;
    while Instant::now() < until {
        admitted += u64::from(limiter.acquire_window().is_some());
        thread::sleep(Duration::from_micros(500));
    }
    thread::sleep(WINDOW * 2);
    // The worker goes on while the shutdown exports: what it exports lies between the
    // stats read just before and just after.
    let before = limiter.stats();
    meters.shutdown().expect("meter provider shutdown flushes");
    let after = limiter.stats();
    let between = |value: f64, low: u64, high: u64| (low as f64..=high as f64).contains(&value);

    let key = (M::FLEET_KEY, "otlp");
    let kinds = [
        (M::FLEET_REPLICAS, "{replica}", None),
        (M::FLEET_FALLBACK, "1", None),
        (M::FLEET_CALLS, "{call}", Some(true)),
        (M::FLEET_CALL_FAILURES, "{call}", Some(true)),
        (M::FLEET_CALL_TIME, "s", Some(true)),
        (M::FLEET_CALL_LAST_DURATION, "s", None),
        (M::FLEET_PERMITS_LEASED, "{permit}", Some(true)),
        (M::FLEET_PERMITS_USED, "{permit}", Some(true)),
        (M::FLEET_PERMITS_UNUSED, "{permit}", Some(true)),
    ];
    for (name, unit, monotonic) in kinds {
        let e = exported(&receiver, name);
        assert_eq!((e.unit.as_str(), e.monotonic), (unit, monotonic), "{name}");
    }
    assert_eq!(exported(&receiver, M::FLEET_REPLICAS).value(&[key]), 1.0);
    let fallback = exported(&receiver, M::FLEET_FALLBACK).value(&[key]);
    assert!(
        [before.fallback_active, after.fallback_active]
            .iter()
            .any(|&active| fallback == f64::from(u8::from(active))),
        "fallback {fallback}: before {before:?}, after {after:?}"
    );
    assert!(exported(&receiver, M::FLEET_CALLS).value(&[key]) >= 1.0);
    assert!(exported(&receiver, M::FLEET_CALL_TIME).value(&[key]) > 0.0);
    // Every kind has its series. A call may time out on a loaded machine (a fault the
    // limiter rides out), so the counts are the limiter's own, not zero.
    let failures = exported(&receiver, M::FLEET_CALL_FAILURES);
    for kind in FleetFailure::ALL {
        let value = failures.value(&[key, (M::ERROR_TYPE, kind.as_str())]);
        let (low, high) = (before.failures(kind), after.failures(kind));
        assert!(
            between(value, low, high),
            "{kind:?}: {value} not in {low}..={high}"
        );
    }
    let used = exported(&receiver, M::FLEET_PERMITS_USED).value(&[key]);
    let leased = exported(&receiver, M::FLEET_PERMITS_LEASED);
    let from_redis = leased.value(&[key, (M::SOURCE, "redis")]);
    let fallback_permits = leased.value(&[key, (M::SOURCE, "fallback")]);
    let (low, high) = (before.permits_fallback, after.permits_fallback);
    assert!(
        between(fallback_permits, low, high),
        "fallback permits {fallback_permits} not in {low}..={high}"
    );
    assert!(
        admitted > 0 && used >= 1.0 && used <= admitted as f64,
        "{used} of {admitted}"
    );
    assert!(used <= from_redis, "used {used} > leased {from_redis}");
}
