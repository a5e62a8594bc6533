//! OTLP plumbing shared by the examples: where to send spans (the standard
//! `OTEL_EXPORTER_OTLP_*` variables, or an explicit URL), over which protocol, a check
//! that a collector is listening, and an exporter wrapper that counts what was sent and
//! reports a failure once instead of on every batch.

// Each example uses a part of this module.
#![allow(dead_code, unreachable_pub)]

use std::fmt;
use std::future::Future;
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter, TracerProviderBuilder};
use opentelemetry_sdk::Resource;

/// How long the reachability check waits for a TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// The OTLP transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (tonic; needs a tokio runtime), default port 4317.
    Grpc,
    /// OTLP/HTTP with protobuf bodies (blocking client), default port 4318.
    Http,
}

impl OtlpProtocol {
    /// `grpc`, or `http` / `http/protobuf`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "grpc" => Ok(Self::Grpc),
            "http" | "http/protobuf" => Ok(Self::Http),
            other => Err(format!(
                "OTLP protocol {other:?} is not supported: use grpc or http (http/protobuf)"
            )),
        }
    }

    /// From `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or `OTEL_EXPORTER_OTLP_PROTOCOL`, else
    /// gRPC.
    pub fn from_env() -> Result<Self, String> {
        match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            Some(p) => Self::parse(&p),
            None => Ok(Self::Grpc),
        }
    }

    fn default_endpoint(self) -> &'static str {
        match self {
            Self::Grpc => "http://localhost:4317",
            Self::Http => "http://localhost:4318/v1/traces",
        }
    }
}

impl fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Grpc => "grpc",
            Self::Http => "http/protobuf",
        })
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Where spans go: an explicit URL, or the one the exporter will read from the standard
/// variables.
#[derive(Clone, Debug)]
pub struct Target {
    /// `None`: let the exporter read `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT` itself.
    explicit: Option<String>,
    /// The URL spans go to, for messages and the reachability check.
    pub url: String,
    pub protocol: OtlpProtocol,
}

impl Target {
    /// `url` if given, else the standard variables, else the protocol's default.
    pub fn new(url: Option<String>, protocol: OtlpProtocol) -> Self {
        match url {
            Some(url) => {
                // An explicit URL is a base, as OTEL_EXPORTER_OTLP_ENDPOINT is: over
                // HTTP the exporter wants the whole signal URL.
                let url = match protocol {
                    OtlpProtocol::Http if !url.trim_end_matches('/').ends_with("/v1/traces") => {
                        format!("{}/v1/traces", url.trim_end_matches('/'))
                    }
                    _ => url,
                };
                Self {
                    explicit: Some(url.clone()),
                    url,
                    protocol,
                }
            }
            None => {
                let url = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                    .or_else(|| {
                        env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| match protocol {
                            OtlpProtocol::Grpc => base,
                            OtlpProtocol::Http => {
                                format!("{}/v1/traces", base.trim_end_matches('/'))
                            }
                        })
                    })
                    .unwrap_or_else(|| protocol.default_endpoint().to_owned());
                Self {
                    explicit: None,
                    url,
                    protocol,
                }
            }
        }
    }

    /// Whether something accepts TCP connections at the endpoint's host and port.
    ///
    /// # Errors
    ///
    /// One line saying what failed.
    pub fn check_reachable(&self) -> Result<(), String> {
        let rest = self
            .url
            .split_once("://")
            .map_or(self.url.as_str(), |(_, r)| r);
        let authority = rest.split('/').next().unwrap_or(rest);
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let default_port = match (self.url.starts_with("https://"), self.protocol) {
            (true, _) => 443,
            (false, OtlpProtocol::Grpc) => 4317,
            (false, OtlpProtocol::Http) => 4318,
        };
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok());
        let host_port = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:{default_port}")
        };
        let addrs: Vec<_> = host_port
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {host_port}: {e}"))?
            .collect();
        let mut last = format!("{host_port} resolves to no address");
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(_) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// Builds the OTLP exporter. A gRPC exporter must be built inside a tokio runtime
    /// (tonic spawns its connection task there) that outlives the provider.
    ///
    /// # Errors
    ///
    /// The exporter's build error, as text.
    pub fn exporter(&self) -> Result<opentelemetry_otlp::SpanExporter, String> {
        self.exporter_with_timeout(None)
    }

    /// [`exporter`](Self::exporter), each export bounded by `timeout` if given (else by
    /// the exporter's reading of `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`).
    ///
    /// # Errors
    ///
    /// The exporter's build error, as text.
    pub fn exporter_with_timeout(
        &self,
        timeout: Option<Duration>,
    ) -> Result<opentelemetry_otlp::SpanExporter, String> {
        let builder = opentelemetry_otlp::SpanExporter::builder();
        let endpoint = self.explicit.clone();
        match self.protocol {
            OtlpProtocol::Grpc => configure(builder.with_tonic(), endpoint, timeout).build(),
            OtlpProtocol::Http => configure(
                builder.with_http().with_protocol(Protocol::HttpBinary),
                endpoint,
                timeout,
            )
            .build(),
        }
        .map_err(|e| format!("cannot build the OTLP exporter for {}: {e}", self.url))
    }

    /// Where metrics go: the same endpoint over the same protocol; over HTTP the
    /// metrics path (`/v1/metrics`) in place of the traces one.
    pub fn metrics_url(&self) -> String {
        match self.protocol {
            OtlpProtocol::Grpc => self.url.clone(),
            OtlpProtocol::Http => {
                let url = self.url.trim_end_matches('/');
                let base = url.strip_suffix("/v1/traces").unwrap_or(url);
                format!("{base}/v1/metrics")
            }
        }
    }

    /// The OTLP metric exporter to [`metrics_url`](Self::metrics_url), each export
    /// bounded by `timeout`. Over gRPC, built inside a tokio runtime as
    /// [`exporter`](Self::exporter) is.
    ///
    /// # Errors
    ///
    /// The exporter's build error, as text.
    pub fn metric_exporter_with_timeout(
        &self,
        timeout: Duration,
    ) -> Result<opentelemetry_otlp::MetricExporter, String> {
        let builder = opentelemetry_otlp::MetricExporter::builder();
        let (url, timeout) = (Some(self.metrics_url()), Some(timeout));
        match self.protocol {
            OtlpProtocol::Grpc => configure(builder.with_tonic(), url, timeout).build(),
            OtlpProtocol::Http => configure(
                builder.with_http().with_protocol(Protocol::HttpBinary),
                url,
                timeout,
            )
            .build(),
        }
        .map_err(|e| {
            format!(
                "cannot build the OTLP metric exporter for {}: {e}",
                self.metrics_url()
            )
        })
    }
}

/// The endpoint, if any, and the timeout, if any, on either transport's builder; what
/// is not set the exporter reads from the standard variables.
fn configure<B: WithExportConfig>(
    builder: B,
    endpoint: Option<String>,
    timeout: Option<Duration>,
) -> B {
    let builder = match endpoint {
        Some(url) => builder.with_endpoint(url),
        None => builder,
    };
    match timeout {
        Some(t) => builder.with_timeout(t),
        None => builder,
    }
}

/// Wraps an exporter: counts the spans it reported as sent, and prints the first
/// failure as one line on stderr (later ones only count).
#[derive(Debug)]
pub struct ReportingExporter<E> {
    inner: E,
    url: String,
    sent: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    warned: AtomicBool,
}

/// What a [`ReportingExporter`] counted; clones share the counts.
#[derive(Clone, Debug, Default)]
pub struct ExportCounts {
    sent: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl ExportCounts {
    /// Spans the exporter reported as sent.
    pub fn sent(&self) -> u64 {
        // Relaxed: read after the provider's shutdown joined the exporting thread.
        self.sent.load(Ordering::Relaxed)
    }

    /// Spans in batches the exporter reported as failed.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

impl<E> ReportingExporter<E> {
    /// Wraps `inner`, which sends to `url` (for the failure message).
    pub fn new(inner: E, url: impl Into<String>) -> (Self, ExportCounts) {
        let counts = ExportCounts::default();
        let exporter = Self {
            inner,
            url: url.into(),
            sent: Arc::clone(&counts.sent),
            failed: Arc::clone(&counts.failed),
            warned: AtomicBool::new(false),
        };
        (exporter, counts)
    }
}

impl<E: SpanExporter> SpanExporter for ReportingExporter<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let n = batch.len() as u64;
        let export = self.inner.export(batch);
        async move {
            let result = export.await;
            match &result {
                Ok(()) => {
                    self.sent.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => {
                    self.failed.fetch_add(n, Ordering::Relaxed);
                    if !self.warned.swap(true, Ordering::Relaxed) {
                        eprintln!(
                            "OTLP export to {} failed ({e}); further failures are counted, not printed",
                            self.url
                        );
                    }
                }
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An OTLP exporter ready to hand to a provider, or none (after one line on stderr
/// saying why) when no collector is listening.
#[derive(Debug)]
pub struct Otlp {
    /// The exporter, wrapped to count and to report failures once.
    pub exporter: Option<ReportingExporter<opentelemetry_otlp::SpanExporter>>,
    /// What the exporter counts; zero when there is no exporter.
    pub counts: ExportCounts,
    pub target: Target,
    /// Whether a collector was listening when connecting.
    pub connected: bool,
    /// The tokio runtime a gRPC exporter runs its connection on. Keep the `Otlp` alive
    /// until the provider has shut down.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Otlp {
    /// Checks that a collector listens at `target`, then builds the exporter (inside a
    /// tokio runtime for gRPC, since tonic needs a reactor).
    ///
    /// # Errors
    ///
    /// One line, if the runtime or the exporter cannot be built. An unreachable
    /// collector is not an error.
    pub fn connect(target: Target) -> Result<Self, String> {
        if let Err(why) = target.check_reachable() {
            eprintln!(
                "no OTLP collector at {} over {} ({why}): going on without export",
                target.url, target.protocol
            );
            return Ok(Self {
                exporter: None,
                counts: ExportCounts::default(),
                target,
                connected: false,
                runtime: None,
            });
        }
        let runtime = match target.protocol {
            OtlpProtocol::Grpc => Some(grpc_runtime()?),
            OtlpProtocol::Http => None,
        };
        let exporter = {
            let _entered = runtime.as_ref().map(|rt| rt.enter());
            target.exporter()?
        };
        let (exporter, counts) = ReportingExporter::new(exporter, target.url.clone());
        Ok(Self {
            exporter: Some(exporter),
            counts,
            target,
            connected: true,
            runtime,
        })
    }

    /// Adds the exporter, if there is one, behind a batch span processor.
    pub fn install(&mut self, builder: TracerProviderBuilder) -> TracerProviderBuilder {
        match self.exporter.take() {
            Some(exporter) => builder.with_batch_exporter(exporter),
            None => builder,
        }
    }

    /// Prints what became of `offered` traces, `kept` of them sampled, then lets the gRPC
    /// runtime go. Call after the provider's shutdown.
    pub fn finish(self, offered: u32, kept: usize) {
        if self.connected {
            println!(
                "offered {offered} traces, kept {kept}; sent {} spans to {} over {} ({} failed)",
                self.counts.sent(),
                self.target.url,
                self.target.protocol,
                self.counts.failed()
            );
        } else {
            println!("offered {offered} traces, kept {kept}; exported none (no collector)");
        }
    }
}

/// A one-thread tokio runtime for a gRPC exporter: tonic spawns its connection task on
/// the runtime the exporter is built in, which must outlive the provider.
///
/// # Errors
///
/// One line, if the runtime cannot be started.
pub fn grpc_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-grpc")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime for gRPC: {e}"))
}

/// The OTel spec's export timeout variables, in milliseconds; the per-signal one wins.
pub const TIMEOUT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
];
/// The spec's default export timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(10_000);

/// The export timeout from [`TIMEOUT_VARS`], else [`DEFAULT_TIMEOUT`]. A value that is
/// not a whole number of milliseconds is skipped with one line on stderr, as the SDK
/// does with bad variables (warn and fall back, never fail).
pub fn timeout_from_env() -> Duration {
    for name in TIMEOUT_VARS {
        let Some(value) = env(name) else { continue };
        match value.trim().parse::<u64>() {
            Ok(ms) => return Duration::from_millis(ms),
            Err(_) => eprintln!("{name}={value:?} is not a whole number of milliseconds; ignored"),
        }
    }
    DEFAULT_TIMEOUT
}

/// The protocol from the first argument (`grpc`, `http`), else from the environment.
///
/// # Errors
///
/// One line naming the bad value.
pub fn protocol_arg() -> Result<OtlpProtocol, String> {
    match std::env::args().nth(1) {
        Some(p) => OtlpProtocol::parse(&p),
        None => OtlpProtocol::from_env(),
    }
}

/// Runs an example's body: an error is one line on stderr and a failing exit code.
pub fn main(name: &str, run: fn() -> Result<(), String>) -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}
