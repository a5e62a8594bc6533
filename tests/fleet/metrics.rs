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
    // No failure while Redis answers; but a call slowed by a loaded machine may be
    // refused as late, which the design takes as a clock correction, not a fault.
    for kind in FleetFailure::ALL
        .into_iter()
        .filter(|k| *k != FleetFailure::Late)
    {
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

/// Every attribute value of every point the provider exported, as text.
fn every_attribute_value(exporter: &InMemoryMetricExporter) -> Vec<String> {
    let all = exporter.get_finished_metrics().unwrap();
    let mut values = Vec::new();
    for m in all
        .iter()
        .flat_map(|rm| rm.scope_metrics())
        .flat_map(|sm| sm.metrics())
    {
        let mut take = |a: &mut dyn Iterator<Item = &KeyValue>| {
            values.extend(a.map(|kv| kv.value.as_str().into_owned()));
        };
        match m.data() {
            AggregatedMetrics::U64(MetricData::Sum(d)) => {
                d.data_points().for_each(|p| take(&mut p.attributes()))
            }
            AggregatedMetrics::U64(MetricData::Gauge(d)) => {
                d.data_points().for_each(|p| take(&mut p.attributes()))
            }
            AggregatedMetrics::F64(MetricData::Sum(d)) => {
                d.data_points().for_each(|p| take(&mut p.attributes()))
            }
            AggregatedMetrics::F64(MetricData::Gauge(d)) => {
                d.data_points().for_each(|p| take(&mut p.attributes()))
            }
            AggregatedMetrics::F64(MetricData::Histogram(d)) => {
                d.data_points().for_each(|p| take(&mut p.attributes()))
            }
            _ => {}
        }
    }
    values
}

/// The round trips the histogram counted for `target`, and their sum (seconds).
fn round_trips(exporter: &InMemoryMetricExporter, target: &str) -> (u64, f64) {
    let all = exporter.get_finished_metrics().unwrap();
    let histogram = all
        .iter()
        .flat_map(|rm| rm.scope_metrics())
        .flat_map(|sm| sm.metrics())
        .filter(|m| m.name() == M::FLEET_TARGET_ROUND_TRIP)
        .fold(None, |_, m| Some(m))
        .expect("no round-trip histogram");
    let AggregatedMetrics::F64(MetricData::Histogram(h)) = histogram.data() else {
        panic!("not a histogram: {:?}", histogram.data());
    };
    let ours = h
        .data_points()
        .find(|p| {
            p.attributes()
                .any(|kv| kv.key.as_str() == M::FLEET_TARGET && kv.value.as_str() == target)
        })
        .expect("no round trip of the target");
    (ours.count(), ours.sum())
}

/// Per Redis target: one series for every rule on it, labelled without the URL's
/// password; calls, permits and the round-trip histogram; and a replaced limiter (as a
/// reload replaces one) neither held by the instruments nor lost from the counters:
/// what it spent stays counted, to its last window, and the new one adds to it.
#[test]
fn target_instruments_follow_a_replaced_limiter_and_never_show_the_password() {
    const PASSWORD: &str = "hunter2-metrics";
    let server = Server::start_with(crate::server::free_port(), &["--requirepass", PASSWORD]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", server.port);
    let label = format!("redis://127.0.0.1:{}/0", server.port);
    let exporter = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let metrics = M::with_meter(meters.meter("targets"));
    metrics.register_fleet_targets();
    let old = load::fleet(std::slice::from_ref(&url), "target-a", 1);
    let other = load::fleet(std::slice::from_ref(&url), "target-b", 1);
    metrics.register_fleet(&old[0]);
    load::warm_up(&old, 5);
    let offer = |l: &otel_rate_sampler::FleetLimiter, windows: u32| {
        let mut admitted = 0u64;
        let until = Instant::now() + WINDOW * windows;
        while Instant::now() < until {
            admitted += u64::from(l.acquire_window().is_some());
            thread::sleep(Duration::from_micros(500));
        }
        admitted
    };
    let admitted_old = offer(&old[0], 3);
    assert!(admitted_old > 0);
    meters.force_flush().unwrap();
    let target = (M::FLEET_TARGET, label.as_str());
    let of = |name| value(&exporter, name, &[target]);
    assert_eq!(of(M::FLEET_TARGET_RULES), 2.0);
    assert_eq!(of(M::FLEET_TARGET_REPLICAS), 1.0);
    assert_eq!(of(M::FLEET_TARGET_FALLBACK), 0.0);
    let calls_before = of(M::FLEET_TARGET_CALLS);
    assert!(calls_before >= 2.0, "{calls_before}");
    let (rounds, seconds) = round_trips(&exporter, &label);
    assert!(rounds >= 1 && seconds > 0.0, "{rounds} rounds, {seconds} s");
    // As above: a slow call refused as late is not a fault.
    for kind in FleetFailure::ALL
        .into_iter()
        .filter(|k| *k != FleetFailure::Late)
    {
        let failed = value(
            &exporter,
            M::FLEET_TARGET_FAILURES,
            &[target, (M::ERROR_TYPE, kind.as_str())],
        );
        assert_eq!(failed, 0.0, "{kind:?}");
    }

    // The reload: the new limiter joins the worker, then the old one is dropped.
    let new = load::fleet(std::slice::from_ref(&url), "target-a", 1);
    drop(old);
    // Every permit the old limiter spent is counted, its last window included, once
    // it is gone (the worker's thread may drop it, after a round it was in).
    let settled = |expected: u64| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            meters.force_flush().unwrap();
            let used = of(M::FLEET_TARGET_USED);
            if used == expected as f64 || Instant::now() > deadline {
                return used;
            }
            thread::sleep(Duration::from_millis(20));
        }
    };
    assert_eq!(settled(admitted_old), admitted_old as f64);
    // The new one and `other`: the per-key instruments registered for the old one did
    // not keep it alive (it would still be a rule of the worker).
    assert_eq!(of(M::FLEET_TARGET_RULES), 2.0);
    load::warm_up(&new, 0);
    let admitted_new = offer(&new[0], 2);
    drop(new);
    let both = admitted_old + admitted_new;
    assert_eq!(settled(both), both as f64);
    assert!(of(M::FLEET_TARGET_CALLS) > calls_before);
    let leased = value(
        &exporter,
        M::FLEET_TARGET_LEASED,
        &[target, (M::SOURCE, "redis")],
    );
    let (used, unused) = (of(M::FLEET_TARGET_USED), of(M::FLEET_TARGET_UNUSED));
    assert!(used + unused <= leased, "{used} + {unused} > {leased}");
    assert_eq!(of(M::FLEET_TARGET_RULES), 1.0);

    let values = every_attribute_value(&exporter);
    assert!(values.contains(&label), "{values:?}");
    assert!(
        values.iter().all(|v| !v.contains(PASSWORD)),
        "a password in an attribute: {values:?}"
    );
    drop(other);
}
