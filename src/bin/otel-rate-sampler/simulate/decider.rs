//! What decides the offered spans: the rule a probe of a fresh sampler names, and its
//! policy.

use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::attributes::SAMPLER_RULE;
use otel_rate_sampler::summary::RulePolicy;
use otel_rate_sampler::{Algorithm, Limit, ManualClock, RuleBasedSampler, SamplingConfig};

use super::spans::{Span, KEEP_ID};
use crate::failure::Failure;

/// What decides the offered spans, as a probe of a fresh sampler showed.
#[derive(Clone, Debug)]
pub(super) enum Decider {
    /// Nothing is kept.
    Drop,
    /// The rule (or `default`) with this limit.
    Limit(String, Limit, Algorithm),
    /// The rule (or `default`) with this probability.
    Probability(String, f64),
    /// The rule (or `default`) with this probability and this lower bound (a fixed
    /// window).
    AtLeast(String, f64, Limit),
}

/// Asks a fresh sampler (its own clock, so every limiter has room) once: if it keeps
/// the span, the `sampler.rule` it records names the deciding rule.
pub(super) fn probe(
    config: &SamplingConfig,
    service: &str,
    span: &Span,
) -> Result<Decider, Failure> {
    let sampler = RuleBasedSampler::with_clock(config, service, ManualClock::new())?;
    let result =
        sampler.should_sample(None, KEEP_ID, &span.name, &span.kind, &span.attributes, &[]);
    if result.decision != SamplingDecision::RecordAndSample {
        return Ok(Decider::Drop);
    }
    let Some(name) = result
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == SAMPLER_RULE)
        .map(|kv| kv.value.as_str().into_owned())
    else {
        return Err(Failure::File(format!(
            "the sampler kept a span without {SAMPLER_RULE}"
        )));
    };
    let rules = config.effective_rules(service);
    // A rule may be named "default" too; the rule comes first, as in the sampler.
    let policy = rules
        .rules()
        .iter()
        .find(|r| r.name() == name)
        .map(|r| r.policy())
        .or(if name == "default" {
            rules.default()
        } else {
            None
        });
    Ok(match policy {
        Some(RulePolicy::Limit { limit, algorithm }) => Decider::Limit(name, limit, algorithm),
        Some(RulePolicy::Probability(p)) => Decider::Probability(name, p),
        Some(RulePolicy::AtLeast {
            probability,
            lower_bound,
        }) => Decider::AtLeast(name, probability, lower_bound),
        // Its probability follows the offered count, which the tick-wise model does
        // not make: say so rather than print a wrong table.
        Some(RulePolicy::Adaptive { .. }) => {
            return Err(Failure::File(format!(
                "rule {name:?} is adaptive, which simulate does not model yet (it keeps about, and at most, its limit per window); simulate a `rate` of the same value for the cap's bound"
            )))
        }
        _ => {
            return Err(Failure::File(format!(
                "the sampler kept a span by an unknown rule {name:?}"
            )))
        }
    })
}
