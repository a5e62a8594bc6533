//! `--config FILE --service NAME` (feature `config`): the service's rules from a rule
//! file, applied by a [`RuleBasedSampler`] on the demo's clock, and with `--watch`
//! (feature `reload`) followed as the file changes, one line per reload. With feature
//! `yaml`, an OpenTelemetry declarative file whose roots no rule file decides (a 1.1
//! `composite/development` sampler, `${VAR}` references substituted) is applied whole,
//! as a `DeclarativeSampler` on the demo's clock; its windows are those of its first
//! composite rate limiter, else of 1 s with no limit.
//!
//! The limiters sit inside the rule-based sampler, so the window of a kept trace is
//! learnt from the clock: a `RecordingClock` (`load.rs`) leaves each reading in a thread-local,
//! and after a kept decision the last reading of the deciding thread (the limiter's, or
//! the cap's when there is one) gives the window, on the windows of the limit the
//! report uses (see [`bound`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry_sdk::trace::{SamplingResult, ShouldSample};
use otel_rate_sampler::stats::DecisionStats;
use otel_rate_sampler::summary::RulePolicy;
#[cfg(feature = "yaml")]
use otel_rate_sampler::DeclarativeSampler;
use otel_rate_sampler::{Algorithm, Limit, RuleBasedSampler, SamplingConfig};
use serde::Serialize;

use crate::load::RecordingClock;
use crate::windows::AlignedClock;

/// `--config FILE --service NAME [--watch]`, checked.
#[derive(Debug, Clone)]
pub(crate) struct RulesSource {
    pub(crate) file: PathBuf,
    pub(crate) service: String,
    pub(crate) watch: bool,
    /// `--watch-quiet`: the watcher's quiet period, when not its default.
    #[cfg_attr(not(feature = "reload"), allow(dead_code))] // read by `watch`
    pub(crate) watch_quiet: Option<std::time::Duration>,
    /// The rule file's model; `None` for a declarative file applied whole.
    pub(crate) config: Option<SamplingConfig>,
}

impl RulesSource {
    /// What applies the file, for the run's first line.
    pub(crate) fn applied_by(&self) -> &'static str {
        match self.config {
            Some(_) => "rules",
            None => "declarative sampler",
        }
    }

    /// What the windows reported are those of, for the run's first line.
    pub(crate) fn bound_name(&self) -> &'static str {
        match &self.config {
            Some(c) if c.effective_rules(&self.service).cap().is_some() => "cap",
            Some(_) => "default limit",
            None => "composite rate limiter (else 1s windows, no limit)",
        }
    }
}

/// The limit whose windows the demo reports for `service`: its cap if it has one (it
/// bounds everything the service keeps), else its default's limit.
///
/// # Errors
///
/// One line if the service has neither (a probability and no cap: no window to report).
pub(crate) fn bound(config: &SamplingConfig, service: &str) -> Result<(Limit, Algorithm), String> {
    let rules = config.effective_rules(service);
    if let Some(cap) = rules.cap() {
        return Ok(cap);
    }
    match rules.default() {
        Some(RulePolicy::Limit { limit, algorithm }) => Ok((limit, algorithm)),
        _ => Err(format!(
            "service {service:?} in the file has no cap and no default limit: the demo \
             reports windows of one of them"
        )),
    }
}

/// Loads `--config FILE` for `--service NAME`.
///
/// # Errors
///
/// The file's error, or [`bound`]'s.
pub(crate) fn load(
    file: &Path,
    service: &str,
    watch: bool,
) -> Result<(RulesSource, Limit, Algorithm), String> {
    let mut source = RulesSource {
        file: file.to_path_buf(),
        service: service.to_owned(),
        watch,
        watch_quiet: None,
        config: None,
    };
    #[cfg(feature = "yaml")]
    if let Some(limit) = composite_bound(file, service)? {
        if watch {
            return Err("--watch follows rule files, not a declarative file's sampler".into());
        }
        return Ok((source, limit, Algorithm::FixedWindow));
    }
    let config = SamplingConfig::from_path(file).map_err(|e| e.to_string())?;
    let (limit, algorithm) = bound(&config, service)?;
    source.config = Some(config);
    Ok((source, limit, algorithm))
}

/// For a declarative file whose roots no rule file decides, the limit whose windows
/// the demo reports: its first composite rate limiter's, else 1 s windows with no
/// limit (the most permits a limit takes). `None` for a rule file.
#[cfg(feature = "yaml")]
fn composite_bound(file: &Path, service: &str) -> Result<Option<Limit>, String> {
    let sampler = match DeclarativeSampler::from_path_if_declarative(file, service) {
        Ok(Some(s)) if !s.roots_decided_by_rules() => s,
        Ok(_) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    match sampler.composite_limits().first() {
        Some(limit) => Ok(Some(*limit)),
        None => Limit::per_window(Limit::MAX_PERMITS, std::time::Duration::from_secs(1))
            .map(|l| Some(l.unpaced()))
            .map_err(|e| e.to_string()),
    }
}

/// The reloads a `--watch` run saw.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Reloads {
    applied: AtomicU64,
    failed: AtomicU64,
    /// The largest bound in force during the run (the bound at the start, then each
    /// applied file's).
    #[serde(skip)]
    pub(crate) largest: AtomicU64,
}

impl Reloads {
    /// Applied and failed reloads so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        // Relaxed: counters read once the run is over.
        (
            self.applied.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

/// The sampler `--config` names.
#[derive(Clone, Debug)]
enum Sampler {
    Rules(RuleBasedSampler<RecordingClock>),
    /// A declarative file applied whole (feature `yaml`).
    #[cfg(feature = "yaml")]
    Declarative(DeclarativeSampler<RecordingClock>),
}

/// The rule-based sampler, telling the generating thread the window of each kept root.
#[derive(Clone, Debug)]
pub(crate) struct Rules {
    sampler: Sampler,
    clock: RecordingClock,
    window_nanos: u64,
    pub(crate) reloads: Arc<Reloads>,
}

impl Rules {
    /// The sampler for `source`, on `clock`, reporting windows of `window_nanos`.
    ///
    /// # Errors
    ///
    /// One line if the sampler cannot be built.
    pub(crate) fn new(
        source: &RulesSource,
        clock: AlignedClock,
        window_nanos: u64,
        permits: u32,
    ) -> Result<Self, String> {
        let clock = RecordingClock(clock);
        let sampler = match &source.config {
            Some(config) => Sampler::Rules(
                RuleBasedSampler::with_clock(config, &source.service, clock)
                    .map_err(|e| e.to_string())?,
            ),
            #[cfg(feature = "yaml")]
            None => Sampler::Declarative(
                DeclarativeSampler::from_path_with_clock(&source.file, &source.service, clock)
                    .map_err(|e| e.to_string())?,
            ),
            #[cfg(not(feature = "yaml"))]
            None => return Err("a declarative file needs feature yaml".into()),
        };
        let reloads = Arc::new(Reloads::default());
        reloads.largest.store(u64::from(permits), Ordering::Relaxed);
        Ok(Self {
            sampler,
            clock,
            window_nanos,
            reloads,
        })
    }

    /// The decision `decide` takes with the sampler, telling this thread the window a
    /// kept root was counted in.
    pub(crate) fn stamped(
        &self,
        decide: impl FnOnce(&dyn ShouldSample) -> SamplingResult,
    ) -> SamplingResult {
        crate::load::stamped_by_clock(&self.clock, self.window_nanos, || match &self.sampler {
            Sampler::Rules(s) => decide(s),
            #[cfg(feature = "yaml")]
            Sampler::Declarative(s) => decide(s),
        })
    }

    /// Every span the sampler decided, summed over its rules (`None` for a
    /// declarative file's sampler, which counts nothing).
    pub(crate) fn decisions(&self) -> Option<DecisionStats> {
        self.rule_based().map(|s| s.stats().total())
    }

    /// The rule-based sampler (`None` for a declarative file's), for its metrics and
    /// reloads.
    pub(crate) fn rule_based(&self) -> Option<&RuleBasedSampler<RecordingClock>> {
        match &self.sampler {
            Sampler::Rules(s) => Some(s),
            #[cfg(feature = "yaml")]
            Sampler::Declarative(_) => None,
        }
    }

    /// `--watch`: follows `file`, printing one line per reload on stderr and counting
    /// it. The returned watcher follows the file until dropped.
    ///
    /// # Errors
    ///
    /// One line if the file cannot be watched.
    #[cfg(feature = "reload")]
    pub(crate) fn watch(
        &self,
        source: &RulesSource,
    ) -> Result<otel_rate_sampler::ConfigWatcher, String> {
        let reloads = Arc::clone(&self.reloads);
        let service = source.service.clone();
        let file = source.file.clone();
        let sampler = self
            .rule_based()
            .ok_or("--watch follows rule files, not a declarative file's sampler")?;
        let mut options = otel_rate_sampler::WatchOptions::new();
        if let Some(quiet) = source.watch_quiet {
            options = options.debounce(quiet);
        }
        let watcher = sampler
            .watch_with(&source.file, options, move |outcome| {
                // Relaxed: counters, read once the run is over.
                let n = reloads.applied.load(Ordering::Relaxed)
                    + reloads.failed.load(Ordering::Relaxed)
                    + 1;
                match outcome {
                    Ok(()) => {
                        reloads.applied.fetch_add(1, Ordering::Relaxed);
                        let line = match SamplingConfig::from_path(&file)
                            .map_err(|e| e.to_string())
                            .and_then(|c| bound(&c, &service))
                        {
                            Ok((limit, _)) => {
                                reloads
                                    .largest
                                    .fetch_max(u64::from(limit.permits()), Ordering::Relaxed);
                                format!(
                                    "limit now {} per {}",
                                    limit.permits(),
                                    humantime::format_duration(limit.window())
                                )
                            }
                            Err(e) => e,
                        };
                        eprintln!("demo: reload {n}: applied; {line}");
                    }
                    Err(e) => {
                        reloads.failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("demo: reload {n}: failed: {e}; the rules in force stay");
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        eprintln!("demo: watching {} for reloads", source.file.display());
        Ok(watcher)
    }
}
