//! [`EffectiveRules`]: a service's settings as its sampler applies them, as values a
//! tool can compute with (what [`SamplingConfig::describe`] prints as text), and the
//! memory of the limiters they build.

use crate::config::check::budget::limiter_bytes;
use crate::config::model::{FairSpec, LimitSpec, Policy, SamplingConfig, ServiceConfig};
use crate::limit::Limit;
use crate::limiter::Algorithm;

/// What a rule (or a service's default) does with the spans it decides.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum RulePolicy {
    /// Keep at most `limit`, enforced by `algorithm`'s limiter.
    Limit {
        /// The permits per window.
        limit: Limit,
        /// The limiter that enforces it.
        algorithm: Algorithm,
    },
    /// Keep a trace with this probability, decided on its trace id.
    Probability(f64),
    /// Keep about, and at most, `limit` by a consistent probability adapted each window
    /// (the [`AdaptiveSampler`](crate::AdaptiveSampler)'s algorithm; its cap is a fixed
    /// window).
    Adaptive {
        /// The permits per window.
        limit: Limit,
    },
    /// Keep a trace with `probability`, decided on its trace id, and at least
    /// `lower_bound` traces (`at_least`, Jaeger's guaranteed-throughput sampler): the
    /// probability's keeps spend the lower bound's permits, and the lower bound (a
    /// fixed window, local to each process) keeps traces the probability refuses while
    /// it has permits left.
    AtLeast {
        /// The probability.
        probability: f64,
        /// The lower bound: permits per window.
        lower_bound: Limit,
    },
}

impl From<Policy> for RulePolicy {
    fn from(policy: Policy) -> Self {
        match policy {
            Policy::Limit(spec) => RulePolicy::Limit {
                limit: spec.limit,
                algorithm: spec.algorithm,
            },
            Policy::Probability(p) => RulePolicy::Probability(p),
            Policy::Adaptive(limit) => RulePolicy::Adaptive { limit },
            Policy::AtLeast {
                probability,
                lower_bound,
            } => RulePolicy::AtLeast {
                probability,
                lower_bound: lower_bound.limit,
            },
        }
    }
}

impl RulePolicy {
    /// The limiter this policy builds: a limit's, an adaptive policy's cap, or a lower
    /// bound's.
    fn limiter(self) -> Option<LimitSpec> {
        match self {
            RulePolicy::Limit { limit, algorithm } => Some(LimitSpec::local(limit, algorithm)),
            RulePolicy::Adaptive { limit }
            | RulePolicy::AtLeast {
                lower_bound: limit, ..
            } => Some(LimitSpec::local(limit, Algorithm::FixedWindow)),
            RulePolicy::Probability(_) => None,
        }
    }
}

/// One rule of a service, as its sampler applies it.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveRule {
    name: String,
    policy: RulePolicy,
    floor: u32,
    fleet: bool,
    /// Its limit's `fair_by`, for the memory of its tables.
    fair: Option<FairSpec>,
}

impl EffectiveRule {
    /// The rule's name (the `sampler.rule` value of the spans it keeps).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its limit or probability.
    pub fn policy(&self) -> RulePolicy {
        self.policy
    }

    /// The permits reserved for it in each window of the service cap (0: none).
    pub fn floor(&self) -> u32 {
        self.floor
    }

    /// Whether its limit is fleet-scoped (`scope = "fleet"`): shared by every replica
    /// through Redis rather than enforced by each process.
    pub fn fleet_wide(&self) -> bool {
        self.fleet
    }
}

/// A service's effective settings: its rules in evaluation order, its default and its
/// cap, from [`SamplingConfig::effective_rules`].
///
/// ```
/// use otel_rate_sampler::summary::RulePolicy;
/// use otel_rate_sampler::SamplingConfig;
///
/// let config = SamplingConfig::from_toml_str(r#"
///     [default]
///     rate = 10.0
///     [[service]]
///     name = "checkout"
///     cap = { rate = 100.0 }
///     [[service.rule]]
///     name = "pay"
///     span_name = "POST /pay"
///     limit = 50
///     floor = 20
/// "#, "inline")?;
/// let rules = config.effective_rules("checkout");
/// assert_eq!(rules.rules()[0].name(), "pay");
/// assert_eq!(rules.rules()[0].floor(), 20);
/// assert!(matches!(rules.default(), Some(RulePolicy::Limit { .. })));
/// // The rule's limiter, its floor, the default's limiter and the cap's shared pool.
/// assert_eq!(rules.limiters().len(), 4);
/// # Ok::<(), otel_rate_sampler::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveRules {
    service: String,
    listed: bool,
    cap: Option<(Limit, Algorithm)>,
    rules: Vec<EffectiveRule>,
    default: Option<RulePolicy>,
    default_fleet: bool,
    cap_fleet: bool,
    /// The `fair_by` of the default's limit and of the cap, for their tables' memory.
    default_fair: Option<FairSpec>,
    cap_fair: Option<FairSpec>,
}

/// One limiter a service's sampler builds, and the memory it takes.
#[derive(Clone, Debug, PartialEq)]
pub struct LimiterMemory {
    role: String,
    limit: Limit,
    algorithm: Algorithm,
    bytes: usize,
}

impl LimiterMemory {
    fn new(role: String, spec: LimitSpec) -> Self {
        Self {
            role,
            limit: spec.limit,
            algorithm: spec.algorithm,
            bytes: limiter_bytes(spec),
        }
    }

    /// What the limiter is for: `rule "NAME"`, `floor of rule "NAME"`, `default` or
    /// `cap shared pool`.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The limit it enforces.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// Its algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Its memory in bytes, as laid out on this target: the cache-padded limiter in its
    /// `Arc`, plus 16 bytes per permit for a sliding log, or 16 per sub-window for a
    /// bucketed window.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// [`SamplingConfig::effective_rules`]: the settings of `service`'s sampler as values.
pub(crate) fn effective_rules(config: &SamplingConfig, service: &str) -> EffectiveRules {
    EffectiveRules::of(&config.service(service), config.lists(service))
}

impl EffectiveRules {
    pub(crate) fn of(s: &ServiceConfig, listed: bool) -> Self {
        Self {
            service: s.name.clone(),
            listed,
            cap: s.cap.map(|c| (c.limit, c.algorithm)),
            rules: s
                .rules
                .iter()
                .map(|r| EffectiveRule {
                    name: r.name.clone(),
                    policy: r.policy.into(),
                    floor: r.floor,
                    fleet: r.policy.is_fleet(),
                    fair: fair_of(r.policy),
                })
                .collect(),
            default: s.policy.map(RulePolicy::from),
            default_fleet: s.policy.is_some_and(|p| p.is_fleet()),
            cap_fleet: s.cap.is_some_and(|c| c.is_fleet()),
            default_fair: s.policy.and_then(fair_of),
            cap_fair: s.cap.and_then(|c| c.fair),
        }
    }

    /// The service's name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Whether the file lists the service (else these are the file default's settings).
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// The service cap, if any: every kept span also takes a permit from it.
    pub fn cap(&self) -> Option<(Limit, Algorithm)> {
        self.cap
    }

    /// The rules, in evaluation order (the first that matches decides).
    pub fn rules(&self) -> &[EffectiveRule] {
        &self.rules
    }

    /// The policy for spans no rule matches (`None`: they are dropped).
    pub fn default(&self) -> Option<RulePolicy> {
        self.default
    }

    /// Whether the default's limit is fleet-scoped (shared through Redis).
    pub fn default_fleet_wide(&self) -> bool {
        self.default_fleet
    }

    /// Whether the cap (and so its floors) is fleet-scoped (shared through Redis).
    pub fn cap_fleet_wide(&self) -> bool {
        self.cap_fleet
    }

    /// The limits each process enforces on its own: [`limits`](Self::limits) less the
    /// fleet-scoped ones, which already hold for the whole fleet. What splitting a
    /// limit across replicas applies to.
    pub fn local_limits(&self) -> impl Iterator<Item = (&str, Limit)> + '_ {
        self.limits().filter(|(name, _)| !self.is_fleet_named(name))
    }

    /// Whether the limit `limits()` names `name` is fleet-scoped.
    fn is_fleet_named(&self, name: &str) -> bool {
        // `limits()` lists the rules first, so a rule named like the default or the cap
        // is found as a rule, as there.
        match self
            .rules
            .iter()
            .find(|r| r.name == name && r.policy.limiter().is_some())
        {
            Some(r) => r.fleet,
            None if name == "default" && self.default.and_then(RulePolicy::limiter).is_some() => {
                self.default_fleet
            }
            None => name == "cap" && self.cap_fleet,
        }
    }

    /// Every limit the file sets for this service, named: each limit rule's, adaptive
    /// rule's cap or lower bound (by rule name), the default's (`default`) and the
    /// cap's (`cap`). Floors and the shared
    /// pool are derived from the cap and are not listed.
    pub fn limits(&self) -> impl Iterator<Item = (&str, Limit)> + '_ {
        self.rules
            .iter()
            .map(|r| (r.name(), r.policy()))
            .chain(self.default.map(|p| ("default", p)))
            .filter_map(|(name, policy)| match policy {
                RulePolicy::Limit { limit, .. }
                | RulePolicy::Adaptive { limit }
                | RulePolicy::AtLeast {
                    lower_bound: limit, ..
                } => Some((name, limit)),
                RulePolicy::Probability(_) => None,
            })
            .chain(self.cap.map(|(limit, _)| ("cap", limit)))
    }

    /// Every limiter the service's sampler builds, in the order it builds them: each
    /// limit rule's, each floor's (a fixed window in the cap's window), the default's,
    /// and the cap's shared pool (the cap less the floors, when that is not zero).
    pub fn limiters(&self) -> Vec<LimiterMemory> {
        let mut out = Vec::new();
        for rule in &self.rules {
            if let Some(spec) = rule.policy.limiter() {
                let spec = with_fair(spec, rule.policy, rule.fair);
                out.push(LimiterMemory::new(format!("rule {:?}", rule.name), spec));
            }
        }
        if let Some((cap, _)) = self.cap {
            for rule in self.rules.iter().filter(|r| r.floor > 0) {
                if let Ok(limit) = cap.with_permits(rule.floor) {
                    out.push(LimiterMemory::new(
                        format!("floor of rule {:?}", rule.name),
                        LimitSpec::local(limit, Algorithm::FixedWindow),
                    ));
                }
            }
        }
        if let Some((policy, spec)) = self.default.and_then(|p| Some((p, p.limiter()?))) {
            let spec = with_fair(spec, policy, self.default_fair);
            out.push(LimiterMemory::new("default".to_owned(), spec));
        }
        if let Some(shared) = self.shared_pool() {
            out.push(LimiterMemory::new("cap shared pool".to_owned(), shared));
        }
        out
    }

    /// The sum of the rules' floors.
    pub(crate) fn floors(&self) -> u64 {
        self.rules.iter().map(|r| u64::from(r.floor)).sum()
    }

    /// The cap's shared pool: the cap's permits less the floors, if any are left.
    fn shared_pool(&self) -> Option<LimitSpec> {
        let (cap, algorithm) = self.cap?;
        let left = u64::from(cap.permits()).checked_sub(self.floors())?;
        let limit = cap.with_permits(u32::try_from(left).ok()?).ok()?;
        Some(LimitSpec {
            fair: self.cap_fair,
            ..LimitSpec::local(limit, algorithm)
        })
    }
}

/// The `fair_by` of a policy's limit, if it is a limit with one.
fn fair_of(policy: Policy) -> Option<FairSpec> {
    match policy {
        Policy::Limit(spec) => spec.fair,
        _ => None,
    }
}

/// `spec`, the limiter of `policy`, with `fair` when it is the limit's own (a lower
/// bound's or an adaptive cap's limiter is never fair).
fn with_fair(spec: LimitSpec, policy: RulePolicy, fair: Option<FairSpec>) -> LimitSpec {
    match policy {
        RulePolicy::Limit { .. } => LimitSpec { fair, ..spec },
        _ => spec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sliding_log_costs_sixteen_bytes_per_permit_and_the_others_a_constant() {
        let text = r#"
[default]
limit = 1000
window = "1s"
algorithm = "sliding-log"
[[default.rule]]
name = "small"
span_name = "a"
limit = 1000
algorithm = "sliding"
"#;
        let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
        let limiters = config.effective_rules("any").limiters();
        let roles: Vec<&str> = limiters.iter().map(LimiterMemory::role).collect();
        assert_eq!(roles, ["rule \"small\"", "default"]);
        assert_eq!(limiters[1].bytes() - limiters[0].bytes(), 16 * 1000);
        assert!(limiters[0].bytes() >= 64, "{}", limiters[0].bytes());
    }

    #[test]
    fn floors_and_the_shared_pool_are_limiters_of_the_cap_window() {
        let text = r#"
[default]
rate = 1.0
cap = { limit = 10, window = "2s", algorithm = "sliding" }
[[default.rule]]
name = "a"
span_name = "a"
probability = 1.0
floor = 4
"#;
        let config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
        let rules = config.effective_rules("other");
        assert!(!rules.listed());
        let limiters = rules.limiters();
        let shape: Vec<(&str, u32, Algorithm)> = limiters
            .iter()
            .map(|l| (l.role(), l.limit().permits(), l.algorithm()))
            .collect();
        assert_eq!(
            shape,
            [
                ("floor of rule \"a\"", 4, Algorithm::FixedWindow),
                ("default", 1, Algorithm::FixedWindow),
                ("cap shared pool", 6, Algorithm::SlidingWindow),
            ]
        );
        assert!(limiters.iter().filter(|l| l.role() != "default").all(|l| l
            .limit()
            .window()
            .as_secs()
            == 2));
    }
}
