//! The wire types of a Jaeger sampling strategy response: its JSON as protobuf's JSON
//! mapping writes it (camelCase, enums by name) or as Thrift's did (snake_case, enums
//! by number), decoded and nothing more. What the values mean is the mapping's
//! ([`response`](super::response)).

use serde::Deserialize;

use crate::config::error::{ConfigError, ConfigErrorKind, Pos};

/// Decodes a strategy response; `source` (the URL asked) names it in errors. A UTF-8
/// byte-order mark is skipped, as the file readers skip it.
pub(super) fn decode(text: &str, source: &str) -> Result<Response, ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    serde_json::from_str(text).map_err(|e| {
        let pos = Pos {
            line: e.line(),
            column: e.column(),
        };
        let message = e.to_string();
        let message = message.split(" at line ").next().unwrap_or_default();
        ConfigErrorKind::Syntax
            .error(
                source,
                format!("not a Jaeger sampling strategy response: {message}"),
            )
            .at(pos, "")
            .with_source(e)
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Response {
    #[serde(default, alias = "strategy_type")]
    pub(super) strategy_type: Option<StrategyType>,
    #[serde(default, alias = "probabilistic_sampling")]
    pub(super) probabilistic_sampling: Option<Probabilistic>,
    #[serde(default, alias = "rate_limiting_sampling")]
    pub(super) rate_limiting_sampling: Option<RateLimiting>,
    #[serde(default, alias = "operation_sampling")]
    pub(super) operation_sampling: Option<PerOperation>,
}

/// The enum as protobuf's JSON mapping writes it (a name) or as Thrift's did (a number).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum StrategyType {
    Number(i64),
    Name(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Probabilistic {
    /// Absent is protobuf's default, 0.
    #[serde(default, alias = "sampling_rate")]
    pub(super) sampling_rate: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RateLimiting {
    /// Absent is protobuf's default, 0. Jaeger declares an integer; a fraction is
    /// honoured.
    #[serde(default, alias = "max_traces_per_second")]
    pub(super) max_traces_per_second: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PerOperation {
    #[serde(default, alias = "default_sampling_probability")]
    pub(super) default_sampling_probability: Option<f64>,
    #[serde(default, alias = "default_lower_bound_traces_per_second")]
    pub(super) default_lower_bound_traces_per_second: Option<f64>,
    #[serde(default, alias = "default_upper_bound_traces_per_second")]
    pub(super) default_upper_bound_traces_per_second: Option<f64>,
    #[serde(default, alias = "per_operation_strategies")]
    pub(super) per_operation_strategies: Option<Vec<Operation>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Operation {
    #[serde(default)]
    pub(super) operation: Option<String>,
    #[serde(default, alias = "probabilistic_sampling")]
    pub(super) probabilistic_sampling: Option<Probabilistic>,
    #[serde(default, alias = "rate_limiting_sampling")]
    pub(super) rate_limiting_sampling: Option<RateLimiting>,
}
