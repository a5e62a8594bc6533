//! The memory budget of a service's limiters: what the loaders check, once per service,
//! so that a small file cannot make a sampler allocate gigabytes.

use std::mem::size_of;

use crate::clock::MonotonicClock;
use crate::config::error::ConfigErrorKind;
use crate::config::model::values::Invalid;
use crate::config::model::{LimitOf, LimitSpec, Policy, Rule, SamplingConfig};
use crate::limit::Limit;
use crate::limiter::{Algorithm, AnyLimiter, FairLimiter};

/// A service (or the file default) whose limiters take more than the budget.
#[derive(Debug)]
pub(crate) struct OverBudget {
    /// The listed service's position, `None` for the file default.
    pub(crate) service: Option<usize>,
    /// Its largest limiter.
    pub(crate) largest: Culprit,
    largest_bytes: usize,
    largest_spec: LimitSpec,
    total: usize,
}

/// Whose limiter it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Culprit {
    /// The rule at this position of the service's own rules.
    Rule(usize),
    /// The file default's rule at this position, inherited.
    Inherited(usize),
    /// The service's own policy (or the default's, when it has none).
    Policy,
    /// The cap (its shared pool, or a floor).
    Cap,
}

/// What one sampler's limiters take: the total and the first of the largest.
#[derive(Clone, Copy, Debug)]
struct Footprint {
    total: usize,
    /// The largest limiter: whose, its limit, its bytes (`None`: no limiter at all).
    largest: Option<(Culprit, LimitSpec, usize)>,
}

impl Footprint {
    const NONE: Footprint = Footprint {
        total: 0,
        largest: None,
    };

    /// `self` and one more limiter; of equals, the first stays the largest.
    fn add(self, culprit: Culprit, spec: LimitSpec, bytes: usize) -> Footprint {
        let larger = self.largest.is_none_or(|(_, _, b)| bytes > b);
        Footprint {
            total: self.total.saturating_add(bytes),
            largest: if larger {
                Some((culprit, spec, bytes))
            } else {
                self.largest
            },
        }
    }
}

/// The first of the file default and the listed services (in file order) whose
/// sampler's limiters would take more than the memory budget. Linear in the file;
/// allocates nothing.
pub(crate) fn over_budget(config: &SamplingConfig) -> Option<OverBudget> {
    std::iter::once(None)
        .chain((0..config.services.len()).map(Some))
        .find_map(|service| {
            let footprint = sampler_footprint(config, service);
            let (largest, largest_spec, largest_bytes) = footprint.largest?;
            (footprint.total > config.memory_budget).then_some(OverBudget {
                service,
                largest,
                largest_bytes,
                largest_spec,
                total: footprint.total,
            })
        })
}

/// What the limiters of the sampler of listed service `service` (`None`: of the
/// file default) take: its own policy (the default's, when it has none) and cap as
/// it applies them, and its rules, own and inherited.
fn sampler_footprint(config: &SamplingConfig, service: Option<usize>) -> Footprint {
    let default = &config.default;
    match service {
        None => {
            let rules = || (default.rules.iter().enumerate()).map(|(j, r)| (Culprit::Rule(j), r));
            footprint(default.policy, default.cap, rules)
        }
        Some(i) => {
            let s = &config.services[i];
            let rules = || {
                let own = (s.rules.iter().enumerate()).map(|(j, r)| (Culprit::Rule(j), r));
                let inherited = config
                    .inherited_rules(s)
                    .map(|(k, r)| (Culprit::Inherited(k), r));
                own.chain(inherited)
            };
            footprint(s.policy.or(default.policy), s.cap, rules)
        }
    }
}

/// What the limiters of one sampler take: its `policy` and `cap` (as it applies them)
/// and its `rules`, counted without allocating.
fn footprint<'a, I: Iterator<Item = (Culprit, &'a Rule)>>(
    policy: Option<Policy>,
    cap: Option<LimitSpec>,
    rules: impl Fn() -> I,
) -> Footprint {
    let floors: u64 = rules().map(|(_, r)| u64::from(r.floor)).sum();
    let per_rule = rules().flat_map(move |(culprit, rule)| {
        // A limit's limiter, or a lower bound's.
        let own = rule.policy.limiter().map(|spec| (culprit, spec));
        let floor = cap.filter(|_| rule.floor > 0).and_then(|cap| {
            let limit = Limit::per_window(rule.floor, cap.limit.window()).ok()?;
            Some((
                Culprit::Cap,
                LimitSpec::local(limit, Algorithm::FixedWindow),
            ))
        });
        own.into_iter().chain(floor)
    });
    let policy = policy
        .and_then(|p| p.limiter())
        .map(|spec| (Culprit::Policy, spec));
    // The cap's shared pool: the cap less the floors (as the sampler builds it).
    let pool = cap.and_then(|cap| {
        let pool = u64::from(cap.limit.permits()).saturating_sub(floors);
        let pool = u32::try_from(pool).ok().filter(|&p| p > 0)?;
        let limit = Limit::per_window(pool, cap.limit.window()).ok()?;
        Some((Culprit::Cap, LimitSpec { limit, ..cap }))
    });
    per_rule
        .chain(policy)
        .chain(pool)
        .fold(Footprint::NONE, |footprint, (c, spec)| {
            footprint.add(c, spec, limiter_bytes(spec))
        })
}

/// Samplers built together for one service (the `rate_limiting` blocks of a
/// declarative configuration file) whose limiters would take more than the budget,
/// together.
#[derive(Debug)]
#[cfg_attr(not(feature = "yaml"), allow(dead_code))] // only declarative files build several
pub(crate) struct OverBudgetTogether {
    /// The position of the sampler holding the largest limiter.
    pub(crate) sampler: usize,
    /// In that sampler's file: the listed service's position, `None` for the default.
    pub(crate) service: Option<usize>,
    /// The largest limiter of them all.
    pub(crate) largest: Culprit,
    pub(crate) largest_spec: LimitSpec,
    largest_bytes: usize,
    total: usize,
    budget: usize,
    samplers: usize,
}

/// The check of samplers built together for `service`, each from one of `configs`:
/// the sum of all their limiters against the largest budget any of them sets (the
/// default unless one sets more). Linear in the files; allocates nothing.
#[cfg_attr(not(feature = "yaml"), allow(dead_code))]
pub(crate) fn over_budget_together(
    configs: &[&SamplingConfig],
    service: &str,
) -> Option<OverBudgetTogether> {
    let budget = configs.iter().map(|c| c.memory_budget).max()?;
    let mut total = 0usize;
    let mut largest: Option<(usize, Option<usize>, Culprit, LimitSpec, usize)> = None;
    for (k, config) in configs.iter().enumerate() {
        let listed = config.position(service);
        let footprint = sampler_footprint(config, listed);
        total = total.saturating_add(footprint.total);
        if let Some((culprit, spec, bytes)) = footprint.largest {
            if largest.is_none_or(|(.., most)| bytes > most) {
                largest = Some((k, listed, culprit, spec, bytes));
            }
        }
    }
    let (sampler, service, largest, largest_spec, largest_bytes) = largest?;
    (total > budget).then_some(OverBudgetTogether {
        sampler,
        service,
        largest,
        largest_spec,
        largest_bytes,
        total,
        budget,
        samplers: configs.len(),
    })
}

/// What the samplers built together for `service`, each from one of `configs`, take in
/// all, and the budget they are held to: the largest any of them sets, the default
/// without any. Allocates nothing.
#[cfg_attr(not(feature = "yaml"), allow(dead_code))]
pub(crate) fn footprint_together(configs: &[&SamplingConfig], service: &str) -> (usize, usize) {
    let budget = (configs.iter().map(|c| c.memory_budget).max())
        .unwrap_or(SamplingConfig::DEFAULT_MEMORY_BUDGET);
    let total = configs.iter().fold(0usize, |total, config| {
        let footprint = sampler_footprint(config, config.position(service));
        total.saturating_add(footprint.total)
    });
    (total, budget)
}

#[cfg_attr(not(feature = "yaml"), allow(dead_code))]
impl OverBudgetTogether {
    /// The key of the largest limiter in `config`, the file of its sampler built for
    /// `service` (`default.rule[0]`, `service[1].cap`).
    pub(crate) fn key(&self, config: &SamplingConfig, service: &str) -> String {
        let rules = &config.default.rules;
        let of = match self.largest {
            Culprit::Rule(j) => {
                let rules = self.service.map_or(rules, |i| &config.services[i].rules);
                LimitOf::Rule(rules[j].name.clone())
            }
            Culprit::Inherited(j) => LimitOf::Rule(rules[j].name.clone()),
            Culprit::Policy => LimitOf::Default,
            Culprit::Cap => LimitOf::Cap,
        };
        config.limit_key(service, &of, "")
    }

    /// What is wrong and what to do: the samplers, the total, the largest limiter (in
    /// `config`, the file of its sampler) and its bytes.
    pub(crate) fn invalid(&self, config: &SamplingConfig, service: &str) -> Invalid {
        Invalid::new(
            ConfigErrorKind::MemoryBudget,
            format!(
                "the file's {} samplers for service {service:?} would take {} ({} bytes) together, over the memory budget of {}; the largest is {}",
                self.samplers,
                human(self.total),
                self.total,
                human(self.budget),
                largest(config, self.service, self.largest, self.largest_spec, self.largest_bytes),
            ),
        )
    }
}

impl OverBudget {
    /// What is wrong and what to do, naming the service, the largest limiter and bytes.
    pub(crate) fn invalid(&self, config: &SamplingConfig) -> Invalid {
        let who = match self.service {
            Some(i) => format!("service {:?}", config.services[i].name),
            None => "[default] (every service not listed)".to_owned(),
        };
        Invalid::new(
            ConfigErrorKind::MemoryBudget,
            format!(
                "{who}: its limiters would take {} ({} bytes), over the memory budget of {}; the largest is {}",
                human(self.total),
                self.total,
                human(config.memory_budget),
                largest(config, self.service, self.largest, self.largest_spec, self.largest_bytes),
            ),
        )
    }
}

/// The largest limiter, `culprit` of `service` (`None`: the file default) in `config`,
/// and what to do about it.
pub(crate) fn largest(
    config: &SamplingConfig,
    service: Option<usize>,
    culprit: Culprit,
    spec: LimitSpec,
    bytes: usize,
) -> String {
    let rules = &config.default.rules;
    let whose = match culprit {
        Culprit::Rule(j) => {
            let rules = service.map_or(rules, |i| &config.services[i].rules);
            format!("rule {:?}", rules[j].name)
        }
        Culprit::Inherited(j) => format!("rule {:?} (inherited from [default])", rules[j].name),
        Culprit::Policy => "its own policy".to_owned(),
        Culprit::Cap => "its cap".to_owned(),
    };
    format!(
        "{whose}, {} {}: {}. A sliding log keeps 16 bytes per permit: use algorithm \"sliding\" (constant memory), fewer permits per window, or raise [limits] memory_budget",
        spec.algorithm,
        spec.limit,
        human(bytes),
    )
}

/// `n` bytes for people: B, KiB, MiB or GiB.
pub(crate) fn human(n: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A `memory_budget`: a whole number of bytes, or a text such as `"512MiB"`, `"1GiB"`,
/// `"64KiB"` (also `KB`, `MB`, `GB` for powers of 1000); at least 1 KiB.
pub(crate) fn parse_budget(text: &str) -> Result<usize, Invalid> {
    let bad = || {
        Invalid::new(
            ConfigErrorKind::InvalidLimit,
            format!("memory budget {text:?} is not a size; use bytes (134217728) or a number and a unit: \"64KiB\", \"512MiB\", \"1GiB\" (KB, MB, GB for powers of 1000)"),
        )
    };
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(bad()),
    };
    let bytes = number.checked_mul(scale).ok_or_else(bad)?;
    budget_bytes(i64::try_from(bytes).unwrap_or(i64::MAX))
}

/// A budget in bytes: at least 1 KiB (a budget smaller than one limiter is a mistake).
pub(crate) fn budget_bytes(bytes: i64) -> Result<usize, Invalid> {
    match usize::try_from(bytes) {
        Ok(b) if b >= 1 << 10 => Ok(b),
        _ => Err(Invalid::new(
            ConfigErrorKind::InvalidLimit,
            format!("memory budget {bytes} bytes is below 1 KiB; give at least 1024 bytes, or a size such as \"512MiB\""),
        )),
    }
}

/// Bytes a sliding log keeps per permit: a sequence number and a timestamp.
const SLIDING_LOG_BYTES_PER_PERMIT: usize = 16;

/// The memory of the limiter of `spec`, as laid out on this target.
pub(crate) fn limiter_bytes(spec: LimitSpec) -> usize {
    let slots = match spec.algorithm {
        Algorithm::SlidingLog => {
            SLIDING_LOG_BYTES_PER_PERMIT.saturating_mul(spec.limit.permits() as usize)
        }
        Algorithm::BucketedWindow => crate::limiter::bucketed_heap_bytes(spec.limit),
        _ => 0,
    };
    // The limiter sits in an `Arc`: two counters, then the (cache-padded) struct.
    let fixed = 2 * size_of::<usize>() + size_of::<AnyLimiter<MonotonicClock>>();
    // `fair_by`: a fair limiter over it, in an `Arc` too, and its tables.
    let fair = spec.fair.map_or(0, |f| {
        2 * size_of::<usize>()
            + size_of::<FairLimiter<MonotonicClock>>()
            + FairLimiter::<MonotonicClock>::heap_bytes_for(f.max_keys as usize)
    });
    fixed.saturating_add(slots).saturating_add(fair)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_counts_what_the_summary_counts() {
        let text = "[limits]\nmemory_budget = \"1GiB\"\n[[service]]\nname = \"s\"\ncap = { limit = 1000, algorithm = \"sliding-log\" }\n[[service.rule]]\nspan_name = \"a\"\nlimit = 500\nalgorithm = \"sliding-log\"\nfloor = 300\n";
        let mut config = SamplingConfig::from_toml_str(text, "t.toml").unwrap();
        let total: usize = config
            .effective_rules("s")
            .limiters()
            .iter()
            .map(|l| l.bytes())
            .sum();
        config.memory_budget = total;
        assert!(over_budget(&config).is_none());
        config.memory_budget = total - 1;
        let over = over_budget(&config).unwrap();
        assert_eq!(
            (over.service, over.largest, over.total),
            (Some(0), Culprit::Cap, total)
        );
    }

    #[test]
    fn samplers_built_together_are_held_to_the_largest_budget_any_sets() {
        let log = |permits: u32| {
            let text = format!("[default]\nlimit = {permits}\nalgorithm = \"sliding-log\"\n");
            SamplingConfig::from_toml_str(&text, "b.toml").unwrap()
        };
        let (mut small, mut large) = (log(1000), log(2000));
        let total = sampler_footprint(&small, None).total + sampler_footprint(&large, None).total;
        small.memory_budget = 1 << 10;
        large.memory_budget = total;
        assert!(over_budget_together(&[&small, &large], "svc").is_none());
        std::mem::swap(&mut small.memory_budget, &mut large.memory_budget);
        assert!(over_budget_together(&[&small, &large], "svc").is_none());
        small.memory_budget = total - 1;
        let over = over_budget_together(&[&small, &large], "svc").unwrap();
        // The largest limiter is the second sampler's.
        assert_eq!(
            (over.sampler, over.service, over.largest),
            (1, None, Culprit::Policy)
        );
        assert_eq!(over.key(&large, "svc"), "default");
    }

    #[test]
    fn budgets_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_budget("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_budget("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_budget("64 KiB").unwrap(), 64 << 10);
        assert_eq!(parse_budget("2MB").unwrap(), 2_000_000);
        assert_eq!(parse_budget("4096").unwrap(), 4096);
        for bad in [
            "",
            "MiB",
            "-1MiB",
            "1.5GiB",
            "1 fortnight",
            "1B",
            "99999999999999GiB",
        ] {
            assert!(parse_budget(bad).is_err(), "{bad}");
        }
        assert!(budget_bytes(-5).is_err());
        assert_eq!(human(3 << 20), "3.0 MiB");
        assert_eq!(human(100), "100 B");
    }
}
