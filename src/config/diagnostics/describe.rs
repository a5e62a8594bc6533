//! [`SamplingConfig::describe`]: a service's effective rules, in evaluation order, for
//! people to read.

use std::fmt;

use crate::config::model::{
    fleet_cap_key, fleet_key, LimitSpec, Policy, Rule, SamplingConfig, ServiceConfig,
};
use crate::sampler::Origin;

/// [`SamplingConfig::describe`]'s text.
pub(crate) fn describe(config: &SamplingConfig, service: &str) -> impl fmt::Display {
    Describe(config.service(service), config.lists(service))
}

struct Describe(ServiceConfig, bool);

impl fmt::Display for Describe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self(s, listed) = self;
        write_service(f, s, *listed)?;
        write_cap(f, s)?;
        for (i, r) in s.rules.iter().enumerate() {
            write!(f, "  {}. rule {:?}: ", i + 1, r.name)?;
            write_matchers(f, r)?;
            write_rule_policy(f, s, r)?;
            writeln!(f)?;
        }
        write_otherwise(f, s)
    }
}

/// The service's name, whether the file lists it, and its parent policy.
fn write_service(f: &mut fmt::Formatter<'_>, s: &ServiceConfig, listed: bool) -> fmt::Result {
    let from = if listed {
        ""
    } else {
        " (not listed: the file default)"
    };
    writeln!(f, "service {:?}{from}", s.name)?;
    writeln!(f, "  remote parents: {:?}", s.remote_parents)
}

/// The cap, and the pool its floors leave to the default and to rules past their floor.
fn write_cap(f: &mut fmt::Formatter<'_>, s: &ServiceConfig) -> fmt::Result {
    let Some(cap) = &s.cap else {
        return writeln!(f, "  cap: none");
    };
    write!(f, "  cap: {}", DisplaySpec(cap))?;
    if cap.is_fleet() {
        write!(f, ", fleet-wide (key {:?})", fleet_cap_key(&s.name))?;
    }
    writeln!(f)?;
    let floors: u64 = s.rules.iter().map(|r| u64::from(r.floor)).sum();
    if floors > 0 {
        let pool = u64::from(cap.limit.permits()).saturating_sub(floors);
        writeln!(
            f,
            "  cap shared pool: {pool} per {:?} (the cap less the floors' {floors}), for the default and for rules past their floor",
            cap.limit.window()
        )?;
    }
    Ok(())
}

/// What a rule matches: its name pattern, kind, parent and attributes, or every span.
fn write_matchers(f: &mut fmt::Formatter<'_>, r: &Rule) -> fmt::Result {
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
    Ok(())
}

/// What a rule does with what it matches: its policy, where it comes from, its fleet key
/// and its floor.
fn write_rule_policy(f: &mut fmt::Formatter<'_>, s: &ServiceConfig, r: &Rule) -> fmt::Result {
    write!(f, "=> {}", DisplayPolicy(&r.policy))?;
    if r.inherited {
        f.write_str(" (inherited from [default])")?;
    }
    if r.policy.is_fleet() {
        write!(f, ", fleet-wide (key {:?})", fleet_key(&s.name, &r.name))?;
    }
    if r.floor > 0 {
        write!(f, ", floor {} per cap window", r.floor)?;
        if s.cap.is_some_and(|c| c.is_fleet()) {
            write!(f, " (fleet-wide)")?;
        }
    }
    Ok(())
}

/// The service's default policy, for spans no rule matches.
fn write_otherwise(f: &mut fmt::Formatter<'_>, s: &ServiceConfig) -> fmt::Result {
    match &s.policy {
        Some(p) if p.is_fleet() => writeln!(
            f,
            "  otherwise: {}, fleet-wide (key {:?})",
            DisplayPolicy(p),
            fleet_key(&s.name, "default")
        ),
        Some(p) => writeln!(f, "  otherwise: {}", DisplayPolicy(p)),
        None => writeln!(f, "  otherwise: drop"),
    }
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
        )?;
        if let Some(fair) = s.fair {
            write!(
                f,
                ", fair by key [{}] (max {} keys)",
                fair.names().join(", "),
                fair.max_keys
            )?;
        }
        Ok(())
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
