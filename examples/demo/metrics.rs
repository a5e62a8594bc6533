//! With feature `metrics` and OTLP: the sampler's metrics ([`SamplerMetrics`]) exported
//! over OTLP to the traces' endpoint, over the same protocol, by a periodic reader.
//!
//! The reader exports every `OTEL_METRIC_EXPORT_INTERVAL` milliseconds (the SDK reads
//! the variable; default 60000) and once more at shutdown, each export bounded by the
//! traces' timeout. The shutdown runs beside the tracer provider's, under the same
//! deadline, so a collector that never answers cannot hold up the run.

use std::time::{Duration, Instant};

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::{
    PeriodicReader, SdkMeterProvider, OTEL_METRIC_EXPORT_INTERVAL,
    OTEL_METRIC_EXPORT_INTERVAL_DEFAULT,
};
use opentelemetry_sdk::Resource;
use otel_rate_sampler::SamplerMetrics;

use crate::export::{self, OtlpExport, Shutdown};
use crate::load::DemoSampler;

/// The meter provider exporting the sampler's metrics, and where to.
#[derive(Debug)]
pub(crate) struct MetricsExport {
    provider: SdkMeterProvider,
    url: String,
    protocol: String,
    interval: Duration,
    timeout: Duration,
}

impl MetricsExport {
    /// The meter provider for `otlp`'s endpoint and protocol, named `service`.
    ///
    /// # Errors
    ///
    /// One line, if the exporter cannot be built.
    pub(crate) fn start(otlp: &OtlpExport, service: &'static str) -> Result<Self, String> {
        let exporter = {
            let _entered = otlp.enter();
            otlp.target.metric_exporter_with_timeout(otlp.timeout)?
        };
        // No `with_interval`: the reader takes OTEL_METRIC_EXPORT_INTERVAL itself.
        let provider = SdkMeterProvider::builder()
            .with_resource(Resource::builder().with_service_name(service).build())
            .with_reader(PeriodicReader::builder(exporter).build())
            .build();
        Ok(Self {
            provider,
            url: otlp.target.metrics_url(),
            protocol: otlp.target.protocol.to_string(),
            interval: interval_from_env(),
            timeout: otlp.timeout,
        })
    }

    /// Reports `sampler`'s decisions and window through this provider.
    pub(crate) fn register(&self, sampler: &DemoSampler) {
        let metrics = SamplerMetrics::with_meter(self.provider.meter(env!("CARGO_PKG_NAME")));
        match sampler {
            DemoSampler::Rate(s) => metrics.register(s),
            DemoSampler::Fair(s, _) => metrics.register(s),
            #[cfg(feature = "config")]
            DemoSampler::Rules(r) => {
                if let Some(s) = r.rule_based() {
                    metrics.register_rules(s);
                }
            }
            DemoSampler::Adaptive(s) => metrics.register_adaptive(s),
        }
    }

    /// Starts the provider's shutdown (the last export), bounded by `deadline`.
    pub(crate) fn shutdown_by(self, deadline: Instant) -> (Shutdown, MetricsReport) {
        let Self {
            provider,
            url,
            protocol,
            interval,
            timeout,
        } = self;
        let shutdown = export::shutdown_by("demo-metrics-shutdown", deadline, move |budget| {
            provider.shutdown_with_timeout(budget)
        });
        let report = MetricsReport {
            url,
            protocol,
            interval,
            timeout,
        };
        (shutdown, report)
    }
}

/// Where the metrics went, for the closing line.
#[derive(Debug)]
pub(crate) struct MetricsReport {
    url: String,
    protocol: String,
    interval: Duration,
    timeout: Duration,
}

impl MetricsReport {
    /// One line on the export, given how its shutdown (the last export) ended: `None`
    /// if it did not end in time.
    pub(crate) fn line(&self, last: Option<&opentelemetry_sdk::error::OTelSdkResult>) -> String {
        let (url, protocol) = (&self.url, &self.protocol);
        let every = humantime::format_duration(self.interval);
        let within = humantime::format_duration(self.timeout);
        match last {
            Some(Ok(())) => format!(
                "metrics: exported every {every} and at the end to {url} over {protocol}; \
                 the last export was acknowledged"
            ),
            Some(Err(e)) => format!(
                "metrics: exported every {every} to {url} over {protocol}, but the last \
                 export was not acknowledged ({e})"
            ),
            None => format!(
                "metrics: no OTLP collector answered at {url} over {protocol} within \
                 {within}; stopped waiting for the last export"
            ),
        }
    }
}

/// The reader's interval as the SDK reads it: whole milliseconds, else its default.
fn interval_from_env() -> Duration {
    std::env::var(OTEL_METRIC_EXPORT_INTERVAL)
        .ok()
        .and_then(|v| v.parse().map(Duration::from_millis).ok())
        .unwrap_or(OTEL_METRIC_EXPORT_INTERVAL_DEFAULT)
}
