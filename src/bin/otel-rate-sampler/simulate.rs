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
//! * **Limit rule.** A twin limiter (the same algorithm, limit and clock as the rule's)
//!   is asked until it refuses: that is how many of the tick's arrivals the rule's own
//!   limiter admits. Exactly that many spans are then offered to the sampler (its
//!   limiter admits them all, and the cap keeps a prefix; the ones the cap refuses
//!   still spend the rule's permits, as in a real process). The rest are refused by the
//!   rule and counted without a call.
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
//! their windows in the run. A run over
//! [`MAX_CALLS`] or [`MAX_BYTES`] is refused before it starts.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::attributes::SAMPLER_RULE;
use otel_rate_sampler::summary::{EffectiveRules, RulePolicy};
use otel_rate_sampler::{
    Algorithm, AnyLimiter, Limit, ManualClock, RateLimiter, RuleBasedSampler, SamplingConfig,
};

use crate::args::{self, Kind};
use crate::Failure;

/// The budget of a run: sampler and limiter calls, summed over replicas.
pub(crate) const MAX_CALLS: u128 = 50_000_000;
/// The budget of a run: bytes of limiters (samplers and twins, all replicas).
pub(crate) const MAX_BYTES: u128 = 256 << 20;
/// At most this many ticks per shortest window.
const TICKS_PER_WINDOW: u64 = 100;
/// Tick lengths, longest first; each divides a second.
const TICK_CHOICES_MS: [u64; 5] = [10, 5, 4, 2, 1];
/// At most this many rows are printed; a row spans whole seconds.
const MAX_ROWS: u64 = 60;
/// A trace id every nonzero probability keeps: its 56 random bits (the low 56, OTEP
/// 235) are all ones, at least any rejection threshold below 2^56.
const KEEP_ID: TraceId =
    TraceId::from_bytes([0, 0, 0, 0, 0, 0, 0, 1, 0, 255, 255, 255, 255, 255, 255, 255]);
/// A trace id every probability below 1 refuses: its 56 random bits are all zeros,
/// below any rejection threshold but that of probability 1 (zero).
const REFUSE_ID: TraceId = TraceId::from_bytes([0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);

/// Offer root spans at a steady rate to one service's real sampler, on a manual clock,
/// and print the traces kept per second: by the deciding rule, and after the cap.
///
/// Limits and the cap are exact for the simulated arrivals (evenly spaced, bunched at
/// the start of ticks of 1 to 10 ms); a probability's share is its expected value. The
/// work is bounded: at most 50 000 000 sampler and limiter calls and 256 MiB of
/// limiters per run; a longer run is refused with the duration that fits.
#[derive(Debug, clap::Args)]
pub(crate) struct SimulateArgs {
    /// The rule file: TOML, Jaeger sampling strategies (`.json`), YAML (`.yaml`, `.yml`),
    /// or an OpenTelemetry declarative configuration file (YAML with `file_format`,
    /// simulated with the rules of its first `rate_limiting` sampler).
    file: PathBuf,
    /// The service whose sampler decides (one the file does not list gets the default).
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    service: String,
    /// Root spans offered per second, in all (fractional allowed; at most 1e12).
    #[arg(long, value_name = "R", value_parser = args::rate, allow_negative_numbers = true)]
    rate: f64,
    /// How long to offer them: 500ms, 10s, 2m, 1h.
    #[arg(long, value_name = "D", value_parser = args::duration, allow_hyphen_values = true)]
    duration: Duration,
    /// The spans' name.
    #[arg(long, value_name = "NAME", default_value = "simulated")]
    span: String,
    /// The spans' kind.
    #[arg(long, value_enum, default_value_t = Kind::Server)]
    kind: Kind,
    /// An attribute present when the spans start (repeat for more); values are text.
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = args::attribute)]
    attrs: Vec<(String, String)>,
    /// K replicas, each with its own sampler, each offered R/K (1 to 1000).
    #[arg(long, value_name = "K", value_parser = args::replicas, default_value = "1", allow_negative_numbers = true)]
    replicas: NonZeroU32,
}

/// The spans offered.
struct Span {
    name: String,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
}

impl Span {
    /// Whether `sampler` keeps a root span with this trace id.
    fn kept(&self, sampler: &RuleBasedSampler<ManualClock>, id: TraceId) -> bool {
        let result = sampler.should_sample(None, id, &self.name, &self.kind, &self.attributes, &[]);
        result.decision == SamplingDecision::RecordAndSample
    }
}

/// What decides the offered spans, as a probe of a fresh sampler showed.
#[derive(Clone, Debug)]
enum Decider {
    /// Nothing is kept.
    Drop,
    /// The rule (or `default`) with this limit.
    Limit(String, Limit, Algorithm),
    /// The rule (or `default`) with this probability.
    Probability(String, f64),
    /// The rule (or `default`) with this probability and this lower bound (a fixed
    /// window).
    AtLeast(String, f64, Limit),
}

pub(crate) fn run(a: &SimulateArgs) -> Result<ExitCode, Failure> {
    let config = SamplingConfig::from_path(&a.file)?;
    let span = Span {
        name: a.span.clone(),
        kind: a.kind.into(),
        attributes: a
            .attrs
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect(),
    };
    let rules = config.effective_rules(&a.service);
    // Before the probe builds a sampler.
    memory(&rules, a.replicas)?;
    let decider = probe(&config, &a.service, &span)?;
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
    print_header(a, &decider, &rules, &plan);
    print_rows(&plan, &decider, &rows);
    print_totals(&plan, &replicas);
    Ok(ExitCode::SUCCESS)
}

/// Asks a fresh sampler (its own clock, so every limiter has room) once: if it keeps
/// the span, the `sampler.rule` it records names the deciding rule.
fn probe(config: &SamplingConfig, service: &str, span: &Span) -> Result<Decider, Failure> {
    let sampler = RuleBasedSampler::with_clock(config, service, ManualClock::new())?;
    let result =
        sampler.should_sample(None, KEEP_ID, &span.name, &span.kind, &span.attributes, &[]);
    if result.decision != SamplingDecision::RecordAndSample {
        return Ok(Decider::Drop);
    }
    let Some(name) = result
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == SAMPLER_RULE)
        .map(|kv| kv.value.as_str().into_owned())
    else {
        return Err(Failure::File(format!(
            "the sampler kept a span without {SAMPLER_RULE}"
        )));
    };
    let rules = config.effective_rules(service);
    // A rule may be named "default" too; the rule comes first, as in the sampler.
    let policy = rules
        .rules()
        .iter()
        .find(|r| r.name() == name)
        .map(|r| r.policy())
        .or(if name == "default" {
            rules.default()
        } else {
            None
        });
    Ok(match policy {
        Some(RulePolicy::Limit { limit, algorithm }) => Decider::Limit(name, limit, algorithm),
        Some(RulePolicy::Probability(p)) => Decider::Probability(name, p),
        Some(RulePolicy::AtLeast {
            probability,
            lower_bound,
        }) => Decider::AtLeast(name, probability, lower_bound),
        // Its probability follows the offered count, which the tick-wise model does
        // not make: say so rather than print a wrong table.
        Some(RulePolicy::Adaptive { .. }) => {
            return Err(Failure::File(format!(
                "rule {name:?} is adaptive, which simulate does not model yet (it keeps about, and at most, its limit per window); simulate a `rate` of the same value for the cap's bound"
            )))
        }
        _ => {
            return Err(Failure::File(format!(
                "the sampler kept a span by an unknown rule {name:?}"
            )))
        }
    })
}

/// One replica: its own sampler and, for a limit rule, the twin of the rule's limiter.
struct Replica {
    sampler: RuleBasedSampler<ManualClock>,
    twin: Option<AnyLimiter<ManualClock>>,
    /// Offered R/K per second at times `(k + phase) / (R/K)`, k = 0, 1, …: the
    /// replicas' arrivals interleave into the fleet's evenly spaced R per second.
    per_second: f64,
    phase: f64,
    /// Arrivals before the current tick.
    offered: u64,
    /// The traces a probability has passed so far: `floor(offered × p)`.
    passed: u64,
    kept: u64,
}

impl Replica {
    fn new(
        config: &SamplingConfig,
        service: &str,
        clock: &ManualClock,
        decider: &Decider,
        (index, replicas): (u32, NonZeroU32),
        fleet_rate: f64,
    ) -> Result<Self, Failure> {
        let twin = match decider {
            Decider::Limit(_, limit, algorithm) => {
                Some(AnyLimiter::with_clock(*algorithm, *limit, clock.clone()))
            }
            Decider::AtLeast(_, _, bound) => Some(AnyLimiter::with_clock(
                Algorithm::FixedWindow,
                *bound,
                clock.clone(),
            )),
            _ => None,
        };
        Ok(Self {
            sampler: RuleBasedSampler::with_clock(config, service, clock.clone())?,
            twin,
            per_second: fleet_rate / f64::from(replicas.get()),
            phase: f64::from(index) / f64::from(replicas.get()),
            offered: 0,
            passed: 0,
            kept: 0,
        })
    }

    /// The arrivals before `nanos`: `ceil(r·t − phase)`.
    fn arrivals_before(&self, nanos: u64) -> u64 {
        let due = self.per_second * (nanos as f64 / 1e9) - self.phase;
        // Saturating, and monotone in `nanos`.
        due.ceil().max(0.0) as u64
    }

    /// Offers the arrivals of the tick ending at `end`; returns (offered, admitted by
    /// the rule, kept).
    fn tick(
        &mut self,
        end: u64,
        decider: &Decider,
        span: &Span,
        capped: bool,
    ) -> Result<[u64; 3], Failure> {
        let arrived = self.arrivals_before(end).max(self.offered);
        let n = arrived - self.offered;
        self.offered = arrived;
        let (admitted, kept) = self.offer(n, decider, span, capped)?;
        self.kept += kept;
        Ok([n, admitted, kept])
    }

    /// Offers `n` arrivals at once; returns (admitted by the rule, kept).
    fn offer(
        &mut self,
        n: u64,
        decider: &Decider,
        span: &Span,
        capped: bool,
    ) -> Result<(u64, u64), Failure> {
        let count = |n: usize| n as u64;
        match decider {
            Decider::Drop => Ok((0, 0)),
            Decider::Limit(..) => {
                let twin = self
                    .twin
                    .as_ref()
                    .ok_or_else(|| internal("no twin limiter"))?;
                let admitted = count((0..n).take_while(|_| twin.try_acquire()).count());
                let kept = count(
                    (0..admitted)
                        .filter(|_| span.kept(&self.sampler, KEEP_ID))
                        .count(),
                );
                if !capped && kept != admitted {
                    return Err(internal(
                        "the sampler and the twin of its rule's limiter disagree",
                    ));
                }
                Ok((admitted, kept))
            }
            Decider::Probability(_, p) => {
                let passed = self.passed_by(*p, n);
                Ok((passed, self.offer_passed(passed, span, capped)))
            }
            Decider::AtLeast(_, p, _) => {
                let passed = self.passed_by(*p, n);
                let twin = self
                    .twin
                    .as_ref()
                    .ok_or_else(|| internal("no twin limiter"))?;
                // The probability's keeps spend the lower bound's permits first; the
                // other arrivals take what is left.
                let spending = count((0..passed).take_while(|_| twin.try_acquire()).count());
                let extra = count((passed..n).take_while(|_| twin.try_acquire()).count());
                let kept_spending = count(
                    (0..spending)
                        .filter(|_| span.kept(&self.sampler, KEEP_ID))
                        .count(),
                );
                let kept_passed = self.offer_passed(passed - spending, span, capped);
                let kept_extra = count(
                    (0..extra)
                        .filter(|_| span.kept(&self.sampler, REFUSE_ID))
                        .count(),
                );
                let (admitted, kept) = (passed + extra, kept_spending + kept_passed + kept_extra);
                if !capped && kept != admitted {
                    return Err(internal(
                        "the sampler and the twin of its rule's lower bound disagree",
                    ));
                }
                Ok((admitted, kept))
            }
        }
    }

    /// How many of `n` arrivals a probability `p` passes: from the running total
    /// `floor(offered × p)`, so that no rounding accumulates.
    fn passed_by(&mut self, p: f64, n: u64) -> u64 {
        let due = (self.offered as f64 * p).floor() as u64;
        let passed = due.saturating_sub(self.passed).min(n);
        self.passed += passed;
        passed
    }

    /// Offers `passed` spans the probability keeps (at one instant, nothing else
    /// changing): under a cap until it refuses one, else one stands for all. Returns
    /// how many are kept.
    fn offer_passed(&self, passed: u64, span: &Span, capped: bool) -> u64 {
        if capped {
            (0..passed)
                .take_while(|_| span.kept(&self.sampler, KEEP_ID))
                .count() as u64
        } else if passed > 0 && span.kept(&self.sampler, KEEP_ID) {
            passed
        } else {
            0
        }
    }
}

fn internal(what: &str) -> Failure {
    Failure::File(format!(
        "otel-rate-sampler: internal error in simulate: {what}"
    ))
}

/// The fleet's counts over a row of whole seconds.
#[derive(Clone, Copy, Debug, Default)]
struct Row {
    offered: u64,
    admitted: u64,
    kept: u64,
}

/// The run's shape, checked against the budget before it starts.
#[derive(Debug)]
struct Plan {
    duration_nanos: u64,
    tick_nanos: u64,
    ticks: u64,
    row_ticks: u64,
    calls: u128,
    bytes: u128,
}

impl Plan {
    fn new(a: &SimulateArgs, decider: &Decider, rules: &EffectiveRules) -> Result<Self, Failure> {
        let cap = rules.cap().map(|(limit, _)| limit);
        let deciding = match decider {
            Decider::Limit(_, limit, _) | Decider::AtLeast(_, _, limit) => Some(*limit),
            _ => None,
        };
        let shortest = deciding.iter().chain(&cap).map(Limit::window_nanos).min();
        let tick_nanos = tick_for(shortest);
        let d = a.duration.as_nanos();
        let ticks = d.div_ceil(u128::from(tick_nanos));
        // The permits the deciding limiter (or, for a probability, the cap; for a lower
        // bound, both) can admit.
        let bounds = match decider {
            Decider::Probability(..) => [cap, None],
            Decider::AtLeast(..) => [deciding, cap],
            _ => [deciding, None],
        };
        let admissions: u128 = bounds
            .iter()
            .flatten()
            .map(|l| u128::from(l.permits()) * (d.div_ceil(u128::from(l.window_nanos())) + 1))
            .sum();
        let k = u128::from(a.replicas.get());
        let calls = k * (3 * ticks + 2 * admissions);
        let bytes = memory(rules, a.replicas)?;
        over_budget(a.duration, calls)?;
        let ticks_per_second = 1_000_000_000 / tick_nanos;
        let row_seconds = a.duration.as_secs().div_ceil(MAX_ROWS).max(1);
        Ok(Self {
            // Within the budget, so well within u64.
            duration_nanos: u64::try_from(d).map_err(|_| internal("duration"))?,
            tick_nanos,
            ticks: u64::try_from(ticks).map_err(|_| internal("ticks"))?,
            row_ticks: ticks_per_second * row_seconds,
            calls,
            bytes,
        })
    }

    /// Runs every tick for every replica; returns the fleet's rows.
    fn run(
        &self,
        clock: &ManualClock,
        replicas: &mut [Replica],
        decider: &Decider,
        span: &Span,
        capped: bool,
    ) -> Result<Vec<Row>, Failure> {
        let mut rows = vec![Row::default(); self.ticks.div_ceil(self.row_ticks) as usize];
        for (tick, start) in (0..self.ticks).map(|i| (i, i * self.tick_nanos)) {
            clock.set(start);
            let end = (start + self.tick_nanos).min(self.duration_nanos);
            let row = &mut rows[(tick / self.row_ticks) as usize];
            for r in replicas.iter_mut() {
                let [offered, admitted, kept] = r.tick(end, decider, span, capped)?;
                row.offered += offered;
                row.admitted += admitted;
                row.kept += kept;
            }
        }
        Ok(rows)
    }

    fn seconds(&self) -> f64 {
        self.duration_nanos as f64 / 1e9
    }
}

/// The longest tick that puts at most [`TICKS_PER_WINDOW`] ticks in `shortest`.
fn tick_for(shortest: Option<u64>) -> u64 {
    let most = shortest.map_or(u64::MAX, |w| w / TICKS_PER_WINDOW);
    let ms = TICK_CHOICES_MS
        .into_iter()
        .find(|ms| ms * 1_000_000 <= most)
        .unwrap_or(1);
    ms * 1_000_000
}

/// The bytes of limiters a run builds: each replica's sampler and a twin no larger
/// than all its limiters, and the probe's sampler. Refused over [`MAX_BYTES`].
fn memory(rules: &EffectiveRules, replicas: NonZeroU32) -> Result<u128, Failure> {
    let per_sampler: usize = rules.limiters().iter().map(|l| l.bytes()).sum();
    let bytes = (2 * u128::from(replicas.get()) + 1) * per_sampler as u128;
    if bytes > MAX_BYTES {
        return Err(Failure::Usage(format!(
            "simulate would build {} MiB of limiters, over the budget of {} MiB; use fewer --replicas or smaller sliding logs",
            bytes >> 20,
            MAX_BYTES >> 20
        )));
    }
    Ok(bytes)
}

/// Refuses a run over [`MAX_CALLS`], with the duration that fits.
fn over_budget(duration: Duration, calls: u128) -> Result<(), Failure> {
    if calls > MAX_CALLS {
        // Calls grow about linearly with the duration.
        let fits = duration.as_secs_f64() * (MAX_CALLS as f64 / calls as f64);
        let fits = Duration::from_secs(fits.floor() as u64);
        return Err(Failure::Usage(format!(
            "simulate would make up to {calls} sampler and limiter calls, over the budget of {MAX_CALLS}; use a shorter --duration (about {} fits) or fewer --replicas",
            humantime::format_duration(fits)
        )));
    }
    Ok(())
}

fn print_header(a: &SimulateArgs, decider: &Decider, rules: &EffectiveRules, plan: &Plan) {
    let listed = if rules.listed() {
        ""
    } else {
        " (not listed: the file default)"
    };
    println!(
        "service {:?}{listed}: span {:?} ({:?}, {} attributes), {} per second for {}, {} replica(s)",
        a.service,
        a.span,
        a.kind,
        a.attrs.len(),
        a.rate,
        humantime::format_duration(a.duration),
        a.replicas
    );
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

fn print_rows(plan: &Plan, decider: &Decider, rows: &[Row]) {
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

fn print_totals(plan: &Plan, replicas: &[Replica]) {
    let seconds = plan.seconds();
    const LISTED: usize = 32;
    if replicas.len() > 1 {
        for (j, r) in replicas.iter().enumerate().take(LISTED) {
            println!(
                "replica {}: offered {}, kept {} ({:.1}/s)",
                j + 1,
                r.offered,
                r.kept,
                r.kept as f64 / seconds
            );
        }
        if replicas.len() > LISTED {
            println!("({} more replicas not listed)", replicas.len() - LISTED);
        }
    }
    let offered: u64 = replicas.iter().map(|r| r.offered).sum();
    let kept: u64 = replicas.iter().map(|r| r.kept).sum();
    println!(
        "total ({} replica(s)): offered {offered}, kept {kept} ({:.1}/s)",
        replicas.len(),
        kept as f64 / seconds
    );
}
