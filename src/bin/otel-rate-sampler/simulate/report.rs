//! What `simulate` prints: the header (what decides, the cap, the work), a row per
//! span of seconds, and the totals per replica and for the fleet.

use std::time::Duration;

use otel_rate_sampler::summary::EffectiveRules;

use super::args::SimulateArgs;
use super::decider::Decider;
use super::plan::{Plan, Row, MAX_CALLS};
use super::replica::Replica;
use crate::shown;

/// The first line: the service (`listed` says if the file lists it), the spans and the
/// load.
pub(super) fn offered(a: &SimulateArgs, listed: &str) {
    println!(
        "service {:?}{listed}: span {:?} ({:?}, {} attributes), {} per second for {}, {} replica(s)",
        a.service,
        a.span,
        a.kind,
        a.attrs.len(),
        shown::rate(a.rate),
        humantime::format_duration(a.duration),
        a.replicas
    );
}

/// What is simulated, what decides it, the cap and the work.
pub(super) fn header(a: &SimulateArgs, decider: &Decider, rules: &EffectiveRules, plan: &Plan) {
    let listed = if rules.listed() {
        ""
    } else {
        " (not listed: the file default)"
    };
    offered(a, listed);
    match decider {
        Decider::Drop => println!(
            "decided by: nothing keeps it (a fresh sampler dropped it: a probability-0 rule, no matching rule and no default, or a cap whose floors leave its rule no shared pool)"
        ),
        Decider::Limit(rule, limit, algorithm) => {
            println!("decided by: rule {rule:?}, keep {limit} ({algorithm})");
            println!("exact: the rule's limiter and the cap decide every span, for arrivals bunched at the start of each tick");
        }
        Decider::Probability(rule, p) => {
            println!("decided by: rule {rule:?}, keep with probability {p}");
            println!("estimated: the share a probability passes is its expected value (floor of offered x p, so far); exact from there: the cap decides every one");
        }
        Decider::AtLeast(rule, p, bound) => {
            println!("decided by: rule {rule:?}, keep with probability {p}, and at least {bound} (fixed)");
            println!("estimated: the share the probability passes is its expected value (floor of offered x p, so far); exact from there: the lower bound's limiter and the cap decide every other span");
        }
    }
    match rules.cap() {
        Some((limit, algorithm)) => println!("cap: {limit} ({algorithm})"),
        None => println!("cap: none"),
    }
    println!(
        "work: {} ticks of {}, at most {} sampler and limiter calls (budget {MAX_CALLS}), {} KiB of limiters",
        plan.ticks,
        humantime::format_duration(Duration::from_nanos(plan.tick_nanos)),
        plan.calls,
        plan.bytes.div_ceil(1024)
    );
}

/// The fleet's counts, a row per span of whole seconds.
pub(super) fn rows(plan: &Plan, decider: &Decider, rows: &[Row]) {
    let by = match decider {
        Decider::Drop => "rule".to_owned(),
        Decider::Limit(rule, ..) | Decider::Probability(rule, _) | Decider::AtLeast(rule, ..) => {
            format!("by {rule:?}")
        }
    };
    println!(
        "{:>13} {:>16} {:>16} {:>12} {:>14} {:>12}",
        "seconds", "offered", by, "cap refused", "kept", "kept/s"
    );
    let row_seconds = plan.row_ticks * plan.tick_nanos / 1_000_000_000;
    for (i, row) in rows.iter().enumerate() {
        let start = i as u64 * row_seconds;
        let end = ((i as u64 + 1) * row_seconds) as f64;
        let length = end.min(plan.seconds()) - start as f64;
        println!(
            "{:>13} {:>16} {:>16} {:>12} {:>14} {:>12.1}",
            format!("{start}-{}", end.min(plan.seconds())),
            row.offered,
            row.admitted,
            row.admitted - row.kept,
            row.kept,
            row.kept as f64 / length
        );
    }
}

/// What each replica (the first few) and the fleet offered and kept.
pub(super) fn totals(plan: &Plan, replicas: &[Replica]) {
    let counts: Vec<_> = replicas.iter().map(|r| (r.offered, r.kept)).collect();
    counts_per_replica(plan.seconds(), &counts);
}

/// Each replica's (the first few) and the fleet's `(offered, kept)` over `seconds`.
pub(super) fn counts_per_replica(seconds: f64, replicas: &[(u64, u64)]) {
    const LISTED: usize = 32;
    if replicas.len() > 1 {
        for (j, (offered, kept)) in replicas.iter().enumerate().take(LISTED) {
            println!(
                "replica {}: offered {offered}, kept {kept} ({:.1}/s)",
                j + 1,
                *kept as f64 / seconds
            );
        }
        if replicas.len() > LISTED {
            println!("({} more replicas not listed)", replicas.len() - LISTED);
        }
    }
    let offered: u64 = replicas.iter().map(|r| r.0).sum();
    let kept: u64 = replicas.iter().map(|r| r.1).sum();
    println!(
        "total ({} replica(s)): offered {offered}, kept {kept} ({:.1}/s)",
        replicas.len(),
        kept as f64 / seconds
    );
}
