//! The environment variables [`RuleBasedSampler::from_env`] reads, and the values it
//! accepts: a vendor value for `OTEL_TRACES_SAMPLER` and a variable naming a rule file,
//! with strict and lenient entry points.

use super::error::{ConfigError, ConfigErrorKind, Pos};
use super::model::{FleetSettings, SamplingConfig, ServiceConfig};
use super::rule_based::RuleBasedSampler;
use super::validate;
use crate::clock::MonotonicClock;
use crate::sampler::RemoteParents;

/// The standard variable choosing the sampler.
pub const OTEL_TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
/// The standard variable holding the sampler's argument: here, traces per second.
pub const OTEL_TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
/// This crate's variable naming a rule file (TOML, or Jaeger JSON if it ends in `.json`).
pub const OTEL_RATE_SAMPLER_CONFIG: &str = "OTEL_RATE_SAMPLER_CONFIG";
/// This crate's variable naming the Redis server that fleet-scoped limits
/// (`scope = "fleet"` in the rule file) are shared through: `redis://host:6379`, or the
/// comma-separated seed nodes of a Redis Cluster. When set, it replaces the rule file's
/// `[fleet] redis` (the file's other `[fleet]` settings stay), so one file serves every
/// environment. Read by [`RuleBasedSampler::from_env`] only; a fleet-scoped limit with
/// no URL in the file or here is a [`ConfigError`].
pub const OTEL_RATE_SAMPLER_REDIS: &str = "OTEL_RATE_SAMPLER_REDIS";
/// The `OTEL_TRACES_SAMPLER` value for a rate limit that also caps sampled remote
/// parents (`remote_parents = "cap"`): every trace this process exports counts.
pub const RATELIMITING: &str = "ratelimiting";
/// The `OTEL_TRACES_SAMPLER` value for a rate limit on the traces that start here;
/// remote parents are followed.
pub const PARENTBASED_RATELIMITING: &str = "parentbased_ratelimiting";
/// The traces per second when `OTEL_TRACES_SAMPLER_ARG` is unset (or, leniently, bad).
pub const DEFAULT_TRACES_PER_SECOND: f64 = 100.0;

/// What [`RuleBasedSampler::from_env_lossy`] does with a problem: a rate-limited warning.
fn log_fallback(e: &ConfigError) {
    super::log::warn(&format!(
        "{e}; falling back to {DEFAULT_TRACES_PER_SECOND} traces per second"
    ));
}

impl RuleBasedSampler {
    /// The sampler the process environment asks for, for `service`.
    ///
    /// * `OTEL_RATE_SAMPLER_CONFIG=FILE`: the rules of `FILE` for `service`; its
    ///   fleet-scoped limits use [`OTEL_RATE_SAMPLER_REDIS`] if set, else the file's
    ///   `[fleet] redis`.
    /// * else `OTEL_TRACES_SAMPLER=ratelimiting` or `parentbased_ratelimiting`, with
    ///   `OTEL_TRACES_SAMPLER_ARG` = traces per second (fractional allowed, default
    ///   [`DEFAULT_TRACES_PER_SECOND`]): one limit for every root.
    /// * else `Ok(None)`: the environment does not choose this crate's sampler (leave
    ///   the SDK's own choice in place).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for a bad file, a bad `OTEL_TRACES_SAMPLER_ARG`, both a file
    /// and a rate set at once, or a fleet-scoped limit with no Redis URL (neither
    /// [`OTEL_RATE_SAMPLER_REDIS`] nor the file's `[fleet] redis`).
    pub fn from_env(service: &str) -> Result<Option<Self>, ConfigError> {
        Self::from_lookup(service, |name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup` (for
    /// tests, or another source of settings).
    ///
    /// ```
    /// use otel_rate_sampler::env::{OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG};
    /// use otel_rate_sampler::RuleBasedSampler;
    ///
    /// let env = |name: &str| match name {
    ///     OTEL_TRACES_SAMPLER => Some("parentbased_ratelimiting".to_owned()),
    ///     OTEL_TRACES_SAMPLER_ARG => Some("0.5".to_owned()),
    ///     _ => None,
    /// };
    /// assert!(RuleBasedSampler::from_lookup("checkout", env)?.is_some());
    /// # Ok::<(), otel_rate_sampler::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env).
    pub fn from_lookup(
        service: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        let sampler = lookup(OTEL_TRACES_SAMPLER);
        let ours = sampler.as_deref().map(str::trim).and_then(|s| match s {
            RATELIMITING => Some(RemoteParents::Cap),
            PARENTBASED_RATELIMITING => Some(RemoteParents::Follow),
            _ => None,
        });
        if let Some(path) = lookup(OTEL_RATE_SAMPLER_CONFIG) {
            if ours.is_some() {
                if let Some(arg) = lookup(OTEL_TRACES_SAMPLER_ARG) {
                    return Err(env_error(
                        ConfigErrorKind::ConflictingKeys,
                        OTEL_TRACES_SAMPLER_ARG,
                        format!("{OTEL_TRACES_SAMPLER_ARG}={arg:?} is set beside {OTEL_RATE_SAMPLER_CONFIG}; the file's limits apply, so unset one of them"),
                    ));
                }
            }
            let redis: Option<Vec<String>> = lookup(OTEL_RATE_SAMPLER_REDIS)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|u| !u.is_empty())
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .filter(|urls| !urls.is_empty());
            let config = SamplingConfig::from_path_with(path.trim().as_ref(), redis.as_deref())?;
            return Self::from_env_config(&config, service, redis).map(Some);
        }
        let Some(remote_parents) = ours else {
            return Ok(None);
        };
        let rate = match lookup(OTEL_TRACES_SAMPLER_ARG) {
            Some(arg) => parse_rate(&arg)?,
            None => DEFAULT_TRACES_PER_SECOND,
        };
        let config = SamplingConfig::single_rate(rate, remote_parents, OTEL_TRACES_SAMPLER_ARG)?;
        Self::new(&config, service).map(Some)
    }

    /// Like [`from_env`](Self::from_env), but never fails: each problem is logged as a
    /// `tracing` warning (target `otel_rate_sampler`; the same message at most once a
    /// minute) and the sampler falls back (a bad file or rate to
    /// [`DEFAULT_TRACES_PER_SECOND`], following remote parents).
    pub fn from_env_lossy(service: &str) -> Option<Self> {
        Self::from_lookup_lossy(service, |name| std::env::var(name).ok(), log_fallback)
    }

    /// Like [`from_env_lossy`](Self::from_env_lossy), reading variables through
    /// `lookup` and reporting each problem to `warn` instead of the log.
    pub fn from_lookup_lossy(
        service: &str,
        lookup: impl Fn(&str) -> Option<String>,
        mut warn: impl FnMut(&ConfigError),
    ) -> Option<Self> {
        match Self::from_lookup(service, &lookup) {
            Ok(sampler) => sampler,
            Err(e) => {
                warn(&e);
                let remote_parents = match lookup(OTEL_TRACES_SAMPLER).as_deref().map(str::trim) {
                    Some(RATELIMITING) => RemoteParents::Cap,
                    _ => RemoteParents::Follow,
                };
                let config = SamplingConfig::single_rate(
                    DEFAULT_TRACES_PER_SECOND,
                    remote_parents,
                    "fallback",
                )
                .ok()?;
                RuleBasedSampler::<MonotonicClock>::new(&config, service).ok()
            }
        }
    }
}

fn env_error(kind: ConfigErrorKind, variable: &str, message: String) -> ConfigError {
    ConfigError::new(kind, "environment", Pos::default(), variable, message)
}

fn parse_rate(arg: &str) -> Result<f64, ConfigError> {
    let rate: f64 = arg.trim().parse().map_err(|_| {
        env_error(
            ConfigErrorKind::InvalidLimit,
            OTEL_TRACES_SAMPLER_ARG,
            format!("{arg:?} is not a number of traces per second; use a positive number such as 100 or 0.5"),
        )
    })?;
    validate::rate(rate)
        .map_err(|e| e.at("environment", Pos::default(), OTEL_TRACES_SAMPLER_ARG))?;
    Ok(rate)
}

impl SamplingConfig {
    /// One limit of `rate` traces per second for every service.
    pub(crate) fn single_rate(
        rate: f64,
        remote_parents: RemoteParents,
        source: &str,
    ) -> Result<Self, ConfigError> {
        let limit = validate::rate(rate).map_err(|e| e.at(source, Pos::default(), ""))?;
        let default = ServiceConfig::single_rate(limit, remote_parents);
        Ok(Self::new(
            source,
            default,
            Vec::new(),
            FleetSettings::default(),
        ))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt as _};
    use tracing_subscriber::Layer;

    use super::*;

    /// Every event: (level, target, message).
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<(tracing::Level, String, String)>>>);

    struct Message(String);

    impl Visit for Message {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0 = format!("{value:?}");
            }
        }
    }

    impl<S: tracing::Subscriber> Layer<S> for Capture {
        fn on_event(&self, event: &tracing::Event<'_>, _cx: Context<'_, S>) {
            let mut message = Message(String::new());
            event.record(&mut message);
            let meta = event.metadata();
            self.0
                .lock()
                .unwrap()
                .push((*meta.level(), meta.target().to_owned(), message.0));
        }
    }

    #[test]
    fn the_lossy_fallback_is_a_tracing_warning_logged_once_per_interval() {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        let error = SamplingConfig::from_toml_str("[default]\nrate = -1.0\n", "lossy-log.toml")
            .unwrap_err();
        tracing::subscriber::with_default(subscriber, || {
            log_fallback(&error);
            log_fallback(&error);
        });
        let events = capture.0.lock().unwrap().clone();
        assert_eq!(events.len(), 1, "{events:?}");
        let (level, target, message) = &events[0];
        assert_eq!(*level, tracing::Level::WARN);
        assert_eq!(target, "otel_rate_sampler");
        assert!(
            message.contains("lossy-log.toml") && message.contains("falling back"),
            "{message}"
        );
    }
}
