//! Argument values: each parser accepts only what the commands can act on, and says in
//! one line what is accepted.

use std::num::NonZeroU32;
use std::time::Duration;

use clap::ValueEnum;
use opentelemetry::trace::SpanKind;

/// The highest offered rate `simulate` accepts, per second.
pub(crate) const MAX_RATE: f64 = 1e12;
/// The most replicas a limit is split across.
pub(crate) const MAX_REPLICAS: u32 = 1000;
/// The shortest simulated duration.
const MIN_DURATION: Duration = Duration::from_millis(1);

/// An offered rate per second: a finite number above 0 and at most [`MAX_RATE`].
pub(crate) fn rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text.trim().parse().map_err(|_| {
        format!("{text:?} is not a number; use a rate per second such as 500 or 0.5")
    })?;
    if !rate.is_finite() || rate <= 0.0 || rate > MAX_RATE {
        return Err(format!(
            "{text} is not a usable rate; use a number above 0 and at most {MAX_RATE:e} per second"
        ));
    }
    Ok(rate)
}

/// A duration such as `10s`, `2m` or `1h 30m` (humantime), at least 1 ms. Its upper
/// bound is the simulation budget's, checked with the rules in hand.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| {
        format!("{text:?} is not a duration ({e}); use a number and a unit: 500ms, 10s, 2m, 1h")
    })?;
    if d < MIN_DURATION {
        return Err(format!(
            "{text:?} is shorter than 1ms; use 500ms, 10s, 2m, 1h"
        ));
    }
    Ok(d)
}

/// A replica count from 1 to [`MAX_REPLICAS`].
pub(crate) fn replicas(text: &str) -> Result<NonZeroU32, String> {
    text.trim()
        .parse::<u32>()
        .ok()
        .and_then(NonZeroU32::new)
        .filter(|k| k.get() <= MAX_REPLICAS)
        .ok_or_else(|| {
            format!("{text:?} is not a replica count; use a whole number from 1 to {MAX_REPLICAS}")
        })
}

/// A Zipf exponent: a finite number, 0 or more.
pub(crate) fn skew(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Ok(s),
        _ => Err(format!(
            "{text:?} is not a Zipf exponent: a finite number, 0 or more"
        )),
    }
}

/// An attribute `KEY=VALUE` (split at the first `=`; the key not empty). Values are
/// text, as the rules match them.
pub(crate) fn attribute(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!(
            "{text:?} is not KEY=VALUE; use e.g. http.route=/admin/users"
        )),
    }
}

/// A span kind, as the rule files name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Kind {
    Internal,
    Server,
    Client,
    Producer,
    Consumer,
}

impl From<Kind> for SpanKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Internal => SpanKind::Internal,
            Kind::Server => SpanKind::Server,
            Kind::Client => SpanKind::Client,
            Kind::Producer => SpanKind::Producer,
            Kind::Consumer => SpanKind::Consumer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_refused_and_good_ones_kept() {
        for bad in [
            "",
            "x",
            "-1",
            "0",
            "NaN",
            "inf",
            "1e300",
            "18446744073709551615",
        ] {
            assert!(rate(bad).is_err(), "{bad}");
        }
        assert_eq!(rate("0.5"), Ok(0.5));
        for bad in ["", "0", "1e9", "1001", "-3", "18446744073709551615"] {
            assert!(replicas(bad).is_err(), "{bad}");
        }
        for bad in ["", "10", "1e300s", "0s", "-1s", "10 fortnights"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        for bad in ["", "novalue", "=v"] {
            assert!(attribute(bad).is_err(), "{bad}");
        }
        assert_eq!(attribute("a=b=c"), Ok(("a".into(), "b=c".into())));
    }
}
