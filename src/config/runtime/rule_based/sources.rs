//! [`RuleBasedSampler`]'s constructors and attachments that reach where rules come
//! from at run time (`config/sources/`): the environment, a watched file (feature
//! `reload`) and a Jaeger sampling endpoint (feature `jaeger-remote`). Each method is
//! the public face of its source, which does the work; the sources build and reload
//! the sampler through the rest of its API, so this file stands after them.

#[cfg(feature = "reload")]
use std::path::Path;

use super::RuleBasedSampler;
#[cfg(any(feature = "reload", feature = "jaeger-remote"))]
use crate::clock::Clock;
use crate::config::error::ConfigError;
use crate::config::sources::env;
#[cfg(feature = "jaeger-remote")]
use crate::config::sources::jaeger_remote::{self, JaegerRemote, JaegerRemotePoller, RemoteUpdate};
#[cfg(feature = "reload")]
use crate::config::sources::watch::{self, ConfigWatcher, WatchOptions};

/// The environment: [`env`](mod@crate::env).
impl RuleBasedSampler {
    /// The sampler the process environment asks for, for `service` (empty: the service
    /// [`OTEL_SERVICE_NAME`](crate::env::OTEL_SERVICE_NAME) names, else `service.name` in [`OTEL_RESOURCE_ATTRIBUTES`](crate::env::OTEL_RESOURCE_ATTRIBUTES),
    /// else [`UNKNOWN_SERVICE`](crate::env::UNKNOWN_SERVICE)). Empty variables count as unset.
    ///
    /// * `OTEL_RATE_SAMPLER_CONFIG=FILE`: the rules of `FILE` for the service; its
    ///   fleet-scoped limits use [`OTEL_RATE_SAMPLER_REDIS`](crate::env::OTEL_RATE_SAMPLER_REDIS) if set, else the file's
    ///   `[fleet] redis`, and for a `rediss://` Redis [`OTEL_RATE_SAMPLER_REDIS_CA`](crate::env::OTEL_RATE_SAMPLER_REDIS_CA),
    ///   [`OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT`](crate::env::OTEL_RATE_SAMPLER_REDIS_CLIENT_CERT) and [`OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY`](crate::env::OTEL_RATE_SAMPLER_REDIS_CLIENT_KEY)
    ///   where set, else the file's `tls_*` keys (reloads keep all four).
    /// * else `OTEL_TRACES_SAMPLER=ratelimiting` or `parentbased_ratelimiting` (any
    ///   case), with `OTEL_TRACES_SAMPLER_ARG` = traces per second (fractional allowed,
    ///   default [`DEFAULT_TRACES_PER_SECOND`](crate::env::DEFAULT_TRACES_PER_SECOND)): one limit for every root.
    /// * else `Ok(None)`: the environment does not choose this crate's sampler (leave
    ///   the SDK's own choice in place).
    ///
    /// [`OTEL_CONFIG_FILE`](crate::env::OTEL_CONFIG_FILE) (an OpenTelemetry declarative configuration file, whose
    /// sampler may wrap this one in `parent_based` and other samplers) is read by
    /// `DeclarativeSampler::from_env` (feature `yaml`), not here; an application that
    /// supports both asks it first.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for a bad file, a bad `OTEL_TRACES_SAMPLER_ARG`, both a file
    /// and a rate set at once, a file beside an `OTEL_TRACES_SAMPLER` that names another
    /// sampler (`always_off`, say: which should win is not ours to guess), an `OTEL_RESOURCE_ATTRIBUTES` that does not decode (when
    /// it is read), or a fleet-scoped limit with no Redis URL (neither
    /// [`OTEL_RATE_SAMPLER_REDIS`](crate::env::OTEL_RATE_SAMPLER_REDIS) nor the file's `[fleet] redis`).
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
        env::from_lookup(service, &lookup)
    }

    /// Like [`from_env`](Self::from_env), but never fails: each problem is logged as a
    /// `tracing` warning (target `otel_rate_sampler`; the same message at most once a
    /// minute) and the sampler falls back (a bad file or rate to
    /// [`DEFAULT_TRACES_PER_SECOND`](crate::env::DEFAULT_TRACES_PER_SECOND), following remote parents unless
    /// `OTEL_TRACES_SAMPLER` is [`RATELIMITING`](crate::env::RATELIMITING); a service name that cannot be read
    /// to [`UNKNOWN_SERVICE`](crate::env::UNKNOWN_SERVICE)).
    pub fn from_env_lossy(service: &str) -> Option<Self> {
        Self::from_lookup_lossy(service, |name| std::env::var(name).ok(), env::log_fallback)
    }

    /// Like [`from_env_lossy`](Self::from_env_lossy), reading variables through
    /// `lookup` and reporting each problem to `warn` instead of the log.
    pub fn from_lookup_lossy(
        service: &str,
        lookup: impl Fn(&str) -> Option<String>,
        warn: impl FnMut(&ConfigError),
    ) -> Option<Self> {
        env::from_lookup_lossy(service, lookup, warn)
    }
}

/// A watched rule file: [`ConfigWatcher`].
#[cfg(feature = "reload")]
impl<C: Clock + Clone + Send + Sync + 'static> RuleBasedSampler<C> {
    /// [`watch_with`](Self::watch_with) the default [`WatchOptions`].
    ///
    /// # Errors
    ///
    /// As [`watch_with`](Self::watch_with).
    pub fn watch(
        &self,
        path: impl AsRef<Path>,
        on_reload: impl Fn(Result<(), ConfigError>) + Send + 'static,
    ) -> Result<ConfigWatcher, ConfigError> {
        self.watch_with(path, WatchOptions::new(), on_reload)
    }

    /// Watches `path` and [`reload`](RuleBasedSampler::reload)s this sampler (and so
    /// every clone of it) each time what it names changes, on a thread of its own; see
    /// [`ConfigWatcher`] for what is followed, applied and reported.
    ///
    /// `on_reload` is told the outcome of every reload and every watcher error. Each
    /// outcome is also logged through `tracing` (target `otel_rate_sampler`: info for a
    /// reload, a warning for a failure; the same message at most once a minute), and
    /// counted in [`stats`](RuleBasedSampler::stats). Decisions never wait for a
    /// reload: they read the rule set through an atomic pointer swapped once the new
    /// rules are built.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] of kind [`Io`](crate::ConfigErrorKind::Io) if `path` cannot be
    /// resolved (a symlink loop, an unreadable link) or the thread cannot start. A
    /// notification backend that cannot start is not an error here: it is reported to
    /// `on_reload` and the file is followed by polling.
    pub fn watch_with(
        &self,
        path: impl AsRef<Path>,
        options: WatchOptions,
        on_reload: impl Fn(Result<(), ConfigError>) + Send + 'static,
    ) -> Result<ConfigWatcher, ConfigError> {
        watch::watch(self, path.as_ref(), options, on_reload)
    }
}

/// A Jaeger sampling endpoint: [`JaegerRemotePoller`].
#[cfg(feature = "jaeger-remote")]
impl<C: Clock + Clone> RuleBasedSampler<C> {
    /// Polls a Jaeger sampling endpoint for this sampler's service and applies each new
    /// strategy through [`reload`](RuleBasedSampler::reload), on a thread of its own:
    /// the first poll at once, then every [`interval`](JaegerRemote::interval) ±
    /// [`jitter`](JaegerRemote::jitter).
    ///
    /// The sampler's rules until the first good answer are its own: build it from the
    /// configuration to use meanwhile (Jaeger's clients start with a probability of
    /// 0.001). How each field of Jaeger's response becomes rules (per-operation
    /// strategies become rules named after the operation; the upper bound, a cap; the
    /// lower bound, an `at_least` beside each probability) is on [`JaegerRemote`].
    ///
    /// `on_update` is told the outcome of every poll: `Ok(`[`Applied`](RemoteUpdate::Applied)`)`,
    /// `Ok(`[`Unchanged`](RemoteUpdate::Unchanged)`)`, or a [`ConfigError`] naming the URL
    /// ([`Io`](crate::ConfigErrorKind::Io): no connection, no answer within the timeout, an
    /// HTTP error status; [`Syntax`](crate::ConfigErrorKind::Syntax) and the other kinds: an
    /// answer that is not a valid strategy), in which case the strategy in force stays.
    /// Each outcome but `Unchanged` is also logged through `tracing` (target
    /// `otel_rate_sampler`: info for an applied strategy, a warning for a failure; the
    /// same message at most once a minute), and counted in
    /// [`stats`](RuleBasedSampler::stats)' reloads (an applied strategy as a reload that
    /// succeeded, a failed poll as one that failed; `Unchanged` not at all). A panic in
    /// `on_update` is caught and logged; polling goes on.
    ///
    /// ```no_run
    /// use otel_rate_sampler::{JaegerRemote, RuleBasedSampler, SamplingConfig};
    ///
    /// let initial = SamplingConfig::from_toml_str("[default]\nprobability = 0.001\n", "initial")?;
    /// let sampler = RuleBasedSampler::new(&initial, "checkout")?;
    /// let _poller = sampler.poll_jaeger_remote(
    ///     JaegerRemote::new("http://jaeger-collector:14268/api/sampling"),
    ///     |outcome| if let Err(e) = outcome { eprintln!("sampling strategy: {e}") },
    /// )?;
    /// # Ok::<(), otel_rate_sampler::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the endpoint, before any request: of kind
    /// [`UnknownValue`](crate::ConfigErrorKind::UnknownValue) for an endpoint that is not an
    /// `http://` or `https://` URL with a host (or `http://` with TLS files), of kind
    /// [`InvalidLimit`](crate::ConfigErrorKind::InvalidLimit) for an interval under 1 ms, a
    /// jitter over the interval or a zero timeout, of kind [`Io`](crate::ConfigErrorKind::Io)
    /// if the thread cannot be started or a TLS file read, of kind
    /// [`Tls`](crate::ConfigErrorKind::Tls) for a TLS file with no PEM certificate (or key).
    pub fn poll_jaeger_remote(
        &self,
        remote: JaegerRemote,
        on_update: impl Fn(Result<RemoteUpdate, ConfigError>) + Send + 'static,
    ) -> Result<JaegerRemotePoller, ConfigError> {
        jaeger_remote::poll(self, remote, on_update)
    }
}
