//! The wire types of `composite/development`: each composable sampler as the file writes
//! it, read by serde with its positions, before anything is checked or built.

use serde::Deserialize;

use crate::config::formats::spanned::Spanned;

/// One composable sampler: a mapping with one key.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
// Without `composable` read only to be refused; the samplers without options are read
// only to refuse keys they do not take.
#[allow(dead_code)]
pub(crate) enum RawComposable {
    AlwaysOn(Option<super::super::Empty>),
    AlwaysOff(Option<super::super::Empty>),
    Probability(Option<super::super::RawRatio>),
    ParentThreshold(Box<RawParentThreshold>),
    RuleBased(Option<RawRuleBased>),
    #[serde(rename = "rate_limiting/otel_rate_sampler")]
    RateLimiting(Box<RawRateLimiting>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(feature = "composable"), allow(dead_code))]
pub(crate) struct RawParentThreshold {
    pub(crate) root: Spanned<RawComposable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(feature = "composable"), allow(dead_code))]
pub(crate) struct RawRuleBased {
    pub(crate) rules: Option<Vec<Spanned<RawRule>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(feature = "composable"), allow(dead_code))]
pub(crate) struct RawRule {
    pub(crate) attribute_values: Option<RawAttributeValues>,
    pub(crate) attribute_patterns: Option<RawAttributePatterns>,
    pub(crate) span_kinds: Option<Vec<Spanned<String>>>,
    pub(crate) parent: Option<Vec<Spanned<String>>>,
    pub(crate) sampler: Spanned<RawComposable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(feature = "composable"), allow(dead_code))]
pub(crate) struct RawAttributeValues {
    pub(crate) key: String,
    pub(crate) values: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(feature = "composable"), allow(dead_code))]
pub(crate) struct RawAttributePatterns {
    pub(crate) key: String,
    pub(crate) included: Option<Vec<String>>,
    pub(crate) excluded: Option<Vec<String>>,
}

/// Ours: `rate_limiting/otel_rate_sampler: {limit, window, paced, sampler}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(feature = "composable"), allow(dead_code))]
pub(crate) struct RawRateLimiting {
    pub(crate) limit: Option<Spanned<i64>>,
    pub(crate) window: Option<Spanned<String>>,
    /// `false` for every permit available from the window's start (default: paced).
    pub(crate) paced: Option<Spanned<bool>>,
    pub(crate) sampler: Option<Spanned<RawComposable>>,
}
