//! The configuration model every format loads into: a file-wide default, services by
//! name, each with a default policy, an optional cap and ordered rules.

use std::fmt;
use std::path::Path;

use opentelemetry::trace::SpanKind;

use super::error::{ConfigError, ConfigErrorKind, Pos};
use super::pattern::Pattern;
use crate::limit::Limit;
use crate::limiter::Algorithm;
use crate::sampler::{Origin, RemoteParents};

/// A sampling configuration: per-service rules loaded from a TOML file (the primary
/// format) or a Jaeger sampling strategies file, validated once.
///
/// # The model
///
/// * A **file-wide default** (`[default]`): a policy, optional rules and an optional cap,
///   used whole by every service the file does not list.
/// * **Services** (`[[service]]`), matched exactly against the `service.name` the
///   application passes to [`RuleBasedSampler::new`](crate::RuleBasedSampler::new) (the
///   sampler cannot see the `Resource`). Each has ordered rules, an optional default
///   policy (else the file default's policy), an optional cap, and a remote-parent
///   policy.
/// * A **rule** matches on span name (glob), span kind, attribute values (globs on the
///   attributes present when the span starts; all listed must be present and match) and
///   parent origin (`none` for roots, `remote` for remote parents under
///   `remote_parents = "cap"`). It carries a **limit** (N per window or a fractional
///   rate, with an algorithm) or a **probability**.
///
/// # Evaluation order
///
/// For a span the sampler decides (a root, or a sampled remote parent under
/// `remote_parents = "cap"`): the first rule in file order that matches decides; if none
/// does, the service's default policy, then the file default's. The chosen policy's own
/// limiter (or probability) must admit the span; then, if the service has a cap, the
/// span must also get a permit from the cap (first from the rule's reserved `floor`,
/// then from the cap's shared pool). Only then is it kept. Children with a local parent
/// follow their parent and spend nothing.
///
/// # Bounds and fairness
///
/// * Each rule has **its own limiter** (never one per attribute value): a rule keeps at
///   most its N per window, so one hot operation can take at most its own N of the cap.
/// * The cap `C` per cap window is split into the rules' `floor`s (permits reserved for
///   each rule, in the cap's window) and a shared pool of `C − Σ floor`, first come
///   first served. A rule whose traffic is within its floor is never starved by others;
///   the worst case total per cap window is `Σ floor + (C − Σ floor) = C`.
/// * A permit a rule spends on a span the cap then refuses is not given back, so under a
///   saturated cap a rule may keep fewer than its N.
/// * Without a cap, the worst case per window is the sum of the rules' and the default's
///   limits (probability rules are unbounded unless capped).
#[derive(Clone, Debug)]
pub struct SamplingConfig {
    pub(crate) source: String,
    pub(crate) default: ServiceConfig,
    pub(crate) services: Vec<ServiceConfig>,
}

/// One service's settings (or the file default's, whose name is empty).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ServiceConfig {
    pub(crate) name: String,
    pub(crate) policy: Option<Policy>,
    pub(crate) cap: Option<LimitSpec>,
    pub(crate) remote_parents: RemoteParents,
    pub(crate) rules: Vec<Rule>,
}

/// A limit and the algorithm that enforces it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LimitSpec {
    pub(crate) limit: Limit,
    pub(crate) algorithm: Algorithm,
}

/// What a rule (or a default) does with the spans it matches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Policy {
    Limit(LimitSpec),
    Probability(f64),
}

/// A matching rule.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rule {
    pub(crate) name: String,
    pub(crate) span_name: Option<Pattern>,
    pub(crate) kind: Option<SpanKind>,
    pub(crate) parent: Option<Origin>,
    pub(crate) attributes: Vec<(String, Pattern)>,
    pub(crate) policy: Policy,
    /// Permits reserved for this rule in each window of the service cap.
    pub(crate) floor: u32,
}

impl SamplingConfig {
    /// Loads a file: Jaeger strategies if its name ends in `.json`, TOML otherwise.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the file, line, column and key of the first mistake.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                ConfigErrorKind::Io,
                &file,
                Pos::default(),
                "",
                format!("cannot read the file: {e}"),
            )
            .with_source(e)
        })?;
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            Self::from_jaeger_json_str(&text, &file)
        } else {
            Self::from_toml_str(&text, &file)
        }
    }

    /// The names of the services the file lists, in file order.
    pub fn services(&self) -> impl Iterator<Item = &str> {
        self.services.iter().map(|s| s.name.as_str())
    }

    /// The settings that apply to `service`: its own, or the file default's.
    pub(crate) fn service(&self, service: &str) -> ServiceConfig {
        match self.services.iter().find(|s| s.name == service) {
            Some(s) => ServiceConfig {
                policy: s.policy.or(self.default.policy),
                ..s.clone()
            },
            None => ServiceConfig {
                name: service.to_owned(),
                ..self.default.clone()
            },
        }
    }

    /// The effective rules for `service`, in evaluation order, for people to read (what
    /// the `otel-rate-sampler check` command prints).
    pub fn describe(&self, service: &str) -> impl fmt::Display + '_ {
        Describe(
            self.service(service),
            self.services.iter().any(|s| s.name == service),
        )
    }
}

struct Describe(ServiceConfig, bool);

impl fmt::Display for Describe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.0;
        let from = if self.1 {
            ""
        } else {
            " (not listed: the file default)"
        };
        writeln!(f, "service {:?}{from}", s.name)?;
        writeln!(f, "  remote parents: {:?}", s.remote_parents)?;
        match &s.cap {
            Some(cap) => writeln!(f, "  cap: {}", DisplaySpec(cap))?,
            None => writeln!(f, "  cap: none")?,
        }
        for (i, r) in s.rules.iter().enumerate() {
            write!(f, "  {}. rule {:?}: ", i + 1, r.name)?;
            let mut any = false;
            if let Some(p) = &r.span_name {
                write!(f, "name ~ {:?} ", p.as_str())?;
                any = true;
            }
            if let Some(k) = &r.kind {
                write!(f, "kind = {k:?} ")?;
                any = true;
            }
            if let Some(o) = r.parent {
                write!(
                    f,
                    "parent = {} ",
                    if o == Origin::Root { "none" } else { "remote" }
                )?;
                any = true;
            }
            for (k, p) in &r.attributes {
                write!(f, "{k} ~ {:?} ", p.as_str())?;
                any = true;
            }
            if !any {
                f.write_str("every span ")?;
            }
            write!(f, "=> {}", DisplayPolicy(&r.policy))?;
            if r.floor > 0 {
                write!(f, ", floor {} per cap window", r.floor)?;
            }
            writeln!(f)?;
        }
        match &s.policy {
            Some(p) => writeln!(f, "  otherwise: {}", DisplayPolicy(p)),
            None => writeln!(f, "  otherwise: drop"),
        }
    }
}

struct DisplaySpec<'a>(&'a LimitSpec);

impl fmt::Display for DisplaySpec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        write!(
            f,
            "{} ({}/s, {})",
            s.limit,
            s.limit.per_second_rate(),
            s.algorithm
        )
    }
}

struct DisplayPolicy<'a>(&'a Policy);

impl fmt::Display for DisplayPolicy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Policy::Limit(spec) => write!(f, "keep {}", DisplaySpec(spec)),
            Policy::Probability(p) => write!(f, "keep with probability {p}"),
        }
    }
}
