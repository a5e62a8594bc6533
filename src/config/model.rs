//! The configuration model every format loads into: a file-wide default, services by
//! name, each with a default policy, an optional cap and ordered rules.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::time::Duration;

use opentelemetry::trace::SpanKind;

use super::error::{ConfigError, ConfigErrorKind, Pos};
use super::pattern::Pattern;
use super::rule_limiter::LimitOf;
use crate::limit::Limit;
use crate::limiter::Algorithm;
use crate::sampler::{Origin, RemoteParents};

/// A sampling configuration: per-service rules loaded from a TOML file (the primary
/// format), a Jaeger sampling strategies file, or (feature `yaml`) a YAML file with the
/// TOML format's keys or the `rate_limiting` sampler of an OpenTelemetry declarative
/// configuration file, validated once. [`from_path`](Self::from_path) picks the format.
///
/// # The model
///
/// * A **file-wide default** (`[default]`): a policy, optional rules and an optional cap,
///   used whole by every service the file does not list. `[default]` is optional: without
///   it (or without a policy in it) the **built-in default** applies, 100 traces per
///   second ([`env::DEFAULT_TRACES_PER_SECOND`](crate::env::DEFAULT_TRACES_PER_SECOND)),
///   a local fixed window, remote parents followed: what
///   `OTEL_TRACES_SAMPLER=parentbased_ratelimiting` gives. (A Jaeger file without
///   `default_strategy` gets Jaeger's own default, probability 0.001.)
/// * **Services** (`[[service]]`), matched exactly against the `service.name` the
///   application passes to [`RuleBasedSampler::new`](crate::RuleBasedSampler::new) (the
///   sampler cannot see the `Resource`). Each has ordered rules, an optional default
///   policy (else the file default's policy), an optional cap (its own: `[default]`'s cap
///   is not inherited), and a remote-parent policy.
/// * **Default rules** (`[[default.rule]]`, a Jaeger `default_strategy`'s operations) are
///   inherited by every listed service, after the service's own rules, except those
///   whose name the service uses for a rule of its own (that rule replaces it). A
///   service opts out with `inherit_default_rules = false` (in TOML and in a Jaeger
///   service strategy alike). An unnamed default rule is named `default-rule-N` (an
///   unnamed service rule `rule-N`), so the two never replace each other by accident.
///   An inherited rule's `floor` reserves permits in the inheriting service's cap: the
///   loader refuses a service whose cap cannot hold them.
/// * **Memory**: the limiters one service's sampler builds (a sliding log keeps 16
///   bytes per permit) must fit in a budget, [`DEFAULT_MEMORY_BUDGET`](Self::DEFAULT_MEMORY_BUDGET)
///   unless the TOML file sets `[limits] memory_budget` (bytes, or a text such as
///   `"512MiB"`); the loader refuses a service over it, naming its largest limiter.
/// * A **rule** matches on span name (glob), span kind, attribute values (globs on the
///   attributes present when the span starts; all listed must be present and match) and
///   parent origin (`none` for roots, `remote` for remote parents under
///   `remote_parents = "cap"`). It carries a **limit** (N per window or a fractional
///   rate, with an algorithm), a **probability**, or an **adaptive** probability under a
///   cap (`adaptive = 100.0`, or `adaptive = { limit = 100, window = "1s" }`: the
///   [`AdaptiveSampler`](crate::AdaptiveSampler)'s algorithm, per rule, local to each
///   process), or a probability with a lower bound (`probability = 0.01` with
///   `at_least = 2.0`: Jaeger's guaranteed-throughput sampler, see below).
///
/// # Evaluation order
///
/// For a span the sampler decides (a root, or a sampled remote parent under
/// `remote_parents = "cap"`): the first rule in order (the service's own, then the
/// inherited ones) that matches decides; if none does, the service's default policy,
/// then the file default's. A rule with no condition matches every span, so the loaders
/// refuse one that is followed by any other rule (inherited ones included), or that
/// comes before a listed service's own policy (which would never decide). The chosen policy's own
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
/// # Probability rules (OTEP 235)
///
/// A `probability` keeps a trace iff its 56 random bits (the `rv` sub-key of the `ot`
/// trace-state entry when present, else the low 56 bits of the trace id) are at least
/// the rejection threshold `(1 − p)·2^56`: every service (and every process) with the
/// same probability keeps exactly the same traces, and a lower probability keeps a
/// subset. Kept spans carry the threshold as `ot=th:<hex>` (other `ot` sub-keys and
/// other vendors' entries kept), so a backend can weight each by `1/p`. A capped remote
/// parent's `th` is raised to the rule's, never lowered; a sampled remote parent without
/// `th` had an unknown probability and gets none. Spans kept by a limit carry no `th`
/// (a rate limit has no known probability). Under a service cap, a probability rule's
/// spans keep their `th`: in a window where the cap refused some of them, the weighted
/// count of that rule's spans falls short of the offered count by what the cap refused.
///
/// # Probability with a lower bound (`at_least`)
///
/// `probability = p` with `at_least = L` (traces per second, a local limit of its own)
/// is Jaeger's `GuaranteedThroughputProbabilisticSampler`: a trace the probability keeps
/// is kept (with its `th`) and also spends a permit of the lower bound's limiter when
/// one is left; a trace the probability refuses is kept if that limiter admits it. So
/// in each window of the lower bound (`L` per second, paced like any limit) the rule
/// keeps at least the fewer of `L` and the traces offered, and at most the
/// probability's keeps plus `L`: the probability's keeps spend the bound's permits, so
/// the bound adds fewer the more the probability keeps (how many exactly depends on the
/// order of arrivals, as in Jaeger). A trace kept by the lower bound alone is kept like
/// a rate-limited one: no `th` (its probability is unknown), `sampler.type =
/// lowerbound` and `sampler.param = L`. The lower bound's limiter is kept across
/// reloads by the rule's name, as a limit rule's is. Under a cap, the cap may still
/// refuse either kind of keep.
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
    /// The most bytes the limiters of one service's sampler may take.
    pub(crate) memory_budget: usize,
    /// The position of each service in `services`, by name.
    index: HashMap<String, usize>,
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
    /// Whether the file default's rules follow this service's own (not for the default).
    pub(crate) inherit_default_rules: bool,
}

impl ServiceConfig {
    /// The built-in default: [`DEFAULT_TRACES_PER_SECOND`](super::env::DEFAULT_TRACES_PER_SECOND),
    /// a local fixed window, remote parents followed, no rules, no cap.
    pub(crate) fn builtin_default() -> Self {
        Self::single_rate(BUILTIN_DEFAULT_LIMIT, RemoteParents::default())
    }

    /// One limit for every span, nothing else.
    pub(crate) fn single_rate(limit: Limit, remote_parents: RemoteParents) -> Self {
        Self {
            name: String::new(),
            policy: Some(Policy::Limit(LimitSpec::local(limit, Algorithm::default()))),
            cap: None,
            remote_parents,
            rules: Vec::new(),
            inherit_default_rules: true,
        }
    }
}

/// The built-in default's limit: [`DEFAULT_TRACES_PER_SECOND`](super::env::DEFAULT_TRACES_PER_SECOND)
/// per second (checked when the crate compiles).
pub(crate) const BUILTIN_DEFAULT_LIMIT: Limit = match Limit::per_window(
    super::env::DEFAULT_TRACES_PER_SECOND as u32,
    Duration::from_secs(1),
) {
    Ok(limit) => limit,
    Err(_) => panic!("the built-in default rate is a valid limit"),
};

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
    /// Where the file sets the window (`window`, else `rate` or `limit`; 0:0 if nowhere),
    /// for the errors found when the sampler is built.
    pub(crate) at: Pos,
}

impl LimitSpec {
    /// A limit this process enforces on its own.
    pub(crate) const fn local(limit: Limit, algorithm: Algorithm) -> Self {
        Self {
            limit,
            algorithm,
            scope: Scope::Local,
            at: Pos { line: 0, column: 0 },
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
    /// A consistent probability adapted each window to keep about, and at most, this
    /// limit (local to each process).
    Adaptive(Limit),
    /// A consistent probability, but at least `lower_bound` traces (Jaeger's
    /// guaranteed-throughput sampler): a trace the probability keeps also spends a
    /// permit of the lower bound's limiter when one is left; a trace it refuses is kept
    /// if that limiter admits it. The lower bound is a local limit.
    AtLeast {
        probability: f64,
        lower_bound: LimitSpec,
    },
}

impl Policy {
    /// The limit this policy's own limiter enforces (a limit's, or a lower bound's), if
    /// it has one; an adaptive policy's cap is not one of these (it is shared with the
    /// adaptive estimate, not handed over).
    pub(crate) fn limiter(&self) -> Option<LimitSpec> {
        match *self {
            Policy::Limit(spec) => Some(spec),
            Policy::AtLeast { lower_bound, .. } => Some(lower_bound),
            Policy::Probability(_) | Policy::Adaptive(_) => None,
        }
    }
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
    /// Whether a service has it from the file default's rules.
    pub(crate) inherited: bool,
}

impl Rule {
    /// Whether it has no condition at all, and so matches every span.
    pub(crate) fn matches_everything(&self) -> bool {
        self.span_name.is_none()
            && self.kind.is_none()
            && self.parent.is_none()
            && self.attributes.is_empty()
    }
}

impl SamplingConfig {
    /// The memory budget of one service's limiters when the file sets none: 128 MiB.
    /// It holds one sliding log of [`Limit::MAX_PERMITS`] (64 MiB) with room to spare,
    /// and refuses a file asking for many (16 of them would take 1 GiB).
    pub const DEFAULT_MEMORY_BUDGET: usize = 128 << 20;

    /// A configuration of `services` (distinct names, which the loaders check) over
    /// `default`.
    pub(crate) fn new(
        source: &str,
        default: ServiceConfig,
        services: Vec<ServiceConfig>,
        fleet: FleetSettings,
    ) -> Self {
        let index = services
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        Self::indexed(source, default, services, index, fleet)
    }

    /// [`new`](Self::new) with the loader's `index` of `services` by name (built while
    /// checking that names are distinct, so that a large file hashes each name once).
    pub(crate) fn indexed(
        source: &str,
        default: ServiceConfig,
        services: Vec<ServiceConfig>,
        index: HashMap<String, usize>,
        fleet: FleetSettings,
    ) -> Self {
        debug_assert_eq!(index.len(), services.len());
        Self {
            source: source.to_owned(),
            default,
            services,
            fleet,
            memory_budget: Self::DEFAULT_MEMORY_BUDGET,
            index,
        }
    }

    /// Loads a file, choosing the format by the name's extension and the content:
    ///
    /// * `.json`: Jaeger sampling strategies;
    /// * `.yaml` / `.yml` (feature `yaml`): an OpenTelemetry declarative configuration
    ///   file if it has a top-level `file_format` (the rules of its first
    ///   `rate_limiting` sampler, see [`DeclarativeSampler`](crate::DeclarativeSampler)),
    ///   else a rule file in YAML ([`from_yaml_str`](Self::from_yaml_str));
    /// * anything else: TOML.
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
        let text = read_file(path, &file)?;
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        if extension.eq_ignore_ascii_case("json") {
            Self::from_jaeger_json_str(&text, &file)
        } else if ["yaml", "yml"]
            .iter()
            .any(|e| extension.eq_ignore_ascii_case(e))
        {
            Self::from_yaml_file(&text, &file, redis)
        } else {
            Self::from_toml_with(&text, &file, redis)
        }
    }

    /// A `.yaml` / `.yml` file: a declarative configuration file (it has a
    /// `file_format`), whose first `rate_limiting` sampler holds the rules, or a rule
    /// file in YAML.
    #[cfg(feature = "yaml")]
    fn from_yaml_file(
        text: &str,
        file: &str,
        redis: Option<&[String]>,
    ) -> Result<Self, ConfigError> {
        if super::declarative::is_declarative(text) {
            super::declarative::rate_limiting_config(text, file, redis)
        } else {
            Self::from_yaml_with(text, file, redis)
        }
    }

    /// A `.yaml` / `.yml` file in a build without the `yaml` feature: refused.
    #[cfg(not(feature = "yaml"))]
    fn from_yaml_file(_: &str, file: &str, _: Option<&[String]>) -> Result<Self, ConfigError> {
        Err(ConfigError::new(
            ConfigErrorKind::MissingFeature,
            file,
            Pos::default(),
            "",
            "a YAML file needs the `yaml` feature of otel-rate-sampler; build with it, or write the rules in TOML",
        ))
    }

    /// The names of the services the file lists, in file order.
    pub fn services(&self) -> impl Iterator<Item = &str> {
        self.services.iter().map(|s| s.name.as_str())
    }

    /// Whether the file lists `service` (in constant time).
    pub(crate) fn lists(&self, service: &str) -> bool {
        self.index.contains_key(service)
    }

    /// The settings that apply to `service`: its own with the inherited default rules,
    /// or the file default's.
    pub(crate) fn service(&self, service: &str) -> ServiceConfig {
        match self.index.get(service) {
            Some(&i) => self.listed(&self.services[i]),
            None => ServiceConfig {
                name: service.to_owned(),
                ..self.default.clone()
            },
        }
    }

    /// The key of the window of `of` in `service`'s settings (`service[1].rule[0].window`,
    /// `default.rule[2].window` for an inherited rule, `service[1].cap.window`).
    pub(crate) fn window_key(&self, service: &str, of: &LimitOf) -> String {
        self.limit_key(service, of, "window")
    }

    /// The key of `field` of `of`'s limit in `service`'s settings, or of the limit's
    /// table itself when `field` is empty (a rule's or the cap's).
    pub(crate) fn limit_key(&self, service: &str, of: &LimitOf, field: &str) -> String {
        let listed = self.index.get(service).map(|&i| (i, &self.services[i]));
        let in_default = |name: &str| {
            self.default
                .rules
                .iter()
                .position(|r| r.name == name)
                .map(|k| format!("default.rule[{k}]"))
        };
        let table = match (listed, of) {
            (Some((i, s)), LimitOf::Rule(name)) => s
                .rules
                .iter()
                .position(|r| &r.name == name)
                .map(|j| format!("service[{i}].rule[{j}]"))
                .or_else(|| in_default(name)),
            (None, LimitOf::Rule(name)) => in_default(name),
            (Some((i, s)), LimitOf::Default) if s.policy.is_some() => Some(format!("service[{i}]")),
            (_, LimitOf::Default) => Some("default".to_owned()),
            (Some((i, _)), LimitOf::Cap) => Some(format!("service[{i}].cap")),
            (None, LimitOf::Cap) => Some("default.cap".to_owned()),
        };
        match (table, field) {
            (Some(table), "") => table,
            (Some(table), field) => format!("{table}.{field}"),
            (None, _) => String::new(),
        }
    }

    /// A listed service as its sampler applies it: its own rules, then the default's it
    /// inherits (not those it replaces by name), and the default's policy if it has none.
    pub(crate) fn listed(&self, s: &ServiceConfig) -> ServiceConfig {
        let mut rules = Vec::with_capacity(s.rules.len() + self.default.rules.len());
        rules.extend(s.rules.iter().cloned());
        rules.extend(self.inherited_rules(s).map(|(_, d)| Rule {
            inherited: true,
            ..d.clone()
        }));
        ServiceConfig {
            name: s.name.clone(),
            policy: s.policy.or(self.default.policy),
            cap: s.cap,
            remote_parents: s.remote_parents,
            rules,
            inherit_default_rules: s.inherit_default_rules,
        }
    }

    /// The file default's rules listed service `s` inherits, in order, each with its
    /// position among the default's: none if it opts out, else those whose names none
    /// of its own rules take. Linear in the rules (a set of its own names when it has
    /// many), and allocates nothing for a service with few rules of its own.
    pub(crate) fn inherited_rules<'a>(
        &'a self,
        s: &'a ServiceConfig,
    ) -> impl Iterator<Item = (usize, &'a Rule)> + 'a {
        const SCAN: usize = 16;
        let defaults = if s.inherit_default_rules {
            self.default.rules.as_slice()
        } else {
            &[]
        };
        let own: Option<HashSet<&str>> = (s.rules.len() > SCAN && !defaults.is_empty())
            .then(|| s.rules.iter().map(|r| r.name.as_str()).collect());
        defaults
            .iter()
            .enumerate()
            .filter(move |(_, d)| match &own {
                Some(own) => !own.contains(d.name.as_str()),
                None => !s.rules.iter().any(|r| r.name == d.name),
            })
    }

    /// The effective rules for `service`, in evaluation order, for people to read (what
    /// the `otel-rate-sampler check` command prints).
    pub fn describe(&self, service: &str) -> impl fmt::Display + '_ {
        Describe(self.service(service), self.lists(service))
    }
}

/// The text of the file at `path` (named `file` in errors).
pub(crate) fn read_file(path: &Path, file: &str) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            ConfigErrorKind::Io,
            file,
            Pos::default(),
            "",
            format!("cannot read the file: {e}"),
        )
        .with_source(e)
    })
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
        if let Some(cap) = &s.cap {
            let floors: u64 = s.rules.iter().map(|r| u64::from(r.floor)).sum();
            if floors > 0 {
                let pool = u64::from(cap.limit.permits()).saturating_sub(floors);
                writeln!(
                    f,
                    "  cap shared pool: {pool} per {:?} (the cap less the floors' {floors}), for the default and for rules past their floor",
                    cap.limit.window()
                )?;
            }
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
            if r.inherited {
                f.write_str(" (inherited from [default])")?;
            }
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
            Policy::Adaptive(limit) => write!(
                f,
                "keep about {limit} ({}/s) by an adaptive probability, capped",
                limit.per_second_rate()
            ),
            Policy::AtLeast {
                probability,
                lower_bound,
            } => write!(
                f,
                "keep with probability {probability}, and at least {}",
                DisplaySpec(lower_bound)
            ),
        }
    }
}
