//! The Jaeger sampling strategies file (`default_strategy`, `service_strategies`,
//! `operation_strategies`; types `probabilistic` and `ratelimiting`), loaded into the
//! same model as the TOML format.
//!
//! Two departures from the Jaeger backend, both in the user's favour: fractional rate
//! limits are honoured (0.5 is one trace per two seconds, not zero), and operation
//! strategies may be `ratelimiting` too. As in Jaeger (and as `[[default.rule]]` in
//! TOML), a listed service's operations come first, then the default strategy's
//! operations it does not name itself; a service strategy may opt out with
//! `"inherit_default_rules": false` (an extension, which Jaeger itself ignores).
//!
//! The file format has no lower bound (a strategy is a `type` and a `param`; the
//! `defaultLowerBoundTracesPerSecond` of Jaeger's remote sampling answers is not one of
//! its keys), so a file's probabilities have none; write `at_least` in a TOML or YAML
//! rule file for one.

use serde::Deserialize;

use crate::config::check::budget::over_budget;
use crate::config::check::names::{self, Listed};
use crate::config::error::{ConfigError, ConfigErrorKind, Pos};

mod json;

use crate::config::model::values::{self, Invalid};
use crate::config::model::{FleetSettings, LimitSpec, Policy, Rule, SamplingConfig, ServiceConfig};
use crate::limiter::Algorithm;
use crate::pattern::Pattern;
use crate::sampler::RemoteParents;
use json::{json_error, locate, path_string, Step};

/// Jaeger's default when a file has no `default_strategy`.
const JAEGER_DEFAULT_PROBABILITY: f64 = 0.001;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    default_strategy: Option<RawStrategy>,
    #[serde(default)]
    service_strategies: Vec<RawStrategy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStrategy {
    service: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    param: Option<f64>,
    #[serde(default)]
    operation_strategies: Vec<RawOperation>,
    inherit_default_rules: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperation {
    operation: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    param: Option<f64>,
}

struct Ctx<'a> {
    text: &'a str,
    file: &'a str,
}

impl Ctx<'_> {
    fn err(&self, invalid: Invalid, path: &[Step<'_>]) -> ConfigError {
        let pos =
            locate(self.text, path).map_or_else(Pos::default, |o| Pos::of_offset(self.text, o));
        invalid.at(self.file, pos, &path_string(path))
    }

    fn policy(&self, kind: &str, param: f64, at: &[Step<'_>]) -> Result<Policy, ConfigError> {
        let with = |last: &'static str| [at, &[Step::Key(last)]].concat();
        match kind {
            "probabilistic" => values::probability(param)
                .map(Policy::Probability)
                .map_err(|e| self.err(e, &with("param"))),
            "ratelimiting" => values::rate(param)
                .map(|limit| {
                    // Jaeger strategies have no notion of a fleet: each process's own.
                    Policy::Limit(LimitSpec::local(limit, Algorithm::FixedWindow))
                })
                .map_err(|e| self.err(e, &with("param"))),
            other => Err(self.err(
                Invalid::new(
                    ConfigErrorKind::UnknownType,
                    format!("unknown strategy type {other:?}; expected \"probabilistic\" or \"ratelimiting\""),
                ),
                &with("type"),
            )),
        }
    }

    /// A strategy's own policy (`None` if it sets neither `type` nor `param`).
    fn strategy_policy(
        &self,
        raw: &RawStrategy,
        at: &[Step<'_>],
    ) -> Result<Option<Policy>, ConfigError> {
        match (&raw.kind, raw.param) {
            (Some(kind), Some(param)) => self.policy(kind, param, at).map(Some),
            (None, None) => Ok(None),
            (Some(_), None) | (None, Some(_)) => {
                let missing = if raw.kind.is_none() { "type" } else { "param" };
                Err(self.err(
                    Invalid::new(
                        ConfigErrorKind::MissingKey,
                        format!("`type` and `param` go together; add `{missing}`"),
                    ),
                    at,
                ))
            }
        }
    }

    fn operations(&self, raw: &RawStrategy, at: &[Step<'_>]) -> Result<Vec<Rule>, ConfigError> {
        let mut rules: Vec<Rule> = Vec::with_capacity(raw.operation_strategies.len());
        for (i, op) in raw.operation_strategies.iter().enumerate() {
            let here = [at, &[Step::Key("operation_strategies"), Step::Index(i)]].concat();
            let key = [here.as_slice(), &[Step::Key("operation")]].concat();
            let missing = |name: &str| {
                self.err(
                    Invalid::new(
                        ConfigErrorKind::MissingKey,
                        format!("an operation strategy needs `operation`, `type` and `param`; add `{name}`"),
                    ),
                    &here,
                )
            };
            let (Some(operation), Some(kind), Some(param)) = (&op.operation, &op.kind, op.param)
            else {
                let name = match (&op.operation, &op.kind) {
                    (None, _) => "operation",
                    (_, None) => "type",
                    _ => "param",
                };
                return Err(missing(name));
            };
            values::name("operation", operation).map_err(|e| self.err(e, &key))?;
            rules.push(Rule {
                name: operation.clone(),
                named: true,
                span_name: Some(Pattern::literal(operation)),
                kind: None,
                parent: None,
                attributes: Vec::new(),
                policy: self.policy(kind, param, &here)?,
                floor: 0,
                inherited: false,
            });
        }
        names::distinct(rules.iter().map(|r| r.name.as_str())).map_err(|repeat| {
            let here = [
                at,
                &[Step::Key("operation_strategies"), Step::Index(repeat.at)],
            ]
            .concat();
            self.err(
                repeat.problem(Listed::Operation),
                &[here.as_slice(), &[Step::Key("operation")]].concat(),
            )
        })?;
        Ok(rules)
    }
}

/// A Jaeger sampling strategies file, read: [`SamplingConfig::from_jaeger_json_str`].
pub(crate) fn load(text: &str, file: &str) -> Result<SamplingConfig, ConfigError> {
    // A UTF-8 byte order mark is not part of the JSON, nor counted in columns.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let ctx = Ctx { text, file };
    let raw: RawFile = serde_json::from_str(text).map_err(|e| json_error(text, file, &e))?;
    let default = match &raw.default_strategy {
        Some(d) => {
            let at = [Step::Key("default_strategy")];
            for (given, key) in [
                (d.service.is_some(), "service"),
                (d.inherit_default_rules.is_some(), "inherit_default_rules"),
            ] {
                if given {
                    return Err(ctx.err(
                        Invalid::new(
                            ConfigErrorKind::UnknownKey,
                            format!("the default strategy takes no `{key}`"),
                        ),
                        &[at[0], Step::Key(key)],
                    ));
                }
            }
            ServiceConfig {
                policy: Some(
                    ctx.strategy_policy(d, &at)?
                        .unwrap_or(Policy::Probability(JAEGER_DEFAULT_PROBABILITY)),
                ),
                rules: ctx.operations(d, &at)?,
                ..jaeger_default()
            }
        }
        None => jaeger_default(),
    };
    let mut services: Vec<ServiceConfig> = Vec::with_capacity(raw.service_strategies.len());
    for (i, s) in raw.service_strategies.iter().enumerate() {
        let at = [Step::Key("service_strategies"), Step::Index(i)];
        let name_key = [at[0], at[1], Step::Key("service")];
        let name = s.service.as_deref().ok_or_else(|| {
            ctx.err(
                Invalid::new(
                    ConfigErrorKind::MissingKey,
                    "a service strategy needs a `service` name",
                ),
                &at,
            )
        })?;
        values::name("service name", name).map_err(|e| ctx.err(e, &name_key))?;
        services.push(ServiceConfig {
            name: name.to_owned(),
            policy: ctx.strategy_policy(s, &at)?,
            cap: None,
            remote_parents: RemoteParents::default(),
            rules: ctx.operations(s, &at)?,
            inherit_default_rules: s.inherit_default_rules.unwrap_or(true),
        });
    }
    let index = names::index(services.iter().map(|s| s.name.as_str())).map_err(|repeat| {
        let at = [
            Step::Key("service_strategies"),
            Step::Index(repeat.at),
            Step::Key("service"),
        ];
        ctx.err(repeat.problem(Listed::Service), &at)
    })?;
    let config = SamplingConfig::indexed(file, default, services, index, FleetSettings::default());
    if let Some(over) = over_budget(&config) {
        let at = match over.service {
            Some(i) => vec![Step::Key("service_strategies"), Step::Index(i)],
            None => vec![Step::Key("default_strategy")],
        };
        return Err(ctx.err(over.invalid(&config), &at));
    }
    Ok(config)
}

/// Jaeger's default strategy when the file has none: probability 0.001.
fn jaeger_default() -> ServiceConfig {
    ServiceConfig {
        name: String::new(),
        policy: Some(Policy::Probability(JAEGER_DEFAULT_PROBABILITY)),
        cap: None,
        remote_parents: RemoteParents::default(),
        rules: Vec::new(),
        inherit_default_rules: true,
    }
}
