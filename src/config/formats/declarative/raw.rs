//! The wire types of a declarative configuration file, as serde reads them with their
//! positions, before anything is checked or built: the document, the 1.0 samplers, and
//! 1.1's composable samplers (`composite/development`), which take the same empty
//! mapping and ratio.

use serde::Deserialize;

use crate::config::formats::rule_file::RawFile;
use crate::config::formats::spanned::Spanned;

/// The parts of the file this crate reads; every other key is ignored.
#[derive(Deserialize)]
pub(super) struct RawDocument {
    pub(super) file_format: Option<Spanned<FileFormat>>,
    pub(super) tracer_provider: Option<RawTracerProvider>,
}

/// `file_format`, quoted as the schema asks (`"1.0"`) or not (`1.0`, a YAML number).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum FileFormat {
    Text(String),
    Number(f64),
}

#[derive(Deserialize)]
pub(super) struct RawTracerProvider {
    pub(super) sampler: Option<Spanned<RawSampler>>,
}

/// One sampler: a mapping with one key.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
// The samplers without options are read only to refuse keys they do not take.
#[allow(dead_code)]
pub(super) enum RawSampler {
    AlwaysOn(Option<Empty>),
    AlwaysOff(Option<Empty>),
    TraceIdRatioBased(Option<RawRatio>),
    ParentBased(Box<RawParentBased>),
    RateLimiting(Box<RawFile>),
    /// Schema 1.1: the composable samplers.
    #[serde(rename = "composite/development")]
    Composite(Box<Spanned<RawComposable>>),
}

/// The empty mapping (or nothing) the samplers without options take.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Empty {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRatio {
    pub(super) ratio: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParentBased {
    pub(super) root: Option<Spanned<RawSampler>>,
    pub(super) remote_parent_sampled: Option<Spanned<RawSampler>>,
    pub(super) remote_parent_not_sampled: Option<Spanned<RawSampler>>,
    pub(super) local_parent_sampled: Option<Spanned<RawSampler>>,
    pub(super) local_parent_not_sampled: Option<Spanned<RawSampler>>,
}

/// One composable sampler: a mapping with one key.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
// Without `composable` read only to be refused; the samplers without options are read
// only to refuse keys they do not take.
#[allow(dead_code)]
pub(crate) enum RawComposable {
    AlwaysOn(Option<Empty>),
    AlwaysOff(Option<Empty>),
    Probability(Option<RawRatio>),
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
