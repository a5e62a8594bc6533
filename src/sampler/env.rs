//! The environment variables this crate reads, read as the OpenTelemetry specification
//! says: an empty value is the same as an unset one, and sampler names are
//! case-insensitive (`RATELIMITING` works).
//!
//! Without any feature, [`RateLimitingSampler::from_env`] reads
//! `OTEL_TRACES_SAMPLER=ratelimiting` / `parentbased_ratelimiting` and
//! `OTEL_TRACES_SAMPLER_ARG` (traces per second); feature `config` adds a rule file
//! (`RuleBasedSampler::from_env`) and the variables it reads. Each entry point comes in a
//! strict form (`from_env`, a typed error) and a lenient one (`from_env_lossy`, a
//! warning and a documented fallback), both on one code path, and in a `from_lookup`
//! form that reads variables through a function (for tests).

use std::error::Error;
use std::fmt;

use super::parent::RemoteParents;
use super::rate_limiting::RateLimitingSampler;
use crate::limit::{Limit, LimitError};

/// The standard variable choosing the sampler.
pub const OTEL_TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
/// The standard variable holding the sampler's argument: here, traces per second.
pub const OTEL_TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
/// The standard variable naming the service; it wins over `service.name` in
/// [`OTEL_RESOURCE_ATTRIBUTES`]. Read when the application gives no service name.
pub const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// The standard variable of resource attributes (`key=value,key=value`, values
/// percent-encoded); its `service.name` names the service when
/// [`OTEL_SERVICE_NAME`] is unset.
pub const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
/// The `OTEL_TRACES_SAMPLER` value for a rate limit that also caps sampled remote
/// parents (`remote_parents = "cap"`): every trace this process exports counts.
pub const RATELIMITING: &str = "ratelimiting";
/// The `OTEL_TRACES_SAMPLER` value for a rate limit on the traces that start here;
/// remote parents are followed.
pub const PARENTBASED_RATELIMITING: &str = "parentbased_ratelimiting";
/// The traces per second when `OTEL_TRACES_SAMPLER_ARG` is unset or empty (or,
/// leniently, bad).
pub const DEFAULT_TRACES_PER_SECOND: f64 = 100.0;
/// The service name the specification prescribes when neither [`OTEL_SERVICE_NAME`]
/// nor `service.name` in [`OTEL_RESOURCE_ATTRIBUTES`] gives one.
pub const UNKNOWN_SERVICE: &str = "unknown_service";

/// A variable whose value this crate does not accept: which variable, its value, and
/// what is accepted.
///
/// ```
/// use otel_rate_sampler::env::{OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG};
/// use otel_rate_sampler::RateLimitingSampler;
///
/// let env = |name: &str| match name {
///     OTEL_TRACES_SAMPLER => Some("ratelimiting".to_owned()),
///     OTEL_TRACES_SAMPLER_ARG => Some("lots".to_owned()),
///     _ => None,
/// };
/// let err = RateLimitingSampler::from_lookup(env).unwrap_err();
/// assert_eq!(err.variable(), OTEL_TRACES_SAMPLER_ARG);
/// assert!(err.to_string().starts_with("OTEL_TRACES_SAMPLER_ARG=\"lots\": "));
/// ```
#[derive(Debug)]
pub struct EnvError {
    variable: &'static str,
    value: String,
    message: String,
    source: Option<LimitError>,
}

impl EnvError {
    fn new(variable: &'static str, value: &str, message: impl Into<String>) -> Self {
        Self {
            variable,
            value: value.to_owned(),
            message: message.into(),
            source: None,
        }
    }

    /// The variable at fault.
    pub fn variable(&self) -> &str {
        self.variable
    }

    /// Its value, as read.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// What was wrong and what is accepted, without the variable.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?}: {}", self.variable, self.value, self.message)
    }
}

impl Error for EnvError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_ref().map(|e| e as &(dyn Error + 'static))
    }
}

/// A variable's value as the specification reads it: surrounding whitespace trimmed, an
/// empty value the same as an unset one.
pub(crate) fn var(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    lookup(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The remote-parent policy `OTEL_TRACES_SAMPLER` asks of this crate's sampler
/// (case-insensitive), or `None` when it names another sampler or none.
pub(crate) fn chosen(lookup: &dyn Fn(&str) -> Option<String>) -> Option<RemoteParents> {
    let value = var(lookup, OTEL_TRACES_SAMPLER)?;
    if value.eq_ignore_ascii_case(RATELIMITING) {
        Some(RemoteParents::Cap)
    } else if value.eq_ignore_ascii_case(PARENTBASED_RATELIMITING) {
        Some(RemoteParents::Follow)
    } else {
        None
    }
}

/// The limit `OTEL_TRACES_SAMPLER_ARG` asks for ([`DEFAULT_TRACES_PER_SECOND`] when it
/// is unset or empty).
pub(crate) fn rate_limit(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Limit, EnvError> {
    let Some(arg) = var(lookup, OTEL_TRACES_SAMPLER_ARG) else {
        return Ok(default_limit());
    };
    let rate: f64 = arg.parse().map_err(|_| {
        EnvError::new(
            OTEL_TRACES_SAMPLER_ARG,
            &arg,
            "not a number of traces per second; use a positive number such as 100 or 0.5",
        )
    })?;
    Limit::per_second(rate).map_err(|e| EnvError {
        source: Some(e.clone()),
        ..EnvError::new(OTEL_TRACES_SAMPLER_ARG, &arg, e.to_string())
    })
}

/// The limit of [`DEFAULT_TRACES_PER_SECOND`].
pub(crate) fn default_limit() -> Limit {
    Limit::per_second(DEFAULT_TRACES_PER_SECOND)
        .unwrap_or_else(|_| unreachable!("100 per second is in range"))
}

/// The service name the environment gives: [`OTEL_SERVICE_NAME`], else `service.name`
/// in [`OTEL_RESOURCE_ATTRIBUTES`] (percent-decoded), else [`UNKNOWN_SERVICE`].
///
/// # Errors
///
/// An [`EnvError`] for an `OTEL_RESOURCE_ATTRIBUTES` that does not decode (a pair
/// without `=`, a bad `%` escape, a value that is not UTF-8): the specification has
/// the whole variable discarded then, and the lenient readers do so with a warning.
#[cfg_attr(not(feature = "config"), allow(dead_code))] // the rule layer reads it
pub(crate) fn service_name(lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, EnvError> {
    if let Some(name) = var(lookup, OTEL_SERVICE_NAME) {
        return Ok(name);
    }
    let Some(attributes) = var(lookup, OTEL_RESOURCE_ATTRIBUTES) else {
        return Ok(UNKNOWN_SERVICE.to_owned());
    };
    let mut service = None;
    for pair in attributes.split(',').filter(|p| !p.trim().is_empty()) {
        let bad = |what: &str| {
            EnvError::new(
                OTEL_RESOURCE_ATTRIBUTES,
                &attributes,
                format!("{what} in {pair:?}; write key=value pairs separated by commas, values percent-encoded"),
            )
        };
        let (key, value) = pair.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let value = percent_decode(value.trim()).ok_or_else(|| bad("a bad percent escape"))?;
        if key.trim() == "service.name" && !value.is_empty() {
            service = Some(value);
        }
    }
    Ok(service.unwrap_or_else(|| UNKNOWN_SERVICE.to_owned()))
}

/// Decodes `%XX` escapes (the W3C Baggage encoding the specification uses for resource
/// attribute values); `None` for a malformed escape (two hexadecimal digits, no sign),
/// bytes that are not UTF-8, or a control character (`%00` included).
/// (Hand-written: the `percent-encoding` crate passes malformed escapes through, and the
/// specification asks for the value to be refused then.)
#[cfg_attr(not(feature = "config"), allow(dead_code))]
fn percent_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = tail
                .get(..2)
                .filter(|h| h.iter().all(u8::is_ascii_hexdigit))?;
            let hex = std::str::from_utf8(hex).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes)
        .ok()
        .filter(|s| !s.chars().any(char::is_control))
}

/// What a lenient reader does with a problem by default: a `tracing` warning (target
/// `otel_rate_sampler`).
pub(crate) fn warn(problem: &dyn fmt::Display, fallback: &dyn fmt::Display) {
    tracing::warn!(target: "otel_rate_sampler", "{problem}; falling back to {fallback}");
}

impl RateLimitingSampler {
    /// The sampler the process environment asks for, with no feature needed:
    /// `OTEL_TRACES_SAMPLER=ratelimiting` (remote parents capped too) or
    /// `parentbased_ratelimiting` (remote parents followed), any case, with
    /// `OTEL_TRACES_SAMPLER_ARG` = traces per second (fractional allowed; unset or
    /// empty: [`DEFAULT_TRACES_PER_SECOND`]), as a fixed window. `Ok(None)` when the
    /// variable is unset, empty or names another sampler (leave the SDK's own choice in
    /// place).
    ///
    /// # Errors
    ///
    /// An [`EnvError`] for an `OTEL_TRACES_SAMPLER_ARG` that is not a rate this crate
    /// can enforce (not a number, zero, negative, NaN, infinite, out of range).
    pub fn from_env() -> Result<Option<Self>, EnvError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup`.
    ///
    /// ```
    /// use otel_rate_sampler::env::{OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG};
    /// use otel_rate_sampler::{RateLimiter as _, RateLimitingSampler};
    ///
    /// let env = |name: &str| match name {
    ///     OTEL_TRACES_SAMPLER => Some("ParentBased_RateLimiting".to_owned()),
    ///     OTEL_TRACES_SAMPLER_ARG => Some("0.5".to_owned()),
    ///     _ => None,
    /// };
    /// let sampler = RateLimitingSampler::from_lookup(env)?.expect("chosen");
    /// assert_eq!(sampler.limiter().limit().per_second_rate(), 0.5);
    /// # Ok::<(), otel_rate_sampler::env::EnvError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, EnvError> {
        let Some(remote_parents) = chosen(&lookup) else {
            return Ok(None);
        };
        let limit = rate_limit(&lookup)?;
        Ok(Some(
            Self::builder(limit).remote_parents(remote_parents).build(),
        ))
    }

    /// Like [`from_env`](Self::from_env), but never fails: a bad
    /// `OTEL_TRACES_SAMPLER_ARG` is logged as a `tracing` warning (target
    /// `otel_rate_sampler`) and [`DEFAULT_TRACES_PER_SECOND`] applies.
    pub fn from_env_lossy() -> Option<Self> {
        Self::from_lookup_lossy(
            |name| std::env::var(name).ok(),
            |e| {
                warn(
                    e,
                    &format_args!("{DEFAULT_TRACES_PER_SECOND} traces per second"),
                )
            },
        )
    }

    /// Like [`from_env_lossy`](Self::from_env_lossy), reading variables through `lookup`
    /// and reporting each problem to `warn` instead of the log.
    pub fn from_lookup_lossy(
        lookup: impl Fn(&str) -> Option<String>,
        mut warn: impl FnMut(&EnvError),
    ) -> Option<Self> {
        match Self::from_lookup(&lookup) {
            Ok(sampler) => sampler,
            Err(e) => {
                warn(&e);
                let remote_parents = chosen(&lookup)?;
                Some(
                    Self::builder(default_limit())
                        .remote_parents(remote_parents)
                        .build(),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn percent_escapes_decode_and_malformed_ones_are_refused() {
        assert_eq!(percent_decode("a%20b%2Cc").as_deref(), Some("a b,c"));
        assert_eq!(percent_decode("caf%C3%A9").as_deref(), Some("café"));
        assert_eq!(percent_decode("50%"), None);
        // from_str_radix alone takes a sign; a NUL or another control character is
        // not a service name.
        assert_eq!(percent_decode("a%+f"), None);
        assert_eq!(percent_decode("a%-1"), None);
        assert_eq!(percent_decode("a%00b"), None);
        assert_eq!(percent_decode("a%0Ab"), None);
        assert_eq!(percent_decode("a%7Fb"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%FF"), None);
    }

    #[test]
    fn service_name_prefers_otel_service_name_then_the_resource_attribute() {
        let both = env(&[
            (OTEL_SERVICE_NAME, " checkout "),
            (OTEL_RESOURCE_ATTRIBUTES, "service.name=other"),
        ]);
        assert_eq!(service_name(&both).unwrap(), "checkout");
        let resource = env(&[
            (OTEL_SERVICE_NAME, ""),
            (
                OTEL_RESOURCE_ATTRIBUTES,
                "deployment.environment=prod, service.name = my%20shop%2Ceu ,",
            ),
        ]);
        assert_eq!(service_name(&resource).unwrap(), "my shop,eu");
        assert_eq!(service_name(&env(&[])).unwrap(), UNKNOWN_SERVICE);
        let no_service = env(&[(OTEL_RESOURCE_ATTRIBUTES, "host.name=a")]);
        assert_eq!(service_name(&no_service).unwrap(), UNKNOWN_SERVICE);
        let bad = env(&[(OTEL_RESOURCE_ATTRIBUTES, "service.name=a%2")]);
        let err = service_name(&bad).unwrap_err();
        assert_eq!(err.variable(), OTEL_RESOURCE_ATTRIBUTES);
        let no_equals = env(&[(OTEL_RESOURCE_ATTRIBUTES, "service.name")]);
        assert!(service_name(&no_equals).is_err());
    }

    #[test]
    fn sampler_names_are_case_insensitive_and_empty_means_unset() {
        assert_eq!(
            chosen(&env(&[(OTEL_TRACES_SAMPLER, "RATELIMITING")])),
            Some(RemoteParents::Cap)
        );
        assert_eq!(
            chosen(&env(&[(OTEL_TRACES_SAMPLER, " ParentBased_RateLimiting ")])),
            Some(RemoteParents::Follow)
        );
        assert_eq!(chosen(&env(&[(OTEL_TRACES_SAMPLER, "")])), None);
        assert_eq!(chosen(&env(&[(OTEL_TRACES_SAMPLER, "always_on")])), None);
        let empty_arg = env(&[(OTEL_TRACES_SAMPLER_ARG, "  ")]);
        assert_eq!(rate_limit(&empty_arg).unwrap(), default_limit());
    }
}
