//! A Jaeger sampling strategy response (`GET /api/sampling?service=NAME`, the same JSON
//! from an agent's `/sampling`), mapped onto the rule model.
//!
//! The mapping is documented on [`JaegerRemote`](super::JaegerRemote).

use serde::Deserialize;

use crate::config::error::{ConfigError, ConfigErrorKind, Pos};
use crate::config::model::pattern::Pattern;
use crate::config::model::values::{self, Invalid};
use crate::config::model::{FleetSettings, LimitSpec, Policy, Rule, SamplingConfig, ServiceConfig};
use crate::limiter::Algorithm;
use crate::sampler::RemoteParents;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default, alias = "strategy_type")]
    strategy_type: Option<StrategyType>,
    #[serde(default, alias = "probabilistic_sampling")]
    probabilistic_sampling: Option<Probabilistic>,
    #[serde(default, alias = "rate_limiting_sampling")]
    rate_limiting_sampling: Option<RateLimiting>,
    #[serde(default, alias = "operation_sampling")]
    operation_sampling: Option<PerOperation>,
}

/// The enum as protobuf's JSON mapping writes it (a name) or as Thrift's did (a number).
#[derive(Deserialize)]
#[serde(untagged)]
enum StrategyType {
    Number(i64),
    Name(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Probabilistic {
    /// Absent is protobuf's default, 0.
    #[serde(default, alias = "sampling_rate")]
    sampling_rate: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RateLimiting {
    /// Absent is protobuf's default, 0. Jaeger declares an integer; a fraction is
    /// honoured.
    #[serde(default, alias = "max_traces_per_second")]
    max_traces_per_second: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PerOperation {
    #[serde(default, alias = "default_sampling_probability")]
    default_sampling_probability: Option<f64>,
    #[serde(default, alias = "default_lower_bound_traces_per_second")]
    default_lower_bound_traces_per_second: Option<f64>,
    #[serde(default, alias = "default_upper_bound_traces_per_second")]
    default_upper_bound_traces_per_second: Option<f64>,
    #[serde(default, alias = "per_operation_strategies")]
    per_operation_strategies: Option<Vec<Operation>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Operation {
    #[serde(default)]
    operation: Option<String>,
    #[serde(default, alias = "probabilistic_sampling")]
    probabilistic_sampling: Option<Probabilistic>,
    #[serde(default, alias = "rate_limiting_sampling")]
    rate_limiting_sampling: Option<RateLimiting>,
}

/// A strategy response, mapped: the rules for `service`.
pub(crate) struct Strategy {
    pub(crate) config: SamplingConfig,
}

impl Strategy {
    /// The service's settings, to tell an unchanged strategy from a new one.
    pub(crate) fn settings(&self) -> &ServiceConfig {
        &self.config.services[0]
    }
}

/// Parses a strategy response for `service`; `source` (the URL asked) names it in errors.
pub(crate) fn parse(text: &str, service: &str, source: &str) -> Result<Strategy, ConfigError> {
    let raw: Response = serde_json::from_str(text).map_err(|e| {
        let pos = Pos {
            line: e.line(),
            column: e.column(),
        };
        let message = e.to_string();
        let message = message.split(" at line ").next().unwrap_or_default();
        ConfigError::new(
            ConfigErrorKind::Syntax,
            source,
            pos,
            "",
            format!("not a Jaeger sampling strategy response: {message}"),
        )
        .with_source(e)
    })?;
    let err = |invalid: Invalid, key: &str| invalid.at(source, Pos::default(), key);
    let rate_limiting = match raw.strategy_type {
        None | Some(StrategyType::Number(0)) => false,
        Some(StrategyType::Number(1)) => true,
        Some(StrategyType::Name(ref n)) if n.eq_ignore_ascii_case("PROBABILISTIC") => false,
        Some(StrategyType::Name(ref n)) if n.eq_ignore_ascii_case("RATE_LIMITING") => true,
        Some(other) => {
            let shown = match other {
                StrategyType::Number(n) => n.to_string(),
                StrategyType::Name(n) => format!("{n:?}"),
            };
            return Err(err(
                Invalid::new(
                    ConfigErrorKind::UnknownType,
                    format!("unknown strategy type {shown}; expected \"PROBABILISTIC\" (0) or \"RATE_LIMITING\" (1)"),
                ),
                "strategyType",
            ));
        }
    };
    let top_rate = if rate_limiting {
        let r = raw.rate_limiting_sampling.as_ref().ok_or_else(|| {
            err(
                Invalid::new(
                    ConfigErrorKind::MissingKey,
                    "strategy type RATE_LIMITING without `rateLimitingSampling`",
                ),
                "rateLimitingSampling",
            )
        })?;
        Some(rate_policy(r, "rateLimitingSampling").map_err(|(e, k)| err(e, &k))?)
    } else {
        None
    };
    let (policy, rules, cap) = match &raw.operation_sampling {
        Some(ops) => {
            let at = "operationSampling";
            let default = values::probability(ops.default_sampling_probability.unwrap_or(0.0))
                .map_err(|e| err(e, &format!("{at}.defaultSamplingProbability")))?;
            let bound = |v: Option<f64>, key: &str| -> Result<Option<f64>, ConfigError> {
                match v.unwrap_or(0.0) {
                    0.0 => Ok(None),
                    v if v.is_finite() && v > 0.0 => Ok(Some(v)),
                    v => Err(err(
                        Invalid::new(
                            ConfigErrorKind::InvalidLimit,
                            format!("{v} is not a rate; use 0 (none) or a positive number of traces per second"),
                        ),
                        &format!("{at}.{key}"),
                    )),
                }
            };
            let lower_key = "defaultLowerBoundTracesPerSecond";
            let lower_bound = bound(ops.default_lower_bound_traces_per_second, lower_key)?
                .map(|rate| {
                    values::rate(rate)
                        .map(|limit| LimitSpec::local(limit, Algorithm::FixedWindow))
                        .map_err(|e| err(e, &format!("{at}.{lower_key}")))
                })
                .transpose()?;
            // A probability gets the lower bound, as in Jaeger's guaranteed-throughput
            // sampler: each listed operation its own limiter, the default one limiter
            // for every other operation.
            let at_least = |policy: Policy| match (policy, lower_bound) {
                (Policy::Probability(probability), Some(lower_bound)) => Policy::AtLeast {
                    probability,
                    lower_bound,
                },
                (policy, _) => policy,
            };
            let upper = bound(
                ops.default_upper_bound_traces_per_second,
                "defaultUpperBoundTracesPerSecond",
            )?;
            // The service cap: the upper bound and a top-level rate limit, the smaller.
            let cap_rate = match (upper, top_rate) {
                (Some(u), Some(Policy::Limit(l))) => Some(u.min(l.limit.per_second_rate())),
                (Some(u), _) => Some(u),
                (None, Some(Policy::Limit(l))) => Some(l.limit.per_second_rate()),
                (None, _) => None,
            };
            let cap = match (cap_rate, top_rate) {
                // A top-level rate limit of 0 keeps nothing: no cap expresses that.
                (_, Some(Policy::Probability(_))) => {
                    return Ok(Strategy {
                        config: config(source, service, Policy::Probability(0.0), vec![], None),
                    })
                }
                (Some(rate), _) => Some(LimitSpec::local(
                    values::rate(rate)
                        .map_err(|e| err(e, &format!("{at}.defaultUpperBoundTracesPerSecond")))?,
                    Algorithm::FixedWindow,
                )),
                (None, _) => None,
            };
            let mut rules: Vec<Rule> = Vec::new();
            let listed = ops.per_operation_strategies.as_deref().unwrap_or_default();
            for (i, op) in listed.iter().enumerate() {
                let here = format!("{at}.perOperationStrategies[{i}]");
                let name = op.operation.as_deref().unwrap_or_default();
                values::name("operation", name)
                    .map_err(|e| err(e, &format!("{here}.operation")))?;
                if rules.iter().any(|r| r.name == name) {
                    return Err(err(
                        Invalid::new(
                            ConfigErrorKind::DuplicateRule,
                            format!("operation {name:?} is listed twice"),
                        ),
                        &format!("{here}.operation"),
                    ));
                }
                let policy = match (&op.probabilistic_sampling, &op.rate_limiting_sampling) {
                    (Some(p), None) => at_least(
                        probability_policy(p, &format!("{here}.probabilisticSampling"))
                            .map_err(|(e, k)| err(e, &k))?,
                    ),
                    (None, Some(r)) => rate_policy(r, &format!("{here}.rateLimitingSampling"))
                        .map_err(|(e, k)| err(e, &k))?,
                    (Some(_), Some(_)) => {
                        return Err(err(
                            Invalid::new(
                                ConfigErrorKind::ConflictingKeys,
                                "an operation takes `probabilisticSampling` or `rateLimitingSampling`, not both",
                            ),
                            &here,
                        ))
                    }
                    (None, None) => {
                        return Err(err(
                            Invalid::new(
                                ConfigErrorKind::MissingKey,
                                "an operation needs `probabilisticSampling` or `rateLimitingSampling`",
                            ),
                            &here,
                        ))
                    }
                };
                rules.push(Rule {
                    name: name.to_owned(),
                    named: true,
                    span_name: Some(Pattern::literal(name)),
                    kind: None,
                    parent: None,
                    attributes: Vec::new(),
                    policy,
                    floor: 0,
                    inherited: false,
                });
            }
            (at_least(Policy::Probability(default)), rules, cap)
        }
        None => {
            let policy = match top_rate {
                Some(policy) => policy,
                None => {
                    let p = raw.probabilistic_sampling.as_ref().ok_or_else(|| {
                        err(
                            Invalid::new(
                                ConfigErrorKind::MissingKey,
                                "strategy type PROBABILISTIC without `probabilisticSampling`",
                            ),
                            "probabilisticSampling",
                        )
                    })?;
                    probability_policy(p, "probabilisticSampling").map_err(|(e, k)| err(e, &k))?
                }
            };
            (policy, Vec::new(), None)
        }
    };
    Ok(Strategy {
        config: config(source, service, policy, rules, cap),
    })
}

/// A configuration listing `service` alone.
fn config(
    source: &str,
    service: &str,
    policy: Policy,
    rules: Vec<Rule>,
    cap: Option<LimitSpec>,
) -> SamplingConfig {
    SamplingConfig::new(
        source,
        ServiceConfig {
            name: String::new(),
            policy: None,
            cap: None,
            remote_parents: RemoteParents::default(),
            rules: Vec::new(),
            inherit_default_rules: false,
        },
        vec![ServiceConfig {
            name: service.to_owned(),
            policy: Some(policy),
            cap,
            remote_parents: RemoteParents::default(),
            rules,
            inherit_default_rules: false,
        }],
        FleetSettings::default(),
    )
}

fn probability_policy(p: &Probabilistic, at: &str) -> Result<Policy, (Invalid, String)> {
    values::probability(p.sampling_rate.unwrap_or(0.0))
        .map(Policy::Probability)
        .map_err(|e| (e, format!("{at}.samplingRate")))
}

/// A rate limit; 0 keeps nothing (as in Jaeger), which is probability 0 here.
fn rate_policy(r: &RateLimiting, at: &str) -> Result<Policy, (Invalid, String)> {
    match r.max_traces_per_second.unwrap_or(0.0) {
        0.0 => Ok(Policy::Probability(0.0)),
        rate => values::rate(rate)
            .map(|limit| Policy::Limit(LimitSpec::local(limit, Algorithm::FixedWindow)))
            .map_err(|e| (e, format!("{at}.maxTracesPerSecond"))),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limit::Limit;

    const URL: &str = "http://127.0.0.1:5778/sampling?service=svc";

    fn service(text: &str) -> ServiceConfig {
        parse(text, "svc", URL)
            .unwrap_or_else(|e| panic!("{e}"))
            .settings()
            .clone()
    }

    fn error(text: &str) -> (ConfigErrorKind, String) {
        let e = parse(text, "svc", URL).err().expect("an error");
        assert_eq!(e.file(), URL);
        (e.kind(), e.key().to_owned())
    }

    fn limit(rate: f64) -> Policy {
        Policy::Limit(LimitSpec::local(
            Limit::per_second(rate).unwrap(),
            Algorithm::FixedWindow,
        ))
    }

    #[test]
    fn probabilistic_by_name_by_number_and_by_default() {
        for text in [
            r#"{"strategyType": "PROBABILISTIC", "probabilisticSampling": {"samplingRate": 0.25}}"#,
            r#"{"strategyType": 0, "probabilisticSampling": {"samplingRate": 0.25}}"#,
            r#"{"probabilisticSampling": {"samplingRate": 0.25}}"#,
            r#"{"strategy_type": "probabilistic", "probabilistic_sampling": {"sampling_rate": 0.25}}"#,
        ] {
            let s = service(text);
            assert_eq!(s.name, "svc");
            assert_eq!(s.policy, Some(Policy::Probability(0.25)), "{text}");
            assert!(s.rules.is_empty() && s.cap.is_none());
        }
        // Protobuf's JSON leaves a zero out: an empty strategy samples nothing.
        let s = service(r#"{"strategyType": "PROBABILISTIC", "probabilisticSampling": {}}"#);
        assert_eq!(s.policy, Some(Policy::Probability(0.0)));
    }

    #[test]
    fn rate_limiting_by_name_and_number_with_fractional_rates() {
        let s = service(
            r#"{"strategyType": "RATE_LIMITING", "rateLimitingSampling": {"maxTracesPerSecond": 5}}"#,
        );
        assert_eq!(s.policy, Some(limit(5.0)));
        let s =
            service(r#"{"strategyType": 1, "rateLimitingSampling": {"maxTracesPerSecond": 0.5}}"#);
        assert_eq!(s.policy, Some(limit(0.5)));
        match s.policy {
            Some(Policy::Limit(spec)) => {
                assert_eq!(spec.limit.window(), Duration::from_secs(2));
            }
            other => panic!("{other:?}"),
        }
        // 0 traces per second keeps nothing, as in Jaeger.
        let s = service(r#"{"strategyType": "RATE_LIMITING", "rateLimitingSampling": {}}"#);
        assert_eq!(s.policy, Some(Policy::Probability(0.0)));
    }

    #[test]
    fn per_operation_strategies_become_rules_in_order() {
        let s = service(
            r#"{
              "strategyType": "PROBABILISTIC",
              "probabilisticSampling": {"samplingRate": 0.5},
              "operationSampling": {
                "defaultSamplingProbability": 0.1,
                "defaultLowerBoundTracesPerSecond": 0,
                "perOperationStrategies": [
                  {"operation": "GET /cart", "probabilisticSampling": {"samplingRate": 1}},
                  {"operation": "POST /pay", "rateLimitingSampling": {"maxTracesPerSecond": 2.5}},
                  {"operation": "/health", "probabilisticSampling": {}}
                ]
              },
              "someFutureField": {"ignored": true}
            }"#,
        );
        assert_eq!(s.policy, Some(Policy::Probability(0.1)));
        let rules: Vec<(&str, Policy)> = s
            .rules
            .iter()
            .map(|r| (r.name.as_str(), r.policy))
            .collect();
        assert_eq!(
            rules,
            [
                ("GET /cart", Policy::Probability(1.0)),
                ("POST /pay", limit(2.5)),
                ("/health", Policy::Probability(0.0)),
            ]
        );
        let cart = &s.rules[0];
        let pattern = cart.span_name.as_ref().unwrap();
        assert!(pattern.is_match("GET /cart") && !pattern.is_match("GET /cart/1"));
        assert!(s.cap.is_none());
    }

    #[test]
    fn the_upper_bound_and_a_top_level_rate_limit_cap_the_service() {
        let s = service(
            r#"{"operationSampling": {"defaultSamplingProbability": 0.2,
                 "defaultUpperBoundTracesPerSecond": 20, "perOperationStrategies": []}}"#,
        );
        assert_eq!(
            s.cap.map(|c| c.limit),
            Some(Limit::per_second(20.0).unwrap())
        );
        let s = service(
            r#"{"strategyType": "RATE_LIMITING", "rateLimitingSampling": {"maxTracesPerSecond": 7},
                "operationSampling": {"defaultSamplingProbability": 0.2,
                 "defaultUpperBoundTracesPerSecond": 20}}"#,
        );
        assert_eq!(s.policy, Some(Policy::Probability(0.2)));
        assert_eq!(
            s.cap.map(|c| c.limit),
            Some(Limit::per_second(7.0).unwrap())
        );
        // A top-level rate limit of 0 keeps nothing, operations included.
        let s = service(
            r#"{"strategyType": "RATE_LIMITING", "rateLimitingSampling": {"maxTracesPerSecond": 0},
                "operationSampling": {"defaultSamplingProbability": 0.2,
                 "perOperationStrategies": [{"operation": "a", "probabilisticSampling": {"samplingRate": 1}}]}}"#,
        );
        assert_eq!(s.policy, Some(Policy::Probability(0.0)));
        assert!(s.rules.is_empty());
    }

    #[test]
    fn the_lower_bound_goes_to_every_probability_and_the_default() {
        let s = service(
            r#"{"operationSampling": {"defaultSamplingProbability": 0.001,
                 "defaultLowerBoundTracesPerSecond": 0.0166,
                 "perOperationStrategies": [
                   {"operation": "a", "probabilisticSampling": {"samplingRate": 0}},
                   {"operation": "b", "rateLimitingSampling": {"maxTracesPerSecond": 3}},
                   {"operation": "c", "rateLimitingSampling": {"maxTracesPerSecond": 0}}
                 ]}}"#,
        );
        let bound = LimitSpec::local(Limit::per_second(0.0166).unwrap(), Algorithm::FixedWindow);
        let at_least = |probability| Policy::AtLeast {
            probability,
            lower_bound: bound,
        };
        assert_eq!(s.policy, Some(at_least(0.001)));
        let rules: Vec<Policy> = s.rules.iter().map(|r| r.policy).collect();
        // A rate limit (0 included: it keeps nothing, as in Jaeger) gets none.
        assert_eq!(rules, [at_least(0.0), limit(3.0), Policy::Probability(0.0)]);
        // No bound, or 0: plain probabilities.
        let none = parse(r#"{"operationSampling": {}}"#, "svc", URL).unwrap();
        assert_eq!(none.settings().policy, Some(Policy::Probability(0.0)));
        // A top-level rate limit of 0 keeps nothing, lower bound or not.
        let s = service(
            r#"{"strategyType": 1, "rateLimitingSampling": {"maxTracesPerSecond": 0},
                "operationSampling": {"defaultLowerBoundTracesPerSecond": 1}}"#,
        );
        assert_eq!(s.policy, Some(Policy::Probability(0.0)));
    }

    #[test]
    fn bad_responses_are_typed_errors_naming_the_key() {
        use ConfigErrorKind::*;
        let cases: &[(&str, ConfigErrorKind, &str)] = &[
            ("<html>502 Bad Gateway</html>", Syntax, ""),
            ("", Syntax, ""),
            (
                r#"{"strategyType": "PROBABILISTIC", "probabilisticSampling": {"samplingRate": "x"}}"#,
                Syntax,
                "",
            ),
            (
                r#"{"strategyType": "ADAPTIVE"}"#,
                UnknownType,
                "strategyType",
            ),
            (r#"{"strategyType": 2}"#, UnknownType, "strategyType"),
            (
                r#"{"strategyType": "PROBABILISTIC"}"#,
                MissingKey,
                "probabilisticSampling",
            ),
            (
                r#"{"strategyType": "RATE_LIMITING", "probabilisticSampling": {"samplingRate": 1}}"#,
                MissingKey,
                "rateLimitingSampling",
            ),
            (
                r#"{"probabilisticSampling": {"samplingRate": 1.5}}"#,
                InvalidProbability,
                "probabilisticSampling.samplingRate",
            ),
            (
                r#"{"strategyType": 1, "rateLimitingSampling": {"maxTracesPerSecond": -3}}"#,
                InvalidLimit,
                "rateLimitingSampling.maxTracesPerSecond",
            ),
            (
                r#"{"operationSampling": {"defaultSamplingProbability": -0.1}}"#,
                InvalidProbability,
                "operationSampling.defaultSamplingProbability",
            ),
            (
                r#"{"operationSampling": {"defaultUpperBoundTracesPerSecond": -1}}"#,
                InvalidLimit,
                "operationSampling.defaultUpperBoundTracesPerSecond",
            ),
            (
                r#"{"operationSampling": {"defaultLowerBoundTracesPerSecond": -1}}"#,
                InvalidLimit,
                "operationSampling.defaultLowerBoundTracesPerSecond",
            ),
            (
                r#"{"operationSampling": {"defaultLowerBoundTracesPerSecond": 1e-12}}"#,
                InvalidLimit,
                "operationSampling.defaultLowerBoundTracesPerSecond",
            ),
            (
                r#"{"operationSampling": {"perOperationStrategies": [{"operation": "", "probabilisticSampling": {}}]}}"#,
                EmptyName,
                "operationSampling.perOperationStrategies[0].operation",
            ),
            (
                r#"{"operationSampling": {"perOperationStrategies": [{"operation": "a"}]}}"#,
                MissingKey,
                "operationSampling.perOperationStrategies[0]",
            ),
            (
                r#"{"operationSampling": {"perOperationStrategies": [{"operation": "a", "probabilisticSampling": {}, "rateLimitingSampling": {}}]}}"#,
                ConflictingKeys,
                "operationSampling.perOperationStrategies[0]",
            ),
            (
                r#"{"operationSampling": {"perOperationStrategies": [
                {"operation": "a", "probabilisticSampling": {}}, {"operation": "a", "probabilisticSampling": {}}]}}"#,
                DuplicateRule,
                "operationSampling.perOperationStrategies[1].operation",
            ),
        ];
        for (text, kind, key) in cases {
            assert_eq!(error(text), (*kind, (*key).to_owned()), "{text}");
        }
        let e = parse("{\n  \"strategyType\": [", "svc", URL).err().unwrap();
        assert_eq!((e.kind(), e.line()), (Syntax, 2));
        assert!(e.to_string().starts_with(URL), "{e}");
    }
}
