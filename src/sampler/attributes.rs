//! The span attributes the samplers record on the roots they keep, by their own
//! decision, so a backend can tell how each trace was sampled (the Jaeger convention,
//! plus the rule's name).
//!
//! | attribute | value |
//! |---|---|
//! | [`SAMPLER_TYPE`] | [`RATELIMITING`], [`PROBABILISTIC`], [`ADAPTIVE`] or [`LOWERBOUND`] |
//! | [`SAMPLER_PARAM`] | the limit (or an adaptive sampler's cap, or a lower bound) in traces per second, or the probability (`f64`) |
//! | [`SAMPLER_RULE`] | the rule that decided (`default` when none matched); rule-based sampler only |

use std::sync::Arc;

use opentelemetry::{KeyValue, StringValue, Value};

/// The span attribute that says how a kept root was sampled.
pub const SAMPLER_TYPE: &str = "sampler.type";
/// The span attribute holding the limit in traces per second, or the probability.
pub const SAMPLER_PARAM: &str = "sampler.param";
/// The span attribute naming the rule that kept a root (`default` for the default).
pub const SAMPLER_RULE: &str = "sampler.rule";
/// The value of [`SAMPLER_TYPE`] for a root kept by a rate limit.
pub const RATELIMITING: &str = "ratelimiting";
/// The value of [`SAMPLER_TYPE`] for a root kept by a probability.
pub const PROBABILISTIC: &str = "probabilistic";
/// The value of [`SAMPLER_TYPE`] for a root kept by an adaptive probability under a cap
/// ([`AdaptiveSampler`](crate::AdaptiveSampler)); its probability is in the `th` of the
/// `ot` trace-state entry.
pub const ADAPTIVE: &str = "adaptive";
/// The value of [`SAMPLER_TYPE`] for a root its rule's probability refused and its lower
/// bound (`at_least`) kept, as Jaeger's guaranteed-throughput sampler names it; the
/// [`SAMPLER_PARAM`] is the lower bound in traces per second, the parameter of the
/// decision that kept it (Jaeger's clients differ here: some write the probability).
pub const LOWERBOUND: &str = "lowerbound";

/// What a root kept under a limit (or probability) of `param` records, built once per
/// limiter so a kept span only clones it.
pub(crate) fn kept(sampler_type: &'static str, param: f64) -> Vec<KeyValue> {
    vec![
        KeyValue::new(SAMPLER_TYPE, sampler_type),
        KeyValue::new(SAMPLER_PARAM, param),
    ]
}

/// What a root kept by a rule records: [`kept`] plus the rule's name, held as parts
/// so a keep builds its `Vec` directly (cloning a prepared `Vec<KeyValue>` element by
/// element went through each value's clone and cost a rule-based admit more than the
/// rest of its decision).
#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule-based sampler
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RuleAttributes {
    sampler_type: &'static str,
    param: f64,
    /// The rule's name, shared, so a keep clones a reference count, not the name.
    rule: StringValue,
}

#[cfg_attr(not(feature = "config"), allow(dead_code))] // used by the rule-based sampler
impl RuleAttributes {
    pub(crate) fn new(sampler_type: &'static str, param: f64, rule: &str) -> Self {
        Self {
            sampler_type,
            param,
            rule: Arc::<str>::from(rule).into(),
        }
    }

    /// The attributes of a kept span, in the order [`kept`] gives them, then
    /// [`SAMPLER_RULE`].
    #[inline]
    pub(crate) fn to_vec(&self) -> Vec<KeyValue> {
        vec![
            KeyValue::new(SAMPLER_TYPE, self.sampler_type),
            KeyValue::new(SAMPLER_PARAM, self.param),
            KeyValue::new(SAMPLER_RULE, Value::String(self.rule.clone())),
        ]
    }
}
