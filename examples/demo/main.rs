//! Load generator for the rate-limiting sampler: offers traces from several threads to an
//! `SdkTracerProvider` that samples with [`RateLimitingSampler`], counts what reaches the
//! exporter, and reports per window how many traces were offered and kept.
//!
//! ```text
//! cargo run --release --example demo -- --algorithm sliding-log --limit 5 --window 200ms
//! ```
//!
//! Each trace is a root span and [`CHILDREN`] children started under it through the SDK
//! API, or with `--via tracing` through `tracing` spans (a few fields each) that
//! `tracing-opentelemetry` turns into OpenTelemetry spans.
//!
//! With `--otlp URL` (or `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT` set) kept spans are also
//! exported over OTLP, gRPC by default or HTTP/protobuf with `--otlp-protocol http`, and
//! `exported` then counts the traces the OTLP exporter reported as sent. With no
//! collector listening the demo says so in one line and counts locally.
//! One line per window goes to stderr as the window closes; at the end exactly one JSON
//! line goes to stdout:
//!
//! ```text
//! {"algorithm":"fixed","limit":100,"window_ms":1000,"threads":4,"offered":..,"sampled":..,
//!  "exported":..,"windows":5,"max_per_window":100,"min_full_window":100}
//! ```
//!
//! **Window attribution.** A kept trace is attributed to the window the *limiter* counted
//! it in: the limiter is wrapped in [`StampingLimiter`], which calls the inner
//! `acquire_stamped()` and leaves the admission stamp in a thread-local cell that the
//! generating thread reads right after starting the root. That window is also recorded on
//! the root span (`demo.window`), so the exporter counts exported traces per window by
//! what it received. Offered traces are attributed by a read of the same clock, taken just
//! before the root starts. Windows are aligned to the clock's origin, and the clock is
//! created right before the load starts. A window's line is printed once every thread
//! has read the clock past its end, so its counts are final when printed.
//!
//! `windows` counts the windows that overlap the run. The limiter reads the clock a
//! little after the thread does, so a trace offered just before the end can be counted
//! in a window wholly after it: such a window gets its own line (marked), and its traces
//! count in `sampled`, `exported` and `max_per_window`, but not in `windows`.
//!
//! Memory stays bounded however long the run: the exporter only counts (per trace id for
//! the traces still being exported, per window for the windows not yet reported), and a
//! window's counters are dropped once its line is printed.

mod support;

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::{Span as _, SpanId, TraceContextExt as _, TraceId, Tracer as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter};
use otel_rate_sampler::{
    Algorithm, AnyLimiter, Clock, Limit, LimitError, MonotonicClock, RateLimiter,
    RateLimitingSampler,
};
use support::{Otlp, OtlpProtocol, ReportingExporter, Target};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// Children started under each root span.
const CHILDREN: u32 = 3;
/// Spans in a whole trace.
const SPANS_PER_TRACE: u32 = CHILDREN + 1;
/// The root-span attribute holding the window the limiter counted the trace in.
const WINDOW_KEY: &str = "demo.window";
/// The most threads the demo starts.
const MAX_THREADS: usize = 1024;
/// The longest a pacing thread sleeps before it reports its progress again.
const MAX_NAP: Duration = Duration::from_millis(5);

const USAGE: &str = "\
Usage: cargo run --release --example demo -- [OPTIONS]

Offers traces (a root span and 3 children) from several threads to an OpenTelemetry
tracer provider sampled by the rate-limiting sampler, and reports per window how many
were offered and kept. Per-window lines go to stderr, one JSON summary line to stdout.

Options:
  --algorithm A   fixed | sliding | sliding-log        [default: fixed]
  --limit N       traces kept per window (permits)     [default: 100]
  --window D      window length, e.g. 1s, 200ms        [default: 1s]
  --threads T     generating threads                   [default: 4]
  --duration D    length of the run, e.g. 5s, 1m       [default: 5s]
  --rate R        traces offered per second, in total  [default: as fast as possible]
  --via V         sdk | tracing: make spans with the SDK API, or with tracing spans
                  through tracing-opentelemetry            [default: sdk]
  --otlp URL      also export over OTLP to URL (default: OTEL_EXPORTER_OTLP_ENDPOINT or
                  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT when set; no export otherwise)
  --otlp-protocol P  grpc | http (HTTP/protobuf)  [default: OTEL_EXPORTER_OTLP_PROTOCOL, else grpc]
  -h, --help      print this help";

// ---------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------

/// The parsed command line.
#[derive(Debug, Clone)]
struct Config {
    algorithm: Algorithm,
    limit: Limit,
    threads: usize,
    duration: Duration,
    /// Offered traces per second in total; `None` for as fast as possible.
    rate: Option<f64>,
    /// How spans are made.
    via: Via,
    /// Where to export over OTLP, if anywhere.
    otlp: Option<Target>,
}

/// How the demo makes its spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// The OpenTelemetry SDK API.
    Sdk,
    /// `tracing` spans with a few fields, through `tracing-opentelemetry`.
    Tracing,
}

/// What the command line asked for.
enum Command {
    Run(Config),
    Help,
}

/// Parses the arguments (without the program name). The error is one line.
fn parse_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Command, String> {
    let mut algorithm = Algorithm::FixedWindow;
    let mut permits: u32 = 100;
    let mut window = Duration::from_secs(1);
    let mut threads: usize = 4;
    let mut duration = Duration::from_secs(5);
    let mut rate: Option<f64> = None;
    let mut via = Via::Sdk;
    let mut otlp_url: Option<String> = None;
    let mut otlp_protocol: Option<OtlpProtocol> = None;

    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let arg = arg
            .into_string()
            .map_err(|a| format!("argument {a:?} is not valid UTF-8"))?;
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg, None),
        };
        let known = [
            "--algorithm",
            "--limit",
            "--window",
            "--threads",
            "--duration",
            "--rate",
            "--via",
            "--otlp",
            "--otlp-protocol",
        ];
        if !known.contains(&flag.as_str()) {
            return Err(format!("unknown argument {flag:?}"));
        }
        let value = match inline {
            Some(v) => v,
            None => args
                .next()
                .ok_or_else(|| format!("{flag} needs a value"))?
                .into_string()
                .map_err(|v| format!("value {v:?} of {flag} is not valid UTF-8"))?,
        };
        match flag.as_str() {
            "--algorithm" => algorithm = value.parse().map_err(|e| format!("--algorithm: {e}"))?,
            "--limit" => {
                permits = value.parse().map_err(|_| {
                    format!("--limit: {value:?} is not a whole number of permits (1 to 4294967295)")
                })?;
            }
            "--window" => window = parse_duration("--window", &value)?,
            "--threads" => {
                threads = value
                    .parse()
                    .ok()
                    .filter(|t| (1..=MAX_THREADS).contains(t))
                    .ok_or_else(|| {
                        format!("--threads: {value:?} is not a number from 1 to {MAX_THREADS}")
                    })?;
            }
            "--duration" => {
                duration = parse_duration("--duration", &value)?;
                if duration.is_zero() {
                    return Err("--duration: the run must last longer than 0s".into());
                }
                // Far beyond any sensible run, and safe to add to an `Instant` and to
                // express in u64 clock nanoseconds.
                if duration > Duration::from_secs(100 * 365 * 24 * 3600) {
                    return Err(format!("--duration: {value:?} is longer than 100 years"));
                }
            }
            "--rate" => {
                let r: f64 = value
                    .parse()
                    .map_err(|_| format!("--rate: {value:?} is not a number"))?;
                if !(r.is_finite() && r > 0.0) {
                    return Err(format!("--rate: {value:?} is not a positive finite number"));
                }
                rate = Some(r);
            }
            "--via" => {
                via = match value.as_str() {
                    "sdk" => Via::Sdk,
                    "tracing" => Via::Tracing,
                    _ => return Err(format!("--via: {value:?} is not sdk or tracing")),
                };
            }
            "--otlp" => otlp_url = Some(value),
            "--otlp-protocol" => {
                otlp_protocol =
                    Some(OtlpProtocol::parse(&value).map_err(|e| format!("--otlp-protocol: {e}"))?);
            }
            _ => unreachable!("checked against the known flags above"),
        }
    }
    let limit = Limit::per_window(permits, window).map_err(|e| match e {
        LimitError::ZeroPermits => format!("--limit: {e}"),
        _ => format!("--window: {e}"),
    })?;
    // The algorithm may not hold that many permits: find out now, not after the threads
    // are started.
    AnyLimiter::with_clock(algorithm, limit, MonotonicClock::new())
        .map_err(|e| format!("--limit: {e}"))?;
    let wants_otlp = otlp_url.is_some()
        || [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()));
    let otlp = if wants_otlp {
        let protocol = match otlp_protocol {
            Some(p) => p,
            None => OtlpProtocol::from_env()?,
        };
        Some(Target::new(otlp_url, protocol))
    } else {
        None
    };
    Ok(Command::Run(Config {
        algorithm,
        limit,
        threads,
        duration,
        rate,
        via,
        otlp,
    }))
}

fn parse_duration(flag: &str, value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value)
        .map_err(|e| format!("{flag}: {value:?} is not a duration such as 1s or 200ms ({e})"))
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "algorithm {}, limit {} per {} ({}/s), threads {}, duration {}, rate ",
            self.algorithm,
            self.limit.permits(),
            humantime::format_duration(self.limit.window()),
            self.limit.per_second_rate(),
            self.threads,
            humantime::format_duration(self.duration),
        )?;
        match self.rate {
            Some(r) => write!(f, "{r}/s")?,
            None => f.write_str("as fast as possible")?,
        }
        match self.via {
            Via::Sdk => f.write_str(", spans via the SDK API")?,
            Via::Tracing => f.write_str(", spans via tracing")?,
        }
        match &self.otlp {
            Some(t) => write!(f, ", OTLP to {} over {}", t.url, t.protocol),
            None => f.write_str(", no OTLP export"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The stamping limiter
// ---------------------------------------------------------------------------------------

thread_local! {
    /// The stamp of this thread's last admission by a [`StampingLimiter`], or `None` if
    /// its last call was refused.
    static STAMP: Cell<Option<u64>> = const { Cell::new(None) };
}

/// A limiter that leaves the stamp of each decision in the thread-local [`STAMP`], so the
/// thread that started a root span learns which window the limiter counted it in.
///
/// It does not override `try_acquire`: the trait's default calls `acquire_stamped`, so
/// the sampler's `try_acquire` comes through here.
#[derive(Debug)]
struct StampingLimiter<L> {
    inner: L,
}

impl<L: RateLimiter> RateLimiter for StampingLimiter<L> {
    fn acquire_stamped(&self) -> Option<u64> {
        let stamp = self.inner.acquire_stamped();
        STAMP.with(|cell| cell.set(stamp));
        stamp
    }

    fn limit(&self) -> Limit {
        self.inner.limit()
    }
}

// ---------------------------------------------------------------------------------------
// Counting
// ---------------------------------------------------------------------------------------

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking thread would already have failed the run; the counts stay usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counts of one window.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct WindowCounts {
    /// Root spans started while the clock read this window.
    offered: u64,
    /// Roots kept that the limiter counted in this window.
    kept: u64,
    /// Whole traces of this window that reached the exporter.
    exported: u64,
}

/// A trace the exporter has seen part of.
#[derive(Debug, Default)]
struct PendingTrace {
    spans: u32,
    root_seen: bool,
    window: Option<u64>,
}

/// What the exporter has received.
#[derive(Debug, Default)]
struct ExportTally {
    /// Spans received.
    spans: u64,
    /// Traces with some but not yet all of their spans received.
    pending: HashMap<TraceId, PendingTrace>,
    /// Whole traces received.
    complete: u64,
    /// Whole traces received per window (`demo.window` of the root), for the windows not
    /// yet reported.
    per_window: BTreeMap<u64, u64>,
    /// Whole traces whose root carried no usable `demo.window`.
    unattributed: u64,
}

impl ExportTally {
    fn record(&mut self, span: &SpanData) {
        self.spans += 1;
        let trace_id = span.span_context.trace_id();
        let entry = self.pending.entry(trace_id).or_default();
        entry.spans += 1;
        if span.parent_span_id == SpanId::INVALID {
            entry.root_seen = true;
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

/// A span exporter that counts whole traces instead of storing spans. With an OTLP
/// exporter inside, it counts only what that exporter reported as sent.
#[derive(Debug)]
struct CountingExporter {
    tally: Arc<Mutex<ExportTally>>,
    otlp: Option<ReportingExporter<opentelemetry_otlp::SpanExporter>>,
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
                forwarded.await?;
            }
            let mut tally = lock(&self.tally);
            for span in &record {
                tally.record(span);
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

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        if let Some(e) = &mut self.otlp {
            e.set_resource(resource);
        }
    }
}

/// What one generating thread shares with the reporter.
#[derive(Debug, Default)]
struct WorkerSlot {
    /// Counts per window, for the windows not yet reported.
    counts: Mutex<BTreeMap<u64, WindowCounts>>,
    /// A clock reading such that everything this thread will still record lies in a
    /// window at or after it (`u64::MAX` once the thread is done).
    progress: AtomicU64,
}

/// A generating thread's totals.
#[derive(Debug, Default, Clone, Copy)]
struct WorkerTotals {
    offered: u64,
    sampled: u64,
    /// Sampled roots for which the limiter left no stamp (should never happen).
    unstamped: u64,
    /// Dropped roots for which the limiter did leave a stamp (should never happen).
    stamped_but_dropped: u64,
}

// ---------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------

/// Everything the generating threads need, built once they are all started.
#[derive(Debug)]
struct Run {
    tracer: SdkTracer,
    /// The subscriber (registry + tracing-opentelemetry layer) for `--via tracing`.
    dispatch: Option<tracing::Dispatch>,
    clock: MonotonicClock,
    window_nanos: u64,
    /// Clock time the load starts at and stops at.
    start: u64,
    end: u64,
    /// The same two instants by [`Instant`], for pacing.
    start_instant: Instant,
    end_instant: Instant,
    rate: Option<f64>,
    /// The next offer to pace (`--rate` only).
    ticket: AtomicU64,
}

/// The `demo.window` attribute value of window `window`.
fn window_value(window: u64) -> i64 {
    i64::try_from(window).unwrap_or(i64::MAX)
}

/// Offers one trace through the SDK API: starts a new root (whatever the thread's
/// current context), reads the limiter's stamp, records the window on a kept root, adds
/// the children and ends the trace. Says whether the root was sampled, and the stamp.
fn offer_sdk(run: &Run) -> (bool, Option<u64>) {
    let mut root = run.tracer.start_with_context("demo.root", &Context::new());
    let stamp = STAMP.with(Cell::take);
    let sampled = root.span_context().is_sampled();
    if let (true, Some(stamp)) = (sampled, stamp) {
        root.set_attribute(KeyValue::new(
            WINDOW_KEY,
            window_value(stamp / run.window_nanos),
        ));
    }
    let cx = Context::new().with_span(root);
    for _ in 0..CHILDREN {
        run.tracer.start_with_context("demo.child", &cx).end();
    }
    // The SimpleSpanProcessor exports synchronously: once the root has ended, the whole
    // trace has reached the exporter.
    cx.span().end();
    (sampled, stamp)
}

/// Offers the same trace through `tracing` spans with a few fields each, which
/// `tracing-opentelemetry` turns into OpenTelemetry spans.
fn offer_tracing(run: &Run, seq: u64) -> (bool, Option<u64>) {
    let root = tracing::info_span!(
        parent: None,
        "demo.root",
        otel.kind = "server",
        http.request.method = "GET",
        http.route = "/demo/{seq}",
        demo.seq = window_value(seq),
    );
    // tracing-opentelemetry starts the OpenTelemetry span (and so asks the sampler)
    // lazily; asking for its context starts it now, on this thread.
    let sc = root.context().span().span_context().clone();
    let stamp = STAMP.with(Cell::take);
    let sampled = sc.is_sampled();
    if let (true, Some(stamp)) = (sampled, stamp) {
        root.set_attribute(WINDOW_KEY, window_value(stamp / run.window_nanos));
    }
    root.in_scope(|| {
        for step in 0..CHILDREN {
            tracing::info_span!(
                "demo.child",
                demo.step = i64::from(step),
                demo.work = "none"
            )
            .in_scope(|| {});
        }
    });
    // Closing the root ends its OpenTelemetry span, exported synchronously.
    drop(root);
    (sampled, stamp)
}

/// Offers traces until the run ends.
fn generate(run: &Run, slot: &WorkerSlot) -> WorkerTotals {
    // `--via tracing`: this thread's spans go to the demo's subscriber.
    let _dispatch = run.dispatch.as_ref().map(tracing::dispatcher::set_default);
    let mut totals = WorkerTotals::default();
    let w = run.window_nanos;
    loop {
        if let Some(rate) = run.rate {
            let ticket = run.ticket.fetch_add(1, Ordering::Relaxed);
            let due = Duration::try_from_secs_f64(ticket as f64 / rate)
                .ok()
                .and_then(|d| run.start_instant.checked_add(d));
            let Some(due) = due.filter(|&due| due < run.end_instant) else {
                break;
            };
            // Nap in short slices, saying each time how far this thread has come, so
            // that a sleeping thread does not hold back the window lines.
            loop {
                let now = Instant::now();
                if now >= due {
                    break;
                }
                thread::sleep((due - now).min(MAX_NAP));
                slot.progress
                    .store(run.clock.now_nanos(), Ordering::Release);
            }
        }

        let now = run.clock.now_nanos();
        if now >= run.end {
            break;
        }
        STAMP.with(|cell| cell.set(None));
        let (sampled, stamp) = match run.dispatch {
            None => offer_sdk(run),
            Some(_) => offer_tracing(run, totals.offered),
        };
        totals.offered += 1;
        let kept_window = match (sampled, stamp) {
            (true, Some(stamp)) => Some(stamp / w),
            (true, None) => {
                totals.unstamped += 1;
                None
            }
            (false, stamp) => {
                totals.stamped_but_dropped += u64::from(stamp.is_some());
                None
            }
        };
        totals.sampled += u64::from(sampled);

        {
            let mut counts = lock(&slot.counts);
            counts.entry(now / w).or_default().offered += 1;
            if let Some(window) = kept_window {
                counts.entry(window).or_default().kept += 1;
            }
        }
        // Every later reading of this thread is at least `now`, and a kept trace's
        // window is never before the offer's (the limiter reads the clock after us and
        // never counts into an older window).
        slot.progress.store(now, Ordering::Release);
    }
    slot.progress.store(u64::MAX, Ordering::Release);
    totals
}

/// The per-window report: prints windows as they close and folds them into the summary.
#[derive(Debug)]
struct Report {
    window_nanos: u64,
    permits: u64,
    start: u64,
    end: u64,
    /// The next window to report.
    next: u64,
    /// Windows reported that overlap the run.
    windows: u64,
    /// Windows reported that lie wholly after the run's end: a trace offered just before
    /// the end whose limiter read the clock at or after it.
    after_end: u64,
    max_per_window: u64,
    min_full_window: Option<u64>,
    /// Windows whose kept count (by the limiter's stamps) differs from their exported one.
    mismatched_windows: u64,
    /// Counts that arrived for a window already reported (should never happen).
    late: WindowCounts,
}

impl Report {
    fn new(window_nanos: u64, permits: u32, start: u64, end: u64) -> Self {
        Self {
            window_nanos,
            permits: u64::from(permits),
            start,
            end,
            next: start / window_nanos,
            windows: 0,
            after_end: 0,
            max_per_window: 0,
            min_full_window: None,
            mismatched_windows: 0,
            late: WindowCounts::default(),
        }
    }

    /// The clock time at which window `k` closes.
    fn close_of(&self, k: u64) -> u64 {
        k.saturating_add(1).saturating_mul(self.window_nanos)
    }

    /// Takes the counts of window `self.next` (and any stragglers of older windows) out
    /// of the workers' and the exporter's maps, prints its line, folds it into the summary.
    fn finish_next(&mut self, slots: &[WorkerSlot], tally: &Mutex<ExportTally>) {
        let k = self.next;
        let mut c = WindowCounts::default();
        for slot in slots {
            let mut counts = lock(&slot.counts);
            let later = counts.split_off(&(k + 1));
            for (window, n) in std::mem::replace(&mut *counts, later) {
                let into = if window == k { &mut c } else { &mut self.late };
                into.offered += n.offered;
                into.kept += n.kept;
            }
        }
        {
            let mut tally = lock(tally);
            let later = tally.per_window.split_off(&(k + 1));
            for (window, n) in std::mem::replace(&mut tally.per_window, later) {
                if window == k {
                    c.exported += n;
                } else {
                    self.late.exported += n;
                }
            }
        }

        let whole =
            k.saturating_mul(self.window_nanos) >= self.start && self.close_of(k) <= self.end;
        let full = whole && c.offered > self.permits;
        eprintln!(
            "window {k}: offered {} kept {} exported {}{}",
            c.offered,
            c.kept,
            c.exported,
            if k.saturating_mul(self.window_nanos) >= self.end {
                " (after the end of the run: stamped by the limiter past it)"
            } else if whole {
                ""
            } else {
                " (partial)"
            },
        );
        if k.saturating_mul(self.window_nanos) < self.end {
            self.windows += 1;
        } else {
            self.after_end += 1;
        }
        self.max_per_window = self.max_per_window.max(c.exported);
        if full {
            self.min_full_window = Some(
                self.min_full_window
                    .map_or(c.exported, |m| m.min(c.exported)),
            );
        }
        if c.kept != c.exported {
            self.mismatched_windows += 1;
        }
        self.next += 1;
    }
}

fn main() -> ExitCode {
    let config = match parse_args(std::env::args_os().skip(1)) {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("demo: error: {msg} (see --help)");
            return ExitCode::from(2);
        }
    };
    match run(&config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("demo: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: &Config) -> Result<(), String> {
    let window_nanos = config.limit.window_nanos();
    let duration_nanos = u64::try_from(config.duration.as_nanos())
        .map_err(|_| "the duration does not fit in 64 bits of nanoseconds".to_owned())?;
    let tally = Arc::new(Mutex::new(ExportTally::default()));
    let slots: Vec<WorkerSlot> = (0..config.threads).map(|_| WorkerSlot::default()).collect();
    let shared: OnceLock<Run> = OnceLock::new();
    // The workers and the main thread; the main thread builds the run in between.
    let barrier = Barrier::new(config.threads + 1);
    // Connected before the load; kept until the provider has shut down (a gRPC exporter
    // runs its connection on this runtime).
    let mut otlp = config.otlp.clone().map(Otlp::connect).transpose()?;
    let otlp_exporter = otlp.as_mut().and_then(|o| o.exporter.take());

    let (provider, totals, report) = thread::scope(|scope| {
        let mut handles = Vec::with_capacity(config.threads);
        for (i, slot) in slots.iter().enumerate() {
            let (barrier, shared) = (&barrier, &shared);
            let spawned = thread::Builder::new()
                .name(format!("demo-{i}"))
                .spawn_scoped(scope, move || {
                    barrier.wait();
                    match shared.get() {
                        Some(run) => generate(run, slot),
                        None => WorkerTotals::default(),
                    }
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // The started threads wait at the barrier for ever: leave now.
                    eprintln!("demo: error: cannot start thread {i}: {e}");
                    std::process::exit(1);
                }
            }
        }

        // All threads are up: build the clock right before the load starts, so that the
        // windows (aligned to its origin) line up with the run.
        let clock = MonotonicClock::new();
        let built = AnyLimiter::with_clock(config.algorithm, config.limit, clock)
            .map_err(|e| e.to_string());
        let limiter = match built {
            Ok(inner) => StampingLimiter { inner },
            Err(e) => {
                barrier.wait(); // the workers find no run and return
                return Err(e);
            }
        };
        let sampler = RateLimitingSampler::new(limiter);
        // A simple (synchronous) processor even with OTLP: a window's line then counts
        // what the exporter has sent by the time the window closes. Only kept spans
        // reach it, a few hundred a second at the default limit.
        let provider = SdkTracerProvider::builder()
            .with_sampler(sampler)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name("otel-rate-sampler-demo")
                    .build(),
            )
            .with_simple_exporter(CountingExporter {
                tally: Arc::clone(&tally),
                otlp: otlp_exporter,
            })
            .build();
        let dispatch = (config.via == Via::Tracing).then(|| {
            tracing::Dispatch::new(
                tracing_subscriber::registry().with(
                    tracing_opentelemetry::layer()
                        .with_tracer(provider.tracer("otel-rate-sampler-demo")),
                ),
            )
        });
        let start = clock.now_nanos();
        let start_instant = Instant::now();
        let run = Run {
            tracer: provider.tracer("otel-rate-sampler-demo"),
            dispatch,
            clock,
            window_nanos,
            start,
            end: start.saturating_add(duration_nanos),
            start_instant,
            end_instant: start_instant + config.duration,
            rate: config.rate,
            ticket: AtomicU64::new(0),
        };
        eprintln!(
            "demo: {config}; clock MonotonicClock, resolution {}",
            humantime::format_duration(clock.resolution())
        );
        let resolution = clock.resolution();
        if resolution.saturating_mul(10) > config.limit.window() {
            eprintln!(
                "demo: note: the clock's resolution is coarse for this window; window edges \
                 are seen up to {} late, and windows between two ticks see no calls",
                humantime::format_duration(resolution)
            );
        }
        let run = shared.get_or_init(|| run);
        barrier.wait();

        // Report each window once every thread has moved past it.
        let mut report = Report::new(window_nanos, config.limit.permits(), run.start, run.end);
        loop {
            let watermark = slots
                .iter()
                .map(|s| s.progress.load(Ordering::Acquire))
                .min()
                .unwrap_or(u64::MAX);
            if watermark == u64::MAX {
                break; // every thread is done; the rest is reported after shutdown
            }
            let close = report.close_of(report.next);
            if watermark >= close {
                report.finish_next(&slots, &tally);
                continue;
            }
            let ahead = close.saturating_sub(run.clock.now_nanos());
            thread::sleep(Duration::from_nanos(ahead).clamp(Duration::from_micros(200), MAX_NAP));
        }

        let mut totals = WorkerTotals::default();
        for h in handles {
            let t = h
                .join()
                .map_err(|_| "a generating thread panicked".to_owned())?;
            totals.offered += t.offered;
            totals.sampled += t.sampled;
            totals.unstamped += t.unstamped;
            totals.stamped_but_dropped += t.stamped_but_dropped;
        }
        Ok((provider, totals, report))
    })?;

    provider
        .shutdown()
        .map_err(|e| format!("tracer provider shutdown failed: {e}"))?;
    drop(provider);
    if let Some(otlp) = otlp.filter(|o| o.connected) {
        eprintln!(
            "demo: OTLP: the exporter reported {} spans sent to {} over {} ({} failed)",
            otlp.counts.sent(),
            otlp.target.url,
            otlp.target.protocol,
            otlp.counts.failed()
        );
    }

    // Everything has reached the exporter: report the remaining windows of the run (and
    // any a kept trace was stamped into past its end).
    let mut report = report;
    let last_run_window = (report.end - 1) / window_nanos;
    let last_seen = {
        let tally = lock(&tally);
        let exported = tally.per_window.keys().next_back().copied();
        slots
            .iter()
            .filter_map(|s| lock(&s.counts).keys().next_back().copied())
            .chain(exported)
            .max()
    };
    let last = last_seen.map_or(last_run_window, |l| l.max(last_run_window));
    while report.next <= last {
        report.finish_next(&slots, &tally);
    }

    let tally = lock(&tally);
    let window_ms = if window_nanos.is_multiple_of(1_000_000) {
        serde_json::json!(window_nanos / 1_000_000)
    } else {
        serde_json::json!(window_nanos as f64 / 1e6)
    };
    // In the documented key order (a `serde_json::Map` would sort the keys).
    let fields: [(&str, serde_json::Value); 10] = [
        ("algorithm", config.algorithm.name().into()),
        ("limit", config.limit.permits().into()),
        ("window_ms", window_ms),
        ("threads", config.threads.into()),
        ("offered", totals.offered.into()),
        ("sampled", totals.sampled.into()),
        ("exported", tally.complete.into()),
        ("windows", report.windows.into()),
        ("max_per_window", report.max_per_window.into()),
        ("min_full_window", report.min_full_window.into()),
    ];
    let summary = fields
        .iter()
        .map(|(key, value)| format!("{}:{value}", serde_json::Value::from(*key)))
        .collect::<Vec<_>>()
        .join(",");
    let summary = format!("{{{summary}}}");

    let secs = config.duration.as_secs_f64();
    eprintln!(
        "demo: offered {} traces ({:.0}/s), sampled {} ({:.3}/s), exported {} whole traces \
         ({} spans)",
        totals.offered,
        totals.offered as f64 / secs,
        totals.sampled,
        totals.sampled as f64 / secs,
        tally.complete,
        tally.spans,
    );
    let mut odd = Vec::new();
    if tally.complete != totals.sampled {
        odd.push(format!(
            "exported {} != sampled {}",
            tally.complete, totals.sampled
        ));
    }
    if !tally.pending.is_empty() {
        odd.push(format!(
            "{} traces reached the exporter incomplete",
            tally.pending.len()
        ));
    }
    if tally.unattributed > 0 {
        odd.push(format!(
            "{} exported roots had no {WINDOW_KEY}",
            tally.unattributed
        ));
    }
    if totals.unstamped > 0 || totals.stamped_but_dropped > 0 {
        odd.push(format!(
            "{} kept roots without a limiter stamp, {} dropped roots with one",
            totals.unstamped, totals.stamped_but_dropped
        ));
    }
    if report.after_end > 0 {
        eprintln!(
            "demo: {} window(s) after the end of the run hold traces offered before it \
             (counted in sampled and exported, not in windows)",
            report.after_end
        );
    }
    if report.mismatched_windows > 0 {
        odd.push(format!(
            "{} windows where kept (limiter stamps) != exported",
            report.mismatched_windows
        ));
    }
    if report.late != WindowCounts::default() {
        odd.push(format!(
            "counts arrived after their window was reported: {:?}",
            report.late
        ));
    }
    if report.max_per_window > u64::from(config.limit.permits()) {
        odd.push(format!(
            "a window kept {} traces, more than the limit of {}",
            report.max_per_window,
            config.limit.permits()
        ));
    }
    for msg in &odd {
        eprintln!("demo: WARNING: {msg}");
    }
    println!("{summary}");
    Ok(())
}
