//! A Jaeger sampling strategy response (`GET /api/sampling?service=NAME`, the same JSON
//! from an agent's `/sampling`), mapped onto the rule model: decoded by
//! [`wire`](super::wire), then each part mapped by a function of its own, every problem
//! named by its key path in the response.
//!
//! The mapping is documented on [`JaegerRemote`](super::JaegerRemote).

use super::wire::{
    self, Operation, PerOperation, Probabilistic, RateLimiting, Response, StrategyType,
};
use crate::config::check::names::{self, Listed};
use crate::config::error::{ConfigError, ConfigErrorKind, Pos};
use crate::config::model::values::{self, Invalid};
use crate::config::model::{FleetSettings, LimitSpec, Policy, Rule, SamplingConfig, ServiceConfig};
use crate::limiter::Algorithm;
use crate::pattern::Pattern;
use crate::sampler::RemoteParents;

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

/// What is wrong with a value of the response, and its key path there.
type Problem = (Invalid, String);

/// The parts of the service's settings a strategy gives.
struct Mapped {
    policy: Policy,
    rules: Vec<Rule>,
    cap: Option<LimitSpec>,
}

/// The key of the per-operation strategies in a response.
const PER_OPERATION: &str = "operationSampling";

/// Parses a strategy response for `service`; `source` (the URL asked) names it in errors.
pub(crate) fn parse(text: &str, service: &str, source: &str) -> Result<Strategy, ConfigError> {
    let raw = wire::decode(text, source)?;
    let Mapped { policy, rules, cap } =
        map(&raw).map_err(|(invalid, key)| invalid.at(source, Pos::default(), &key))?;
    Ok(Strategy {
        config: config(source, service, policy, rules, cap),
    })
}

/// The whole response: a top-level strategy, refined per operation when it lists them.
fn map(raw: &Response) -> Result<Mapped, Problem> {
    let top_rate = if is_rate_limiting(raw.strategy_type.as_ref())? {
        let r = raw.rate_limiting_sampling.as_ref().ok_or_else(|| {
            problem(
                ConfigErrorKind::MissingKey,
                "strategy type RATE_LIMITING without `rateLimitingSampling`",
                "rateLimitingSampling".into(),
            )
        })?;
        Some(rate_policy(r, "rateLimitingSampling")?)
    } else {
        None
    };
    match (&raw.operation_sampling, top_rate) {
        (Some(ops), top_rate) => per_operation(ops, top_rate),
        (None, Some(policy)) => Ok(Mapped {
            policy,
            rules: Vec::new(),
            cap: None,
        }),
        (None, None) => {
            let p = raw.probabilistic_sampling.as_ref().ok_or_else(|| {
                problem(
                    ConfigErrorKind::MissingKey,
                    "strategy type PROBABILISTIC without `probabilisticSampling`",
                    "probabilisticSampling".into(),
                )
            })?;
            Ok(Mapped {
                policy: probability_policy(p, "probabilisticSampling")?,
                rules: Vec::new(),
                cap: None,
            })
        }
    }
}

/// Whether the strategy type is RATE_LIMITING (else PROBABILISTIC, its default).
fn is_rate_limiting(strategy_type: Option<&StrategyType>) -> Result<bool, Problem> {
    match strategy_type {
        None | Some(StrategyType::Number(0)) => Ok(false),
        Some(StrategyType::Number(1)) => Ok(true),
        Some(StrategyType::Name(n)) if n.eq_ignore_ascii_case("PROBABILISTIC") => Ok(false),
        Some(StrategyType::Name(n)) if n.eq_ignore_ascii_case("RATE_LIMITING") => Ok(true),
        Some(other) => {
            let shown = match other {
                StrategyType::Number(n) => n.to_string(),
                StrategyType::Name(n) => format!("{n:?}"),
            };
            Err(problem(
                ConfigErrorKind::UnknownType,
                format!("unknown strategy type {shown}; expected \"PROBABILISTIC\" (0) or \"RATE_LIMITING\" (1)"),
                "strategyType".into(),
            ))
        }
    }
}

/// Per-operation strategies: a rule per operation, the default probability (with the
/// default lower bound) for every other, under a cap from the upper bound and a
/// top-level rate limit.
fn per_operation(ops: &PerOperation, top_rate: Option<Policy>) -> Result<Mapped, Problem> {
    let default = values::probability(ops.default_sampling_probability.unwrap_or(0.0))
        .map_err(|e| (e, format!("{PER_OPERATION}.defaultSamplingProbability")))?;
    let lower_bound = lower_bound(ops)?;
    let upper = bound(
        ops.default_upper_bound_traces_per_second,
        "defaultUpperBoundTracesPerSecond",
    )?;
    let cap = match top_rate {
        // A top-level rate limit of 0 keeps nothing: no cap expresses that.
        Some(Policy::Probability(_)) => {
            return Ok(Mapped {
                policy: Policy::Probability(0.0),
                rules: vec![],
                cap: None,
            })
        }
        top_rate => cap(upper, top_rate)?,
    };
    let listed = ops.per_operation_strategies.as_deref().unwrap_or_default();
    Ok(Mapped {
        policy: at_least(Policy::Probability(default), lower_bound),
        rules: operation_rules(listed, lower_bound)?,
        cap,
    })
}

/// A default bound of the per-operation strategies: 0 (or absent) is none.
fn bound(v: Option<f64>, key: &str) -> Result<Option<f64>, Problem> {
    match v.unwrap_or(0.0) {
        0.0 => Ok(None),
        v if v.is_finite() && v > 0.0 => Ok(Some(v)),
        v => Err(problem(
            ConfigErrorKind::InvalidLimit,
            format!("{v} is not a rate; use 0 (none) or a positive number of traces per second"),
            format!("{PER_OPERATION}.{key}"),
        )),
    }
}

/// The default lower bound, as a limiter of its own.
fn lower_bound(ops: &PerOperation) -> Result<Option<LimitSpec>, Problem> {
    let key = "defaultLowerBoundTracesPerSecond";
    bound(ops.default_lower_bound_traces_per_second, key)?
        .map(|rate| {
            values::rate(rate)
                .map(|limit| LimitSpec::local(limit, Algorithm::FixedWindow))
                .map_err(|e| (e, format!("{PER_OPERATION}.{key}")))
        })
        .transpose()
}

/// The service cap: the upper bound and a top-level rate limit, the smaller.
fn cap(upper: Option<f64>, top_rate: Option<Policy>) -> Result<Option<LimitSpec>, Problem> {
    let top = match top_rate {
        Some(Policy::Limit(l)) => Some(l.limit.per_second_rate()),
        _ => None,
    };
    let rate = match (upper, top) {
        (Some(u), Some(t)) => u.min(t),
        (Some(r), None) | (None, Some(r)) => r,
        (None, None) => return Ok(None),
    };
    let limit = values::rate(rate).map_err(|e| {
        (
            e,
            format!("{PER_OPERATION}.defaultUpperBoundTracesPerSecond"),
        )
    })?;
    Ok(Some(LimitSpec::local(limit, Algorithm::FixedWindow)))
}

/// A probability gets the lower bound, as in Jaeger's guaranteed-throughput sampler:
/// each listed operation its own limiter, the default one limiter for every other
/// operation.
fn at_least(policy: Policy, lower_bound: Option<LimitSpec>) -> Policy {
    match (policy, lower_bound) {
        (Policy::Probability(probability), Some(lower_bound)) => Policy::AtLeast {
            probability,
            lower_bound,
        },
        (policy, _) => policy,
    }
}

/// A rule per listed operation, each operation listed once.
fn operation_rules(
    listed: &[Operation],
    lower_bound: Option<LimitSpec>,
) -> Result<Vec<Rule>, Problem> {
    let rules = listed
        .iter()
        .enumerate()
        .map(|(i, op)| operation_rule(op, &operation_key(i), lower_bound))
        .collect::<Result<Vec<_>, _>>()?;
    names::distinct(rules.iter().map(|r| r.name.as_str())).map_err(|repeat| {
        let key = format!("{}.operation", operation_key(repeat.at));
        (repeat.problem(Listed::Operation), key)
    })?;
    Ok(rules)
}

/// The key path of the `i`th listed operation.
fn operation_key(i: usize) -> String {
    format!("{PER_OPERATION}.perOperationStrategies[{i}]")
}

/// One operation, at key path `here`: a rule matching its name exactly.
fn operation_rule(
    op: &Operation,
    here: &str,
    lower_bound: Option<LimitSpec>,
) -> Result<Rule, Problem> {
    let name = op.operation.as_deref().unwrap_or_default();
    values::name("operation", name).map_err(|e| (e, format!("{here}.operation")))?;
    let policy =
        match (&op.probabilistic_sampling, &op.rate_limiting_sampling) {
            (Some(p), None) => at_least(
                probability_policy(p, &format!("{here}.probabilisticSampling"))?,
                lower_bound,
            ),
            (None, Some(r)) => rate_policy(r, &format!("{here}.rateLimitingSampling"))?,
            (Some(_), Some(_)) => return Err(problem(
                ConfigErrorKind::ConflictingKeys,
                "an operation takes `probabilisticSampling` or `rateLimitingSampling`, not both",
                here.to_owned(),
            )),
            (None, None) => {
                return Err(problem(
                    ConfigErrorKind::MissingKey,
                    "an operation needs `probabilisticSampling` or `rateLimitingSampling`",
                    here.to_owned(),
                ))
            }
        };
    Ok(Rule {
        name: name.to_owned(),
        named: true,
        span_name: Some(Pattern::literal(name)),
        kind: None,
        parent: None,
        attributes: Vec::new(),
        policy,
        floor: 0,
        inherited: false,
    })
}

/// A problem of `kind` at key path `key`.
fn problem(kind: ConfigErrorKind, message: impl Into<String>, key: String) -> Problem {
    (Invalid::new(kind, message), key)
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
            // A UTF-8 byte-order mark, as the file readers accept it.
            "\u{feff}{\"probabilisticSampling\": {\"samplingRate\": 0.25}}",
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

    /// Responses a poll may get wrong: (text, the error's kind, the key it names).
    const BAD_RESPONSES: &[(&str, ConfigErrorKind, &str)] = {
        use ConfigErrorKind::*;
        &[
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
        ]
    };

    #[test]
    fn bad_responses_are_typed_errors_naming_the_key() {
        for (text, kind, key) in BAD_RESPONSES {
            assert_eq!(error(text), (*kind, (*key).to_owned()), "{text}");
        }
        let e = parse("{\n  \"strategyType\": [", "svc", URL).err().unwrap();
        assert_eq!((e.kind(), e.line()), (ConfigErrorKind::Syntax, 2));
        assert!(e.to_string().starts_with(URL), "{e}");
    }
}
