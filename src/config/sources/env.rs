//! The environment variables this crate reads, and the values it accepts, as the
//! OpenTelemetry specification reads them: an empty value is the same as an unset one,
//! sampler names are case-insensitive.
//!
//! * Without any feature: `OTEL_TRACES_SAMPLER` = [`RATELIMITING`] or
//!   [`PARENTBASED_RATELIMITING`] with `OTEL_TRACES_SAMPLER_ARG`, read by
//!   [`RateLimitingSampler::from_env`](crate::RateLimitingSampler::from_env).
//! * Feature `config`: also a rule file ([`OTEL_RATE_SAMPLER_CONFIG`]) and a Redis for
//!   its fleet-scoped limits ([`OTEL_RATE_SAMPLER_REDIS`], and for TLS
//!   [`OTEL_RATE_SAMPLER_REDIS_CA`], [`OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT`],
//!   [`OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY`]), read by
//!   [`RuleBasedSampler::from_env`], which takes the service name from
//!   [`OTEL_SERVICE_NAME`] (then `service.name` in [`OTEL_RESOURCE_ATTRIBUTES`]) when the
//!   application gives none.
//!
//! Each entry point has a strict form (`from_env`, a typed error), a lenient one
//! (`from_env_lossy`, a warning and a fallback) on the same code path, and `from_lookup`
//! forms reading variables through a function.

use crate::clock::MonotonicClock;
use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::model::SamplingConfig;
use crate::config::runtime::rule_based::RuleBasedSampler;
use crate::config::vars::{env_error, from_env_error, resolve_service, FleetEnv};
pub use crate::config::vars::{
    OTEL_CONFIG_FILE, OTEL_RATE_SAMPLER_CONFIG, OTEL_RATE_SAMPLER_REDIS,
    OTEL_RATE_SAMPLER_REDIS_CA, OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT,
    OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY,
};
pub use crate::sampler::env::*;
use crate::sampler::env::{chosen, default_limit, rate_limit, var};
use crate::sampler::RemoteParents;

/// What [`RuleBasedSampler::from_env_lossy`] does with a problem: a rate-limited warning.
pub(crate) fn log_fallback(e: &ConfigError) {
    crate::config::log::warn(&format!(
        "{e}; falling back to {DEFAULT_TRACES_PER_SECOND} traces per second"
    ));
}

/// [`RuleBasedSampler::from_lookup`]: the sampler the variables `lookup` reads ask for.
pub(crate) fn from_lookup(
    service: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<RuleBasedSampler>, ConfigError> {
    let ours = chosen(lookup);
    if let Some(path) = var(lookup, OTEL_RATE_SAMPLER_CONFIG) {
        if let (None, Some(other)) = (ours, var(lookup, OTEL_TRACES_SAMPLER)) {
            return Err(env_error(
                ConfigErrorKind::ConflictingKeys,
                OTEL_TRACES_SAMPLER,
                format!("{OTEL_TRACES_SAMPLER}={other:?} asks for another sampler beside {OTEL_RATE_SAMPLER_CONFIG}; set it to {PARENTBASED_RATELIMITING} (or unset it) to use the file, or unset {OTEL_RATE_SAMPLER_CONFIG}"),
            ));
        }
        if ours.is_some() {
            if let Some(arg) = var(lookup, OTEL_TRACES_SAMPLER_ARG) {
                return Err(env_error(
                    ConfigErrorKind::ConflictingKeys,
                    OTEL_TRACES_SAMPLER_ARG,
                    format!("{OTEL_TRACES_SAMPLER_ARG}={arg:?} is set beside {OTEL_RATE_SAMPLER_CONFIG}; the file's limits apply, so unset one of them"),
                ));
            }
        }
        let fleet = FleetEnv::read(lookup)?;
        let config = SamplingConfig::from_path_with(path.as_ref(), fleet.urls.as_deref())?
            .with_fleet_env(&fleet);
        let service = resolve_service(service, lookup)?;
        return RuleBasedSampler::from_env_config(&config, &service, fleet).map(Some);
    }
    let Some(remote_parents) = ours else {
        return Ok(None);
    };
    let limit = rate_limit(lookup).map_err(|e| from_env_error(ConfigErrorKind::InvalidLimit, e))?;
    let config = SamplingConfig::single_limit(limit, remote_parents, OTEL_TRACES_SAMPLER_ARG);
    RuleBasedSampler::new(&config, &resolve_service(service, lookup)?).map(Some)
}

/// [`RuleBasedSampler::from_lookup_lossy`]: [`from_lookup`], each problem reported to
/// `warn` and a fallback in its place.
pub(crate) fn from_lookup_lossy(
    service: &str,
    lookup: impl Fn(&str) -> Option<String>,
    mut warn: impl FnMut(&ConfigError),
) -> Option<RuleBasedSampler> {
    match from_lookup(service, &lookup) {
        Ok(sampler) => sampler,
        Err(e) => {
            warn(&e);
            let remote_parents = chosen(&lookup).unwrap_or(RemoteParents::Follow);
            let config = SamplingConfig::single_limit(default_limit(), remote_parents, "fallback");
            let service = resolve_service(service, &lookup).unwrap_or_else(|e| {
                warn(&e);
                UNKNOWN_SERVICE.to_owned()
            });
            RuleBasedSampler::<MonotonicClock>::new(&config, &service).ok()
        }
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
