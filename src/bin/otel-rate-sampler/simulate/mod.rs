//! `simulate`: a steady load of root spans offered to the real `RuleBasedSampler` on a
//! `ManualClock`, in time and memory bounded by the rules and the windows, never by the
//! number of traces offered.
//!
//! # How
//!
//! Time advances in ticks (at most 100 per shortest window involved, 1 to 10 ms, each
//! dividing a second); the arrivals of a tick are offered at its start. At a fixed
//! clock time nothing frees a permit, so:
//!
//! * **Limit rule.** The tick's arrivals are offered to the sampler until it refuses
//!   one; the rest would be refused alike, and are counted without a call: by the cap
//!   if it refused (the rule admitted them, and got its permit back, as in a real
//!   process), else by the rule. A twin limiter (the same algorithm, limit and clock
//!   as the rule's) spends a permit per span kept and must refuse when the rule does.
//! * **Probability rule.** The tick passes its expected share: the running total
//!   `floor(offered so far × p)` less what already passed. Those are offered with a
//!   trace id every probability keeps until the cap refuses one (without a cap, one is
//!   offered and the rest counted).
//! * **Probability with a lower bound (`at_least`).** The probability passes its
//!   expected share, as above; a twin of the lower bound's limiter is asked for each of
//!   them (the sampler's lower bound spends a permit on each while it has one), then
//!   for the tick's other arrivals until it refuses. The passed spans that spend a
//!   permit are offered one by one (the rest as for a probability), then the other
//!   arrivals the twin admitted, each with a trace id no probability below 1 keeps.
//!
//! So the calls per tick are at most the permits admitted plus 3, and the whole run
//! makes at most `K × (3 × ticks + 2 × admissions)` calls, `admissions` being the
//! permits of the deciding limit (or the cap, or the lower bound and the cap) times
//! their windows in the run. A run over [`MAX_CALLS`](plan::MAX_CALLS) or
//! [`MAX_BYTES`](plan::MAX_BYTES) is refused before it starts.
//!
//! A declarative file whose roots no rule file decides (a composite sampler) is offered
//! span by span instead (`declarative`).
//!
//! With `--keys`, the spans get routes and are offered span by span instead, beside a
//! plain cap of the deciding limit (`keys`).
//!
//! A file by role: the command's `args`, the `spans` it offers, the `decider` a probe
//! finds, a `replica`'s sampler and twin, the `plan` of ticks within the budget, and
//! the `report` printed.

mod args;
mod decider;
mod declarative;
mod keys;
mod plan;
mod replica;
mod report;
mod spans;

use std::process::ExitCode;

pub(crate) use args::SimulateArgs;
use decider::probe;
use otel_rate_sampler::lint::LintKind;
use otel_rate_sampler::{ManualClock, SamplingConfig};
use plan::{memory, Plan};
use replica::Replica;
use spans::Span;

use crate::check;
use crate::failure::Failure;

/// Refuses a service whose real sampler would not build on the default clock: a local
/// window shorter than the clock's resolution, found by the same lint `check` reports
/// as an error (`LintKind::WindowBelowClock`). The simulation's `ManualClock` would
/// serve such a window exactly and show a rate no real process gets.
fn refuse_what_the_sampler_refuses(
    a: &SimulateArgs,
    config: &SamplingConfig,
) -> Result<(), Failure> {
    let refused: Vec<String> = check::lints(config, Some(&a.service), a.replicas)
        .iter()
        .filter(|l| l.kind() == LintKind::WindowBelowClock)
        .map(|l| format!("  {l}"))
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(Failure::File(format!(
        "{}: not simulated: the sampler of service {:?} refuses this file, as `check` says:\n{}",
        a.file.display(),
        a.service,
        refused.join("\n")
    )))
}

/// Runs `simulate`: probes what decides, plans the ticks within the budget, runs them
/// for every replica and prints the report; a declarative file whose roots no rule
/// file decides is run span by span (`declarative`).
pub(crate) fn run(a: &SimulateArgs) -> Result<ExitCode, Failure> {
    if let Some(sampler) = check::declarative(&a.file, Some(&a.service))? {
        if !sampler.roots_decided_by_rules() {
            return declarative::run(a, &sampler);
        }
    }
    let config = SamplingConfig::from_path(&a.file)?;
    refuse_what_the_sampler_refuses(a, &config)?;
    let span = Span::of(a);
    let rules = config.effective_rules(&a.service);
    // Before the probe builds a sampler.
    memory(&rules, a.replicas)?;
    let decider = probe(&config, &a.service, &span)?;
    if let Some(k) = a.keys {
        return keys::run(a, &config, &decider, k);
    }
    let plan = Plan::new(a, &decider, &rules)?;
    let clock = ManualClock::new();
    let mut replicas = (0..a.replicas.get())
        .map(|j| {
            Replica::new(
                &config,
                &a.service,
                &clock,
                &decider,
                (j, a.replicas),
                a.rate,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rows = plan.run(
        &clock,
        &mut replicas,
        &decider,
        &span,
        rules.cap().is_some(),
    )?;
    report::header(a, &decider, &rules, &plan);
    report::rows(&plan, &decider, &rows);
    report::totals(&plan, &replicas);
    Ok(ExitCode::SUCCESS)
}
