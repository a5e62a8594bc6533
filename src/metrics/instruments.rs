//! The crate's instruments, registered on a `Meter`.

use std::fmt;

use opentelemetry::metrics::{AsyncInstrument, Meter};
use opentelemetry::{global, InstrumentationScope, KeyValue};

use super::observation::{self, Observation, Source};
use crate::limiter::RateLimiter;
use crate::sampler::RateLimitingSampler;
use crate::stats::ParentOrigin;

/// Reports a sampler's decisions (its [`stats`](RateLimitingSampler::stats)) as
/// OpenTelemetry metrics (feature `metrics`).
///
/// Every instrument is observable: its callback sums the sampler's per-thread counters
/// when the meter provider's reader collects, so a sampling decision makes no metric
/// API call and pays nothing for the metrics beyond its counting (see `BENCHMARKS.md`).
///
/// | instrument | kind | unit | attributes |
/// |---|---|---|---|
/// | `otel_rate_sampler.decisions` | counter | `{span}` | `otel.span.sampling_result` (`DROP`, `RECORD_AND_SAMPLE`), `otel.span.parent.origin` (`none`, `local`, `remote`), `otel_rate_sampler.reason` (drops only: `rate_limit`, `service_cap`, `probability`, `no_rule`, `parent`), `otel_rate_sampler.rule` (rule-based: the configured rule name, absent for decisions no rule made), `service.name` (rule-based) |
/// | `otel.sdk.span.started` (off by default, [`span_started`](Self::span_started)) | counter | `{span}` | `otel.span.sampling_result`, `otel.span.parent.origin` |
/// | `otel_rate_sampler.window.used` | gauge | `{span}` | `otel_rate_sampler.limiter` (`sampler`, `rule`, `floor`, `cap`), `otel_rate_sampler.rule`, `service.name` (rule-based) |
/// | `otel_rate_sampler.window.limit` | gauge | `{span}` | as `otel_rate_sampler.window.used` |
/// | `otel_rate_sampler.fair.overflow` (with `fair_by`) | counter | `{span}` | `otel_rate_sampler.limiter` (`sampler`, `rule`, `cap`), `otel_rate_sampler.rule` (a rule's), `service.name` (rule-based): the calls of keys past `max_keys`, which share one overflow key (keys themselves are never attributes) |
/// | `otel_rate_sampler.reloads` (rule-based) | counter | `{reload}` | `result` (`success`, `failure`), `service.name` |
/// | `otel_rate_sampler.config.generation` (rule-based) | gauge | `{generation}` | `service.name` |
///
/// With feature `redis`, [`register_fleet`](Self::register_fleet) reports a
/// [`FleetLimiter`](crate::FleetLimiter)'s [`stats`](crate::FleetLimiter::stats): see
/// its table.
///
/// The attribute values are bounded: rule names come from the configuration, never
/// from spans. The instruments report for as long as the meter provider runs (they
/// hold a clone of the sampler); register each sampler once.
///
/// ```
/// use otel_rate_sampler::{RateLimitingSampler, SamplerMetrics};
///
/// let sampler = RateLimitingSampler::per_second(100.0)?;
/// // On the global meter provider (set it first), with the semantic-convention counter:
/// SamplerMetrics::new().span_started(true).register(&sampler);
/// # Ok::<(), otel_rate_sampler::LimitError>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct SamplerMetrics {
    meter: Option<Meter>,
    span_started: bool,
}

impl SamplerMetrics {
    /// The decision counter.
    pub const DECISIONS: &'static str = "otel_rate_sampler.decisions";
    /// The semantic conventions' span counter (development), off by default.
    pub const SPAN_STARTED: &'static str = "otel.sdk.span.started";
    /// The admissions in each limiter's current window.
    pub const WINDOW_USED: &'static str = "otel_rate_sampler.window.used";
    /// The permits per window of each limiter.
    pub const WINDOW_LIMIT: &'static str = "otel_rate_sampler.window.limit";
    /// The calls of keys past `max_keys` under `fair_by` (the overflow key's).
    pub const FAIR_OVERFLOW: &'static str = "otel_rate_sampler.fair.overflow";
    /// The reload counter (rule-based sampler).
    pub const RELOADS: &'static str = "otel_rate_sampler.reloads";
    /// The generation of the rules in force (rule-based sampler).
    pub const CONFIG_GENERATION: &'static str = "otel_rate_sampler.config.generation";
    /// Attribute: `DROP` or `RECORD_AND_SAMPLE`.
    pub const SAMPLING_RESULT: &'static str = "otel.span.sampling_result";
    /// Attribute: `none`, `local` or `remote` ([`ParentOrigin::as_str`]).
    pub const PARENT_ORIGIN: &'static str = "otel.span.parent.origin";
    /// Attribute: why a span was dropped ([`DropReason::as_str`](crate::stats::DropReason::as_str)).
    pub const REASON: &'static str = "otel_rate_sampler.reason";
    /// Attribute: the configured name of the rule that decided.
    pub const RULE: &'static str = observation::key::RULE;
    /// Attribute: which limiter a window belongs to (`sampler`, `rule`, `floor`, `cap`).
    pub const LIMITER: &'static str = observation::key::LIMITER;
    /// Attribute of the reload counter: `success` or `failure`.
    pub const RESULT: &'static str = "result";

    /// The instruments on the global meter provider's meter `otel-rate-sampler`, taken
    /// when a sampler is registered: set the global provider before.
    pub fn new() -> Self {
        Self {
            meter: None,
            span_started: false,
        }
    }

    /// The instruments on `meter`.
    pub fn with_meter(meter: Meter) -> Self {
        Self {
            meter: Some(meter),
            span_started: false,
        }
    }

    /// Whether to report `otel.sdk.span.started` as well (default `false`): for SDKs
    /// that do not emit it (the Rust SDK 0.33 does not). Counts the decisions of the
    /// registered sampler, which the SDK asks for every span.
    pub fn span_started(mut self, on: bool) -> Self {
        self.span_started = on;
        self
    }

    /// Reports `sampler`'s decisions and window (and those of every clone of it).
    pub fn register<L: RateLimiter + 'static>(&self, sampler: &RateLimitingSampler<L>) {
        self.install(observation::of_sampler(sampler), false);
    }

    /// Reports an [`AdaptiveSampler`](crate::AdaptiveSampler)'s decisions and its cap's
    /// window (and those of every clone of it).
    pub fn register_adaptive<C: crate::clock::Clock, L: RateLimiter + 'static>(
        &self,
        sampler: &crate::sampler::AdaptiveSampler<C, L>,
    ) {
        self.install(observation::of_adaptive(sampler), false);
    }

    /// Reports `sampler`'s decisions per rule, its windows, reloads and generation.
    #[cfg(feature = "config")]
    pub fn register_rules<C: crate::clock::Clock + Clone>(
        &self,
        sampler: &crate::config::RuleBasedSampler<C>,
    ) {
        self.install(observation::of_rules(sampler), true);
    }

    /// The meter given, or the global provider's meter `otel-rate-sampler`.
    pub(super) fn meter(&self) -> Meter {
        self.meter.clone().unwrap_or_else(|| {
            global::meter_with_scope(
                InstrumentationScope::builder("otel-rate-sampler")
                    .with_version(env!("CARGO_PKG_VERSION"))
                    .build(),
            )
        })
    }

    fn install(&self, source: Source, rules: bool) {
        let meter = self.meter();
        let src = source.clone();
        meter
            .u64_observable_counter(Self::DECISIONS)
            .with_unit("{span}")
            .with_description("Sampling decisions, by result, parent origin, reason and rule")
            .with_callback(move |out| decisions(&src(), out))
            .build();
        if self.span_started {
            let src = source.clone();
            meter
                .u64_observable_counter(Self::SPAN_STARTED)
                .with_unit("{span}")
                .with_description("Spans started, by sampling result and parent origin")
                .with_callback(move |out| span_started(&src(), out))
                .build();
        }
        let src = source.clone();
        meter
            .u64_observable_gauge(Self::WINDOW_USED)
            .with_unit("{span}")
            .with_description("Admissions in each limiter's current window")
            .with_callback(move |out| windows(&src(), out, |w| w.used))
            .build();
        let src = source.clone();
        meter
            .u64_observable_gauge(Self::WINDOW_LIMIT)
            .with_unit("{span}")
            .with_description("Permits per window of each limiter")
            .with_callback(move |out| windows(&src(), out, |w| u64::from(w.permits)))
            .build();
        let src = source.clone();
        meter
            .u64_observable_counter(Self::FAIR_OVERFLOW)
            .with_unit("{span}")
            .with_description("Calls of keys past max_keys under fair_by, sharing one overflow key")
            .with_callback(move |out| {
                let o = src();
                for (who, n) in &o.overflow {
                    let mut attrs = who.clone();
                    attrs.extend(o.service.clone());
                    out.observe(*n, &attrs);
                }
            })
            .build();
        if rules {
            let src = source.clone();
            meter
                .u64_observable_counter(Self::RELOADS)
                .with_unit("{reload}")
                .with_description("Reloads of the sampling rules, by result")
                .with_callback(move |out| {
                    let o = src();
                    if let Some(r) = o.reloads {
                        for (result, n) in [("success", r.succeeded), ("failure", r.failed)] {
                            let mut attrs = vec![KeyValue::new(Self::RESULT, result)];
                            attrs.extend(o.service.clone());
                            out.observe(n, &attrs);
                        }
                    }
                })
                .build();
            meter
                .u64_observable_gauge(Self::CONFIG_GENERATION)
                .with_unit("{generation}")
                .with_description("Generation of the sampling rules in force (0: as built)")
                .with_callback(move |out| {
                    let o = source();
                    if let Some(r) = o.reloads {
                        let attrs: Vec<KeyValue> = o.service.into_iter().collect();
                        out.observe(r.generation, &attrs);
                    }
                })
                .build();
        }
    }
}

impl Default for SamplerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SamplerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SamplerMetrics")
            .field(
                "meter",
                &self.meter.as_ref().map(|_| "given").unwrap_or("global"),
            )
            .field("span_started", &self.span_started)
            .finish()
    }
}

fn result(kept: bool) -> KeyValue {
    let value = if kept { "RECORD_AND_SAMPLE" } else { "DROP" };
    KeyValue::new(SamplerMetrics::SAMPLING_RESULT, value)
}

fn origin(origin: ParentOrigin) -> KeyValue {
    KeyValue::new(SamplerMetrics::PARENT_ORIGIN, origin.as_str())
}

fn decisions(o: &Observation, out: &dyn AsyncInstrument<u64>) {
    for (who, stats) in &o.decisions {
        for (reason, from, n) in stats.iter() {
            let mut attrs = vec![result(reason.is_none()), origin(from)];
            if let Some(reason) = reason {
                attrs.push(KeyValue::new(SamplerMetrics::REASON, reason.as_str()));
            }
            attrs.extend(who.iter().cloned());
            attrs.extend(o.service.clone());
            out.observe(n, &attrs);
        }
    }
}

fn span_started(o: &Observation, out: &dyn AsyncInstrument<u64>) {
    for from in ParentOrigin::ALL {
        let kept: u64 = o.decisions.iter().map(|(_, s)| s.kept_from(from)).sum();
        let dropped: u64 = o
            .decisions
            .iter()
            .flat_map(|(_, s)| s.iter())
            .filter(|(reason, o, _)| reason.is_some() && *o == from)
            .map(|(_, _, n)| n)
            .sum();
        out.observe(kept, &[result(true), origin(from)]);
        out.observe(dropped, &[result(false), origin(from)]);
    }
}

fn windows(
    o: &Observation,
    out: &dyn AsyncInstrument<u64>,
    value: impl Fn(&crate::stats::WindowFill) -> u64,
) {
    for (who, fill) in &o.windows {
        let mut attrs = who.clone();
        attrs.extend(o.service.clone());
        out.observe(value(fill), &attrs);
    }
}
