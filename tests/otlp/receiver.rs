//! A real OTLP receiver for the end-to-end tests, and the traffic driver they share.
//!
//! [`Receiver::start`] stands up, on loopback ports chosen by the OS:
//!
//! * a gRPC server implementing the `TraceService` and `MetricsService` that
//!   `opentelemetry-proto` generates, served by tonic on its own tokio runtime (the same
//!   stack a collector speaks);
//! * an HTTP/1.1 endpoint that decodes `ExportTraceServiceRequest` bodies on
//!   `/v1/traces` and `ExportMetricsServiceRequest` bodies on `/v1/metrics`
//!   (`application/x-protobuf`) with prost, one thread per connection.
//!
//! Both keep every span they are sent, with the `service.name` of its resource, and
//! every metrics request, so the tests assert on what actually crossed the wire, not on
//! what the SDK meant to send.
//!
//! [`drive`] offers traffic from several threads in phases: every thread offers its
//! share of one window, all meet at a barrier, the test advances a [`ManualClock`] by one
//! window, and the next phase starts. The windows are therefore deterministic.

// Each test binary uses a part of this module.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Barrier, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use opentelemetry::trace::{SpanContext, SpanId, TraceId};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use otel_rate_sampler::attributes::{
    RATELIMITING as SAMPLER_TYPE_VALUE, SAMPLER_PARAM, SAMPLER_TYPE,
};
use otel_rate_sampler::ManualClock;
use prost::Message;

/// The root-span attribute carrying the window (phase) a trace was offered in.
pub const WINDOW_KEY: &str = "test.window";

/// One span as the receiver got it.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    /// `service.name` of the resource the span came with.
    pub service: String,
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// `None` for a root span.
    pub parent_span_id: Option<SpanId>,
    pub name: String,
    pub attributes: Vec<KeyValue>,
    /// The W3C `tracestate` header value (`ot=th:…` for consistent probability).
    pub trace_state: String,
    /// When the span started, nanoseconds since the Unix epoch.
    pub start_unix_nanos: u64,
}

impl ReceivedSpan {
    /// The value of attribute `key`, if the span has it.
    pub fn attr(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref())
    }

    /// The integer attribute `key`.
    pub fn attr_i64(&self, key: &str) -> Option<i64> {
        match self.attr(key)? {
            Value::IntValue(i) => Some(*i),
            _ => None,
        }
    }
}

/// Where the spans and metrics go: shared by both servers.
#[derive(Clone, Debug, Default)]
struct Sink {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
    /// How long a metrics request waits before it is taken and answered (a collector
    /// under load); zero unless [`Receiver::start_with_metrics_delay`].
    metrics_delay: Duration,
}

impl Sink {
    fn ingest_metrics(&self, request: ExportMetricsServiceRequest) {
        self.metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
    }

    fn ingest(&self, request: ExportTraceServiceRequest) {
        let mut received = Vec::new();
        for resource_spans in request.resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(Value::StringValue(s)) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for scope_spans in resource_spans.scope_spans {
                for span in scope_spans.spans {
                    received.push(ReceivedSpan {
                        service: service.clone(),
                        trace_id: TraceId::from_bytes(
                            span.trace_id
                                .as_slice()
                                .try_into()
                                .expect("16-byte trace id"),
                        ),
                        span_id: span_id(&span.span_id).expect("8-byte span id"),
                        parent_span_id: span_id(&span.parent_span_id),
                        name: span.name,
                        attributes: span.attributes,
                        trace_state: span.trace_state,
                        start_unix_nanos: span.start_time_unix_nano,
                    });
                }
            }
        }
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(received);
    }
}

fn span_id(bytes: &[u8]) -> Option<SpanId> {
    let bytes: [u8; 8] = bytes.try_into().ok()?;
    let id = SpanId::from_bytes(bytes);
    (id != SpanId::INVALID).then_some(id)
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.ingest(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        if !self.metrics_delay.is_zero() {
            tokio::time::sleep(self.metrics_delay).await;
        }
        self.ingest_metrics(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// An OTLP receiver (gRPC and HTTP/protobuf) on loopback ports.
#[derive(Debug)]
pub struct Receiver {
    runtime: tokio::runtime::Runtime,
    grpc: SocketAddr,
    http: SocketAddr,
    sink: Sink,
}

impl Receiver {
    /// Starts both servers; they run until the receiver is dropped (the HTTP threads
    /// until the test process ends).
    pub fn start() -> Self {
        Self::start_with_metrics_delay(Duration::ZERO)
    }

    /// Starts both servers, each metrics request waiting `delay` before it is taken and
    /// answered: a collector slower than the exporter's interval.
    pub fn start_with_metrics_delay(delay: Duration) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let sink = Sink {
            metrics_delay: delay,
            ..Sink::default()
        };

        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind the gRPC port");
        let grpc = listener.local_addr().expect("gRPC address");
        let service = TraceServiceServer::new(sink.clone());
        runtime.spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .add_service(MetricsServiceServer::new(sink.clone()))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );

        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the HTTP port");
        let http = listener.local_addr().expect("HTTP address");
        let http_sink = sink.clone();
        thread::Builder::new()
            .name("otlp-http-receiver".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let sink = http_sink.clone();
                    thread::spawn(move || {
                        let _ = serve_http_connection(stream, &sink);
                    });
                }
            })
            .expect("spawn the HTTP receiver");

        Self {
            runtime,
            grpc,
            http,
            sink,
        }
    }

    /// The gRPC endpoint, `http://127.0.0.1:PORT`.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// The HTTP/protobuf traces endpoint, `http://127.0.0.1:PORT/v1/traces`.
    pub fn http_endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.http)
    }

    /// The HTTP/protobuf metrics endpoint, `http://127.0.0.1:PORT/v1/metrics`.
    pub fn http_metrics_endpoint(&self) -> String {
        format!("http://{}/v1/metrics", self.http)
    }

    /// Every metrics request received so far.
    pub fn metrics(&self) -> Vec<ExportMetricsServiceRequest> {
        self.sink
            .metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The receiver's tokio runtime, also used to build gRPC exporters (tonic needs a
    /// reactor when the channel is built, and while it exports).
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.sink
            .spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The spans received so far, grouped by trace.
    pub fn traces(&self) -> HashMap<TraceId, Vec<ReceivedSpan>> {
        let mut traces: HashMap<TraceId, Vec<ReceivedSpan>> = HashMap::new();
        for span in self.spans() {
            traces.entry(span.trace_id).or_default().push(span);
        }
        traces
    }
}

/// Serves OTLP/HTTP protobuf requests on one keep-alive connection until it closes.
fn serve_http_connection(stream: TcpStream, sink: &Sink) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        if request_line.trim().is_empty() {
            continue;
        }
        let mut content_length = 0usize;
        let mut encoded = false;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header)? == 0 {
                return Ok(());
            }
            let header = header.trim();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            let name = name.trim().to_ascii_lowercase();
            if name == "content-length" {
                content_length = value.trim().parse().unwrap_or(0);
            } else if name == "content-encoding" && value.trim() != "identity" {
                encoded = true;
            }
        }
        let mut body = vec![0; content_length];
        reader.read_exact(&mut body)?;
        let path = request_line.split_whitespace().nth(1).unwrap_or("");
        let post = !encoded && request_line.starts_with("POST ");
        let (status, payload) = match path {
            "/v1/metrics" if post => match ExportMetricsServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    if !sink.metrics_delay.is_zero() {
                        thread::sleep(sink.metrics_delay);
                    }
                    sink.ingest_metrics(request);
                    (
                        "200 OK",
                        ExportMetricsServiceResponse::default().encode_to_vec(),
                    )
                }
                Err(_) => ("400 Bad Request", Vec::new()),
            },
            _ if post => match ExportTraceServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    sink.ingest(request);
                    (
                        "200 OK",
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
                Err(_) => ("400 Bad Request", Vec::new()),
            },
            _ => ("400 Bad Request", Vec::new()),
        };
        // One write: a header and a body in two small segments would wait on Nagle
        // and the client's delayed ACK.
        let mut response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
            payload.len()
        )
        .into_bytes();
        response.extend_from_slice(&payload);
        writer.write_all(&response)?;
    }
}

/// How the exporter talks to the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    Http,
}

/// An OTLP span exporter aimed at `receiver`.
pub fn exporter(receiver: &Receiver, transport: Transport) -> opentelemetry_otlp::SpanExporter {
    let builder = opentelemetry_otlp::SpanExporter::builder();
    match transport {
        Transport::Grpc => {
            // tonic spawns its connection task on the current runtime.
            let _entered = receiver.runtime().enter();
            builder
                .with_tonic()
                .with_endpoint(receiver.grpc_endpoint())
                .with_timeout(Duration::from_secs(10))
                .build()
        }
        Transport::Http => builder
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(receiver.http_endpoint())
            .with_timeout(Duration::from_secs(10))
            .build(),
    }
    .expect("build the OTLP exporter")
}

/// An OTLP metric exporter aimed at `receiver`.
pub fn metric_exporter(
    receiver: &Receiver,
    transport: Transport,
) -> opentelemetry_otlp::MetricExporter {
    let builder = opentelemetry_otlp::MetricExporter::builder();
    match transport {
        Transport::Grpc => {
            let _entered = receiver.runtime().enter();
            builder
                .with_tonic()
                .with_endpoint(receiver.grpc_endpoint())
                .with_timeout(Duration::from_secs(10))
                .build()
        }
        Transport::Http => builder
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(receiver.http_metrics_endpoint())
            .with_timeout(Duration::from_secs(10))
            .build(),
    }
    .expect("build the OTLP metric exporter")
}

/// A provider named `service` that samples with `sampler` and batches to `exporter`,
/// with a queue large enough that no test span is dropped for lack of room.
pub fn provider(
    service: &'static str,
    sampler: impl opentelemetry_sdk::trace::ShouldSample + 'static,
    exporter: opentelemetry_otlp::SpanExporter,
) -> SdkTracerProvider {
    provider_with_ids(
        service,
        sampler,
        exporter,
        opentelemetry_sdk::trace::RandomIdGenerator::default(),
    )
}

/// [`provider`], its trace and span ids from `ids`.
pub fn provider_with_ids(
    service: &'static str,
    sampler: impl opentelemetry_sdk::trace::ShouldSample + 'static,
    exporter: opentelemetry_otlp::SpanExporter,
    ids: impl opentelemetry_sdk::trace::IdGenerator + 'static,
) -> SdkTracerProvider {
    let batch = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(1 << 16)
                .with_max_export_batch_size(512)
                .with_scheduled_delay(Duration::from_millis(50))
                .build(),
        )
        .build();
    SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_id_generator(ids)
        .with_span_processor(batch)
        .with_resource(Resource::builder().with_service_name(service).build())
        .build()
}

/// What a thread offered, and what the sampler said about it.
#[derive(Clone, Copy, Debug)]
pub struct Offered {
    pub trace_id: TraceId,
    pub kept: bool,
    pub window: u64,
}

impl Offered {
    /// A trace whose root has span context `root`, offered in `window`.
    pub fn new(root: &SpanContext, window: u64) -> Self {
        Self {
            trace_id: root.trace_id(),
            kept: root.is_sampled(),
            window,
        }
    }
}

/// Offers `per_thread` traces per window from each of `threads` threads, for `windows`
/// windows, advancing `clock` by `window` between phases. `offer(window)` makes one
/// trace and says what became of it.
pub fn drive(
    threads: usize,
    windows: u64,
    per_thread: usize,
    clock: &ManualClock,
    window: Duration,
    offer: impl Fn(u64) -> Offered + Sync,
) -> Vec<Offered> {
    let start = Barrier::new(threads + 1);
    let done = Barrier::new(threads + 1);
    thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut offered = Vec::new();
                    for w in 0..windows {
                        start.wait();
                        offered.extend((0..per_thread).map(|_| offer(w)));
                        done.wait();
                    }
                    offered
                })
            })
            .collect();
        for _ in 0..windows {
            start.wait();
            done.wait();
            clock.advance(window);
        }
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker thread"))
            .collect()
    })
}

/// Asserts what the receiver got against what was offered, for traces made of
/// `spans_per_trace` spans under a limit of `limit` traces per window:
///
/// * exactly the kept traces arrived: none lost after `shutdown()`, none of a dropped one;
/// * every received trace is whole: `spans_per_trace` spans, one root, every other span's
///   parent inside the trace;
/// * each root carries `sampler.type`/`sampler.param` and its window;
/// * at most `limit` traces per window at the receiver, exactly `limit` where more were
///   offered (a saturated fixed window).
pub fn assert_capped_and_whole(
    received: &HashMap<TraceId, Vec<ReceivedSpan>>,
    offered: &[Offered],
    limit: usize,
    per_second: f64,
    spans_per_trace: usize,
) {
    let kept: HashSet<TraceId> = offered
        .iter()
        .filter(|o| o.kept)
        .map(|o| o.trace_id)
        .collect();
    let dropped: HashSet<TraceId> = offered
        .iter()
        .filter(|o| !o.kept)
        .map(|o| o.trace_id)
        .collect();
    assert_eq!(
        kept.len() + dropped.len(),
        offered.len(),
        "trace ids unique"
    );
    let got: HashSet<TraceId> = received.keys().copied().collect();
    assert!(
        got.is_disjoint(&dropped),
        "{} dropped traces reached the receiver",
        got.intersection(&dropped).count()
    );
    assert_eq!(
        got.len(),
        kept.len(),
        "kept traces lost between sampler and receiver: {}",
        kept.difference(&got).count()
    );
    assert_eq!(got, kept);

    let mut per_window: BTreeMap<i64, usize> = BTreeMap::new();
    for (trace_id, spans) in received {
        assert_eq!(spans.len(), spans_per_trace, "trace {trace_id} not whole");
        let ids: HashSet<SpanId> = spans.iter().map(|s| s.span_id).collect();
        let roots: Vec<_> = spans
            .iter()
            .filter(|s| s.parent_span_id.is_none())
            .collect();
        assert_eq!(roots.len(), 1, "trace {trace_id}: one root");
        for span in spans.iter().filter(|s| s.parent_span_id.is_some()) {
            assert!(
                ids.contains(&span.parent_span_id.unwrap()),
                "trace {trace_id}: span {} has its parent outside the trace",
                span.name
            );
        }
        let root = roots[0];
        assert_eq!(
            root.attr(SAMPLER_TYPE),
            Some(&Value::StringValue(SAMPLER_TYPE_VALUE.into()))
        );
        assert_eq!(
            root.attr(SAMPLER_PARAM),
            Some(&Value::DoubleValue(per_second))
        );
        let window = root.attr_i64(WINDOW_KEY).expect("root carries its window");
        *per_window.entry(window).or_default() += 1;
    }

    let mut offered_per_window: BTreeMap<i64, usize> = BTreeMap::new();
    for o in offered {
        *offered_per_window.entry(o.window as i64).or_default() += 1;
    }
    for (window, offered) in offered_per_window {
        let got = per_window.get(&window).copied().unwrap_or(0);
        assert!(
            got <= limit,
            "window {window}: {got} traces > limit {limit}"
        );
        assert_eq!(
            got,
            limit.min(offered),
            "window {window}: a saturated window keeps N"
        );
    }
}
