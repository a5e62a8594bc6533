//! The configuration model every format loads into: a file-wide default, services by
//! name, each with a default policy, an optional cap and ordered rules.

use std::fmt;
use std::path::Path;
use std::time::Duration;

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
///
/// # Scope
///
/// A limit (a rule's, a block's own default or a cap) is enforced by each process on its
/// own (`scope = "local"`, the default) or shared by every replica of the service
/// through Redis (`scope = "fleet"`, feature `redis`): a [`FleetLimiter`] under the
/// key `<service>:<rule>` (`<service>:default` for a block's own policy,
/// `<service>:cap` for the cap, `<service>:cap:<rule>` for a floor in a fleet cap), with
/// the Redis settings of the file's `[fleet]` table or of
/// [`OTEL_RATE_SAMPLER_REDIS`](crate::env::OTEL_RATE_SAMPLER_REDIS). The bounds above
/// then hold per fleet window for the whole fleet.
///
/// [`FleetLimiter`]: https://docs.rs/otel-rate-sampler/latest/otel_rate_sampler/struct.FleetLimiter.html
#[derive(Clone, Debug)]
pub struct SamplingConfig {
    pub(crate) source: String,
    pub(crate) default: ServiceConfig,
    pub(crate) services: Vec<ServiceConfig>,
    /// Where fleet-scoped limits are shared (no URL: the file has none).
    pub(crate) fleet: FleetSettings,
}

/// The `[fleet]` table: where fleet-scoped limits are shared. Its `Debug` masks the
/// URLs' credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct FleetSettings {
    /// One URL, or the seed nodes of a Redis Cluster (empty: none given).
    pub(crate) urls: Vec<String>,
    pub(crate) cluster: bool,
    /// The key prefix (`None`: the fleet limiter's default).
    pub(crate) prefix: Option<String>,
    /// Heartbeats and retries (`None`: the fleet limiter's default).
    pub(crate) sync_interval: Option<Duration>,
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

impl fmt::Debug for FleetSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `scheme://user:password@host` shows as `scheme://***@host`.
        let masked: Vec<String> = self
            .urls
            .iter()
            .map(|u| match (u.find("://"), u.rfind('@')) {
                (Some(s), Some(at)) if at > s => format!("{}***{}", &u[..s + 3], &u[at..]),
                _ => u.clone(),
            })
            .collect();
        f.debug_struct("FleetSettings")
            .field("urls", &masked)
            .field("cluster", &self.cluster)
            .field("prefix", &self.prefix)
            .field("sync_interval", &self.sync_interval)
            .finish()
    }
}

/// A limit, the algorithm that enforces it and who shares it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LimitSpec {
    pub(crate) limit: Limit,
    pub(crate) algorithm: Algorithm,
    pub(crate) scope: Scope,
}

impl LimitSpec {
    /// A limit this process enforces on its own.
    pub(crate) const fn local(limit: Limit, algorithm: Algorithm) -> Self {
        Self {
            limit,
            algorithm,
            scope: Scope::Local,
        }
    }
}

/// Who shares a limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Each process keeps its own N per window.
    #[default]
    Local,
    /// Every replica shares one N per fleet window, through Redis (a fixed window).
    Fleet,
}

/// The fleet key of a service's rule (`rule` = `"default"` for its own policy).
pub(crate) fn fleet_key(service: &str, rule: &str) -> String {
    format!("{service}:{rule}")
}

/// The fleet key of a service's cap.
pub(crate) fn fleet_cap_key(service: &str) -> String {
    format!("{service}:cap")
}

/// The fleet key of a rule's floor in a fleet-scoped cap.
pub(crate) fn fleet_floor_key(service: &str, rule: &str) -> String {
    format!("{service}:cap:{rule}")
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
        Self::from_path_with(path.as_ref(), None)
    }

    /// [`from_path`](Self::from_path), with `redis` (from the environment), when given,
    /// replacing a TOML file's `[fleet] redis`.
    pub(crate) fn from_path_with(
        path: &Path,
        redis: Option<&[String]>,
    ) -> Result<Self, ConfigError> {
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
            Self::from_toml_with(&text, &file, redis)
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
            Some(cap) => {
                write!(f, "  cap: {}", DisplaySpec(cap))?;
                if cap.scope == Scope::Fleet {
                    write!(f, ", fleet-wide (key {:?})", fleet_cap_key(&s.name))?;
                }
                writeln!(f)?;
            }
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
            if is_fleet(&r.policy) {
                write!(f, ", fleet-wide (key {:?})", fleet_key(&s.name, &r.name))?;
            }
            if r.floor > 0 {
                write!(f, ", floor {} per cap window", r.floor)?;
                if s.cap.is_some_and(|c| c.scope == Scope::Fleet) {
                    write!(f, " (fleet-wide)")?;
                }
            }
            writeln!(f)?;
        }
        match &s.policy {
            Some(p) if is_fleet(p) => writeln!(
                f,
                "  otherwise: {}, fleet-wide (key {:?})",
                DisplayPolicy(p),
                fleet_key(&s.name, "default")
            ),
            Some(p) => writeln!(f, "  otherwise: {}", DisplayPolicy(p)),
            None => writeln!(f, "  otherwise: drop"),
        }
    }
}

fn is_fleet(policy: &Policy) -> bool {
    matches!(policy, Policy::Limit(spec) if spec.scope == Scope::Fleet)
}

struct DisplaySpec<'a>(&'a LimitSpec);

impl fmt::Display for DisplaySpec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        write!(
            f,
            "{} ({}/s, {}{})",
            s.limit,
            s.limit.per_second_rate(),
            s.algorithm,
            if s.limit.is_paced() { "" } else { ", unpaced" }
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
