//! A declarative file whose roots no rule file decides (a `composite/development`
//! sampler, the SDK's samplers): every span is offered to the file's whole sampler
//! tree, its limiters on a `ManualClock` set to each span's arrival, with trace ids from
//! a seeded generator (the same every run). The work is one call per span, checked
//! against the budget before the run starts.

use std::process::ExitCode;

use opentelemetry::trace::TraceId;
use opentelemetry_sdk::trace::SamplingDecision;
use otel_rate_sampler::{DeclarativeSampler, ManualClock};

use super::args::SimulateArgs;
use super::plan::{over_budget, MAX_ROWS};
use super::report;
use super::spans::Span;
use crate::failure::Failure;
use crate::tree;

/// The fleet's counts over a row of whole seconds.
#[derive(Clone, Copy, Debug, Default)]
struct Row {
    offered: u64,
    kept: u64,
    /// Kept spans whose trace state carries a threshold (`th` in the `ot` entry).
    with_th: u64,
}

/// Runs `simulate` span by span on `sampler`'s tree (already loaded once, on the
/// monotonic clock, to see what decides roots).
pub(super) fn run(a: &SimulateArgs, sampler: &DeclarativeSampler) -> Result<ExitCode, Failure> {
    let spans = (a.rate * a.duration.as_secs_f64()).floor();
    // One sampler call per span, whatever the tree holds.
    over_budget(a.duration, spans as u128)?;
    let spans = spans as u64;
    let clock = ManualClock::new();
    let replicas = (0..a.replicas.get())
        .map(|_| DeclarativeSampler::from_path_with_clock(&a.file, &a.service, clock.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let span = Span::of(a);
    let row_seconds = a.duration.as_secs().div_ceil(MAX_ROWS).max(1);
    let row_nanos = row_seconds * 1_000_000_000;
    let rows_len = a.duration.as_nanos().div_ceil(u128::from(row_nanos)).max(1) as usize;
    let mut rows = vec![Row::default(); rows_len];
    let mut per_replica = vec![Row::default(); replicas.len()];
    let mut ids = Ids(0x5eed);
    for i in 0..spans {
        // Evenly spaced over the fleet, each replica taking every K-th.
        let at = (i as f64 * 1e9 / a.rate) as u64;
        clock.set(at);
        let j = (i % replicas.len() as u64) as usize;
        let result = span.result(&replicas[j], ids.next_id());
        let kept = result.decision == SamplingDecision::RecordAndSample;
        let th = kept
            && result
                .trace_state
                .get("ot")
                .is_some_and(|ot| ot.split(';').any(|f| f.starts_with("th:")));
        for row in [&mut rows[(at / row_nanos) as usize], &mut per_replica[j]] {
            row.offered += 1;
            row.kept += u64::from(kept);
            row.with_th += u64::from(th);
        }
    }
    header(a, sampler, spans);
    print_rows(a, &rows, row_seconds);
    let counts: Vec<_> = per_replica.iter().map(|r| (r.offered, r.kept)).collect();
    report::counts_per_replica(a.duration.as_secs_f64(), &counts);
    Ok(ExitCode::SUCCESS)
}

/// What is simulated, the sampler tree and the work.
fn header(a: &SimulateArgs, sampler: &DeclarativeSampler, spans: u64) {
    report::offered(a, "");
    println!("decided by the file's sampler (no rule file decides roots):");
    print!("{}", tree::indented(&sampler.to_string(), 1));
    println!("exact: every span is offered to the sampler at its own time (evenly spaced), with seeded pseudo-random trace ids");
    println!("work: {spans} sampler calls");
}

/// The fleet's counts, a row per span of whole seconds.
fn print_rows(a: &SimulateArgs, rows: &[Row], row_seconds: u64) {
    println!(
        "{:>13} {:>16} {:>14} {:>14} {:>12}",
        "seconds", "offered", "kept", "kept with th", "kept/s"
    );
    let seconds = a.duration.as_secs_f64();
    for (i, row) in rows.iter().enumerate() {
        let start = i as u64 * row_seconds;
        let end = ((i as u64 + 1) * row_seconds) as f64;
        println!(
            "{:>13} {:>16} {:>14} {:>14} {:>12.1}",
            format!("{start}-{}", end.min(seconds)),
            row.offered,
            row.kept,
            row.with_th,
            row.kept as f64 / (end.min(seconds) - start as f64)
        );
    }
}

/// Trace ids from splitmix64: 128 bits whose low 56 (the randomness a composite sampler
/// compares with its threshold) are uniform.
pub(super) struct Ids(pub(super) u64);

impl Ids {
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_id(&mut self) -> TraceId {
        let high = u128::from(self.next_u64()) << 64;
        TraceId::from(high | u128::from(self.next_u64()))
    }
}
