//! The fleet instruments against a real `redis-server`, read back from an in-memory
//! exporter: calls, replicas, permits while Redis answers; fallback = 1 and failures
//! by kind once it is killed.

use std::thread;
use std::time::{Duration, Instant};

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use otel_rate_sampler::{FleetFailure, SamplerMetrics as M};

use crate::load::{self, WINDOW};
use crate::server::Server;

/// Every point of `name` in the last export, as (attributes, value as f64).
fn points(exporter: &InMemoryMetricExporter, name: &str) -> Vec<(Vec<KeyValue>, f64)> {
    let all = exporter.get_finished_metrics().unwrap();
    let metric = all
        .iter()
        .flat_map(|rm| rm.scope_metrics())
        .flat_map(|sm| sm.metrics())
        .filter(|m| m.name() == name)
        .fold(None, |_, m| Some(m))
        .unwrap_or_else(|| panic!("no {name}"));
    let attrs = |a: &mut dyn Iterator<Item = &KeyValue>| a.cloned().collect::<Vec<_>>();
    match metric.data() {
        AggregatedMetrics::U64(MetricData::Sum(d)) => d
            .data_points()
            .map(|p| (attrs(&mut p.attributes()), p.value() as f64))
            .collect(),
        AggregatedMetrics::U64(MetricData::Gauge(d)) => d
            .data_points()
            .map(|p| (attrs(&mut p.attributes()), p.value() as f64))
            .collect(),
        AggregatedMetrics::F64(MetricData::Sum(d)) => d
            .data_points()
            .map(|p| (attrs(&mut p.attributes()), p.value()))
            .collect(),
        AggregatedMetrics::F64(MetricData::Gauge(d)) => d
            .data_points()
            .map(|p| (attrs(&mut p.attributes()), p.value()))
            .collect(),
        other => panic!("{name}: {other:?}"),
    }
}

/// The value of the one point of `name` whose attributes include `filter`.
pub(crate) fn value(exporter: &InMemoryMetricExporter, name: &str, filter: &[(&str, &str)]) -> f64 {
    let matching: Vec<f64> = points(exporter, name)
        .into_iter()
        .filter(|(attrs, _)| {
            filter.iter().all(|(k, v)| {
                attrs
                    .iter()
                    .any(|kv| kv.key.as_str() == *k && kv.value == Value::from(v.to_string()))
            })
        })
        .map(|(_, v)| v)
        .collect();
    assert_eq!(matching.len(), 1, "{name} {filter:?}: {matching:?}");
    matching[0]
}

#[test]
fn fleet_instruments_report_calls_permits_then_fallback_and_failures_by_kind() {
    let mut server = Server::start();
    let fleet = load::fleet(&[server.url()], "metered", 1);
    let limiter = &fleet[0];
    let exporter = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    M::with_meter(meters.meter("test")).register_fleet(limiter);
    // Past the young windows, so the replica has a settled share to fall back on.
    load::warm_up(&fleet, 5);
    let mut admitted = 0u64;
    let until = Instant::now() + WINDOW * 3;
    while Instant::now() < until {
        admitted += u64::from(limiter.acquire_window().is_some());
        thread::sleep(Duration::from_micros(200));
    }
    // Every window of the load rolled past.
    thread::sleep(WINDOW * 2);
    meters.force_flush().unwrap();
    let key = (M::FLEET_KEY, "metered");
    let up = |name| value(&exporter, name, &[key]);
    assert_eq!(up(M::FLEET_REPLICAS), 1.0);
    assert_eq!(up(M::FLEET_FALLBACK), 0.0);
    assert!(up(M::FLEET_CALLS) >= 1.0);
    assert!(up(M::FLEET_CALL_TIME) > 0.0);
    assert!(up(M::FLEET_CALL_LAST_DURATION) > 0.0);
    for kind in FleetFailure::ALL {
        let failed = value(
            &exporter,
            M::FLEET_CALL_FAILURES,
            &[key, (M::ERROR_TYPE, kind.as_str())],
        );
        assert_eq!(failed, 0.0, "{kind:?}");
    }
    let leased = value(
        &exporter,
        M::FLEET_PERMITS_LEASED,
        &[key, (M::SOURCE, "redis")],
    );
    let used = up(M::FLEET_PERMITS_USED);
    let unused = up(M::FLEET_PERMITS_UNUSED);
    // Every admission spent a leased permit; permits are used or lapse, never both.
    assert!(admitted > 0);
    assert!(
        used >= 1.0 && used <= admitted as f64,
        "used {used}, admitted {admitted}"
    );
    assert!(
        used + unused <= leased,
        "used {used} + unused {unused} > leased {leased}"
    );
    println!("up: admitted {admitted}, {:?}", limiter.stats());

    server.kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !limiter.stats().fallback_active {
        assert!(
            Instant::now() < deadline,
            "no fallback: {:?}",
            limiter.stats()
        );
        thread::sleep(Duration::from_millis(5));
    }
    meters.force_flush().unwrap();
    assert_eq!(up(M::FLEET_FALLBACK), 1.0);
    let failed = |kind: FleetFailure| {
        value(
            &exporter,
            M::FLEET_CALL_FAILURES,
            &[key, (M::ERROR_TYPE, kind.as_str())],
        )
    };
    // A killed server refuses connections (or a call in flight times out): counted
    // as such, not as an error answer nor an authentication failure.
    assert!(failed(FleetFailure::Connect) + failed(FleetFailure::Timeout) >= 1.0);
    assert_eq!(failed(FleetFailure::Redis), 0.0);
    assert_eq!(failed(FleetFailure::Auth), 0.0);
    let stats = limiter.stats();
    assert!(matches!(
        stats.last_failure,
        Some(FleetFailure::Connect | FleetFailure::Timeout)
    ));
    println!("down: {stats:?}");
}
