//! [`DeclarativeSampler`]: the sampler tree of an OpenTelemetry declarative
//! configuration file (feature `yaml`), built from what the reader in
//! `formats/declarative/` returns; `sample` is how the tree decides.

mod sample;

use std::fmt;
use std::path::Path;

use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SamplingResult, ShouldSample};

use crate::clock::{Clock, MonotonicClock};
use crate::config::error::ConfigError;
use crate::config::formats::declarative::{is_declarative, read_tree, Branches, Lookup, Node};
use crate::config::formats::{is_yaml_path, read_file};
use crate::config::model::SamplingConfig;
use crate::config::runtime::rule_based::RuleBasedSampler;
use crate::config::vars::{resolve_service, FleetEnv, OTEL_CONFIG_FILE};
use crate::limit::Limit;
use crate::sampler::env::{default_limit, var, DEFAULT_TRACES_PER_SECOND, UNKNOWN_SERVICE};
use crate::sampler::RemoteParents;

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
/// * **`composite/development`** (schema `file_format: "1.1"`, feature `composable`;
///   without it the key is a `MissingFeature` error): the specification's composable
///   samplers with the schema's keys, `always_on`, `always_off`, `probability:
///   {ratio}` (default 1), `parent_threshold: {root}` and `rule_based: {rules: [...]}`,
///   each rule with `attribute_values: {key, values}`, `attribute_patterns: {key,
///   included, excluded}`, `span_kinds`, `parent` (`none`, `remote`, `local`) and
///   `sampler`, built into a `CompositeSampler`. Ours, a
///   plugin component name: `rate_limiting/otel_rate_sampler: {limit, window, paced,
///   sampler}`, a `ComposableRateLimiting` of at most `limit` spans per `window`
///   (default `1s`; paced like every limit unless `paced: false`) of what `sampler`
///   (default `always_on`) keeps.
/// * **Environment variables** are substituted in scalar values (never in keys) before
///   the file is read, as the configuration specification's data model says:
///   `${NAME}` and `${env:NAME}` (an undefined or empty variable is the empty value,
///   YAML's null), `${NAME:-default}`, and `$$` for a literal `$`. The value's type is
///   resolved after substitution (`ratio: ${RATIO}` with `RATIO=0.25` is a float; a
///   quoted `"${RATIO}"` stays a string), a variable cannot inject YAML structure, and
///   substitution is not recursive. Variables are read from the process environment,
///   or through the lookup of [`from_lookup`](Self::from_lookup). In a flow collection
///   (`{ ... }`, `[ ... ]`) YAML reads `{` and `}` as indicators, so write references
///   in block style there.
/// * **Memory.** Every `rate_limiting` block's sampler and every composite rate limiter
///   is built, so the memory budget (see [`SamplingConfig`]: the largest a block's
///   `limits.memory_budget` sets, else 128 MiB) holds them together, as built for the
///   service: a file over it is a [`MemoryBudget`](crate::ConfigErrorKind::MemoryBudget)
///   error at the blocks' largest limiter (when the blocks alone are over), else at the
///   composite rate limiter that crosses it (each takes about 9.5 KiB, mostly its
///   decision counters), found before any limiter is allocated.
/// * **Errors** name the file, line, column and key: an invalid substitution reference
///   (`${1A}`, `${A:?x}`), an unknown sampler key (such as
///   `xray`, or a typo), a bad `file_format`, a ratio outside `[0, 1]`, and every
///   mistake in a `rate_limiting` block.
///
/// Clones share every limiter. The limiters read the monotonic clock, or the clock
/// given to [`from_path_with_clock`](Self::from_path_with_clock).
#[derive(Clone, Debug)]
pub struct DeclarativeSampler<C: Clock = MonotonicClock> {
    root: Node<RuleBasedSampler<C>>,
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
        let text = read_file(path, &file)?;
        Self::from_yaml_str(&text, &file, service)
    }

    /// Like [`from_path`](Self::from_path), but `Ok(None)` for a file that is not a
    /// declarative configuration file: not YAML (by its extension, `.yaml` or `.yml`),
    /// or without a top-level `file_format` key (a YAML rule file). What a tool that
    /// takes either kind of file asks first.
    ///
    /// # Errors
    ///
    /// As [`from_path`](Self::from_path), for a declarative configuration file.
    pub fn from_path_if_declarative(
        path: impl AsRef<Path>,
        service: &str,
    ) -> Result<Option<Self>, ConfigError> {
        let path = path.as_ref();
        if !is_yaml_path(path) {
            return Ok(None);
        }
        let file = path.display().to_string();
        let text = read_file(path, &file)?;
        if !is_declarative(&text) {
            return Ok(None);
        }
        Self::from_yaml_str(&text, &file, service).map(Some)
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
        lookup: Lookup<'_>,
    ) -> Result<Self, ConfigError> {
        Self::build(text, file, service, lookup, MonotonicClock::new())
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
        let text = read_file(path.as_ref(), &file)?;
        Self::from_yaml_with(&text, &file, service, &lookup).map(Some)
    }
}

impl<C: Clock + Clone> DeclarativeSampler<C> {
    /// As [`from_path`](DeclarativeSampler::from_path), with every limiter in the tree
    /// (the rule files' and the composite samplers' rate limiters) timed by `clock`: a
    /// [`ManualClock`](crate::ManualClock) replays a load in simulated time, as
    /// `otel-rate-sampler simulate` does.
    ///
    /// # Errors
    ///
    /// As [`from_path`](DeclarativeSampler::from_path).
    pub fn from_path_with_clock(
        path: impl AsRef<Path>,
        service: &str,
        clock: C,
    ) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = read_file(path, &file)?;
        Self::build(
            &text,
            &file,
            service,
            &|name| std::env::var(name).ok(),
            clock,
        )
    }

    fn build(
        text: &str,
        file: &str,
        service: &str,
        lookup: Lookup<'_>,
        clock: C,
    ) -> Result<Self, ConfigError> {
        let fleet = FleetEnv::read(lookup)?;
        let read = read_tree(text, file, service, fleet.urls.as_deref(), lookup, &clock)?;
        let Some((tree, service)) = read else {
            return Ok(Self {
                root: Node::ParentBased(Box::new(Branches::with_root(Node::Sdk(
                    Sampler::AlwaysOn,
                )))),
            });
        };
        // Every block's sampler is built: `read_tree` has held them and the composite
        // rate limiters to the budget together.
        let root = tree.try_map(&mut |block| {
            let config = block.config.clone().with_fleet_env(&fleet);
            RuleBasedSampler::build(&config, &service, clock.clone(), fleet.clone())
        })?;
        Ok(Self { root })
    }

    /// Whether a `rate_limiting` rule file decides the spans that start a trace (the
    /// file's sampler, or the `root` of its `parent_based`): what `simulate` models rule
    /// by rule.
    pub fn roots_decided_by_rules(&self) -> bool {
        match &self.root {
            Node::RateLimiting(_) => true,
            Node::ParentBased(b) => matches!(b.root, Node::RateLimiting(_)),
            _ => false,
        }
    }

    /// Whether the tree holds a `rate_limiting` rule file anywhere.
    pub fn has_rules(&self) -> bool {
        self.root.has_rate_limiting()
    }

    /// The limits of the `rate_limiting/otel_rate_sampler` rate limiters in its
    /// composite samplers (feature `composable`), the roots' first, each composite's in
    /// document order: the bounds a load against the file is measured by.
    pub fn composite_limits(&self) -> Vec<Limit> {
        self.root.composite_limits()
    }
}

impl DeclarativeSampler {
    /// Like [`from_env`](Self::from_env), but never fails: a problem is logged as a
    /// `tracing` warning (target `otel_rate_sampler`; the same message at most once a
    /// minute) and the sampler falls back to
    /// [`DEFAULT_TRACES_PER_SECOND`](crate::env::DEFAULT_TRACES_PER_SECOND) for the
    /// traces that start here, following remote parents (as
    /// [`RuleBasedSampler::from_env_lossy`] does). `None` when `OTEL_CONFIG_FILE` is
    /// unset or empty.
    pub fn from_env_lossy(service: &str) -> Option<Self> {
        Self::from_lookup_lossy(
            service,
            |name| std::env::var(name).ok(),
            |e| {
                crate::config::log::warn(&format!(
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

impl<C: Clock + Clone> ShouldSample for DeclarativeSampler<C> {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        sample::sample(
            &self.root,
            parent_context,
            trace_id,
            name,
            span_kind,
            attributes,
            links,
        )
    }
}

impl<C: Clock> fmt::Display for DeclarativeSampler<C> {
    /// The sampler tree, on one line: `parent_based(root: rate_limiting,
    /// remote_parent_sampled: always_on, ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.root.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceState};
    use opentelemetry_sdk::trace::SamplingDecision;

    use super::*;
    use crate::config::error::ConfigErrorKind;
    use crate::config::formats::declarative::rate_limiting_config;

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
    fn variables_are_substituted_in_values_before_they_are_read() {
        let env = |name: &str| match name {
            "RATIO" => Some("0.0".to_owned()),
            "LIMIT" => Some("1".to_owned()),
            "SERVICE" => Some("checkout".to_owned()),
            _ => None,
        };
        let text = "file_format: \"1.0\"
tracer_provider:
  sampler:
    parent_based:
      root:
        rate_limiting:
          default:
            limit: ${env:LIMIT}
            window: ${WINDOW:-1h}
          service:
            - name: ${SERVICE}
              rule:
                - name: $$health
                  span_name: op
                  probability: ${UNSET_PROBABILITY:-0.0}
      remote_parent_sampled:
        trace_id_ratio_based:
          ratio: ${RATIO}
";
        let s = DeclarativeSampler::from_yaml_with(text, "otel.yaml", "checkout", &env).unwrap();
        assert_eq!(
            s.to_string().split(", remote_parent_not").next(),
            Some(
                "parent_based(root: rate_limiting, remote_parent_sampled: trace_id_ratio_based(0)"
            )
        );
        // The rule `$health` (probability 0) drops `op`.
        assert_eq!(decide(&s, None), SamplingDecision::Drop);
        assert_eq!(
            decide(&s, Some(&parent(true, true))),
            SamplingDecision::Drop
        );
        // Without the variables `limit` is empty, so null: a `window` without a limit.
        let err = load(text).unwrap_err();
        assert_eq!(
            (err.line(), err.key()),
            (
                9,
                "tracer_provider.sampler.parent_based.root.rate_limiting.default.window"
            ),
            "{err}"
        );
        // An invalid reference: the file, its position and key.
        let err = load("file_format: \"1.0\"\ntracer_provider:\n  sampler:\n    trace_id_ratio_based:\n      ratio: ${RATIO:?unset}\n")
            .unwrap_err();
        assert_eq!(
            (err.kind(), err.line(), err.column(), err.key()),
            (
                ConfigErrorKind::Syntax,
                5,
                14,
                "tracer_provider.sampler.trace_id_ratio_based.ratio"
            ),
            "{err}"
        );
        assert!(err.to_string().starts_with("otel.yaml:5:14: "), "{err}");
    }

    #[cfg(feature = "composable")]
    const COMPOSITE: &str = "file_format: \"1.1\"
tracer_provider:
  sampler:
    composite/development:
      parent_threshold:
        root:
          rule_based:
            rules:
              - attribute_values:
                  key: url.path
                  values: [/health]
                sampler:
                  always_off:
              - span_kinds: [server]
                parent: [none]
                sampler:
                  rate_limiting/otel_rate_sampler:
                    limit: ${LIMIT}
                    window: 1h
                    sampler:
                      probability:
                        ratio: 1.0
              - attribute_patterns:
                  key: user
                  included: [\"a*\"]
                  excluded: [\"ab*\"]
                sampler:
                  always_on:
              - sampler:
                  probability:
                    ratio: 0.0
";

    #[cfg(feature = "composable")]
    #[test]
    fn a_composite_sampler_from_a_1_1_file_decides_and_writes_th() {
        let env = |name: &str| (name == "LIMIT").then(|| "1".to_owned());
        let s =
            DeclarativeSampler::from_yaml_with(COMPOSITE, "otel.yaml", "checkout", &env).unwrap();
        assert!(
            s.to_string()
                .starts_with("composite/development(parent_threshold(root: rule_based([url.path in [\"/health\"] => always_off, span_kinds [\"server\"], parent [\"none\"] => rate_limiting/otel_rate_sampler(limit: 1 per 3600s"),
            "{s}"
        );
        assert!(
            s.to_string().ends_with(
                "user ~ [\"a*\"] but not [\"ab*\"] => always_on, any span => probability(0)])))"
            ),
            "{s}"
        );
        let hour = std::time::Duration::from_secs(3600);
        // Paced, as every limit is unless `paced: false` says otherwise.
        assert_eq!(s.composite_limits(), [Limit::per_window(1, hour).unwrap()]);
        let unpaced =
            COMPOSITE.replace("window: 1h", "window: 1h\n                    paced: false");
        let u =
            DeclarativeSampler::from_yaml_with(&unpaced, "otel.yaml", "checkout", &env).unwrap();
        assert_eq!(
            u.composite_limits(),
            [Limit::per_window(1, hour).unwrap().unpaced()]
        );
        let ten = COMPOSITE.replace("${LIMIT}", "10");
        let t = DeclarativeSampler::from_yaml_with(&ten, "otel.yaml", "checkout", &env).unwrap();
        assert!(t.composite_limits()[0].is_paced());
        let ten_unpaced = unpaced.replace("${LIMIT}", "10");
        let t = DeclarativeSampler::from_yaml_with(&ten_unpaced, "otel.yaml", "checkout", &env)
            .unwrap();
        assert!(!t.composite_limits()[0].is_paced());
        assert!(!s.roots_decided_by_rules() && !s.has_rules());
        let decide = |kind: SpanKind, attributes: &[KeyValue]| {
            s.should_sample(None, TraceId::from(1u128), "op", &kind, attributes, &[])
        };
        let health = [KeyValue::new("url.path", "/health")];
        assert_eq!(
            decide(SpanKind::Server, &health).decision,
            SamplingDecision::Drop
        );
        // The rate limiter: one kept root an hour, with its threshold written.
        let kept = decide(SpanKind::Server, &[]);
        assert_eq!(kept.decision, SamplingDecision::RecordAndSample);
        assert_eq!(kept.trace_state.get("ot"), Some("th:0"), "{kept:?}");
        assert_eq!(
            decide(SpanKind::Server, &[]).decision,
            SamplingDecision::Drop
        );
        // Patterns: `a*` but not `ab*`; then the last rule (ratio 0).
        let user = |v: &'static str| [KeyValue::new("user", v)];
        assert_eq!(
            decide(SpanKind::Client, &user("ann")).decision,
            SamplingDecision::RecordAndSample
        );
        assert_eq!(
            decide(SpanKind::Client, &user("abe")).decision,
            SamplingDecision::Drop
        );
        // A child follows its parent's threshold.
        let kept_parent = parent(true, true);
        assert_eq!(
            decide_with(&s, &kept_parent),
            SamplingDecision::RecordAndSample
        );
    }

    #[cfg(feature = "composable")]
    fn decide_with(s: &DeclarativeSampler, cx: &Context) -> SamplingDecision {
        s.should_sample(
            Some(cx),
            TraceId::from(1u128),
            "op",
            &SpanKind::Client,
            &[],
            &[],
        )
        .decision
    }

    #[cfg(feature = "composable")]
    #[test]
    fn a_composite_window_below_the_clock_resolution_is_refused() {
        let env = |name: &str| (name == "LIMIT").then(|| "1".to_owned());
        let fast = COMPOSITE.replace("window: 1h", "window: 1ms");
        // A real clock whose readings move in 4 ms steps.
        let coarse = crate::clock::CachedClock::start(std::time::Duration::from_millis(4)).unwrap();
        let err = DeclarativeSampler::build(&fast, "otel.yaml", "checkout", &env, coarse.clone())
            .unwrap_err();
        assert_eq!(
            err.kind(),
            ConfigErrorKind::WindowBelowClockResolution,
            "{err}"
        );
        assert!(
            err.key()
                .ends_with("rate_limiting/otel_rate_sampler.window")
                && err.line() > 0,
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("window 1ms is shorter than the resolution of the sampler's clock, 4ms"),
            "{err}"
        );
        // A window of the clock's resolution is served.
        let ok = COMPOSITE.replace("window: 1h", "window: 4ms");
        DeclarativeSampler::build(&ok, "otel.yaml", "checkout", &env, coarse).unwrap();
    }

    #[cfg(feature = "composable")]
    #[test]
    fn bad_composite_keys_are_errors_with_positions() {
        let env = |name: &str| (name == "LIMIT").then(|| "1".to_owned());
        let load = |text: &str| {
            DeclarativeSampler::from_yaml_with(text, "otel.yaml", "checkout", &env).unwrap_err()
        };
        // Each case: the text replaced, the kind, line, column and key.
        let base =
            "tracer_provider.sampler.composite/development.parent_threshold.root.rule_based.rules";
        let cases = [
            (
                (
                    "probability:\n                        ratio: 1.0",
                    "probabilty:\n                        ratio: 1.0",
                ),
                ConfigErrorKind::UnknownValue,
                21,
                23,
                format!("{base}[1].sampler.rate_limiting/otel_rate_sampler.sampler.probabilty"),
            ),
            (
                ("[server]", "[sever]"),
                ConfigErrorKind::UnknownValue,
                14,
                30,
                format!("{base}[1].span_kinds"),
            ),
            (
                ("[none]", "[nobody]"),
                ConfigErrorKind::UnknownValue,
                15,
                26,
                format!("{base}[1].parent"),
            ),
            (
                ("ratio: 0.0", "ratio: 2"),
                ConfigErrorKind::InvalidProbability,
                31,
                28,
                format!("{base}[3].sampler.probability.ratio"),
            ),
            (
                ("window: 1h", "window: 1 fortnight"),
                ConfigErrorKind::InvalidLimit,
                19,
                29,
                format!("{base}[1].sampler.rate_limiting/otel_rate_sampler.window"),
            ),
            (
                (
                    "                  key: user\n",
                    "                  key: user\n                  value: x\n",
                ),
                ConfigErrorKind::UnknownKey,
                25,
                19,
                format!("{base}[2].attribute_patterns.value"),
            ),
        ];
        for ((from, to), kind, line, column, key) in cases {
            let text = COMPOSITE.replacen(from, to, 1);
            assert_ne!(text, COMPOSITE, "{from}");
            let err = load(&text);
            assert_eq!(
                (err.kind(), err.line(), err.column(), err.key()),
                (kind, line, column, key.as_str()),
                "{err}"
            );
            assert!(
                err.to_string()
                    .starts_with(&format!("otel.yaml:{line}:{column}: ")),
                "{err}"
            );
        }
    }

    #[cfg(not(feature = "composable"))]
    #[test]
    fn a_composite_sampler_needs_the_composable_feature() {
        let err = load("file_format: \"1.1\"\ntracer_provider:\n  sampler:\n    composite/development:\n      always_on:\n")
            .unwrap_err();
        assert_eq!(
            (err.kind(), err.line(), err.key()),
            (
                ConfigErrorKind::MissingFeature,
                5,
                "tracer_provider.sampler.composite/development"
            ),
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
        let nowhere = ConfigErrorKind::MissingKey
            .error("f", "m")
            .on_key("default");
        let start = crate::config::error::Pos { line: 4, column: 5 };
        let err = nowhere.in_block("tracer_provider.sampler.rate_limiting", start);
        assert_eq!(
            (err.line(), err.column(), err.key()),
            (4, 5, "tracer_provider.sampler.rate_limiting.default")
        );
    }
}
