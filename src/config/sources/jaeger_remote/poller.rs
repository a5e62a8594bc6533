//! [`JaegerRemote`] (where and how often to ask) and [`JaegerRemotePoller`] (the handle
//! of the thread that asks and reloads the sampler).

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use super::http::Client;
use super::response::{self, Strategy};
use crate::clock::Clock;
use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::log;
use crate::config::model::ServiceConfig;
use crate::config::runtime::rule_based::RuleBasedSampler;
use crate::tls_files::TlsFiles;

/// Where to poll a Jaeger sampling strategy from, and how often: the settings of
/// [`RuleBasedSampler::poll_jaeger_remote`].
///
/// The endpoint is an `http://` or `https://` URL with its path; the poller adds
/// `service=NAME` to its query:
///
/// * a Jaeger collector: `http://jaeger-collector:14268/api/sampling`;
/// * an agent, a Jaeger v2 `remote_sampling` extension or an OpenTelemetry Collector's
///   Jaeger receiver: `http://localhost:5778/sampling`.
///
/// `https://` is verified against Mozilla's roots, or the CA file given
/// ([`tls_ca_file`](Self::tls_ca_file)), with an optional client certificate
/// ([`tls_client_cert`](Self::tls_client_cert)); verification cannot be turned off, and
/// a failed handshake is a [`Tls`](ConfigErrorKind::Tls) error naming the cause, never
/// a retry over plain HTTP. The environment's `HTTP_PROXY` and `NO_PROXY` apply, except
/// to a loopback endpoint.
///
/// ```
/// use std::time::Duration;
/// use otel_rate_sampler::JaegerRemote;
///
/// let remote = JaegerRemote::new("http://localhost:5778/sampling")
///     .interval(Duration::from_secs(30))
///     .jitter(Duration::from_secs(5))
///     .timeout(Duration::from_secs(2));
/// assert_eq!(remote.endpoint(), "http://localhost:5778/sampling");
/// ```
///
/// # How a strategy becomes rules
///
/// | Jaeger field | becomes |
/// |---|---|
/// | `strategyType` `PROBABILISTIC` (or `0`, or absent) with `probabilisticSampling.samplingRate` p | the service's default policy: probability p |
/// | `strategyType` `RATE_LIMITING` (or `1`) with `rateLimitingSampling.maxTracesPerSecond` r | the default policy: r traces per second (a fixed window; fractional r honoured, 0 keeps nothing) |
/// | `operationSampling.perOperationStrategies[i]` | a rule named after `operation`, matching that span name exactly, in response order, with its `probabilisticSampling` or `rateLimitingSampling` |
/// | `operationSampling.defaultSamplingProbability` | the default policy for the other operations (it replaces the top-level strategy, as in Jaeger's clients) |
/// | `operationSampling.defaultUpperBoundTracesPerSecond` (> 0) | the service cap |
/// | `RATE_LIMITING` beside `operationSampling` | the service cap too (the smaller of the two when both are set) |
/// | `operationSampling.defaultLowerBoundTracesPerSecond` L (> 0) | a lower bound of L traces per second (a fixed window) beside each listed operation's `probabilisticSampling` and beside the default probability (the rule file's `at_least`): as Jaeger's guaranteed-throughput sampler, a trace the probability refuses is kept while the bound has permits left, and the probability's keeps spend them too. Each listed operation gets its own limiter; **unlike Jaeger**, which gives each operation it sees its own, the operations not listed share the default's one (at least L per second for all of them together, not each), so that the sampler's memory is bounded by the response, not by the span names seen. Operations with `rateLimitingSampling` get none |
///
/// The other top-level strategy (say `rateLimitingSampling` beside `PROBABILISTIC`) is
/// ignored, as in Jaeger's clients. Unknown fields are ignored (a server may be newer
/// than this crate, as protobuf's JSON mapping allows); values out of range, unknown strategy types, a strategy type without
/// its parameters, an operation with both or neither strategy, and an operation listed
/// twice are errors, and the poller keeps the strategy in force.
#[derive(Clone, Debug)]
pub struct JaegerRemote {
    endpoint: String,
    interval: Duration,
    jitter: Option<Duration>,
    timeout: Duration,
    tls: TlsFiles,
}

impl JaegerRemote {
    /// The default time between polls: 60 s, as Jaeger's clients.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
    /// The default limit on one whole request (connect, send, answer): 5 s.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The shortest interval, jitter aside: 1 ms.
    pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

    /// Polls `endpoint` every [`DEFAULT_INTERVAL`](Self::DEFAULT_INTERVAL) ± a tenth of
    /// it, each request limited to [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT).
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            interval: Self::DEFAULT_INTERVAL,
            jitter: None,
            timeout: Self::DEFAULT_TIMEOUT,
            tls: TlsFiles::default(),
        }
    }

    /// The time from the end of one poll to the start of the next (before jitter).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Each wait is the interval plus or minus up to `jitter` (uniformly), so a fleet of
    /// processes started together does not poll in step. Default: a tenth of the
    /// interval; at most the interval.
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = Some(jitter);
        self
    }

    /// The limit on one whole request, from connecting to the last byte of the answer:
    /// an endpoint that accepts and never answers costs at most this.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The PEM file of the CA(s) that signed an `https://` endpoint's certificate,
    /// trusted instead of Mozilla's roots.
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// A client certificate (PEM, the chain from the leaf) and its private key (PEM),
    /// for an `https://` endpoint that asks for one.
    pub fn tls_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self
    }

    /// The endpoint, as given.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn jitter_or_default(&self) -> Duration {
        self.jitter.unwrap_or(self.interval / 10)
    }

    fn check(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| {
            Err(ConfigErrorKind::InvalidLimit
                .error(&self.endpoint, message)
                .on_key(key))
        };
        if self.interval < Self::MIN_INTERVAL {
            return bad(
                "interval",
                format!(
                    "interval {:?} is shorter than 1ms; use a duration such as 60s",
                    self.interval
                ),
            );
        }
        if self.jitter_or_default() > self.interval {
            return bad(
                "jitter",
                format!(
                    "jitter {:?} is longer than the interval {:?}; use at most the interval",
                    self.jitter_or_default(),
                    self.interval
                ),
            );
        }
        if self.timeout.is_zero() {
            return bad(
                "timeout",
                "a timeout of 0 never lets a request finish; use a duration such as 5s".into(),
            );
        }
        Ok(())
    }
}

/// What a poll did to the sampler, when it worked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteUpdate {
    /// A new strategy was applied ([`RuleBasedSampler::reload`]).
    Applied,
    /// The endpoint answered the strategy already in force: nothing was reloaded.
    Unchanged,
}

/// Polls a Jaeger sampling endpoint on its own thread and applies each new strategy to
/// a [`RuleBasedSampler`]; dropping it stops the polling.
///
/// Made by [`RuleBasedSampler::poll_jaeger_remote`].
///
/// # Guarantees
///
/// * **Decisions never wait** for the poller: a strategy is applied by
///   [`RuleBasedSampler::reload`], which swaps the rules through an atomic pointer.
/// * **Limiter state is kept**: a rule (an operation, or `default` for the service's
///   own policy) whose limit is unchanged keeps its limiter, a changed one starts with
///   the old one's count (see [`reload`](RuleBasedSampler::reload)).
/// * **The last good strategy stays** while the endpoint is down, slow, answers an
///   error status or anything that is not a valid strategy; until the first good
///   answer, the sampler's own rules (its initial sampler) stay.
/// * **Nothing hangs**: each request has a time limit for the whole exchange
///   ([`JaegerRemote::timeout`]) and reads at most 1 MiB.
/// * **After drop returns, no strategy is applied any more.** The thread ends at once
///   if it is waiting, or when its request in flight ends (at most the timeout) if not;
///   drop does not wait for that. A callback already under way may still finish.
#[must_use = "dropping the poller stops the polling"]
pub struct JaegerRemotePoller {
    shared: Arc<Shared>,
    url: String,
}

/// The stop flag, and the condition the thread waits on between polls.
#[derive(Default)]
struct Shared {
    /// `true` once the handle is dropped. Held while a strategy is applied, so a drop
    /// either comes before the apply (and the strategy is not applied) or after it.
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        // A panic while holding it cannot leave the flag half-written.
        self.stopped.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl JaegerRemotePoller {
    /// The URL polled, with its `service` query.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for JaegerRemotePoller {
    fn drop(&mut self) {
        *self.shared.lock() = true;
        self.shared.wake.notify_all();
    }
}

impl fmt::Debug for JaegerRemotePoller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JaegerRemotePoller")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// [`RuleBasedSampler::poll_jaeger_remote`]: polls `remote` for `sampler`'s service on a
/// thread of its own, reloading `sampler` with each new strategy.
pub(crate) fn poll<C: Clock + Clone>(
    sampler: &RuleBasedSampler<C>,
    remote: JaegerRemote,
    on_update: impl Fn(Result<RemoteUpdate, ConfigError>) + Send + 'static,
) -> Result<JaegerRemotePoller, ConfigError> {
    remote.check()?;
    let refused = |message| {
        ConfigErrorKind::UnknownValue
            .error(&remote.endpoint, message)
            .on_key("endpoint")
    };
    // The endpoint before the TLS files: a plain URL with them is the mistake.
    let files = !remote.tls.is_empty();
    Client::check(&remote.endpoint, files).map_err(refused)?;
    let tls = (super::tls::config(&remote.tls)?, files);
    let client =
        Client::new(&remote.endpoint, sampler.service(), remote.timeout, tls).map_err(refused)?;
    let url = client.url().to_owned();
    let shared = Arc::new(Shared::default());
    let poll = Poll {
        sampler: sampler.clone(),
        client,
        interval: remote.interval,
        jitter: remote.jitter_or_default(),
        shared: Arc::clone(&shared),
        applied: None,
    };
    thread::Builder::new()
        .name("otel-rate-sampler-jaeger-remote".into())
        .spawn(move || poll.run(on_update))
        .map_err(|e| {
            ConfigErrorKind::Io
                .error(&url, format!("cannot start the polling thread: {e}"))
                .with_source(e)
        })?;
    Ok(JaegerRemotePoller { shared, url })
}

/// The polling thread's state.
struct Poll<C> {
    sampler: RuleBasedSampler<C>,
    client: Client,
    interval: Duration,
    jitter: Duration,
    shared: Arc<Shared>,
    /// The settings last applied, to tell an unchanged answer.
    applied: Option<ServiceConfig>,
}

impl<C: Clock + Clone> Poll<C> {
    fn run(mut self, on_update: impl Fn(Result<RemoteUpdate, ConfigError>)) {
        let seeds = RandomState::new();
        let shared = Arc::clone(&self.shared);
        for n in 0u64.. {
            let fetched = self
                .client
                .get()
                .and_then(|body| response::parse(&body, self.sampler.service(), self.client.url()));
            let outcome = {
                let stopped = shared.lock();
                if *stopped {
                    return;
                }
                self.apply(fetched)
            };
            self.log(&outcome);
            if catch_unwind(AssertUnwindSafe(|| on_update(outcome))).is_err() {
                log::warn(&format!(
                    "the Jaeger remote sampling callback panicked (polling {}); polling goes on",
                    self.client.url()
                ));
            }
            let wait = jittered(self.interval, self.jitter, seeds.hash_one(n));
            let stopped = shared.lock();
            let (stopped, _) = shared
                .wake
                .wait_timeout_while(stopped, wait, |stopped| !*stopped)
                .unwrap_or_else(PoisonError::into_inner);
            if *stopped {
                return;
            }
        }
    }

    fn apply(
        &mut self,
        fetched: Result<Strategy, ConfigError>,
    ) -> Result<RemoteUpdate, ConfigError> {
        // A failed poll counts as a failed reload, as an unreadable or bad file does
        // for `reload_from_path`.
        let strategy = fetched.inspect_err(|_| self.sampler.count_reload(false))?;
        if self.applied.as_ref() == Some(strategy.settings()) {
            return Ok(RemoteUpdate::Unchanged);
        }
        self.sampler.reload(&strategy.config)?;
        self.applied = Some(strategy.settings().clone());
        Ok(RemoteUpdate::Applied)
    }

    fn log(&self, outcome: &Result<RemoteUpdate, ConfigError>) {
        match outcome {
            Ok(RemoteUpdate::Applied) => log::info(&format!(
                "applied the sampling strategy from {}",
                self.client.url()
            )),
            Ok(RemoteUpdate::Unchanged) => {}
            Err(e) => log::warn(&format!("{e}; the sampling strategy in force stays")),
        }
    }
}

/// `interval` plus or minus up to `jitter`, chosen by `random` (uniform bits).
fn jittered(interval: Duration, jitter: Duration, random: u64) -> Duration {
    let span = jitter.as_nanos().saturating_mul(2).saturating_add(1);
    let offset = u128::from(random) % span;
    // At most interval + jitter ≤ 2 · interval; saturate rather than overflow anyway.
    let nanos = (interval.as_nanos() + offset).saturating_sub(jitter.as_nanos());
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_the_interval_plus_or_minus_the_jitter() {
        let (interval, jitter) = (Duration::from_secs(60), Duration::from_secs(6));
        assert_eq!(jittered(interval, jitter, 0), Duration::from_secs(54));
        let top = 2 * jitter.as_nanos() as u64;
        assert_eq!(jittered(interval, jitter, top), Duration::from_secs(66));
        let seeds = RandomState::new();
        let waits: Vec<Duration> = (0..1000)
            .map(|n| jittered(interval, jitter, seeds.hash_one(n)))
            .collect();
        assert!(waits
            .iter()
            .all(|w| (interval - jitter..=interval + jitter).contains(w)));
        // Spread, not constant: both halves of the range are used.
        assert!(waits.iter().any(|w| *w < interval) && waits.iter().any(|w| *w > interval));
        assert_eq!(
            jittered(interval, Duration::ZERO, u64::MAX),
            interval,
            "no jitter: the interval"
        );
    }

    #[test]
    fn settings_are_checked_before_any_request() {
        let sampler = crate::config::runtime::rule_based::RuleBasedSampler::new(
            &crate::config::model::SamplingConfig::from_toml_str(
                "[default]\nprobability = 1.0\n",
                "t",
            )
            .unwrap(),
            "svc",
        )
        .unwrap();
        let kind = |remote: JaegerRemote| {
            sampler
                .poll_jaeger_remote(remote, |_| {})
                .map(|_| ())
                .map_err(|e| (e.kind(), e.key().to_owned()))
        };
        let ok = || JaegerRemote::new("http://127.0.0.1:9/sampling");
        assert_eq!(
            kind(ok().interval(Duration::ZERO)),
            Err((ConfigErrorKind::InvalidLimit, "interval".into()))
        );
        assert_eq!(
            kind(
                ok().interval(Duration::from_secs(1))
                    .jitter(Duration::from_secs(2))
            ),
            Err((ConfigErrorKind::InvalidLimit, "jitter".into()))
        );
        assert_eq!(
            kind(ok().timeout(Duration::ZERO)),
            Err((ConfigErrorKind::InvalidLimit, "timeout".into()))
        );
        // TLS files need https:// (no silent plain text).
        assert_eq!(
            kind(ok().tls_ca_file("/etc/hostname")),
            Err((ConfigErrorKind::UnknownValue, "endpoint".into()))
        );
        assert_eq!(
            kind(JaegerRemote::new("ftp://collector:14268/api/sampling")),
            Err((ConfigErrorKind::UnknownValue, "endpoint".into()))
        );
    }
}
