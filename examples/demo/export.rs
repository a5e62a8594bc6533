//! Where kept spans go: an in-process exporter that counts whole traces per window (the
//! per-window report reads it), and with OTLP a second exporter, behind a batch
//! processor, that counts what the collector acknowledged.
//!
//! The generating threads never wait on the network: the counting exporter sits behind a
//! simple (synchronous) processor and only counts; the OTLP exporter sits behind a batch
//! processor whose thread does the sending. Each export is bounded by the OTLP timeout
//! (`OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`), and the provider's shutdown runs on a helper
//! thread that the demo stops waiting for at the run's end plus that timeout, whatever
//! the collector does (refuses, accepts and never answers, answers slowly).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry::Value;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};
use opentelemetry_sdk::Resource;
use serde::Serialize;

use crate::load::{lock, CHILDREN, WINDOW_KEY};
use crate::support::{self, OtlpProtocol, Target};

/// Spans in a whole trace.
const SPANS_PER_TRACE: u32 = CHILDREN + 1;
/// How often the batch processor sends.
const BATCH_DELAY: Duration = Duration::from_millis(200);
/// Spans the batch processor holds before it drops: a few seconds of a generous limit.
const BATCH_QUEUE: usize = 1 << 16;

/// A trace the exporter has seen part of.
#[derive(Debug, Default)]
struct PendingTrace {
    spans: u32,
    root_seen: bool,
    window: Option<u64>,
}

/// What an exporter has received (or, with OTLP, what the collector acknowledged).
#[derive(Debug, Default)]
pub(crate) struct ExportTally {
    /// Spans received.
    pub(crate) spans: u64,
    /// Traces with some but not yet all of their spans received.
    pending: HashMap<TraceId, PendingTrace>,
    /// Whole traces received.
    pub(crate) complete: u64,
    /// Whole traces received per window (`demo.window` of the root), for the windows not
    /// yet reported.
    pub(crate) per_window: BTreeMap<u64, u64>,
    /// Whole traces whose root carried no usable `demo.window`.
    pub(crate) unattributed: u64,
}

impl ExportTally {
    /// Traces with some but not all of their spans received.
    pub(crate) fn incomplete(&self) -> usize {
        self.pending.len()
    }

    fn record(&mut self, span: &SpanData) {
        self.spans += 1;
        let trace_id = span.span_context.trace_id();
        let entry = self.pending.entry(trace_id).or_default();
        entry.spans += 1;
        if span.parent_span_id == SpanId::INVALID {
            entry.root_seen = true;
            stamp(span);
            entry.window = span
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == WINDOW_KEY)
                .and_then(|kv| match kv.value {
                    Value::I64(w) => u64::try_from(w).ok(),
                    _ => None,
                });
        }
        if entry.spans >= SPANS_PER_TRACE && entry.root_seen {
            let window = entry.window;
            self.pending.remove(&trace_id);
            self.complete += 1;
            match window {
                Some(w) => *self.per_window.entry(w).or_default() += 1,
                None => self.unattributed += 1,
            }
        }
    }
}

/// With `DEMO_STAMPS=FILE` (for the fleet tests): appends a line per kept root as it is
/// exported, `<start> <end> <demo.window>` (Unix ns: they bracket the admission), one
/// write each, so a process killed
/// mid-run leaves every kept trace it exported: what really happened, in real time.
fn stamp(root: &SpanData) {
    static FILE: OnceLock<Option<std::fs::File>> = OnceLock::new();
    let file = FILE.get_or_init(|| {
        let path = std::env::var_os("DEMO_STAMPS")?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
    });
    let Some(mut file) = file.as_ref() else {
        return;
    };
    let unix = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    };
    let (start, end) = (unix(root.start_time), unix(root.end_time));
    let window = root
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == WINDOW_KEY)
        .map_or_else(|| "-".to_owned(), |kv| kv.value.to_string());
    use std::io::Write as _;
    let _ = file.write_all(format!("{start} {end} {window}\n").as_bytes());
}

/// What a [`CountingExporter`] saw; shared with the report.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// What arrived: every span for the in-process exporter, the acknowledged ones with
    /// OTLP.
    pub(crate) received: Mutex<ExportTally>,
    /// Spans in batches that failed (OTLP only).
    failed_spans: AtomicU64,
    /// The first failure, for the closing message.
    first_error: OnceLock<String>,
}

/// A span exporter that counts whole traces instead of storing spans. With an OTLP
/// exporter inside, it counts only what that exporter reported as sent.
#[derive(Debug)]
pub(crate) struct CountingExporter {
    tally: Arc<Tally>,
    otlp: Option<opentelemetry_otlp::SpanExporter>,
}

impl CountingExporter {
    /// The in-process exporter: counts every span it is given.
    pub(crate) fn local(tally: Arc<Tally>) -> Self {
        Self { tally, otlp: None }
    }
}

impl SpanExporter for CountingExporter {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let (record, forwarded) = match &self.otlp {
            None => (batch, None),
            // The OTLP exporter takes the batch; count from a copy once it has said yes.
            Some(otlp) => (batch.clone(), Some(otlp.export(batch))),
        };
        async move {
            if let Some(forwarded) = forwarded {
                if let Err(e) = forwarded.await {
                    let n = record.len() as u64;
                    // Relaxed: a counter, read after the helper thread's shutdown or at
                    // the deadline (a snapshot is what the message reports then).
                    self.tally.failed_spans.fetch_add(n, Ordering::Relaxed);
                    let _ = self.tally.first_error.set(e.to_string());
                    return Err(e);
                }
            }
            let mut received = lock(&self.tally.received);
            for span in &record {
                received.record(span);
            }
            Ok::<(), OTelSdkError>(())
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.otlp
            .as_ref()
            .map_or(Ok(()), |e| e.shutdown_with_timeout(timeout))
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.otlp.as_ref().map_or(Ok(()), SpanExporter::force_flush)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(e) = &mut self.otlp {
            e.set_resource(resource);
        }
    }
}

/// The OTLP side of a run: where to, within how long, and what was acknowledged.
#[derive(Debug)]
pub(crate) struct OtlpExport {
    pub(crate) target: Target,
    /// Bounds each export, and the wait for the last ones after the run.
    pub(crate) timeout: Duration,
    /// What the collector acknowledged.
    pub(crate) tally: Arc<Tally>,
    /// The runtime a gRPC exporter runs its connection on.
    runtime: Option<tokio::runtime::Runtime>,
}

impl OtlpExport {
    /// Builds the exporter for `target` behind a batch processor. Nothing is checked
    /// here: a collector that does not answer shows in the counts, and in one line at
    /// the end.
    ///
    /// # Errors
    ///
    /// One line, if the runtime or the exporter cannot be built.
    pub(crate) fn start(target: Target) -> Result<(Self, BatchSpanProcessor), String> {
        let timeout = support::timeout_from_env();
        let runtime = match target.protocol {
            OtlpProtocol::Grpc => Some(support::grpc_runtime()?),
            OtlpProtocol::Http => None,
        };
        let exporter = {
            let _entered = runtime.as_ref().map(tokio::runtime::Runtime::enter);
            target.exporter_with_timeout(Some(timeout))?
        };
        let tally = Arc::new(Tally::default());
        let exporter = CountingExporter {
            tally: Arc::clone(&tally),
            otlp: Some(exporter),
        };
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(BATCH_QUEUE)
                    .with_max_export_batch_size(512)
                    .with_scheduled_delay(BATCH_DELAY)
                    .build(),
            )
            .build();
        let otlp = Self {
            target,
            timeout,
            tally,
            runtime,
        };
        Ok((otlp, batch))
    }

    /// Enters the gRPC exporter's runtime, if any: a gRPC exporter is built inside it.
    #[cfg(feature = "metrics")]
    pub(crate) fn enter(&self) -> Option<tokio::runtime::EnterGuard<'_>> {
        self.runtime.as_ref().map(tokio::runtime::Runtime::enter)
    }

    /// Reads what the collector acknowledged, once, and lets the gRPC runtime go
    /// without waiting for a connection that may hang. `finished` says whether the
    /// provider's shutdown (the last exports) ended before the deadline.
    pub(crate) fn finish(self, finished: bool) -> OtlpOutcome {
        let (traces, spans) = {
            let received = lock(&self.tally.received);
            (received.complete, received.spans)
        };
        if let Some(rt) = self.runtime {
            rt.shutdown_background();
        }
        OtlpOutcome {
            endpoint: self.target.url,
            protocol: self.target.protocol.to_string(),
            timeout_ms: self.timeout.as_millis(),
            acknowledged: traces,
            acknowledged_spans: spans,
            // Relaxed: a counter; a snapshot is what the run reports.
            failed_spans: self.tally.failed_spans.load(Ordering::Relaxed),
            finished,
            first_error: self.tally.first_error.get().map(|e| first_line(e)),
            timeout: self.timeout,
        }
    }
}

/// What the collector made of a run, read once at its end: the summary's `otlp` object.
#[derive(Debug, Serialize)]
pub(crate) struct OtlpOutcome {
    endpoint: String,
    protocol: String,
    timeout_ms: u128,
    /// Whole traces the collector acknowledged (also the summary's `exported`).
    pub(crate) acknowledged: u64,
    acknowledged_spans: u64,
    /// Spans in batches that failed or timed out.
    failed_spans: u64,
    /// Whether the last exports ended before the deadline.
    finished: bool,
    #[serde(skip)]
    first_error: Option<String>,
    #[serde(skip)]
    timeout: Duration,
}

impl OtlpOutcome {
    /// One line on what became of the `sampled` traces.
    pub(crate) fn line(&self, sampled: u64) -> String {
        let (url, protocol) = (&self.endpoint, &self.protocol);
        let within = humantime::format_duration(self.timeout);
        let why = self
            .first_error
            .as_ref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        if sampled > 0 && self.acknowledged_spans == 0 {
            return format!(
                "no OTLP collector answered at {url} over {protocol} within {within}{why}; \
                 exported 0 of {sampled} sampled"
            );
        }
        let waited = if self.finished {
            String::new()
        } else {
            format!("; stopped waiting for the rest after {within}")
        };
        format!(
            "OTLP collector at {url} over {protocol} acknowledged {} of {sampled} sampled \
             traces ({} spans; {} spans failed{why}{waited})",
            self.acknowledged, self.acknowledged_spans, self.failed_spans
        )
    }
}

/// An error's first line, at most 200 characters: tonic's are long.
fn first_line(e: &str) -> String {
    let line = e.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_owned(),
    }
}

/// A shutdown running on a helper thread: see [`shutdown_by`].
#[derive(Debug)]
pub(crate) struct Shutdown {
    /// `None` if the helper could not be started.
    done: Option<mpsc::Receiver<OTelSdkResult>>,
}

impl Shutdown {
    /// Waits until `deadline` at the latest: the shutdown's result if it finished in
    /// time; otherwise `None`, and the helper is left behind, still holding what it
    /// shuts down, and the process ends without it.
    pub(crate) fn wait(self, deadline: Instant) -> Option<OTelSdkResult> {
        let budget = deadline.saturating_duration_since(Instant::now());
        self.done?.recv_timeout(budget).ok()
    }
}

/// Starts `shutdown` (given the time left until `deadline`) on a helper thread named
/// `name`, so that several shutdowns share one deadline and none can hold up the run.
pub(crate) fn shutdown_by<F>(name: &str, deadline: Instant, shutdown: F) -> Shutdown
where
    F: FnOnce(Duration) -> OTelSdkResult + Send + 'static,
{
    let budget = deadline.saturating_duration_since(Instant::now());
    let (done, finished) = mpsc::channel();
    let helper = thread::Builder::new().name(name.into()).spawn(move || {
        let _ = done.send(shutdown(budget));
    });
    Shutdown {
        done: helper.ok().map(|_| finished),
    }
}

/// Starts the tracer provider's shutdown (its last exports), bounded by `deadline`.
pub(crate) fn shutdown_traces_by(provider: SdkTracerProvider, deadline: Instant) -> Shutdown {
    shutdown_by("demo-shutdown", deadline, move |budget| {
        provider.shutdown_with_timeout(budget)
    })
}
