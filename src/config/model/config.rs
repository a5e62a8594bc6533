//! [`SamplingConfig`]: the whole model, and the settings it gives each service.

use std::collections::{HashMap, HashSet};

use crate::config::model::{FleetSettings, Rule, ServiceConfig};
use crate::config::vars::FleetEnv;
use crate::limit::Limit;
use crate::sampler::RemoteParents;

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
    pub(super) index: HashMap<String, usize>,
}

impl SamplingConfig {
    /// This configuration with the environment's TLS files for its fleet's Redis, each
    /// replacing the file's where set (its URLs are replaced as the file is read).
    pub(crate) fn with_fleet_env(mut self, env: &FleetEnv) -> Self {
        if let Some(ca) = &env.tls_ca_file {
            self.fleet.tls_ca_file = Some(ca.clone());
        }
        if let Some(client) = &env.tls_client {
            self.fleet.tls_client = Some(client.clone());
        }
        self
    }

    /// One limit for every service, a fixed window.
    pub(crate) fn single_limit(limit: Limit, remote_parents: RemoteParents, source: &str) -> Self {
        Self::new(
            source,
            ServiceConfig::single_rate(limit, remote_parents),
            Vec::new(),
            FleetSettings::default(),
        )
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

    /// The names of the services the file lists, in file order.
    pub fn services(&self) -> impl Iterator<Item = &str> {
        self.services.iter().map(|s| s.name.as_str())
    }

    /// Whether the file lists `service` (in constant time).
    pub(crate) fn lists(&self, service: &str) -> bool {
        self.index.contains_key(service)
    }

    /// Where the file lists `service` among its services (in constant time).
    #[cfg_attr(not(feature = "yaml"), allow(dead_code))] // for declarative files
    pub(crate) fn position(&self, service: &str) -> Option<usize> {
        self.index.get(service).copied()
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
}
