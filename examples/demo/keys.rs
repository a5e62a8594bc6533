//! `--keys K --skew S`: each root gets an `http.route` drawn from K routes (`/route/0`
//! ...), Zipf with exponent S (0: uniform); and what the summary says per route.
//!
//! * `per_key`: `{"/route/i": {"offered": n, "kept": n, "adjusted": x}}`, `adjusted`
//!   the sum of `1 / p` over the route's kept roots, `p` the root's
//!   `sampler.key_probability` (1 where the sampler writes none: a plain cap's kept
//!   roots stand for themselves only).
//! * `keys_starved`: the pairs of a whole window and a route offered in it and in the
//!   window before that kept nothing in it.
//!
//! A generating thread counts per route and window into its own [`RouteCounts`]; the
//! reporter takes each window's counts when it reports the window (so memory stays at
//! the windows not yet reported), and the totals at the end.

use std::cell::Cell;
use std::collections::BTreeMap;

use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult};
use otel_rate_sampler::attributes::SAMPLER_KEY_PROBABILITY;
use serde::Serialize;

use crate::load::{lock, WorkerSlot};

/// The attribute each root's route goes in.
pub(crate) const ROUTE_KEY: &str = "http.route";

thread_local! {
    /// The probability of this thread's last kept root (`None`: none written).
    static PROBABILITY: Cell<Option<f64>> = const { Cell::new(None) };
}

/// Leaves the probability a kept root's `result` carries for this thread's
/// [`take_probability`] (its children's results carry none and leave it).
pub(crate) fn note_probability(result: &SamplingResult) {
    if result.decision != SamplingDecision::RecordAndSample {
        return;
    }
    let p = result
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == SAMPLER_KEY_PROBABILITY)
        .and_then(|kv| match kv.value {
            Value::F64(p) => Some(p),
            _ => None,
        });
    if p.is_some() {
        PROBABILITY.with(|c| c.set(p));
    }
}

/// Forgets this thread's last probability: before each root.
pub(crate) fn reset_probability() {
    PROBABILITY.with(|c| c.set(None));
}

/// The probability of this thread's last kept root, 1 when it carried none.
pub(crate) fn take_probability() -> f64 {
    PROBABILITY.with(Cell::take).unwrap_or(1.0)
}

/// The routes and their draw.
#[derive(Debug)]
pub(crate) struct Routes {
    values: Vec<Value>,
    /// The cumulative probability of routes `0..=i`.
    cdf: Vec<f64>,
}

impl Routes {
    /// `keys` routes, route `i` drawn with probability `(i+1)^-skew / H(keys, skew)`.
    pub(crate) fn new(keys: u32, skew: f64) -> Self {
        let weights: Vec<f64> = (1..=keys).map(|i| f64::from(i).powf(-skew)).collect();
        let total: f64 = weights.iter().sum();
        let mut sum = 0.0;
        let cdf = weights
            .iter()
            .map(|w| {
                sum += w / total;
                sum
            })
            .collect();
        Self {
            values: (0..keys).map(|i| Value::from(name(i as usize))).collect(),
            cdf,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// A route drawn with `state`, a thread's xorshift64* state (never 0).
    pub(crate) fn draw(&self, state: &mut u64) -> usize {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        let x = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c <= u).min(self.len() - 1)
    }

    /// The attribute of route `i`.
    pub(crate) fn attribute(&self, i: usize) -> KeyValue {
        KeyValue::new(ROUTE_KEY, self.values[i].clone())
    }
}

/// Route `i`'s name.
fn name(i: usize) -> String {
    format!("/route/{i}")
}

/// One route's totals.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub(crate) struct KeyTotals {
    pub(crate) offered: u64,
    pub(crate) kept: u64,
    pub(crate) adjusted: f64,
}

/// What one generating thread counted per route.
#[derive(Debug, Default)]
pub(crate) struct RouteCounts {
    /// `(offered, kept)` per route, per window not yet reported.
    per_window: BTreeMap<u64, Vec<(u64, u64)>>,
    totals: Vec<KeyTotals>,
}

impl RouteCounts {
    fn window(&mut self, window: u64, routes: usize) -> &mut Vec<(u64, u64)> {
        self.per_window
            .entry(window)
            .or_insert_with(|| vec![(0, 0); routes])
    }

    /// Counts an offer of `route` in window `offered_in`, kept in `kept_in` with `p`.
    pub(crate) fn count(
        &mut self,
        routes: usize,
        route: usize,
        offered_in: u64,
        kept: Option<(u64, f64)>,
    ) {
        if self.totals.len() < routes {
            self.totals.resize(routes, KeyTotals::default());
        }
        self.window(offered_in, routes)[route].0 += 1;
        self.totals[route].offered += 1;
        if let Some((window, p)) = kept {
            self.window(window, routes)[route].1 += 1;
            let total = &mut self.totals[route];
            total.kept += 1;
            total.adjusted += 1.0 / p;
        }
    }
}

/// The reporter's side: the starved pairs so far, and the window before's offers.
#[derive(Debug)]
pub(crate) struct KeyReport {
    routes: usize,
    before: Option<(u64, Vec<u64>)>,
    pub(crate) starved: u64,
    /// Filled by [`finish`](Self::finish) once the threads are done.
    pub(crate) per_key: BTreeMap<String, KeyTotals>,
}

impl KeyReport {
    pub(crate) fn new(routes: usize) -> Self {
        Self {
            routes,
            before: None,
            starved: 0,
            per_key: BTreeMap::new(),
        }
    }

    /// Takes every thread's counts of window `k` (and of any before it), and counts its
    /// starved routes if it is `whole`.
    pub(crate) fn take_window(&mut self, k: u64, whole: bool, slots: &[WorkerSlot]) {
        let mut now = vec![(0u64, 0u64); self.routes];
        for slot in slots {
            let mut counts = lock(&slot.routes);
            let later = counts.per_window.split_off(&(k + 1));
            let taken = std::mem::replace(&mut counts.per_window, later);
            if let Some(counted) = taken.get(&k) {
                for (sum, n) in now.iter_mut().zip(counted) {
                    sum.0 += n.0;
                    sum.1 += n.1;
                }
            }
        }
        if let (true, Some((before, offered_before))) = (whole, &self.before) {
            if *before + 1 == k {
                self.starved += now
                    .iter()
                    .zip(offered_before)
                    .filter(|(&(offered, kept), &before)| offered > 0 && before > 0 && kept == 0)
                    .count() as u64;
            }
        }
        self.before = Some((k, now.iter().map(|&(offered, _)| offered).collect()));
    }

    /// Sums the routes' totals over every thread, by name, once they are done.
    pub(crate) fn finish(&mut self, slots: &[WorkerSlot]) {
        let mut per = vec![KeyTotals::default(); self.routes];
        for slot in slots {
            for (sum, t) in per.iter_mut().zip(&lock(&slot.routes).totals) {
                sum.offered += t.offered;
                sum.kept += t.kept;
                sum.adjusted += t.adjusted;
            }
        }
        self.per_key = per
            .into_iter()
            .enumerate()
            .map(|(i, t)| (name(i), t))
            .collect();
    }
}
