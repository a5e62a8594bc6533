//! `simulate --keys K --skew S`: each root gets an `http.route` drawn Zipf(S) from K
//! routes (`/route/0` the busiest), offered span by span at its own time (evenly
//! spaced) to the file's sampler and, beside it, to a plain cap of the deciding limit
//! (the same limit and algorithm, no fair shares), both on one `ManualClock`. Printed
//! per route: offered, kept, the adjusted count (the sum of `1/p` over kept roots, `p`
//! their `sampler.key_probability`, 1 where none) and what the plain cap keeps; and for
//! both, the starved pairs (a whole window and a route offered in it and in the window
//! before that kept nothing in it). The draws come from a seeded generator: the same
//! every run. The work is two calls per span, checked against the budget first.

use std::process::ExitCode;

use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::attributes::SAMPLER_KEY_PROBABILITY;
use otel_rate_sampler::{ManualClock, RateLimitingSampler, RuleBasedSampler, SamplingConfig};

use super::args::SimulateArgs;
use super::decider::Decider;
use super::declarative::Ids;
use super::plan::over_budget;
use super::report;
use super::spans::{Span, KEEP_ID};
use crate::failure::Failure;

/// The attribute the routes are written in, as the demo's `--keys` writes them.
const ROUTE: &str = "http.route";

/// One route's counts, for one sampler.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    kept: u64,
    adjusted: f64,
    /// Kept in the current window, and whether it was offered in it and the one before.
    kept_now: u64,
    offered_now: bool,
    offered_before: bool,
    starved: u64,
}

impl Counts {
    /// A window ends: a route offered in it and in the one before that kept nothing
    /// is a starved pair (only whole windows are counted: `whole`).
    fn roll(&mut self, whole: bool) {
        if whole && self.offered_now && self.offered_before && self.kept_now == 0 {
            self.starved += 1;
        }
        self.offered_before = self.offered_now;
        (self.offered_now, self.kept_now) = (false, 0);
    }

    fn offer(&mut self, kept: Option<f64>) {
        self.offered_now = true;
        if let Some(p) = kept {
            self.kept += 1;
            self.kept_now += 1;
            self.adjusted += 1.0 / p;
        }
    }
}

/// Runs `simulate` with `--keys`: span by span on `config`'s sampler for the service
/// and on a plain cap of the limit `decider` names (none when no limit decides).
pub(super) fn run(
    a: &SimulateArgs,
    config: &SamplingConfig,
    decider: &Decider,
    keys: u32,
) -> Result<ExitCode, Failure> {
    let skew = a.skew.unwrap_or(0.0);
    let spans = (a.rate * a.duration.as_secs_f64()).floor();
    // Two sampler calls per span: the file's sampler and the plain cap.
    over_budget(a.duration, 2 * spans as u128)?;
    let spans = spans as u64;
    let clock = ManualClock::new();
    let sampler = RuleBasedSampler::with_clock(config, &a.service, clock.clone())?;
    let (plain, window) = match decider {
        Decider::Limit(_, limit, algorithm) => (
            Some(
                RateLimitingSampler::builder(*limit)
                    .algorithm(*algorithm)
                    .clock(clock.clone())
                    .build(),
            ),
            limit.window_nanos(),
        ),
        _ => (None, 1_000_000_000),
    };
    let routes: Vec<Value> = (0..keys).map(|i| format!("/route/{i}").into()).collect();
    let zipf = Zipf::new(keys, skew);
    let mut draws = Ids(0x5eed);
    let mut span = Span::of(a);
    span.attributes.retain(|kv| kv.key.as_str() != ROUTE);
    span.attributes.push(KeyValue::new(ROUTE, ""));
    let route_at = span.attributes.len() - 1;
    let mut offered = vec![0u64; keys as usize];
    let mut fair = vec![Counts::default(); keys as usize];
    let mut capped = vec![Counts::default(); keys as usize];
    let mut current = 0;
    for i in 0..spans {
        let at = (i as f64 * 1e9 / a.rate) as u64;
        if at / window != current {
            // Whole windows only: the first starts at 0, the last may be cut short.
            for c in fair.iter_mut().chain(capped.iter_mut()) {
                c.roll(true);
            }
            current = at / window;
        }
        clock.set(at);
        // 53 uniform bits, in [0, 1).
        let k = zipf.draw((draws.next_u64() >> 11) as f64 / (1u64 << 53) as f64);
        span.attributes[route_at].value = routes[k].clone();
        offered[k] += 1;
        fair[k].offer(kept(&sampler, &span));
        if let Some(plain) = &plain {
            capped[k].offer(kept(plain, &span));
        }
    }
    report::offered(a, "");
    println!(
        "routes: {keys} values of {ROUTE} (/route/0 the busiest), drawn Zipf({skew}) by a seeded generator; {spans} spans offered one by one at their own time"
    );
    match &plain {
        Some(_) => println!("beside: a plain cap of the deciding limit (the same limit and algorithm, no fair shares)"),
        None => println!("beside: nothing (no limit decides these spans)"),
    }
    println!(
        "{:>12} {:>12} {:>10} {:>14} {:>16}",
        "route", "offered", "kept", "adjusted", "kept plain cap"
    );
    for (k, route) in routes.iter().enumerate() {
        println!(
            "{:>12} {:>12} {:>10} {:>14.1} {:>16}",
            route.as_str(),
            offered[k],
            fair[k].kept,
            fair[k].adjusted,
            plain
                .as_ref()
                .map_or("-".into(), |_| capped[k].kept.to_string())
        );
    }
    let sum = |c: &[Counts], f: fn(&Counts) -> f64| c.iter().map(f).sum::<f64>();
    println!(
        "total: offered {}, kept {}, adjusted {:.1} ({:.3} of offered); plain cap kept {}",
        spans,
        sum(&fair, |c| c.kept as f64),
        sum(&fair, |c| c.adjusted),
        sum(&fair, |c| c.adjusted) / spans.max(1) as f64,
        plain
            .as_ref()
            .map_or("-".into(), |_| sum(&capped, |c| c.kept as f64).to_string())
    );
    println!(
        "starved (whole window, route) pairs: {}; plain cap: {}",
        sum(&fair, |c| c.starved as f64),
        plain
            .as_ref()
            .map_or("-".into(), |_| sum(&capped, |c| c.starved as f64)
                .to_string())
    );
    Ok(ExitCode::SUCCESS)
}

/// Whether `sampler` keeps `span` (a trace id every probability keeps), and the key
/// probability it records (1 where none).
fn kept(sampler: &impl ShouldSample, span: &Span) -> Option<f64> {
    let r = span.result(sampler, KEEP_ID);
    (r.decision == SamplingDecision::RecordAndSample).then(|| {
        r.attributes
            .iter()
            .find(|kv| kv.key.as_str() == SAMPLER_KEY_PROBABILITY)
            .and_then(|kv| match kv.value {
                Value::F64(p) => Some(p),
                _ => None,
            })
            .unwrap_or(1.0)
    })
}

/// Zipf(s) over `0..k` by its cumulative weights: key i has weight (i + 1)^-s.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(k: u32, s: f64) -> Self {
        let mut total = 0.0;
        let mut cumulative: Vec<f64> = (1..=k)
            .map(|i| {
                total += f64::from(i).powf(-s);
                total
            })
            .collect();
        cumulative.iter_mut().for_each(|c| *c /= total);
        Self(cumulative)
    }

    /// The key of a uniform draw `u` in `[0, 1)`.
    fn draw(&self, u: f64) -> usize {
        self.0.partition_point(|&c| c <= u).min(self.0.len() - 1)
    }
}
