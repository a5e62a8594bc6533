//! The OpenTelemetry declarative configuration file (feature `yaml`): a YAML file with
//! `file_format: "1.0"`, named by `OTEL_CONFIG_FILE`, whose `tracer_provider.sampler`
//! is built into a [`DeclarativeSampler`]. This crate's sampler is the plugin key
//! `rate_limiting`, whose value is a rule file in YAML. See `examples/otel-config.yaml`.

use std::fmt;
use std::ops::Range;
use std::path::Path;

use opentelemetry::trace::{Link, SpanContext, SpanKind, TraceContextExt, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SamplingResult, ShouldSample};
use serde::Deserialize;

use super::env::{redis_urls, resolve_service, OTEL_CONFIG_FILE};
use super::error::{ConfigError, ConfigErrorKind};
use super::from_toml::{Ctx, RawFile};
use super::from_yaml::parse;
use super::model::SamplingConfig;
use super::rule_based::RuleBasedSampler;
use super::spanned::Spanned;
use super::validate;
use crate::sampler::env::{default_limit, var, DEFAULT_TRACES_PER_SECOND, UNKNOWN_SERVICE};
use crate::sampler::erase_threshold;
use crate::sampler::RemoteParents;

/// The plugin key of this crate's sampler in a declarative configuration file.
pub(crate) const PLUGIN_KEY: &str = "rate_limiting";

/// The parts of the file this crate reads; every other key is ignored.
#[derive(Deserialize)]
struct RawDocument {
    file_format: Option<Spanned<FileFormat>>,
    tracer_provider: Option<RawTracerProvider>,
}

/// `file_format`, quoted as the schema asks (`"1.0"`) or not (`1.0`, a YAML number).
#[derive(Deserialize)]
#[serde(untagged)]
enum FileFormat {
    Text(String),
    Number(f64),
}

#[derive(Deserialize)]
struct RawTracerProvider {
    sampler: Option<Spanned<RawSampler>>,
}

/// One sampler: a mapping with one key.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
// The samplers without options are read only to refuse keys they do not take.
#[allow(dead_code)]
enum RawSampler {
    AlwaysOn(Option<Empty>),
    AlwaysOff(Option<Empty>),
    TraceIdRatioBased(Option<RawRatio>),
    ParentBased(Box<RawParentBased>),
    RateLimiting(Box<RawFile>),
}

/// The empty mapping (or nothing) the samplers without options take.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRatio {
    ratio: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParentBased {
    root: Option<Spanned<RawSampler>>,
    remote_parent_sampled: Option<Spanned<RawSampler>>,
    remote_parent_not_sampled: Option<Spanned<RawSampler>>,
    local_parent_sampled: Option<Spanned<RawSampler>>,
    local_parent_not_sampled: Option<Spanned<RawSampler>>,
}

/// A built sampler node.
#[derive(Clone, Debug)]
enum Node {
    /// `always_on`, `always_off`, `trace_id_ratio_based`: the SDK's own.
    Sdk(Sampler),
    /// `rate_limiting`.
    RateLimiting(RuleBasedSampler),
    /// `parent_based`.
    ParentBased(Box<Branches>),
}

#[derive(Clone, Debug)]
struct Branches {
    root: Node,
    remote_parent_sampled: Node,
    remote_parent_not_sampled: Node,
    local_parent_sampled: Node,
    local_parent_not_sampled: Node,
}

/// The sampler an OpenTelemetry declarative configuration file describes (feature
/// `yaml`): the standard samplers (`always_on`, `always_off`, `trace_id_ratio_based:
/// {ratio}`, `parent_based: {root, remote_parent_sampled, remote_parent_not_sampled,
/// local_parent_sampled, local_parent_not_sampled}`) and this crate's plugin
/// `rate_limiting`, anywhere a sampler goes. Install it with
/// `SdkTracerProvider::builder().with_sampler(sampler)`.
///
/// ```yaml
/// file_format: "1.0"
/// tracer_provider:
///   sampler:
///     parent_based:
///       root:
///         rate_limiting:          # a rule file, in YAML (see SamplingConfig)
///           default: { rate: 100.0 }
/// ```
///
/// * **What is read.** `file_format` (1.x; another major version is an error) and
///   `tracer_provider.sampler`; every other section of the file (exporters, resource,
///   propagators, ...) is ignored: this crate builds a sampler, not an SDK. With no
///   `tracer_provider.sampler`, the specification's default, `parent_based` with an
///   `always_on` root.
/// * **`rate_limiting`** takes the keys of a YAML rule file (`default`, `service`,
///   `fleet`; see [`SamplingConfig`]), applied for the service the sampler is built
///   for. As a `parent_based` root (or the top-level sampler) it decides roots as a
///   [`RuleBasedSampler`] does. In another `parent_based` branch it decides each span of
///   that branch as if it started a trace (its rules see the parent origin `none`),
///   keeping the parent's trace state.
/// * **Standard samplers** are the SDK's (`Sampler::AlwaysOn`, `AlwaysOff`,
///   `TraceIdRatioBased`); `parent_based` branches default as the specification says
///   (`root`: `always_on`; `*_parent_sampled`: `always_on`; `*_parent_not_sampled`:
///   `always_off`), and keep the whole result of the branch that decides (attributes and
///   trace state), unlike the SDK's `Sampler::ParentBased`.
/// * **Errors** name the file, line, column and key: an unknown sampler key (such as
///   `xray`, or a typo), a bad `file_format`, a ratio outside `[0, 1]`, and every
///   mistake in a `rate_limiting` block.
///
/// Clones share every limiter.
#[derive(Clone, Debug)]
pub struct DeclarativeSampler {
    root: Node,
}

impl DeclarativeSampler {
    /// Loads the declarative configuration file at `path`, for `service` (empty: the
    /// environment's service name, as [`RuleBasedSampler::from_env`] finds it).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the file, line, column and key of the first mistake.
    pub fn from_path(path: impl AsRef<Path>, service: &str) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = super::model::read_file(path, &file)?;
        Self::from_yaml_str(&text, &file, service)
    }

    /// Parses a declarative configuration (`file` names it in errors), for `service`
    /// (empty: the environment's service name).
    ///
    /// ```
    /// use opentelemetry_sdk::trace::SdkTracerProvider;
    /// use otel_rate_sampler::DeclarativeSampler;
    ///
    /// let sampler = DeclarativeSampler::from_yaml_str(r#"
    /// file_format: "1.0"
    /// tracer_provider:
    ///   sampler:
    ///     parent_based:
    ///       root:
    ///         rate_limiting:
    ///           default: { rate: 100.0 }
    /// "#, "otel-config.yaml", "checkout")?;
    /// let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
    /// # Ok::<(), otel_rate_sampler::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_path`](Self::from_path).
    pub fn from_yaml_str(text: &str, file: &str, service: &str) -> Result<Self, ConfigError> {
        Self::from_yaml_with(text, file, service, &|name| std::env::var(name).ok())
    }

    fn from_yaml_with(
        text: &str,
        file: &str,
        service: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let ctx = Ctx::new(text, file);
        let Some(sampler) = read(&ctx)? else {
            return Ok(Self {
                root: Node::ParentBased(Box::new(Branches::with_root(Node::Sdk(
                    Sampler::AlwaysOn,
                )))),
            });
        };
        let service = resolve_service(service, lookup)?;
        let build = Build {
            ctx: &ctx,
            service: &service,
            redis: redis_urls(lookup),
        };
        Ok(Self {
            root: build.node(&sampler, "tracer_provider.sampler")?,
        })
    }

    /// The sampler the file named by `OTEL_CONFIG_FILE` describes (its fleet-scoped limits
    /// use `OTEL_RATE_SAMPLER_REDIS` if set), for `service` (empty:
    /// the environment's service name); `Ok(None)` when the variable is unset or empty.
    ///
    /// # Errors
    ///
    /// As [`from_path`](Self::from_path).
    pub fn from_env(service: &str) -> Result<Option<Self>, ConfigError> {
        Self::from_lookup(service, |name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup`.
    ///
    /// # Errors
    ///
    /// As [`from_path`](Self::from_path).
    pub fn from_lookup(
        service: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        let Some(path) = var(&lookup, OTEL_CONFIG_FILE) else {
            return Ok(None);
        };
        let file = path.clone();
        let text = super::model::read_file(path.as_ref(), &file)?;
        Self::from_yaml_with(&text, &file, service, &lookup).map(Some)
    }
}

impl DeclarativeSampler {
    /// Like [`from_env`](Self::from_env), but never fails: a problem is logged as a
    /// `tracing` warning (target `otel_rate_sampler`; the same message at most once a
    /// minute) and the sampler falls back to
    /// [`DEFAULT_TRACES_PER_SECOND`](super::env::DEFAULT_TRACES_PER_SECOND) for the
    /// traces that start here, following remote parents (as
    /// [`RuleBasedSampler::from_env_lossy`] does). `None` when `OTEL_CONFIG_FILE` is
    /// unset or empty.
    pub fn from_env_lossy(service: &str) -> Option<Self> {
        Self::from_lookup_lossy(
            service,
            |name| std::env::var(name).ok(),
            |e| {
                super::log::warn(&format!(
                    "{e}; falling back to {DEFAULT_TRACES_PER_SECOND} traces per second"
                ))
            },
        )
    }

    /// Like [`from_env_lossy`](Self::from_env_lossy), reading variables through
    /// `lookup` and reporting each problem to `warn` instead of the log.
    pub fn from_lookup_lossy(
        service: &str,
        lookup: impl Fn(&str) -> Option<String>,
        mut warn: impl FnMut(&ConfigError),
    ) -> Option<Self> {
        match Self::from_lookup(service, &lookup) {
            Ok(sampler) => sampler,
            Err(e) => {
                warn(&e);
                let config = SamplingConfig::single_limit(
                    default_limit(),
                    RemoteParents::Follow,
                    "fallback",
                );
                let service = resolve_service(service, &lookup).unwrap_or_else(|e| {
                    warn(&e);
                    UNKNOWN_SERVICE.to_owned()
                });
                let sampler = RuleBasedSampler::new(&config, &service).ok()?;
                Some(Self {
                    root: Node::RateLimiting(sampler),
                })
            }
        }
    }
}

impl Branches {
    /// The specification's defaults around `root`.
    fn with_root(root: Node) -> Self {
        Self {
            root,
            remote_parent_sampled: Node::Sdk(Sampler::AlwaysOn),
            remote_parent_not_sampled: Node::Sdk(Sampler::AlwaysOff),
            local_parent_sampled: Node::Sdk(Sampler::AlwaysOn),
            local_parent_not_sampled: Node::Sdk(Sampler::AlwaysOff),
        }
    }
}

/// Reads `file_format` and `tracer_provider.sampler` (`None` when there is no sampler).
fn read(ctx: &Ctx<'_>) -> Result<Option<Spanned<RawSampler>>, ConfigError> {
    let doc: RawDocument = parse(ctx.text, ctx.file).map_err(|e| {
        // serde's words for a sampler mapping without exactly one key.
        let message = e.to_string();
        if message.contains("externally tagged enum") || message.contains("after enum variant") {
            e.with_message(format!("a sampler is a mapping with exactly one key: always_on, always_off, trace_id_ratio_based, parent_based or {PLUGIN_KEY}"))
        } else {
            e
        }
    })?;
    let Some(format) = doc.file_format else {
        return Err(ctx.new_error(
            ConfigErrorKind::MissingKey,
            0..0,
            "file_format",
            "a declarative configuration file starts with `file_format: \"1.0\"`".into(),
        ));
    };
    let text = match format.get_ref() {
        FileFormat::Text(t) => t.trim().to_owned(),
        FileFormat::Number(n) => format!("{n:?}"),
    };
    let major = text.split('.').next().unwrap_or_default();
    if major != "1" || text.split('.').count() > 2 {
        return Err(ctx.new_error(
            ConfigErrorKind::UnknownValue,
            format.span(),
            "file_format",
            format!(
                "file_format {text:?} is not one this crate reads; use \"1.0\" (the 1.x schema)"
            ),
        ));
    }
    Ok(doc.tracer_provider.and_then(|t| t.sampler))
}

/// Builds nodes for one service, with the file's context for errors.
struct Build<'a> {
    ctx: &'a Ctx<'a>,
    service: &'a str,
    /// [`OTEL_RATE_SAMPLER_REDIS`](super::env::OTEL_RATE_SAMPLER_REDIS), replacing the
    /// rule files' `fleet.redis`.
    redis: Option<Vec<String>>,
}

impl Build<'_> {
    fn node(&self, raw: &Spanned<RawSampler>, path: &str) -> Result<Node, ConfigError> {
        Ok(match raw.get_ref() {
            RawSampler::AlwaysOn(_) => Node::Sdk(Sampler::AlwaysOn),
            RawSampler::AlwaysOff(_) => Node::Sdk(Sampler::AlwaysOff),
            RawSampler::TraceIdRatioBased(r) => {
                let ratio = match r.as_ref().and_then(|r| r.ratio.as_ref()) {
                    Some(ratio) => self.ctx.check(
                        ratio,
                        format!("{path}.trace_id_ratio_based.ratio"),
                        |p| validate::probability(*p),
                    )?,
                    None => 1.0,
                };
                Node::Sdk(Sampler::TraceIdRatioBased(ratio))
            }
            RawSampler::ParentBased(p) => {
                let path = format!("{path}.parent_based");
                let branch = |raw: &Option<Spanned<RawSampler>>, name: &str, default: Node| {
                    raw.as_ref()
                        .map_or(Ok(default), |raw| self.node(raw, &format!("{path}.{name}")))
                };
                let defaults = Branches::with_root(Node::Sdk(Sampler::AlwaysOn));
                Node::ParentBased(Box::new(Branches {
                    root: branch(&p.root, "root", defaults.root)?,
                    remote_parent_sampled: branch(
                        &p.remote_parent_sampled,
                        "remote_parent_sampled",
                        defaults.remote_parent_sampled,
                    )?,
                    remote_parent_not_sampled: branch(
                        &p.remote_parent_not_sampled,
                        "remote_parent_not_sampled",
                        defaults.remote_parent_not_sampled,
                    )?,
                    local_parent_sampled: branch(
                        &p.local_parent_sampled,
                        "local_parent_sampled",
                        defaults.local_parent_sampled,
                    )?,
                    local_parent_not_sampled: branch(
                        &p.local_parent_not_sampled,
                        "local_parent_not_sampled",
                        defaults.local_parent_not_sampled,
                    )?,
                }))
            }
            RawSampler::RateLimiting(file) => {
                let config = self.ctx.config(file, self.redis.as_deref()).map_err(|e| {
                    e.in_block(&format!("{path}.{PLUGIN_KEY}"), self.ctx.pos(raw.span()))
                })?;
                Node::RateLimiting(RuleBasedSampler::from_env_config(
                    &config,
                    self.service,
                    self.redis.clone(),
                )?)
            }
        })
    }
}

/// The `rate_limiting` rule file of a declarative configuration, for
/// [`SamplingConfig::from_path`]: the first in document order (`root` before the other
/// `parent_based` branches).
pub(crate) fn rate_limiting_config(
    text: &str,
    file: &str,
    redis: Option<&[String]>,
) -> Result<SamplingConfig, ConfigError> {
    /// The first `rate_limiting` block under `raw` (at `path`): the block, its path and
    /// its span.
    fn first<'a>(
        raw: &'a Spanned<RawSampler>,
        path: &str,
    ) -> Option<(&'a RawFile, String, Range<usize>)> {
        match raw.get_ref() {
            RawSampler::RateLimiting(file) => {
                Some((file, format!("{path}.{PLUGIN_KEY}"), raw.span()))
            }
            RawSampler::ParentBased(p) => [
                (&p.root, "root"),
                (&p.remote_parent_sampled, "remote_parent_sampled"),
                (&p.remote_parent_not_sampled, "remote_parent_not_sampled"),
                (&p.local_parent_sampled, "local_parent_sampled"),
                (&p.local_parent_not_sampled, "local_parent_not_sampled"),
            ]
            .into_iter()
            .find_map(|(branch, name)| {
                first(branch.as_ref()?, &format!("{path}.parent_based.{name}"))
            }),
            _ => None,
        }
    }
    let ctx = Ctx::new(text, file);
    let sampler = read(&ctx)?;
    match sampler
        .as_ref()
        .and_then(|s| first(s, "tracer_provider.sampler"))
    {
        Some((raw, path, span)) => ctx
            .config(raw, redis)
            .map_err(|e| e.in_block(&path, ctx.pos(span))),
        None => Err(ctx.new_error(
            ConfigErrorKind::MissingKey,
            sampler.map_or(0..0, |s| s.span()),
            "tracer_provider.sampler",
            format!("the file's sampler has no `{PLUGIN_KEY}` sampler, so no rules to read; put one under tracer_provider.sampler (or a parent_based branch of it)"),
        )),
    }
}

/// Whether YAML `text` is a declarative configuration file: it has a top-level
/// `file_format` key.
pub(crate) fn is_declarative(text: &str) -> bool {
    text.lines().any(|line| {
        // A UTF-8 byte order mark may open the first line.
        line.trim_start_matches('\u{feff}')
            .strip_prefix("file_format")
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
    })
}

impl ShouldSample for DeclarativeSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        self.root
            .sample(parent_context, trace_id, name, span_kind, attributes, links)
    }
}

impl Node {
    fn sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        match self {
            Node::Sdk(s) => {
                s.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
            }
            Node::RateLimiting(s) => {
                s.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
            }
            Node::ParentBased(b) => {
                let span = parent_context.map(|cx| cx.span());
                let parent = span
                    .as_ref()
                    .map(|s| s.span_context())
                    .filter(|sc| sc.is_valid());
                let Some(parent) = parent else {
                    return b.root.sample(
                        parent_context,
                        trace_id,
                        name,
                        span_kind,
                        attributes,
                        links,
                    );
                };
                let branch = match (parent.is_remote(), parent.is_sampled()) {
                    (true, true) => &b.remote_parent_sampled,
                    (true, false) => &b.remote_parent_not_sampled,
                    (false, true) => &b.local_parent_sampled,
                    (false, false) => &b.local_parent_not_sampled,
                };
                branch.sample_in_branch(
                    parent,
                    parent_context,
                    trace_id,
                    name,
                    span_kind,
                    attributes,
                    links,
                )
            }
        }
    }

    /// Samples a span with a valid `parent` in a `parent_based` branch: a rate limiter
    /// decides it as if it started a trace, keeping the parent's trace state.
    #[allow(clippy::too_many_arguments)] // `should_sample`'s own, and the parent
    fn sample_in_branch(
        &self,
        parent: &SpanContext,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        match self {
            Node::RateLimiting(s) => {
                let mut result =
                    s.should_sample(None, trace_id, name, span_kind, attributes, links);
                result.trace_state = match result.decision {
                    SamplingDecision::RecordAndSample => erase_threshold(parent.trace_state()),
                    _ => parent.trace_state().clone(),
                };
                result
            }
            _ => self.sample(parent_context, trace_id, name, span_kind, attributes, links),
        }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Sdk(Sampler::AlwaysOn) => f.write_str("always_on"),
            Node::Sdk(Sampler::AlwaysOff) => f.write_str("always_off"),
            Node::Sdk(Sampler::TraceIdRatioBased(r)) => write!(f, "trace_id_ratio_based({r})"),
            Node::Sdk(other) => write!(f, "{other:?}"),
            Node::RateLimiting(_) => f.write_str(PLUGIN_KEY),
            Node::ParentBased(b) => write!(
                f,
                "parent_based(root: {}, remote_parent_sampled: {}, remote_parent_not_sampled: {}, local_parent_sampled: {}, local_parent_not_sampled: {})",
                b.root,
                b.remote_parent_sampled,
                b.remote_parent_not_sampled,
                b.local_parent_sampled,
                b.local_parent_not_sampled
            ),
        }
    }
}

impl fmt::Display for DeclarativeSampler {
    /// The sampler tree, on one line: `parent_based(root: rate_limiting,
    /// remote_parent_sampled: always_on, ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.root.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanId, TraceFlags, TraceState};

    use super::*;

    fn load(text: &str) -> Result<DeclarativeSampler, ConfigError> {
        DeclarativeSampler::from_yaml_with(text, "otel.yaml", "checkout", &|_| None)
    }

    fn decide(s: &DeclarativeSampler, parent: Option<&Context>) -> SamplingDecision {
        s.should_sample(
            parent,
            TraceId::from(1u128),
            "op",
            &SpanKind::Server,
            &[],
            &[],
        )
        .decision
    }

    fn parent(remote: bool, sampled: bool) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let sc = SpanContext::new(
            TraceId::from(5u128),
            SpanId::from(6u64),
            flags,
            remote,
            TraceState::default(),
        );
        Context::new().with_remote_span_context(sc)
    }

    #[test]
    fn samplers_without_options_take_nothing_or_an_empty_mapping() {
        for text in [
            "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    always_off:\n",
            "file_format: 1.0\ntracer_provider:\n  sampler:\n    always_off: {}\n",
        ] {
            let s = load(text).unwrap();
            assert_eq!(decide(&s, None), SamplingDecision::Drop, "{text}");
        }
        let err =
            load("file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    always_on: { x: 1 }\n")
                .unwrap_err();
        assert_eq!(err.kind(), ConfigErrorKind::UnknownKey, "{err}");
    }

    #[test]
    fn no_sampler_is_the_specification_default() {
        let s = load("file_format: \"1.0\"\nresource: { attributes: [] }\n").unwrap();
        assert_eq!(decide(&s, None), SamplingDecision::RecordAndSample);
        assert_eq!(
            decide(&s, Some(&parent(true, false))),
            SamplingDecision::Drop
        );
        assert_eq!(
            s.to_string().split(',').next(),
            Some("parent_based(root: always_on")
        );
    }

    #[test]
    fn unknown_samplers_and_bad_formats_are_errors_with_positions() {
        let err = load("file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    parent_based:\n      root:\n        xray: {}\n")
            .unwrap_err();
        assert_eq!(
            (err.kind(), err.line(), err.key()),
            (
                ConfigErrorKind::UnknownValue,
                6,
                "tracer_provider.sampler.parent_based.root.xray"
            ),
            "{err}"
        );
        assert!(err.to_string().starts_with("otel.yaml:6:"), "{err}");
        let err = load("file_format: \"2.0\"\n").unwrap_err();
        assert_eq!(
            (err.kind(), err.line(), err.column(), err.key()),
            (ConfigErrorKind::UnknownValue, 1, 14, "file_format"),
            "{err}"
        );
        let err = load("tracer_provider: {}\n").unwrap_err();
        assert_eq!(
            (err.kind(), err.key()),
            (ConfigErrorKind::MissingKey, "file_format")
        );
        let err = load("file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    trace_id_ratio_based: { ratio: 1.5 }\n")
            .unwrap_err();
        assert_eq!(
            (err.kind(), err.line(), err.key()),
            (
                ConfigErrorKind::InvalidProbability,
                4,
                "tracer_provider.sampler.trace_id_ratio_based.ratio"
            ),
            "{err}"
        );
        let err = load("file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    rate_limiting:\n      default: { rate: -1 }\n")
            .unwrap_err();
        assert_eq!(
            (err.kind(), err.line(), err.column(), err.key()),
            (
                ConfigErrorKind::InvalidLimit,
                5,
                24,
                "tracer_provider.sampler.rate_limiting.default.rate"
            ),
            "{err}"
        );
        // The same key path through `SamplingConfig::from_path`'s reader, in a branch.
        let text = "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    parent_based:\n      remote_parent_sampled:\n        rate_limiting:\n          default: { rate: 0 }\n";
        let err = rate_limiting_config(text, "otel.yaml", None).unwrap_err();
        assert_eq!(
            err.key(),
            "tracer_provider.sampler.parent_based.remote_parent_sampled.rate_limiting.default.rate",
            "{err}"
        );
    }

    #[test]
    fn a_rate_limiter_in_a_parent_based_tree() {
        let s = load(
            "file_format: \"1.0\"
tracer_provider:
  sampler:
    parent_based:
      root:
        rate_limiting:
          default: { limit: 1, window: 1h }
      remote_parent_not_sampled:
        rate_limiting:
          default: { limit: 1, window: 1h }
      local_parent_sampled:
        always_off:
",
        )
        .unwrap();
        use SamplingDecision::{Drop, RecordAndSample as Keep};
        let cases = [
            // The root's own limiter: one per hour.
            (None, Keep),
            (None, Drop),
            // Remote parents that were not sampled: their own limiter, one per hour.
            (Some(parent(true, false)), Keep),
            (Some(parent(true, false)), Drop),
            // The defaults and the explicit branches.
            (Some(parent(true, true)), Keep),
            (Some(parent(false, true)), Drop),
            (Some(parent(false, false)), Drop),
        ];
        for (i, (cx, expected)) in cases.iter().enumerate() {
            assert_eq!(decide(&s, cx.as_ref()), *expected, "case {i}");
        }
    }

    #[test]
    fn a_sampler_is_one_key_and_a_nested_rule_file_error_points_into_the_file() {
        for text in [
            "file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    always_on:\n    always_off:\n",
            "file_format: \"1.0\"\ntracer_provider:\n  sampler: {}\n",
        ] {
            let err = load(text).unwrap_err();
            assert!(err.to_string().contains("exactly one key"), "{err}");
        }
        // A rule-file error: its key under the block's path, its position in the file.
        let err = load("file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    rate_limiting:\n      default: { rate: 1 }\n      service: [{ rate: 1 }]\n")
            .unwrap_err();
        assert_eq!(
            (err.kind(), err.key()),
            (
                ConfigErrorKind::MissingKey,
                "tracer_provider.sampler.rate_limiting.service[0].name"
            ),
            "{err}"
        );
        assert_eq!(err.line(), 6, "{err}");
        // An error with no position of its own (a missing key of the whole rule file)
        // takes the block's.
        let nowhere = ConfigError::new(
            ConfigErrorKind::MissingKey,
            "f",
            super::super::error::Pos::default(),
            "default",
            "m",
        );
        let start = super::super::error::Pos { line: 4, column: 5 };
        let err = nowhere.in_block("tracer_provider.sampler.rate_limiting", start);
        assert_eq!(
            (err.line(), err.column(), err.key()),
            (4, 5, "tracer_provider.sampler.rate_limiting.default")
        );
    }

    #[test]
    fn declarative_files_are_recognised_by_file_format() {
        assert!(is_declarative("# c\nfile_format: \"1.0\"\n"));
        assert!(is_declarative("file_format : 1.0\n"));
        assert!(!is_declarative("default:\n  rate: 1\n  # file_format: x\n"));
        assert!(!is_declarative("  file_format: 1\n"));
        assert!(is_declarative("\u{feff}file_format: \"1.0\"\n"));
    }
}
