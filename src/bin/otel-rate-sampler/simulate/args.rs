//! The command's arguments.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;

use crate::args::{self, Kind};

/// Offer root spans at a steady rate to one service's real sampler, on a manual clock,
/// and print the traces kept per second: by the deciding rule, and after the cap.
///
/// Limits and the cap are exact for the simulated arrivals (evenly spaced, bunched at
/// the start of ticks of 1 to 10 ms); a probability's share is its expected value. The
/// work is bounded: at most 50 000 000 sampler and limiter calls and 256 MiB of
/// limiters per run; a longer run is refused with the duration that fits. A service
/// whose sampler would not build (a window shorter than the default clock's resolution,
/// an error in `check`) is not simulated: exit 1 with `check`'s lint.
#[derive(Debug, clap::Args)]
pub(crate) struct SimulateArgs {
    /// The rule file: TOML, Jaeger sampling strategies (`.json`), YAML (`.yaml`, `.yml`),
    /// or an OpenTelemetry declarative configuration file (YAML with `file_format`):
    /// rule by rule when a `rate_limiting` rule file decides its roots, else span by span
    /// through its whole sampler (a `composite/development` one, say), each span at its
    /// own time with a seeded pseudo-random trace id, one call per span within the
    /// budget.
    pub(super) file: PathBuf,
    /// The service whose sampler decides (one the file does not list gets the default).
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    pub(super) service: String,
    /// Root spans offered per second, in all (fractional allowed; at most 1e12).
    // Hyphen values: `--rate -inf` reaches `args::rate` and is refused there, not read
    // as flags `-i -n -f`.
    #[arg(long, value_name = "R", value_parser = args::rate, allow_hyphen_values = true)]
    pub(super) rate: f64,
    /// How long to offer them: 500ms, 10s, 2m, 1h.
    #[arg(long, value_name = "D", value_parser = args::duration, allow_hyphen_values = true)]
    pub(super) duration: Duration,
    /// The spans' name.
    #[arg(long, value_name = "NAME", default_value = "simulated")]
    pub(super) span: String,
    /// The spans' kind.
    #[arg(long, value_enum, default_value_t = Kind::Server)]
    pub(super) kind: Kind,
    /// An attribute present when the spans start (repeat for more); values are text.
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = args::attribute)]
    pub(super) attrs: Vec<(String, String)>,
    /// K replicas, each with its own sampler, each offered R/K (1 to 1000).
    #[arg(long, value_name = "K", value_parser = args::replicas, default_value = "1", allow_hyphen_values = true)]
    pub(super) replicas: NonZeroU32,
    /// Give each root an `http.route` drawn from K routes (`/route/0` …) and print the
    /// traces kept per route, beside what a plain cap of the deciding limit keeps (1 to
    /// 10 000; span by span, one replica).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=10_000), conflicts_with = "replicas")]
    pub(super) keys: Option<u32>,
    /// With --keys: draw the routes Zipf with exponent S (0: uniform; default 0).
    #[arg(long, value_name = "S", requires = "keys", value_parser = args::skew, allow_hyphen_values = true)]
    pub(super) skew: Option<f64>,
}
