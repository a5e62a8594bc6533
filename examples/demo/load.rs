//! Load generation: the stamping limiter that tells a thread which window its kept trace
//! was counted in, and the threads that offer traces through the SDK API or `tracing`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use opentelemetry::trace::{Link, Span as _, SpanKind, TraceContextExt as _, TraceId, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingResult, SdkTracer, ShouldSample};
use otel_rate_sampler::stats::DecisionStats;
use otel_rate_sampler::{
    AdaptiveSampler, AnyLimiter, Clock, FairLimiter, Limit, RateLimiter, RateLimitingSampler,
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::keys::{self, RouteCounts, Routes};
use crate::windows::{AlignedClock, WindowCounts};

/// Children started under each root span.
pub(crate) const CHILDREN: u32 = 3;
/// The root-span attribute holding the window the limiter counted the trace in.
pub(crate) const WINDOW_KEY: &str = "demo.window";
/// The longest a pacing thread sleeps before it reports its progress again.
pub(crate) const MAX_NAP: Duration = Duration::from_millis(5);

thread_local! {
    /// The window (of the demo's clock) this thread's last admission by a
    /// [`StampingLimiter`] was counted in, or `None` if its last call was refused.
    static COUNTED_IN: Cell<Option<u64>> = const { Cell::new(None) };
    /// The tenth of its window (0 to 9) this thread's last admission by a local
    /// [`StampingLimiter`] was stamped in; `None` if refused, or in fleet mode.
    static KEPT_TENTH: Cell<Option<usize>> = const { Cell::new(None) };
    /// This thread's last reading of a [`RecordingClock`] (`None`: none since reset).
    static LAST_READ: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The demo's clock, leaving each reading in this thread's [`LAST_READ`]: for samplers
/// whose limiters sit inside them (the rules', the fair one's), the window of a kept
/// root is that of the last reading.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordingClock(pub(crate) AlignedClock);

impl Clock for RecordingClock {
    fn now_nanos(&self) -> u64 {
        let now = self.0.now_nanos();
        LAST_READ.with(|c| c.set(Some(now)));
        now
    }

    fn resolution(&self) -> Duration {
        self.0.resolution()
    }
}

/// The decision `decide` takes, telling this thread the window (of windows of
/// `window_nanos`) a kept root was counted in: that of the last reading of `clock` the
/// decision made (now, when it made none: a probability reads no clock).
pub(crate) fn stamped_by_clock(
    clock: &RecordingClock,
    window_nanos: u64,
    decide: impl FnOnce() -> SamplingResult,
) -> SamplingResult {
    LAST_READ.with(|c| c.set(None));
    let result = decide();
    let at = (result.decision == opentelemetry_sdk::trace::SamplingDecision::RecordAndSample).then(
        || {
            LAST_READ
                .with(Cell::take)
                .unwrap_or_else(|| clock.now_nanos())
        },
    );
    counted_at(at, window_nanos);
    result
}

/// The limiter the demo samples with.
#[derive(Debug)]
// One value per run; boxing the local limiter would only add an indirection to each of
// its decisions.
#[allow(clippy::large_enum_variant)]
pub(crate) enum DemoLimiter {
    /// One of the crate's local limiters, on the demo's clock.
    Local(AnyLimiter<AlignedClock>),
    /// `--redis`: the fleet's limiter, shared with every demo on the same Redis and key.
    #[cfg(feature = "redis")]
    Fleet(crate::fleet::Fleet),
}

/// A limiter that leaves the window each admission was counted in, on the demo's clock,
/// in the thread-local [`COUNTED_IN`], so the thread that started a root span learns it.
///
/// It does not override `try_acquire`: the trait's default calls `acquire_stamped`, so
/// the sampler's `try_acquire` comes through here.
#[derive(Debug)]
pub(crate) struct StampingLimiter {
    pub(crate) inner: DemoLimiter,
    pub(crate) window_nanos: u64,
}

impl RateLimiter for StampingLimiter {
    fn acquire_stamped(&self) -> Option<u64> {
        match &self.inner {
            DemoLimiter::Local(l) => {
                let stamp = l.acquire_stamped();
                counted_at(stamp, self.window_nanos);
                stamp
            }
            // The fleet counts by window id, exactly; the stamp is the start of that
            // window on the demo's clock (the sampler only asks whether there is one).
            #[cfg(feature = "redis")]
            DemoLimiter::Fleet(f) => {
                let window = f.acquire();
                COUNTED_IN.with(|cell| cell.set(window));
                window.map(|k| k.saturating_mul(self.window_nanos))
            }
        }
    }

    fn limit(&self) -> Limit {
        match &self.inner {
            DemoLimiter::Local(l) => l.limit(),
            #[cfg(feature = "redis")]
            DemoLimiter::Fleet(f) => f.limit(),
        }
    }
}

/// Tells this thread's next reader of [`COUNTED_IN`] and [`KEPT_TENTH`] the window and
/// the tenth of it its last admission was counted in, from the clock reading `at`
/// (`None`: refused): for samplers whose limiters are not a [`StampingLimiter`].
pub(crate) fn counted_at(at: Option<u64>, window_nanos: u64) {
    let w = u128::from(window_nanos);
    // Below 10: the offset is below the window.
    let tenth = at.map(|s| (u128::from(s % window_nanos) * 10 / w) as usize);
    KEPT_TENTH.with(|cell| cell.set(tenth));
    COUNTED_IN.with(|cell| cell.set(at.map(|s| s / window_nanos)));
}

/// The sampler the demo runs: the rate-limiting sampler on `--algorithm` (or the
/// fleet's limiter), with `--adaptive` the adaptive probability sampler over that
/// limiter (its cap), or with `--config` the file's rules.
#[derive(Clone, Debug)]
pub(crate) enum DemoSampler {
    /// One limit: `--limit` per `--window`, or the fleet's.
    Rate(RateLimitingSampler<StampingLimiter>),
    /// `--adaptive`: a consistent probability adapted each window, under that limit.
    Adaptive(AdaptiveSampler<AlignedClock, StampingLimiter>),
    /// `--fair-by ATTR`: fair shares of that limit per key, on the recording clock.
    Fair(RateLimitingSampler<FairLimiter<RecordingClock>>, u64),
    /// `--config FILE --service NAME`.
    #[cfg(feature = "config")]
    Rules(crate::rules::Rules),
}

impl DemoSampler {
    /// Every span the sampler decided so far (`None`: a sampler that counts nothing).
    pub(crate) fn decisions(&self) -> Option<DecisionStats> {
        match self {
            DemoSampler::Rate(s) => Some(s.stats().decisions),
            DemoSampler::Adaptive(s) => Some(s.stats().decisions),
            DemoSampler::Fair(s, _) => Some(s.stats().decisions),
            #[cfg(feature = "config")]
            DemoSampler::Rules(r) => r.decisions(),
        }
    }
}

impl ShouldSample for DemoSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let result = match self {
            DemoSampler::Rate(s) => {
                s.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
            }
            DemoSampler::Adaptive(s) => {
                s.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
            }
            DemoSampler::Fair(s, window_nanos) => {
                let clock = s.limiter().inner().clock();
                stamped_by_clock(clock, *window_nanos, || {
                    s.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
                })
            }
            #[cfg(feature = "config")]
            DemoSampler::Rules(r) => r.stamped(|s| {
                s.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
            }),
        };
        keys::note_probability(&result);
        result
    }
}

/// Locks `m`, poisoned or not.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking thread would already have failed the run; the counts stay usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What one generating thread shares with the reporter.
#[derive(Debug, Default)]
pub(crate) struct WorkerSlot {
    /// Counts per window, for the windows not yet reported.
    pub(crate) counts: Mutex<BTreeMap<u64, WindowCounts>>,
    /// A clock reading such that everything this thread will still record lies in a
    /// window at or after it (`u64::MAX` once the thread is done).
    pub(crate) progress: AtomicU64,
    /// `--keys`: counts per route.
    pub(crate) routes: Mutex<RouteCounts>,
}

/// A generating thread's totals.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WorkerTotals {
    pub(crate) offered: u64,
    pub(crate) sampled: u64,
    /// Sampled roots for which the limiter left no stamp (should never happen).
    pub(crate) unstamped: u64,
    /// Dropped roots for which the limiter did leave a stamp (should never happen).
    pub(crate) stamped_but_dropped: u64,
}

/// Everything the generating threads need, built once they are all started.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) tracer: SdkTracer,
    /// The subscriber (registry + tracing-opentelemetry layer) for `--via tracing`.
    pub(crate) dispatch: Option<tracing::Dispatch>,
    pub(crate) clock: AlignedClock,
    pub(crate) window_nanos: u64,
    /// Clock time the load starts at and stops at.
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The same two instants by [`Instant`], for pacing.
    pub(crate) start_instant: Instant,
    pub(crate) end_instant: Instant,
    pub(crate) rate: Option<f64>,
    /// The next offer to pace (`--rate` only).
    pub(crate) ticket: AtomicU64,
    /// How long after a window's close on `clock` its counts are final (see
    /// [`Report`](crate::windows::Report)).
    pub(crate) settle: u64,
    /// Fleet mode: the watch on the fleet limiter's statistics.
    #[cfg(feature = "redis")]
    pub(crate) fleet: Option<crate::fleet::Watch>,
    /// The sampler (a clone sharing its counters), for its `stats()` at the end.
    pub(crate) sampler: DemoSampler,
    /// `--keys`: the routes roots are given.
    pub(crate) routes: Option<Routes>,
    /// `--watch`: the watcher following the rule file for the run.
    #[cfg(feature = "reload")]
    pub(crate) _watcher: Option<otel_rate_sampler::ConfigWatcher>,
}

/// The `demo.window` attribute value of window `window`.
fn window_value(window: u64) -> i64 {
    i64::try_from(window).unwrap_or(i64::MAX)
}

/// Offers one trace through the SDK API: starts a new root (whatever the thread's
/// current context), reads the window the limiter counted it in, records it on a kept
/// root, adds the children and ends the trace. Says whether the root was sampled, and
/// that window.
fn offer_sdk(run: &Run, route: Option<KeyValue>) -> (bool, Option<u64>) {
    // Started before the decision (the SDK would read the time after it): the root's
    // start and end bracket the admission, for the fleet tests' stamps (`export.rs`).
    let builder = run
        .tracer
        .span_builder("demo.root")
        .with_start_time(std::time::SystemTime::now());
    let builder = match route {
        None => builder,
        Some(route) => builder.with_attributes([route]),
    };
    let mut root = builder.start_with_context(&run.tracer, &Context::new());
    let window = COUNTED_IN.with(Cell::take);
    let sampled = root.span_context().is_sampled();
    if let (true, Some(window)) = (sampled, window) {
        root.set_attribute(KeyValue::new(WINDOW_KEY, window_value(window)));
    }
    let cx = Context::new().with_span(root);
    for _ in 0..CHILDREN {
        run.tracer.start_with_context("demo.child", &cx).end();
    }
    // The SimpleSpanProcessor exports synchronously: once the root has ended, the whole
    // trace has reached the exporter.
    cx.span().end();
    (sampled, window)
}

/// Offers the same trace through `tracing` spans with a few fields each, which
/// `tracing-opentelemetry` turns into OpenTelemetry spans.
fn offer_tracing(seq: u64) -> (bool, Option<u64>) {
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
    let window = COUNTED_IN.with(Cell::take);
    let sampled = sc.is_sampled();
    if let (true, Some(window)) = (sampled, window) {
        root.set_attribute(WINDOW_KEY, window_value(window));
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
    (sampled, window)
}

/// Offers traces until the run ends.
pub(crate) fn generate(run: &Run, slot: &WorkerSlot) -> WorkerTotals {
    // `--via tracing`: this thread's spans go to the demo's subscriber.
    let _dispatch = run.dispatch.as_ref().map(tracing::dispatcher::set_default);
    let mut totals = WorkerTotals::default();
    let w = run.window_nanos;
    // The route draw's state: distinct per thread, never 0.
    let mut draw = (slot as *const WorkerSlot as u64) | 1;
    loop {
        if !pace(run, slot) {
            break;
        }
        let now = run.clock.now_nanos();
        if now >= run.end {
            break;
        }
        COUNTED_IN.with(|cell| cell.set(None));
        KEPT_TENTH.with(|cell| cell.set(None));
        keys::reset_probability();
        let route = run.routes.as_ref().map(|r| r.draw(&mut draw));
        let attribute = route.zip(run.routes.as_ref()).map(|(i, r)| r.attribute(i));
        let (sampled, counted_in) = match run.dispatch {
            None => offer_sdk(run, attribute),
            Some(_) => offer_tracing(totals.offered),
        };
        totals.offered += 1;
        let kept_window = match (sampled, counted_in) {
            (true, Some(window)) => Some(window),
            (true, None) => {
                totals.unstamped += 1;
                None
            }
            (false, counted_in) => {
                totals.stamped_but_dropped += u64::from(counted_in.is_some());
                None
            }
        };
        totals.sampled += u64::from(sampled);

        if let Some((route, routes)) = route.zip(run.routes.as_ref()) {
            let kept = kept_window.map(|window| (window, keys::take_probability()));
            lock(&slot.routes).count(routes.len(), route, now / w, kept);
        }
        {
            let mut counts = lock(&slot.counts);
            counts.entry(now / w).or_default().offered += 1;
            if let Some(window) = kept_window {
                let c = counts.entry(window).or_default();
                c.kept += 1;
                if let Some(tenth) = KEPT_TENTH.with(Cell::take) {
                    c.kept_per_tenth[tenth] += 1;
                }
            }
        }
        // Every later reading of this thread is at least `now`, and a kept trace's
        // window is never before the offer's (a local limiter reads the clock after us
        // and never counts into an older window); a fleet's window closes at most the
        // report's `settle` before it.
        slot.progress.store(now, Ordering::Release);
    }
    // Release: pairs with the reporter's Acquire; this thread records nothing more.
    slot.progress.store(u64::MAX, Ordering::Release);
    totals
}

/// `--rate`: waits for this thread's next offer. Returns `false`, at the end of the run,
/// when that offer falls after it: the thread then waits out the run anyway, so a slow
/// rate still makes a run of the length asked for.
fn pace(run: &Run, slot: &WorkerSlot) -> bool {
    let Some(rate) = run.rate else {
        return true;
    };
    // Relaxed: the ticket only has to be distinct; nothing else is published with it.
    let ticket = run.ticket.fetch_add(1, Ordering::Relaxed);
    let due = Duration::try_from_secs_f64(ticket as f64 / rate)
        .ok()
        .and_then(|d| run.start_instant.checked_add(d))
        .filter(|&due| due < run.end_instant);
    // Nap in short slices, saying each time how far this thread has come, so that a
    // sleeping thread does not hold back the window lines.
    let until = due.unwrap_or(run.end_instant);
    loop {
        let now = Instant::now();
        if now >= until {
            return due.is_some();
        }
        thread::sleep((until - now).min(MAX_NAP));
        // Release: pairs with the reporter's Acquire load; this thread records nothing
        // older than this reading from now on.
        slot.progress
            .store(run.clock.now_nanos(), Ordering::Release);
    }
}
