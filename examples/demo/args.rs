//! The command line (clap derive), checked once into a [`Config`].
//!
//! Every mistake is a usage error: one line on stderr and exit code 2, the same for
//! clap's own errors (an unknown flag, a flag without its value) and for the demo's
//! checks (a zero limit, a run of years, more windows than the demo reports).

use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::error::ErrorKind;
use clap::{CommandFactory as _, Parser, ValueEnum};
use otel_rate_sampler::{Algorithm, Limit, LimitError};

use crate::support::{OtlpProtocol, Target};

/// The longest run the demo accepts.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// The most windows a run may touch: each gets a line on stderr and a key in the summary.
const MAX_WINDOWS: u64 = 10_000;
/// The highest `--rate` (traces per second in total); beyond it, leave `--rate` out.
const MAX_RATE: f64 = 1e9;

/// Offers traces (a root span and 3 children) from several threads to an OpenTelemetry
/// tracer provider sampled by the rate-limiting sampler, and reports per window how many
/// were offered and kept. Per-window lines go to stderr, one JSON summary line to stdout.
///
/// With --otlp (or OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT) kept spans are also exported;
/// the run then ends within its duration plus OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT
/// (milliseconds, default 10000), whatever the collector does. Built with --features
/// metrics, the sampler's metrics go to the same endpoint, every
/// OTEL_METRIC_EXPORT_INTERVAL (milliseconds, default 60000) and at the end.
#[derive(Debug, Parser)]
#[command(name = "demo", bin_name = "cargo run --release --example demo --")]
struct Args {
    /// The limiter (local to this process; not with --redis or --config).
    #[arg(long, value_name = "A", default_value = "fixed", conflicts_with_all = ["redis", "config"],
          value_parser = PossibleValuesParser::new(Algorithm::ALL.map(Algorithm::name))
              .try_map(|name| name.parse::<Algorithm>()))]
    algorithm: Algorithm,

    /// Every permit of a window available from its start (front-loaded), instead of
    /// the default pacing (a tenth of the window's permits per tenth, cumulatively).
    /// The fleet limit (--redis) is never paced.
    #[arg(long, conflicts_with_all = ["redis", "config"])]
    unpaced: bool,

    /// Sample with the adaptive probability sampler instead: a consistent probability
    /// (OTEP 235, `th` on kept spans) set each window to about N / offered, with the
    /// limiter (--algorithm, or --redis) as its hard cap.
    #[arg(long, conflicts_with = "config")]
    adaptive: bool,

    /// Traces kept per window (permits; not with --config).
    #[arg(long, value_name = "N", default_value_t = 100, conflicts_with = "config",
          value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,

    /// Window length, e.g. 1s or 200ms (not with --config).
    #[arg(long, value_name = "D", default_value = "1s", value_parser = duration,
          conflicts_with = "config")]
    window: Duration,

    /// Generating threads.
    #[arg(long, value_name = "T", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: u16,

    /// Length of the run, e.g. 5s or 1m (at most 24h and 10000 windows).
    #[arg(long, value_name = "D", default_value = "5s", value_parser = run_duration)]
    duration: Duration,

    /// Traces offered per second, in total [default: as fast as possible].
    #[arg(long, value_name = "R", value_parser = rate)]
    rate: Option<f64>,

    /// How spans are made: with the SDK API, or with tracing spans through
    /// tracing-opentelemetry inside `SkipDropped`, which skips the OpenTelemetry layer's
    /// work below a dropped root (needs --features tracing).
    #[arg(long, value_name = "V", value_enum, default_value_t = Via::Sdk)]
    via: Via,

    /// With --via tracing: the OpenTelemetry layer alone, without `SkipDropped` (every
    /// span of a dropped trace built as before), for comparison.
    #[arg(long)]
    plain_layer: bool,

    /// Also export over OTLP to URL [default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
    /// OTEL_EXPORTER_OTLP_ENDPOINT when set; no export otherwise].
    #[arg(long, value_name = "URL")]
    otlp: Option<String>,

    /// grpc or http (HTTP/protobuf) [default: OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL, else
    /// grpc].
    #[arg(long, value_name = "P", value_parser = OtlpProtocol::parse)]
    otlp_protocol: Option<OtlpProtocol>,

    /// Fleet mode: --limit per --window is the fleet's, shared through the Redis at URL
    /// (redis://HOST:PORT) with every demo using the same Redis and --redis-key. Needs
    /// the demo built with --features redis.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,

    /// The fleet's key in Redis (fleet mode).
    #[arg(long, value_name = "KEY", default_value = "demo", requires = "redis")]
    redis_key: String,

    /// The PEM file of the CA that signed the Redis server's certificate, for a
    /// rediss:// --redis (default: the platform's roots).
    #[arg(long, value_name = "FILE", requires = "redis")]
    redis_ca: Option<PathBuf>,

    /// A client certificate (PEM) for a rediss:// --redis that asks for one.
    #[arg(long, value_name = "FILE", requires_all = ["redis", "redis_client_key"])]
    redis_client_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "redis_client_cert")]
    redis_client_key: Option<PathBuf>,

    /// Sample with the rules of --service in this rule file (TOML, Jaeger JSON, YAML)
    /// instead of --algorithm, --limit and --window; the windows reported are those of
    /// the service's cap, else of its default limit. Needs --features config. With
    /// --features yaml,composable, an OpenTelemetry declarative file (1.1
    /// `composite/development`, `${VAR}` substituted) is applied whole; its windows are
    /// those of its first composite rate limiter, else 1s with no limit.
    #[arg(long, value_name = "FILE", conflicts_with = "redis")]
    config: Option<PathBuf>,

    /// The service whose rules --config applies (also the spans' service.name).
    #[arg(long, value_name = "NAME", default_value = crate::SERVICE, requires = "config")]
    service: String,

    /// Give each root an `http.route` drawn from K routes (`/route/0` ...); the summary
    /// then adds `per_key` (offered, kept and adjusted per route) and `keys_starved`.
    /// With --via sdk.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    keys: Option<u32>,

    /// Draw the routes Zipf with exponent S (0: uniform).
    #[arg(long, value_name = "S", default_value_t = 0.0, requires = "keys", value_parser = skew)]
    skew: f64,

    /// Keep fair shares of --limit per value of this attribute (repeat for several;
    /// e.g. http.route), as `fair_by` does (not with --config, --redis or --adaptive).
    #[arg(long, value_name = "ATTR", conflicts_with_all = ["config", "redis", "adaptive"])]
    fair_by: Vec<String>,

    /// With --fair-by: the most keys told apart; the rest share one overflow key.
    #[arg(long, value_name = "N", default_value_t = otel_rate_sampler::DEFAULT_MAX_KEYS)]
    max_keys: usize,

    /// Follow --config as it changes (saves, symlink swaps such as a Kubernetes
    /// ConfigMap update): one line per reload on stderr, counted in the summary's
    /// `reloads`. Needs --features reload.
    #[arg(long, requires = "config")]
    watch: bool,

    /// With --watch: the quiet period a save must stay unchanged for before it is
    /// applied (the watcher's default, 200 ms, when not given).
    #[arg(long, value_name = "DURATION", requires = "watch", value_parser = humantime::parse_duration)]
    watch_quiet: Option<Duration>,
}

/// How the demo makes its spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Via {
    /// The OpenTelemetry SDK API.
    Sdk,
    /// `tracing` spans with a few fields, through `tracing-opentelemetry`.
    Tracing,
}

/// The checked command line.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) algorithm: Algorithm,
    /// `--adaptive`: the adaptive probability sampler, the limiter as its cap.
    pub(crate) adaptive: bool,
    pub(crate) limit: Limit,
    pub(crate) threads: usize,
    pub(crate) duration: Duration,
    /// Offered traces per second in total; `None` for as fast as possible.
    pub(crate) rate: Option<f64>,
    pub(crate) via: Via,
    /// `--plain-layer`: `--via tracing` without `SkipDropped`.
    pub(crate) plain_layer: bool,
    /// Where to export over OTLP, if anywhere.
    pub(crate) otlp: Option<Target>,
    /// Fleet mode: the Redis the limit is shared through.
    pub(crate) fleet: Option<FleetTarget>,
    /// `--config`: the rule file and service, whose cap (or default limit) is `limit`.
    #[cfg(feature = "config")]
    pub(crate) rules: Option<crate::rules::RulesSource>,
    /// `--keys K --skew S`.
    pub(crate) keys: Option<(u32, f64)>,
    /// `--fair-by ATTR...`, with `--max-keys` (empty: no fair shares).
    pub(crate) fair_by: Vec<String>,
    pub(crate) max_keys: usize,
}

/// `--redis URL --redis-key KEY`, and the TLS files of a `rediss://` URL.
#[derive(Debug, Clone)]
pub(crate) struct FleetTarget {
    pub(crate) url: String,
    pub(crate) key: String,
    // Read by the fleet's limiter, built with the redis feature only.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) ca: Option<PathBuf>,
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) client: Option<(PathBuf, PathBuf)>,
}

impl FleetTarget {
    /// The URL without its password, for messages.
    pub(crate) fn shown_url(&self) -> String {
        match self.url.split_once("://") {
            Some((scheme, rest)) if rest.contains('@') => {
                let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
                format!("{scheme}://***@{host}")
            }
            _ => self.url.clone(),
        }
    }
}

impl Config {
    /// The command line of this process, or the exit code of `--help` (0) or of a usage
    /// error (2, after one line on stderr).
    pub(crate) fn from_args() -> Result<Self, ExitCode> {
        Args::try_parse()
            .and_then(Args::check)
            .map_err(|e| match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    ExitCode::SUCCESS
                }
                _ => {
                    eprintln!("demo: {} (see --help)", one_line(&e));
                    ExitCode::from(2)
                }
            })
    }
}

/// Clap's message without its usage block and hints, on one line.
fn one_line(e: &clap::Error) -> String {
    e.render()
        .to_string()
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl Args {
    /// The checks that span several flags, as clap errors so they print the same way.
    fn check(self) -> Result<Config, clap::Error> {
        let invalid = |msg: String| Args::command().error(ErrorKind::ValueValidation, msg);
        let (limit, algorithm, rules) = match &self.config {
            None => {
                let limit = Limit::per_window(self.limit, self.window).map_err(|e| match e {
                    LimitError::ZeroPermits | LimitError::TooManyPermits { .. } => {
                        invalid(format!("--limit: {e}"))
                    }
                    _ => invalid(format!("--window: {e}")),
                })?;
                window_above_the_clock(self.window).map_err(invalid)?;
                (limit, self.algorithm, None)
            }
            Some(file) => {
                let (source, limit, algorithm) =
                    rules_from(file, &self.service, self.watch).map_err(invalid)?;
                #[cfg(feature = "config")]
                let source = crate::rules::RulesSource {
                    watch_quiet: self.watch_quiet,
                    ..source
                };
                (limit, algorithm, Some(source))
            }
        };
        let limit = if self.unpaced { limit.unpaced() } else { limit };
        let windows = self.duration.as_nanos() / limit.window().as_nanos() + 2;
        if windows > u128::from(MAX_WINDOWS) {
            return Err(invalid(format!(
                "--duration {} over --window {} touches up to {windows} windows; the demo reports at \
                 most {MAX_WINDOWS} (lengthen --window or shorten --duration)",
                humantime::format_duration(self.duration),
                humantime::format_duration(limit.window()),
            )));
        }
        let otlp = self.otlp_target().map_err(invalid)?;
        let fleet = self.redis.map(|url| FleetTarget {
            url,
            key: self.redis_key,
            ca: self.redis_ca,
            client: self.redis_client_cert.zip(self.redis_client_key),
        });
        if self.plain_layer && self.via != Via::Tracing {
            return Err(invalid("--plain-layer applies to --via tracing".into()));
        }
        if self.via == Via::Tracing && !self.plain_layer && !cfg!(feature = "tracing") {
            return Err(invalid(
                "--via tracing goes through SkipDropped, which needs the tracing feature: \
                 cargo run --release --features tracing --example demo -- --via tracing \
                 (or add --plain-layer for the OpenTelemetry layer alone)"
                    .into(),
            ));
        }
        if fleet.is_some() && !cfg!(feature = "redis") {
            return Err(invalid(
                "--redis needs the redis feature: cargo run --release --features redis \
                 --example demo -- --redis URL ..."
                    .into(),
            ));
        }
        if self.keys.is_some() && self.via != Via::Sdk {
            return Err(invalid(
                "--keys gives routes to roots made with --via sdk".into(),
            ));
        }
        #[cfg(not(feature = "config"))]
        let _: Option<std::convert::Infallible> = rules;
        Ok(Config {
            algorithm,
            adaptive: self.adaptive,
            limit,
            threads: usize::from(self.threads),
            duration: self.duration,
            rate: self.rate,
            via: self.via,
            plain_layer: self.plain_layer,
            otlp,
            fleet,
            #[cfg(feature = "config")]
            rules,
            keys: self.keys.map(|k| (k, self.skew)),
            fair_by: self.fair_by,
            max_keys: self.max_keys,
        })
    }

    /// `--otlp URL`, else the standard endpoint variables when set, else no export.
    fn otlp_target(&self) -> Result<Option<Target>, String> {
        let from_env = [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()));
        if self.otlp.is_none() && !from_env {
            return match self.otlp_protocol {
                Some(_) => Err("--otlp-protocol needs --otlp URL or \
                                OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT"
                    .into()),
                None => Ok(None),
            };
        }
        let protocol = match self.otlp_protocol {
            Some(p) => p,
            None => OtlpProtocol::from_env()?,
        };
        Ok(Some(Target::new(self.otlp.clone(), protocol)))
    }
}

/// `--config FILE --service NAME [--watch]`: the rules, and the limit whose windows
/// the demo reports, or what is wrong (the file's error, or a feature missing).
#[cfg(feature = "config")]
fn rules_from(
    file: &std::path::Path,
    service: &str,
    watch: bool,
) -> Result<(crate::rules::RulesSource, Limit, Algorithm), String> {
    if watch && !cfg!(feature = "reload") {
        return Err(
            "--watch needs the reload feature: cargo run --release --features reload \
                    --example demo -- --config FILE --watch ..."
                .into(),
        );
    }
    crate::rules::load(file, service, watch).map_err(|e| format!("--config: {e}"))
}

/// Without the `config` feature: `--config` is refused.
#[cfg(not(feature = "config"))]
fn rules_from(
    _: &std::path::Path,
    _: &str,
    _: bool,
) -> Result<(std::convert::Infallible, Limit, Algorithm), String> {
    Err(
        "--config needs the config feature: cargo run --release --features config \
         --example demo -- --config FILE ..."
            .into(),
    )
}

/// A window the demo's clock can see go by: one shorter than the clock's resolution
/// (1 ms on a 4 ms clock) is seen in steps longer than itself, so its limiter enforces
/// another rate than N per window (the crate's rule-based sampler refuses it for that),
/// and its windows cannot be reported either.
fn window_above_the_clock(window: Duration) -> Result<(), String> {
    let resolution = crate::windows::AlignedClock::resolution_of_any();
    if window < resolution {
        return Err(format!(
            "--window {} is shorter than the clock's resolution, {}: the limiter would see \
             time in steps of {} and enforce another rate; use --window {} or longer",
            humantime::format_duration(window),
            humantime::format_duration(resolution),
            humantime::format_duration(resolution),
            humantime::format_duration(resolution),
        ));
    }
    Ok(())
}

/// A duration such as `1s` or `200ms`.
fn duration(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value)
        .map_err(|e| format!("not a duration such as 1s or 200ms ({e})"))
}

/// The run's length: more than zero, at most [`MAX_DURATION`].
fn run_duration(value: &str) -> Result<Duration, String> {
    let d = duration(value)?;
    if d.is_zero() {
        return Err("the run must last longer than 0s".into());
    }
    if d > MAX_DURATION {
        return Err(format!(
            "the demo runs at most {}",
            humantime::format_duration(MAX_DURATION)
        ));
    }
    Ok(d)
}

/// A Zipf exponent: a finite number, 0 or more.
fn skew(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Ok(s),
        _ => Err("not a finite number of 0 or more".into()),
    }
}

/// A rate per second: a finite number above 0, at most [`MAX_RATE`].
fn rate(value: &str) -> Result<f64, String> {
    let r: f64 = value
        .trim()
        .parse()
        .map_err(|_| "not a number of traces per second".to_owned())?;
    if !(r.is_finite() && r > 0.0) {
        return Err("not a positive finite number".into());
    }
    if r > MAX_RATE {
        return Err(format!(
            "more than {MAX_RATE:e} per second; leave --rate out to offer as fast as possible"
        ));
    }
    Ok(r)
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        #[cfg(feature = "config")]
        if let Some(rules) = &self.rules {
            write!(
                f,
                "{} of service {:?} from {}{}, windows of its {}: ",
                rules.applied_by(),
                rules.service,
                rules.file.display(),
                if rules.watch { " (watched)" } else { "" },
                rules.bound_name(),
            )?;
        }
        if self.adaptive {
            f.write_str("adaptive probability under a cap of ")?;
        }
        if !self.fair_by.is_empty() {
            write!(
                f,
                "fair shares by {:?} (max keys {}) of ",
                self.fair_by, self.max_keys
            )?;
        }
        match &self.fleet {
            None => write!(
                f,
                "algorithm {} ({}), ",
                self.algorithm,
                if self.limit.is_paced() {
                    "paced"
                } else {
                    "unpaced"
                }
            )?,
            Some(t) => write!(f, "fleet {:?} on {}, ", t.key, t.shown_url())?,
        }
        write!(
            f,
            "limit {} per {} ({}/s), threads {}, duration {}, rate ",
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
            Via::Tracing if self.plain_layer => {
                f.write_str(", spans via tracing through the plain OpenTelemetry layer")?;
            }
            Via::Tracing => f.write_str(
                ", spans via tracing through SkipDropped (nothing below a dropped root \
                 reaches the OpenTelemetry layer)",
            )?,
        }
        if let Some((keys, skew)) = self.keys {
            write!(f, ", {keys} routes (Zipf {skew})")?;
        }
        match &self.otlp {
            Some(t) => write!(f, ", OTLP to {} over {}", t.url, t.protocol),
            None => f.write_str(", no OTLP export"),
        }
    }
}
