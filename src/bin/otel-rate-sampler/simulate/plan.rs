//! The run's shape: ticks, rows and the budget of calls and bytes it is checked
//! against before it starts; then the run itself, tick by tick.

use std::num::NonZeroU32;
use std::time::Duration;

use otel_rate_sampler::summary::EffectiveRules;
use otel_rate_sampler::{Limit, ManualClock};

use super::args::SimulateArgs;
use super::decider::Decider;
use super::replica::{internal, Replica};
use super::spans::Span;
use crate::failure::Failure;

/// The budget of a run: sampler and limiter calls, summed over replicas.
pub(crate) const MAX_CALLS: u128 = 50_000_000;
/// The budget of a run: bytes of limiters (samplers and twins, all replicas).
pub(crate) const MAX_BYTES: u128 = 256 << 20;
/// At most this many ticks per shortest window.
const TICKS_PER_WINDOW: u64 = 100;
/// Tick lengths, longest first; each divides a second.
const TICK_CHOICES_MS: [u64; 5] = [10, 5, 4, 2, 1];
/// At most this many rows are printed; a row spans whole seconds.
pub(super) const MAX_ROWS: u64 = 60;

/// The fleet's counts over a row of whole seconds.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Row {
    pub(super) offered: u64,
    pub(super) admitted: u64,
    pub(super) kept: u64,
}

/// The run's shape, checked against the budget before it starts.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) duration_nanos: u64,
    pub(super) tick_nanos: u64,
    pub(super) ticks: u64,
    pub(super) row_ticks: u64,
    pub(super) calls: u128,
    pub(super) bytes: u128,
}

impl Plan {
    pub(super) fn new(
        a: &SimulateArgs,
        decider: &Decider,
        rules: &EffectiveRules,
    ) -> Result<Self, Failure> {
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
    pub(super) fn run(
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

    pub(super) fn seconds(&self) -> f64 {
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
pub(super) fn memory(rules: &EffectiveRules, replicas: NonZeroU32) -> Result<u128, Failure> {
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
pub(super) fn over_budget(duration: Duration, calls: u128) -> Result<(), Failure> {
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
