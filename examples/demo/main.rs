//! Load generator for the rate-limiting sampler: offers traces from several threads to an
//! `SdkTracerProvider` that samples with [`RateLimitingSampler`] (with `--adaptive`, the
//! [`AdaptiveSampler`] with the same limiter as its cap), counts what reaches the
//! exporter, and reports per window how many traces were offered and kept.
//!
//! ```text
//! cargo run --release --example demo -- --algorithm sliding-log --limit 5 --window 200ms
//! ```
//!
//! The parts: [`args`] (the command line), [`load`] (the generating threads and the
//! stamping limiter), [`export`] (the counting exporter and OTLP), [`windows`] (the
//! aligned clock and the per-window report), [`summary`] (the headline and the JSON line),
//! with the `redis` feature `fleet` (fleet mode), and with the `metrics` feature
//! `metrics` (the sampler's metrics over OTLP).
//!
//! Each trace is a root span and 3 children started under it through the SDK API, or
//! with `--via tracing` through `tracing` spans (a few fields each) that
//! `tracing-opentelemetry` turns into OpenTelemetry spans.
//!
//! With `--otlp URL` (or `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT` set) kept spans are also
//! exported over OTLP, gRPC by default or HTTP/protobuf with `--otlp-protocol http`, and
//! `exported` then counts the whole traces the collector acknowledged. The run ends
//! within its duration plus the export timeout (`OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`,
//! ms, default 10000), whatever the collector does; one line says what it acknowledged,
//! or that no collector answered.
//!
//! Built with feature `metrics`, a run with OTLP also exports the sampler's metrics
//! (`SamplerMetrics`) to the same endpoint over the same protocol (see `metrics`), every
//! `OTEL_METRIC_EXPORT_INTERVAL` ms and at the end, under the same deadline; one line
//! says what became of them.
//!
//! The summary's `decisions` is the sampler's `stats()`: spans kept by parent origin
//! (`none`: the roots, so `sampled`), dropped by reason (`rate_limit`: the refused
//! roots, so `offered - sampled`; `parent`: their children).
//!
//! With `--redis redis://HOST:PORT` (feature `redis`) the limit is a fleet's: a
//! `FleetLimiter` shared through that Redis with every demo on the same `--redis-key`.
//! `per_window` then names the fleet's windows, so several demos' counts add up per
//! window to the fleet's, and the summary adds the fleet's statistics (`redis_calls`,
//! `lease_errors`, `fallback_seen`, `instances_seen`, ...).
//!
//! With `--config FILE --service NAME` (feature `config`) the sampler is a
//! `RuleBasedSampler` applying that service's rules from the file (module `rules`);
//! the windows reported are those of the service's cap, else of its default limit, and
//! the summary adds `config` and `service`. A kept trace's window is the one of the
//! clock reading its limiter made. With `--watch` too (feature `reload`) the file is
//! followed as it changes (saves, a Kubernetes ConfigMap's `..data` swap): one line per
//! reload on stderr (`demo: reload N: applied; limit now ...` or `failed: ...`), counted
//! in the summary's `reloads` (`{"applied":..,"failed":..}`). A reload that changes the
//! window length leaves the report on the first one.
//!
//! With features `yaml` and `composable`, `--config` also takes an OpenTelemetry
//! declarative file whose roots no rule file decides (schema 1.1, a
//! `composite/development` sampler, `${VAR}` references filled from the environment;
//! see `examples/otel-config-composite.yaml`): the file's whole sampler decides, on the
//! demo's clock; the windows reported are those of its first composite rate limiter
//! (else 1 s windows, and the limit shown is the largest a limit takes), and the
//! summary has no `decisions` (the composite keeps no stats). Its kept roots carry the
//! `th` the composite wrote.
//!
//! One line per window goes to stderr as the window closes, then the headline (what whole
//! windows kept against the limit); at the end exactly one JSON line goes to stdout:
//!
//! ```text
//! {"sampler":"ratelimiting","algorithm":"fixed","paced":true,"limit":100,"window_ms":1000,
//!  "threads":4,"duration_ms":5000,"offered":..,"sampled":..,"exported":..,"windows":6,"whole_windows":4,"full_windows":4,
//!  "max_per_window":100,"min_full_window":100,"per_window":{"1763914801000":100,..},
//!  "kept_per_tenth":[40,40,40,40,40,40,40,40,40,40],
//!  "decisions":{"kept":{"local":..,"none":..,"remote":0},"dropped":{"no_rule":0,..}}}
//! ```
//!
//! **Window attribution.** A kept trace is attributed to the window the *limiter* counted
//! it in: the limiter is wrapped in a `StampingLimiter`, which calls the inner
//! `acquire_stamped()` (in fleet mode `acquire_window()`, the fleet's window id) and
//! leaves the window of the admission in a thread-local cell that the generating thread
//! reads right after starting the root. That window is also recorded on
//! the root span (`demo.window`), so the exporter counts exported traces per window by
//! what it received. Offered traces are attributed by a read of the same clock, taken just
//! before the root starts. Windows start on multiples of the window in Unix time (see
//! [`windows`]), so a run's first and last windows are usually partial; a fleet's windows
//! are the same ones by Redis `TIME`. A window's line is printed once every thread has
//! read the clock past its end (in fleet mode, past its end plus a margin for the
//! fleet's edges), so its counts are final when printed.
//!
//! `windows` counts the windows that overlap the run. The limiter reads the clock a
//! little after the thread does, so a trace offered just before the end can be counted
//! in a window wholly after it: such a window gets its own line (marked), and its traces
//! count in `sampled`, `exported`, `max_per_window` and `per_window`, but not in
//! `windows`.
//!
//! Memory stays bounded however long the run: the exporter only counts (per trace id for
//! the traces still being exported, per window for the windows not yet reported), a
//! window's counters are dropped once its line is printed, and a run touches at most
//! 10000 windows.

mod args;
mod cpu;
mod export;
#[cfg(feature = "redis")]
mod fleet;
mod keys;
mod load;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "config")]
mod rules;
mod summary;
#[path = "../support/mod.rs"]
mod support;
mod windows;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use otel_rate_sampler::stats::DecisionStats;
use otel_rate_sampler::{
    AdaptiveSampler, AnyLimiter, Clock, FairBy, RateLimitingSampler, RemoteParents,
};
use tracing_subscriber::layer::SubscriberExt as _;

use args::{Config, Via};
use export::{CountingExporter, OtlpExport, OtlpOutcome, Tally};
use load::{
    lock, DemoLimiter, DemoSampler, Run, StampingLimiter, WorkerSlot, WorkerTotals, MAX_NAP,
};
use metrics::MetricsExport;
use windows::{AlignedClock, Report};

/// The service name on the demo's spans.
const SERVICE: &str = "otel-rate-sampler-demo";
/// How long the provider's shutdown may take without OTLP (it has nothing to send).
const LOCAL_SHUTDOWN: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let config = match Config::from_args() {
        Ok(config) => config,
        Err(code) => return code,
    };
    match run(&config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("demo: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// What the load phase hands to the end of the run.
struct Loaded {
    provider: SdkTracerProvider,
    totals: WorkerTotals,
    report: Report,
    end: Instant,
    /// The sampler's decisions, read once the threads are joined (`None`: a
    /// declarative file's sampler, which counts nothing).
    decisions: Option<DecisionStats>,
    /// `--config`: the reloads seen (with `--watch`) and the largest limit in force.
    #[cfg(feature = "config")]
    reloads: Option<std::sync::Arc<rules::Reloads>>,
    /// Fleet mode: what the fleet's limiter did.
    #[cfg(feature = "redis")]
    fleet: Option<fleet::Outcome>,
}

fn run(config: &Config) -> Result<(), String> {
    let local = Arc::new(Tally::default());
    let (otlp, batch) = match config.otlp.clone() {
        Some(target) => {
            let (otlp, batch) = OtlpExport::start(target)?;
            (Some(otlp), Some(batch))
        }
        None => (None, None),
    };
    #[cfg(feature = "metrics")]
    let metrics = otlp
        .as_ref()
        .map(|o| MetricsExport::start(o, SERVICE))
        .transpose()?;
    #[cfg(not(feature = "metrics"))]
    let metrics = None;
    let cpu_before = cpu::process_time();
    let loaded = offer_load(config, &local, batch, metrics.as_ref())?;
    let cpu_spent = cpu::process_time()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));

    let otlp = end_exports(
        loaded.provider,
        otlp,
        metrics,
        loaded.end,
        loaded.totals.sampled,
    );

    let local = lock(&local.received);
    let summary = summary::Summary::new(
        config,
        &loaded.totals,
        &loaded.report,
        &local,
        loaded.decisions.as_ref(),
        otlp,
    );
    let summary = summary
        .with_cpu(cpu_spent, loaded.totals.offered)
        .with_keys(&loaded.report);
    #[cfg(feature = "config")]
    let summary = summary.with_rules(config, loaded.reloads.as_ref().map(|r| r.counts()));
    // With --watch the largest limit in force during the run bounds its windows.
    #[cfg(feature = "config")]
    let largest_limit = loaded.reloads.as_ref().map_or(0, |r| {
        // Relaxed: read once the run is over.
        r.largest.load(Ordering::Relaxed)
    });
    #[cfg(not(feature = "config"))]
    let largest_limit = 0;
    let largest_limit = largest_limit.max(u64::from(config.limit.permits()));
    #[cfg(feature = "redis")]
    let summary = {
        if let Some(outcome) = &loaded.fleet {
            eprintln!("demo: {}", outcome.line());
        }
        summary.with_fleet(loaded.fleet)
    };
    if loaded.report.after_end > 0 {
        eprintln!(
            "demo: {} window(s) after the end of the run hold traces offered before it \
             (counted in sampled, exported and per_window, not in windows)",
            loaded.report.after_end
        );
    }
    for msg in summary::warnings(
        &loaded.totals,
        &loaded.report,
        &local,
        loaded.decisions.as_ref(),
        largest_limit,
    ) {
        eprintln!("demo: WARNING: {msg}");
    }
    eprintln!(
        "demo: {}",
        summary::decisions_line(loaded.decisions.as_ref())
    );
    eprintln!(
        "demo: {}",
        summary::headline(config, &loaded.totals, &loaded.report, summary.exported())
    );
    println!("{}", summary.to_line());
    Ok(())
}

/// Ends the exports and says what became of them. Without OTLP the tracer provider's
/// shutdown has nothing to wait for; with it, the run ends at the latest the export
/// timeout after `end`, whatever the collector does. The metrics' shutdown runs beside
/// the traces', by the same deadline, and is waited for before the gRPC runtime both
/// exporters share is let go: the metrics' last export (the run's totals, collected
/// after every decision) is then the last the collector gets, not cut off with the
/// runtime when the traces happen to finish first.
fn end_exports(
    provider: SdkTracerProvider,
    otlp: Option<OtlpExport>,
    metrics: Option<MetricsExport>,
    end: Instant,
    sampled: u64,
) -> Option<OtlpOutcome> {
    let deadline = end + otlp.as_ref().map_or(LOCAL_SHUTDOWN, |o| o.timeout);
    let traces = export::shutdown_traces_by(provider, deadline);
    #[cfg(feature = "metrics")]
    let metrics = metrics.map(|m| m.shutdown_by(deadline));
    #[cfg(not(feature = "metrics"))]
    let _: Option<MetricsExport> = metrics; // none without the feature
    let finished = traces.wait(deadline).is_some();
    // Before `finish` shuts the gRPC runtime down: the metric exporter runs on it too.
    #[cfg(feature = "metrics")]
    let metrics = metrics.map(|(shutdown, report)| (shutdown.wait(deadline), report));
    let otlp = otlp.map(|o| o.finish(finished));
    match &otlp {
        Some(outcome) => eprintln!("demo: {}", outcome.line(sampled)),
        None if !finished => eprintln!("demo: the tracer provider did not shut down in time"),
        None => {}
    }
    #[cfg(feature = "metrics")]
    if let Some((last, report)) = metrics {
        eprintln!("demo: {}", report.line(last.as_ref()));
    }
    otlp
}

/// Starts the threads, builds the run once they are up, reports the windows as they
/// close, and joins the threads.
fn offer_load(
    config: &Config,
    local: &Arc<Tally>,
    batch: Option<BatchSpanProcessor>,
    metrics: Option<&MetricsExport>,
) -> Result<Loaded, String> {
    let slots: Vec<WorkerSlot> = (0..config.threads).map(|_| WorkerSlot::default()).collect();
    let shared: OnceLock<Run> = OnceLock::new();
    // The workers and the main thread; the main thread builds the run in between.
    let barrier = Barrier::new(config.threads + 1);
    thread::scope(|scope| {
        let mut handles = Vec::with_capacity(config.threads);
        for (i, slot) in slots.iter().enumerate() {
            let (barrier, shared) = (&barrier, &shared);
            let spawned = thread::Builder::new()
                .name(format!("demo-{i}"))
                .spawn_scoped(scope, move || {
                    barrier.wait();
                    shared.get().map(|run| load::generate(run, slot))
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
        let built = build_run(config, local, batch, metrics);
        let (run, provider) = match built {
            Ok((run, provider)) => (shared.get_or_init(|| run), provider),
            Err(e) => {
                barrier.wait(); // the workers find no run and return
                return Err(e);
            }
        };
        barrier.wait();

        let mut report = Report::new(
            run.clock,
            run.window_nanos,
            config.limit.permits(),
            run.start,
            run.end,
        );
        report.settle = run.settle;
        report.keys = run.routes.as_ref().map(|r| keys::KeyReport::new(r.len()));
        report_live(run, &slots, local, &mut report);
        let mut totals = WorkerTotals::default();
        for h in handles {
            let t = h
                .join()
                .map_err(|_| "a generating thread panicked".to_owned())?
                .unwrap_or_default();
            totals.offered += t.offered;
            totals.sampled += t.sampled;
            totals.unstamped += t.unstamped;
            totals.stamped_but_dropped += t.stamped_but_dropped;
        }
        report_rest(run, &slots, local, &mut report);
        if let Some(keys) = &mut report.keys {
            keys.finish(&slots);
        }
        Ok(Loaded {
            provider,
            totals,
            report,
            end: run.end_instant,
            decisions: run.sampler.decisions(),
            #[cfg(feature = "config")]
            reloads: match &run.sampler {
                DemoSampler::Rules(r) => Some(std::sync::Arc::clone(&r.reloads)),
                DemoSampler::Rate(_) | DemoSampler::Adaptive(_) | DemoSampler::Fair(..) => None,
            },
            #[cfg(feature = "redis")]
            fleet: run.fleet.as_ref().map(fleet::Watch::finish),
        })
    })
}

/// Builds the clock (right before the load starts), the limiter (in fleet mode, once
/// Redis has answered), the sampler and the provider, and the run the threads share.
fn build_run(
    config: &Config,
    local: &Arc<Tally>,
    batch: Option<BatchSpanProcessor>,
    metrics: Option<&MetricsExport>,
) -> Result<(Run, SdkTracerProvider), String> {
    let window_nanos = config.limit.window_nanos();
    let clock = AlignedClock::new(window_nanos);
    #[cfg(feature = "config")]
    if let Some(source) = &config.rules {
        let rules = rules::Rules::new(source, clock, window_nanos, config.limit.permits())?;
        #[cfg(feature = "reload")]
        let watcher = source.watch.then(|| rules.watch(source)).transpose()?;
        let extras = Extras {
            settle: 0,
            #[cfg(feature = "redis")]
            fleet: None,
            #[cfg(feature = "reload")]
            watcher,
        };
        let sampler = DemoSampler::Rules(rules);
        return finish_run(config, clock, sampler, extras, local, batch, metrics);
    }
    if !config.fair_by.is_empty() {
        let sampler = RateLimitingSampler::builder(config.limit)
            .algorithm(config.algorithm)
            .clock(load::RecordingClock(clock))
            .fair_by(FairBy::attributes(config.fair_by.clone()))
            .max_keys(config.max_keys)
            .build()
            .map_err(|e| format!("--max-keys: {e}"))?;
        let extras = Extras {
            settle: 0,
            #[cfg(feature = "redis")]
            fleet: None,
            #[cfg(feature = "reload")]
            watcher: None,
        };
        let sampler = DemoSampler::Fair(sampler, window_nanos);
        return finish_run(config, clock, sampler, extras, local, batch, metrics);
    }
    let inner = demo_limiter(config, clock)?;
    #[cfg(feature = "redis")]
    let fleet = match &inner {
        DemoLimiter::Fleet(f) => Some(f.watch()),
        DemoLimiter::Local(_) => None,
    };
    #[cfg(feature = "redis")]
    let settle = fleet.as_ref().map_or(0, |_| {
        u64::try_from(fleet::SETTLE.as_nanos()).unwrap_or(u64::MAX)
    });
    #[cfg(not(feature = "redis"))]
    let settle = 0;
    let stamping = StampingLimiter {
        inner,
        window_nanos,
    };
    let sampler = if config.adaptive {
        DemoSampler::Adaptive(AdaptiveSampler::with_cap(
            stamping,
            clock,
            RemoteParents::Follow,
        ))
    } else {
        DemoSampler::Rate(RateLimitingSampler::new(stamping))
    };
    let extras = Extras {
        settle,
        #[cfg(feature = "redis")]
        fleet,
        #[cfg(feature = "reload")]
        watcher: None,
    };
    finish_run(config, clock, sampler, extras, local, batch, metrics)
}

/// What a run holds besides its sampler, by mode.
struct Extras {
    /// How long after a window's close its counts are final (fleet mode).
    settle: u64,
    /// Fleet mode: the watch on the fleet limiter's statistics.
    #[cfg(feature = "redis")]
    fleet: Option<fleet::Watch>,
    /// `--watch`: the watcher following the rule file.
    #[cfg(feature = "reload")]
    watcher: Option<otel_rate_sampler::ConfigWatcher>,
}

/// The provider around `sampler`, the subscriber for `--via tracing`, and the run.
fn finish_run(
    config: &Config,
    clock: AlignedClock,
    sampler: DemoSampler,
    extras: Extras,
    local: &Arc<Tally>,
    batch: Option<BatchSpanProcessor>,
    metrics: Option<&MetricsExport>,
) -> Result<(Run, SdkTracerProvider), String> {
    let window_nanos = config.limit.window_nanos();
    if let Some(metrics) = metrics {
        metrics.register(&sampler);
    }
    let provider = tracer_provider(sampler.clone(), local, batch);
    let dispatch = (config.via == Via::Tracing).then(|| {
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer(SERVICE));
        let registry = tracing_subscriber::registry();
        #[cfg(feature = "tracing")]
        if !config.plain_layer {
            return tracing::Dispatch::new(
                registry.with(otel_rate_sampler::SkipDropped::new(layer)),
            );
        }
        tracing::Dispatch::new(registry.with(layer))
    });
    eprintln!(
        "demo: {config}; clock MonotonicClock aligned to Unix time, resolution {}",
        humantime::format_duration(clock.resolution())
    );
    if clock.resolution().saturating_mul(10) > config.limit.window() {
        eprintln!(
            "demo: note: the clock's resolution is coarse for this window; window edges \
             are seen up to {} late, and windows between two ticks see no calls",
            humantime::format_duration(clock.resolution())
        );
    }
    let duration_nanos = u64::try_from(config.duration.as_nanos()).unwrap_or(u64::MAX);
    let start = clock.now_nanos();
    let start_instant = Instant::now();
    let run = Run {
        tracer: provider.tracer(SERVICE),
        dispatch,
        clock,
        window_nanos,
        start,
        end: start.saturating_add(duration_nanos),
        start_instant,
        end_instant: start_instant + config.duration,
        rate: config.rate,
        ticket: AtomicU64::new(0),
        settle: extras.settle,
        #[cfg(feature = "redis")]
        fleet: extras.fleet,
        sampler,
        routes: config
            .keys
            .map(|(keys, skew)| keys::Routes::new(keys, skew)),
        #[cfg(feature = "reload")]
        _watcher: extras.watcher,
    };
    Ok((run, provider))
}

/// The provider: the counting exporter behind a simple (synchronous) processor, so a
/// window's line counts what reached it by the time the window closes; OTLP, if any,
/// behind a batch processor, so the threads never wait on the network.
fn tracer_provider(
    sampler: DemoSampler,
    local: &Arc<Tally>,
    batch: Option<BatchSpanProcessor>,
) -> SdkTracerProvider {
    let mut builder = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(SERVICE)
                .build(),
        )
        .with_simple_exporter(CountingExporter::local(Arc::clone(local)));
    if let Some(batch) = batch {
        builder = builder.with_span_processor(batch);
    }
    builder.build()
}

/// The limiter: `--algorithm` on the demo's clock, or with `--redis` the fleet's.
fn demo_limiter(config: &Config, clock: AlignedClock) -> Result<DemoLimiter, String> {
    match &config.fleet {
        None => Ok(DemoLimiter::Local(AnyLimiter::with_clock(
            config.algorithm,
            config.limit,
            clock,
        ))),
        #[cfg(feature = "redis")]
        Some(target) => fleet::Fleet::connect(target, config.limit, clock).map(DemoLimiter::Fleet),
        #[cfg(not(feature = "redis"))]
        Some(_) => Err("--redis needs the demo built with --features redis".into()),
    }
}

/// Reports each window once every thread has moved past it, until every thread is done.
fn report_live(run: &Run, slots: &[WorkerSlot], local: &Tally, report: &mut Report) {
    loop {
        let watermark = slots
            .iter()
            // Acquire: pairs with the threads' Release stores, so a window is closed
            // only after everything a thread recorded before passing it.
            .map(|s| s.progress.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        if watermark == u64::MAX {
            return; // every thread is done; the rest is reported once they are joined
        }
        #[cfg(feature = "redis")]
        if let Some(fleet) = &run.fleet {
            fleet.observe();
        }
        let close = report.close_of(report.next).saturating_add(report.settle);
        if watermark >= close {
            report.finish_next(slots, &local.received);
            continue;
        }
        let ahead = close.saturating_sub(run.clock.now_nanos());
        thread::sleep(Duration::from_nanos(ahead).clamp(Duration::from_micros(200), MAX_NAP));
    }
}

/// Once the threads are joined everything has reached the counting exporter (it is
/// synchronous): reports the remaining windows of the run, and any a kept trace was
/// stamped into past its end.
fn report_rest(run: &Run, slots: &[WorkerSlot], local: &Tally, report: &mut Report) {
    let last_run_window = (run.end - 1) / run.window_nanos;
    let last_seen = {
        let exported = lock(&local.received).per_window.keys().next_back().copied();
        slots
            .iter()
            .filter_map(|s| lock(&s.counts).keys().next_back().copied())
            .chain(exported)
            .max()
    };
    let last = last_seen.map_or(last_run_window, |l| l.max(last_run_window));
    while report.next <= last {
        report.finish_next(slots, &local.received);
    }
}

/// Without feature `metrics` there is no metrics export: a type with no value.
#[cfg(not(feature = "metrics"))]
mod metrics {
    use crate::load::DemoSampler;

    #[derive(Debug)]
    pub(crate) enum MetricsExport {}

    impl MetricsExport {
        pub(crate) fn register(&self, _: &DemoSampler) {
            match *self {}
        }
    }
}
