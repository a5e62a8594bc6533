//! The end of a run: the headline and any warnings on stderr, one JSON line on stdout.

use std::collections::BTreeMap;

use otel_rate_sampler::stats::{DecisionStats, DropReason, ParentOrigin};
use serde::Serialize;

use crate::args::Config;
use crate::export::{ExportTally, OtlpOutcome};
use crate::load::{WorkerTotals, WINDOW_KEY};
use crate::windows::{Report, WindowCounts};

/// The JSON summary, one line on stdout, fields in this order.
///
/// Flat counters first, then the per-window map, then optional sections that are left
/// out when they do not apply: `otlp`, and in fleet mode the fleet's fields
/// (`redis_key`, `instance_id`, `redis_calls`, `leases`, `lease_errors`,
/// `shape_conflicts`, `fallback_seen`, `instances_seen`).
#[derive(Debug, Serialize)]
pub(crate) struct Summary {
    /// `ratelimiting`, or `adaptive` with `--adaptive`.
    sampler: &'static str,
    algorithm: &'static str,
    /// Whether the local limit is paced (false with `--unpaced` and in fleet mode).
    paced: bool,
    /// Traces kept per window.
    limit: u32,
    /// A whole number when the window is whole milliseconds.
    window_ms: serde_json::Number,
    threads: usize,
    duration_ms: u128,
    /// Traces offered (root spans started).
    offered: u64,
    /// Roots the sampler kept.
    sampled: u64,
    /// Whole traces exported: acknowledged by the collector with OTLP, else received by
    /// the in-process exporter.
    exported: u64,
    /// Windows that overlap the run.
    windows: u64,
    /// Windows wholly inside the run.
    whole_windows: u64,
    /// Whole windows offered more than the limit.
    full_windows: u64,
    /// The most any window kept.
    max_per_window: u64,
    /// The least a full window kept (`null` with no full window).
    min_full_window: Option<u64>,
    /// Kept traces per window, by the window's start in Unix milliseconds: every window
    /// the run touched, so several processes' counts can be summed per window. In fleet
    /// mode the windows are the fleet's (by Redis `TIME`), each trace in the one the
    /// fleet counted it in.
    per_window: BTreeMap<u64, u64>,
    /// Roots the whole windows kept, by the tenth of the window the limiter stamped
    /// them in (left out in fleet mode): even when paced under overload, front-loaded
    /// with `--unpaced`.
    #[serde(skip_serializing_if = "Option::is_none")]
    kept_per_tenth: Option<[u64; 10]>,
    /// The sampler's own counts (`stats()`): every span it decided, roots and children
    /// (absent for a declarative file's composite sampler, which keeps none).
    #[serde(skip_serializing_if = "Option::is_none")]
    decisions: Option<Decisions>,
    /// `--config`: the rule file.
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<String>,
    /// `--config`: the service whose rules applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<String>,
    /// `--watch`: the reloads seen during the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    reloads: Option<ReloadCounts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    otlp: Option<OtlpOutcome>,
    /// The process's CPU time (user and system, every thread: sampling, spans, export)
    /// while the load ran, per offered trace, in nanoseconds (`null` where the platform
    /// has no process CPU clock).
    cpu_ns_per_offered_trace: Option<f64>,
    /// `--keys`: per route, offered, kept and adjusted (the sum of `1/p` over its kept
    /// roots, `p` their `sampler.key_probability`, 1 where none).
    #[serde(skip_serializing_if = "Option::is_none")]
    per_key: Option<BTreeMap<String, crate::keys::KeyTotals>>,
    /// `--keys`: the pairs of a whole window and a route offered in it and in the window
    /// before that kept nothing in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    keys_starved: Option<u64>,
    /// Fleet mode: what the fleet's limiter did, flat in the summary.
    #[cfg(feature = "redis")]
    #[serde(flatten)]
    fleet: Option<crate::fleet::Outcome>,
}

impl Summary {
    pub(crate) fn new(
        config: &Config,
        totals: &WorkerTotals,
        report: &Report,
        local: &ExportTally,
        decisions: Option<&DecisionStats>,
        otlp: Option<OtlpOutcome>,
    ) -> Self {
        let window_nanos = config.limit.window_nanos();
        let window_ms = if window_nanos.is_multiple_of(1_000_000) {
            serde_json::Number::from(window_nanos / 1_000_000)
        } else {
            serde_json::Number::from_f64(window_nanos as f64 / 1e6)
                .unwrap_or_else(|| serde_json::Number::from(0))
        };
        Self {
            sampler: if config.adaptive {
                "adaptive"
            } else {
                "ratelimiting"
            },
            algorithm: match config.fleet {
                None => config.algorithm.name(),
                Some(_) => "fleet",
            },
            paced: config.fleet.is_none() && config.limit.is_paced(),
            limit: config.limit.permits(),
            window_ms,
            threads: config.threads,
            duration_ms: config.duration.as_millis(),
            offered: totals.offered,
            sampled: totals.sampled,
            exported: otlp.as_ref().map_or(local.complete, |o| o.acknowledged),
            windows: report.windows,
            whole_windows: report.whole_windows,
            full_windows: report.full_windows,
            max_per_window: report.max_per_window,
            min_full_window: report.min_full_window,
            per_window: report.per_window.clone(),
            kept_per_tenth: config.fleet.is_none().then_some(report.kept_per_tenth),
            decisions: decisions.map(Decisions::from),
            config: None,
            service: None,
            reloads: None,
            otlp,
            cpu_ns_per_offered_trace: None,
            per_key: None,
            keys_starved: None,
            #[cfg(feature = "redis")]
            fleet: None,
        }
    }

    /// The summary with `--keys`' routes, from the report and the threads' counts.
    pub(crate) fn with_keys(self, report: &Report) -> Self {
        let Some(keys) = &report.keys else {
            return self;
        };
        Self {
            per_key: Some(keys.per_key.clone()),
            keys_starved: Some(keys.starved),
            ..self
        }
    }

    /// The summary with the CPU time `spent` while `offered` traces were offered.
    pub(crate) fn with_cpu(self, spent: Option<std::time::Duration>, offered: u64) -> Self {
        let per_trace = spent
            .filter(|_| offered > 0)
            .map(|spent| (spent.as_nanos() as f64 / offered as f64).round());
        Self {
            cpu_ns_per_offered_trace: per_trace,
            ..self
        }
    }

    /// The summary with the fleet's fields, in fleet mode.
    #[cfg(feature = "redis")]
    pub(crate) fn with_fleet(self, fleet: Option<crate::fleet::Outcome>) -> Self {
        Self { fleet, ..self }
    }

    /// The summary with `--config`'s file and service, and with `--watch` the reloads
    /// (`applied`, `failed`) seen.
    #[cfg(feature = "config")]
    pub(crate) fn with_rules(self, config: &Config, reloads: Option<(u64, u64)>) -> Self {
        let Some(rules) = &config.rules else {
            return self;
        };
        Self {
            config: Some(rules.file.display().to_string()),
            service: Some(rules.service.clone()),
            reloads: reloads
                .filter(|_| rules.watch)
                .map(|(applied, failed)| ReloadCounts { applied, failed }),
            ..self
        }
    }

    /// Whole traces exported, as the summary says.
    pub(crate) fn exported(&self) -> u64 {
        self.exported
    }

    /// The summary as one JSON line.
    pub(crate) fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// The summary's `reloads`: the rule file's reloads during a `--watch` run.
#[derive(Debug, Serialize)]
pub(crate) struct ReloadCounts {
    /// Files applied.
    applied: u64,
    /// Files refused (the rules in force stayed), and watcher errors.
    failed: u64,
}

/// The summary's `decisions`: spans kept by parent origin (`none` for roots, `local`
/// for children), spans dropped by reason (`rate_limit` for roots, `parent` for the
/// children of dropped roots), every key present.
#[derive(Debug, Serialize)]
pub(crate) struct Decisions {
    kept: BTreeMap<&'static str, u64>,
    dropped: BTreeMap<&'static str, u64>,
}

impl From<&DecisionStats> for Decisions {
    fn from(stats: &DecisionStats) -> Self {
        Self {
            kept: ParentOrigin::ALL
                .into_iter()
                .map(|o| (o.as_str(), stats.kept_from(o)))
                .collect(),
            dropped: DropReason::ALL
                .into_iter()
                .map(|r| (r.as_str(), stats.dropped_for(r)))
                .collect(),
        }
    }
}

/// One line on the sampler's decisions, as the summary's `decisions` counts them.
pub(crate) fn decisions_line(stats: Option<&DecisionStats>) -> String {
    let Some(stats) = stats else {
        return "sampler decisions: not counted (a declarative file's sampler keeps no stats)"
            .into();
    };
    let list = |pairs: &BTreeMap<&str, u64>| {
        let shown: Vec<String> = pairs
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        if shown.is_empty() {
            "0".to_owned()
        } else {
            shown.join(", ")
        }
    };
    let d = Decisions::from(stats);
    format!(
        "sampler decisions: kept {} spans by parent origin ({}), dropped {} by reason ({})",
        stats.kept(),
        list(&d.kept),
        stats.dropped(),
        list(&d.dropped)
    )
}

/// The headline: what a user asked for, the limit, against what whole windows kept.
pub(crate) fn headline(
    config: &Config,
    totals: &WorkerTotals,
    report: &Report,
    exported: u64,
) -> String {
    let limit = format!(
        "limit {} per {}",
        config.limit.permits(),
        humantime::format_duration(config.limit.window())
    );
    let partial = report.windows - report.whole_windows;
    let kept = match report.whole_min {
        None => format!(
            "no window wholly inside this run ({limit}); the most one of the {partial} \
             partial windows kept: {}",
            report.max_per_window
        ),
        Some(min) => {
            let n = report.whole_windows;
            let kept = if min == report.whole_max {
                let each = match n {
                    1 => "the 1 whole window".to_owned(),
                    n => format!("each of the {n} whole windows"),
                };
                format!("kept {min} per window in {each}")
            } else {
                format!(
                    "kept {min} to {} per window in the {n} whole windows",
                    report.whole_max
                )
            };
            format!(
                "{kept} ({limit}; {} of them offered more than that); {partial} partial \
                 window(s) at the ends",
                report.full_windows
            )
        }
    };
    let spread = if config.fleet.is_none() && report.whole_windows > 0 {
        format!(
            "; per tenth of a window ({}): {:?}",
            if config.limit.is_paced() {
                "paced"
            } else {
                "unpaced"
            },
            report.kept_per_tenth
        )
    } else {
        String::new()
    };
    format!(
        "{kept}; {} sampled of {} offered, {exported} exported{spread}",
        totals.sampled, totals.offered
    )
}

/// What looks wrong in a run, one line each.
pub(crate) fn warnings(
    totals: &WorkerTotals,
    report: &Report,
    local: &ExportTally,
    decisions: Option<&DecisionStats>,
    largest_limit: u64,
) -> Vec<String> {
    let mut odd = Vec::new();
    if let Some(decisions) = decisions {
        stats_agree(totals, decisions, &mut odd);
    }
    if local.complete != totals.sampled {
        odd.push(format!(
            "whole traces at the exporter {} != sampled {}",
            local.complete, totals.sampled
        ));
    }
    if local.incomplete() > 0 {
        odd.push(format!(
            "{} traces reached the exporter incomplete",
            local.incomplete()
        ));
    }
    if local.unattributed > 0 {
        odd.push(format!(
            "{} exported roots had no {WINDOW_KEY}",
            local.unattributed
        ));
    }
    if totals.unstamped > 0 || totals.stamped_but_dropped > 0 {
        odd.push(format!(
            "{} kept roots without a limiter stamp, {} dropped roots with one",
            totals.unstamped, totals.stamped_but_dropped
        ));
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
    if report.max_per_window > largest_limit {
        odd.push(format!(
            "a window kept {} traces, more than the limit of {largest_limit}",
            report.max_per_window,
        ));
    }
    odd
}

/// Whether the sampler's `stats()` agree with what the threads counted.
fn stats_agree(totals: &WorkerTotals, decisions: &DecisionStats, odd: &mut Vec<String>) {
    // Refused by the limit, with --config by a rule's probability or the cap, with
    // --adaptive also by the probability.
    let roots_dropped: u64 = DropReason::ALL
        .into_iter()
        .map(|r| decisions.dropped_for_from(r, ParentOrigin::Root))
        .sum();
    if decisions.kept_from(ParentOrigin::Root) != totals.sampled
        || roots_dropped != totals.offered - totals.sampled
    {
        odd.push(format!(
            "the sampler's stats() kept {} and dropped {roots_dropped} roots; the threads \
             counted {} sampled of {} offered",
            decisions.kept_from(ParentOrigin::Root),
            totals.sampled,
            totals.offered
        ));
    }
}
